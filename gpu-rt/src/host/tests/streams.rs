//! Streams and events: records and waits across devices, work in order, destroys with work
//! queued, events never recorded, device synchronisation, and invalid handles.

use super::*;

#[test]
fn recording_an_event_on_another_devices_stream_is_refused() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let event = b.event_create(D0).unwrap();
    b.set_current_device(Some(D1)).unwrap();
    let stream = b.stream_create(D1).unwrap();
    assert_eq!(
        code(b.event_record(event, stream)),
        HostErrorCode::InvalidHandle
    );
    // Nothing was recorded or enqueued.
    assert!(b.event_query(event).unwrap());
    b.stream_synchronize(stream).unwrap();
    assert!(b.work_log().is_empty());
    b.stream_destroy(stream).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    b.event_destroy(event).unwrap();
}

#[test]
fn a_stream_of_one_device_waits_for_an_event_of_another() {
    let b = backend();
    const BYTES: usize = 4 << 20;
    b.set_current_device(Some(D0)).unwrap();
    let s0 = b.stream_create(D0).unwrap();
    let e0 = b.event_create(D0).unwrap();
    let buffer = b.allocate(D0, MemoryKind::Device, BYTES).unwrap().unwrap();
    for value in 1..=8u8 {
        // SAFETY: a live allocation of `b`, held by the host backend for the fill.
        unsafe { b.fill(s0, buffer, value, BYTES) }.unwrap();
    }
    b.event_record(e0, s0).unwrap();

    b.set_current_device(Some(D1)).unwrap();
    let s1 = b.stream_create(D1).unwrap();
    b.stream_wait_event(s1, e0).unwrap();
    let mut host = vec![0u8; BYTES];
    // SAFETY: `buffer` is a live allocation; `host` is untouched until the synchronise below.
    unsafe { b.copy(s1, addr_mut(&mut host), buffer, BYTES) }.unwrap();
    b.stream_synchronize(s1).unwrap();
    assert!(host.iter().all(|&byte| byte == 8));

    let log = b.work_log();
    let last_fill = log
        .iter()
        .filter(|r| {
            matches!(
                r.op,
                WorkOp::Fill {
                    value: FillValue::U8(8),
                    ..
                }
            )
        })
        .map(|r| r.finished)
        .max()
        .unwrap();
    let copy = log
        .iter()
        .find(|r| matches!(r.op, WorkOp::Copy { .. }))
        .unwrap();
    assert!(copy.started > last_fill);
    assert_eq!(copy.device, D1);

    b.stream_destroy(s1).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    b.stream_destroy(s0).unwrap();
    b.event_destroy(e0).unwrap();
    b.free(D0, MemoryKind::Device, buffer, None).unwrap();
    zero_stats(&b);
}

#[test]
fn a_stream_runs_its_work_in_order() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 1024).unwrap().unwrap();
    let mut first = vec![0u8; 1024];
    let mut second = vec![0u8; 1024];
    // SAFETY: `a` is a live allocation; `first` and `second` are untouched until the
    // synchronise below.
    unsafe {
        b.fill(s, a, 1, 1024).unwrap();
        b.copy(s, addr_mut(&mut first), a, 1024).unwrap();
        b.fill(s, a, 2, 1024).unwrap();
        b.copy(s, addr_mut(&mut second), a, 1024).unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert!(first.iter().all(|&x| x == 1));
    assert!(second.iter().all(|&x| x == 2));
    let log = b.work_log();
    assert_eq!(log.len(), 4);
    for pair in log.windows(2) {
        assert!(pair[0].started < pair[0].finished);
        assert!(pair[1].started > pair[0].finished);
        assert_eq!(pair[1].outcome, WorkOutcome::Done);
    }
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    b.stream_destroy(s).unwrap();
}

#[test]
fn destroying_a_stream_with_queued_work_still_runs_it() {
    let b = backend();
    let gate = Gate::install(&b);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let e = b.event_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    // SAFETY: no pointer arguments; `a` is a live allocation of `b`.
    unsafe {
        launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]).unwrap();
        b.fill(s, a, 7, 256).unwrap();
    }
    b.event_record(e, s).unwrap();
    b.stream_destroy(s).unwrap();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::InvalidHandle);
    assert!(!b.event_query(e).unwrap());
    gate.open();
    b.event_synchronize(e).unwrap();
    let s2 = b.stream_create(D0).unwrap();
    // SAFETY: `a` is a live allocation of `b`.
    assert!(unsafe { read_back(&b, s2, a, 256) }.iter().all(|&x| x == 7));
    b.stream_destroy(s2).unwrap();
    b.event_destroy(e).unwrap();
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    zero_stats(&b);
}

#[test]
fn an_event_never_recorded_is_complete_and_waits_capture_the_last_record() {
    let b = backend();
    let gate = Gate::install(&b);
    b.set_current_device(Some(D0)).unwrap();
    let (s, other) = (b.stream_create(D0).unwrap(), b.stream_create(D0).unwrap());
    let e = b.event_create(D0).unwrap();
    assert!(b.event_query(e).unwrap());
    b.event_synchronize(e).unwrap();
    b.stream_wait_event(other, e).unwrap();
    b.stream_synchronize(other).unwrap();

    // SAFETY: no pointer arguments.
    unsafe { launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]) }.unwrap();
    b.event_record(e, s).unwrap();
    b.stream_wait_event(other, e).unwrap();
    // The wait stays valid after the event is gone.
    b.event_destroy(e).unwrap();
    assert_eq!(code(b.event_query(e)), HostErrorCode::InvalidHandle);
    gate.open();
    b.stream_synchronize(other).unwrap();
    b.device_synchronize(D0).unwrap();
    b.stream_destroy(s).unwrap();
    b.stream_destroy(other).unwrap();
    zero_stats(&b);
}

#[test]
fn device_synchronize_waits_for_every_stream_of_the_device() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let streams: Vec<_> = (0..3).map(|_| b.stream_create(D0).unwrap()).collect();
    let a = b
        .allocate(D0, MemoryKind::Device, 3 << 20)
        .unwrap()
        .unwrap();
    for (i, &s) in streams.iter().enumerate() {
        // SAFETY: the i-th MiB of the live 3 MiB allocation `a`.
        unsafe { b.fill(s, a + (i << 20), i as u8 + 1, 1 << 20) }.unwrap();
    }
    b.device_synchronize(D0).unwrap();
    assert_eq!(b.work_log().len(), 3);
    for s in streams {
        b.stream_destroy(s).unwrap();
    }
    b.free(D0, MemoryKind::Device, a, None).unwrap();
}

#[test]
fn handles_of_another_backend_or_destroyed_objects_are_invalid() {
    let (a, b) = (backend(), backend());
    a.set_current_device(Some(D0)).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    let s = a.stream_create(D0).unwrap();
    let e = a.event_create(D0).unwrap();
    let k = a.kernel(D0, "fill_u32").unwrap();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::InvalidHandle);
    assert_eq!(code(b.event_query(e)), HostErrorCode::InvalidHandle);
    assert_eq!(
        code(b.kernel_allow_workgroup_bytes(k, 0)),
        HostErrorCode::InvalidHandle
    );
    a.stream_destroy(s).unwrap();
    a.event_destroy(e).unwrap();
    assert_eq!(code(a.stream_destroy(s)), HostErrorCode::InvalidHandle);
    assert_eq!(code(a.event_destroy(e)), HostErrorCode::InvalidHandle);
}
