//! AQL packets as plain values: the header word, kernel-dispatch and barrier-AND packets, a
//! launch's kernarg bytes, and a parameter array read back as a launch's arguments.
//!
//! Dispatch packets come from a launch's shape, barrier-AND packets hold any number of
//! dependency signals. Pure logic with no HSA call, so every rule here is unit-tested without a
//! GPU.

use core::ffi::c_void;

use gpu_core::backend::library::ParamKind;
use gpu_core::backend::{KernelArg, LaunchDims};
use gpu_core::{Error, Result};
use gpu_hip_ffi::code_objects::kernarg_layout;

use crate::sys;

/// Dependency signals one barrier-AND packet holds (`dep_signal[5]` in hsa.h).
pub(crate) const BARRIER_DEPENDENCIES: usize = 5;

/// The 16-bit AQL header of a packet of `packet_type`: the barrier bit set (the packet starts
/// only after every earlier packet of the queue has completed, which keeps a queue in order),
/// and system-scope acquire and release fences (host memory and other agents see the results).
pub(crate) fn header(packet_type: sys::hsa_packet_type_t) -> u16 {
    let field = |value: u32, shift: sys::hsa_packet_header_t| value << shift;
    (field(packet_type, sys::HSA_PACKET_HEADER_TYPE)
        | field(1, sys::HSA_PACKET_HEADER_BARRIER)
        | field(
            sys::HSA_FENCE_SCOPE_SYSTEM,
            sys::HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE,
        )
        | field(
            sys::HSA_FENCE_SCOPE_SYSTEM,
            sys::HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
        )) as u16
}

/// The first 32 bits of a packet, which the producer stores last and atomically: the header and
/// (for a dispatch) the setup field above it.
pub(crate) fn header_word(header: u16, setup: u16) -> u32 {
    u32::from(header) | (u32::from(setup) << 16)
}

/// What a dispatch needs of a loaded kernel (from its executable symbol).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct KernelObject {
    /// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT`: the kernel descriptor's address.
    pub(crate) object: u64,
    /// Bytes of kernarg segment the kernel reads.
    pub(crate) kernarg_size: u32,
    /// Static group (workgroup, LDS) memory per workgroup.
    pub(crate) group_size: u32,
    /// Private (scratch) memory per work-item.
    pub(crate) private_size: u32,
}

/// The kernel-dispatch packet for `kernel` launched with `dims`: workgroup sizes from the
/// block, grid sizes in work-items (HSA counts work-items, not workgroups), the dynamic
/// workgroup bytes added to the kernel's static group segment. The header is left zero: the
/// producer writes it last ([`header_word`]).
///
/// # Errors
/// [`Error::ZeroSize`] for an empty grid or block dimension; [`Error::LimitExceeded`] for a
/// block dimension above 65,535 (AQL's 16-bit fields), a grid dimension whose work-items exceed
/// 32 bits, or group memory that overflows 32 bits.
pub(crate) fn dispatch_packet(
    kernel: &KernelObject,
    dims: &LaunchDims,
    kernarg_address: usize,
    completion: sys::hsa_signal_t,
) -> Result<sys::hsa_kernel_dispatch_packet_t> {
    if dims.grid.contains(&0) || dims.block.contains(&0) {
        return Err(Error::ZeroSize {
            what: "launch grid or block dimension",
        });
    }
    let too_large = |what, required: u64, limit: u64| Error::LimitExceeded {
        what,
        required: required as usize,
        limit: limit as usize,
        detail: vec![format!("launch {dims:?}")],
    };
    let mut workgroup = [0u16; 3];
    let mut grid = [0u32; 3];
    for axis in 0..3 {
        workgroup[axis] = u16::try_from(dims.block[axis]).map_err(|_| {
            too_large(
                "threads per block dimension (AQL)",
                dims.block[axis].into(),
                u16::MAX.into(),
            )
        })?;
        let items = u64::from(dims.grid[axis]) * u64::from(dims.block[axis]);
        grid[axis] = u32::try_from(items).map_err(|_| {
            too_large(
                "work-items per grid dimension (AQL)",
                items,
                u32::MAX.into(),
            )
        })?;
    }
    let group = u64::from(kernel.group_size) + u64::from(dims.dynamic_workgroup_bytes);
    let group_segment_size = u32::try_from(group)
        .map_err(|_| too_large("workgroup memory per workgroup", group, u32::MAX.into()))?;
    let dimensions = if dims.grid[2] > 1 || dims.block[2] > 1 {
        3
    } else if dims.grid[1] > 1 || dims.block[1] > 1 {
        2
    } else {
        1
    };
    Ok(sys::hsa_kernel_dispatch_packet_t {
        header: 0,
        setup: dimensions << sys::HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
        workgroup_size_x: workgroup[0],
        workgroup_size_y: workgroup[1],
        workgroup_size_z: workgroup[2],
        reserved0: 0,
        grid_size_x: grid[0],
        grid_size_y: grid[1],
        grid_size_z: grid[2],
        private_segment_size: kernel.private_size,
        group_segment_size,
        kernel_object: kernel.object,
        kernarg_address: kernarg_address as *mut c_void,
        reserved2: 0,
        completion_signal: completion,
    })
}

/// The barrier-AND packets that make later packets of a queue wait for every signal of
/// `dependencies` (each to reach 0): one packet per five signals, unused slots null, and
/// `completion` on the last packet only. No dependencies and no completion signal: no packet.
pub(crate) fn barrier_and_packets(
    dependencies: &[sys::hsa_signal_t],
    completion: Option<sys::hsa_signal_t>,
) -> Vec<sys::hsa_barrier_and_packet_t> {
    let mut packets: Vec<sys::hsa_barrier_and_packet_t> = dependencies
        .chunks(BARRIER_DEPENDENCIES)
        .map(|group| {
            let mut packet = sys::hsa_barrier_and_packet_t::default();
            packet.dep_signal[..group.len()].copy_from_slice(group);
            packet
        })
        .collect();
    if let Some(signal) = completion {
        if packets.is_empty() {
            packets.push(sys::hsa_barrier_and_packet_t::default());
        }
        if let Some(last) = packets.last_mut() {
            last.completion_signal = signal;
        }
    }
    packets
}

/// The kernarg bytes of a launch: each argument at its natural alignment (AMDGPU's kernel ABI,
/// the layout [`kernarg_layout`] computes and the code objects' descriptors are tested
/// against), little-endian, `min_size` bytes at least (the kernel's own kernarg segment size,
/// which may count hidden arguments after the explicit ones).
pub(crate) fn kernarg_bytes(args: &[KernelArg], min_size: usize) -> Vec<u8> {
    let kinds: Vec<ParamKind> = args.iter().map(ParamKind::of).collect();
    let layout = kernarg_layout(&kinds);
    let mut bytes = vec![0u8; layout.size.max(min_size)];
    for (arg, &offset) in args.iter().zip(&layout.offsets) {
        let value: &[u8] = &match *arg {
            KernelArg::Ptr(address) => (address as u64).to_le_bytes().to_vec(),
            KernelArg::U64(value) => value.to_le_bytes().to_vec(),
            KernelArg::U32(value) => value.to_le_bytes().to_vec(),
            KernelArg::F32(value) => value.to_le_bytes().to_vec(),
        };
        bytes[offset..offset + value.len()].copy_from_slice(value);
    }
    bytes
}

/// The arguments a parameter array (`void **`, one pointer per parameter to its value) holds
/// for a kernel whose parameters are `params`.
///
/// # Safety
/// `params` points to `params.len()` valid pointers, each to a value of its parameter's type.
pub(crate) unsafe fn args_from_parameter_array(
    params: &[ParamKind],
    array: *mut *mut c_void,
) -> Result<Vec<KernelArg>> {
    if array.is_null() {
        return Err(Error::NullPointer {
            what: "kernel parameter array",
        });
    }
    (0..params.len())
        .map(|index| {
            // SAFETY: the caller's promise: one valid pointer per parameter.
            let value = unsafe { *array.add(index) };
            if value.is_null() {
                return Err(Error::NullPointer {
                    what: "kernel parameter value",
                });
            }
            // SAFETY: the caller's promise: the value has the parameter's type (unaligned
            // reads, as a C array of values need not be aligned for Rust).
            Ok(unsafe {
                match params[index] {
                    ParamKind::Ptr => KernelArg::Ptr(value.cast::<u64>().read_unaligned() as usize),
                    ParamKind::U64 => KernelArg::U64(value.cast::<u64>().read_unaligned()),
                    ParamKind::U32 => KernelArg::U32(value.cast::<u32>().read_unaligned()),
                    ParamKind::F32 => KernelArg::F32(value.cast::<f32>().read_unaligned()),
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn signal(handle: u64) -> sys::hsa_signal_t {
        sys::hsa_signal_t { handle }
    }

    #[test]
    fn headers_set_type_barrier_and_system_fences_at_hsas_bit_positions() {
        // hsa.h: type in bits 0-7, barrier bit 8, acquire scope bits 9-10, release 11-12;
        // SYSTEM scope is 2.
        assert_eq!(
            header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH),
            2 | (1 << 8) | (2 << 9) | (2 << 11)
        );
        assert_eq!(
            header(sys::HSA_PACKET_TYPE_BARRIER_AND),
            3 | (1 << 8) | (2 << 9) | (2 << 11)
        );
        assert_eq!(header_word(0x1502, 3), 0x0003_1502);
        assert_eq!(header_word(0xffff, 0), 0xffff);
    }

    #[test]
    fn a_dispatch_counts_work_items_and_adds_dynamic_group_memory() {
        let kernel = KernelObject {
            object: 0xabc0,
            kernarg_size: 24,
            group_size: 256,
            private_size: 16,
        };
        let dims = LaunchDims {
            grid: [40, 1, 1],
            block: [256, 1, 1],
            dynamic_workgroup_bytes: 4096,
        };
        let packet = dispatch_packet(&kernel, &dims, 0x7000, signal(9)).unwrap();
        assert_eq!(packet.header, 0);
        assert_eq!(packet.setup, 1);
        assert_eq!(
            (
                packet.workgroup_size_x,
                packet.workgroup_size_y,
                packet.workgroup_size_z
            ),
            (256, 1, 1)
        );
        assert_eq!(
            (packet.grid_size_x, packet.grid_size_y, packet.grid_size_z),
            (40 * 256, 1, 1)
        );
        assert_eq!(packet.group_segment_size, 256 + 4096);
        assert_eq!(packet.private_segment_size, 16);
        assert_eq!(packet.kernel_object, 0xabc0);
        assert_eq!(packet.kernarg_address as usize, 0x7000);
        assert_eq!(packet.completion_signal.handle, 9);
        let planar = LaunchDims {
            grid: [2, 3, 1],
            block: [8, 8, 1],
            dynamic_workgroup_bytes: 0,
        };
        assert_eq!(
            dispatch_packet(&kernel, &planar, 0, signal(0))
                .unwrap()
                .setup,
            2
        );
        let cube = LaunchDims {
            grid: [1, 1, 2],
            ..planar
        };
        assert_eq!(
            dispatch_packet(&kernel, &cube, 0, signal(0)).unwrap().setup,
            3
        );
    }

    #[test]
    fn dispatch_limits_are_typed_errors() {
        let kernel = KernelObject {
            object: 1,
            kernarg_size: 0,
            group_size: u32::MAX - 10,
            private_size: 0,
        };
        let fits = LaunchDims::linear(1, 1);
        assert!(dispatch_packet(&kernel, &fits, 0, signal(0)).is_ok());
        let cases = [
            (LaunchDims::linear(0, 64), "zero"),
            (LaunchDims::linear(4, 0), "zero"),
            (
                LaunchDims::linear(1, 65_536),
                "threads per block dimension (AQL)",
            ),
            (
                LaunchDims::linear(1 << 24, 256),
                "work-items per grid dimension (AQL)",
            ),
            (
                LaunchDims {
                    dynamic_workgroup_bytes: 11,
                    ..fits
                },
                "workgroup memory per workgroup",
            ),
        ];
        for (dims, expected) in cases {
            match dispatch_packet(&kernel, &dims, 0, signal(0)) {
                Err(Error::ZeroSize { .. }) if expected == "zero" => {}
                Err(Error::LimitExceeded { what, .. }) if what == expected => {}
                other => panic!("{dims:?}: {other:?}"),
            }
        }
        let just_fits = LaunchDims {
            dynamic_workgroup_bytes: 10,
            ..fits
        };
        assert_eq!(
            dispatch_packet(&kernel, &just_fits, 0, signal(0))
                .unwrap()
                .group_segment_size,
            u32::MAX
        );
    }

    #[test]
    fn barrier_packets_hold_five_dependencies_each_and_complete_on_the_last() {
        for count in 0..=16u64 {
            let deps: Vec<_> = (1..=count).map(signal).collect();
            for completion in [None, Some(signal(99))] {
                let packets = barrier_and_packets(&deps, completion);
                let expected_packets = match (count, completion) {
                    (0, None) => 0,
                    (0, Some(_)) => 1,
                    (n, _) => n.div_ceil(5) as usize,
                };
                assert_eq!(packets.len(), expected_packets, "{count} deps");
                // Every dependency appears once, in order; unused slots are null.
                let listed: Vec<u64> = packets
                    .iter()
                    .flat_map(|p| p.dep_signal.iter().map(|s| s.handle))
                    .filter(|&h| h != 0)
                    .collect();
                assert_eq!(listed, (1..=count).collect::<Vec<_>>());
                for (index, packet) in packets.iter().enumerate() {
                    let last = index + 1 == packets.len();
                    let expected = if last {
                        completion.map_or(0, |s| s.handle)
                    } else {
                        0
                    };
                    assert_eq!(packet.completion_signal.handle, expected);
                    assert_eq!(packet.header, 0, "the producer writes headers last");
                }
            }
        }
    }

    #[test]
    fn kernargs_sit_at_natural_alignment_little_endian() {
        let args = [
            KernelArg::F32(1.5),
            KernelArg::Ptr(0x1122_3344_5566_7788),
            KernelArg::U32(0xdead_beef),
            KernelArg::U64(7),
        ];
        let bytes = kernarg_bytes(&args, 0);
        assert_eq!(bytes.len(), 32);
        assert_eq!(&bytes[0..4], &1.5f32.to_le_bytes());
        assert_eq!(&bytes[4..8], &[0; 4], "padding before the pointer");
        assert_eq!(&bytes[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&bytes[16..20], &0xdead_beefu32.to_le_bytes());
        assert_eq!(&bytes[24..32], &7u64.to_le_bytes());
        // The kernel's own segment size wins when larger (hidden arguments).
        assert_eq!(kernarg_bytes(&[KernelArg::U32(1)], 56).len(), 56);
        assert_eq!(kernarg_bytes(&[], 0).len(), 0);
    }

    #[test]
    fn a_parameter_array_reads_back_as_the_kernels_arguments() {
        let (mut x, mut n, mut a) = (0x5000u64, 12u64, -2.0f32);
        let mut array: [*mut c_void; 3] = [
            (&mut a as *mut f32).cast(),
            (&mut x as *mut u64).cast(),
            (&mut n as *mut u64).cast(),
        ];
        let params = [ParamKind::F32, ParamKind::Ptr, ParamKind::U64];
        // SAFETY: three valid pointers to values of the parameters' types.
        let args = unsafe { args_from_parameter_array(&params, array.as_mut_ptr()) }.unwrap();
        assert_eq!(
            args,
            [
                KernelArg::F32(-2.0),
                KernelArg::Ptr(0x5000),
                KernelArg::U64(12)
            ]
        );
        array[1] = core::ptr::null_mut();
        assert_eq!(
            // SAFETY: a valid array of three pointers; the function refuses the null one before
            // reading through it.
            unsafe { args_from_parameter_array(&params, array.as_mut_ptr()) },
            Err(Error::NullPointer {
                what: "kernel parameter value"
            })
        );
        assert_eq!(
            // SAFETY: a null array is refused before it is read.
            unsafe { args_from_parameter_array(&params, core::ptr::null_mut()) },
            Err(Error::NullPointer {
                what: "kernel parameter array"
            })
        );
    }
}
