//! Failure containment as the drivers define it: an error that is not sticky fails only its own
//! call, and a sticky fault loses its device alone (where the driver survives it at all).

use alloc::string::ToString;
use alloc::vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::error::Error;
use gpu_core::id::DeviceId;
use gpu_core::token::UnwaitedKind;

use super::harness::{CaseResult, Harness, Open, Stop, ensure, fill_and_verify, two_devices};

/// Errors that are not sticky (a request the device cannot hold, a driver call that fails)
/// affect only the failed call: the device is not lost, the stream that met the failure is not
/// handed out failed, and the work after it succeeds, twenty times over.
pub(super) fn non_sticky_errors_fail_only_their_call<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let buffer = rt.alloc(d, MemoryKind::Device, 4096)?;
    let too_big = rt
        .alloc(d, MemoryKind::Device, usize::MAX / 4)
        .map(|buffer| buffer.size());
    ensure!(
        matches!(
            too_big,
            Err(Error::OutOfMemory { .. } | Error::LimitExceeded { .. })
        ),
        "a request no device holds gave {too_big:?}"
    );
    // The next driver call fails (a stream's creation, the fill itself, whichever comes).
    h.backend.fail_call(h.backend.calls() + 1);
    let failed = rt
        .fill(d, buffer.all(), 1, &mut vec![])
        .and_then(|token| rt.wait(token));
    ensure!(failed.is_err(), "the injected failure was not reported");
    ensure!(
        rt.device_lost(d).is_none(),
        "a failure that is not sticky lost the device"
    );
    for round in 0..20u8 {
        fill_and_verify(rt, d, buffer.all(), round)?;
    }
    drop(buffer);
    // The failed fill's token was discarded with its work: the report names it, nothing else.
    h.close_allowing(&[UnwaitedKind::Discarded])
}

/// A sticky fault (a kernel's illegal address) loses its device alone: every later call on it
/// is `DeviceLost` naming the fault, the other device keeps working, and `reset_device` brings
/// it back, its old buffers refused as stale. Needs a kernel named `fault` (the host backend's
/// test registers one) and a backend that survives a fault: on CUDA, HIP and HSA a sticky
/// error ends the process ([`Backend::DEVICE_LOSS_ENDS_THE_PROCESS`]), which their hardware
/// tests show in a process of their own.
pub(super) fn a_sticky_fault_loses_only_its_device<B: Backend>(open: Open<'_, B>) -> CaseResult {
    if B::DEVICE_LOSS_ENDS_THE_PROCESS {
        return Err(Stop::Skip(
            "a sticky fault ends the process on this driver".to_string(),
        ));
    }
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let (lost, other) = two_devices(rt)?;
    let Ok(fault) = rt.kernel(lost, "fault") else {
        return Err(Stop::Skip("no kernel named fault".to_string()));
    };
    let (old, kept) = (
        rt.alloc(lost, MemoryKind::Device, 4096)?,
        rt.alloc(other, MemoryKind::Device, 4096)?,
    );
    // SAFETY: no arguments; the kernel faults on purpose (what the case checks).
    let faulted = unsafe { fault.launch(LaunchDims::linear(1, 1), &[], &mut vec![]) }?;
    let loss = rt.wait(faulted);
    ensure!(
        matches!(&loss, Err(Error::DeviceLost { device, .. }) if *device == lost),
        "the fault gave {loss:?}"
    );
    ensure!(rt.device_lost(lost).is_some(), "the device is not lost");
    let refused = rt.fill(lost, old.all(), 1, &mut vec![]);
    ensure!(
        matches!(refused, Err(Error::DeviceLost { .. })),
        "work on the lost device was not refused"
    );
    fill_and_verify(rt, other, kept.all(), 7)?;
    rt.reset_device(lost)?;
    ensure!(
        matches!(
            rt.fill(lost, old.all(), 2, &mut vec![]),
            Err(Error::StaleAfterReset { .. })
        ),
        "a buffer from before the reset was not refused"
    );
    drop((old, fault));
    let fresh = rt.alloc(lost, MemoryKind::Device, 4096)?;
    fill_and_verify(rt, lost, fresh.all(), 3)?;
    fill_and_verify(rt, other, kept.all(), 4)?;
    drop((fresh, kept));
    h.close()
}
