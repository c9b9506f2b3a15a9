//! The HSA runtime library (libhsa-runtime64), opened at run time, with each function of the
//! bindings looked up by dlsym on first use (gpu-ffi-loader's machinery, shared with HIP).

use crate::result::BACKEND;

/// The file names [`Hsa::load`] tries, in order (the versioned name first, as runtime
/// packages install only `libhsa-runtime64.so.1`).
pub const LIBRARY_NAMES: &[&str] = &["libhsa-runtime64.so.1", "libhsa-runtime64.so"];

/// Turns the generated table into the [`Hsa`] library type.
macro_rules! hsa_library {
    ($(($name:ident, $symbol:literal, $pfn:ident)),* $(,)?) => {
        gpu_ffi_loader::dlsym_library! {
            /// The loaded HSA runtime: its functions are reached through one method each, named
            /// as in the header: `hsa.hsa_init()?` returns a `sys::PFN_hsa_init` to call.
            pub struct Hsa;
            backend: BACKEND;
            file_names: LIBRARY_NAMES;
            $(($name, $symbol, crate::sys::$pfn)),*
        }
    };
}

crate::sys::hsa_entry_points!(hsa_library);
