//! `cargo xtask install --prefix DIR [--debug]`: builds gpu-capi and installs the C library
//! for C and C++ programs: the header, the libraries, a pkg-config file and a CMake package.
//!
//! Under DIR: `include/gpu_runtime.h`, `lib/libgpu_capi.{a,so}`, `lib/pkgconfig/gpu-runtime.pc`
//! and `lib/cmake/gpu_runtime/gpu_runtimeConfig{,Version}.cmake` (from the templates in
//! gpu-capi/install/, which find the prefix from where they lie: the tree may be moved).

use std::path::PathBuf;
use std::process::Command;

use crate::{root, run};

const USAGE: &str = "usage: cargo xtask install --prefix DIR [--debug]";

/// What a Rust staticlib needs from the system on Linux (`--print native-static-libs`), for
/// programs that link `libgpu_capi.a`.
const NATIVE_LIBS: &str = "-lpthread -ldl -lm -lrt -lgcc_s -lutil -lc";

/// Runs `cargo xtask install`.
pub(crate) fn install(args: &[String]) -> Result<(), String> {
    let (prefix, debug) = parse(args)?;
    let root = root();
    let mut build = Command::new("cargo");
    build.current_dir(&root).args(["build", "-p", "gpu-capi"]);
    if !debug {
        build.arg("--release");
    }
    run(&mut build)?;
    let built = root
        .join("target")
        .join(if debug { "debug" } else { "release" });
    let version = env!("CARGO_PKG_VERSION");
    let templates = root.join("gpu-capi/install");
    let fill = |template: &str| -> Result<String, String> {
        let path = templates.join(template);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(text
            .replace("@VERSION@", version)
            .replace("@NATIVE_LIBS@", NATIVE_LIBS))
    };
    let files: [(&str, Source); 6] = [
        (
            "include/gpu_runtime.h",
            Source::Copy(root.join("gpu-capi/include/gpu_runtime.h")),
        ),
        (
            "lib/libgpu_capi.a",
            Source::Copy(built.join("libgpu_capi.a")),
        ),
        (
            "lib/libgpu_capi.so",
            Source::Copy(built.join("libgpu_capi.so")),
        ),
        (
            "lib/pkgconfig/gpu-runtime.pc",
            Source::Text(fill("gpu-runtime.pc.in")?),
        ),
        (
            "lib/cmake/gpu_runtime/gpu_runtimeConfig.cmake",
            Source::Text(fill("gpu_runtimeConfig.cmake")?),
        ),
        (
            "lib/cmake/gpu_runtime/gpu_runtimeConfigVersion.cmake",
            Source::Text(fill("gpu_runtimeConfigVersion.cmake.in")?),
        ),
    ];
    for (relative, source) in files {
        let to = prefix.join(relative);
        let folder = to.parent().expect("every installed file lies in a folder");
        std::fs::create_dir_all(folder)
            .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
        match source {
            Source::Copy(from) => std::fs::copy(&from, &to)
                .map(drop)
                .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display())),
            Source::Text(text) => {
                std::fs::write(&to, text).map_err(|e| format!("cannot write {}: {e}", to.display()))
            }
        }?;
        println!("installed {}", to.display());
    }
    Ok(())
}

/// Where an installed file comes from.
enum Source {
    /// A built or committed file, copied.
    Copy(PathBuf),
    /// A template filled in.
    Text(String),
}

/// The prefix (absolute) and whether to install the debug build.
fn parse(args: &[String]) -> Result<(PathBuf, bool), String> {
    let (mut prefix, mut debug) = (None, false);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--prefix" => {
                let dir = args
                    .next()
                    .ok_or(format!("--prefix needs a value\n{USAGE}"))?;
                prefix = Some(PathBuf::from(dir));
            }
            "--debug" => debug = true,
            other => return Err(format!("unknown install option {other}\n{USAGE}")),
        }
    }
    let prefix = prefix.ok_or(format!("install needs --prefix\n{USAGE}"))?;
    let prefix = if prefix.is_absolute() {
        prefix
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot find the current folder: {e}"))?
            .join(prefix)
    };
    Ok((prefix, debug))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_prefix_is_required_and_made_absolute() {
        assert!(parse(&args(&[])).unwrap_err().contains("needs --prefix"));
        assert!(
            parse(&args(&["--prefix"]))
                .unwrap_err()
                .contains("needs a value")
        );
        assert!(
            parse(&args(&["--frob"]))
                .unwrap_err()
                .contains("unknown install option")
        );
        let (prefix, debug) = parse(&args(&["--prefix", "/opt/gpu", "--debug"])).unwrap();
        assert_eq!((prefix.as_path(), debug), (Path::new("/opt/gpu"), true));
        let (prefix, debug) = parse(&args(&["--prefix", "relative"])).unwrap();
        assert!(prefix.is_absolute() && prefix.ends_with("relative") && !debug);
    }

    #[test]
    fn the_templates_name_every_placeholder_this_command_fills() {
        let templates = root().join("gpu-capi/install");
        for name in ["gpu-runtime.pc.in", "gpu_runtimeConfigVersion.cmake.in"] {
            let text = std::fs::read_to_string(templates.join(name)).unwrap();
            assert!(text.contains("@VERSION@"), "{name}");
            let filled = text.replace("@VERSION@", "0").replace("@NATIVE_LIBS@", "");
            assert!(
                !filled.contains('@'),
                "{name} has a placeholder nobody fills"
            );
        }
    }
}
