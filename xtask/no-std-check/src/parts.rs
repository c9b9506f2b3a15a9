//! One function per pure part of gpu-core (lock table, token planner, allocator, workgroup
//! planner) that drives its main calls over a driver that does nothing, from opaque inputs.

use alloc::vec;
use alloc::vec::Vec;
use core::hint::black_box;

use gpu_core::allocator::{
    AllocRequest, AllocatorCapabilities, AllocatorConfig, DeviceAllocator, KindSupport, MemoryKind,
    Release, SegmentDriver,
};
use gpu_core::lock_table::{LockTable, PinDriver};
use gpu_core::token::{OpId, Planner};
use gpu_core::workgroup::{WorkgroupBuffer, WorkgroupLimits, WorkgroupPlanner};
use gpu_core::{ByteRange, DeviceId, EventId, Result, StreamId};

/// A driver whose every call succeeds and does nothing; its answers are opaque to the
/// optimiser, so the parts' code is kept whole.
struct NullDriver;

impl PinDriver for NullDriver {
    fn pin(&mut self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        device_ptrs.fill(black_box(range.start));
        Ok(())
    }

    fn unpin(&mut self, _start: usize) -> Result<()> {
        Ok(())
    }

    fn pinned_extent(
        &mut self,
        _ptr: usize,
        _device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        Ok(black_box(None))
    }
}

impl SegmentDriver for NullDriver {
    fn allocate(&mut self, _: DeviceId, _: MemoryKind, size: usize) -> Result<Option<usize>> {
        Ok(black_box(Some(size)))
    }

    fn allocate_on_stream(
        &mut self,
        _: DeviceId,
        _: MemoryKind,
        size: usize,
        _: StreamId,
    ) -> Result<Option<usize>> {
        Ok(black_box(Some(size)))
    }

    fn free(
        &mut self,
        _: DeviceId,
        _: MemoryKind,
        _: usize,
        _: usize,
        _: Option<StreamId>,
    ) -> Result<()> {
        Ok(())
    }

    fn record_event(&mut self, _: DeviceId, stream: StreamId) -> Result<EventId> {
        Ok(EventId(black_box(stream.0)))
    }

    fn event_completed(&mut self, _: DeviceId, _: EventId) -> Result<bool> {
        Ok(black_box(true))
    }

    fn wait_event(&mut self, _: DeviceId, _: StreamId, _: EventId) -> Result<()> {
        Ok(())
    }

    fn wait_event_on_host(&mut self, _: DeviceId, _: EventId) -> Result<()> {
        Ok(())
    }

    fn release_event(&mut self, _: DeviceId, _: EventId) {}

    fn synchronize(&mut self, _: DeviceId) -> Result<()> {
        Ok(())
    }
}

/// The lock table: lock, look up and unlock one host range.
pub fn lock_table(ptr: usize, len: usize) -> usize {
    let Ok(mut table) = LockTable::new(1) else {
        return 0;
    };
    let locked = table.lock(&mut NullDriver, ptr, len).is_ok();
    let found = matches!(table.lookup(ptr, len, DeviceId(0)), Ok(Some(_)));
    let unlocked = table.unlock(&mut NullDriver, ptr).is_ok();
    usize::from(locked) + usize::from(found) + usize::from(unlocked)
}

/// The token planner: an operation forked into `fan` branches, joined, followed by one more
/// operation on the last device and waited for; the steps and the end-of-program report.
pub fn token(devices: usize, fan: usize) -> usize {
    let mut planner = Planner::new(devices);
    let Ok(first) = planner.run(OpId(0), DeviceId(0), &mut Vec::new()) else {
        return 0;
    };
    let mut branches = Vec::new();
    if planner.fork(first, fan, &mut branches).is_err() {
        return 0;
    }
    let Ok(joined) = planner.join(&mut branches) else {
        return 0;
    };
    let last = DeviceId(devices.saturating_sub(1) as u32);
    let Ok(done) = planner.run(OpId(1), last, &mut vec![joined]) else {
        return 0;
    };
    let waited = planner.wait(done).is_ok();
    let report = planner.end_program();
    planner.drain_steps().count() + report.unwaited.len() + usize::from(waited)
}

/// The allocator: a stream-ordered allocation freed on its stream, a synchronous one freed
/// idle, then a trim.
pub fn allocator(size: usize) -> usize {
    let kind = KindSupport {
        available: true,
        stream_ordered: true,
        max_size: usize::MAX,
    };
    let capabilities = AllocatorCapabilities {
        device: kind,
        managed: kind,
        host_pinned: kind,
        host_register: true,
    };
    let mut allocator = DeviceAllocator::new(DeviceId(0), capabilities, AllocatorConfig::default());
    let driver = &mut NullDriver;
    let stream = StreamId(black_box(0));
    let mut handed_out = 0;
    let requests = [
        (
            AllocRequest::new(MemoryKind::Device, size).on_stream(stream, &[]),
            Release::OnStream(stream),
        ),
        (
            AllocRequest::new(MemoryKind::HostPinned, size),
            Release::Idle,
        ),
    ];
    for (request, release) in requests {
        if let Ok(allocation) = allocator.allocate(driver, &request) {
            handed_out += allocation.address;
            handed_out += usize::from(allocator.free(driver, allocation.handle, release).is_ok());
        }
    }
    handed_out + allocator.trim(driver).unwrap_or(0)
}

/// The workgroup planner: a static buffer and a launch-sized one with disjoint live ranges,
/// planned and sized for one launch.
pub fn workgroup(bytes: u32) -> usize {
    let limits = WorkgroupLimits {
        default_per_block: 48 << 10,
        max_per_block_opt_in: black_box(227 << 10),
        per_multiprocessor: 228 << 10,
        reserved_per_block: 1 << 10,
    };
    let buffers = [
        WorkgroupBuffer::fixed("tile", bytes, 16).live_during(0, 1),
        WorkgroupBuffer::launch_sized("scratch", 16).live_during(2, 3),
    ];
    let Ok(plan) = WorkgroupPlanner::new(limits).plan(&buffers) else {
        return 0;
    };
    plan.for_launch(&[bytes / 2])
        .map_or(0, |layout| layout.total_bytes() as usize)
}
