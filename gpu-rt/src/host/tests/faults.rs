//! Faults and counters: calls counted by kind, faults by kind and by global count changing
//! nothing, and each call of a scenario failed in turn leaking nothing.

use super::*;

#[test]
fn calls_are_counted_by_kind_and_in_total() {
    let b = backend();
    let start = b.calls();
    b.set_current_device(Some(D0)).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let _ = b.allocate(D0, MemoryKind::Device, 0);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    let made = b.calls().since(&start);
    assert_eq!(made.of(CallKind::Allocate), 2);
    assert_eq!(made.of(CallKind::Free), 1);
    assert_eq!(made.of(CallKind::SetCurrentDevice), 1);
    assert_eq!(made.total, 3);
}

#[test]
fn a_fault_by_kind_fails_the_nth_call_and_changes_nothing() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let e = b.event_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    let host = vec![0u8; 256];
    let mut ptrs = [0usize; 2];
    let host_range = ByteRange::new(addr(&host), 256).unwrap();
    let injected = HostErrorCode::InjectedFault;

    b.fail_nth(CallKind::Allocate, 2);
    let first = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let stats = b.stats();
    assert_eq!(code(b.allocate(D0, MemoryKind::Device, 64)), injected);
    assert_eq!(b.stats().allocations, stats.allocations);
    b.free(D0, MemoryKind::Device, first, None).unwrap();

    let base = b.stats();
    let checks: [(CallKind, &dyn Fn() -> Result<()>); 14] = [
        (CallKind::Free, &|| {
            b.free(D0, MemoryKind::Device, a, Some(s))
        }),
        (CallKind::HostRegister, &|| {
            b.host_register(host_range, &mut [0usize; 2])
        }),
        (CallKind::StreamCreate, &|| b.stream_create(D0).map(drop)),
        (CallKind::StreamDestroy, &|| b.stream_destroy(s)),
        (CallKind::EventCreate, &|| b.event_create(D0).map(drop)),
        (CallKind::EventDestroy, &|| b.event_destroy(e)),
        (CallKind::EventRecord, &|| b.event_record(e, s)),
        (CallKind::StreamWaitEvent, &|| b.stream_wait_event(s, e)),
        // SAFETY: failed by the injected fault before anything is enqueued; besides, `a` is
        // a live allocation and `host` outlives `b`'s work.
        (CallKind::Copy, &|| unsafe {
            b.copy(s, a, addr(&host), 256)
        }),
        // SAFETY: as for the copy.
        (CallKind::Fill, &|| unsafe { b.fill(s, a, 1, 256) }),
        (CallKind::KernelLoad, &|| b.kernel(D0, "axpy_f32").map(drop)),
        // SAFETY: no pointer arguments.
        (CallKind::Launch, &|| unsafe {
            launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 1), &[])
        }),
        (CallKind::AllocateOnStream, &|| {
            b.allocate_on_stream(s, MemoryKind::Device, 64).map(drop)
        }),
        (CallKind::StreamSynchronize, &|| b.stream_synchronize(s)),
    ];
    for (fired, (kind, call)) in (1..).zip(checks) {
        b.fail_nth(kind, 1);
        assert_eq!(code(call()), injected, "{kind:?}");
        b.stream_synchronize(s).unwrap();
        let expected = HostStats {
            faults_injected: base.faults_injected + fired,
            ..base
        };
        assert_eq!(b.stats(), expected, "{kind:?}");
        assert!(b.work_log().is_empty(), "{kind:?} enqueued work");
        assert!(b.event_query(e).unwrap(), "{kind:?} recorded the event");
    }

    b.host_register(host_range, &mut ptrs).unwrap();
    b.fail_nth(CallKind::HostUnregister, 1);
    b.fail_nth(CallKind::HostPinnedExtent, 1);
    b.fail_nth(CallKind::EventQuery, 1);
    b.fail_nth(CallKind::EventSynchronize, 1);
    b.fail_nth(CallKind::DeviceSynchronize, 1);
    b.fail_nth(CallKind::DeviceInfo, 1);
    b.fail_nth(CallKind::SetCurrentDevice, 1);
    assert_eq!(code(b.host_unregister(addr(&host))), injected);
    assert_eq!(code(b.host_pinned_extent(addr(&host), &mut ptrs)), injected);
    assert_eq!(code(b.event_query(e)), injected);
    assert_eq!(code(b.event_synchronize(e)), injected);
    assert_eq!(code(b.device_synchronize(D0)), injected);
    assert_eq!(code(b.device_info(D0)), injected);
    assert_eq!(code(b.set_current_device(Some(D1))), injected);
    assert_eq!(b.current_device().unwrap(), Some(D0));
    assert_eq!(b.clear_faults(), 0);
    b.host_unregister(addr(&host)).unwrap();

    b.free(D0, MemoryKind::Device, a, None).unwrap();
    b.event_destroy(e).unwrap();
    b.stream_destroy(s).unwrap();
    zero_stats(&b);
}

#[test]
fn a_fault_by_global_count_also_skips_calls_outside_the_total() {
    let b = backend();
    b.fail_nth_call(2);
    b.set_current_device(Some(D0)).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    assert_eq!(b.current_device().unwrap(), Some(D0));
    assert_eq!(code(b.stream_create(D0)), HostErrorCode::InjectedFault);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    assert_eq!(b.clear_faults(), 0);
    zero_stats(&b);
}

/// Objects a scenario made and has not yet destroyed.
#[derive(Default)]
struct Made {
    streams: Vec<(DeviceId, HostStream)>,
    events: Vec<(DeviceId, HostEvent)>,
    allocations: Vec<(DeviceId, usize)>,
    registered: Vec<usize>,
}

impl Made {
    /// Destroys what is left (no fault is armed any more: each fires once).
    fn clean_up(self, b: &HostBackend) {
        for (device, stream) in self.streams {
            b.set_current_device(Some(device)).unwrap();
            b.stream_destroy(stream).unwrap();
        }
        for (device, event) in self.events {
            b.set_current_device(Some(device)).unwrap();
            b.event_destroy(event).unwrap();
        }
        for (device, address) in self.allocations {
            b.set_current_device(Some(device)).unwrap();
            b.free(device, MemoryKind::Device, address, None).unwrap();
        }
        for start in self.registered {
            b.host_unregister(start).unwrap();
        }
        b.set_current_device(None).unwrap();
    }
}

/// Two devices, a kernel on device 0, a cross-device wait, a copy back into registered memory
/// on device 1, which peer access lets reach device 0's stream-ordered memory.
///
/// # Safety
/// `host` stays valid and untouched until `b`'s queued work has run (a failed scenario may
/// leave its copy into it queued): drop `b` first.
unsafe fn scenario(b: &HostBackend, made: &mut Made, host: &mut [u32]) -> Result<()> {
    const WORDS: usize = 1024;
    let oom = Error::HostOutOfMemory { what: "scenario" };
    b.set_current_device(Some(D0))?;
    let _ = b.device_info(D0)?;
    let s0 = b.stream_create(D0)?;
    made.streams.push((D0, s0));
    let e0 = b.event_create(D0)?;
    made.events.push((D0, e0));
    let a = b
        .allocate_on_stream(s0, MemoryKind::Device, WORDS * 4)?
        .ok_or(oom)?;
    made.allocations.push((D0, a));
    let mut ptrs = [0usize; 2];
    let host_range =
        ByteRange::new(addr_mut(host), WORDS * 4).ok_or(Error::ZeroSize { what: "host" })?;
    b.host_register(host_range, &mut ptrs)?;
    made.registered.push(host_range.start);
    b.host_pinned_extent(host_range.start, &mut ptrs)?;
    let k = b.kernel(D0, "fill_u32")?;
    // SAFETY: `a` is a live allocation of `WORDS` words, the kernel's only pointer.
    unsafe {
        b.launch(
            s0,
            k,
            LaunchDims::linear(2, 64),
            &[
                KernelArg::Ptr(a),
                KernelArg::U32(7),
                KernelArg::U64(WORDS as u64),
            ],
        )
    }?;
    b.event_record(e0, s0)?;

    b.set_current_device(Some(D1))?;
    // Device 1's stream copies device 0's stream-ordered memory: only with peer access.
    b.enable_peer_access(D1, D0)?;
    let s1 = b.stream_create(D1)?;
    made.streams.push((D1, s1));
    b.stream_wait_event(s1, e0)?;
    // SAFETY: `a` is live until the stream-ordered free after this copy; the caller keeps
    // `host` valid and untouched until the copy has run.
    unsafe { b.copy(s1, host_range.start, a, WORDS * 4) }?;
    b.stream_synchronize(s1)?;
    b.event_query(e0)?;
    b.stream_destroy(s1)?;
    made.streams.pop();
    b.host_unregister(host_range.start)?;
    made.registered.pop();

    b.set_current_device(Some(D0))?;
    b.free(D0, MemoryKind::Device, a, Some(s0))?;
    made.allocations.pop();
    b.event_synchronize(e0)?;
    b.event_destroy(e0)?;
    made.events.pop();
    b.stream_destroy(s0)?;
    made.streams.pop();
    b.set_current_device(None)
}

#[test]
fn failing_each_call_of_a_scenario_in_turn_leaks_nothing() {
    let mut host = vec![0u32; 1024];
    let clean = backend();
    let mut made = Made::default();
    // SAFETY: `host` outlives `clean`, declared after it.
    unsafe { scenario(&clean, &mut made, &mut host) }.unwrap();
    assert!(host.iter().all(|&w| w == 7));
    let calls = clean.calls().total;
    assert!(calls >= 20, "{calls} calls");
    zero_stats(&clean);

    for n in 1..=calls {
        // Declared first so that it outlives the backend's workers (a failed scenario leaves
        // its copy into it queued).
        let mut host = vec![0u32; 1024];
        let b = backend();
        let mut made = Made::default();
        b.fail_nth_call(n);
        // SAFETY: `host` outlives `b`, declared after it.
        let result = unsafe { scenario(&b, &mut made, &mut host) };
        assert_eq!(code(result), HostErrorCode::InjectedFault, "call {n}");
        assert_eq!(b.clear_faults(), 0, "call {n}: the fault did not fire");
        made.clean_up(&b);
        zero_stats(&b);
        assert_eq!(b.stats().faults_injected, 1);
    }
}
