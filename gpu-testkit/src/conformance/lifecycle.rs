//! A runtime's life: the caller's current device restored by every call, pooled streams and
//! events reused, the whole scenario leaving nothing, and every driver failure left clean.

use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;
use gpu_core::token::Token;
use gpu_rt::runtime::{Arg, Runtime};

use super::harness::{CaseResult, Harness, Open, Stop, check_clean, ensure};

/// Every public call, from a thread whose current device is `start`, leaves it so.
pub(super) fn current_device_restored<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let last = DeviceId(h.runtime.device_count() as u32 - 1);
    for start in [None, Some(last)] {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    h.backend.set_current_device(start)?;
                    calls_keep_device(&h, start)
                })
                .join()
                .unwrap_or_else(|_| Err(Stop::Fail("a thread panicked".to_string())))
        })?;
    }
    h.close()
}

fn calls_keep_device<B: Backend>(h: &Harness<B>, start: Option<DeviceId>) -> CaseResult {
    let rt = &h.runtime;
    let check = |call: &str| -> CaseResult {
        let now = h.backend.current_device()?;
        ensure!(
            now == start,
            "{call} left {now:?} current instead of {start:?}"
        );
        Ok(())
    };
    for device in (0..rt.device_count()).map(|d| DeviceId(d as u32)) {
        let buffer = rt.alloc(device, MemoryKind::Device, 4096)?;
        check("alloc")?;
        let filled = rt.fill(device, buffer.all(), 1, &mut vec![])?;
        check("fill")?;
        let mut branches = rt.fork(filled, 2)?;
        check("fork")?;
        ensure!(
            branches.len() == 2,
            "a fork in 2 gave {} tokens",
            branches.len()
        );
        let mut back = vec![0u8; 4096];
        rt.download(device, &mut back, buffer.all(), &mut branches.split_off(1))?;
        check("download")?;
        // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
        let launched = unsafe {
            rt.launch(
                device,
                "fill_u32",
                LaunchDims::linear(1, 64),
                &[Arg::Span(buffer.all()), Arg::U32(0), Arg::U64(1024)],
                &mut branches,
            )
        }?;
        check("launch")?;
        rt.wait(launched)?;
        check("wait")?;
        // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
        let failed = unsafe {
            rt.launch(
                device,
                "no_such_kernel",
                LaunchDims::linear(1, 1),
                &[],
                &mut vec![],
            )
        };
        ensure!(
            matches!(failed, Err(Error::UnknownKernel { .. })),
            "an unknown kernel name gave {failed:?}, not Error::UnknownKernel"
        );
        check("a failed launch")?;
        rt.free(buffer)?;
        check("free")?;
    }
    rt.trim()?;
    check("trim")
}

pub(super) fn pools_are_reused<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let buffer = rt.alloc(d, MemoryKind::Device, 4096)?;
    let mut created = (0, 0);
    for round in 0..20 {
        let a = rt.fill(d, buffer.span(0, 2048)?, 1, &mut vec![])?;
        let b = rt.fill(d, buffer.span(2048, 2048)?, 2, &mut vec![])?;
        let joined = rt.join(&mut vec![a, b])?;
        rt.wait(joined)?;
        let stats = rt.stats();
        if round == 2 {
            created = (stats.streams_created, stats.events_created);
        } else if round > 2 {
            let now = (stats.streams_created, stats.events_created);
            ensure!(
                now == created,
                "round {round}: pools missed, created (streams, events) {created:?} -> {now:?}"
            );
        }
    }
    ensure!(
        rt.stats().pool_calls_saved() > 0,
        "the pools saved no driver call"
    );
    drop(buffer);
    h.close()
}

/// The representative program: every kind of call the runtime makes, on every device.
fn scenario<B: Backend>(rt: &Runtime<B>) -> Result<()> {
    let mut host = vec![7u8; 200_000];
    let devices: Vec<DeviceId> = (0..rt.device_count().min(2))
        .map(|d| DeviceId(d as u32))
        .collect();
    let mut tokens: Vec<Token> = Vec::new();
    let mut buffers = Vec::new();
    for &d in &devices {
        let buffer = rt.alloc(d, MemoryKind::Device, host.len())?;
        tokens.push(rt.upload(d, buffer.all(), &host, &mut vec![])?);
        buffers.push(buffer);
    }
    let joined = rt.join(&mut tokens)?;
    let mut branches = rt.fork(joined, devices.len())?;
    let mut results = Vec::new();
    for (&d, buffer) in devices.iter().zip(&buffers) {
        let branch = branches.pop().ok_or(Error::ZeroSize { what: "branch" })?;
        // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
        let scaled = unsafe {
            rt.launch(
                d,
                "fill_u32",
                LaunchDims::linear(8, 128),
                &[
                    Arg::Span(buffer.span(0, 4096)?),
                    Arg::U32(9),
                    Arg::U64(1024),
                ],
                &mut vec![branch],
            )
        }?;
        results.push(scaled);
    }
    let last = *devices.last().ok_or(Error::ZeroSize { what: "devices" })?;
    let locked = rt.lock_host(&mut host)?;
    let copied = rt.copy(
        last,
        buffers[buffers.len() - 1].span(0, 4096)?,
        buffers[0].span(0, 4096)?,
        &mut results,
    )?;
    let mut back = vec![0u8; 4096];
    rt.download(last, &mut back, locked.span(0, 4096)?, &mut vec![copied])?;
    locked.unlock()?;
    for buffer in buffers {
        rt.free(buffer)?;
    }
    rt.trim()?;
    Ok(())
}

pub(super) fn scenario_leaves_nothing<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    scenario(&h.runtime)?;
    h.close()
}

/// For every driver call N that the scenario and the shutdown after it make, a run in which
/// call N fails: a typed error or a success, never a panic, and nothing left behind.
pub(super) fn every_driver_failure_is_clean<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let counted = Harness::open(open)?;
    let before = counted.backend.calls();
    scenario(&counted.runtime)?;
    let Harness { backend, runtime } = counted;
    runtime.shutdown()?;
    let calls = backend.calls() - before;
    check_clean(&backend)?;
    let mut failures_seen = 0;
    for n in 1..=calls {
        let h = Harness::open(open)?;
        let start = h.backend.calls();
        h.backend.fail_call(start + n);
        if scenario(&h.runtime).is_err() {
            failures_seen += 1;
        }
        let Harness { backend, runtime } = h;
        // Shutdown may itself report the failure (a poisoned runtime, a refused destroy that
        // the retry then did); what matters is that nothing is left behind.
        let _ = runtime.shutdown();
        check_clean(&backend).map_err(|stop| match stop {
            Stop::Fail(why) => Stop::Fail(format!("failing call {n} of {calls}: {why}")),
            skip => skip,
        })?;
    }
    ensure!(
        failures_seen > 0,
        "no injected failure surfaced as an error in {calls} calls"
    );
    Ok(())
}
