//! Reference models for the allocator's property tests, fuzz target and benchmarks: a fake
//! driver that models streams' progress, a harness that checks every safety rule, and a seeded
//! trace generator of mixed allocation workloads.
//!
//! One concern a file: `fake` (the fake driver and the capabilities it offers), `harness`
//! (generated steps run against the allocator and checked), `trace` (seeded workloads).

mod fake;
mod harness;
mod trace;

pub use fake::{FakeDriver, capabilities};
pub use harness::{Harness, Step};
pub use trace::{TraceOp, TraceRng, mixed_trace, peak_live_bytes, run_trace, trace_streams};
