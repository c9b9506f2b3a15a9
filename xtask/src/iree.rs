//! `cargo xtask iree`: compiles the IREE client modules (`clients/iree/`) with IREE's compiler
//! from PyPI, checks their outputs on the CPU with IREE's runtime, and gathers what a GPU machine
//! without network or Rust needs to run them there (`iree-run-module`, the CUDA modules, flags).
//!
//! Both wheels are pinned, downloaded once and unpacked under `target/wheels/` (never
//! committed). IREE's tools need only the C and C++ system libraries (`ldd`), so they travel
//! alone; the CUDA HAL opens the driver at run time.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::wheel::Wheel;
use crate::{root, run};

/// IREE's release: the compiler and the runtime must match (the module format is versioned).
const VERSION: &str = "3.13.0";
const COMPILER: Wheel = Wheel {
    package: "iree-base-compiler",
    version: VERSION,
    probe: "iree/compiler/_mlir_libs/iree-compile",
};
const RUNTIME: Wheel = Wheel {
    package: "iree-base-runtime",
    version: VERSION,
    probe: "iree/_runtime_libs/iree-run-module",
};
/// The programs of the compiler's folder that it runs: itself and its linker (CPU modules).
const COMPILER_TOOLS: [&str; 2] = ["iree-compile", "iree-lld"];
/// The runtime wheel's folder of command-line tools.
const RUNTIME_TOOLS_DIR: &str = "iree/_runtime_libs";
/// The tools the GPU machine runs: one execution with its outputs checked, and the benchmark
/// tool for a chosen number of executions (a leak grows with them).
const TOOLS: [&str; 2] = ["iree-run-module", "iree-benchmark-module"];
/// The modules (`clients/iree/NAME.mlir`, whose function is also NAME) and how many IREE
/// devices each runs on; they share their inputs (`INPUTS.flags`) and expected outputs
/// (`INPUTS.expected`), as iree-run-module flag files.
const MODULES: [(&str, usize); 2] = [("mlp", 1), ("mlp_two_devices", 2)];
const INPUTS: &str = "mlp";
/// The names the two-device module gives its devices (`#hal.device.promise<@NAME>`).
const DEVICE_NAMES: [&str; 2] = ["device_a", "device_b"];
/// The CUDA target. IREE 3.13 knows NVIDIA targets up to sm_89 and refuses sm_90 ("missing
/// GPU target"); the module embeds PTX, which the driver compiles for the H100 when it loads it.
const CUDA_TARGET: &str = "sm_80";
/// Where `cargo xtask iree` puts its files by default, and where the CPU modules are kept.
const OUT_DIR: &str = "target/iree";
const WORK_DIR: &str = "target/iree-build";

/// Where a module is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Device {
    /// NVIDIA GPUs through IREE's CUDA HAL (`--device=cuda`).
    Cuda,
    /// This machine's CPU (`--device=local-task`), to check the module where there is no GPU.
    Cpu,
}

impl Device {
    /// `iree-compile`'s flags for a module on `devices` devices of this kind (one: the
    /// default device; more: the module's named devices, ordinals 0, 1, ...).
    fn compile_flags(self, devices: usize) -> Vec<String> {
        let kind = match self {
            Device::Cuda => "cuda",
            Device::Cpu => "local",
        };
        let mut flags: Vec<String> = if devices == 1 {
            vec![format!("--iree-hal-target-device={kind}")]
        } else {
            let named = DEVICE_NAMES.iter().take(devices).enumerate();
            std::iter::once("--iree-execution-model=async-external".to_string())
                .chain(named.map(|(ordinal, name)| {
                    format!("--iree-hal-target-device={name}={kind}[{ordinal}]")
                }))
                .collect()
        };
        match self {
            Device::Cuda => flags.push(format!("--iree-cuda-target={CUDA_TARGET}")),
            Device::Cpu => flags.extend([
                "--iree-hal-local-target-device-backends=llvm-cpu".to_string(),
                "--iree-llvmcpu-target-cpu=host".to_string(),
            ]),
        }
        flags
    }

    /// The compiled module's file name.
    fn module_file(self, module: &str) -> String {
        match self {
            Device::Cuda => format!("{module}_cuda.vmfb"),
            Device::Cpu => format!("{module}_cpu.vmfb"),
        }
    }
}

fn parse(args: &[String]) -> Result<PathBuf, String> {
    match args {
        [] => Ok(root().join(OUT_DIR)),
        [flag, dir] if flag == "--out" => Ok(PathBuf::from(dir)),
        [flag] if flag == "--out" => Err("--out needs a value".into()),
        _ => Err(format!("unknown iree options {}", args.join(" "))),
    }
}

pub(crate) fn iree(args: &[String]) -> Result<(), String> {
    let out = parse(args)?;
    let tools = fetch()?;
    let files = build(&tools, &out)?;
    println!(
        "iree: {} files in {} (run there: iree-run-module --device=cuda --module={} \
         --function={INPUTS} --flagfile={INPUTS}.flags --flagfile={INPUTS}.expected)",
        files.len(),
        out.display(),
        Device::Cuda.module_file(INPUTS)
    );
    Ok(())
}

/// IREE's compiler and the runtime's tool folder, fetched (or found) under target/wheels.
pub(crate) struct Tools {
    compiler: PathBuf,
    runtime_dir: PathBuf,
}

/// Downloads and unpacks both wheels (once) and makes their programs executable (unpacking a
/// wheel with Python's zipfile drops the mode bits).
pub(crate) fn fetch() -> Result<Tools, String> {
    let compiler = COMPILER.fetch(&root())?.join(COMPILER.probe);
    let runtime_dir = RUNTIME.fetch(&root())?.join(RUNTIME_TOOLS_DIR);
    let compiler_dir = compiler.parent().unwrap_or(Path::new("."));
    let programs = COMPILER_TOOLS.map(|tool| compiler_dir.join(tool));
    for program in programs
        .iter()
        .chain(&TOOLS.map(|tool| runtime_dir.join(tool)))
    {
        make_executable(program)?;
    }
    Ok(Tools {
        compiler,
        runtime_dir,
    })
}

/// Compiles each module for CUDA into `out` and for the CPU, runs the CPU modules here with
/// the expected outputs (a wrong value fails the build), and copies the tools (stripped) and the
/// flag files into `out`. Returns the files written.
pub(crate) fn build(tools: &Tools, out: &Path) -> Result<Vec<PathBuf>, String> {
    let sources = root().join("clients/iree");
    let work = root().join(WORK_DIR);
    for dir in [out, work.as_path()] {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let flags = sources.join(format!("{INPUTS}.flags"));
    let expected = sources.join(format!("{INPUTS}.expected"));
    let mut files = Vec::new();
    for (module, devices) in MODULES {
        let source = sources.join(format!("{module}.mlir"));
        let cuda_module = out.join(Device::Cuda.module_file(module));
        let cpu_module = work.join(Device::Cpu.module_file(module));
        for (device, compiled) in [(Device::Cuda, &cuda_module), (Device::Cpu, &cpu_module)] {
            run(Command::new(&tools.compiler)
                .args(device.compile_flags(devices))
                .arg(&source)
                .arg("-o")
                .arg(compiled))?;
        }
        run(Command::new(tools.runtime_dir.join("iree-run-module"))
            .args(run_args("local-task", devices, &cpu_module, module, &flags))
            .arg(format!("--flagfile={}", expected.display())))
        .map_err(|e| {
            format!(
                "{module}'s CPU outputs differ from {}: {e}",
                expected.display()
            )
        })?;
        files.push(cuda_module);
    }
    for file in [&flags, &expected] {
        let copy = out.join(file.file_name().unwrap_or_default());
        fs::copy(file, &copy).map_err(|e| format!("cannot copy {}: {e}", file.display()))?;
        files.push(copy);
    }
    for tool in TOOLS {
        let copy = out.join(tool);
        crate::copy_stripped(&tools.runtime_dir.join(tool), &copy)?;
        files.push(copy);
    }
    Ok(files)
}

/// iree-run-module's (and iree-benchmark-module's) arguments for one execution of `function`
/// in `module` on `devices` devices of kind `device`, with the inputs of `flags`.
fn run_args(
    device: &str,
    devices: usize,
    module: &Path,
    function: &str,
    flags: &Path,
) -> Vec<String> {
    let mut args = vec![format!("--device={device}"); devices];
    args.extend([
        format!("--module={}", module.display()),
        format!("--function={function}"),
        format!("--flagfile={}", flags.display()),
    ]);
    args
}

fn make_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_take_an_output_folder_and_refuse_the_rest() {
        assert_eq!(parse(&[]).unwrap(), root().join(OUT_DIR));
        let out = ["--out", "bundle/iree"].map(String::from);
        assert_eq!(parse(&out).unwrap(), PathBuf::from("bundle/iree"));
        assert!(
            parse(&["--out".to_string()])
                .unwrap_err()
                .contains("needs a value")
        );
        assert!(parse(&["--what".to_string()]).is_err());
    }

    #[test]
    fn each_device_gets_its_own_target_and_module_file() {
        let cuda = Device::Cuda.compile_flags(1);
        assert_eq!(
            cuda,
            [
                "--iree-hal-target-device=cuda".to_string(),
                format!("--iree-cuda-target={CUDA_TARGET}")
            ]
        );
        let cpu = Device::Cpu.compile_flags(1);
        assert!(cpu.contains(&"--iree-hal-local-target-device-backends=llvm-cpu".to_string()));
        assert!(cpu.iter().all(|flag| !flag.contains("cuda")));
        assert_ne!(Device::Cuda.module_file("m"), Device::Cpu.module_file("m"));
        assert_eq!(
            run_args("cuda", 1, Path::new("m.vmfb"), "f", Path::new("i.flags")),
            [
                "--device=cuda",
                "--module=m.vmfb",
                "--function=f",
                "--flagfile=i.flags"
            ]
        );
    }

    #[test]
    fn a_two_device_module_names_both_devices_and_runs_on_two() {
        let cuda = Device::Cuda.compile_flags(2);
        assert!(cuda.contains(&"--iree-hal-target-device=device_a=cuda[0]".to_string()));
        assert!(cuda.contains(&"--iree-hal-target-device=device_b=cuda[1]".to_string()));
        assert!(cuda.contains(&format!("--iree-cuda-target={CUDA_TARGET}")));
        let cpu = Device::Cpu.compile_flags(2);
        assert!(cpu.contains(&"--iree-hal-target-device=device_b=local[1]".to_string()));
        let args = run_args("local-task", 2, Path::new("m"), "f", Path::new("i"));
        assert_eq!(&args[..2], ["--device=local-task", "--device=local-task"]);
        // The module's source names the devices the flags name.
        for (module, devices) in MODULES.into_iter().filter(|&(_, devices)| devices > 1) {
            let source = root().join(format!("clients/iree/{module}.mlir"));
            let text = fs::read_to_string(source).unwrap();
            for name in &DEVICE_NAMES[..devices] {
                assert!(
                    text.contains(&format!("promise<@{name}>")),
                    "{module}: {name}"
                );
            }
        }
    }

    /// One `--input=`/`--expected_output=` tensor: `DIMSxf32=V` (a splat) or `=V V ...`.
    fn tensor(flag: &str) -> (Vec<usize>, Vec<f32>) {
        let (shape, values) = flag.split_once('=').unwrap();
        let mut dims: Vec<&str> = shape.split('x').collect();
        assert_eq!(dims.pop(), Some("f32"), "{flag}");
        let dims: Vec<usize> = dims.iter().map(|d| d.parse().unwrap()).collect();
        let count = dims.iter().product();
        let values: Vec<f32> = values.split(' ').map(|v| v.parse().unwrap()).collect();
        let values = if values.len() == 1 {
            vec![values[0]; count]
        } else {
            values
        };
        assert_eq!(values.len(), count, "{flag}");
        (dims, values)
    }

    fn flag_values(file: &str, flag: &str) -> Vec<(Vec<usize>, Vec<f32>)> {
        let path = root().join("clients/iree").join(file);
        fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter_map(|line| line.strip_prefix(flag))
            .map(tensor)
            .collect()
    }

    /// A plain reference of the module: y = relu(x @ w1 + b1) @ w2, s = row sums of y.
    #[test]
    fn expected_outputs_are_the_reference_model_of_the_inputs() {
        let inputs = flag_values(&format!("{INPUTS}.flags"), "--input=");
        let [(xd, x), (w1d, w1), (b1d, b1), (w2d, w2)] = inputs.try_into().unwrap();
        let (rows, inner, hidden, outs) = (xd[0], xd[1], w1d[1], w2d[1]);
        assert_eq!((w1d[0], b1d[0], w2d[0]), (inner, hidden, hidden));
        let h: Vec<f32> = (0..rows * hidden)
            .map(|at| {
                let (i, j) = (at / hidden, at % hidden);
                let dot: f32 = (0..inner)
                    .map(|k| x[i * inner + k] * w1[k * hidden + j])
                    .sum();
                (dot + b1[j]).max(0.0)
            })
            .collect();
        let y: Vec<f32> = (0..rows * outs)
            .map(|at| {
                let (i, j) = (at / outs, at % outs);
                (0..hidden)
                    .map(|k| h[i * hidden + k] * w2[k * outs + j])
                    .sum()
            })
            .collect();
        let s: Vec<f32> = y.chunks(outs).map(|row| row.iter().sum()).collect();
        // The inputs make ReLU clamp some values and keep others.
        assert!(h.contains(&0.0) && h.iter().any(|&v| v > 0.0));
        let expected = flag_values(&format!("{INPUTS}.expected"), "--expected_output=");
        assert_eq!(expected, [(vec![rows, outs], y), (vec![rows], s)]);
    }
}
