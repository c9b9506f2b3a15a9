//! `cargo xtask no-std` builds the `#![no_std]` proof (`xtask/no-std-check`) for each target it
//! is given; `cargo xtask code-size` links the proof's size probe for a bare-metal target once
//! per gpu-core part and reports the bytes each part costs, read from the ELF's sections.

use std::path::PathBuf;
use std::process::Command;

use crate::{root, run};

/// The parts the size probe can link, as (what the report calls it, the probe's features).
const PARTS: [(&str, &str); 6] = [
    ("nothing (allocator shim, panic handler)", ""),
    ("lock table", "lock-table"),
    ("token planner", "token"),
    ("allocator", "allocator"),
    ("workgroup planner", "workgroup"),
    ("all four", "lock-table,token,allocator,workgroup"),
];
/// Where `cargo xtask code-size` measures when no target is given.
const DEFAULT_SIZE_TARGET: &str = "thumbv7em-none-eabihf";

fn manifest() -> PathBuf {
    root().join("xtask/no-std-check/Cargo.toml")
}

/// Whether `target` is a bare-metal one (no operating system), where the probe can be linked.
fn bare_metal(target: &str) -> bool {
    target.contains("-none")
}

/// The values of every `--target` option; any other argument is an error.
fn targets(args: &[String], usage: &str) -> Result<Vec<String>, String> {
    let mut targets = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--target" => targets.push(
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("--target needs a target triple\n{usage}"))?,
            ),
            other => return Err(format!("unknown no-std option {other}\n{usage}")),
        }
    }
    Ok(targets)
}

/// Builds the probe program for `target` with `features`, in release mode with `opt_level`
/// (`None`: the profile's); returns the ELF's path.
fn build_probe(target: &str, features: &str, opt_level: Option<&str>) -> Result<PathBuf, String> {
    let mut command = Command::new("cargo");
    command
        .args([
            "build",
            "--release",
            "--bin",
            "size-probe",
            "--target",
            target,
        ])
        .args(["--features", features, "--manifest-path"])
        .arg(manifest());
    if let Some(level) = opt_level {
        command.env("CARGO_PROFILE_RELEASE_OPT_LEVEL", level);
    }
    run(&mut command)?;
    Ok(root().join(format!(
        "xtask/no-std-check/target/{target}/release/size-probe"
    )))
}

/// `cargo xtask no-std [--target T]...`: the library for each target (the host when none is
/// given), and on bare-metal targets the probe program linked with every part.
pub(crate) fn no_std(args: &[String], usage: &str) -> Result<(), String> {
    let targets = targets(args, usage)?;
    if targets.is_empty() {
        run(Command::new("cargo")
            .args(["build", "--release", "--lib", "--manifest-path"])
            .arg(manifest()))?;
        println!("no_std: gpu-core links into a #![no_std] staticlib without std (host)");
    }
    for target in &targets {
        run(Command::new("cargo")
            .args([
                "build",
                "--release",
                "--lib",
                "--target",
                target,
                "--manifest-path",
            ])
            .arg(manifest()))
        .map_err(|e| format!("{e}\n(is the target installed? rustup target add {target})"))?;
        if bare_metal(target) {
            build_probe(target, PARTS[PARTS.len() - 1].1, None)?;
            println!("no_std: {target}: gpu-core builds, and a program using every part links");
        } else {
            println!("no_std: {target}: gpu-core links into a #![no_std] staticlib");
        }
    }
    Ok(())
}

/// The `llvm-size` of the `llvm-tools` rustup component.
fn llvm_size() -> Result<PathBuf, String> {
    let output = |args: &[&str]| -> Result<String, String> {
        let out = Command::new("rustc")
            .args(args)
            .output()
            .map_err(|e| format!("cannot run rustc: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let sysroot = output(&["--print", "sysroot"])?;
    let version = output(&["-vV"])?;
    let host = version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .ok_or("rustc -vV names no host")?;
    let tool = PathBuf::from(sysroot.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin/llvm-size");
    if tool.exists() {
        Ok(tool)
    } else {
        Err(format!(
            "{} not found: rustup component add llvm-tools",
            tool.display()
        ))
    }
}

/// Bytes of an ELF's sections, as `llvm-size -A` reports them.
#[derive(Clone, Copy, Default)]
struct Sections {
    text: u64,
    rodata: u64,
    data: u64,
}

impl Sections {
    /// Bytes stored in flash: code, constants and the initial values of statics.
    fn flash(&self) -> u64 {
        self.text + self.rodata + self.data
    }
}

fn sections(llvm_size: &PathBuf, elf: &PathBuf) -> Result<Sections, String> {
    let out = Command::new(llvm_size)
        .arg("-A")
        .arg(elf)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", llvm_size.display()))?;
    if !out.status.success() {
        return Err(format!("llvm-size failed on {}", elf.display()));
    }
    let mut sizes = Sections::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(size)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(size) = size.parse::<u64>() else {
            continue;
        };
        match name {
            ".text" => sizes.text += size,
            ".rodata" => sizes.rodata += size,
            ".data" | ".sdata" => sizes.data += size,
            _ => {}
        }
    }
    Ok(sizes)
}

/// `cargo xtask code-size [--target T] [--opt-level L]`: a Markdown table of what each part
/// costs in a release build for a bare-metal target.
pub(crate) fn code_size(args: &[String], usage: &str) -> Result<(), String> {
    let mut target = DEFAULT_SIZE_TARGET.to_string();
    let mut opt_level = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let value = args
            .next()
            .cloned()
            .ok_or_else(|| format!("{arg} needs a value\n{usage}"))?;
        match arg.as_str() {
            "--target" => target = value,
            "--opt-level" => opt_level = Some(value),
            other => return Err(format!("unknown code-size option {other}\n{usage}")),
        }
    }
    if !bare_metal(&target) {
        return Err(format!(
            "code-size links a bare-metal program; {target} is not a bare-metal target"
        ));
    }
    let llvm_size = llvm_size()?;
    let mut rows = Vec::new();
    for (part, features) in PARTS {
        let elf = build_probe(&target, features, opt_level.as_deref())?;
        rows.push((part, sections(&llvm_size, &elf)?));
    }
    let empty = rows[0].1;
    let level = opt_level.as_deref().unwrap_or("3");
    println!("\n{target}, release, opt-level {level}, LTO, one codegen unit (bytes):\n");
    println!("| part | .text | .rodata | .data | flash | flash over the empty program |");
    println!("|---|---|---|---|---|---|");
    for (part, s) in rows {
        println!(
            "| {part} | {} | {} | {} | {} | {} |",
            s.text,
            s.rodata,
            s.data,
            s.flash(),
            s.flash() - empty.flash()
        );
    }
    Ok(())
}
