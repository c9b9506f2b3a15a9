//! The standard kernel library as NVIDIA GPUs run it: the PTX compiled from kernels/kernels.cu
//! (the HIP backend's NVIDIA path loads it too). The kernels' table, argument checks and
//! packing are the core's ([`gpu_core::backend::library`]), shared with every backend.

use gpu_core::Result;
use gpu_core::backend::library::find_for;

use crate::result::BACKEND;

/// The PTX of kernels/kernels.cu (the crate's README says how it was built), NUL-terminated as
/// cuModuleLoadData requires of a text image.
pub const PTX: &str = concat!(include_str!("../../kernels/kernels.ptx"), "\0");

/// The library index of the kernel called `name` on the CUDA backend.
pub(crate) fn find(name: &str) -> Result<usize> {
    find_for(BACKEND, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    use gpu_core::Error;
    use gpu_core::backend::library::{LIBRARY, ParamKind};

    #[test]
    fn every_library_kernel_is_found_under_the_cuda_backends_name() {
        for (index, entry) in LIBRARY.iter().enumerate() {
            assert_eq!(find(entry.name), Ok(index));
        }
        for name in ["", "FILL_U32"] {
            assert_eq!(
                find(name),
                Err(Error::UnknownKernel {
                    backend: "cuda",
                    name: name.into()
                })
            );
        }
    }

    /// The parameter list of `.entry name(...)` in the PTX, as PTX types (`u64`, `u32`, `f32`).
    fn ptx_params(name: &str) -> Vec<&'static str> {
        let header = format!(".entry {name}(");
        let start = PTX.find(&header).expect("the PTX exports the kernel") + header.len();
        let end = start + PTX[start..].find(')').unwrap();
        PTX[start..end]
            .split(',')
            .map(|param| {
                param
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .trim_start_matches('.')
            })
            .collect()
    }

    #[test]
    fn the_embedded_ptx_exports_each_kernel_with_the_parameters_of_the_table() {
        assert!(PTX.ends_with('\0') && !PTX[..PTX.len() - 1].contains('\0'));
        assert!(PTX.contains(".target sm_90"));
        for entry in LIBRARY {
            let expected: Vec<&str> = entry
                .params
                .iter()
                .map(|param| match param {
                    ParamKind::Ptr | ParamKind::U64 => "u64",
                    ParamKind::U32 => "u32",
                    ParamKind::F32 => "f32",
                })
                .collect();
            assert_eq!(ptx_params(entry.name), expected, "{}", entry.name);
        }
    }
}
