//! Unit tests of the allocator's rules, one scenario each, over the model's fake driver.
//! Random sequences against the model live in tests/allocator_model.rs.

use super::model::{FakeDriver, capabilities};
use super::*;
use alloc::vec::Vec;

const S0: StreamId = StreamId(0);
const S1: StreamId = StreamId(1);
const MIB: usize = 1 << 20;

fn allocator(stream_ordered: bool) -> DeviceAllocator {
    DeviceAllocator::new(
        DeviceId(0),
        capabilities([stream_ordered; 3], true),
        AllocatorConfig::default(),
    )
}

fn on(stream: StreamId, size: usize) -> AllocRequest<'static> {
    AllocRequest::new(MemoryKind::Device, size).on_stream(stream, &[])
}

#[test]
fn a_block_freed_on_a_stream_is_reused_there_at_once_without_driver_calls() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let first = a.allocate(&mut d, &on(S0, 1000)).unwrap();
    assert_eq!(first.path, AllocPath::DriverStreamOrdered);
    a.free(&mut d, first.handle, Release::OnStream(S0)).unwrap();
    let calls = d.calls;
    let second = a.allocate(&mut d, &on(S0, 900)).unwrap();
    assert_eq!(
        (second.path, second.address),
        (AllocPath::Cached, first.address)
    );
    assert_eq!(d.calls, calls);
    let stats = a.stats(MemoryKind::Device);
    assert_eq!(
        (stats.hits, stats.misses, stats.allocated, stats.requested),
        (1, 1, 1024, 900)
    );
}

#[test]
fn another_stream_reuses_a_block_only_after_one_wait_or_a_completed_free() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let first = a.allocate(&mut d, &on(S0, 20 * MIB)).unwrap();
    let second = a.allocate(&mut d, &on(S0, 22 * MIB)).unwrap();
    for block in [first, second] {
        d.enqueue(S0, block.address, block.size);
        a.free(&mut d, block.handle, Release::OnStream(S0)).unwrap();
    }
    let reused = a.allocate(&mut d, &on(S1, 20 * MIB)).unwrap();
    assert_eq!(
        reused.path,
        AllocPath::CachedFromStream {
            from: S0,
            waited: true
        }
    );
    assert_eq!(reused.address, first.address);
    assert_eq!(d.unordered_use(reused.address, reused.size, Some(S1)), None);

    // Once S0's work is done, the event recorded for the first reuse answers without a wait.
    d.progress(S0, 2);
    let calls = d.calls;
    let later = a.allocate(&mut d, &on(S1, 22 * MIB)).unwrap();
    assert_eq!(
        later.path,
        AllocPath::CachedFromStream {
            from: S0,
            waited: false
        }
    );
    assert_eq!(
        d.calls - calls,
        2,
        "one query and one event release, no wait"
    );

    for block in [reused, later] {
        a.free(&mut d, block.handle, Release::OnStream(S1)).unwrap();
    }
    a.trim(&mut d).unwrap();
    assert_eq!(d.allocator_events(), 0);
    assert!(d.live_segments().is_empty());
}

#[test]
fn a_synchronous_request_takes_a_block_whose_free_may_be_pending_only_after_the_host_waits() {
    for wait_before_growing in [false, true] {
        let config = AllocatorConfig {
            wait_before_growing,
            ..AllocatorConfig::default()
        };
        let mut a = DeviceAllocator::new(DeviceId(0), capabilities([true; 3], true), config);
        let mut d = FakeDriver::new(usize::MAX / 2);
        let block = a.allocate(&mut d, &on(S0, 4096)).unwrap();
        d.enqueue(S0, block.address, block.size);
        a.free(&mut d, block.handle, Release::OnStream(S0)).unwrap();
        let sync = a
            .allocate(&mut d, &AllocRequest::new(MemoryKind::Device, 4096))
            .unwrap();
        assert_eq!(d.unordered_use(sync.address, sync.size, None), None);
        if wait_before_growing {
            assert_eq!(
                (sync.path, sync.address),
                (AllocPath::Cached, block.address)
            );
        } else {
            assert_eq!(sync.path, AllocPath::DriverSynchronous);
            assert_ne!(sync.address, block.address);
        }
    }
}

#[test]
fn blocks_used_on_other_streams_return_only_after_that_work_completes() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let block = a.allocate(&mut d, &on(S0, 20 * MIB)).unwrap();
    a.mark_used_on(block.handle, S1).unwrap();
    d.enqueue(S1, block.address, block.size);
    a.free(&mut d, block.handle, Release::OnStream(S0)).unwrap();
    assert_eq!(a.stats(MemoryKind::Device).pending, 20 * MIB);
    let meanwhile = a.allocate(&mut d, &on(S0, 20 * MIB)).unwrap();
    assert_ne!(
        meanwhile.address, block.address,
        "reused while S1 may still use it"
    );
    d.progress(S1, 1);
    let after = a.allocate(&mut d, &on(S0, 20 * MIB)).unwrap();
    assert_eq!(
        (after.path, after.address),
        (AllocPath::Cached, block.address)
    );
    assert_eq!(a.stats(MemoryKind::Device).pending, 0);
    a.check_consistency().unwrap();
}

#[test]
fn the_fallback_waits_for_the_dependencies_then_allocates_synchronously() {
    let (mut a, mut d) = (allocator(false), FakeDriver::new(usize::MAX / 2));
    d.enqueue(S1, 0, 1);
    let dependency = d.record_user_event(S1);
    let request = AllocRequest::new(MemoryKind::Device, 100)
        .on_stream(S0, core::slice::from_ref(&dependency));
    let allocation = a.allocate(&mut d, &request).unwrap();
    assert_eq!(allocation.path, AllocPath::Fallback);
    assert_eq!(
        d.unordered_use(0, 1, None),
        None,
        "the host did not wait for the dependency"
    );
    assert_eq!(
        (d.synchronous_allocations, d.stream_ordered_allocations),
        (1, 0)
    );
    assert_eq!(a.stats(MemoryKind::Device).fallbacks, 1);
}

/// Shutdown's step once every stream is synchronised: fences and frees pending on another
/// stream's event are complete whatever the driver would answer (the fake's events here never
/// report complete), so a trim then gives every segment back and no event stays out.
#[test]
fn all_streams_idle_completes_pending_frees_without_asking_the_driver() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let block = a.allocate(&mut d, &on(S0, 20 * MIB)).unwrap();
    a.mark_used_on(block.handle, S1).unwrap();
    d.enqueue(S1, block.address, block.size);
    a.free(&mut d, block.handle, Release::OnStream(S0)).unwrap();
    assert_eq!(a.stats(MemoryKind::Device).pending, block.size);
    assert_eq!(
        a.trim(&mut d).unwrap(),
        0,
        "the use on S1 has not completed"
    );
    a.all_streams_idle(&mut d);
    assert_eq!(a.stats(MemoryKind::Device).pending, 0);
    assert!(a.trim(&mut d).unwrap() >= block.size);
    assert!(d.live_segments().is_empty());
    assert_eq!(d.allocator_events(), 0);
}

#[test]
fn a_retired_stream_leaves_its_blocks_to_everyone_and_no_events_behind() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let block = a.allocate(&mut d, &on(S0, 20 * MIB)).unwrap();
    d.enqueue(S0, block.address, block.size);
    a.free(&mut d, block.handle, Release::OnStream(S0)).unwrap();
    let other = a.allocate(&mut d, &on(S1, 20 * MIB)).unwrap();
    assert!(matches!(
        other.path,
        AllocPath::CachedFromStream { waited: true, .. }
    ));
    a.free(&mut d, other.handle, Release::OnStream(S1)).unwrap();
    d.finish_all();
    a.retire_stream(&mut d, S1);
    assert_eq!(
        d.allocator_events(),
        1,
        "the event recorded on S0 went with S1"
    );
    a.retire_stream(&mut d, S0);
    a.retire_stream(&mut d, StreamId(9));
    assert_eq!(d.allocator_events(), 0);
    let sync = a
        .allocate(&mut d, &AllocRequest::new(MemoryKind::Device, 20 * MIB))
        .unwrap();
    assert_eq!(
        (sync.path, sync.address),
        (AllocPath::Cached, block.address)
    );
    a.check_consistency().unwrap();
}

#[test]
fn impossible_requests_fail_before_any_driver_call() {
    let mut a = DeviceAllocator::new(
        DeviceId(3),
        capabilities([true; 3], false),
        AllocatorConfig::default(),
    );
    let mut d = FakeDriver::new(usize::MAX / 2);
    let managed = AllocRequest::new(MemoryKind::Managed, 64);
    assert_eq!(
        a.allocate(&mut d, &managed),
        Err(Error::KindUnsupported {
            device: DeviceId(3),
            kind: MemoryKind::Managed
        })
    );
    assert!(matches!(
        a.allocate(&mut d, &on(S0, 0)),
        Err(Error::ZeroSize { .. })
    ));
    assert!(matches!(
        a.allocate(&mut d, &on(S0, 64).aligned(96)),
        Err(Error::InvalidAlignment { .. })
    ));
    let far = on(StreamId(5000), 64);
    assert!(matches!(
        a.allocate(&mut d, &far),
        Err(Error::LimitExceeded { .. })
    ));
    assert_eq!(d.calls, 0);
}

#[test]
fn alignments_above_the_guarantee_are_carved_from_bigger_blocks() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let small = a.allocate(&mut d, &on(S0, 256)).unwrap();
    let aligned = a.allocate(&mut d, &on(S0, 300).aligned(64 << 10)).unwrap();
    assert_eq!(aligned.address % (64 << 10), 0);
    assert!(aligned.address >= small.address + 512 || aligned.address + 512 <= small.address);
    a.check_consistency().unwrap();
}

#[test]
fn neighbours_freed_on_one_stream_merge_back_into_the_whole_segment() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let blocks: Vec<_> = (0..4)
        .map(|_| a.allocate(&mut d, &on(S0, 512 << 10)).unwrap())
        .collect();
    assert_eq!(a.stats(MemoryKind::Device).segments, 1);
    for index in [1, 3, 0, 2] {
        a.free(&mut d, blocks[index].handle, Release::OnStream(S0))
            .unwrap();
    }
    assert_eq!(
        a.trim(&mut d),
        Ok(SMALL_SEGMENT),
        "the four blocks did not merge back"
    );
    assert!(d.violations.is_empty() && d.live_segments().is_empty());
}

#[test]
fn oversize_blocks_are_never_split_nor_given_to_small_requests() {
    let config = AllocatorConfig {
        max_split_size: 32 * MIB,
        release_before_growing: false,
        ..AllocatorConfig::default()
    };
    let mut a = DeviceAllocator::new(DeviceId(0), capabilities([true; 3], true), config);
    let mut d = FakeDriver::new(usize::MAX / 2);
    let big = a.allocate(&mut d, &on(S0, 64 * MIB)).unwrap();
    a.free(&mut d, big.handle, Release::OnStream(S0)).unwrap();
    let mid = a.allocate(&mut d, &on(S0, 12 * MIB)).unwrap();
    assert_ne!(mid.path, AllocPath::Cached);
    let close = a.allocate(&mut d, &on(S0, 60 * MIB)).unwrap();
    assert_eq!(
        (close.path, close.address),
        (AllocPath::Cached, big.address)
    );
    assert_eq!(a.stats(MemoryKind::Device).allocated, 64 * MIB + 12 * MIB);
}

#[test]
fn a_miss_returns_wholly_free_segments_before_growing() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let first = a.allocate(&mut d, &on(S0, 10 * MIB)).unwrap();
    let second = a.allocate(&mut d, &on(S1, 10 * MIB)).unwrap();
    a.free(&mut d, first.handle, Release::OnStream(S0)).unwrap();
    a.free(&mut d, second.handle, Release::OnStream(S1))
        .unwrap();
    // 20 MiB cached in two segments, neither fits: both go back before the driver is asked.
    let bigger = a.allocate(&mut d, &on(S0, 16 * MIB)).unwrap();
    assert_eq!(bigger.path, AllocPath::DriverStreamOrdered);
    let stats = a.stats(MemoryKind::Device);
    assert_eq!((stats.reserved, stats.segment_frees), (16 * MIB, 2));
    assert!(d.violations.is_empty());
}

/// A 2 MiB segment carved into four 512 KiB blocks, freed alternately on S0 and S1 with their
/// work still running (S1 ordered after S0's): free bytes enough for 1 MiB, in no lane alone.
fn segment_freed_in_stripes(config: AllocatorConfig) -> (DeviceAllocator, FakeDriver, usize) {
    let mut a = DeviceAllocator::new(DeviceId(0), capabilities([true; 3], true), config);
    let mut d = FakeDriver::new(usize::MAX / 2);
    let blocks: Vec<Allocation> = (0..4)
        .map(|_| a.allocate(&mut d, &on(S0, MIB / 2)).unwrap())
        .collect();
    for block in &blocks {
        d.enqueue(S0, block.address, block.size);
    }
    let s0_done = d.record_user_event(S0);
    d.user_wait(S1, s0_done);
    for (index, block) in blocks.iter().enumerate() {
        let stream = if index % 2 == 0 { S0 } else { S1 };
        if stream == S1 {
            d.enqueue(S1, block.address, block.size);
        }
        a.free(&mut d, block.handle, Release::OnStream(stream))
            .unwrap();
    }
    assert_eq!(a.stats(MemoryKind::Device).segments, 1);
    (a, d, blocks[0].address)
}

#[test]
fn a_miss_merges_free_blocks_of_several_streams_before_growing() {
    let (mut a, mut d, base) = segment_freed_in_stripes(AllocatorConfig::default());
    let calls = d.calls;
    let merged = a.allocate(&mut d, &on(S0, MIB)).unwrap();
    assert_eq!((merged.path, merged.address), (AllocPath::Cached, base));
    let stats = a.stats(MemoryKind::Device);
    assert_eq!((stats.reserved, stats.segment_allocations), (2 * MIB, 1));
    assert_eq!(d.unordered_use(merged.address, merged.size, Some(S0)), None);
    assert!(d.calls > calls, "the host waited for S1's frees");
    a.check_consistency().unwrap();
    assert!(d.violations.is_empty(), "{:?}", d.violations);
}

#[test]
fn without_waiting_before_growing_the_same_miss_grows() {
    let config = AllocatorConfig {
        wait_before_growing: false,
        ..AllocatorConfig::default()
    };
    let (mut a, mut d, base) = segment_freed_in_stripes(config);
    let grown = a.allocate(&mut d, &on(S0, MIB)).unwrap();
    assert_eq!(grown.path, AllocPath::DriverStreamOrdered);
    assert_ne!(grown.address, base);
    assert_eq!(a.stats(MemoryKind::Device).reserved, 4 * MIB);
}

#[test]
fn pending_frees_are_polled_without_misses_so_their_events_stay_bounded() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let blocks: Vec<Allocation> = (0..300)
        .map(|_| a.allocate(&mut d, &on(S0, 4096)).unwrap())
        .collect();
    let misses = a.stats(MemoryKind::Device).misses;
    let mut most_events = 0;
    for block in blocks {
        a.mark_used_on(block.handle, S1).unwrap();
        d.enqueue(S1, block.address, block.size);
        a.free(&mut d, block.handle, Release::OnStream(S0)).unwrap();
        d.progress(S1, 1);
        most_events = most_events.max(d.allocator_events());
    }
    assert_eq!(a.stats(MemoryKind::Device).misses, misses, "no miss polled");
    assert!(
        most_events <= 64,
        "{most_events} events held for frees already complete"
    );
    a.check_consistency().unwrap();
}

/// An allocator with growable segments over a fake with virtual memory of 2 MiB granules.
fn growable() -> (DeviceAllocator, FakeDriver) {
    let config = AllocatorConfig {
        growable_segments: true,
        ..AllocatorConfig::default()
    };
    let mut d = FakeDriver::new(usize::MAX / 2);
    d.granularity = Some(2 * MIB);
    let a = DeviceAllocator::new(DeviceId(0), capabilities([true; 3], true), config);
    (a, d)
}

#[test]
fn a_growing_tensor_extends_its_growable_segment_and_the_free_tail_goes_back() {
    let (mut a, mut d) = growable();
    // A buffer freed and asked for again a little larger each step (a batch of growing
    // sequences): each miss maps only what the free tail lacks.
    let mut last = None;
    for size in [8 * MIB, 16 * MIB, 24 * MIB, 40 * MIB] {
        if let Some(old) = last.take() {
            a.free(&mut d, old, Release::OnStream(S0)).unwrap();
        }
        let grown = a.allocate(&mut d, &on(S0, size)).unwrap();
        assert_eq!(grown.path, AllocPath::SegmentGrown);
        last = Some(grown.handle);
    }
    let stats = a.stats(MemoryKind::Device);
    assert_eq!((stats.segments, stats.segment_allocations), (1, 0));
    assert_eq!(d.reserved_ranges().len(), 1);
    // 40 MiB mapped in 4 pieces, where segments would have held 8 + 16 + 24 + 40 MiB (or
    // released and re-allocated them).
    assert_eq!((stats.peak_reserved, stats.maps), (40 * MIB, 4));
    assert_eq!(stats.mapped, 40 * MIB);
    a.check_consistency().unwrap();
    a.free(&mut d, last.unwrap(), Release::OnStream(S0))
        .unwrap();
    d.finish_all();
    assert_eq!(a.trim(&mut d).unwrap(), stats.reserved);
    let end = a.stats(MemoryKind::Device);
    assert_eq!((end.reserved, end.segments, end.address_space), (0, 0, 0));
    assert_eq!(end.mapped, 0);
    assert!(d.reserved_ranges().is_empty() && d.live_segments().is_empty());
    assert!(d.violations.is_empty(), "{:?}", d.violations);
}

#[test]
fn small_requests_held_together_grow_one_range_of_the_small_pool() {
    let (mut a, mut d) = growable();
    let held: Vec<_> = (0..16)
        .map(|_| a.allocate(&mut d, &on(S0, 512 << 10)).unwrap())
        .collect();
    // Each block follows the one before it in one range, mapped 2 MiB at a time.
    for pair in held.windows(2) {
        assert_eq!(pair[0].address + pair[0].size, pair[1].address);
    }
    let stats = a.stats(MemoryKind::Device);
    assert_eq!((stats.segments, stats.segment_allocations), (1, 0));
    assert_eq!((stats.reserved, stats.maps), (8 * MIB, 4));
    // The large pool has a range of its own.
    a.allocate(&mut d, &on(S0, 3 * MIB)).unwrap();
    assert_eq!(d.reserved_ranges().len(), 2);
    a.check_consistency().unwrap();
    assert!(d.violations.is_empty(), "{:?}", d.violations);
}

#[test]
fn a_full_range_stays_and_the_lane_grows_another() {
    let (mut a, mut d) = growable();
    d.max_reservation = Some(8 * MIB);
    let first = a.allocate(&mut d, &on(S0, 6 * MIB)).unwrap();
    let second = a.allocate(&mut d, &on(S0, 4 * MIB)).unwrap();
    assert_eq!(second.path, AllocPath::SegmentGrown);
    assert_eq!(d.reserved_ranges().len(), 2);
    // The new range is the lane's now: it grows, the full one keeps its block.
    let third = a.allocate(&mut d, &on(S0, 4 * MIB)).unwrap();
    assert_eq!(third.address, second.address + 4 * MIB);
    assert_eq!(d.reserved_ranges().len(), 2);
    assert!(d.inside_segment(MemoryKind::Device, first.address, first.size));
    a.check_consistency().unwrap();
    assert!(d.violations.is_empty(), "{:?}", d.violations);
}

#[test]
fn without_virtual_memory_growable_segments_are_ordinary_ones() {
    let (mut a, mut d) = growable();
    d.granularity = None;
    let block = a.allocate(&mut d, &on(S0, 12 * MIB)).unwrap();
    assert_eq!(block.path, AllocPath::DriverStreamOrdered);
    assert_eq!(a.stats(MemoryKind::Device).maps, 0);
}

#[test]
fn out_of_memory_reclaims_cached_segments_then_reports_the_numbers() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(24 * MIB));
    let small = a.allocate(&mut d, &on(S0, 4096)).unwrap();
    a.free(&mut d, small.handle, Release::OnStream(S0)).unwrap();
    let mid = a.allocate(&mut d, &on(S1, 2 * MIB)).unwrap();
    // 20 MiB + 2 MiB held; the next mid-size segment fits only once the free small one goes.
    let mid2 = a.allocate(&mut d, &on(S1, 19 * MIB)).unwrap_err();
    assert!(
        matches!(mid2, Error::OutOfMemory { requested, reserved, allocated, largest_free, .. }
        if requested == 19 * MIB && reserved == 20 * MIB && allocated == 2 * MIB && largest_free == 18 * MIB)
    );
    assert_eq!(a.stats(MemoryKind::Device).oom_retries, 2);
    assert_eq!(
        a.stats(MemoryKind::Device).reserved,
        20 * MIB,
        "the free small segment was released"
    );
    a.free(&mut d, mid.handle, Release::OnStream(S1)).unwrap();
    let retry = a.allocate(&mut d, &on(S0, 19 * MIB)).unwrap();
    assert!(matches!(
        retry.path,
        AllocPath::CachedFromStream { from: S1, .. } | AllocPath::Cached
    ));
}

#[test]
fn stale_and_foreign_handles_are_refused() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    let block = a.allocate(&mut d, &on(S0, 64)).unwrap();
    a.free(&mut d, block.handle, Release::Idle).unwrap();
    let again = a.allocate(&mut d, &on(S0, 64)).unwrap();
    assert_eq!(again.address, block.address);
    assert!(matches!(
        a.free(&mut d, block.handle, Release::Idle),
        Err(Error::UnknownAllocation { .. })
    ));
    assert!(matches!(
        a.mark_used_on(block.handle, S1),
        Err(Error::UnknownAllocation { .. })
    ));
    a.free(&mut d, again.handle, Release::Idle).unwrap();
}

#[test]
fn a_failed_driver_call_leaves_the_allocator_as_it_was() {
    let (mut a, mut d) = (allocator(true), FakeDriver::new(usize::MAX / 2));
    d.fail_at = Some(1);
    assert!(matches!(
        a.allocate(&mut d, &on(S0, 64)),
        Err(Error::Driver(_))
    ));
    assert_eq!(a.stats(MemoryKind::Device).reserved, 0);
    let block = a.allocate(&mut d, &on(S0, 64)).unwrap();
    a.mark_used_on(block.handle, S1).unwrap();
    d.fail_at = Some(d.calls + 1);
    assert!(matches!(
        a.free(&mut d, block.handle, Release::OnStream(S0)),
        Err(Error::Driver(_))
    ));
    a.check_consistency().unwrap();
    a.free(&mut d, block.handle, Release::OnStream(S0)).unwrap();
    a.check_consistency().unwrap();
}

/// The fake driver hands out segments from the top of the address space down, whatever the
/// pointer width, and reuses a returned range only once no pending work touches it; its first
/// form counted up from 4 GiB and never reused, which a 32-bit target cannot hold.
#[test]
fn the_fake_driver_reuses_returned_ranges_at_the_top_of_the_address_space() {
    let (device, kind, size) = (DeviceId(0), MemoryKind::Device, 256 * MIB);
    let mut d = FakeDriver::new(usize::MAX / 2);
    let top = d.allocate(device, kind, size).unwrap().unwrap();
    assert_eq!(top + size, usize::MAX - 4095, "the last page stays unused");
    d.enqueue(S0, top, size);
    d.free(device, kind, top, size, Some(S0)).unwrap();
    let meanwhile = d.allocate(device, kind, size).unwrap().unwrap();
    assert!(
        meanwhile + size <= top,
        "reused while work on S0 may use it"
    );
    d.free(device, kind, meanwhile, size, None).unwrap();
    d.progress(S0, 1);
    // 64 x 256 MiB: four times a 32-bit address space in all.
    for _ in 0..64 {
        assert_eq!(d.allocate(device, kind, size).unwrap(), Some(top));
        d.free(device, kind, top, size, None).unwrap();
    }
    assert_eq!(d.violations, Vec::<alloc::string::String>::new());
}
