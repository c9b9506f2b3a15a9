//! The narrow driver interface the allocator needs: segments of memory, optional virtual memory
//! (reserved ranges mapped in pieces), and the few event operations that order reuse across
//! streams. Backends implement it; tests use a fake.

use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, MemoryKind, StreamId};

/// What the allocator asks of a driver. Every method acts on one device; the allocator never
/// calls two methods at once for the same device (it sits behind a per-device lock).
///
/// Failures are reported as [`crate::Error`] (usually [`crate::Error::Driver`]); the allocator
/// keeps its own state consistent whichever call fails.
pub trait SegmentDriver {
    /// Allocates `size` bytes of `kind` synchronously: the memory may be used at once by the
    /// host (host kinds) and by any stream of `device`, with no ordering needed.
    ///
    /// The address must be aligned to at least [`super::MIN_ALIGNMENT`] (256) bytes.
    /// Returns `Ok(None)` when the driver is out of memory for it (CUDA:
    /// `CUDA_ERROR_OUT_OF_MEMORY`), so the allocator can reclaim and retry; any other failure is
    /// an `Err`. (CUDA: `cuMemAlloc`, `cuMemAllocManaged` with `ATTACH_GLOBAL`,
    /// `cuMemHostAlloc` with `PORTABLE | DEVICEMAP`.)
    fn allocate(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
    ) -> Result<Option<usize>>;

    /// Allocates `size` bytes of `kind` in `stream`'s order: the memory may be used by work
    /// enqueued on `stream` after this call (CUDA: `cuMemAllocAsync` / `cuMemAllocFromPoolAsync`).
    /// Only called for kinds whose capabilities say they have a stream-ordered form. Same
    /// alignment and out-of-memory rules as [`SegmentDriver::allocate`].
    fn allocate_on_stream(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
        stream: StreamId,
    ) -> Result<Option<usize>>;

    /// Returns a segment obtained from [`SegmentDriver::allocate`] or
    /// [`SegmentDriver::allocate_on_stream`], with the exact address and size it had.
    ///
    /// `after`: `None` when no work can still touch the memory; `Some(stream)` when work already
    /// enqueued on `stream` may still use it, so the driver must not reuse the memory before that
    /// work finishes (a stream-ordered free on `stream`, or a synchronous free that waits).
    fn free(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<StreamId>,
    ) -> Result<()>;

    /// Creates an event and records it on `stream`: it completes once all work enqueued on
    /// `stream` before this call has finished.
    fn record_event(&mut self, device: DeviceId, stream: StreamId) -> Result<EventId>;

    /// Whether `event` has completed, without waiting (CUDA: `cuEventQuery`).
    fn event_completed(&mut self, device: DeviceId, event: EventId) -> Result<bool>;

    /// Makes work enqueued on `stream` after this call wait for `event` on the device, without
    /// blocking the host (CUDA: `cuStreamWaitEvent`).
    fn wait_event(&mut self, device: DeviceId, stream: StreamId, event: EventId) -> Result<()>;

    /// Blocks the host until `event` has completed (CUDA: `cuEventSynchronize`).
    fn wait_event_on_host(&mut self, device: DeviceId, event: EventId) -> Result<()>;

    /// Destroys an event the allocator recorded and no longer needs. Failure is not reported:
    /// there is nothing the allocator could do about it.
    fn release_event(&mut self, device: DeviceId, event: EventId);

    /// Blocks the host until all work on `device` has finished (CUDA: `cuCtxSynchronize`). Only
    /// the last rung of the out-of-memory ladder calls it.
    fn synchronize(&mut self, device: DeviceId) -> Result<()>;

    /// The granularity of virtual memory for `kind` on `device`: reservations, mapped pieces
    /// and their addresses are multiples of it (a power of two, at least
    /// [`super::MIN_ALIGNMENT`]). `None` (the default) when the driver has no virtual memory
    /// for the kind; the allocator then never calls the other virtual-memory methods for it.
    /// (CUDA: `cuMemGetAllocationGranularity`.)
    fn granularity(&mut self, device: DeviceId, kind: MemoryKind) -> Result<Option<usize>> {
        let _ = (device, kind);
        Ok(None)
    }

    /// Reserves `size` bytes of address space for `kind` (a multiple of the granularity),
    /// with no memory behind it yet. `Ok(None)` when no such range is left, as
    /// [`SegmentDriver::allocate`] reports out of memory. (CUDA: `cuMemAddressReserve`.)
    fn reserve(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
    ) -> Result<Option<usize>> {
        let _ = (device, kind, size);
        Err(no_virtual_memory())
    }

    /// Maps `size` bytes of new memory of `kind` at `address`, both multiples of the
    /// granularity, inside one reservation and over no mapped byte: usable at once by the host
    /// (host kinds) and by every stream of `device`, and by the peers the caller enabled.
    /// `Ok(false)` when the driver is out of memory for it; nothing is mapped then. The driver
    /// may map it as several granularity-sized pieces, so that any granularity-aligned part can
    /// be unmapped later. (CUDA: `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`.)
    fn map(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        let _ = (device, kind, address, size);
        Err(no_virtual_memory())
    }

    /// Unmaps `[address, address + size)` (multiples of the granularity, all mapped by
    /// [`SegmentDriver::map`]) and releases its memory; the addresses stay reserved. `after` as
    /// for [`SegmentDriver::free`]: with `Some(stream)` the driver neither releases the memory
    /// nor maps the addresses again before the work enqueued on `stream` has finished (CUDA:
    /// synchronise the stream, then `cuMemUnmap` and `cuMemRelease`).
    fn unmap(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<StreamId>,
    ) -> Result<()> {
        let _ = (device, kind, address, size, after);
        Err(no_virtual_memory())
    }

    /// Returns a reservation obtained from [`SegmentDriver::reserve`], with its exact address
    /// and size; nothing in it is mapped any more. (CUDA: `cuMemAddressFree`.)
    fn release_reservation(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        let _ = (device, kind, address, size);
        Err(no_virtual_memory())
    }
}

/// What a driver without virtual memory answers the calls that need it.
fn no_virtual_memory() -> Error {
    Error::Unsupported {
        backend: "segment driver",
        what: "virtual memory (reserved ranges mapped in pieces)",
    }
}
