//! End to end against NVTX's real headers: `tests/nvtx/regions.c` (seeded.cu's annotations,
//! `hw/races/pool_nvtx.h`), compiled with `cc` against the nvtx3 headers found, reaches the
//! recorder through `NVTX_INJECTION64_PATH` (no CUDA).
//!
//! The headers are an input, never committed: `GPU_RECORDER_NVTX_INCLUDE` names a folder
//! holding `nvtx3/` (a CUDA toolkit's `include`), else they are looked for under the target
//! folder's `nvtx/` (`nvtx/include`, or the `nvidia-nvtx` wheel unpacked there:
//! `nvtx/nvidia/cu13/include`). Without headers or `cc` the test says so and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target folder (`target/`), above this test's scratch folder.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

/// The folders holding `nvtx3/nvToolsExtMem.h` to build against.
fn include_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("GPU_RECORDER_NVTX_INCLUDE")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    let nvtx = target_dir().join("nvtx");
    dirs.extend([
        nvtx.join("include"),
        nvtx.join("nvidia/cu13/include"),
        nvtx.join("nvidia/nvtx/include"),
    ]);
    dirs.retain(|dir| dir.join("nvtx3/nvToolsExtMem.h").is_file());
    dirs
}

/// The recorder Cargo built for this test: `target/PROFILE/deps/libgpu_recorder.so`, beside
/// the test (`cargo test` rebuilds that one; the copy in `target/PROFILE` is refreshed only by
/// `cargo build`).
fn recorder() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.with_file_name("libgpu_recorder.so")
}

#[test]
fn a_program_built_with_the_headers_found_reaches_the_recorder() {
    let dirs = include_dirs();
    let Some(include) = dirs.first() else {
        eprintln!(
            "skipped: no nvtx3/nvToolsExtMem.h (GPU_RECORDER_NVTX_INCLUDE, or {}/nvtx/include)",
            target_dir().display()
        );
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvtx/regions.c");
    let program = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nvtx-regions");
    let built = Command::new("cc")
        .arg("-I")
        .arg(include)
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .arg("-ldl")
        .status();
    match built {
        Ok(status) => assert!(status.success(), "cc failed on {}", source.display()),
        Err(error) => {
            eprintln!("skipped: cc cannot run: {error}");
            return;
        }
    }
    let run = |tool: Option<&Path>| {
        let mut command = Command::new(&program);
        command.env_remove("CUDA_INJECTION64_PATH");
        match tool {
            Some(tool) => command.env("NVTX_INJECTION64_PATH", tool),
            None => command.env_remove("NVTX_INJECTION64_PATH"),
        };
        let output = command.output().expect("the program runs");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.code(), text)
    };
    let (without, text) = run(None);
    assert_eq!(without, Some(1), "without a tool NVTX answers NULL: {text}");
    let library = recorder();
    assert!(library.is_file(), "{} not built", library.display());
    let (with, text) = run(Some(&library));
    assert_eq!(
        with,
        Some(0),
        "headers {}: the recorder did not receive the calls: {text}",
        include.display()
    );
}
