//! Memory: device and pinned host allocations from the agents' pools, host ranges locked for
//! every GPU, what HSA knows of an address, and the small host buffers that operations read.

use core::ffi::c_void;
use core::ptr;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::check_device_slots;
use gpu_core::{ByteRange, DeviceId, Error, Result};

use super::devices::DeviceState;
use super::pools::{self, free_pool_memory};
use super::{HsaBackend, HsaStream, LockedRange, lock};
use crate::result::{driver_error, hsa};
use crate::sys;

/// `Some(address)` for success, `None` when the pool is out of memory, else HSA's error.
fn allocation_outcome(code: sys::hsa_status_t, address: *mut c_void) -> Result<Option<usize>> {
    match code {
        sys::HSA_STATUS_SUCCESS => Ok(Some(address as usize)),
        sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES => Ok(None),
        failed => Err(Error::Driver(driver_error(
            "hsa_amd_memory_pool_allocate",
            failed,
        ))),
    }
}

impl HsaBackend {
    /// The opened device `device`, which allocates memory of `kind` ([`Error::KindUnsupported`]
    /// for managed memory, which it does not offer).
    fn allocating_device(&self, device: DeviceId, kind: MemoryKind) -> Result<&DeviceState> {
        let state = self.device(device)?;
        if !state.info.allocator.support(kind).available {
            return Err(Error::KindUnsupported { device, kind });
        }
        Ok(state)
    }

    /// [`Backend::allocate`](gpu_core::backend::Backend::allocate): pool memory, opened to the
    /// agents that must reach it.
    pub(super) fn allocate_memory(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        bytes: usize,
    ) -> Result<Option<usize>> {
        let state = self.allocating_device(device, kind)?;
        if bytes == 0 {
            return Err(Error::ZeroSize {
                what: "allocation size",
            });
        }
        let pool = match kind {
            MemoryKind::HostPinned => self.host()?.memory_pool,
            _ => state.memory_pool,
        };
        let allocate = self.hsa.hsa_amd_memory_pool_allocate()?;
        self.hsa.hsa_amd_memory_pool_free()?;
        let mut address = ptr::null_mut();
        // SAFETY: a pool of the backend; `address` is valid for writes.
        let code = unsafe { allocate(pool, bytes, 0, &mut address) };
        let outcome = allocation_outcome(code, address)?;
        // Host memory must be opened to the GPUs; device memory to its peers, where any.
        let gpus;
        let agents = if kind == MemoryKind::HostPinned {
            gpus = self.gpu_agents();
            &gpus
        } else {
            &state.peers
        };
        if outcome.is_some()
            && !agents.is_empty()
            && let Err(error) = self.allow(agents, address)
        {
            free_pool_memory(self.hsa, outcome);
            return Err(error);
        }
        Ok(outcome)
    }

    /// [`Backend::free`](gpu_core::backend::Backend::free): waits for `after`'s work, where
    /// given, then gives the memory back to its pool.
    pub(super) fn free_memory(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<HsaStream>,
    ) -> Result<()> {
        self.allocating_device(device, kind)?;
        if address == 0 {
            return Err(Error::NullPointer {
                what: "freed address",
            });
        }
        if let Some(stream) = after {
            self.wait_stream(stream)?;
        }
        // SAFETY: HSA looks the address up among its allocations and refuses one it did not
        // make; nothing is read or written through it.
        hsa!(self.hsa, hsa_amd_memory_pool_free(address as *mut c_void))
    }

    /// [`Backend::host_register`](gpu_core::backend::Backend::host_register): locks the range
    /// for every GPU and keeps its agent address.
    pub(super) fn lock_host(&self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        check_device_slots(self.devices.len(), device_ptrs)?;
        self.host()?;
        let mut agents = self.gpu_agents();
        let mut agent_address = ptr::null_mut();
        let mut tables = lock(&self.tables);
        if let Some((&start, locked)) = tables.locks.range(..range.start + range.len).next_back()
            && start + locked.len > range.start
        {
            return Err(Error::LockOverlap {
                requested: range,
                conflicting: ByteRange {
                    start,
                    len: locked.len,
                },
                external: false,
            });
        }
        // SAFETY: HSA pins the range's pages (refusing a range it cannot pin) without reading
        // or writing them; `agents` is `agents.len()` GPU agents, `agent_address` valid for
        // writes.
        hsa!(
            self.hsa,
            hsa_amd_memory_lock(
                range.start as *mut c_void,
                range.len,
                agents.as_mut_ptr(),
                agents.len() as i32,
                &mut agent_address
            )
        )?;
        tables.locks.insert(
            range.start,
            LockedRange {
                len: range.len,
                agent_address: agent_address as usize,
            },
        );
        device_ptrs.fill(agent_address as usize);
        Ok(())
    }

    /// [`Backend::host_unregister`](gpu_core::backend::Backend::host_unregister): unlocks a
    /// range the backend locked, by its exact start.
    pub(super) fn unlock_host(&self, start: usize) -> Result<()> {
        let mut tables = lock(&self.tables);
        if !tables.locks.contains_key(&start) {
            return Err(match tables.locks.range(..start).next_back() {
                Some((&entry, locked)) if entry + locked.len > start => Error::NotEntryStart {
                    ptr: start,
                    entry: ByteRange {
                        start: entry,
                        len: locked.len,
                    },
                },
                _ => Error::NotLocked { ptr: start },
            });
        }
        // SAFETY: a start this backend locked (checked above); nothing is read or written.
        hsa!(self.hsa, hsa_amd_memory_unlock(start as *mut c_void))?;
        tables.locks.remove(&start);
        Ok(())
    }

    /// [`Backend::host_pinned_extent`](gpu_core::backend::Backend::host_pinned_extent): the
    /// backend's own locked range around `ptr`, else what hsa_amd_pointer_info says.
    pub(super) fn pinned_host_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        check_device_slots(self.devices.len(), device_ptrs)?;
        let host = self.host()?;
        if let Some((&start, locked)) = lock(&self.tables).locks.range(..=ptr).next_back()
            && ptr < start + locked.len
        {
            device_ptrs.fill(locked.agent_address);
            return Ok(Some(ByteRange {
                start,
                len: locked.len,
            }));
        }
        let info = self.pointer_info(ptr)?;
        let Some((extent, agent_address)) = pools::pinned_extent(&info, host.cpu) else {
            return Ok(None);
        };
        device_ptrs.fill(agent_address);
        Ok(Some(extent))
    }

    /// What hsa_amd_pointer_info knows of `address` (its type, extent, owner).
    pub(super) fn pointer_info(&self, address: usize) -> Result<sys::hsa_amd_pointer_info_t> {
        let mut info = sys::hsa_amd_pointer_info_t {
            size: size_of::<sys::hsa_amd_pointer_info_t>() as u32,
            ..Default::default()
        };
        // SAFETY: HSA only looks `address` up; `info` is valid for writes and its `size` says
        // how large it is; no allocator, no accessible-agents list (null).
        hsa!(
            self.hsa,
            hsa_amd_pointer_info(
                address as *mut c_void,
                &mut info,
                None,
                ptr::null_mut(),
                ptr::null_mut()
            )
        )?;
        Ok(info)
    }

    /// A kernarg-pool buffer holding `bytes` (kernel arguments, a fill pattern), reachable by
    /// every GPU; `None` for no bytes.
    pub(super) fn scratch(&self, bytes: &[u8]) -> Result<Option<usize>> {
        if bytes.is_empty() {
            return Ok(None);
        }
        let host = self.host()?;
        let mut address = ptr::null_mut();
        // SAFETY: the host's kernarg pool; `address` is valid for writes.
        hsa!(
            self.hsa,
            hsa_amd_memory_pool_allocate(host.kernarg_pool, bytes.len(), 0, &mut address)
        )?;
        if let Err(error) = self.allow(&self.gpu_agents(), address) {
            free_pool_memory(self.hsa, Some(address as usize));
            return Err(error);
        }
        // SAFETY: the pool just gave `bytes.len()` bytes of host memory at `address`.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), address.cast::<u8>(), bytes.len()) };
        Ok(Some(address as usize))
    }

    /// Lets `agents` reach pool memory at `address` (host memory of a CPU pool, or a device
    /// allocation for its peers).
    fn allow(&self, agents: &[sys::hsa_agent_t], address: *mut c_void) -> Result<()> {
        // SAFETY: `agents` is `agents.len()` agents the runtime reported, read during the call;
        // `address` is pool memory the backend allocated; no attributes (null).
        hsa!(
            self.hsa,
            hsa_amd_agents_allow_access(agents.len() as u32, agents.as_ptr(), ptr::null(), address)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_resources_is_none_and_other_codes_are_hsa_errors() {
        let address = ptr::without_provenance_mut(0x1000);
        assert_eq!(
            allocation_outcome(sys::HSA_STATUS_SUCCESS, address),
            Ok(Some(0x1000))
        );
        assert_eq!(
            allocation_outcome(sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES, ptr::null_mut()),
            Ok(None)
        );
        assert_eq!(
            allocation_outcome(sys::HSA_STATUS_ERROR_INVALID_ALLOCATION, ptr::null_mut()),
            Err(Error::Driver(driver_error(
                "hsa_amd_memory_pool_allocate",
                sys::HSA_STATUS_ERROR_INVALID_ALLOCATION
            )))
        );
    }
}
