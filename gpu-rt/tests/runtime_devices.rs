//! Devices on the host backend: the device guard (its calls, and on errors and unwinding),
//! device workers, and one user thread driving two devices without one delaying the other.

use std::sync::{Mutex, mpsc};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::{DeviceGuard, Runtime, restore_failures, with_device};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap()
}

#[test]
fn the_guard_restores_the_device_on_error_and_on_unwinding() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    backend.set_current_device(Some(D1)).unwrap();
    let failed: Result<(), Error> = with_device(&backend, D0, || {
        assert_eq!(backend.current_device().unwrap(), Some(D0));
        Err(Error::ZeroSize { what: "test" })
    });
    assert!(failed.is_err());
    assert_eq!(backend.current_device().unwrap(), Some(D1));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _guard = DeviceGuard::new(&backend, D0).unwrap();
        panic!("unwinding through a guard");
    }));
    assert!(unwound.is_err());
    assert_eq!(backend.current_device().unwrap(), Some(D1));
    backend.set_current_device(None).unwrap();
}

#[test]
fn the_guard_saves_once_switches_only_to_another_device_and_restores_what_was_saved() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    let guard_calls = |since: &gpu_rt::host::CallCounts| {
        let made = backend.calls().since(since);
        [
            made.of(CallKind::SaveCurrent),
            made.of(CallKind::SetCurrentDevice),
            made.of(CallKind::RestoreCurrent),
            made.of(CallKind::CurrentDevice),
        ]
    };
    for start in [None, Some(D0)] {
        backend.set_current_device(start).unwrap();
        let before = backend.calls();
        with_device(&backend, D0, || Ok(())).unwrap();
        let switch = u64::from(start != Some(D0));
        assert_eq!(
            guard_calls(&before),
            [1, switch, switch, 0],
            "from {start:?}"
        );
        assert_eq!(backend.current_device().unwrap(), start);

        let before = backend.calls();
        let inside = with_device(&backend, D1, || backend.current_device()).unwrap();
        assert_eq!(inside, Some(D1));
        assert_eq!(guard_calls(&before), [1, 1, 1, 1], "from {start:?}");
        assert_eq!(backend.current_device().unwrap(), start);
    }

    // A failed restore leaves the switch in place; the call's own result still comes back.
    let failures = restore_failures();
    backend.fail_nth(CallKind::RestoreCurrent, 1);
    assert_eq!(with_device(&backend, D1, || Ok(7)), Ok(7));
    assert!(restore_failures() > failures);
    assert_eq!(backend.current_device().unwrap(), Some(D1));
    // A failed save fails the bracket before anything changes.
    backend.fail_nth(CallKind::SaveCurrent, 1);
    assert!(with_device(&backend, D0, || Ok(())).is_err());
    assert_eq!(backend.current_device().unwrap(), Some(D1));
    backend.set_current_device(None).unwrap();
}

#[test]
fn workers_run_with_their_device_current_and_errors_are_sticky_until_cleared() {
    let rt = runtime();
    let worker = rt.worker(D1).unwrap();
    assert_eq!(worker.device(), D1);
    let seen = worker
        .submit(|backend: &HostBackend| backend.current_device())
        .wait();
    assert_eq!(seen, Ok(Some(D1)));
    let failed = worker.submit(|_: &HostBackend| -> gpu_core::Result<()> {
        Err(Error::ZeroSize { what: "action" })
    });
    let refused = worker.submit(|_: &HostBackend| Ok(1));
    assert_eq!(failed.wait(), Err(Error::ZeroSize { what: "action" }));
    assert!(matches!(
        refused.wait(),
        Err(Error::QueueFailed { device: D1, .. })
    ));
    assert_eq!(
        worker.clear_error(),
        Some(Error::ZeroSize { what: "action" })
    );
    assert_eq!(worker.submit(|_: &HostBackend| Ok(2)).wait(), Ok(2));
    let panicked =
        worker.submit(|_: &HostBackend| -> gpu_core::Result<()> { panic!("in an action") });
    assert_eq!(panicked.wait(), Err(Error::ActionPanicked { device: D1 }));
    worker.clear_error();
    assert_eq!(
        worker.submit(|_: &HostBackend| Ok(3)).wait(),
        Ok(3),
        "the worker survived"
    );
    assert!(
        std::ptr::eq(worker, rt.worker(D1).unwrap()),
        "one worker per device"
    );
    assert!(matches!(
        rt.worker(DeviceId(2)),
        Err(Error::UnknownDevice { .. })
    ));
}

/// Work on device 0 that cannot finish (its kernel waits for a gate) does not delay a whole
/// round of submissions and a wait on device 1, from the same user thread.
#[test]
fn a_busy_device_does_not_delay_another() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    backend.register_kernel("wait_for_gate", move |_, _| {
        gate_rx.lock().unwrap().recv().ok();
        Ok(())
    });
    let rt = Runtime::new(backend).unwrap();
    // SAFETY: the kernel touches only the span it is given (or none).
    let busy = unsafe {
        rt.launch(
            D0,
            "wait_for_gate",
            LaunchDims::linear(1, 1),
            &[],
            &mut vec![],
        )
    }
    .unwrap();
    let buffer = rt.alloc(D1, MemoryKind::Device, 1 << 20).unwrap();
    let filled = rt.fill(D1, buffer.all(), 3, &mut vec![]).unwrap();
    let mut back = vec![0u8; 1 << 20];
    rt.download(D1, &mut back, buffer.all(), &mut vec![filled])
        .unwrap();
    assert!(
        back.iter().all(|&b| b == 3),
        "device 1 finished while device 0 is still busy"
    );
    gate_tx.send(()).unwrap();
    rt.wait(busy).unwrap();
}
