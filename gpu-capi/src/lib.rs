//! C ABI of the GPU runtime toolkit, as a `cdylib` and a `staticlib`: thin client layers over one
//! shared layer, with all policy left in gpu-core.
//!
//! - [`shared`]: the process-wide runtime (opened once, lazily, on the backend
//!   `GPU_RUNTIME_BACKEND` names), the dispatch over backends, handle tables, status codes, the
//!   calling thread's last error, and the guard that keeps panics from crossing the boundary.
//! - One module per client ABI on top of it: `capi` (the C API of `include/gpu_runtime.h`),
//!   `mlir` (MLIR's `mgpu*` runtime ABI) and `torch` (PyTorch's pluggable allocator) each
//!   translate their callers' handles and errors and call the runtime; none decides policy.
//!
//! `include/gpu_runtime.h` is the C API's header: the modules of the other ABIs carry
//! `cbindgen:ignore`, so `cargo xtask capi-header` leaves their symbols out of it.
//!
//! Every `unsafe` block says why it holds (`// SAFETY:`), every public item is documented, and
//! items used only inside the crate are `pub(crate)` or narrower.

pub mod capi;
/// cbindgen:ignore
pub mod mlir;
pub mod shared;
/// cbindgen:ignore
#[cfg(feature = "cuda")]
pub mod torch;
