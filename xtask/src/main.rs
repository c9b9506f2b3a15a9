//! `cargo xtask COMMAND`: the project's workflow steps that plain cargo does not cover.
//! Each command runs cargo (or cargo-fuzz) with the project's pinned options.

mod amdgpu_kernels;
mod bindgen;
mod hip_shim;
mod no_std;
mod test_hw;
mod wheel;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "\
usage: cargo xtask COMMAND

commands:
  no-std [--target T]...      build gpu-core into a #![no_std] library for each target (default:
                              the host; fails if std sneaks in); on bare-metal targets also link
                              a program that uses every part
  code-size [--target T] [--opt-level L]
                              bytes each gpu-core part adds to a bare-metal program (default
                              thumbv7em-none-eabihf; needs `rustup component add llvm-tools`)
  fuzz TARGET [--seconds N]   run a cargo-fuzz target for N seconds (default 60) on nightly
  fuzz-list                   list the fuzz targets
  test-hw [--bundle DIR] [--expect cuda,...]
                              build the hardware tests and examples into a bundle with a runner
                              script and run it here; with --bundle only write it (for a GPU
                              machine without Rust: copy DIR there and run `bash DIR/run.sh`)
  bindgen [cuda|hip|hsa]... [--check]
                              regenerate the FFI crates' src/sys.rs from the pinned headers (cuda.h
                              from PyPI, ROCm 5.2.3 from Debian; needs pip, dpkg and libclang);
                              --check only compares a fresh run with the committed files
  amdgpu-kernels              compile the standard kernels into AMDGPU code objects (gfx90a,
                              gfx942, gfx1100) in gpu-hip-ffi/kernels/code_objects/ (clang-19, lld)
  hip-shim                    build HIP for NVIDIA GPUs (gpu-hip-ffi's `nvidia` shim) into
                              target/hip-nvidia/ (needs pip, a C++ compiler, libamdhip64-dev)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("no-std") => no_std::no_std(&args[1..], USAGE),
        Some("code-size") => no_std::code_size(&args[1..], USAGE),
        Some("fuzz") => fuzz(&args[1..]),
        Some("bindgen") => bindgen::bindgen(&args[1..]),
        Some("amdgpu-kernels") => amdgpu_kernels::amdgpu_kernels(&args[1..]),
        Some("hip-shim") => hip_shim::hip_shim(&args[1..]),
        Some("test-hw") => test_hw::test_hw(&args[1..]),
        Some("fuzz-list") => run(Command::new("cargo")
            .args(["+nightly", "fuzz", "list"])
            .current_dir(root().join("fuzz"))),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the parent of this crate's directory).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn run(command: &mut Command) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed with {status}"))
    }
}

fn fuzz(args: &[String]) -> Result<(), String> {
    let target = args
        .first()
        .ok_or_else(|| format!("fuzz needs a TARGET\n{USAGE}"))?;
    let seconds = match args.get(1).map(String::as_str) {
        None => 60,
        Some("--seconds") => args
            .get(2)
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| "--seconds needs a whole number".to_string())?,
        Some(other) => return Err(format!("unknown fuzz option {other}\n{USAGE}")),
    };
    run(Command::new("cargo")
        .args([
            "+nightly",
            "fuzz",
            "run",
            target,
            "--",
            "-rss_limit_mb=4096",
        ])
        .arg(format!("-max_total_time={seconds}"))
        .current_dir(root().join("fuzz")))
}
