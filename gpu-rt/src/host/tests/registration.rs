//! Host registration: the driver's rules for registering and unregistering host ranges, and
//! host-pinned allocations counted as pinned.

use super::*;

#[test]
fn registration_follows_the_drivers_rules() {
    let b = backend();
    let host = vec![0u8; 8192];
    let p = addr(&host);
    let range = |start: usize, len: usize| ByteRange::new(start, len).unwrap();
    let mut ptrs = [0usize; 2];
    b.host_register(range(p, 4096), &mut ptrs).unwrap();
    assert_eq!(ptrs, [p, p]);
    let mut short = [0usize; 1];
    assert_eq!(
        code(b.host_register(range(p + 4096, 16), &mut short)),
        HostErrorCode::InvalidValue
    );
    let already = HostErrorCode::MemoryAlreadyRegistered;
    assert_eq!(code(b.host_register(range(p + 16, 16), &mut ptrs)), already);
    assert_eq!(
        code(b.host_register(range(p + 4000, 1000), &mut ptrs)),
        already
    );
    assert_eq!(code(b.host_register(range(p - 1, 2), &mut ptrs)), already);
    assert_eq!(b.stats().registered_ranges, 1);

    let mut extent_ptrs = [0usize; 2];
    assert_eq!(
        b.host_pinned_extent(p + 100, &mut extent_ptrs).unwrap(),
        Some(range(p, 4096))
    );
    assert_eq!(extent_ptrs, [p, p]);
    assert_eq!(
        b.host_pinned_extent(p + 4096, &mut extent_ptrs).unwrap(),
        None
    );

    assert_eq!(code(b.host_unregister(p + 1)), HostErrorCode::InvalidValue);
    b.host_unregister(p).unwrap();
    assert_eq!(
        code(b.host_unregister(p)),
        HostErrorCode::MemoryNotRegistered
    );
    assert_eq!(
        b.host_pinned_extent(p + 100, &mut extent_ptrs).unwrap(),
        None
    );
    zero_stats(&b);
}

#[test]
fn host_pinned_allocations_count_as_pinned() {
    let b = backend();
    b.set_current_device(Some(D1)).unwrap();
    let pinned = b
        .allocate(D1, MemoryKind::HostPinned, 1000)
        .unwrap()
        .unwrap();
    let device = b.allocate(D1, MemoryKind::Device, 1000).unwrap().unwrap();
    let mut ptrs = [0usize; 2];
    assert_eq!(
        b.host_pinned_extent(pinned + 999, &mut ptrs).unwrap(),
        ByteRange::new(pinned, 1000)
    );
    assert_eq!(ptrs, [pinned, pinned]);
    assert_eq!(b.host_pinned_extent(device, &mut ptrs).unwrap(), None);
    let over = |start| ByteRange::new(start, 10).unwrap();
    assert_eq!(
        code(b.host_register(over(pinned), &mut ptrs)),
        HostErrorCode::MemoryAlreadyRegistered
    );
    assert_eq!(
        code(b.host_register(over(device), &mut ptrs)),
        HostErrorCode::InvalidValue
    );
    b.free(D1, MemoryKind::HostPinned, pinned, None).unwrap();
    b.free(D1, MemoryKind::Device, device, None).unwrap();
    zero_stats(&b);
}
