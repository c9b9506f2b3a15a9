//! The runtime programs hold, over any backend: memory, streams and tokens, kernels and pinned
//! host memory ([`runtime`]), and the host backend that needs no GPU ([`host`]); [`prelude`]
//! gathers what a program needs in one import.
//!
//! The policies are gpu-core's (lock table, token planner, allocator, workgroup planner); this
//! crate adds what needs threads: the device guard, per-device workers, the recording backend,
//! device health and peer links.
// Doc examples may not drop a token (or any `#[must_use]` value) unnoticed: a token dropped
// unwaited orders nothing after its work.
#![doc(test(attr(deny(unused_must_use))))]
// Errors are built lazily (`ok_or_else`), as in gpu-core: an `Error` built eagerly and dropped
// on the success path costs its drop glue on the hot paths.
#![allow(clippy::unnecessary_lazy_evaluations)]

extern crate alloc;

pub mod host;
pub mod prelude;
pub mod runtime;
