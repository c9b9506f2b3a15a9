//! libcupti, opened at run time (`Cupti`), and where it is looked for: `GPU_RECORDER_CUPTI`,
//! then the CUDA toolkit (CUDA_HOME, CUDA_PATH, the folder of `nvcc` on PATH), then the system.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The CUPTI library file name of CUDA 13.
pub const LIBRARY_NAME: &str = "libcupti.so.13";

/// Turns the generated function table into the library type (the shared loader's).
macro_rules! cupti_library {
    ($($row:tt),* $(,)?) => {
        gpu_ffi_loader::dlsym_library! {
            /// The open CUPTI library; each function is looked up on first use and cached.
            pub struct Cupti;
            backend: "cupti";
            file_names: &[LIBRARY_NAME];
            $($row),*
        }
    };
}

mod library {
    //! The generated library type, with the bindings' pointer types in scope.
    use super::LIBRARY_NAME;
    #[allow(clippy::wildcard_imports)]
    use crate::sys::*;

    crate::sys::cupti_functions!(cupti_library);
}

pub use library::{Cupti, ENTRY_POINTS};

/// Where libcupti is looked for, in order, given the environment `var` (a lookup function,
/// so tests can fake it): the file `GPU_RECORDER_CUPTI` names, if set, and nothing else;
/// otherwise each toolkit root's `targets/x86_64-linux/lib`, `extras/CUPTI/lib64` and `lib64`
/// (roots: `CUDA_HOME`, `CUDA_PATH`, the parent of the folder holding `nvcc` on `PATH`), then the
/// bare name (the system's library path, where a pip wheel's folder may be), then
/// `/usr/local/cuda` as the last resort.
pub fn candidates(var: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    if let Some(path) = var("GPU_RECORDER_CUPTI") {
        return vec![PathBuf::from(path)];
    }
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|name| var(name).map(PathBuf::from))
        .collect();
    if let Some(path) = var("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("nvcc").is_file()
                && let Some(root) = dir.parent()
            {
                roots.push(root.to_path_buf());
            }
        }
    }
    let mut found = Vec::new();
    let in_root = |root: &Path, found: &mut Vec<PathBuf>| {
        for lib in ["targets/x86_64-linux/lib", "extras/CUPTI/lib64", "lib64"] {
            let path = root.join(lib).join(LIBRARY_NAME);
            if !found.contains(&path) {
                found.push(path);
            }
        }
    };
    for root in &roots {
        in_root(root, &mut found);
    }
    found.push(PathBuf::from(LIBRARY_NAME));
    in_root(Path::new("/usr/local/cuda"), &mut found);
    found
}

/// Opens the first candidate that loads (toolkit paths that do not exist are skipped) and
/// checks that it has every function the recorder calls.
///
/// # Errors
/// The candidates tried, with why each failed, or the functions the library lacks.
pub fn open(candidates: &[PathBuf]) -> Result<Cupti, String> {
    let names: Vec<String> = candidates
        .iter()
        .filter(|path| path.components().count() == 1 || path.exists())
        .map(|path| path.to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        return Err(format!(
            "no {LIBRARY_NAME} found (set GPU_RECORDER_CUPTI=PATH or CUDA_HOME); looked for {}",
            tried.join(", ")
        ));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // SAFETY: every candidate is a libcupti (a file of that name in a CUDA toolkit, or the one
    // the user named), whose functions have the signatures of the bindings.
    let cupti = unsafe { Cupti::load_from(&names) }.map_err(|error| {
        format!("cannot load {LIBRARY_NAME} (set GPU_RECORDER_CUPTI=PATH or CUDA_HOME): {error}")
    })?;
    match cupti.missing_entry_points().as_slice() {
        [] => Ok(cupti),
        missing => Err(format!(
            "the loaded {LIBRARY_NAME} lacks {}",
            missing.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, OsString)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.clone())
        }
    }

    #[test]
    fn an_explicit_path_is_the_only_candidate() {
        let pairs = [
            ("GPU_RECORDER_CUPTI", OsString::from("/x/libcupti.so")),
            ("CUDA_HOME", OsString::from("/cuda")),
        ];
        assert_eq!(candidates(env(&pairs)), [PathBuf::from("/x/libcupti.so")]);
    }

    #[test]
    fn toolkit_roots_come_first_then_the_system_then_usr_local() {
        let tmp = std::env::temp_dir().join(format!("gpu-recorder-cand-{}", std::process::id()));
        let bin = tmp.join("toolkit/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("nvcc"), b"").unwrap();
        let path = std::env::join_paths([Path::new("/nonexistent"), &bin]).unwrap();
        let pairs = [("CUDA_HOME", OsString::from("/cuda")), ("PATH", path)];
        let found = candidates(env(&pairs));
        let expected: Vec<PathBuf> = [
            "/cuda/targets/x86_64-linux/lib/libcupti.so.13",
            "/cuda/extras/CUPTI/lib64/libcupti.so.13",
            "/cuda/lib64/libcupti.so.13",
        ]
        .iter()
        .map(PathBuf::from)
        .chain(
            ["targets/x86_64-linux/lib", "extras/CUPTI/lib64", "lib64"]
                .iter()
                .map(|lib| tmp.join("toolkit").join(lib).join(LIBRARY_NAME)),
        )
        .chain([PathBuf::from(LIBRARY_NAME)])
        .chain(
            [
                "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13",
                "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                "/usr/local/cuda/lib64/libcupti.so.13",
            ]
            .iter()
            .map(PathBuf::from),
        )
        .collect();
        assert_eq!(found, expected);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_missing_library_is_an_error_naming_what_was_tried() {
        let message = open(&[
            PathBuf::from("/nonexistent/libcupti.so.13"),
            PathBuf::from("libnonexistent-cupti.so.13"),
        ])
        .err()
        .unwrap();
        assert!(message.contains("libnonexistent-cupti.so.13"), "{message}");
        assert!(message.contains("GPU_RECORDER_CUPTI"), "{message}");
        // Only paths that exist are opened; when none does, all are named.
        let message = open(&[PathBuf::from("/nonexistent/libcupti.so.13")])
            .err()
            .unwrap();
        assert!(
            message.contains("no libcupti.so.13 found") && message.contains("/nonexistent/"),
            "{message}"
        );
    }

    #[test]
    fn a_library_without_the_functions_is_an_error_naming_them() {
        // libc is a real library that has no CUPTI functions.
        let message = open(&[PathBuf::from("libc.so.6")]).err().unwrap();
        assert!(
            message.contains("lacks cuptiSubscribe, cuptiEnableCallback"),
            "{message}"
        );
    }
}
