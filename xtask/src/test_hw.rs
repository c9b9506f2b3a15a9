//! `cargo xtask test-hw`: builds the hardware test binaries and examples in release mode and
//! bundles them with a runner script (`hw-runner.sh`), then runs the bundle here, or leaves it
//! for a GPU machine without a Rust toolchain (build here, copy, run there).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{hip_shim, root, run};

const RUNNER: &str = include_str!("hw-runner.sh");

/// Packages whose test binaries go into the bundle (each skips cleanly without its driver),
/// with the features they are built with: HIP as it runs on NVIDIA GPUs, through the shim
/// (`--hip-platform amd` builds it for ROCm instead, without the shim).
const PACKAGES: [(&str, &str); 3] = [
    ("gpu-cuda-ffi", ""),
    ("gpu-hip-ffi", HIP_NVIDIA_FEATURE),
    ("gpu-hsa-ffi", ""),
];
/// Benchmark programs (harness-less, run with `--bench`) that go into the bundle: package,
/// bench, features.
const BENCHES: [(&str, &str, &str); 2] = [
    ("gpu-cuda-ffi", "hw", ""),
    ("gpu-hip-ffi", "hw_hip", HIP_NVIDIA_FEATURE),
];
/// Examples of the facade, built with every driver feature, that run in the bundle.
const EXAMPLES: [&str; 2] = ["pipeline", "stress"];
const FEATURES: &str = "cuda,hip-nvidia";
/// The feature that selects HIP's NVIDIA platform (in `PACKAGES`, `BENCHES`), and the
/// examples' features when the bundle is for ROCm (`--hip-platform amd`).
const HIP_NVIDIA_FEATURE: &str = "nvidia";
const FEATURES_AMD: &str = "cuda,hip";
/// Examples that run a second time on HIP (the runner sets `GPU_RUNTIME_BACKEND=hip`).
const HIP_EXAMPLES: &str = "pipeline";
/// The recorder's programs (gpu-recorder/hw): copied into the bundle's `recorder/` folder
/// beside the injection library and the checker, and run by its `run.sh`.
const RECORDER_PROGRAMS: &str = "gpu-recorder/hw";

struct Options {
    bundle: PathBuf,
    run: bool,
    expect: String,
    /// HIP through the NVIDIA shim (the default), or ROCm's own library (`--hip-platform amd`).
    hip_on_nvidia: bool,
}

impl Options {
    /// `features` as the bundle builds them: without the NVIDIA platform feature for ROCm.
    fn features<'a>(&self, features: &'a str) -> &'a str {
        if !self.hip_on_nvidia && features == HIP_NVIDIA_FEATURE {
            ""
        } else {
            features
        }
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        bundle: root().join("target/hw-bundle"),
        run: true,
        expect: String::new(),
        hip_on_nvidia: true,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().cloned().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--bundle" => {
                options.bundle = PathBuf::from(value()?);
                options.run = false;
            }
            "--expect" => options.expect = value()?,
            "--hip-platform" => {
                options.hip_on_nvidia = match value()?.as_str() {
                    "nvidia" => true,
                    "amd" => false,
                    other => return Err(format!("--hip-platform is nvidia or amd, not {other}")),
                }
            }
            other => return Err(format!("unknown test-hw option {other}")),
        }
    }
    Ok(options)
}

pub(crate) fn test_hw(args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    let tests = build_tests(&options)?;
    let benches = build_benches(&options)?;
    let examples = build_examples(&options)?;
    let torch = build_torch_client()?;
    let recorder = build_recorder()?;
    // HIP on NVIDIA: the shim and the CUDA 11.8 runtime beside it (the runner puts `lib/` on
    // the loader's path). ROCm brings its own library.
    let libraries = if options.hip_on_nvidia {
        let shim_dir = hip_shim::build()?;
        vec![
            shim_dir.join(hip_shim::SHIM_FILE),
            shim_dir.join(hip_shim::CUDART_FILE),
        ]
    } else {
        Vec::new()
    };
    write_bundle(
        &options,
        &[
            ("tests", &tests),
            ("benches", &benches),
            ("examples", &examples),
            ("torch", &torch),
            ("recorder", &recorder),
            ("lib", &libraries),
        ],
    )?;
    copy_programs(
        &root().join(RECORDER_PROGRAMS),
        &options.bundle.join("recorder"),
    )?;
    // The workloads plug the allocator in through the gpu_runtime_torch package: its Python
    // part beside them (found as the scripts' folder is on Python's path), with the bundle's
    // library passed as --lib instead of the wheel's.
    let package = options.bundle.join("torch").join(TORCH_PACKAGE);
    fs::create_dir_all(&package)
        .map_err(|e| format!("cannot create {}: {e}", package.display()))?;
    let module = root()
        .join("python")
        .join(TORCH_PACKAGE)
        .join("__init__.py");
    fs::copy(&module, package.join("__init__.py"))
        .map_err(|e| format!("cannot copy {}: {e}", module.display()))?;
    let mlir = match crate::mlir::llvm_bindir() {
        Ok(bindir) => crate::mlir::build_programs(
            &bindir,
            &release_dir().join("libgpu_capi.so"),
            &options.bundle.join("mlir"),
        )?
        .len(),
        Err(why) => {
            println!("test-hw: no MLIR programs in the bundle: {why}");
            0
        }
    };
    // IREE's tools and module, for the recorder's run (its run.sh looks in `recorder/iree`).
    let iree = match crate::iree::fetch() {
        Ok(tools) => crate::iree::build(&tools, &options.bundle.join("recorder/iree"))?.len(),
        Err(why) => {
            println!("test-hw: no IREE module in the bundle: {why}");
            0
        }
    };
    println!(
        "test-hw: bundle with {} test binaries, {} benchmarks, {} examples, {mlir} MLIR \
         programs and {iree} IREE files in {}",
        tests.len(),
        benches.len(),
        examples.len(),
        options.bundle.display()
    );
    if options.run {
        run(Command::new("bash").arg(options.bundle.join("run.sh")))
    } else {
        println!("test-hw: copy the folder to a GPU machine and run `bash run.sh` there");
        Ok(())
    }
}

/// Release test binaries of `PACKAGES`, from cargo's JSON messages.
fn build_tests(options: &Options) -> Result<Vec<PathBuf>, String> {
    let mut all = Vec::new();
    for (package, features) in PACKAGES {
        let mut command = Command::new("cargo");
        command
            .current_dir(root())
            .args(["test", "--release", "--no-run", "--message-format=json"])
            .args(["-p", package, "--features", options.features(features)])
            // Benchmarks are built by `build_benches`; only test targets here.
            .args(["--lib", "--tests"]);
        all.extend(executables(command)?);
    }
    Ok(all)
}

/// Release benchmark programs of `BENCHES`.
fn build_benches(options: &Options) -> Result<Vec<PathBuf>, String> {
    let mut all = Vec::new();
    for (package, bench, features) in BENCHES {
        let mut command = Command::new("cargo");
        command.current_dir(root()).args([
            "bench",
            "--no-run",
            "--message-format=json",
            "-p",
            package,
            "--bench",
            bench,
            "--features",
            options.features(features),
        ]);
        all.extend(executables(command)?);
    }
    Ok(all)
}

/// The executables cargo reports building (test profile) for `command`.
fn executables(mut command: Command) -> Result<Vec<PathBuf>, String> {
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the test binaries failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_test = message["profile"]["test"].as_bool() == Some(true);
        if let (true, Some(path)) = (is_test, message["executable"].as_str()) {
            binaries.push(PathBuf::from(path));
        }
    }
    Ok(binaries)
}

fn build_examples(options: &Options) -> Result<Vec<PathBuf>, String> {
    let mut command = Command::new("cargo");
    command
        .current_dir(root())
        .args(["build", "--release", "--features"])
        .arg(if options.hip_on_nvidia {
            FEATURES
        } else {
            FEATURES_AMD
        });
    for example in EXAMPLES {
        command.args(["--example", example]);
    }
    run(&mut command)?;
    let release = release_dir();
    Ok(EXAMPLES
        .iter()
        .map(|e| release.join("examples").join(e))
        .collect())
}

/// The Python package the PyTorch workloads import (python/ in the repository).
const TORCH_PACKAGE: &str = "gpu_runtime_torch";

/// The PyTorch workloads (`clients/torch/*.py`, run where torch is installed) and the C
/// library they plug into PyTorch (gpu-capi's cdylib, release build), and `gpu-alloc-replay`,
/// which `replay_check.py` runs on the traces the workloads record.
fn build_torch_client() -> Result<Vec<PathBuf>, String> {
    run(Command::new("cargo")
        .current_dir(root())
        .args(["build", "--release", "-p", "gpu-capi"]))?;
    run(Command::new("cargo").current_dir(root()).args([
        "build",
        "--release",
        "-p",
        "gpu-runtime",
        "--bin",
        "gpu-alloc-replay",
    ]))?;
    let scripts = root().join("clients/torch");
    let mut files: Vec<PathBuf> = fs::read_dir(&scripts)
        .map_err(|e| format!("cannot list {}: {e}", scripts.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "py"))
        .collect();
    files.sort();
    files.push(release_dir().join("libgpu_capi.so"));
    files.push(release_dir().join("gpu-alloc-replay"));
    Ok(files)
}

/// The injection library and the checker, in release mode.
fn build_recorder() -> Result<Vec<PathBuf>, String> {
    run(Command::new("cargo").current_dir(root()).args([
        "build",
        "--release",
        "-p",
        "gpu-recorder",
        "-p",
        "gpu-runtime",
        "--lib",
        "--bin",
        "gpu-trace-check",
    ]))?;
    let release = release_dir();
    Ok(vec![
        release.join("libgpu_recorder.so"),
        release.join("gpu-trace-check"),
    ])
}

/// Copies the files of `from` (scripts and sources, not stripped) into `to`, folders whole.
fn copy_programs(from: &Path, to: &Path) -> Result<(), String> {
    let entries = fs::read_dir(from).map_err(|e| format!("cannot list {}: {e}", from.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list {}: {e}", from.display()))?
            .path();
        let Some(name) = path.file_name() else {
            continue;
        };
        if path.is_dir() {
            // A folder of programs (the seeded races, `recorder/races/`) travels whole.
            let folder = to.join(name);
            fs::create_dir_all(&folder)
                .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
            copy_programs(&path, &folder)?;
        } else {
            fs::copy(&path, to.join(name))
                .map_err(|e| format!("cannot copy {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Cargo's release output folder (`CARGO_TARGET_DIR` respected).
fn release_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root().join("target"), PathBuf::from)
        .join("release")
}

fn write_bundle(options: &Options, folders: &[(&str, &[PathBuf])]) -> Result<(), String> {
    let bundle = &options.bundle;
    if bundle.exists() {
        // Only an earlier bundle is replaced, never a folder someone named by mistake.
        if !bundle.join("run.sh").exists() || !bundle.join("COMMIT").exists() {
            return Err(format!(
                "{} exists and is not a test-hw bundle; name a new folder",
                bundle.display()
            ));
        }
        fs::remove_dir_all(bundle)
            .map_err(|e| format!("cannot replace {}: {e}", bundle.display()))?;
    }
    for &(folder, files) in folders {
        let dir = bundle.join(folder);
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        for file in files {
            crate::copy_stripped(file, &dir.join(bundle_name(file)))?;
        }
    }
    let commit = git(&["rev-parse", "HEAD"])?;
    let dirty = if git(&["status", "--porcelain"])?.is_empty() {
        ""
    } else {
        " (with uncommitted changes)"
    };
    write(&bundle.join("COMMIT"), &format!("{commit}{dirty}\n"))?;
    write(&bundle.join("EXPECT"), &format!("{}\n", options.expect))?;
    write(&bundle.join("HIP_EXAMPLES"), &format!("{HIP_EXAMPLES}\n"))?;
    write(&bundle.join("run.sh"), RUNNER)
}

/// A test binary's name without cargo's hash suffix (`backend_hw-0123abcd` -> `backend_hw`).
fn bundle_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            stem.to_string()
        }
        _ => name,
    }
}

fn git(args: &[&str]) -> Result<String, String> {
    let output = Command::new("git")
        .current_dir(root())
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_names_drop_cargo_hashes_only() {
        assert_eq!(
            bundle_name(Path::new("/t/backend_hw-0123456789abcdef")),
            "backend_hw"
        );
        assert_eq!(bundle_name(Path::new("/t/pipeline")), "pipeline");
        assert_eq!(bundle_name(Path::new("/t/driver-smoke")), "driver-smoke");
    }

    #[test]
    fn options_parse_and_refuse_unknown_flags() {
        let args = ["--bundle", "out", "--expect", "cuda"].map(String::from);
        let options = parse(&args).unwrap();
        assert_eq!(options.bundle, PathBuf::from("out"));
        assert!(!options.run);
        assert_eq!(options.expect, "cuda");
        assert!(options.hip_on_nvidia);
        assert_eq!(options.features(HIP_NVIDIA_FEATURE), HIP_NVIDIA_FEATURE);
        let amd = parse(&["--hip-platform", "amd"].map(String::from)).unwrap();
        assert!(!amd.hip_on_nvidia);
        assert_eq!(amd.features(HIP_NVIDIA_FEATURE), "");
        assert_eq!(amd.features(""), "");
        assert!(parse(&["--hip-platform", "intel"].map(String::from)).is_err());
        assert!(parse(&["--what".to_string()]).is_err());
        assert!(parse(&["--expect".to_string()]).is_err());
    }
}
