//! Devices and the current device: the default configuration, the current device per thread
//! and per backend, saving and restoring it, and calls refused off the current device.

use super::*;

#[test]
fn default_config_has_two_h200_like_devices() {
    let b = backend();
    assert_eq!(b.device_count(), 2);
    let info = b.device_info(D1).unwrap();
    assert_eq!(info.workgroup.default_per_block, 48 * 1024);
    assert_eq!(info.workgroup.max_per_block(), 232_448);
    assert!(info.unified_addressing);
    assert!(!info.pageable_memory_access);
    assert!(info.allocator.device.stream_ordered);
    assert_eq!(
        b.device_info(DeviceId(2)),
        Err(Error::UnknownDevice {
            device: DeviceId(2),
            device_count: 2
        })
    );
}

#[test]
fn current_device_is_per_thread_and_per_backend() {
    let a = backend();
    let b = backend();
    a.set_current_device(Some(D1)).unwrap();
    assert_eq!(a.current_device().unwrap(), Some(D1));
    assert_eq!(b.current_device().unwrap(), None);
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(a.current_device().unwrap(), None));
    });
    a.set_current_device(None).unwrap();
    assert_eq!(a.current_device().unwrap(), None);
    assert!(matches!(
        a.set_current_device(Some(DeviceId(5))),
        Err(Error::UnknownDevice { .. })
    ));
}

#[test]
fn saving_and_restoring_the_current_device_round_trips() {
    let b = backend();
    let nothing = b.save_current().unwrap();
    assert_eq!(nothing, None);
    assert!(!b.is_current(nothing, D0));
    b.set_current_device(Some(D1)).unwrap();
    let saved = b.save_current().unwrap();
    assert!(b.is_current(saved, D1));
    assert!(!b.is_current(saved, D0));
    b.restore_current(nothing).unwrap();
    assert_eq!(b.current_device().unwrap(), None);
    b.restore_current(saved).unwrap();
    assert_eq!(b.current_device().unwrap(), Some(D1));
    assert!(matches!(
        b.restore_current(Some(DeviceId(5))),
        Err(Error::UnknownDevice { .. })
    ));
    assert_eq!(b.current_device().unwrap(), Some(D1));

    // Counted by kind, outside the total, and failable by kind with no effect.
    let before = b.calls();
    b.fail_nth(CallKind::RestoreCurrent, 1);
    assert_eq!(code(b.restore_current(None)), HostErrorCode::InjectedFault);
    assert_eq!(b.current_device().unwrap(), Some(D1));
    b.fail_nth(CallKind::SaveCurrent, 1);
    assert_eq!(code(b.save_current()), HostErrorCode::InjectedFault);
    let made = b.calls().since(&before);
    assert_eq!(made.of(CallKind::RestoreCurrent), 1);
    assert_eq!(made.of(CallKind::SaveCurrent), 1);
    assert_eq!(made.total, 0);
    b.set_current_device(None).unwrap();
}

#[test]
fn calls_on_a_device_that_is_not_current_are_refused() {
    let b = backend();
    let wrong = HostErrorCode::WrongCurrentDevice;
    assert_eq!(code(b.allocate(D0, MemoryKind::Device, 64)), wrong);
    assert_eq!(code(b.stream_create(D0)), wrong);
    assert_eq!(code(b.event_create(D0)), wrong);
    assert_eq!(code(b.kernel(D0, "fill_u32")), wrong);

    b.set_current_device(Some(D0)).unwrap();
    let stream = b.stream_create(D0).unwrap();
    let event = b.event_create(D0).unwrap();
    let kernel = b.kernel(D0, "fill_u32").unwrap();
    let buffer = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    let mut host = [0u8; 16];

    b.set_current_device(Some(D1)).unwrap();
    assert_eq!(code(b.allocate(D0, MemoryKind::Device, 64)), wrong);
    assert_eq!(
        code(b.allocate_on_stream(stream, MemoryKind::Device, 64)),
        wrong
    );
    assert_eq!(code(b.free(D0, MemoryKind::Device, buffer, None)), wrong);
    assert_eq!(code(b.stream_synchronize(stream)), wrong);
    assert_eq!(code(b.stream_destroy(stream)), wrong);
    assert_eq!(code(b.event_record(event, stream)), wrong);
    assert_eq!(code(b.stream_wait_event(stream, event)), wrong);
    assert_eq!(code(b.event_destroy(event)), wrong);
    assert_eq!(
        // SAFETY: each call is refused before anything is enqueued (the host backend checks the
        // current device, the handles and the allocation bounds first).
        code(unsafe { b.copy(stream, addr_mut(&mut host), buffer, 16) }),
        wrong
    );
    // SAFETY: as above.
    assert_eq!(code(unsafe { b.fill(stream, buffer, 1, 16) }), wrong);
    assert_eq!(
        code(b.kernel_allow_workgroup_bytes(kernel, 64 * 1024)),
        wrong
    );
    assert_eq!(
        // SAFETY: as above.
        code(unsafe { b.launch(stream, kernel, LaunchDims::linear(1, 1), &[]) }),
        wrong
    );
    assert_eq!(code(b.device_synchronize(D0)), wrong);

    // Needing no current device: event query and synchronise, host registration.
    b.set_current_device(None).unwrap();
    assert!(b.event_query(event).unwrap());
    b.event_synchronize(event).unwrap();
    let mut ptrs = [0usize; 2];
    b.host_register(ByteRange::new(addr(&host), 16).unwrap(), &mut ptrs)
        .unwrap();
    assert!(
        b.host_pinned_extent(addr(&host), &mut ptrs)
            .unwrap()
            .is_some()
    );
    b.host_unregister(addr(&host)).unwrap();

    b.set_current_device(Some(D0)).unwrap();
    b.free(D0, MemoryKind::Device, buffer, None).unwrap();
    b.event_destroy(event).unwrap();
    b.stream_destroy(stream).unwrap();
    zero_stats(&b);
}
