//! Memory through the runtime: buffers allocated and freed in stream order, resets of a
//! device, trims, and host memory pinned through the lock table.

use super::*;

impl<B: Backend> Runtime<B> {
    /// Allocates `size` bytes of `kind` on `device`, usable at once by every stream (and by
    /// the host, for host kinds). Served from the cache when it can be, under the device's
    /// memory lock alone: allocations and frees keep working on a runtime that refuses work
    /// ([`Error::RuntimePoisoned`]), since the allocator orders reuse with its own events.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::HostPinned, 100)?;
    /// assert_eq!((buffer.size(), buffer.kind()), (100, MemoryKind::HostPinned));
    /// // More than the device has (the host backend's devices have 1 GiB).
    /// let too_big = rt.alloc(DeviceId(0), MemoryKind::Device, 2 << 30);
    /// assert!(matches!(too_big, Err(Error::OutOfMemory { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub fn alloc(&self, device: DeviceId, kind: MemoryKind, size: usize) -> Result<Buffer<'_, B>> {
        self.health.check(device)?;
        let mut memory = self.memory(device)?;
        // Read under the memory lock, which a reset holds while it starts a new epoch.
        let epoch = self.health.epoch(device);
        let allocated =
            memory.allocate(&self.backend, &self.streams, &AllocRequest::new(kind, size));
        drop(memory);
        let allocation = self.health.lift(device, allocated)?;
        Ok(Buffer::new(self, device, &allocation, size, epoch))
    }

    /// Allocates `size` bytes of `kind` on `device` in stream order after `after`: the buffer
    /// is usable by work that depends on the returned token. Uses the driver's stream-ordered
    /// call where the device has one, else waits for `after` and allocates synchronously.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let (buffer, ready) = rt.alloc_after(DeviceId(0), MemoryKind::Device, 256, &mut vec![])?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![ready])?;
    /// let mut out = [0u8; 256];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![filled])?;
    /// assert!(out.iter().all(|&byte| byte == 3));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn alloc_after(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
        after: &mut Vec<Token>,
    ) -> Result<(Buffer<'_, B>, Token)> {
        self.health.check(device)?;
        let mut memory = self.memory(device)?;
        let epoch = self.health.epoch(device);
        let mut state = self.state()?;
        let (token, stream, allocation) =
            state.submit(&self.backend, device, after, |backend, stream| {
                let request = AllocRequest::new(kind, size).on_stream(stream, &[]);
                memory.allocate(backend, &self.streams, &request)
            })?;
        // Neither lock may be held when a buffer exists: dropping one takes the memory lock.
        drop((state, memory));
        let mut buffer = Buffer::new(self, device, &allocation, size, epoch);
        // The memory exists in that stream's order: even unused, it is freed after that point.
        buffer.uses.get_mut().push(stream);
        Ok((buffer, token))
    }

    /// Frees `buffer` after the work behind `after` as well as every stream that used it: for
    /// memory used through raw addresses ([`Span::from_raw`]), which the buffer cannot see.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let d0 = DeviceId(0);
    /// let source = rt.alloc(d0, MemoryKind::Device, 64)?;
    /// let target = rt.alloc(d0, MemoryKind::Device, 64)?;
    /// rt.wait(rt.fill(d0, source.all(), 7, &mut vec![])?)?;
    /// // SAFETY: the memory stays valid until the copy has run: `free_after` orders the free so.
    /// let raw = unsafe { Span::from_raw(source.address(), 64) };
    /// let copied = rt.copy(d0, target.all(), raw, &mut vec![])?;
    /// rt.free_after(source, &copied)?; // the buffer cannot see the raw span's use
    /// let mut out = [0u8; 64];
    /// rt.download(d0, &mut out, target.all(), &mut vec![copied])?;
    /// assert_eq!(out, [7; 64]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn free_after(&self, buffer: Buffer<'_, B>, after: &Token) -> Result<()> {
        self.own_as(&buffer.all(), "buffer")?;
        let stream = self.state.lock().planner.stream_of(after)?;
        buffer.uses.note(stream);
        buffer.release()
    }

    /// Frees `buffer` now, reporting a failure (dropping it frees it too, silently). The memory
    /// goes back to the cache, reused only after every stream that used it is done with it.
    /// A buffer of another runtime is refused ([`Error::ForeignRuntime`]) and freed by its own
    /// runtime, as dropping it would.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let _filled = rt.fill(DeviceId(0), buffer.all(), 0, &mut vec![])?;
    /// rt.free(buffer)?; // safe while the fill may still run: reused only after it
    /// let other = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let foreign = other.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// assert!(matches!(rt.free(foreign), Err(Error::ForeignRuntime { what: "buffer", .. })));
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub fn free(&self, buffer: Buffer<'_, B>) -> Result<()> {
        self.own_as(&buffer.all(), "buffer")?;
        buffer.release()
    }

    /// Frees a buffer's block after the streams in `uses` (taken from the buffer, which is
    /// being dropped: no span of it is left).
    /// A block of an earlier epoch of its device (before a reset, which freed it) is done with.
    #[inline]
    pub(super) fn release_block(
        &self,
        device: DeviceId,
        (handle, address, size): (BlockHandle, usize, usize),
        uses: &[StreamId],
        epoch: u32,
    ) -> Result<()> {
        let mut memory = self.memory(device)?;
        if epoch != self.health.epoch(device) {
            return Ok(());
        }
        memory.free(&self.backend, &self.streams, handle, (address, size), uses)
    }

    /// Makes a lost device usable again ([`Runtime::device_lost`]) where the backend can
    /// (not CUDA, HIP or HSA: [`Backend::DEVICE_LOSS_ENDS_THE_PROCESS`], refused with
    /// [`Error::Unsupported`]; the host backend can): the backend resets it
    /// (CUDA: its primary context), and the runtime forgets everything of it. Its buffers from
    /// before are gone (using one is [`Error::StaleAfterReset`], dropping one does nothing), as
    /// are its kernels (ask for them again); its streams and events are made afresh when next
    /// needed, and peer access to and from it is turned on again. Other devices' cached blocks
    /// last used on it become usable by every stream. Refused while live tokens have work on
    /// the device ([`Error::LiveWorkOnDevice`]: wait for them, which reports the loss, or
    /// release them). Works on a device that is not lost as well.
    ///
    /// Not covered: streams of other programs adopted on the device (PyTorch's) die with the
    /// reset, and on CUDA host memory pinned through device 0's context may be unpinned by a
    /// reset of device 0 while the lock table still lists it.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("wild_read", |ctx, _| ctx.view::<u32>(16, 1).map(drop));
    /// let rt = Runtime::new(backend)?;
    /// let (d0, dims) = (DeviceId(0), LaunchDims::linear(1, 1));
    /// let before = rt.alloc(d0, MemoryKind::Device, 64)?;
    /// // SAFETY: the kernel touches no memory: the backend refuses its one access.
    /// let faulted = unsafe { rt.launch(d0, "wild_read", dims, &[], &mut vec![])? };
    /// assert!(rt.wait(faulted).is_err()); // the device is lost now
    /// assert!(matches!(rt.alloc(d0, MemoryKind::Device, 64), Err(Error::DeviceLost { .. })));
    /// rt.reset_device(d0)?;
    /// let after = rt.alloc(d0, MemoryKind::Device, 64)?; // usable again
    /// let stale = Error::StaleAfterReset { device: d0, what: "buffer" };
    /// assert_eq!(rt.fill(d0, before.all(), 0, &mut vec![]).err(), Some(stale));
    /// # drop(after);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn reset_device(&self, device: DeviceId) -> Result<()> {
        let info = self.device_info(device)?;
        if B::DEVICE_LOSS_ENDS_THE_PROCESS && self.health.cause(device).is_some() {
            return Err(Error::Unsupported {
                backend: self.backend.name(),
                what: "bringing a device back after a sticky error: the driver's state of the \
                       whole process is lost (CUDA: restart the process)",
            });
        }
        // The lock order: every device's memory, in order, then the state.
        let mut memories: Vec<MemoryGuard<'_, B>> =
            self.memory.iter().map(BackoffMutex::lock).collect();
        let mut state = self.state.lock();
        // A wait in progress counts as the live token it waits for: the reset would destroy
        // the stream or event it blocks on.
        let tokens = state.planner.live_tokens_on(device) + self.health.host_waits(device) as usize;
        if tokens > 0 {
            return Err(Error::LiveWorkOnDevice { device, tokens });
        }
        with_device(&*self.backend, device, || self.backend.reset_device(device))?;
        for (index, memory) in memories.iter_mut().enumerate() {
            if index == device.index() {
                let events = Arc::clone(&self.events);
                let fresh = DeviceMemory::new(device, info, self.config.allocator, events);
                memory.reset(device, fresh);
            } else {
                memory.forget_device(&self.backend, &self.streams, device);
            }
        }
        self.events.forget_device(device);
        state.forget_device(device);
        self.health.restore(device);
        drop((state, memories));
        let restored = self.peers.restore(&*self.backend, device);
        // The pieces other devices mapped for it before the reset are granted to it again.
        let granted = self
            .memory
            .iter()
            .enumerate()
            .try_for_each(|(index, memory)| {
                let owner = DeviceId(index as u32);
                if owner == device {
                    return Ok(());
                }
                memory
                    .lock()
                    .grant_mapped_again(&*self.backend, owner, device)
            });
        restored.and(granted)
    }

    /// Gives cached memory of every device back to the driver (retrying frees the driver
    /// failed before); returns the bytes released.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// drop(rt.alloc(DeviceId(0), MemoryKind::Device, 1 << 20)?); // back to the cache
    /// assert_eq!(rt.backend().stats().allocations, 1); // still held from the driver
    /// assert!(rt.trim()? >= 1 << 20);
    /// assert_eq!(rt.backend().stats().allocations, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn trim(&self) -> Result<usize> {
        self.memory.iter().try_fold(0, |total, device| {
            let trimmed = device.lock().trim(&self.backend, &self.streams)?;
            Ok(total + trimmed)
        })
    }

    /// Records every device-memory allocation, free and use on another stream from now on
    /// into `out`, in the allocation trace format that `gpu-alloc-replay` replays
    /// (docs/alloc-trace-format.md; streams by their runtime numbers). Allocations live before
    /// the call are left out, with their frees. Returns the recording: [`AllocTrace::finish`]
    /// flushes it and reports a failed write (a write error stops the recording, never a
    /// call); dropping the runtime flushes it too. A call while recording starts a new one.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use std::sync::{Arc, Mutex};
    ///
    /// #[derive(Clone, Default)]
    /// struct Shared(Arc<Mutex<Vec<u8>>>);
    /// impl std::io::Write for Shared {
    ///     fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
    ///         self.0.lock().unwrap().write(bytes)
    ///     }
    ///     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
    /// }
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let text = Shared::default();
    /// let trace = rt.record_allocations(Box::new(text.clone())).unwrap();
    /// drop(rt.alloc(DeviceId(0), MemoryKind::Device, 4096)?);
    /// trace.finish().unwrap();
    /// let text = String::from_utf8(text.0.lock().unwrap().clone()).unwrap();
    /// assert_eq!(text, "# gpu-alloc-trace 1\nalloc 1 0 - 4096\nfree 1 -\n");
    /// # Ok::<(), Error>(())
    /// ```
    pub fn record_allocations(
        &self,
        out: Box<dyn std::io::Write + Send>,
    ) -> std::io::Result<Arc<AllocTrace>> {
        let shared = AllocTrace::new(out)?;
        for (index, device) in self.memory.iter().enumerate() {
            device.lock().trace = Some(DeviceTrace::new(
                Arc::clone(&shared),
                DeviceId(index as u32),
            ));
        }
        Ok(shared)
    }

    /// Pins the caller's `memory` for DMA by every device (counted in the lock table: a range
    /// inside one already pinned costs no driver call). Unpinned when the returned guard drops,
    /// after the transfers that used it have finished. The guard owns its lock
    /// ([`LockOwner::Guard`]): [`Runtime::unlock_range`] never releases it.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 16)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 0xab, &mut vec![])?;
    /// let mut host = vec![0u8; 16];
    /// let mut locked = rt.lock_host(&mut host)?; // pinned while `locked` lives
    /// let copied = rt.copy(DeviceId(0), locked.span(0, 16)?, buffer.all(), &mut vec![filled])?;
    /// assert_eq!(locked.memory()?, &[0xab; 16]); // waits for the copy first
    /// rt.wait(copied)?;
    /// drop(locked); // unpinned
    /// assert_eq!((host[0], rt.stats().locks.entries), (0xab, 0));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn lock_host<'m>(&self, memory: &'m mut [u8]) -> Result<LockedHost<'_, 'm, B>> {
        // SAFETY: the memory is borrowed mutably for as long as the guard lives.
        unsafe { self.lock_host_raw(memory.as_mut_ptr(), memory.len()) }
    }

    /// Pins host memory `[ptr, ptr + len)` that the caller manages (a C program's, say) as
    /// [`Runtime::lock_host`] does, without borrowing it: the guard's spans order transfers and
    /// its drop waits for them before unpinning. Ranges inside a pinned one nest (counted).
    /// The guard owns its lock, as [`Runtime::lock_host`]'s does.
    ///
    /// # Safety
    /// The memory stays valid until the guard is dropped; the host neither writes it while a
    /// transfer from it may run nor touches it while a transfer into it may run (both end once
    /// [`LockedHost::memory`] or the unpin has waited for them), an [`Runtime::upload`] from
    /// it included; and while the slice
    /// [`LockedHost::memory`] returns is borrowed, nothing else accesses those bytes (another
    /// guard of an overlapping range included).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let mut host = vec![0u8; 64]; // as a C caller would hand it over: a pointer and a length
    /// // SAFETY: `host` outlives the guard and is touched only through it while the guard lives.
    /// let mut locked = unsafe { rt.lock_host_raw(host.as_mut_ptr(), host.len())? };
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let uploaded = rt.upload(DeviceId(0), buffer.all(), &[5; 64], &mut vec![])?;
    /// let copied = rt.copy(DeviceId(0), locked.span(0, 64)?, buffer.all(), &mut vec![uploaded])?;
    /// rt.wait(copied)?;
    /// assert_eq!(locked.memory()?, &[5; 64]);
    /// locked.unlock()?;
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn lock_host_raw<'m>(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<LockedHost<'_, 'm, B>> {
        self.pins.lock_as(ptr as usize, len, LockOwner::Guard)?;
        Ok(LockedHost {
            runtime: self,
            address: ptr,
            len,
            memory: core::marker::PhantomData,
            uses: UseList::new(),
        })
    }

    pub(super) fn unlock_host(&self, locked: &LockedHost<'_, '_, B>) -> Result<()> {
        let uses = locked.uses.take();
        let waited = self.synchronize_streams(&uses);
        // The guard is gone after this call: an unpin the driver refuses (which changes
        // nothing) is tried once more, or the memory would stay pinned after its owner frees it.
        // The guard's lock is still there: raw unlocks cannot release it.
        let ptr = locked.address as usize;
        let unlock = || self.pins.unlock_as(ptr, LockOwner::Guard);
        let unlocked = unlock().or_else(|_| unlock());
        waited.and(unlocked.map(drop))
    }

    /// Blocks until every stream in `streams` has finished the work enqueued on it, outside
    /// the state's lock (as [`Runtime::wait`] does), so other threads plan and submit meanwhile.
    pub(super) fn synchronize_streams(&self, streams: &[StreamId]) -> Result<()> {
        let (waits, _holds) = {
            let state = self.state.lock();
            let waits = streams
                .iter()
                .map(|&stream| state.stream_wait(stream))
                .collect::<Result<Vec<_>>>()?;
            let holds: Vec<_> = waits
                .iter()
                .filter_map(HostWait::device)
                .filter_map(|device| self.health.hold_host_wait(device))
                .collect();
            (waits, holds)
        };
        waits
            .into_iter()
            .try_for_each(|wait| wait.block(&self.backend, &self.health))
    }

    /// Pins host range `[ptr, ptr + len)` through the lock table without borrowing it: the
    /// raw form of [`Runtime::lock_host`] for memory the caller manages (keep it alive, and
    /// transfer from it only through [`Runtime::upload`], until [`Runtime::unlock_range`]).
    /// Takes a raw lock ([`LockOwner::Raw`]); the result counts the entry's locks by owner.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let host = vec![0u8; 4096];
    /// let (ptr, len) = (host.as_ptr() as usize, host.len());
    /// let first = rt.lock_range(ptr, len)?;
    /// let nested = rt.lock_range(ptr + 100, 10)?; // inside: counted, no driver call
    /// assert_eq!((first.locks.raw, nested.locks.raw, nested.entry), (1, 2, first.entry));
    /// rt.unlock_range(ptr)?;
    /// rt.unlock_range(ptr)?;
    /// assert_eq!(rt.pinned_address(ptr, len, DeviceId(0))?, None);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn lock_range(&self, ptr: usize, len: usize) -> Result<Locked> {
        self.pins.lock(ptr, len)
    }

    /// Releases one raw lock (taken by [`Runtime::lock_range`]) on the entry containing `ptr`.
    /// An entry that only guards hold ([`LockedHost`]) is [`Error::PinOwned`] and stays as it
    /// was: a raw unlock never removes the pin a live guard relies on.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let mut host = vec![0u8; 4096];
    /// let ptr = host.as_mut_ptr() as usize;
    /// rt.lock_range(ptr, 4096)?;
    /// assert_eq!(rt.unlock_range(ptr)?.remaining.total(), 0); // unpinned
    /// let guard = rt.lock_host(&mut host)?;
    /// // A raw unlock never removes the pin a guard relies on.
    /// assert!(matches!(rt.unlock_range(ptr), Err(Error::PinOwned { .. })));
    /// drop(guard);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn unlock_range(&self, ptr: usize) -> Result<Unlocked> {
        self.pins.unlock(ptr)
    }

    /// The address `device` uses for host range `[ptr, ptr + len)` if every byte is pinned.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let host = vec![0u8; 4096];
    /// let ptr = host.as_ptr() as usize;
    /// assert_eq!(rt.pinned_address(ptr, 4096, DeviceId(1))?, None); // pageable
    /// rt.lock_range(ptr, 4096)?;
    /// // The host backend's devices use the host address itself.
    /// assert_eq!(rt.pinned_address(ptr + 8, 8, DeviceId(1))?, Some(ptr + 8));
    /// assert_eq!(rt.pinned_address(ptr, 8192, DeviceId(1))?, None); // not every byte
    /// rt.unlock_range(ptr)?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn pinned_address(
        &self,
        ptr: usize,
        len: usize,
        device: DeviceId,
    ) -> Result<Option<usize>> {
        self.pins.lookup(ptr, len, device)
    }
}
