//! The narrow driver interface the allocator needs: segments of memory and the few event
//! operations that order reuse across streams. Backends implement it; tests use a fake.

use crate::error::Result;
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

    /// The granularity (a power of two) in which physical memory of `kind` can be mapped into
    /// reserved address ranges, or `None` (the default) where the driver has no virtual memory
    /// management: then [`AllocatorConfig::growable_segments`](super::AllocatorConfig) falls
    /// back to ordinary segments and the calls below are never made. (CUDA:
    /// `cuMemGetAllocationGranularity`.)
    fn map_granularity(&mut self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        let _ = (device, kind);
        None
    }

    /// Reserves address space for a growable segment, backed by nothing yet: at most `wanted`
    /// and at least `needed` bytes (multiples of the granularity), as the driver can; its start
    /// and size, or `Ok(None)` when not even `needed` is left. (CUDA: `cuMemAddressReserve`.)
    fn reserve_range(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        wanted: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        let _ = (device, kind, wanted, needed);
        Err(unsupported("reserve_range"))
    }

    /// Backs `[address, address + size)` (granularity-aligned, inside a reserved range, not
    /// mapped) with new physical memory that `device` (and the devices it has peer access to)
    /// may read and write at once; `Ok(false)` when the device is out of memory. (CUDA:
    /// `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`.)
    fn map(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        let _ = (device, kind, address, size);
        Err(unsupported("map"))
    }

    /// Unmaps `[address, address + size)` (mapped by [`SegmentDriver::map`], the tail of its
    /// range's mapped part) and releases its physical memory; `after` as for
    /// [`SegmentDriver::free`], except that the driver waits for that work before it returns:
    /// the addresses may be mapped again at once. (CUDA: `cuMemUnmap`, `cuMemRelease`, after
    /// synchronising the stream.)
    fn unmap(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<StreamId>,
    ) -> Result<()> {
        let _ = (device, kind, address, size, after);
        Err(unsupported("unmap"))
    }

    /// Releases a range from [`SegmentDriver::reserve_range`], nothing of it mapped any more.
    /// (CUDA: `cuMemAddressFree`.)
    fn release_range(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        let _ = (device, kind, address, size);
        Err(unsupported("release_range"))
    }
}

/// The error of a virtual-memory call on a driver without virtual memory management.
fn unsupported(call: &'static str) -> crate::error::Error {
    crate::error::Error::Unsupported {
        backend: "segment driver without virtual memory",
        what: call,
    }
}
