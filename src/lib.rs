//! The crate users add: re-exports the pure core ([`gpu_core`]), with `std` (default) the
//! runtime and the host backend ([`gpu_rt`]) and the test kit ([`gpu_testkit`]), and by
//! feature the driver backends (`cuda`, `hip`, `hsa`). The host backend, which needs no GPU,
//! is always present with `std`, and [`with_best_backend`] picks the best backend present at
//! run time.
//!
#![doc = include_str!("../README.md")]
#![cfg_attr(not(feature = "std"), no_std)]

pub use gpu_core::*;
#[cfg(feature = "std")]
pub use gpu_rt::{host, runtime};
#[cfg(feature = "std")]
pub use gpu_testkit::{conformance, stress};

#[cfg(feature = "cli")]
pub mod cli;

/// What a program needs, in one import: `gpu_rt`'s prelude (the runtime, its handles, the host
/// backend, the core types and the error), with [`WithBackend`] and [`with_best_backend`].
///
/// # Examples
///
/// ```
/// use gpu_runtime::prelude::*;
///
/// struct DeviceCount;
/// impl WithBackend for DeviceCount {
///     type Output = Result<usize>;
///     fn with<B: Backend>(self, backend: B) -> Result<usize> {
///         Ok(Runtime::new(backend)?.device_count())
///     }
/// }
/// // A GPU's devices where a backend compiled in finds one, else the host backend's two.
/// assert!(with_best_backend(DeviceCount)? >= 1);
/// # Ok::<(), Error>(())
/// ```
#[cfg(feature = "std")]
pub mod prelude {
    pub use crate::{WithBackend, with_best_backend};
    pub use gpu_rt::prelude::*;
}

#[cfg(feature = "cuda")]
pub use gpu_cuda_ffi as cuda;
#[cfg(feature = "hip")]
pub use gpu_hip_ffi as hip;
#[cfg(feature = "hsa")]
pub use gpu_hsa_ffi as hsa;

/// Code generic over the backend, run on whichever backend [`with_best_backend`] picks.
pub trait WithBackend {
    /// What the code returns.
    type Output;

    /// Runs on `backend`.
    fn with<B: backend::Backend>(self, backend: B) -> Self::Output;
}

/// Runs `work` on the best backend present: a GPU driver compiled in by feature that finds a
/// device (CUDA, then HIP, then HSA), else the host backend with two simulated devices. The
/// environment variable `GPU_RUNTIME_BACKEND` (`cuda`, `hip`, `hsa` or `host`) limits the choice to one backend,
/// still falling back to the host backend (the hardware bundle runs the example once per
/// backend this way).
#[cfg(feature = "std")]
pub fn with_best_backend<W: WithBackend>(work: W) -> W::Output {
    let wanted = std::env::var("GPU_RUNTIME_BACKEND").ok();
    let allowed = |name: &str| wanted.as_deref().is_none_or(|wanted| wanted == name);
    #[cfg(feature = "cuda")]
    if allowed("cuda")
        && let Ok(cuda) = gpu_cuda_ffi::CudaBackend::new()
    {
        return work.with(cuda);
    }
    #[cfg(feature = "hip")]
    if allowed("hip")
        && let Ok(hip) = gpu_hip_ffi::HipBackend::new()
    {
        return work.with(hip);
    }
    #[cfg(feature = "hsa")]
    if allowed("hsa")
        && let Ok(hsa) = gpu_hsa_ffi::HsaBackend::new()
    {
        return work.with(hsa);
    }
    let _ = allowed;
    work.with(host::HostBackend::new(host::HostConfig::with_devices(2)))
}
