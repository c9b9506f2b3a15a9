//! The crate users add: re-exports the pure core ([`gpu_core`]) and, by feature, the driver
//! backends (`cuda`, `hip`, `hsa`). The host backend, which needs no GPU, is always present.
#![no_std]

pub use gpu_core::*;

#[cfg(feature = "cuda")]
pub use gpu_cuda_ffi as cuda;
#[cfg(feature = "hip")]
pub use gpu_hip_ffi as hip;
#[cfg(feature = "hsa")]
pub use gpu_hsa_ffi as hsa;
