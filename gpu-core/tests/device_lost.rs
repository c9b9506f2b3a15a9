//! The failure model on the host backend, through the runtime: a call refused for its
//! arguments affects nothing else; work that fails on a device (a kernel's illegal address)
//! loses that device, so every later call on it is `Error::DeviceLost` naming the first
//! failure, while the other device keeps working, and shutdown still gives everything back.
//! Before, the failed stream went back to the pool with its error and every later fill on the
//! device failed with the driver's bare code, and a failed record poisoned the whole runtime.

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::LaunchDims;
use gpu_core::host::{CallKind, HostBackend, HostConfig, HostErrorCode};
use gpu_core::runtime::{LeftBehind, Runtime};
use gpu_core::{DeviceId, Error};

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
