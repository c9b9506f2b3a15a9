//! `cargo xtask hip-shim`: builds HIP for NVIDIA GPUs, the C++ shim of gpu-hip-ffi's `nvidia`
//! feature (gpu-hip-ffi/nvidia/hip_nvidia_shim.cpp), with the `cc` crate, into
//! target/hip-nvidia/: `libgpu_hip_nvidia.so` and, beside it, the `libcudart.so.11.0` it needs.
//!
//! Inputs, fetched and never committed: HIP 5.2.3's headers (Debian's libamdhip64-dev, found as
//! for the bindings) and CUDA 11.8's runtime headers and library from PyPI wheels; HIP 5.2.3's
//! NVIDIA headers do not compile against CUDA 13's.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bindgen::hip_include_dir;
use crate::wheel::Wheel;
use crate::{root, run};

/// The shim's source, relative to the workspace root.
const SOURCE: &str = "gpu-hip-ffi/nvidia/hip_nvidia_shim.cpp";
/// Where the shared library and the CUDA runtime go, relative to the workspace root.
pub(crate) const OUTPUT_DIR: &str = "target/hip-nvidia";
/// The shim's file name (what gpu-hip-ffi's `nvidia` loader opens).
pub(crate) const SHIM_FILE: &str = "libgpu_hip_nvidia.so";
/// The CUDA runtime's file name, as the shim names it.
pub(crate) const CUDART_FILE: &str = "libcudart.so.11.0";

/// CUDA 11.8: the runtime's headers and library, nvcc's `crt` headers, and the profiler header.
const RUNTIME: Wheel = Wheel {
    package: "nvidia-cuda-runtime-cu11",
    version: "11.8.89",
    probe: "nvidia/cuda_runtime/lib/libcudart.so.11.0",
};
const NVCC: Wheel = Wheel {
    package: "nvidia-cuda-nvcc-cu11",
    version: "11.8.89",
    probe: "nvidia/cuda_nvcc/include/crt/host_defines.h",
};
const PROFILER: Wheel = Wheel {
    package: "nvidia-cuda-profiler-api-cu11",
    version: "11.8.86",
    probe: "nvidia/cuda_profiler_api/include/cuda_profiler_api.h",
};

/// Runs `cargo xtask hip-shim`.
pub(crate) fn hip_shim(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err("usage: cargo xtask hip-shim".to_string());
    }
    let output = build()?;
    println!("hip-shim: built {}", output.display());
    Ok(())
}

/// Builds the shim into [`OUTPUT_DIR`]; returns that folder.
pub(crate) fn build() -> Result<PathBuf, String> {
    let root = root();
    let runtime = RUNTIME.fetch(&root)?.join("nvidia/cuda_runtime");
    let nvcc = NVCC.fetch(&root)?.join("nvidia/cuda_nvcc/include");
    let profiler = PROFILER
        .fetch(&root)?
        .join("nvidia/cuda_profiler_api/include");
    let hip = hip_include_dir()?;
    let output = root.join(OUTPUT_DIR);
    let objects_dir = output.join("obj");
    std::fs::create_dir_all(&objects_dir)
        .map_err(|e| format!("cannot create {}: {e}", objects_dir.display()))?;
    let target = "x86_64-unknown-linux-gnu";
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file(root.join(SOURCE))
        .include(&hip)
        .include(runtime.join("include"))
        .include(&nvcc)
        .include(&profiler)
        .flag("-std=c++17")
        .flag("-fvisibility=hidden")
        // The NVIDIA headers define many inline functions the shim does not use.
        .flag("-Wno-unused-function")
        .flag("-Wno-deprecated-declarations")
        .pic(true)
        .opt_level(2)
        .target(target)
        .host(target)
        .out_dir(&objects_dir)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .warnings(true);
    let objects = build
        .try_compile_intermediates()
        .map_err(|e| format!("cannot compile {SOURCE}: {e}"))?;
    let compiler = build
        .try_get_compiler()
        .map_err(|e| format!("no C++ compiler: {e}"))?;
    let library = output.join(SHIM_FILE);
    let lib_dir = runtime.join("lib");
    run(compiler
        .to_command()
        .arg("-shared")
        .arg("-o")
        .arg(&library)
        .args(&objects)
        .arg(format!("-L{}", lib_dir.display()))
        .arg(format!("-l:{CUDART_FILE}"))
        .arg("-ldl")
        // libcudart.so.11.0 travels beside the shim; libcuda's symbols bind lazily (the shim's
        // constructor loads libcuda.so.1 with RTLD_GLOBAL).
        .arg("-Wl,-rpath,$ORIGIN")
        .arg("-Wl,-z,lazy"))?;
    copy(&lib_dir.join(CUDART_FILE), &output.join(CUDART_FILE))?;
    strip(&library)?;
    Ok(output)
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// Strips the shim's debug information (it travels to the GPU box in a size-limited bundle).
fn strip(library: &Path) -> Result<(), String> {
    run(Command::new("strip").arg("--strip-debug").arg(library))
}
