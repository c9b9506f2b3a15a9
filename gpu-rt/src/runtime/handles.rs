//! What the runtime hands out and takes back: spans of memory ([`Span`]), buffers
//! ([`Buffer`]) and pinned host memory ([`LockedHost`]), each tied to its runtime (and a buffer
//! to its device's epoch).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::Runtime;
use gpu_core::allocator::{Allocation, BlockHandle, MemoryKind};
use gpu_core::backend::{Backend, check_same_device};
use gpu_core::error::{Error, Result};
use gpu_core::id::{DeviceId, StreamId};

/// The streams that used a buffer or locked range. A spin lock: it is only ever taken for a
/// few instructions (noting a stream, or taking the list at a free), never across a call, and
/// unlike `std::sync::Mutex` it costs no poison bookkeeping on the allocation hot path. The
/// stream noted last is also kept beside it, read without the lock: an operation on that
/// stream again (each one of a chain on a buffer) finds it noted with one plain load.
pub(super) struct UseList {
    streams: spin::Mutex<Vec<StreamId>>,
    /// The stream noted last, plus one (0: none); always one of `streams`.
    last: AtomicU32,
}

impl UseList {
    pub(super) fn new() -> Self {
        Self {
            streams: spin::Mutex::new(Vec::new()),
            last: AtomicU32::new(0),
        }
    }

    /// Notes that `stream` used the memory.
    #[inline]
    pub(super) fn note(&self, stream: StreamId) {
        let mark = stream.0.wrapping_add(1);
        // Acquire: the push that made `stream` the last one happened before this returns.
        if self.last.load(Ordering::Acquire) == mark {
            return;
        }
        let mut streams = self.streams.lock();
        if !streams.contains(&stream) {
            streams.push(stream);
        }
        self.last.store(mark, Ordering::Release);
    }

    /// The list, to read or change with the memory held exclusively (the hint is dropped, as
    /// the caller may clear the list).
    pub(super) fn get_mut(&mut self) -> &mut Vec<StreamId> {
        *self.last.get_mut() = 0;
        self.streams.get_mut()
    }

    /// Takes the list out, leaving it empty.
    pub(super) fn take(&self) -> Vec<StreamId> {
        let mut streams = self.streams.lock();
        self.last.store(0, Ordering::Relaxed);
        core::mem::take(&mut *streams)
    }
}

/// A byte range of memory an operation uses: part of a [`Buffer`], of [`LockedHost`] memory,
/// or (for the runtime's own staging) a raw address.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// let (head, tail) = (buffer.span(0, 32)?, buffer.span(32, 32)?);
/// assert_eq!(tail.address(), head.address() + 32);
/// let filled = rt.fill(DeviceId(0), tail, 4, &mut vec![])?; // the buffer notes the fill's stream
/// let mut out = [0u8; 64];
/// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![filled])?;
/// assert_eq!((out[31], out[32]), (0, 4));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Span<'a> {
    pub(super) address: usize,
    pub(super) len: usize,
    /// The device whose memory this is (device memory only): operations elsewhere refuse it.
    pub(super) device: Option<DeviceId>,
    /// The runtime whose buffer or pinned memory this is (none for a raw span): other
    /// runtimes refuse it.
    pub(super) runtime: Option<u32>,
    /// For a buffer: the device that allocated it and that device's epoch then (a reset since
    /// freed it).
    pub(super) epoch: Option<(DeviceId, u32)>,
    pub(super) uses: Option<&'a UseList>,
}

impl<'a> Span<'a> {
    pub(super) fn raw(address: usize, len: usize) -> Self {
        Self {
            address,
            len,
            device: None,
            runtime: None,
            epoch: None,
            uses: None,
        }
    }

    /// A span of memory the runtime neither owns nor borrows (a program's own pointers, as an
    /// FFI layer receives them): nothing orders its release after the work that uses it, so
    /// the caller does.
    ///
    /// # Safety
    /// `[address, address + len)` stays valid, as memory the devices that use it can reach,
    /// until every operation given this span has completed, and the host does not race with
    /// those operations.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 32)?;
    /// let data = vec![9u8; 32]; // memory the runtime neither owns nor borrows
    /// // SAFETY: `data` stays valid, and unwritten, until the copy has completed (waited below).
    /// let raw = unsafe { Span::from_raw(data.as_ptr() as usize, data.len()) };
    /// rt.wait(rt.copy(DeviceId(0), buffer.all(), raw, &mut vec![])?)?;
    /// let mut out = [0u8; 32];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![])?;
    /// assert_eq!(out, [9; 32]);
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn from_raw(address: usize, len: usize) -> Span<'static> {
        Span::raw(address, len)
    }

    /// The address of the span's first byte.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// assert_eq!(buffer.all().address(), buffer.address());
    /// assert_eq!(buffer.span(16, 8)?.address(), buffer.address() + 16);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn address(&self) -> usize {
        self.address
    }

    /// The span's length in bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// assert_eq!((buffer.all().len(), buffer.span(16, 8)?.len()), (64, 8));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the span is empty.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// assert!(!buffer.all().is_empty());
    /// // Spans are never empty: a zero length is refused where it is asked for.
    /// assert!(matches!(buffer.span(0, 0), Err(Error::ZeroSize { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The part `[offset, offset + len)` of this span.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let half = buffer.span(32, 32)?;
    /// let quarter = half.sub(16, 16)?; // bytes 48..64 of the buffer
    /// assert_eq!(quarter.address(), buffer.address() + 48);
    /// let past_end = Error::OutOfBounds { offset: 16, len: 32, size: 32 };
    /// assert_eq!(half.sub(16, 32).err(), Some(past_end));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn sub(&self, offset: usize, len: usize) -> Result<Span<'a>> {
        check_bounds(offset, len, self.len)?;
        Ok(Span {
            address: self.address + offset,
            len,
            ..*self
        })
    }

    pub(super) fn check_device(&self, device: DeviceId) -> Result<()> {
        self.device
            .map_or(Ok(()), |found| check_same_device(device, found))
    }

    pub(super) fn note_use(&self, stream: StreamId) {
        if let Some(uses) = self.uses {
            uses.note(stream);
        }
    }
}

/// Copies `len` bytes between host memory regions, with up to four threads for large copies:
/// one core's memcpy runs well below the DMA rate of a GPU link, so staged transfers from and
/// to pageable memory would otherwise be bound by the host copy.
///
/// # Safety
/// `src` and `dst` are valid for `len` bytes, do not overlap, and nothing else writes them
/// (or, for `dst`, reads them) during the call.
unsafe fn host_copy(dst: *mut u8, src: *const u8, len: usize) {
    const PART: usize = 2 << 20;
    static THREADS: OnceLock<usize> = OnceLock::new();
    let available =
        *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)));
    let threads = available.min(len / PART).max(1);
    let part = len.div_ceil(threads);
    // Raw pointers are not `Send`; the parts are disjoint, so each thread owns its own.
    let (dst, src) = (dst as usize, src as usize);
    let copy_part = move |index: usize| {
        let (offset, bytes) = (index * part, part.min(len - index * part));
        // SAFETY: part `index` of the two regions the caller vouched for; parts are disjoint.
        unsafe {
            core::ptr::copy_nonoverlapping(
                (src + offset) as *const u8,
                (dst + offset) as *mut u8,
                bytes,
            )
        }
    };
    if threads == 1 {
        return copy_part(0);
    }
    std::thread::scope(|scope| {
        for index in 1..threads {
            // A thread the system refuses costs only speed: that part is copied here.
            if std::thread::Builder::new()
                .spawn_scoped(scope, move || copy_part(index))
                .is_err()
            {
                copy_part(index);
            }
        }
        copy_part(0);
    });
}

fn check_bounds(offset: usize, len: usize, size: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size && len > 0 => Ok(()),
        _ if len == 0 => Err(Error::ZeroSize {
            what: "span length",
        }),
        _ => Err(Error::OutOfBounds { offset, len, size }),
    }
}

/// Memory from the runtime's allocator. Freed when dropped (or by [`Runtime::free`]), after
/// every stream that used it is done with it.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 1 << 20)?;
/// let _filled = rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?;
/// drop(buffer); // safe while the fill may still run: the memory is reused only after it
/// let again = rt.alloc(DeviceId(0), MemoryKind::Device, 1 << 20)?;
/// assert_eq!(again.size(), 1 << 20);
/// # Ok::<(), Error>(())
/// ```
pub struct Buffer<'rt, B: Backend> {
    pub(super) runtime: &'rt Runtime<B>,
    pub(super) device: DeviceId,
    pub(super) handle: BlockHandle,
    pub(super) address: usize,
    pub(super) size: usize,
    pub(super) uses: UseList,
    /// The device's epoch when it was allocated: a reset frees the buffer.
    pub(super) epoch: u32,
}

impl<'rt, B: Backend> Buffer<'rt, B> {
    pub(super) fn new(
        runtime: &'rt Runtime<B>,
        device: DeviceId,
        allocation: &Allocation,
        size: usize,
        epoch: u32,
    ) -> Self {
        Self {
            runtime,
            device,
            handle: allocation.handle,
            address: allocation.address,
            size,
            uses: UseList::new(),
            epoch,
        }
    }

    /// The device the buffer belongs to.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let buffer = rt.alloc(DeviceId(1), MemoryKind::Device, 64)?;
    /// assert_eq!(buffer.device(), DeviceId(1));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The kind of memory.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// for kind in [MemoryKind::Device, MemoryKind::Managed, MemoryKind::HostPinned] {
    ///     assert_eq!(rt.alloc(DeviceId(0), kind, 64)?.kind(), kind);
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    pub fn kind(&self) -> MemoryKind {
        self.handle.kind()
    }

    /// The buffer's size in bytes (as asked for).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 100)?;
    /// assert_eq!(buffer.size(), 100); // as asked for, though the allocator rounds the block up
    /// assert_eq!(buffer.all().len(), 100);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn size(&self) -> usize {
        self.size
    }

    /// The buffer's address (device address for device memory).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HOST_ALLOCATION_ALIGNMENT;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let a = rt.alloc(DeviceId(0), MemoryKind::Device, 100)?;
    /// let b = rt.alloc(DeviceId(0), MemoryKind::Device, 100)?;
    /// assert_ne!(a.address(), b.address());
    /// assert_eq!(a.address() % HOST_ALLOCATION_ALIGNMENT, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn address(&self) -> usize {
        self.address
    }

    /// The part `[offset, offset + len)` of the buffer, for operations.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 100)?;
    /// let filled = rt.fill(DeviceId(0), buffer.span(90, 10)?, 0xee, &mut vec![])?;
    /// let mut tail = [0u8; 10];
    /// rt.download(DeviceId(0), &mut tail, buffer.span(90, 10)?, &mut vec![filled])?;
    /// assert_eq!(tail, [0xee; 10]);
    /// let past_end = Error::OutOfBounds { offset: 90, len: 20, size: 100 };
    /// assert_eq!(buffer.span(90, 20).err(), Some(past_end));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn span(&self, offset: usize, len: usize) -> Result<Span<'_>> {
        check_bounds(offset, len, self.size)?;
        let device = (self.kind() == MemoryKind::Device).then_some(self.device);
        Ok(Span {
            address: self.address + offset,
            len,
            device,
            runtime: Some(self.runtime.id),
            epoch: Some((self.device, self.epoch)),
            uses: Some(&self.uses),
        })
    }

    /// The whole buffer, for operations.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 100)?;
    /// let all = buffer.all();
    /// assert_eq!((all.address(), all.len()), (buffer.address(), 100));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn all(&self) -> Span<'_> {
        let device = (self.kind() == MemoryKind::Device).then_some(self.device);
        Span {
            address: self.address,
            len: self.size,
            device,
            runtime: Some(self.runtime.id),
            epoch: Some((self.device, self.epoch)),
            uses: Some(&self.uses),
        }
    }

    /// Copies `data` into a host-side buffer (pinned or managed) at `offset`, from the host.
    ///
    /// # Safety
    /// No enqueued work may be using these bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let staging = rt.alloc(DeviceId(0), MemoryKind::HostPinned, 8)?;
    /// // SAFETY: no work has been enqueued on the staging buffer yet.
    /// unsafe { staging.write_host(0, &[1, 2, 3, 4, 5, 6, 7, 8])? };
    /// let device = rt.alloc(DeviceId(0), MemoryKind::Device, 8)?;
    /// let copied = rt.copy(DeviceId(0), device.all(), staging.all(), &mut vec![])?;
    /// let mut out = [0u8; 8];
    /// rt.download(DeviceId(0), &mut out, device.all(), &mut vec![copied])?;
    /// assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
    /// // SAFETY: as above. Device memory is not the host's to write.
    /// let refused = unsafe { device.write_host(0, &[0]) };
    /// assert!(matches!(refused, Err(Error::KindUnsupported { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn write_host(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_host_access(offset, data.len())?;
        // SAFETY: host-accessible memory of this buffer, in bounds (checked); the caller
        // guarantees no concurrent device access.
        unsafe {
            host_copy(
                (self.address + offset) as *mut u8,
                data.as_ptr(),
                data.len(),
            )
        };
        Ok(())
    }

    /// Copies bytes of a host-side buffer (pinned or managed) at `offset` into `out`.
    ///
    /// # Safety
    /// No enqueued work may be writing these bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let managed = rt.alloc(DeviceId(0), MemoryKind::Managed, 8)?;
    /// rt.wait(rt.fill(DeviceId(0), managed.all(), 0x42, &mut vec![])?)?;
    /// let mut out = [0u8; 4];
    /// // SAFETY: the fill that wrote the buffer has completed (waited for above).
    /// unsafe { managed.read_host(4, &mut out)? };
    /// assert_eq!(out, [0x42; 4]);
    /// // SAFETY: as above. Out of bounds: bytes 6..10 of 8.
    /// let refused = unsafe { managed.read_host(6, &mut out) };
    /// assert!(matches!(refused, Err(Error::OutOfBounds { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn read_host(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_host_access(offset, out.len())?;
        // SAFETY: as in `write_host`.
        unsafe {
            host_copy(
                out.as_mut_ptr(),
                (self.address + offset) as *const u8,
                out.len(),
            )
        };
        Ok(())
    }

    pub(super) fn check_host_access(&self, offset: usize, len: usize) -> Result<()> {
        if self.kind() == MemoryKind::Device {
            return Err(Error::KindUnsupported {
                device: self.device,
                kind: self.kind(),
            });
        }
        check_bounds(offset, len, self.size)
    }

    /// Frees the buffer's block now, reporting a failure: [`Runtime::free`]'s and
    /// [`Runtime::free_after`]'s end.
    #[inline(always)]
    pub(super) fn release(self) -> Result<()> {
        // Freed here, so not again by `drop`. `ManuallyDrop` wraps the buffer where it lies:
        // a move into a new place first copied it whole (wide loads of fields just stored one
        // by one, which the store buffer cannot forward: a stall of about 4 ns a free).
        core::mem::ManuallyDrop::new(self).give_back()
    }

    /// Gives the block back to the runtime, after every stream in the use list (which this
    /// empties: the one field that owns memory).
    #[inline]
    fn give_back(&mut self) -> Result<()> {
        let uses = core::mem::take(self.uses.get_mut());
        self.runtime.release_block(
            self.device,
            (self.handle, self.address, self.size),
            &uses,
            self.epoch,
        )
    }
}

impl<B: Backend> Drop for Buffer<'_, B> {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop; `Runtime::free` reports them.
        let _ = self.give_back();
    }
}

/// The caller's host memory, pinned for DMA while this guard lives.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 4096)?;
/// let mut host = vec![3u8; 4096];
/// let locked = rt.lock_host(&mut host)?; // `host` is borrowed while pinned
/// assert_eq!(rt.stats().locks.entries, 1);
/// // Pinned memory is copied directly, with no staging.
/// let copied = rt.copy(DeviceId(0), buffer.all(), locked.span(0, 4096)?, &mut vec![])?;
/// rt.wait(copied)?;
/// drop(locked); // waits for the transfers that used it, then unpins
/// assert_eq!(rt.stats().locks.entries, 0);
/// host[0] = 4; // the caller's again
/// # Ok::<(), Error>(())
/// ```
pub struct LockedHost<'rt, 'm, B: Backend> {
    pub(super) runtime: &'rt Runtime<B>,
    /// The memory's first byte and length: held raw, since memory pinned through
    /// [`Runtime::lock_host_raw`] is not borrowed (nested guards may cover the same bytes).
    pub(super) address: *mut u8,
    pub(super) len: usize,
    pub(super) memory: core::marker::PhantomData<&'m mut [u8]>,
    pub(super) uses: UseList,
}

// SAFETY: the guard owns no memory and touches the pinned bytes only in `memory`, which needs
// `&mut self`; it acts as the `&'m mut [u8]` it stands for, which is `Send` and `Sync`, and its
// other fields (the runtime reference, the use list) are both.
unsafe impl<B: Backend> Send for LockedHost<'_, '_, B> {}
// SAFETY: as for `Send`: through `&self` the guard hands out only spans (addresses).
unsafe impl<B: Backend> Sync for LockedHost<'_, '_, B> {}

impl<B: Backend> LockedHost<'_, '_, B> {
    /// The part `[offset, offset + len)`, for transfers.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let mut host = vec![0u8; 64];
    /// let mut locked = rt.lock_host(&mut host)?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 16)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 9, &mut vec![])?;
    /// let copied = rt.copy(DeviceId(0), locked.span(48, 16)?, buffer.all(), &mut vec![filled])?;
    /// rt.wait(copied)?;
    /// assert_eq!(&locked.memory()?[40..], [vec![0; 8], vec![9; 16]].concat());
    /// assert!(matches!(locked.span(48, 32), Err(Error::OutOfBounds { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn span(&self, offset: usize, len: usize) -> Result<Span<'_>> {
        check_bounds(offset, len, self.len)?;
        Ok(Span {
            address: self.address as usize + offset,
            len,
            device: None,
            runtime: Some(self.runtime.id),
            epoch: None,
            uses: Some(&self.uses),
        })
    }

    /// The pinned memory, for the host to read or write, once the transfers that used it have
    /// finished: waits for the streams that did (a span's borrow ends when its transfer is
    /// enqueued, not when it completes). Borrowing it mutably needs the guard mutably, so no
    /// new transfer can use it while the host holds it.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 16)?;
    /// let mut host = vec![0u8; 16];
    /// let mut locked = rt.lock_host(&mut host)?;
    /// locked.memory()?.copy_from_slice(&[6; 16]); // the host writes the pinned memory
    /// let up = rt.copy(DeviceId(0), buffer.all(), locked.span(0, 16)?, &mut vec![])?;
    /// let back = rt.fill(DeviceId(0), buffer.span(0, 4)?, 0, &mut vec![up])?;
    /// let down = rt.copy(DeviceId(0), locked.span(0, 16)?, buffer.all(), &mut vec![back])?;
    /// // Waits for the copies that used the memory before handing it out.
    /// assert_eq!(locked.memory()?, [vec![0; 4], vec![6; 12]].concat());
    /// # rt.wait(down)?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn memory(&mut self) -> Result<&mut [u8]> {
        let uses = self.uses.get_mut();
        self.runtime.synchronize_streams(uses)?;
        uses.clear();
        // SAFETY: the memory was borrowed for `'m` (`lock_host`) or vouched for by the caller
        // of `lock_host_raw` (valid, and not accessed elsewhere while this slice is borrowed);
        // every transfer that used it has finished.
        Ok(unsafe { core::slice::from_raw_parts_mut(self.address, self.len) })
    }

    /// Unpins now, reporting a failure (dropping the guard unpins too, silently).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let mut host = vec![0u8; 4096];
    /// let locked = rt.lock_host(&mut host)?;
    /// assert_eq!(rt.stats().locks.driver_pins, 1);
    /// locked.unlock()?; // reports a failure to unpin, where dropping would ignore it
    /// assert_eq!((rt.stats().locks.entries, rt.stats().locks.driver_unpins), (0, 1));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn unlock(self) -> Result<()> {
        let this = core::mem::ManuallyDrop::new(self);
        this.runtime.unlock_host(&this)
    }
}

impl<B: Backend> Drop for LockedHost<'_, '_, B> {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop; `LockedHost::unlock` reports them.
        let _ = self.runtime.unlock_host(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each stream once, whatever the order; the stream noted last, skipped without the lock,
    /// is noted again once the list was cleared or taken.
    #[test]
    fn a_use_list_holds_each_stream_once_and_notes_again_after_it_was_emptied() {
        let streams = |ids: &[u32]| ids.iter().map(|&id| StreamId(id)).collect::<Vec<_>>();
        let mut uses = UseList::new();
        for id in [1, 1, 2, 1, 2, 2] {
            uses.note(StreamId(id));
        }
        assert_eq!(*uses.get_mut(), streams(&[1, 2]));
        uses.note(StreamId(2));
        uses.get_mut().clear();
        uses.note(StreamId(2));
        assert_eq!(*uses.get_mut(), streams(&[2]));
        uses.note(StreamId(2));
        assert_eq!(uses.take(), streams(&[2]));
        uses.note(StreamId(2));
        assert_eq!(uses.take(), streams(&[2]));
        assert_eq!(uses.take(), streams(&[]));
    }
}
