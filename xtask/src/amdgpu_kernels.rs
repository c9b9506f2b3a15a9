//! `cargo xtask amdgpu-kernels`: compiles the standard kernels for AMD GPUs
//! (gpu-hip-ffi/kernels/kernels_amdgpu.hip) into one code object per target with Debian's clang
//! and lld, in clang's HIP mode without ROCm's headers or device libraries, into
//! gpu-hip-ffi/kernels/code_objects/ (committed, like the CUDA crate's PTX).

use std::process::Command;

use crate::{root, run};

/// The kernels' source and the output folder, relative to the workspace root.
const SOURCE: &str = "gpu-hip-ffi/kernels/kernels_amdgpu.hip";
const OUTPUT_DIR: &str = "gpu-hip-ffi/kernels/code_objects";

/// The targets built: CDNA2 (MI200), CDNA3 (MI300), RDNA3 (Radeon 7000).
pub(crate) const TARGETS: [&str; 3] = ["gfx90a", "gfx942", "gfx1100"];

/// The clang used unless `CLANG` names one: Debian 12's clang 19 (clang 14 lacks gfx942 and
/// gfx1100).
const DEFAULT_CLANG: &str = "clang-19";

/// Runs `cargo xtask amdgpu-kernels`.
pub(crate) fn amdgpu_kernels(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err("usage: cargo xtask amdgpu-kernels".to_string());
    }
    let clang = std::env::var("CLANG").unwrap_or_else(|_| DEFAULT_CLANG.to_string());
    let root = root();
    let output = root.join(OUTPUT_DIR);
    std::fs::create_dir_all(&output)
        .map_err(|e| format!("cannot create {}: {e}", output.display()))?;
    for target in TARGETS {
        let object = output.join(format!("{target}.hsaco"));
        run(Command::new(&clang)
            .args(["-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output"])
            .arg(format!("--offload-arch={target}"))
            // No ROCm: neither its headers nor its bitcode device libraries.
            .args(["-nogpuinc", "-nogpulib"])
            // ROCm 5.2's loader reads code objects up to version 4.
            .arg("-mcode-object-version=4")
            .args(["-O3", "-o"])
            .arg(&object)
            .arg(root.join(SOURCE)))
        .map_err(|e| {
            format!("{e}\n(Debian: `apt-get install clang-19 lld-19`, or set CLANG to a clang with the AMDGPU target and lld)")
        })?;
        println!("amdgpu-kernels: wrote {OUTPUT_DIR}/{target}.hsaco");
    }
    Ok(())
}
