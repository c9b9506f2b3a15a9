//! Peer access: a plain copy reaches another device's pool memory only with peer access,
//! which needs a link on both devices and another device.

use super::*;

/// The peer rule of the module documentation, case by case as the CUDA driver answered it on
/// two H100s: device 1's plain copy refuses device 0's stream-ordered device memory until
/// device 1 has peer access to device 0; synchronous allocations, host kinds and the peer copy
/// are accepted throughout.
#[test]
fn a_plain_copy_reaches_another_devices_pool_memory_only_with_peer_access() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s0 = b.stream_create(D0).unwrap();
    let pooled = b
        .allocate_on_stream(s0, MemoryKind::Device, 256)
        .unwrap()
        .unwrap();
    let plain = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    let pinned = b
        .allocate_on_stream(s0, MemoryKind::HostPinned, 256)
        .unwrap()
        .unwrap();
    // SAFETY: device 0's stream fills its own allocations.
    unsafe {
        b.fill(s0, pooled, 0x5a, 256).unwrap();
        b.fill(s0, plain, 0x3c, 256).unwrap();
    }
    b.stream_synchronize(s0).unwrap();
    b.set_current_device(Some(D1)).unwrap();
    let s1 = b.stream_create(D1).unwrap();
    let target = b.allocate(D1, MemoryKind::Device, 256).unwrap().unwrap();
    let calls = b.calls().total;
    // SAFETY: live allocations of 256 bytes each; so for all copies below.
    let refused = unsafe { b.copy(s1, target, pooled, 256) };
    assert_eq!(code(refused), HostErrorCode::InvalidValue);
    // SAFETY: as above.
    let refused = unsafe { b.copy(s1, pooled, target, 256) };
    assert_eq!(code(refused), HostErrorCode::InvalidValue);
    assert_eq!(b.calls().total, calls + 2);
    // SAFETY: as above.
    unsafe { b.copy(s1, target, plain, 256) }.unwrap();
    // SAFETY: as above.
    unsafe { b.copy(s1, pinned, target, 256) }.unwrap();
    // The peer copy names each side's device, and a side of the wrong device is refused.
    // SAFETY: as above.
    unsafe { b.copy_peer(s1, target, D1, pooled, D0, 256) }.unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { read_back(&b, s1, target, 256) }, vec![0x5a; 256]);
    // SAFETY: as above.
    let wrong = unsafe { b.copy_peer(s1, target, D0, pooled, D0, 256) };
    assert_eq!(code(wrong), HostErrorCode::InvalidValue);
    assert!(b.peer_access_possible(D1, D0).unwrap());
    b.enable_peer_access(D1, D0).unwrap();
    b.enable_peer_access(D1, D0).unwrap();
    // SAFETY: as above.
    unsafe { b.copy(s1, target, pooled, 256) }.unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { read_back(&b, s1, target, 256) }, vec![0x5a; 256]);
    // One direction a call: device 0 still does not reach device 1's pool memory.
    let pooled_1 = b
        .allocate_on_stream(s1, MemoryKind::Device, 256)
        .unwrap()
        .unwrap();
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(
        // SAFETY: as above.
        code(unsafe { b.copy(s0, plain, pooled_1, 256) }),
        HostErrorCode::InvalidValue
    );
    b.stream_synchronize(s0).unwrap();
    b.free(D0, MemoryKind::Device, pooled, Some(s0)).unwrap();
    b.free(D0, MemoryKind::Device, plain, None).unwrap();
    b.free(D0, MemoryKind::HostPinned, pinned, None).unwrap();
    b.stream_destroy(s0).unwrap();
    b.set_current_device(Some(D1)).unwrap();
    b.stream_synchronize(s1).unwrap();
    b.free(D1, MemoryKind::Device, target, None).unwrap();
    b.free(D1, MemoryKind::Device, pooled_1, None).unwrap();
    b.stream_destroy(s1).unwrap();
    b.set_current_device(None).unwrap();
    zero_stats(&b);
}

#[test]
fn peer_access_needs_a_link_on_both_devices_and_another_device() {
    let mut config = HostConfig::with_devices(3);
    config.devices[2].peer_link = false;
    let b = HostBackend::new(config);
    assert!(b.peer_access_possible(D0, D1).unwrap());
    assert!(!b.peer_access_possible(D0, DeviceId(2)).unwrap());
    assert!(!b.peer_access_possible(DeviceId(2), D0).unwrap());
    assert!(!b.peer_access_possible(D0, D0).unwrap());
    assert!(matches!(
        b.peer_access_possible(D0, DeviceId(3)),
        Err(Error::UnknownDevice { .. })
    ));
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(
        code(b.enable_peer_access(D0, DeviceId(2))),
        HostErrorCode::PeerAccessUnsupported
    );
    assert_eq!(
        code(b.enable_peer_access(D0, D0)),
        HostErrorCode::PeerAccessUnsupported
    );
    // The device given access must be current, as every call acting on a device.
    assert_eq!(
        code(b.enable_peer_access(D1, D0)),
        HostErrorCode::WrongCurrentDevice
    );
    b.enable_peer_access(D0, D1).unwrap();
    b.set_current_device(None).unwrap();
}
