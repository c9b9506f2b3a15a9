//! The devices as opened: each GPU agent's queue limit, pools, peers and description, the CPU
//! agent's host pools, and the device the calling thread chose last (HSA keeps none).

use core::cell::Cell;
use core::ffi::{CStr, c_char, c_void};
use std::sync::Mutex;

use gpu_core::allocator::{AllocatorCapabilities, KindSupport};
use gpu_core::backend::DeviceInfo;
use gpu_core::workgroup::WorkgroupLimits;
use gpu_core::{DeviceId, Error, Result};

use super::executable::LoadedLibrary;
use super::pools;
use crate::library::Hsa;
use crate::result::{driver_error, hsa};
use crate::sys;

/// Slots of each queue's ring (clamped to what the agent allows).
const QUEUE_SLOTS: u32 = 1024;

/// One GPU agent as opened.
pub(super) struct DeviceState {
    pub(super) agent: sys::hsa_agent_t,
    /// The global, coarse-grained pool device memory comes from.
    pub(super) memory_pool: sys::hsa_amd_memory_pool_t,
    /// The other GPUs' agents that may reach `memory_pool` (read at open,
    /// [`pools::reaching_agents`]): each device allocation is opened to them.
    pub(super) peers: Vec<sys::hsa_agent_t>,
    pub(super) queue_slots: u32,
    pub(super) info: DeviceInfo,
    /// Loaded at the first `Backend::kernel` call for the device.
    pub(super) library: Mutex<Option<LoadedLibrary>>,
}

/// The host side: the CPU agent, the fine-grained pool pinned host memory comes from, and the
/// kernarg pool (kernel arguments and fill patterns).
#[derive(Clone, Copy, Debug)]
pub(super) struct HostPools {
    pub(super) cpu: sys::hsa_agent_t,
    pub(super) memory_pool: sys::hsa_amd_memory_pool_t,
    pub(super) kernarg_pool: sys::hsa_amd_memory_pool_t,
}

/// The host pools of the first CPU agent of `cpus` with both a fine-grained and a kernarg pool.
///
/// # Errors
/// An `HSA_STATUS_ERROR_INVALID_AGENT` error when no CPU agent has both; HSA's errors while
/// reading the pools.
pub(super) fn open_host(hsa: &Hsa, cpus: &[sys::hsa_agent_t]) -> Result<HostPools> {
    for &cpu in cpus {
        let chosen = pools::choose_pools(&pools::agent_pools(hsa, cpu)?);
        if let (Some(memory_pool), Some(kernarg_pool)) = (chosen.host, chosen.kernarg) {
            return Ok(HostPools {
                cpu,
                memory_pool,
                kernarg_pool,
            });
        }
    }
    Err(Error::Driver(driver_error(
        "hsa_amd_agent_iterate_memory_pools (no CPU agent with fine-grained and kernarg pools)",
        sys::HSA_STATUS_ERROR_INVALID_AGENT,
    )))
}

/// Opens GPU agent `agent`: name, queue limit, pools, the GPUs of `gpus` that may reach its
/// device pool, description.
pub(super) fn open_device(
    hsa: &Hsa,
    agent: sys::hsa_agent_t,
    gpus: &[sys::hsa_agent_t],
) -> Result<DeviceState> {
    // SAFETY: an agent the runtime reported; each use passes `value` valid for writes of its
    // attribute's type (64 bytes for the name, a u32 for the queue size).
    let info =
        |attribute, value: *mut c_void| hsa!(hsa, hsa_agent_get_info(agent, attribute, value));
    let mut name = [0 as c_char; 64];
    info(sys::HSA_AGENT_INFO_NAME, name.as_mut_ptr().cast())?;
    name[63] = 0;
    // SAFETY: NUL-terminated: HSA writes at most 64 bytes and the last is zero.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut queue_max: u32 = 0;
    info(
        sys::HSA_AGENT_INFO_QUEUE_MAX_SIZE,
        (&mut queue_max as *mut u32).cast(),
    )?;
    let chosen = pools::choose_pools(&pools::agent_pools(hsa, agent)?);
    let (memory_pool, total_memory) = chosen.device.ok_or(Error::Driver(driver_error(
        "hsa_amd_agent_iterate_memory_pools (no coarse-grained pool on a GPU)",
        sys::HSA_STATUS_ERROR_INVALID_AGENT,
    )))?;
    let lds = u32::try_from(chosen.group_bytes.unwrap_or(0)).unwrap_or(u32::MAX);
    let peers = pools::reaching_agents(hsa, agent, memory_pool, gpus)?;
    Ok(DeviceState {
        agent,
        memory_pool,
        peers,
        queue_slots: QUEUE_SLOTS.min(queue_max.max(1)),
        info: describe_device(name, total_memory, lds),
        library: Mutex::new(None),
    })
}

/// What an HSA GPU is and can do: device memory from its pool (synchronous: HSA has no
/// stream-ordered allocation), pinned host memory and locking always, no managed memory (HSA
/// offers it only through SVM attributes, which this backend does not use), its whole LDS for
/// every kernel (no opt-in), one address space.
pub(super) fn describe_device(name: String, total_memory: usize, lds: u32) -> DeviceInfo {
    DeviceInfo {
        name,
        total_memory,
        allocator: AllocatorCapabilities {
            device: KindSupport {
                available: true,
                stream_ordered: false,
                max_size: total_memory,
            },
            managed: KindSupport::synchronous_if(false),
            host_pinned: KindSupport::SYNCHRONOUS,
            host_register: true,
        },
        workgroup: WorkgroupLimits {
            default_per_block: lds,
            max_per_block_opt_in: lds,
            per_multiprocessor: lds,
            reserved_per_block: 0,
        },
        unified_addressing: true,
        pageable_memory_access: false,
    }
}

std::thread_local! {
    /// The device the calling thread chose last (HSA has no such state of its own).
    static CURRENT: Cell<Option<DeviceId>> = const { Cell::new(None) };
}

/// The device the calling thread chose last through an HSA backend.
pub(super) fn thread_device() -> Option<DeviceId> {
    CURRENT.with(Cell::get)
}

/// Makes `device` the calling thread's choice.
pub(super) fn set_thread_device(device: Option<DeviceId>) {
    CURRENT.with(|current| current.set(device));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_offers_device_and_pinned_memory_its_whole_lds_and_no_managed_memory() {
        let info = describe_device("gfx90a".into(), 64 << 30, 65536);
        assert!(info.allocator.device.available && !info.allocator.device.stream_ordered);
        assert_eq!(info.allocator.device.max_size, 64 << 30);
        assert!(!info.allocator.managed.available);
        assert!(info.allocator.host_pinned.available && info.allocator.host_register);
        assert_eq!(
            info.workgroup,
            WorkgroupLimits {
                default_per_block: 65536,
                max_per_block_opt_in: 65536,
                per_multiprocessor: 65536,
                reserved_per_block: 0,
            }
        );
        assert!(info.unified_addressing && !info.pageable_memory_access);
    }
}
