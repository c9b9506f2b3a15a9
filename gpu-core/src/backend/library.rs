//! The standard kernel library's table, shared by every backend: each kernel's name, parameters
//! and reach through each pointer, with the argument checks and packing built on it.
//!
//! The table gives each kernel's parameter kinds and names and how far it reaches through
//! each pointer; the argument checks and the packing into a pointer-to-value array (CUDA's and
//! HIP's `kernelParams`) are built on it.
//!
//! The kernels themselves live with their backends (CUDA C and its PTX in gpu-cuda-ffi, the
//! AMDGPU code objects in gpu-hip-ffi, Rust functions in the host backend); this table is what
//! they all agree on, so a build for one vendor compiles no other vendor's bindings. The
//! runtime checks every launch of a library kernel against it before anything is queued:
//! argument count and kinds ([`KernelEntry::check_arguments`]) and that the counts fit the
//! memory given ([`KernelEntry::check_launch`]).

use alloc::vec::Vec;
use core::ffi::{CStr, c_void};

use super::{Access, KernelArg, LaunchDims};
use crate::error::{ByteRange, Error, Result};

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

/// One factor of an [`Extent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Factor {
    /// The value of the integer argument at this index (a count, a words-per-group).
    Arg(usize),
    /// The launch's workgroups, every grid dimension multiplied. The GPU kernels number their
    /// workgroups along x only and the host backend's over all three, so the product bounds
    /// both.
    Workgroups,
}

impl Factor {
    /// This factor's value for a launch with `args` and `dims`; `None` for an argument that is
    /// missing or not an integer, or a grid whose workgroups overflow 64 bits.
    fn value(self, args: &[KernelArg], dims: &LaunchDims) -> Option<u64> {
        match self {
            Factor::Arg(index) => match args.get(index) {
                Some(KernelArg::U32(value)) => Some(u64::from(*value)),
                Some(KernelArg::U64(value)) => Some(*value),
                _ => None,
            },
            Factor::Workgroups => dims
                .grid
                .iter()
                .try_fold(1u64, |acc, &n| acc.checked_mul(u64::from(n))),
        }
    }
}

/// A number of bytes a kernel touches, as a function of its launch: `unit` bytes times every
/// factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Bytes per counted item (4 for a 32-bit word).
    pub unit: u64,
    /// What the items are counted by, multiplied together.
    pub factors: &'static [Factor],
}

impl Extent {
    /// The bytes for a launch with `args` and `dims`; `None` when they overflow 64 bits (or a
    /// factor names an argument that is missing or no integer): more than any memory holds.
    pub fn bytes(&self, args: &[KernelArg], dims: &LaunchDims) -> Option<u64> {
        self.factors.iter().try_fold(self.unit, |acc, factor| {
            acc.checked_mul(factor.value(args, dims)?)
        })
    }

    /// `None` when a launch with `args` and `dims` stays within `given` bytes; otherwise the
    /// bytes it would reach (`u64::MAX` when they overflow 64 bits).
    fn beyond(&self, args: &[KernelArg], dims: &LaunchDims, given: usize) -> Option<u64> {
        match self.bytes(args, dims) {
            Some(bytes) if bytes <= given as u64 => None,
            Some(bytes) => Some(bytes),
            None => Some(u64::MAX),
        }
    }
}

/// How far a kernel reaches through one pointer parameter: the bytes from its address that
/// the kernel may read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    /// The pointer parameter's index.
    pub param: usize,
    /// The bytes it reaches from its address.
    pub extent: Extent,
    /// Whether the kernel reads those bytes, writes them, or both (what a race checker is
    /// told of the launch, [`super::Backend::note_launch_footprint`]).
    pub access: Access,
}

/// One kernel of the library.
#[derive(Debug)]
pub struct KernelEntry {
    /// Its name, as callers ask for it and as the GPU images export it.
    pub name: &'static str,
    /// The same, NUL-terminated, for the drivers' symbol lookups.
    pub symbol: &'static CStr,
    /// Its parameters' kinds, in order.
    pub params: &'static [ParamKind],
    /// Its parameters' names, in order, as the kernel's source names them.
    pub param_names: &'static [&'static str],
    /// The parameters as errors show them: each kind and name, e.g.
    /// `"(Ptr dst, U32 value, U64 count)"` (a test checks it against the two lists above).
    pub signature: &'static str,
    /// For every pointer parameter, how far the kernel reaches from its address.
    pub reaches: &'static [Reach],
    /// The dynamic workgroup memory each workgroup touches, if the kernel uses any.
    pub workgroup: Option<Extent>,
}

/// What the runtime reports for a kernel that would reach past its dynamic workgroup memory.
pub const DYNAMIC_WORKGROUP_MEMORY: &str = "dynamic workgroup memory";

impl KernelEntry {
    /// [`Error::KernelArgumentMismatch`] if the number or kinds of `args` differ from the
    /// kernel's parameters (a driver cannot check this: it would read past the argument array
    /// or misread a value).
    pub fn check_arguments(&self, args: &[KernelArg]) -> Result<()> {
        let matches = args.len() == self.params.len()
            && args
                .iter()
                .zip(self.params)
                .all(|(arg, &param)| ParamKind::of(arg) == param);
        if matches {
            Ok(())
        } else {
            Err(Error::KernelArgumentMismatch {
                kernel: self.name,
                expected: self.signature,
            })
        }
    }

    /// Checks a launch before anything is queued: the arguments as
    /// [`KernelEntry::check_arguments`] does, then that no pointer argument makes the kernel
    /// reach past the `given(index)` bytes available at argument `index` (a span's length),
    /// nor past the launch's dynamic workgroup memory: [`Error::KernelReach`] names the first
    /// that would, with the bytes given and the bytes the kernel would reach.
    pub fn check_launch(
        &self,
        args: &[KernelArg],
        dims: &LaunchDims,
        given: impl Fn(usize) -> usize,
    ) -> Result<()> {
        self.check_arguments(args)?;
        for reach in self.reaches {
            let available = given(reach.param);
            if let Some(bytes) = reach.extent.beyond(args, dims, available) {
                let address = match args.get(reach.param) {
                    Some(KernelArg::Ptr(address)) => *address,
                    _ => 0,
                };
                return Err(Error::KernelReach {
                    kernel: self.name,
                    argument: Some(reach.param),
                    parameter: self.param_names.get(reach.param).copied().unwrap_or("?"),
                    address,
                    given: available,
                    reach: bytes,
                });
            }
        }
        if let Some(extent) = self.workgroup {
            let available = dims.dynamic_workgroup_bytes as usize;
            if let Some(bytes) = extent.beyond(args, dims, available) {
                return Err(Error::KernelReach {
                    kernel: self.name,
                    argument: None,
                    parameter: DYNAMIC_WORKGROUP_MEMORY,
                    address: 0,
                    given: available,
                    reach: bytes,
                });
            }
        }
        Ok(())
    }
}

impl KernelEntry {
    /// The bytes a launch with `args` and `dims` reaches through each pointer argument, and
    /// how (its reach from the table, from the argument's address; nothing reached is left
    /// out): the launch's exact footprint, for [`super::Backend::note_launch_footprint`].
    /// Meant for a launch [`KernelEntry::check_launch`] accepted.
    pub fn footprint<'a>(
        &'a self,
        args: &'a [KernelArg],
        dims: &'a LaunchDims,
    ) -> impl Iterator<Item = (ByteRange, Access)> + 'a {
        self.reaches.iter().filter_map(move |reach| {
            let Some(KernelArg::Ptr(address)) = args.get(reach.param) else {
                return None;
            };
            let bytes = usize::try_from(reach.extent.bytes(args, dims)?).ok()?;
            Some((ByteRange::new(*address, bytes)?, reach.access))
        })
    }
}

/// Most parameters any kernel of the library takes.
pub const MAX_PARAMS: usize = 4;

/// The standard kernel library (the common rules of the project list the same names and
/// arguments for every backend). Reaches, from the kernels' definitions
/// (gpu-cuda-ffi/kernels/kernels.cu, gpu-hip-ffi/kernels/kernels_amdgpu.hip, the host
/// backend's `library.rs`):
/// - `fill_u32(dst, value, count)` writes `dst[0..count]`: `count * 4` bytes.
/// - `axpy_f32(a, x, y, count)` reads `x[0..count]` and updates `y[0..count]`: `count * 4`
///   bytes each.
/// - `workgroup_reverse_u32(data, words_per_group)`: workgroup `g` reverses
///   `data[g*W .. (g+1)*W]` through `W` words of dynamic workgroup memory, so `data` reaches
///   `workgroups * W * 4` bytes and each workgroup `W * 4` bytes of its dynamic memory.
pub const LIBRARY: &[KernelEntry] = &[
    KernelEntry {
        name: "fill_u32",
        symbol: c"fill_u32",
        params: &[ParamKind::Ptr, ParamKind::U32, ParamKind::U64],
        param_names: &["dst", "value", "count"],
        signature: "(Ptr dst, U32 value, U64 count)",
        reaches: &[Reach {
            param: 0,
            extent: Extent {
                unit: 4,
                factors: &[Factor::Arg(2)],
            },
            access: Access::Write,
        }],
        workgroup: None,
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
        param_names: &["a", "x", "y", "count"],
        signature: "(F32 a, Ptr x, Ptr y, U64 count)",
        reaches: &[
            Reach {
                param: 1,
                extent: Extent {
                    unit: 4,
                    factors: &[Factor::Arg(3)],
                },
                access: Access::Read,
            },
            Reach {
                param: 2,
                extent: Extent {
                    unit: 4,
                    factors: &[Factor::Arg(3)],
                },
                access: Access::ReadWrite,
            },
        ],
        workgroup: None,
    },
    KernelEntry {
        name: "workgroup_reverse_u32",
        symbol: c"workgroup_reverse_u32",
        params: &[ParamKind::Ptr, ParamKind::U32],
        param_names: &["data", "words_per_group"],
        signature: "(Ptr data, U32 words_per_group)",
        reaches: &[Reach {
            param: 0,
            extent: Extent {
                unit: 4,
                factors: &[Factor::Workgroups, Factor::Arg(1)],
            },
            access: Access::ReadWrite,
        }],
        workgroup: Some(Extent {
            unit: 4,
            factors: &[Factor::Arg(1)],
        }),
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

/// The library's kernel called `name`, if there is one.
pub fn entry(name: &str) -> Option<&'static KernelEntry> {
    LIBRARY.iter().find(|entry| entry.name == name)
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

impl ArgSlot {
    /// The slot holding `arg`'s value.
    #[inline]
    fn of(arg: KernelArg) -> Self {
        match arg {
            // Device addresses are 64-bit (CUdeviceptr, hipDeviceptr_t); usize is 64-bit on
            // every platform the GPU drivers support.
            KernelArg::Ptr(address) => ArgSlot {
                address: address as u64,
            },
            KernelArg::U32(value) => ArgSlot { u32: value },
            KernelArg::U64(value) => ArgSlot { u64: value },
            KernelArg::F32(value) => ArgSlot { f32: value },
        }
    }
}

/// Argument values packed as given, any number of them: a graph's launch node of a module's
/// kernel, which has no table to check them against (the caller of the unsafe launch promised
/// that the kernel's parameters have the values' types). Built once per node, not per launch.
pub struct ArgList(Vec<ArgSlot>);

impl ArgList {
    /// `args`' values, in order.
    pub fn pack(args: &[KernelArg]) -> Self {
        Self(args.iter().map(|&arg| ArgSlot::of(arg)).collect())
    }

    /// The `kernelParams` array: one pointer to each value. The values live in a heap buffer
    /// of their own, so the pointers stay valid until `self` is dropped, moved or not.
    pub fn pointers(&mut self) -> Vec<*mut c_void> {
        self.0
            .iter_mut()
            .map(|slot| (slot as *mut ArgSlot).cast())
            .collect()
    }
}

/// A launch's argument values, checked against the kernel's parameters; lives on the caller's
/// stack while the driver reads it (cuLaunchKernel and hipModuleLaunchKernel copy the values
/// before they return).
pub struct ArgBuffer {
    slots: [ArgSlot; MAX_PARAMS],
    /// How many slots hold arguments.
    count: usize,
}

impl ArgBuffer {
    /// Packs `args` for `entry`, or [`Error::KernelArgumentMismatch`] if their number or kinds
    /// differ from the kernel's parameters.
    pub fn pack(entry: &KernelEntry, args: &[KernelArg]) -> Result<Self> {
        entry.check_arguments(args)?;
        let mut slots = [ArgSlot { u64: 0 }; MAX_PARAMS];
        for (slot, arg) in slots.iter_mut().zip(args) {
            *slot = ArgSlot::of(*arg);
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
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;

    #[test]
    fn every_library_kernel_is_found_and_other_names_are_typed_errors() {
        for (index, entry) in LIBRARY.iter().enumerate() {
            assert_eq!(find_for("cuda", entry.name), Ok(index));
            assert_eq!(super::entry(entry.name).unwrap().name, entry.name);
            assert_eq!(entry.symbol.to_str(), Ok(entry.name));
            assert!(entry.params.len() <= MAX_PARAMS);
        }
        for name in ["", "axpy", "fill_u32\0", "FILL_U32"] {
            assert_eq!(
                find_for("cuda", name),
                Err(Error::UnknownKernel {
                    backend: "cuda",
                    name: name.into()
                })
            );
            assert!(super::entry(name).is_none());
        }
    }

    /// The signature shown in errors is the kinds and names of the table, and every pointer
    /// parameter (and only those) has one reach, counted by integer parameters.
    #[test]
    fn signatures_names_and_reaches_agree_with_the_parameters() {
        for entry in LIBRARY {
            assert_eq!(
                entry.param_names.len(),
                entry.params.len(),
                "{}",
                entry.name
            );
            let shown: Vec<String> = entry
                .params
                .iter()
                .zip(entry.param_names)
                .map(|(kind, name)| format!("{kind:?} {name}"))
                .collect();
            assert_eq!(
                entry.signature,
                format!("({})", shown.join(", ")),
                "{}",
                entry.name
            );
            let pointers: Vec<usize> = (0..entry.params.len())
                .filter(|&i| entry.params[i] == ParamKind::Ptr)
                .collect();
            let reached: Vec<usize> = entry.reaches.iter().map(|r| r.param).collect();
            assert_eq!(reached, pointers, "{}", entry.name);
            let extents = entry
                .reaches
                .iter()
                .map(|r| &r.extent)
                .chain(&entry.workgroup);
            for extent in extents {
                for factor in extent.factors {
                    if let Factor::Arg(index) = *factor {
                        assert!(
                            matches!(entry.params[index], ParamKind::U32 | ParamKind::U64),
                            "{}: factor {index} is no integer parameter",
                            entry.name
                        );
                    }
                }
            }
        }
    }

    fn library(name: &str) -> &'static KernelEntry {
        entry(name).unwrap()
    }

    #[test]
    fn reaches_follow_the_kernels_definitions() {
        let dims = LaunchDims::linear(4, 64);
        let fill = [
            KernelArg::Ptr(0x1000),
            KernelArg::U32(7),
            KernelArg::U64(2048),
        ];
        let fill_u32 = library("fill_u32");
        assert_eq!(fill_u32.reaches[0].extent.bytes(&fill, &dims), Some(8192));
        assert_eq!(fill_u32.check_launch(&fill, &dims, |_| 8192), Ok(()));
        assert_eq!(
            fill_u32.check_launch(&fill, &dims, |_| 4096),
            Err(Error::KernelReach {
                kernel: "fill_u32",
                argument: Some(0),
                parameter: "dst",
                address: 0x1000,
                given: 4096,
                reach: 8192,
            })
        );

        let axpy = [
            KernelArg::F32(2.0),
            KernelArg::Ptr(0x1000),
            KernelArg::Ptr(0x9000),
            KernelArg::U64(100),
        ];
        let given = |index| if index == 2 { 396 } else { 400 };
        assert_eq!(
            library("axpy_f32").check_launch(&axpy, &dims, given),
            Err(Error::KernelReach {
                kernel: "axpy_f32",
                argument: Some(2),
                parameter: "y",
                address: 0x9000,
                given: 396,
                reach: 400,
            })
        );

        // Three workgroups of 16 words over a 2-D grid: 3 * 2 groups of 64 bytes.
        let reverse = library("workgroup_reverse_u32");
        let args = [KernelArg::Ptr(0x1000), KernelArg::U32(16)];
        let dims = LaunchDims {
            grid: [3, 2, 1],
            block: [32, 1, 1],
            dynamic_workgroup_bytes: 64,
        };
        assert_eq!(reverse.check_launch(&args, &dims, |_| 384), Ok(()));
        assert!(matches!(
            reverse.check_launch(&args, &dims, |_| 383),
            Err(Error::KernelReach {
                reach: 384,
                given: 383,
                ..
            })
        ));
        let short = LaunchDims {
            dynamic_workgroup_bytes: 60,
            ..dims
        };
        assert_eq!(
            reverse.check_launch(&args, &short, |_| 384),
            Err(Error::KernelReach {
                kernel: "workgroup_reverse_u32",
                argument: None,
                parameter: DYNAMIC_WORKGROUP_MEMORY,
                address: 0,
                given: 60,
                reach: 64,
            })
        );
    }

    #[test]
    fn a_launchs_footprint_is_each_pointers_reach_with_its_access() {
        let axpy = library("axpy_f32");
        let args = [
            KernelArg::F32(2.0),
            KernelArg::Ptr(0x1000),
            KernelArg::Ptr(0x9000),
            KernelArg::U64(16),
        ];
        let dims = LaunchDims::linear(1, 16);
        let footprint: Vec<_> = axpy.footprint(&args, &dims).collect();
        let range = |start| ByteRange::new(start, 64).unwrap_or_else(|| unreachable!());
        assert_eq!(
            footprint,
            [
                (range(0x1000), Access::Read),
                (range(0x9000), Access::ReadWrite)
            ]
        );
        // A count of zero reaches nothing.
        let none = [args[0], args[1], args[2], KernelArg::U64(0)];
        assert_eq!(axpy.footprint(&none, &dims).count(), 0);
        let fill = [
            KernelArg::Ptr(0x1000),
            KernelArg::U32(1),
            KernelArg::U64(16),
        ];
        let written: Vec<_> = library("fill_u32").footprint(&fill, &dims).collect();
        assert_eq!(written, [(range(0x1000), Access::Write)]);
    }

    /// Counts whose bytes overflow 64 bits reach more than any span: refused, never wrapped,
    /// even against a span as long as the address space.
    #[test]
    fn a_reach_that_overflows_is_refused() {
        let args = [
            KernelArg::Ptr(0x1000),
            KernelArg::U32(0),
            KernelArg::U64(u64::MAX / 2),
        ];
        let dims = LaunchDims::linear(1, 1);
        let fill_u32 = library("fill_u32");
        assert_eq!(fill_u32.reaches[0].extent.bytes(&args, &dims), None);
        assert!(matches!(
            fill_u32.check_launch(&args, &dims, |_| usize::MAX),
            Err(Error::KernelReach {
                reach: u64::MAX,
                ..
            })
        ));
        let big = LaunchDims::linear(u32::MAX, 1);
        let reverse = [KernelArg::Ptr(0x1000), KernelArg::U32(u32::MAX)];
        let extent = library("workgroup_reverse_u32").reaches[0].extent;
        assert_eq!(extent.bytes(&reverse, &big), None);
        // A factor naming a missing or non-integer argument counts as overflow.
        assert_eq!(extent.bytes(&reverse[..1], &big), None);
    }

    #[test]
    fn packed_arguments_read_back_through_the_pointers_as_their_types() {
        let entry = library("axpy_f32");
        let args = [
            KernelArg::F32(-2.5),
            KernelArg::Ptr(0xdead_bee0),
            KernelArg::Ptr(usize::MAX),
            KernelArg::U64(u64::MAX - 3),
        ];
        let mut buffer = ArgBuffer::pack(entry, &args).unwrap();
        let pointers = buffer.pointers();
        // SAFETY: each pointer points at a live slot holding a value of the read type.
        unsafe {
            assert_eq!(*pointers[0].cast::<f32>(), -2.5);
            assert_eq!(*pointers[1].cast::<u64>(), 0xdead_bee0);
            assert_eq!(*pointers[2].cast::<u64>(), usize::MAX as u64);
            assert_eq!(*pointers[3].cast::<u64>(), u64::MAX - 3);
        }
        let entry = library("fill_u32");
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
        let entry = library("workgroup_reverse_u32");
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
        let dims = LaunchDims::linear(1, 1);
        for args in cases {
            assert_eq!(ArgBuffer::pack(entry, args).err(), Some(mismatch.clone()));
            assert_eq!(
                entry.check_launch(args, &dims, |_| 0),
                Err(mismatch.clone())
            );
        }
        assert!(ArgBuffer::pack(entry, &[KernelArg::Ptr(0x1000), KernelArg::U32(4)]).is_ok());
    }
}
