//! What a CUDA device is and can do, read from its attributes once at open: the allocator's
//! capabilities, the workgroup-memory limits, and the addressing facts the policies decide from.

use core::ffi::c_int;

use gpu_core::Result;
use gpu_core::allocator::{AllocatorCapabilities, KindSupport};
use gpu_core::backend::DeviceInfo;
use gpu_core::workgroup::WorkgroupLimits;

use crate::sys;

/// Describes a device from its name, its memory size and its attributes (`attribute` asks the
/// driver in production, a table in tests). `pool_entry_points` says whether the driver has the
/// functions of the stream-ordered allocator (CUDA 11.2 and later).
///
/// Device memory is stream-ordered where the device reports memory pools and the driver has the
/// functions; managed and pinned host memory are reported as synchronous only: the backend
/// allocates them with cuMemAllocManaged and cuMemHostAlloc, which have no stream-ordered form
/// (the pools CUDA 12.6 and 13.0 added for them are not used).
pub(crate) fn describe_device(
    name: String,
    total_memory: usize,
    pool_entry_points: bool,
    mut attribute: impl FnMut(sys::CUdevice_attribute) -> Result<c_int>,
) -> Result<DeviceInfo> {
    let mut flag = |which| attribute(which).map(|value| value != 0);
    let memory_pools = flag(sys::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? && pool_entry_points;
    let managed = flag(sys::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)?;
    let can_map_host = flag(sys::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)?;
    let host_register = flag(sys::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED)?;
    let unified_addressing = flag(sys::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?;
    let pageable_memory_access = flag(sys::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)?;
    // Byte counts: a negative value (never reported) reads as 0, which the planner refuses.
    let mut bytes = |which| attribute(which).map(|value| u32::try_from(value).unwrap_or(0));
    let workgroup = WorkgroupLimits {
        default_per_block: bytes(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        max_per_block_opt_in: bytes(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        per_multiprocessor: bytes(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        reserved_per_block: bytes(sys::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)?,
    };
    let device = KindSupport {
        available: true,
        stream_ordered: memory_pools,
        max_size: total_memory,
    };
    Ok(DeviceInfo {
        name,
        total_memory,
        allocator: AllocatorCapabilities {
            device,
            managed: KindSupport::synchronous_if(managed),
            // cuMemHostAlloc with DEVICEMAP needs a device that can map host memory.
            host_pinned: KindSupport::synchronous_if(can_map_host),
            host_register,
        },
        workgroup,
        unified_addressing,
        pageable_memory_access,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_core::{DriverError, Error};

    /// The attributes an H200 with driver 580 reports (read on the GPU box).
    fn h200(which: sys::CUdevice_attribute) -> Result<c_int> {
        Ok(match which {
            sys::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
            | sys::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY
            | sys::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
            | sys::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED
            | sys::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING => 1,
            sys::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS => 0,
            sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK => 49152,
            sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => 232448,
            sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => 233472,
            sys::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK => 1024,
            other => panic!("attribute {other} was not expected to be asked"),
        })
    }

    const H200_MEMORY: usize = 150_754_820_096;

    #[test]
    fn an_h200_has_stream_ordered_device_memory_and_synchronous_host_kinds() {
        let info = describe_device("NVIDIA H200".into(), H200_MEMORY, true, h200).unwrap();
        assert_eq!(
            info,
            DeviceInfo {
                name: "NVIDIA H200".into(),
                total_memory: H200_MEMORY,
                allocator: AllocatorCapabilities {
                    device: KindSupport {
                        available: true,
                        stream_ordered: true,
                        max_size: H200_MEMORY,
                    },
                    managed: KindSupport::SYNCHRONOUS,
                    host_pinned: KindSupport::SYNCHRONOUS,
                    host_register: true,
                },
                workgroup: WorkgroupLimits {
                    default_per_block: 49152,
                    max_per_block_opt_in: 232448,
                    per_multiprocessor: 233472,
                    reserved_per_block: 1024,
                },
                unified_addressing: true,
                pageable_memory_access: false,
            }
        );
        assert_eq!(info.workgroup.max_per_block(), 232448);
    }

    #[test]
    fn device_memory_is_synchronous_without_pools_or_without_their_entry_points() {
        let no_pools = |which| match which {
            sys::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => Ok(0),
            other => h200(other),
        };
        let info = describe_device("a".into(), 1 << 30, true, no_pools).unwrap();
        assert!(info.allocator.device.available && !info.allocator.device.stream_ordered);
        let info = describe_device("b".into(), 1 << 30, false, h200).unwrap();
        assert!(!info.allocator.device.stream_ordered);
    }

    #[test]
    fn missing_features_are_reported_absent() {
        let bare = |which| match which {
            sys::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY
            | sys::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
            | sys::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED => Ok(0),
            sys::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS => Ok(1),
            sys::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK => Ok(-1),
            other => h200(other),
        };
        let info = describe_device("c".into(), 1 << 30, true, bare).unwrap();
        assert_eq!(info.allocator.managed, KindSupport::NONE);
        assert_eq!(info.allocator.host_pinned, KindSupport::NONE);
        assert!(!info.allocator.host_register);
        assert!(info.pageable_memory_access);
        assert_eq!(info.workgroup.reserved_per_block, 0);
    }

    #[test]
    fn a_failed_attribute_query_is_the_driver_error() {
        let failing = |which| match which {
            sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => Err(Error::Driver(
                crate::driver_error("cuDeviceGetAttribute", sys::CUDA_ERROR_INVALID_VALUE),
            )),
            other => h200(other),
        };
        assert_eq!(
            describe_device("d".into(), 1 << 30, true, failing),
            Err(Error::Driver(DriverError {
                backend: "cuda",
                call: "cuDeviceGetAttribute",
                name: "CUDA_ERROR_INVALID_VALUE",
                code: 1,
            }))
        );
    }
}
