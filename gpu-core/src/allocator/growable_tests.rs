//! Unit tests of growable segments (reserved ranges mapped in granules), one scenario each,
//! over the model's fake driver with virtual memory. Random sequences live in
//! tests/allocator_model.rs.

use super::model::{FakeDriver, capabilities};
use super::*;
use alloc::string::String;
use alloc::vec::Vec;

const S0: StreamId = StreamId(0);
const MIB: usize = 1 << 20;
const GRANULARITY: usize = 2 * MIB;

fn vm_driver() -> FakeDriver {
    let mut d = FakeDriver::new(usize::MAX / 2);
    d.granularity = Some(GRANULARITY);
    d
}

#[test]
fn the_fake_driver_maps_only_inside_reservations_and_unmaps_only_what_is_mapped() {
    let (device, kind) = (DeviceId(0), MemoryKind::Device);
    let mut d = vm_driver();
    let base = d.reserve(device, kind, 8 * GRANULARITY).unwrap().unwrap();
    assert!(base.is_multiple_of(GRANULARITY));
    assert!(d.map(device, kind, base, 2 * GRANULARITY).unwrap());
    assert!(
        d.map(device, kind, base + 2 * GRANULARITY, GRANULARITY)
            .unwrap()
    );
    assert_eq!(d.mapped_bytes(kind), 3 * GRANULARITY);
    assert!(d.inside_segment(kind, base + GRANULARITY, 2 * GRANULARITY));
    assert!(!d.inside_segment(kind, base + 2 * GRANULARITY, 2 * GRANULARITY));
    // Across the two pieces, in whole granules: fine.
    d.unmap(device, kind, base + GRANULARITY, 2 * GRANULARITY, Some(S0))
        .unwrap();
    assert_eq!(d.mapped_bytes(kind), GRANULARITY);
    assert_eq!(d.violations, Vec::<String>::new());

    // Each misuse is seen and changes nothing.
    assert!(
        !d.map(device, kind, base, GRANULARITY).unwrap(),
        "over mapped bytes"
    );
    assert!(
        !d.map(device, kind, base + 7 * GRANULARITY, 2 * GRANULARITY)
            .unwrap()
    );
    d.unmap(device, kind, base + GRANULARITY, GRANULARITY, None)
        .unwrap();
    d.release_reservation(device, kind, base, 8 * GRANULARITY)
        .unwrap();
    assert_eq!(d.violations.len(), 4, "{:?}", d.violations);
    assert_eq!(d.mapped_bytes(kind), GRANULARITY);

    d.violations.clear();
    d.unmap(device, kind, base, GRANULARITY, None).unwrap();
    d.release_reservation(device, kind, base, 8 * GRANULARITY)
        .unwrap();
    assert!(d.live_reservations().is_empty() && d.violations.is_empty());
    // A driver without a granularity has no virtual memory.
    assert_eq!(
        FakeDriver::new(MIB).granularity(device, kind).unwrap(),
        None
    );
}

fn growable(reservation: usize) -> DeviceAllocator {
    let config = AllocatorConfig {
        growable_segments: true,
        growable_reservation: reservation,
        ..AllocatorConfig::default()
    };
    DeviceAllocator::new(DeviceId(0), capabilities([true; 3], true), config)
}

fn on(stream: StreamId, size: usize) -> AllocRequest<'static> {
    AllocRequest::new(MemoryKind::Device, size).on_stream(stream, &[])
}

#[test]
fn growing_requests_held_together_map_more_of_one_reservation() {
    let (mut a, mut d) = (growable(1 << 30), vm_driver());
    let mut live = Vec::new();
    let mut held = 0;
    for mib in 2..=12 {
        let block = a.allocate(&mut d, &on(S0, mib * MIB)).unwrap();
        assert_eq!(block.path, AllocPath::Grown);
        held += mib * MIB;
        live.push(block);
        let stats = a.stats(MemoryKind::Device);
        assert!(
            stats.mapped <= held + GRANULARITY,
            "{} mapped for {held} live",
            stats.mapped
        );
        assert_eq!(stats.reserved, stats.mapped);
    }
    // Each block follows the one before it in the one range.
    for pair in live.windows(2) {
        assert_eq!(pair[0].address + pair[0].size, pair[1].address);
    }
    let stats = a.stats(MemoryKind::Device);
    assert_eq!((stats.segments, stats.segment_allocations), (1, 1));
    assert_eq!((d.reservations_made, d.synchronous_allocations), (1, 0));
    assert_eq!(d.stream_ordered_allocations, 0);
    assert_eq!(stats.reserved_address_space, 1 << 30);
    assert_eq!(stats.segment_grows, 11);
    a.check_consistency().unwrap();
    assert!(d.violations.is_empty(), "{:?}", d.violations);
}

#[test]
fn new_granules_join_the_free_block_at_the_end() {
    let (mut a, mut d) = (growable(1 << 30), vm_driver());
    let first = a.allocate(&mut d, &on(S0, 3 * MIB)).unwrap();
    assert_eq!(a.stats(MemoryKind::Device).mapped, 4 * MIB);
    // 1 MiB free at the end: 2 MiB more needs one more granule, not two.
    let second = a.allocate(&mut d, &on(S0, 2 * MIB)).unwrap();
    assert_eq!(
        (second.path, second.address),
        (AllocPath::Grown, first.address + 3 * MIB)
    );
    assert_eq!(a.stats(MemoryKind::Device).mapped, 6 * MIB);
    // Freed, the block joins the free end again and serves a bigger request at once.
    a.free(&mut d, second.handle, Release::OnStream(S0))
        .unwrap();
    let third = a.allocate(&mut d, &on(S0, 3 * MIB)).unwrap();
    assert_eq!(
        (third.path, third.address),
        (AllocPath::Cached, second.address)
    );
    a.check_consistency().unwrap();
    assert!(d.violations.is_empty(), "{:?}", d.violations);
}

#[test]
fn a_trim_unmaps_the_free_end_but_never_a_live_block() {
    let (mut a, mut d) = (growable(1 << 30), vm_driver());
    let low = a.allocate(&mut d, &on(S0, 3 * MIB)).unwrap();
    let high = a.allocate(&mut d, &on(S0, 8 * MIB)).unwrap();
    d.enqueue(S0, high.address, high.size);
    a.free(&mut d, high.handle, Release::OnStream(S0)).unwrap();
    assert_eq!(a.stats(MemoryKind::Device).mapped, 12 * MIB);
    let released = a.trim(&mut d).unwrap();
    // The live 3 MiB keep their two granules; the rest goes, after S0's work on it.
    assert_eq!(released, 8 * MIB);
    let stats = a.stats(MemoryKind::Device);
    assert_eq!(
        (stats.mapped, stats.reserved, stats.segment_shrinks),
        (4 * MIB, 4 * MIB, 1)
    );
    assert!(d.inside_segment(MemoryKind::Device, low.address, low.size));
    a.check_trimmed().unwrap();
    a.check_consistency().unwrap();
    assert!(d.violations.is_empty(), "{:?}", d.violations);

    // Once the last block goes, so do the memory and the reservation.
    a.free(&mut d, low.handle, Release::Idle).unwrap();
    assert_eq!(a.trim(&mut d).unwrap(), 4 * MIB);
    let stats = a.stats(MemoryKind::Device);
    assert_eq!((stats.segments, stats.reserved_address_space), (0, 0));
    assert!(d.live_reservations().is_empty() && d.violations.is_empty());
    // The next miss reserves again.
    a.allocate(&mut d, &on(S0, MIB)).unwrap();
    assert_eq!(d.reservations_made, 2);
}

#[test]
fn a_full_reservation_makes_another_and_without_virtual_memory_nothing_changes() {
    let (mut a, mut d) = (growable(8 * MIB), vm_driver());
    a.allocate(&mut d, &on(S0, 6 * MIB)).unwrap();
    let next = a.allocate(&mut d, &on(S0, 4 * MIB)).unwrap();
    assert_eq!(next.path, AllocPath::Grown);
    assert_eq!(d.reservations_made, 2);
    // A request larger than the configured range reserves what it needs.
    a.allocate(&mut d, &on(S0, 30 * MIB)).unwrap();
    assert_eq!(
        a.stats(MemoryKind::Device).reserved_address_space,
        (8 + 8 + 30) * MIB
    );

    let (mut plain, mut no_vm) = (growable(1 << 30), FakeDriver::new(usize::MAX / 2));
    let block = plain.allocate(&mut no_vm, &on(S0, 6 * MIB)).unwrap();
    assert_eq!(block.path, AllocPath::DriverStreamOrdered);
    assert_eq!(plain.stats(MemoryKind::Device).mapped, 0);
}

#[test]
fn a_failed_or_refused_map_leaves_the_allocator_as_it_was() {
    let (mut a, mut d) = (growable(1 << 30), vm_driver());
    let first = a.allocate(&mut d, &on(S0, 3 * MIB)).unwrap();
    let before = a.stats(MemoryKind::Device);
    // The map call fails (the granularity is known, so it is the next call).
    d.fail_at = Some(d.calls + 1);
    assert!(matches!(
        a.allocate(&mut d, &on(S0, 4 * MIB)),
        Err(Error::Driver(_))
    ));
    let after = a.stats(MemoryKind::Device);
    assert_eq!(
        (after.mapped, after.allocated, after.segments),
        (before.mapped, before.allocated, before.segments)
    );
    a.check_consistency().unwrap();
    // Out of memory for the granules: the ladder runs, then a typed error.
    d.capacity = d.live_bytes(MemoryKind::Device);
    assert!(matches!(
        a.allocate(&mut d, &on(S0, 4 * MIB)),
        Err(Error::OutOfMemory { .. })
    ));
    a.check_consistency().unwrap();
    assert!(d.inside_segment(MemoryKind::Device, first.address, first.size));
    assert!(d.violations.is_empty(), "{:?}", d.violations);
}
