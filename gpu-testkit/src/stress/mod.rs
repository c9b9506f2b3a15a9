//! Stress and soak over any backend: many threads on the runtimes of one backend, each running
//! a random mix of every kind of call on data it owns and verifies.
//!
//! Faults are injected at random points where the backend can, and the process's memory, the
//! runtime's bookkeeping and the driver's live objects are sampled while it runs.
//!
//! Each thread owns up to [`MAX_OWNED`] buffers of every kind and size class, with a host copy
//! of what each must hold, and a host arena of which it locks overlapping and nested ranges. Its
//! operations: allocate (synchronously or in stream order) and free, fill, copy between any two
//! of its buffers (host to device, device to host, device to device, device to peer device),
//! upload from its arena (pinned or not) and from memory locked for the copy, launch
//! `fill_u32` and `workgroup_reverse_u32`, fork and join tokens, wait, lock and unlock arena
//! ranges (predicting nested, new and refused locks), trim, and verify a buffer's bytes
//! against the host copy. A call that fails must fail with an injected fault
//! ([`Probe::is_injected`]); any other error, or a wrong byte, is a failure of the run.
//!
//! [`run`] and the sampler are here; one concern a file below: `config`, `probe`, `report`
//! (counts, samples, growth), `thread` (one thread's state, outcomes and choices), and its
//! operations by kind: `buffers`, `transfers`, `kernels`, `tokens`, `locks`.

mod buffers;
mod config;
mod kernels;
mod locks;
mod probe;
mod report;
mod thread;
mod tokens;
mod transfers;

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::seeded::SplitMix64;
use gpu_rt::runtime::Runtime;

pub use config::{MAX_OWNED, StressConfig};
pub use probe::{NoProbe, Probe};
pub use report::{OpCounts, Quantity, RESERVED_BOUND_FACTOR, ReservedBound, Sample, StressReport};
use thread::Thread;

/// Runs `config.threads` threads of the mix on `runtimes` (thread `i` on runtime
/// `i % runtimes.len()`: one runtime shared by all, or one each), with `probe` for faults and
/// live counts. Returns once every thread has ended and released all it held.
pub fn run<B: Backend>(
    runtimes: &[Runtime<B>],
    probe: &dyn Probe,
    config: &StressConfig,
) -> Result<StressReport> {
    if runtimes.is_empty() || config.threads == 0 {
        return Err(Error::ZeroSize {
            what: "stress threads or runtimes",
        });
    }
    if config.largest < 64 {
        return Err(Error::ZeroSize {
            what: "stress buffer size (at least 64 bytes)",
        });
    }
    let stop = &AtomicBool::new(false);
    let started = Instant::now();
    let faults_before = probe.faults_injected();
    let (threads, samples) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..config.threads)
            .map(|index| {
                let runtime = &runtimes[index % runtimes.len()];
                let seed = config.seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                scope.spawn(move || Thread::new(runtime, probe, config, seed).run(started, stop))
            })
            .collect();
        let injector = config
            .fault_every
            .map(|every| scope.spawn(move || inject_faults(probe, every, config.seed, stop)));
        let samples = sample(&runtimes[0], probe, config, started, stop);
        let threads: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::Release);
        if let Some(injector) = injector {
            let _ = injector.join();
        }
        probe.disarm_faults();
        (threads, samples)
    });
    let mut report = StressReport {
        elapsed: started.elapsed(),
        samples,
        faults_injected: probe.faults_injected() - faults_before,
        ..StressReport::default()
    };
    for (index, thread) in threads.into_iter().enumerate() {
        match thread {
            Ok(done) => {
                report.counts.add(&done.counts);
                report.per_thread.push(done.counts.total());
                report.failure_count += done.failure_count;
                report.failures.extend(done.failures);
            }
            Err(_) => {
                report.per_thread.push(0);
                report.failure_count += 1;
                report.failures.push(format!("thread {index} panicked"));
            }
        }
    }
    Ok(report)
}

/// Arms one fault at a time, a random number of calls ahead, until `stop`.
fn inject_faults(probe: &dyn Probe, every: u64, seed: u64, stop: &AtomicBool) {
    let mut rng = SplitMix64::new(seed ^ 0xFA17);
    while !stop.load(Ordering::Acquire) {
        let before = probe.faults_injected();
        if !probe.arm_fault(1 + rng.below(2 * every.max(1) as usize) as u64) {
            return;
        }
        while probe.faults_injected() == before && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Samples until the threads are past the run's duration (then once more, at the end).
fn sample<B: Backend>(
    runtime: &Runtime<B>,
    probe: &dyn Probe,
    config: &StressConfig,
    started: Instant,
    stop: &AtomicBool,
) -> Vec<Sample> {
    let Some(every) = config.sample_every else {
        return Vec::new();
    };
    let take = || Sample {
        at: started.elapsed(),
        rss_kib: resident_kib(),
        stats: runtime.stats(),
        live: probe.live(),
    };
    let mut samples = vec![take()];
    while started.elapsed() < config.duration && !stop.load(Ordering::Acquire) {
        std::thread::sleep(every.min(config.duration.saturating_sub(started.elapsed())));
        samples.push(take());
    }
    samples
}

/// The process's resident memory in KiB, from `/proc/self/status` (Linux).
pub fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
