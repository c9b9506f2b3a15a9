//! Reference models for the allocator's property tests, fuzz target and benchmarks: a fake
//! driver, a checking harness, and seeded workloads.
//!
//! The fake driver models streams' progress, the harness checks every safety rule, and the
//! seeded trace generator makes mixed allocation workloads.
//!
//! One concern a file: `fake` (the fake driver and the capabilities it offers), `harness`
//! (generated steps run against the allocator and checked), `trace` (seeded workloads).

mod fake;
mod harness;
mod trace;

pub use fake::{FakeDriver, capabilities};
pub use harness::{Harness, Step};
pub use trace::{TraceOp, TraceRng, mixed_trace, peak_live_bytes, run_trace, trace_streams};
