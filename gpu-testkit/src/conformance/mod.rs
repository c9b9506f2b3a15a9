//! The backend-generic conformance suite: the behaviour every backend must show through the
//! runtime, written once and run on the host backend in CI and on real drivers by test-hw.
//!
//! Each case opens a fresh backend (through the caller's `open`), wraps it in a
//! [`RecordingBackend`](gpu_rt::runtime::RecordingBackend) and checks, besides its own rules,
//! that at the end no stream, event, allocation or host registration is left and the recorded
//! trace has no defect. Cases that need two devices are skipped on a one-device backend.
//!
//! [`run_all`] and the reports are here; the harness every case uses is `harness`, and the
//! cases are grouped by concern: `memory`, `order` (streams, devices, peers), `kernels`,
//! `lifecycle` (current device, pools, the whole scenario, driver failures), `failures` (what
//! an error that is or is not sticky affects), `graphs` (a recorded program replayed and
//! updated in place; skipped where the backend has no graphs), `growable` (growable segments
//! mapped, used, trimmed and reached by a peer; skipped without virtual memory management).

mod failures;
mod graphs;
mod growable;
mod harness;
mod kernels;
mod lifecycle;
mod memory;
mod order;

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use gpu_core::backend::Backend;

pub use harness::Open;
use harness::{CaseResult, Stop};

/// How one case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// Not applicable to this backend (the reason says why, e.g. "one device").
    Skipped(String),
    /// A check failed (the message says which and with what values).
    Failed(String),
}

/// One case's name and outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name.
    pub name: &'static str,
    /// How it ended.
    pub outcome: Outcome,
}

impl fmt::Display for CaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Passed => write!(f, "passed   {}", self.name),
            Outcome::Skipped(why) => write!(f, "skipped  {} ({why})", self.name),
            Outcome::Failed(why) => write!(f, "FAILED   {}: {why}", self.name),
        }
    }
}

/// Runs every case on backends from `open`, in order.
pub fn run_all<B: Backend>(open: Open<'_, B>) -> Vec<CaseReport> {
    type Case<B> = fn(Open<'_, B>) -> CaseResult;
    // Each case by its function's name, which is what its report names.
    macro_rules! cases {
        ($($group:ident::$case:ident),* $(,)?) => {
            [$((stringify!($case), $group::$case::<B> as Case<B>)),*]
        };
    }
    let cases: [(&'static str, Case<B>); 18] = cases![
        memory::devices_report_capabilities,
        memory::allocation_kinds_and_errors,
        memory::lock_rules_through_the_runtime,
        order::cross_stream_order_and_data,
        order::cross_device_order_and_data,
        order::peer_copies_of_every_memory_form,
        kernels::kernels_compute_and_opt_in,
        kernels::library_launches_are_checked,
        graphs::graphs_replay_and_update,
        graphs::graphs_with_own_memory,
        growable::growable_segments,
        growable::growable_segments_across_peers,
        lifecycle::current_device_restored,
        lifecycle::pools_are_reused,
        lifecycle::scenario_leaves_nothing,
        lifecycle::every_driver_failure_is_clean,
        failures::non_sticky_errors_fail_only_their_call,
        failures::a_sticky_fault_loses_only_its_device,
    ];
    cases
        .into_iter()
        .map(|(name, case)| {
            let outcome = match catch_unwind(AssertUnwindSafe(|| case(open))) {
                Ok(Ok(())) => Outcome::Passed,
                Ok(Err(Stop::Skip(why))) => Outcome::Skipped(why),
                Ok(Err(Stop::Fail(why))) => Outcome::Failed(why),
                Err(panic) => Outcome::Failed(format!("panicked: {}", panic_message(&panic))),
            };
            CaseReport { name, outcome }
        })
        .collect()
}

/// Runs every case ([`run_all`]) on backend `name`, prints each report and then, on a line of
/// its own, the hardware runner's summary (`backend NAME: ran (N conformance cases passed, M
/// skipped)`), and returns how many cases failed.
pub fn run_and_print<B: Backend>(name: &str, open: Open<'_, B>) -> usize {
    let reports = run_all(open);
    for report in &reports {
        std::eprintln!("{report}");
    }
    let count =
        |matching: fn(&Outcome) -> bool| reports.iter().filter(|r| matching(&r.outcome)).count();
    let failed = count(|o| matches!(o, Outcome::Failed(_)));
    let skipped = count(|o| matches!(o, Outcome::Skipped(_)));
    if failed == 0 {
        std::eprintln!(
            "\nbackend {name}: ran ({} conformance cases passed, {skipped} skipped)",
            reports.len() - skipped
        );
    }
    failed
}

fn panic_message(panic: &Box<dyn core::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}
