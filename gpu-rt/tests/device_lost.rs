//! The failure model on the host backend, through the runtime: a call refused for its
//! arguments affects nothing else; work that fails on a device (a kernel's illegal address)
//! loses that device, so every later call on it is `Error::DeviceLost` naming the first
//! failure, while the other device keeps working, and shutdown still gives everything back.
//! Before, the failed stream went back to the pool with its error and every later fill on the
//! device failed with the driver's bare code, and a failed record poisoned the whole runtime.

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::LaunchDims;
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig, HostErrorCode};
use gpu_rt::runtime::{LeftBehind, Runtime};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn lost_by_illegal_address(error: &Error, device: DeviceId) -> bool {
    matches!(error, Error::DeviceLost { device: d, cause }
        if *d == device && HostErrorCode::of(cause) == Some(HostErrorCode::IllegalAddress))
}

#[test]
fn a_kernel_fault_loses_its_device_and_the_other_device_keeps_working() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    backend.register_kernel("fault", |_, _| {
        Err(HostErrorCode::IllegalAddress.error("launch"))
    });
    let rt = Runtime::new(backend).unwrap();
    let on_0 = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let on_1 = rt.alloc(D1, MemoryKind::Device, 4096).unwrap();
    // A refused call (a zero-sized grid) changes nothing: the device goes on.
    // SAFETY: no pointer arguments.
    let refused = unsafe { rt.launch(D0, "fault", LaunchDims::linear(0, 1), &[], &mut vec![]) };
    assert!(refused.is_err());
    rt.wait(rt.fill(D0, on_0.all(), 1, &mut vec![]).unwrap())
        .unwrap();
    assert_eq!(rt.device_lost(D0), None);

    // SAFETY: no pointer arguments.
    let faulted = unsafe { rt.launch(D0, "fault", LaunchDims::linear(1, 1), &[], &mut vec![]) };
    let error = rt.wait(faulted.unwrap()).unwrap_err();
    assert!(lost_by_illegal_address(&error, D0), "{error}");
    assert!(rt.device_lost(D0).is_some());
    for _ in 0..20 {
        let refused = rt.fill(D0, on_0.all(), 2, &mut vec![]).unwrap_err();
        assert!(lost_by_illegal_address(&refused, D0), "{refused}");
    }
    assert!(lost_by_illegal_address(
        &rt.alloc(D0, MemoryKind::Device, 64).err().unwrap(),
        D0
    ));
    assert!(lost_by_illegal_address(
        &rt.kernel(D0, "fill_u32").err().unwrap(),
        D0
    ));
    let copy = rt
        .copy(D1, on_1.all(), on_0.all(), &mut vec![])
        .unwrap_err();
    assert!(lost_by_illegal_address(&copy, D0), "{copy}");

    // Device 1 is untouched: work, allocations and reads go on.
    assert_eq!(rt.device_lost(D1), None);
    let filled = rt.fill(D1, on_1.all(), 7, &mut vec![]).unwrap();
    let mut back = vec![0u8; 4096];
    rt.download(D1, &mut back, on_1.all(), &mut vec![filled])
        .unwrap();
    assert!(back.iter().all(|&b| b == 7));
    let more = rt.alloc(D1, MemoryKind::Device, 1 << 20).unwrap();
    rt.wait(rt.fill(D1, more.all(), 3, &mut vec![]).unwrap())
        .unwrap();
    drop((on_0, on_1, more));
    // Shutdown goes on past the lost device's failures and gives everything back.
    let report = rt.shutdown_report();
    assert!(!report.errors.is_empty());
    assert!(
        report.errors.iter().all(|e| lost_by_illegal_address(e, D0)),
        "{:?}",
        report.errors
    );
    assert_eq!(report.left, LeftBehind::default());
    assert!(report.into_result().is_ok());
}

/// Shutdown returns its report even when it fails, with the failures it met and what it
/// could not give back; `shutdown` turns a failure a lost device does not explain into an
/// error.
#[test]
fn shutdown_reports_what_it_met_and_left() {
    let backend = HostBackend::new(HostConfig::with_devices(1));
    let rt = Runtime::new(backend).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    rt.wait(rt.fill(D0, buffer.all(), 1, &mut vec![]).unwrap())
        .unwrap();
    drop(buffer);
    rt.backend().fail_nth(CallKind::Free, 1);
    rt.backend().fail_nth(CallKind::Free, 2);
    let report = rt.shutdown_report();
    assert_eq!(report.errors.len(), 2, "{:?}", report.errors);
    assert!(report.left.reserved_bytes > 0);
    let error = report.clone().into_result().unwrap_err();
    assert_eq!(
        HostErrorCode::of(&error),
        Some(HostErrorCode::InjectedFault)
    );
}

/// A reset brings a lost device back: refused while live tokens have work on it; afterwards
/// its buffers and kernels from before are typed errors (dropping the buffers is fine), new
/// ones work, the other device's buffers and peer access are as before, and shutdown gives
/// everything back with no error.
#[test]
fn a_reset_brings_a_lost_device_back_and_refuses_what_it_freed() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    backend.register_kernel("fault", |_, _| {
        Err(HostErrorCode::IllegalAddress.error("launch"))
    });
    let rt = Runtime::new(backend).unwrap();
    let old = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let on_1 = rt.alloc(D1, MemoryKind::Device, 4096).unwrap();
    let fill_u32 = rt.kernel(D0, "fill_u32").unwrap();
    let pending = rt.fill(D0, old.all(), 1, &mut vec![]).unwrap();
    // SAFETY: no pointer arguments.
    let faulted = unsafe { rt.launch(D0, "fault", LaunchDims::linear(1, 1), &[], &mut vec![]) };
    let lost = rt.wait(faulted.unwrap()).unwrap_err();
    assert!(lost_by_illegal_address(&lost, D0), "{lost}");

    // The fill's token is still live: its work is on the lost device.
    assert_eq!(
        rt.reset_device(D0),
        Err(Error::LiveWorkOnDevice {
            device: D0,
            tokens: 1
        })
    );
    let _ = rt.wait(pending);
    rt.reset_device(D0).unwrap();
    assert_eq!(rt.device_lost(D0), None);

    let stale = Error::StaleAfterReset {
        device: D0,
        what: "buffer",
    };
    assert_eq!(
        rt.fill(D0, old.all(), 2, &mut vec![]).err(),
        Some(stale.clone())
    );
    assert_eq!(
        rt.copy(D1, on_1.all(), old.all(), &mut vec![]).err(),
        Some(stale)
    );
    let pinned = rt.alloc(D1, MemoryKind::HostPinned, 4096).unwrap();
    let args = [
        gpu_rt::runtime::Arg::Span(pinned.all()),
        gpu_rt::runtime::Arg::U32(7),
        gpu_rt::runtime::Arg::U64(1024),
    ];
    // SAFETY: refused before anything is queued (and fill_u32 would stay inside the span).
    let launched = unsafe { fill_u32.launch(LaunchDims::linear(1, 1), &args, &mut vec![]) };
    assert!(
        matches!(
            launched,
            Err(Error::StaleAfterReset {
                device: D0,
                what: "kernel"
            })
        ),
        "{launched:?}"
    );
    drop(old);

    // New buffers and kernels of device 0 work, and copies between the devices too.
    let fresh = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let fill_u32 = rt.kernel(D0, "fill_u32").unwrap();
    let args = [
        gpu_rt::runtime::Arg::Span(fresh.all()),
        gpu_rt::runtime::Arg::U32(0x0101_0101),
        gpu_rt::runtime::Arg::U64(1024),
    ];
    // SAFETY: fill_u32 writes 1024 words: the whole buffer.
    let filled =
        unsafe { fill_u32.launch(LaunchDims::linear(4, 256), &args, &mut vec![]) }.unwrap();
    let copied = rt
        .copy(D1, on_1.all(), fresh.all(), &mut vec![filled])
        .unwrap();
    let mut back = vec![0u8; 4096];
    rt.download(D1, &mut back, on_1.all(), &mut vec![copied])
        .unwrap();
    assert!(back.iter().all(|&b| b == 1));
    let stats = rt.stats();
    assert_eq!(stats.peer_access, vec![(D0, D1), (D1, D0)]);
    assert_eq!(stats.peer_copies_direct, 1);
    drop((fresh, on_1, pinned));
    let report = rt.shutdown_report();
    assert_eq!(report.errors, vec![]);
    assert_eq!(report.left, LeftBehind::default());
}

/// A reset while another thread blocks in `wait` would destroy the stream it blocks on: the
/// waited token is no longer live (the wait consumed it), but the wait in progress counts as
/// one, and the reset is refused until it has returned. Before, the reset went ahead.
#[test]
fn a_reset_is_refused_while_a_host_wait_blocks_on_the_device() {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};

    let backend = HostBackend::new(HostConfig::with_devices(2));
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let gate = Mutex::new((gate_rx, started_tx));
    backend.register_kernel("gated", move |_, _| {
        let gate = gate.lock().unwrap();
        gate.1.send(()).ok();
        gate.0.recv().ok();
        Ok(())
    });
    let rt = Arc::new(Runtime::new(backend).unwrap());
    // SAFETY: no pointer arguments.
    let gated = unsafe { rt.launch(D0, "gated", LaunchDims::linear(1, 1), &[], &mut vec![]) };
    let gated = gated.unwrap();
    started_rx.recv().unwrap();
    let waiter = {
        let rt = Arc::clone(&rt);
        std::thread::spawn(move || rt.wait(gated))
    };
    // The wait has begun (under the state's lock) once the planner holds no live token.
    while rt.stats().planner.live_tokens != 0 {
        assert!(
            !waiter.is_finished(),
            "the wait returned before its kernel ran"
        );
        std::thread::yield_now();
    }
    let refused = rt.reset_device(D0);
    assert_eq!(
        refused,
        Err(Error::LiveWorkOnDevice {
            device: D0,
            tokens: 1
        }),
        "a reset went ahead under a wait in progress"
    );
    gate_tx.send(()).unwrap();
    waiter.join().unwrap().unwrap();
    rt.reset_device(D0).unwrap();
    let rt = Arc::into_inner(rt).unwrap();
    rt.shutdown().unwrap();
}

/// A kernel that fails while it runs with an error that does not lose the device (here an
/// argument of the wrong kind, read as a `u32`) fails alone: its wait reports it, once, and
/// the stream it ran on goes back to the pool usable, so later work on the device succeeds
/// and shutdown is clean. Before, the stream kept the error: every later fill on the device
/// failed with it, and shutdown returned it.
#[test]
fn a_kernel_failing_without_losing_the_device_fails_only_itself() {
    use gpu_rt::runtime::Arg;

    let backend = HostBackend::new(HostConfig::with_devices(2));
    backend.register_kernel("reads_a_u32", |ctx, _| ctx.arg_u32(0).map(drop));
    let rt = Runtime::new(backend).unwrap();
    // SAFETY: no pointer arguments.
    let failed = unsafe {
        rt.launch(
            D0,
            "reads_a_u32",
            LaunchDims::linear(1, 1),
            &[Arg::F32(1.0)],
            &mut vec![],
        )
    };
    let error = rt.wait(failed.unwrap()).unwrap_err();
    assert_eq!(HostErrorCode::of(&error), Some(HostErrorCode::InvalidValue));
    assert_eq!(rt.device_lost(D0), None);
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    for round in 0..20u8 {
        rt.wait(rt.fill(D0, buffer.all(), round, &mut vec![]).unwrap())
            .unwrap();
    }
    drop(buffer);
    let report = rt.shutdown().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

/// A reset destroys the device's streams, events and memory: the recording backend counts
/// them as gone and its trace says so, so a runtime that lost and reset a device still shuts
/// down with nothing live and a trace without defects. Before, the recorder kept counting the
/// reset device's objects as live (and reported them as leaks).
#[test]
fn a_recorder_counts_what_a_reset_destroyed_as_gone() {
    use gpu_rt::runtime::{LiveObjects, RecordingBackend, RuntimeConfig};
    use std::sync::Arc;

    let backend = HostBackend::new(HostConfig::with_devices(2));
    backend.register_kernel("fault", |_, _| {
        Err(HostErrorCode::IllegalAddress.error("launch"))
    });
    let recorder = Arc::new(RecordingBackend::new(backend));
    let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default()).unwrap();
    let on_1 = rt.alloc(D1, MemoryKind::Device, 4096).unwrap();
    for device in [D0, D1] {
        let buffer = rt.alloc(device, MemoryKind::Device, 4096).unwrap();
        let filled = rt.fill(device, buffer.all(), 1, &mut vec![]).unwrap();
        let mut branches = rt.fork(filled, 2).unwrap();
        rt.wait(branches.pop().unwrap()).unwrap();
        rt.wait(branches.pop().unwrap()).unwrap();
    }
    // SAFETY: no pointer arguments.
    let faulted = unsafe { rt.launch(D0, "fault", LaunchDims::linear(1, 1), &[], &mut vec![]) };
    assert!(lost_by_illegal_address(
        &rt.wait(faulted.unwrap()).unwrap_err(),
        D0
    ));
    rt.reset_device(D0).unwrap();
    rt.wait(rt.fill(D1, on_1.all(), 2, &mut vec![]).unwrap())
        .unwrap();
    drop(on_1);
    rt.shutdown().unwrap();
    assert_eq!(recorder.live(), LiveObjects::default());
    assert_eq!(recorder.defects(), vec![]);
}
