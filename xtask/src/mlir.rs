//! `cargo xtask mlir`: compiles the MLIR client programs of `clients/mlir/` ahead of time with
//! LLVM 22's `mlir-opt`, `mlir-translate` and `llc`, and links each with its C main against an
//! `mgpu*` runtime library: ours (gpu-capi) or any other named on the command line.
//!
//! Each executable needs `libmlir_cuda_runtime.so` (the name of MLIR's own CUDA runtime
//! wrappers) and finds it in `lib/` beside itself (a RUNPATH of `$ORIGIN/lib`), where the
//! command puts a copy of the chosen library; `LD_LIBRARY_PATH=DIR` runs the same executable
//! against another library of that name in `DIR` (upstream's wrappers, say), unchanged.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{root, run};

/// The lowering of gpu-capi/README.md: the kernels become PTX for sm_90 (the driver JITs them;
/// PTX ISA 8.0 is needed for sm_90), the host code calls the `mgpu*` runtime ABI.
const PIPELINE: &str =
    "--gpu-lower-to-nvvm-pipeline=cubin-chip=sm_90 cubin-features=+ptx80 cubin-format=isa";
/// The library name MLIR's lowered programs are linked against.
const RUNTIME_NAME: &str = "mlir_cuda_runtime";

struct Options {
    out: PathBuf,
    runtime: Option<PathBuf>,
    bindir: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        out: root().join("target/mlir"),
        runtime: None,
        bindir: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .map(PathBuf::from)
                .ok_or(format!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--out" => options.out = value()?,
            "--runtime" => options.runtime = Some(value()?),
            "--llvm-bindir" => options.bindir = Some(value()?),
            other => return Err(format!("unknown mlir option {other}")),
        }
    }
    Ok(options)
}

pub(crate) fn mlir(args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    let bindir = match options.bindir {
        Some(dir) => dir,
        None => llvm_bindir()?,
    };
    let runtime = match options.runtime {
        Some(path) => path,
        None => build_runtime()?,
    };
    let programs = build_programs(&bindir, &runtime, &options.out)?;
    println!(
        "mlir: {} programs in {} (linked against {}): {}",
        programs.len(),
        options.out.display(),
        runtime.display(),
        programs.join(", ")
    );
    Ok(())
}

/// Lowers, compiles and links every program of `clients/mlir/` into `out`, with `runtime`
/// copied to `out/lib/libmlir_cuda_runtime.so` (the intermediate files go to
/// `target/mlir-build/`). Returns the program names.
pub(crate) fn build_programs(
    bindir: &Path,
    runtime: &Path,
    out: &Path,
) -> Result<Vec<String>, String> {
    let sources = root().join("clients/mlir");
    let work = root().join("target/mlir-build");
    let lib = out.join("lib");
    for dir in [&work, &lib] {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let linked = lib.join(format!("lib{RUNTIME_NAME}.so"));
    fs::copy(runtime, &linked).map_err(|e| {
        format!(
            "cannot copy {} to {}: {e}",
            runtime.display(),
            linked.display()
        )
    })?;
    let mut names = Vec::new();
    for source in mlir_sources(&sources)? {
        let name = source
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or_else(|| format!("{} has no usable name", source.display()))?
            .to_string();
        let text = fs::read_to_string(&source)
            .map_err(|e| format!("cannot read {}: {e}", source.display()))?;
        let expanded = work.join(format!("{name}.mlir"));
        fs::write(&expanded, expand_repeats(&text)?)
            .map_err(|e| format!("cannot write {}: {e}", expanded.display()))?;
        let lowered = work.join(format!("{name}.lowered.mlir"));
        let llvm_ir = work.join(format!("{name}.ll"));
        let object = work.join(format!("{name}.o"));
        run(Command::new(bindir.join("mlir-opt"))
            .arg(&expanded)
            .arg(PIPELINE)
            .arg("-o")
            .arg(&lowered))?;
        run(Command::new(bindir.join("mlir-translate"))
            .arg("--mlir-to-llvmir")
            .arg(&lowered)
            .arg("-o")
            .arg(&llvm_ir))?;
        run(Command::new(bindir.join("llc"))
            .args(["-O2", "-filetype=obj", "-relocation-model=pic"])
            .arg(&llvm_ir)
            .arg("-o")
            .arg(&object))?;
        run(
            Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
                .args(["-O2", "-Wall", "-Wextra", "-Werror"])
                .arg(sources.join(format!("{name}.c")))
                .arg(&object)
                .arg("-o")
                .arg(out.join(&name))
                .arg(format!("-L{}", lib.display()))
                .arg(format!("-l{RUNTIME_NAME}"))
                .args(["-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib", "-ldl"]),
        )?;
        names.push(name);
    }
    Ok(names)
}

/// The `.mlir` files of `dir`, in name order.
fn mlir_sources(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut sources: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "mlir"))
        .collect();
    sources.sort();
    if sources.is_empty() {
        return Err(format!("no .mlir programs in {}", dir.display()));
    }
    Ok(sources)
}

/// Writes the line after each `// @repeat N` line N times, with `{i}` replaced by 0, 1, ...
/// and `{i+1}` by the next number (MLIR's lowering cannot carry an async token through a loop,
/// so a chain of N dependent launches is written out).
fn expand_repeats(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        out.push_str(line);
        out.push('\n');
        let Some(count) = line.trim().strip_prefix("// @repeat ") else {
            continue;
        };
        let count: usize = count
            .trim()
            .parse()
            .map_err(|_| format!("line {}: `@repeat` needs a count", number + 1))?;
        let (_, template) = lines
            .next()
            .ok_or_else(|| format!("line {}: `@repeat` with no line after it", number + 1))?;
        for i in 0..count {
            let line = template
                .replace("{i+1}", &(i + 1).to_string())
                .replace("{i}", &i.to_string());
            out.push_str(&line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// LLVM 22's binary folder: `LLVM_BINDIR`, else from `llvm-config-22` (Debian's `llvm-22`).
pub(crate) fn llvm_bindir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("LLVM_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let output = Command::new("llvm-config-22")
        .arg("--bindir")
        .output()
        .map_err(|e| {
            format!(
                "cannot run llvm-config-22 ({e}): install Debian's mlir-22-tools and llvm-22, or \
                 pass --llvm-bindir DIR"
            )
        })?;
    if !output.status.success() {
        return Err("llvm-config-22 --bindir failed".into());
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// Builds gpu-capi's shared library (release, with the CUDA backend) and returns its path.
fn build_runtime() -> Result<PathBuf, String> {
    run(Command::new("cargo").current_dir(root()).args([
        "build",
        "--release",
        "-p",
        "gpu-capi",
        "--features",
        "cuda",
    ]))?;
    Ok(root().join("target/release/libgpu_capi.so"))
}

#[cfg(test)]
mod tests {
    use super::expand_repeats;

    #[test]
    fn a_repeat_writes_the_next_line_with_counted_names() {
        let text = "a\n// @repeat 3\n%l{i+1} = f [%l{i}]\nb\n";
        assert_eq!(
            expand_repeats(text).unwrap(),
            "a\n// @repeat 3\n%l1 = f [%l0]\n%l2 = f [%l1]\n%l3 = f [%l2]\nb\n"
        );
    }

    #[test]
    fn a_repeat_without_a_count_or_a_line_is_refused() {
        assert!(
            expand_repeats("// @repeat x\nline\n")
                .unwrap_err()
                .contains("line 1")
        );
        assert!(
            expand_repeats("a\n// @repeat 2")
                .unwrap_err()
                .contains("no line after")
        );
    }
}
