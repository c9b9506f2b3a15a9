//! `cargo xtask COMMAND`: the project's workflow steps that plain cargo does not cover.
//! Each command runs cargo (or cargo-fuzz) with the project's pinned options.

mod amdgpu_kernels;
mod bindgen;
mod capi_header;
mod cycles;
mod hip_shim;
mod install;
mod iree;
mod links;
mod mlir;
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
  test-hw [--bundle DIR] [--expect cuda,...] [--hip-platform nvidia|amd]
                              build the hardware tests and examples into a bundle with a runner
                              script and run it here; with --bundle only write it (for a GPU
                              machine without Rust: copy DIR there and run `bash DIR/run.sh`);
                              HIP runs through the NVIDIA shim unless --hip-platform amd
  bindgen [cuda|cupti|hip|hsa]... [--check]
                              regenerate the FFI crates' src/sys.rs from the pinned headers (cuda.h
                              and CUPTI from PyPI, ROCm 5.2.3 from Debian; needs pip, dpkg and libclang);
                              --check only compares a fresh run with the committed files
  amdgpu-kernels              compile the standard kernels into AMDGPU code objects (gfx90a,
                              gfx942, gfx1100) in gpu-hip-ffi/kernels/code_objects/ (clang-19, lld)
  hip-shim                    build HIP for NVIDIA GPUs (gpu-hip-ffi's `nvidia` shim) into
                              target/hip-nvidia/ (needs pip, a C++ compiler, libamdhip64-dev)
  capi-header [--check]       regenerate gpu-capi/include/gpu_runtime.h from gpu-capi's source
                              (cbindgen); --check only compares a fresh run with the committed file
  mlir [--runtime LIB] [--out DIR] [--llvm-bindir DIR]
                              compile clients/mlir/ with LLVM 22 (mlir-22-tools, llvm-22) and
                              link each program against LIB (default: gpu-capi, built here)
  iree [--out DIR]            compile clients/iree/ with IREE from PyPI (iree-base-compiler and
                              -runtime) for CUDA and the CPU, check its outputs on the CPU, and put
                              the CUDA module, its flag files and iree-run-module in DIR (default
                              target/iree; test-hw puts them in its bundle)
  install --prefix DIR [--debug]
                              build gpu-capi (release unless --debug) and install the C library
                              under DIR: include/gpu_runtime.h, lib/libgpu_capi.{a,so},
                              lib/pkgconfig/gpu-runtime.pc, lib/cmake/gpu_runtime/ (find_package)
  check-links                 check that every relative link in the tracked Markdown files
                              points at a file or directory of the repository (and an anchor at
                              a heading of its Markdown file)
  module-cycles               check that no two modules of any crate import each other (through
                              `crate::`, `super::` or `self::` paths, in `use` items and code)
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
        Some("capi-header") => capi_header::capi_header(&args[1..]),
        Some("mlir") => mlir::mlir(&args[1..]),
        Some("iree") => iree::iree(&args[1..]),
        Some("install") => install::install(&args[1..]),
        Some("test-hw") => test_hw::test_hw(&args[1..]),
        Some("check-links") => links::check_links(&args[1..]),
        Some("module-cycles") => cycles::module_cycles(&args[1..]),
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

/// Copies a file, stripping its symbols unless it is a Python script (for the bundles).
fn copy_stripped(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
    // Symbols only make the bundle larger; a machine without `strip` keeps them. Scripts
    // are copied as they are.
    if from.extension().is_none_or(|ext| ext != "py") {
        let _ = Command::new("strip").arg(to).status();
    }
    Ok(())
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

/// Where `--check` of a generated file keeps the fresh output for a full diff.
const FRESH_DIR: &str = "target/generated-fresh";

/// Writes a generated file (`output`, relative to `root`), or (`check`) fails if it differs
/// from the committed one, naming the first differing line and keeping the fresh output under
/// [`FRESH_DIR`]; `command` is what regenerates it.
fn write_or_check(
    root: &Path,
    output: &str,
    text: &str,
    check: bool,
    command: &str,
) -> Result<(), String> {
    use std::fmt::Write as _;
    let committed = root.join(output);
    if !check {
        std::fs::write(&committed, text)
            .map_err(|e| format!("cannot write {}: {e}", committed.display()))?;
        println!("{command}: wrote {output}");
        return Ok(());
    }
    let current = std::fs::read_to_string(&committed)
        .map_err(|e| format!("cannot read {}: {e}", committed.display()))?;
    if current == text {
        println!("{command} --check: {output} matches a fresh run");
        return Ok(());
    }
    let fresh_name = output.replace('/', "_");
    let fresh_dir = root.join(FRESH_DIR);
    std::fs::create_dir_all(&fresh_dir)
        .map_err(|e| format!("cannot create {}: {e}", fresh_dir.display()))?;
    let fresh = fresh_dir.join(&fresh_name);
    std::fs::write(&fresh, text).map_err(|e| format!("cannot write {}: {e}", fresh.display()))?;
    let mut report = format!(
        "{output} differs from a fresh run (kept in {FRESH_DIR}/{fresh_name}); run `{command}` \
         and commit the result"
    );
    let differing = current
        .lines()
        .map(Some)
        .chain(std::iter::repeat(None))
        .zip(text.lines().map(Some).chain(std::iter::repeat(None)))
        .take_while(|pair| pair != &(None, None))
        .enumerate()
        .find(|(_, (a, b))| a != b);
    if let Some((index, (a, b))) = differing {
        let _ = write!(
            report,
            "\nfirst difference at line {}:\n  committed: {}\n  fresh:     {}",
            index + 1,
            a.unwrap_or("<end of file>"),
            b.unwrap_or("<end of file>")
        );
    }
    Err(report)
}
