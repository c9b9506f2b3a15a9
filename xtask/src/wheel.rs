//! PyPI wheels as build inputs (headers, the CUDA 11.8 runtime, IREE's tools): downloaded once with pip and
//! unpacked under the workspace's target/ folder, never committed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run;

/// One pinned wheel.
pub(crate) struct Wheel {
    /// Its package name and version.
    pub package: &'static str,
    pub version: &'static str,
    /// A file the unpacked wheel must hold (relative to its root), which says it is complete.
    pub probe: &'static str,
}

/// The platform tags a wheel is downloaded for (pip takes any of them): glibc 2.17 and later,
/// 2.25 (the tag of nvidia-cuda-cupti 13's wheel) and 2.28 (IREE's wheels).
const PLATFORMS: &[&str] = &[
    "manylinux2014_x86_64",
    "manylinux_2_25_x86_64",
    "manylinux_2_28_x86_64",
];

/// Where wheels are unpacked, relative to the workspace root.
const CACHE_DIR: &str = "target/wheels";

impl Wheel {
    /// Downloads and unpacks the wheel unless that was done before; returns the unpacked root.
    pub(crate) fn fetch(&self, root: &Path) -> Result<PathBuf, String> {
        let cache = root
            .join(CACHE_DIR)
            .join(format!("{}-{}", self.package, self.version));
        let unpacked = cache.join("unpacked");
        if unpacked.join(self.probe).is_file() {
            return Ok(unpacked);
        }
        let wheel_dir = cache.join("wheel");
        std::fs::create_dir_all(&wheel_dir)
            .map_err(|e| format!("cannot create {}: {e}", wheel_dir.display()))?;
        println!("downloading {}=={} with pip", self.package, self.version);
        run(Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args(
                PLATFORMS
                    .iter()
                    .flat_map(|platform| ["--platform", platform]),
            )
            .arg(format!("{}=={}", self.package, self.version))
            .arg("--dest")
            .arg(&wheel_dir))
        .map_err(|e| format!("{e}\n(the file comes from PyPI: python3 with pip is needed)"))?;
        let wheel = std::fs::read_dir(&wheel_dir)
            .map_err(|e| format!("cannot list {}: {e}", wheel_dir.display()))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
            .ok_or_else(|| format!("pip left no wheel in {}", wheel_dir.display()))?;
        run(Command::new("python3")
            .args(["-m", "zipfile", "--extract"])
            .arg(&wheel)
            .arg(&unpacked))?;
        if unpacked.join(self.probe).is_file() {
            Ok(unpacked)
        } else {
            Err(format!(
                "the wheel {} has no {}",
                wheel.display(),
                self.probe
            ))
        }
    }
}
