//! The standard kernel library as NVIDIA GPUs run it: the PTX compiled from kernels/kernels.cu,
//! each kernel's parameters, and launch arguments packed into the pointer-to-value array that
//! cuLaunchKernel and hipModuleLaunchKernel take (the HIP backend's NVIDIA path uses all three).

use core::ffi::{CStr, c_void};

use gpu_core::backend::KernelArg;
use gpu_core::{Error, Result};

use crate::result::BACKEND;

/// The PTX of kernels/kernels.cu (the crate's README says how it was built), NUL-terminated as
/// cuModuleLoadData requires of a text image.
pub const PTX: &str = concat!(include_str!("../../kernels/kernels.ptx"), "\0");

/// The kind of one kernel parameter, matching a [`KernelArg`] variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A device address ([`KernelArg::Ptr`]).
    Ptr,
    /// [`KernelArg::U32`].
    U32,
    /// [`KernelArg::U64`].
    U64,
    /// [`KernelArg::F32`].
    F32,
}

impl ParamKind {
    /// The parameter kind `arg` fills.
    pub fn of(arg: &KernelArg) -> Self {
        match arg {
            KernelArg::Ptr(_) => Self::Ptr,
            KernelArg::U32(_) => Self::U32,
            KernelArg::U64(_) => Self::U64,
            KernelArg::F32(_) => Self::F32,
        }
    }
}

/// One kernel of the library.
#[derive(Debug)]
pub struct KernelEntry {
    /// Its name, as callers ask for it and as the PTX exports it.
    pub name: &'static str,
    /// The same, NUL-terminated, for cuModuleGetFunction.
    pub symbol: &'static CStr,
    /// Its parameters, in order.
    pub params: &'static [ParamKind],
    /// The parameters as errors show them.
    pub signature: &'static str,
}

/// Most parameters any kernel of the library takes.
pub const MAX_PARAMS: usize = 4;

/// The standard kernel library (the common rules of the project list the same names and
/// arguments for every backend).
pub const LIBRARY: [KernelEntry; 3] = [
    KernelEntry {
        name: "fill_u32",
        symbol: c"fill_u32",
        params: &[ParamKind::Ptr, ParamKind::U32, ParamKind::U64],
        signature: "(Ptr dst, U32 value, U64 count)",
    },
    KernelEntry {
        name: "axpy_f32",
        symbol: c"axpy_f32",
        params: &[
            ParamKind::F32,
            ParamKind::Ptr,
            ParamKind::Ptr,
            ParamKind::U64,
        ],
        signature: "(F32 a, Ptr x, Ptr y, U64 count)",
    },
    KernelEntry {
        name: "workgroup_reverse_u32",
        symbol: c"workgroup_reverse_u32",
        params: &[ParamKind::Ptr, ParamKind::U32],
        signature: "(Ptr data, U32 words_per_group)",
    },
];

/// The library index of the kernel called `name`, or [`Error::UnknownKernel`] naming
/// `backend`.
pub fn find_for(backend: &'static str, name: &str) -> Result<usize> {
    LIBRARY
        .iter()
        .position(|entry| entry.name == name)
        .ok_or_else(|| Error::UnknownKernel {
            backend,
            name: name.into(),
        })
}

/// The library index of the kernel called `name` on the CUDA backend.
pub(crate) fn find(name: &str) -> Result<usize> {
    find_for(BACKEND, name)
}

/// One argument's value, at offset 0 whatever its type, so a pointer to the slot is a pointer
/// to the value on any byte order.
#[derive(Clone, Copy)]
#[repr(C)]
union ArgSlot {
    address: u64,
    u32: u32,
    u64: u64,
    f32: f32,
}

/// A launch's argument values, checked against the kernel's parameters; lives on the caller's
/// stack while the driver reads it (cuLaunchKernel copies the values before it returns).
pub struct ArgBuffer {
    slots: [ArgSlot; MAX_PARAMS],
    /// How many slots hold arguments.
    count: usize,
}

impl ArgBuffer {
    /// Packs `args` for `entry`, or [`Error::KernelArgumentMismatch`] if their number or kinds
    /// differ from the kernel's parameters (the driver cannot check this: it would read past
    /// the array or misread a value).
    pub fn pack(entry: &KernelEntry, args: &[KernelArg]) -> Result<Self> {
        let matches = args.len() == entry.params.len()
            && args
                .iter()
                .zip(entry.params)
                .all(|(arg, &param)| ParamKind::of(arg) == param);
        if !matches {
            return Err(Error::KernelArgumentMismatch {
                kernel: entry.name,
                expected: entry.signature,
            });
        }
        let mut slots = [ArgSlot { u64: 0 }; MAX_PARAMS];
        for (slot, arg) in slots.iter_mut().zip(args) {
            *slot = match *arg {
                // Device addresses are 64-bit (CUdeviceptr); usize is 64-bit on every platform
                // the CUDA driver supports.
                KernelArg::Ptr(address) => ArgSlot {
                    address: address as u64,
                },
                KernelArg::U32(value) => ArgSlot { u32: value },
                KernelArg::U64(value) => ArgSlot { u64: value },
                KernelArg::F32(value) => ArgSlot { f32: value },
            };
        }
        Ok(Self {
            slots,
            count: args.len(),
        })
    }

    /// The `kernelParams` array of cuLaunchKernel: one pointer to each value, null after the
    /// last. The pointers are valid while `self` is neither moved nor dropped.
    pub fn pointers(&mut self) -> [*mut c_void; MAX_PARAMS] {
        let mut pointers = [core::ptr::null_mut(); MAX_PARAMS];
        for (pointer, slot) in pointers.iter_mut().zip(&mut self.slots[..self.count]) {
            *pointer = (slot as *mut ArgSlot).cast();
        }
        pointers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_library_kernel_is_found_and_other_names_are_typed_errors() {
        for (index, entry) in LIBRARY.iter().enumerate() {
            assert_eq!(find(entry.name), Ok(index));
            assert_eq!(entry.symbol.to_str(), Ok(entry.name));
            assert!(entry.params.len() <= MAX_PARAMS);
        }
        for name in ["", "axpy", "fill_u32\0", "FILL_U32"] {
            assert_eq!(
                find(name),
                Err(Error::UnknownKernel {
                    backend: "cuda",
                    name: name.into()
                })
            );
        }
    }

    #[test]
    fn packed_arguments_read_back_through_the_pointers_as_their_types() {
        let entry = &LIBRARY[find("axpy_f32").unwrap()];
        let args = [
            KernelArg::F32(-2.5),
            KernelArg::Ptr(0x7f00_dead_beef),
            KernelArg::Ptr(usize::MAX),
            KernelArg::U64(u64::MAX - 3),
        ];
        let mut buffer = ArgBuffer::pack(entry, &args).unwrap();
        let pointers = buffer.pointers();
        // SAFETY: each pointer points at a live slot holding a value of the read type.
        unsafe {
            assert_eq!(*pointers[0].cast::<f32>(), -2.5);
            assert_eq!(*pointers[1].cast::<u64>(), 0x7f00_dead_beef);
            assert_eq!(*pointers[2].cast::<u64>(), u64::MAX);
            assert_eq!(*pointers[3].cast::<u64>(), u64::MAX - 3);
        }
        let entry = &LIBRARY[find("fill_u32").unwrap()];
        let args = [
            KernelArg::Ptr(0x1000),
            KernelArg::U32(0xA5A5_0001),
            KernelArg::U64(7),
        ];
        let mut buffer = ArgBuffer::pack(entry, &args).unwrap();
        let pointers = buffer.pointers();
        // SAFETY: as above; the 32-bit value sits at offset 0 of its slot.
        unsafe {
            assert_eq!(*pointers[1].cast::<u32>(), 0xA5A5_0001);
            assert_eq!(*pointers[2].cast::<u64>(), 7);
        }
        assert!(pointers[3].is_null(), "unused parameters stay null");
    }

    #[test]
    fn wrong_argument_count_or_kind_is_refused_before_the_driver() {
        let entry = &LIBRARY[find("workgroup_reverse_u32").unwrap()];
        let mismatch = Error::KernelArgumentMismatch {
            kernel: "workgroup_reverse_u32",
            expected: "(Ptr data, U32 words_per_group)",
        };
        let cases: [&[KernelArg]; 5] = [
            &[],
            &[KernelArg::Ptr(0x1000)],
            &[KernelArg::Ptr(0x1000), KernelArg::U64(4)],
            &[KernelArg::U32(4), KernelArg::Ptr(0x1000)],
            &[KernelArg::Ptr(0x1000), KernelArg::U32(4), KernelArg::U32(4)],
        ];
        for args in cases {
            assert_eq!(ArgBuffer::pack(entry, args).err(), Some(mismatch.clone()));
        }
        assert!(ArgBuffer::pack(entry, &[KernelArg::Ptr(0x1000), KernelArg::U32(4)]).is_ok());
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
        for entry in &LIBRARY {
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
