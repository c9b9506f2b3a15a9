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
    let _ = capabilities;
}
