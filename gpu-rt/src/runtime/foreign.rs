//! Memory in the order of other programs' streams (a framework such as PyTorch hands its own
//! streams to a pluggable allocator): adopted streams, allocation and free by address.

use super::Runtime;
use super::memory::DeviceMemory;
use gpu_core::allocator::{AllocRequest, MemoryKind};
use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::id::{DeviceId, StreamId};

impl<B: Backend> Runtime<B> {
    /// Allocates `size` bytes of `kind` on `device` for work that another program (a
    /// framework such as PyTorch) enqueues on its own stream `stream` after this call, and
    /// returns the address; free it with [`Runtime::free_on_foreign_stream`].
    ///
    /// `stream` is the driver's raw handle (CUDA: a `CUstream`, `0` for the legacy default
    /// stream; host backend: [`crate::host::HostStream::raw`]). The first use of a handle on a
    /// device adopts it ([`Backend::adopt_stream`]): it gets a lane of its own in the
    /// allocator, which the runtime never destroys. A block freed on a stream is reused on the
    /// same stream at once; on another stream only once an event recorded on the first has
    /// completed, or after making the new stream wait on it (never a device synchronisation).
    /// A miss climbs the allocator's out-of-memory ladder before [`Error::OutOfMemory`].
    /// Safe to call from any thread; takes only `device`'s memory lock on a hit.
    ///
    /// # Safety
    /// `stream` must be a live stream of `device` (or a default-stream handle of the driver)
    /// that stays alive until the runtime shuts down, as [`Backend::adopt_stream`] requires.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::with_device;
    /// use std::sync::Arc;
    ///
    /// let (backend, d0) = (Arc::new(HostBackend::new(HostConfig::with_devices(1))), DeviceId(0));
    /// let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default())?;
    /// // The framework's own stream, created behind the runtime's back.
    /// let stream = with_device(&*backend, d0, || backend.stream_create(d0))?;
    /// let (raw, kind) = (stream.raw(), MemoryKind::Device);
    /// // SAFETY (all three calls): `raw` is a live stream of device 0 that outlives the runtime.
    /// let address = unsafe { rt.alloc_on_foreign_stream(d0, kind, 4096, raw)? };
    /// unsafe { rt.free_on_foreign_stream(d0, address, 4096, raw)? };
    /// // Freed on the stream that used it: reused on that stream at once.
    /// let again = unsafe { rt.alloc_on_foreign_stream(d0, kind, 4096, raw)? };
    /// assert_eq!(again, address);
    /// rt.shutdown()?; // gives the block back; the stream stays the framework's
    /// with_device(&*backend, d0, || backend.stream_destroy(stream))?;
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub unsafe fn alloc_on_foreign_stream(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
        stream: usize,
    ) -> Result<usize> {
        let mut memory = self.memory(device)?;
        // SAFETY: the caller's promise, passed on.
        let stream = unsafe { self.adopted(&mut memory, device, stream) }?;
        memory.allocate_by_address(
            &self.backend,
            &self.streams,
            &AllocRequest::new(kind, size).on_stream(stream, &[]),
        )
    }

    /// Frees the allocation at `address` on `device` (made by
    /// [`Runtime::alloc_on_foreign_stream`] with `size` bytes) in the order of the raw stream
    /// `stream`: all work that uses the memory was enqueued on that stream before this call.
    /// An address that is no live allocation of `device` is [`Error::UnknownAddress`] (a
    /// double free too), another size [`Error::FreeSizeMismatch`]; both change nothing.
    ///
    /// # Safety
    /// As for [`Runtime::alloc_on_foreign_stream`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::with_device;
    /// use std::sync::Arc;
    ///
    /// let (backend, d0) = (Arc::new(HostBackend::new(HostConfig::with_devices(1))), DeviceId(0));
    /// let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default())?;
    /// let stream = with_device(&*backend, d0, || backend.stream_create(d0))?;
    /// let raw = stream.raw();
    /// // SAFETY (all four calls): `raw` is a live stream of device 0, destroyed after the runtime.
    /// let address = unsafe { rt.alloc_on_foreign_stream(d0, MemoryKind::Device, 256, raw)? };
    /// let wrong_size = unsafe { rt.free_on_foreign_stream(d0, address, 512, raw) };
    /// assert!(matches!(wrong_size, Err(Error::FreeSizeMismatch { .. }))); // changes nothing
    /// unsafe { rt.free_on_foreign_stream(d0, address, 256, raw)? };
    /// let twice = unsafe { rt.free_on_foreign_stream(d0, address, 256, raw) };
    /// assert!(matches!(twice, Err(Error::UnknownAddress { .. })));
    /// rt.shutdown()?;
    /// with_device(&*backend, d0, || backend.stream_destroy(stream))?;
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub unsafe fn free_on_foreign_stream(
        &self,
        device: DeviceId,
        address: usize,
        size: usize,
        stream: usize,
    ) -> Result<()> {
        let mut memory = self.memory(device)?;
        if memory.adopted_stream(stream).is_none() {
            // A free refused for its address adopts no stream either: it changes nothing.
            memory.live_by_address(device, (address, size))?;
        }
        // SAFETY: the caller's promise, passed on.
        let stream = unsafe { self.adopted(&mut memory, device, stream) }?;
        memory.free_by_address(
            &self.backend,
            &self.streams,
            device,
            (address, size),
            stream,
        )
    }

    /// Records that the allocation at `address` on `device` (from
    /// [`Runtime::alloc_on_foreign_stream`]) is also used by work enqueued on the raw stream
    /// `stream` (PyTorch's `record_stream`): when it is freed, the block is reused only after
    /// that work too (an event recorded on `stream` at the free). An address that is no live
    /// allocation of `device` is [`Error::UnknownAddress`] and changes nothing.
    ///
    /// # Safety
    /// As for [`Runtime::alloc_on_foreign_stream`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::with_device;
    /// use std::sync::Arc;
    ///
    /// let (backend, d0) = (Arc::new(HostBackend::new(HostConfig::with_devices(1))), DeviceId(0));
    /// let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default())?;
    /// let [a, b] = [0; 2].map(|_| with_device(&*backend, d0, || backend.stream_create(d0)));
    /// let (a, b) = (a?, b?);
    /// // SAFETY (all four calls): `a` and `b` are live streams of device 0 outliving the runtime.
    /// let address = unsafe { rt.alloc_on_foreign_stream(d0, MemoryKind::Device, 256, a.raw())? };
    /// unsafe { rt.mark_used_on_foreign_stream(d0, address, b.raw())? }; // `b`'s work reads it too
    /// unsafe { rt.free_on_foreign_stream(d0, address, 256, a.raw())? }; // reused after both
    /// let bogus = unsafe { rt.mark_used_on_foreign_stream(d0, 0x1000, b.raw()) };
    /// assert!(matches!(bogus, Err(Error::UnknownAddress { .. })));
    /// rt.shutdown()?;
    /// for stream in [a, b] {
    ///     with_device(&*backend, d0, || backend.stream_destroy(stream))?;
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn mark_used_on_foreign_stream(
        &self,
        device: DeviceId,
        address: usize,
        stream: usize,
    ) -> Result<()> {
        let mut memory = self.memory(device)?;
        if !memory.holds_address(address) {
            // Refused before adopting anything: the call changes nothing.
            return Err(Error::UnknownAddress { device, address });
        }
        // SAFETY: the caller's promise, passed on.
        let stream = unsafe { self.adopted(&mut memory, device, stream) }?;
        memory.mark_used_by_address(device, address, stream)
    }

    /// The id of raw stream `raw` of `device`, adopting it at its first use. Adopting locks
    /// the state after the memory (the one lock order) and works on a poisoned runtime too,
    /// as allocation does.
    ///
    /// # Safety
    /// As for [`Runtime::alloc_on_foreign_stream`].
    #[inline]
    unsafe fn adopted(
        &self,
        memory: &mut DeviceMemory<B>,
        device: DeviceId,
        raw: usize,
    ) -> Result<StreamId> {
        if let Some(stream) = memory.adopted_stream(raw) {
            return Ok(stream);
        }
        // SAFETY: the caller's promise, passed on.
        let handle = unsafe { self.backend.adopt_stream(device, raw) }?;
        let stream = self.state.lock().adopt_stream(device, handle)?;
        memory.note_adopted(raw, stream);
        Ok(stream)
    }
}
