//! The HIP runtime library (libamdhip64), opened at run time, with each function of the
//! bindings looked up by dlsym on first use (gpu-ffi-loader's machinery, shared with HSA).

use crate::result::BACKEND;

/// The file names [`Hip::load`] tries, in order: ROCm's runtime (the versioned name first, as
/// runtime packages install only `libamdhip64.so.5`).
#[cfg(not(feature = "nvidia"))]
pub const LIBRARY_NAMES: &[&str] = &["libamdhip64.so.5", "libamdhip64.so"];

/// The file names [`Hip::load`] tries: with the `nvidia` feature, the shim that exports HIP's
/// functions over the CUDA runtime (`cargo xtask hip-shim` builds it; the system loader finds
/// it, and the `libcudart.so.11.0` beside it, through `LD_LIBRARY_PATH`, which the test-hw
/// bundle's runner sets to its `lib` folder).
#[cfg(feature = "nvidia")]
pub const LIBRARY_NAMES: &[&str] = &["libgpu_hip_nvidia.so"];

/// Turns the generated table into the [`Hip`] library type.
macro_rules! hip_library {
    ($(($name:ident, $symbol:literal, $pfn:ident)),* $(,)?) => {
        gpu_ffi_loader::dlsym_library! {
            /// The loaded HIP runtime: its functions are reached through one method each, named
            /// as in the header: `hip.hipMalloc()?` returns a `sys::PFN_hipMalloc` to call.
            pub struct Hip;
            backend: BACKEND;
            file_names: LIBRARY_NAMES;
            $(($name, $symbol, crate::sys::$pfn)),*
        }
    };
}

crate::sys::hip_entry_points!(hip_library);
