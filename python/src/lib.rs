//! The native part of the `gpu_runtime_torch` package: gpu-capi's library as the extension
//! module `gpu_runtime_torch._native`, so that pip installs it and Python can find its path.
//!
//! The module itself defines nothing: its file is the library PyTorch's
//! `CUDAPluggableAllocator` loads and the package reaches through ctypes (`gpurt_torch_alloc`,
//! `gpurt_torch_free`, `gpurt_torch_stats`, `gpurt_torch_empty_cache`, `gpurt_open`,
//! `gpurt_shutdown`, `gpurt_last_error`: gpu-capi's exports, which a cdylib keeps).

// Links gpu-capi in: its exported functions become this library's.
extern crate gpu_capi;

use pyo3::prelude::*;

/// The extension module `gpu_runtime_torch._native` (empty: see the crate's documentation).
#[pymodule]
fn _native(_module: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
