//! What a HIP device is and can do, read from its attributes once at open: the allocator's
//! capabilities, the workgroup-memory limits, and the addressing facts the policies decide from.

use core::ffi::c_int;

use gpu_core::allocator::{AllocatorCapabilities, KindSupport};
use gpu_core::backend::DeviceInfo;
use gpu_core::workgroup::WorkgroupLimits;
use gpu_core::{DriverError, Error, Result};

use crate::sys;

/// Describes a device from its name, memory size and attributes (`attribute` asks HIP in
/// production, a table in tests). `pool_entry_points` says whether the library has the
/// stream-ordered allocator's functions.
///
/// Attributes ROCm marks "CUDA only" (the opt-in shared-memory limit, the memory the driver
/// reserves per block, unified addressing) answer `hipErrorInvalidValue` on AMD: the limit is
/// then the default one (AMD kernels get their whole LDS without opting in), nothing is
/// reserved, and addressing is unified (every 64-bit HIP platform is). Any other failure is the
/// driver's error. Device memory is stream-ordered where the device reports memory pools;
/// managed and pinned host memory are synchronous only (hipMallocManaged, hipHostMalloc).
pub(crate) fn describe_device(
    name: String,
    total_memory: usize,
    pool_entry_points: bool,
    mut attribute: impl FnMut(sys::hipDeviceAttribute_t) -> Result<c_int>,
) -> Result<DeviceInfo> {
    let mut optional = |which, absent: c_int| match attribute(which) {
        Err(Error::Driver(DriverError { code, .. }))
            if code == i64::from(sys::hipErrorInvalidValue) =>
        {
            Ok(absent)
        }
        other => other,
    };
    let unified_addressing = optional(sys::hipDeviceAttributeUnifiedAddressing, 1)? != 0;
    let reserved = optional(sys::hipDeviceAttributeReservedSharedMemPerBlock, 0)?;
    let opt_in = optional(sys::hipDeviceAttributeSharedMemPerBlockOptin, 0)?;
    let mut flag = |which| attribute(which).map(|value| value != 0);
    let memory_pools = flag(sys::hipDeviceAttributeMemoryPoolsSupported)? && pool_entry_points;
    let managed = flag(sys::hipDeviceAttributeManagedMemory)?;
    let can_map_host = flag(sys::hipDeviceAttributeCanMapHostMemory)?;
    let pageable_memory_access = flag(sys::hipDeviceAttributePageableMemoryAccess)?;
    // Byte counts: a negative value (never reported) reads as 0, which the planner refuses.
    let bytes = |value: c_int| u32::try_from(value).unwrap_or(0);
    let default_per_block = bytes(attribute(sys::hipDeviceAttributeMaxSharedMemoryPerBlock)?);
    let workgroup = WorkgroupLimits {
        default_per_block,
        max_per_block_opt_in: bytes(opt_in).max(default_per_block),
        per_multiprocessor: bytes(attribute(
            sys::hipDeviceAttributeMaxSharedMemoryPerMultiprocessor,
        )?),
        reserved_per_block: bytes(reserved),
    };
    Ok(DeviceInfo {
        name,
        total_memory,
        allocator: AllocatorCapabilities {
            device: KindSupport {
                available: true,
                stream_ordered: memory_pools,
                max_size: total_memory,
            },
            managed: KindSupport::synchronous_if(managed),
            // hipHostMalloc with Mapped needs a device that can map host memory; so does
            // hipHostRegister with Mapped, which the lock table's per-device pointers need.
            host_pinned: KindSupport::synchronous_if(can_map_host),
            host_register: can_map_host,
        },
        workgroup,
        unified_addressing,
        pageable_memory_access,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver_error;

    /// What an H200 reports through the HIP shim (the NVIDIA path answers every attribute).
    fn h200(which: sys::hipDeviceAttribute_t) -> Result<c_int> {
        Ok(match which {
            sys::hipDeviceAttributeMemoryPoolsSupported
            | sys::hipDeviceAttributeManagedMemory
            | sys::hipDeviceAttributeCanMapHostMemory
            | sys::hipDeviceAttributeUnifiedAddressing => 1,
            sys::hipDeviceAttributePageableMemoryAccess => 0,
            sys::hipDeviceAttributeMaxSharedMemoryPerBlock => 49152,
            sys::hipDeviceAttributeSharedMemPerBlockOptin => 232448,
            sys::hipDeviceAttributeMaxSharedMemoryPerMultiprocessor => 233472,
            sys::hipDeviceAttributeReservedSharedMemPerBlock => 1024,
            other => panic!("attribute {other} was not expected to be asked"),
        })
    }

    /// An MI250-like AMD device: the "CUDA only" attributes are hipErrorInvalidValue.
    fn amd(which: sys::hipDeviceAttribute_t) -> Result<c_int> {
        match which {
            sys::hipDeviceAttributeUnifiedAddressing
            | sys::hipDeviceAttributeSharedMemPerBlockOptin
            | sys::hipDeviceAttributeReservedSharedMemPerBlock => Err(Error::Driver(driver_error(
                "hipDeviceGetAttribute",
                sys::hipErrorInvalidValue,
            ))),
            sys::hipDeviceAttributeMaxSharedMemoryPerBlock
            | sys::hipDeviceAttributeMaxSharedMemoryPerMultiprocessor => Ok(65536),
            other => h200(other),
        }
    }

    #[test]
    fn an_h200_through_hip_has_its_opt_in_limit_and_stream_ordered_device_memory() {
        let info = describe_device("NVIDIA H200".into(), 1 << 37, true, h200).unwrap();
        assert_eq!(
            info.allocator,
            AllocatorCapabilities {
                device: KindSupport {
                    available: true,
                    stream_ordered: true,
                    max_size: 1 << 37,
                },
                managed: KindSupport::SYNCHRONOUS,
                host_pinned: KindSupport::SYNCHRONOUS,
                host_register: true,
            }
        );
        assert_eq!(
            info.workgroup,
            WorkgroupLimits {
                default_per_block: 49152,
                max_per_block_opt_in: 232448,
                per_multiprocessor: 233472,
                reserved_per_block: 1024,
            }
        );
        assert!(info.unified_addressing && !info.pageable_memory_access);
    }

    #[test]
    fn cuda_only_attributes_fall_back_on_amd() {
        let info = describe_device("gfx90a".into(), 1 << 36, true, amd).unwrap();
        assert_eq!(
            info.workgroup,
            WorkgroupLimits {
                default_per_block: 65536,
                max_per_block_opt_in: 65536,
                per_multiprocessor: 65536,
                reserved_per_block: 0,
            }
        );
        assert!(info.unified_addressing);
    }

    #[test]
    fn no_pools_or_no_pool_functions_mean_synchronous_device_memory() {
        let no_pools = |which| match which {
            sys::hipDeviceAttributeMemoryPoolsSupported => Ok(0),
            other => h200(other),
        };
        assert!(
            !describe_device("a".into(), 1, true, no_pools)
                .unwrap()
                .allocator
                .device
                .stream_ordered
        );
        assert!(
            !describe_device("b".into(), 1, false, h200)
                .unwrap()
                .allocator
                .device
                .stream_ordered
        );
    }

    #[test]
    fn other_failures_are_the_driver_error() {
        let failing = |which| match which {
            sys::hipDeviceAttributeManagedMemory => Err(Error::Driver(driver_error(
                "hipDeviceGetAttribute",
                sys::hipErrorInvalidDevice,
            ))),
            other => h200(other),
        };
        assert_eq!(
            describe_device("c".into(), 1, true, failing),
            Err(Error::Driver(driver_error(
                "hipDeviceGetAttribute",
                sys::hipErrorInvalidDevice
            )))
        );
        let optional_fails_otherwise = |which| match which {
            sys::hipDeviceAttributeSharedMemPerBlockOptin => Err(Error::Driver(driver_error(
                "hipDeviceGetAttribute",
                sys::hipErrorNotInitialized,
            ))),
            other => h200(other),
        };
        assert!(describe_device("d".into(), 1, true, optional_fails_otherwise).is_err());
    }
}
