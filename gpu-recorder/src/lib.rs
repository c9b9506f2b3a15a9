//! A CUPTI injection library that records any CUDA program's stream, event, memory and launch
//! calls into the trace format `gpu-trace-check` reads, without changing the program.
//!
//! ```sh
//! CUDA_INJECTION64_PATH=target/release/libgpu_recorder.so GPU_TRACE_OUT=traces ./program
//! gpu-trace-check traces/gpu-trace.*.trace
//! ```
//!
//! The driver loads the library and calls [`InitializeInjection`], which subscribes to CUPTI's
//! callbacks for the driver calls in `sys::recorded_calls!`. Each callback reads its call into
//! a plain [`Call`] (`call`), and the pure [`Translator`] (`translate`) turns calls into trace
//! lines; `inject` holds the callback and the per-process writer, `cupti` the library loader,
//! `nvtx` the NVTX injection that receives a program's memory-region annotations.

pub mod call;
pub mod cupti;
mod inject;
pub mod nvtx;
pub mod translate;

#[rustfmt::skip]
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unnecessary_transmutes,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks,
    missing_docs,
    unreachable_pub
)]
mod sys;

pub use call::{Call, Fields, Kind, Outcome, Shape};
pub use inject::{InitializeInjection, gpu_recorder_block};
pub use translate::Translator;
