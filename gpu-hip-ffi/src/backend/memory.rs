//! Memory: device, managed and pinned host allocations (device memory also in stream order from
//! the default pool), their frees, and host ranges registered with HIP for every device.

use core::ffi::c_void;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::check_device_slots;
use gpu_core::backend::live::{FreeStep, check_allocation, check_stream_allocation, none_on_code};
use gpu_core::{ByteRange, DeviceId, Result};

use super::{HipBackend, HipStream, code};
use crate::result;
use crate::sys;

/// `Some(address)` for an allocation, `None` for `hipErrorOutOfMemory`, else the HIP error.
fn allocation_outcome(allocated: Result<*mut c_void>) -> Result<Option<usize>> {
    none_on_code(allocated, code(sys::hipErrorOutOfMemory))
        .map(|address| address.map(|address| address as usize))
}

impl HipBackend {
    /// `Backend::allocate`: memory of `kind` from HIP, recorded for `free`.
    pub(super) fn allocate_memory(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        bytes: usize,
    ) -> Result<Option<usize>> {
        check_allocation(&self.device(device)?.info, device, kind, bytes)?;
        let _scope = self.enter(device)?;
        let hip = self.hip;
        let allocated = allocation_outcome(match kind {
            MemoryKind::Device => result::memory::alloc(hip, bytes),
            MemoryKind::Managed => {
                result::memory::alloc_managed(hip, bytes, sys::hipMemAttachGlobal)
            }
            MemoryKind::HostPinned => {
                let flags = sys::hipHostMallocPortable | sys::hipHostMallocMapped;
                result::memory::alloc_host(hip, bytes, flags)
            }
        });
        self.allocations.record(device, kind, allocated)
    }

    /// `Backend::allocate_on_stream`: device memory from the default pool in `stream`'s order,
    /// recorded for `free`.
    pub(super) fn allocate_in_stream_order(
        &self,
        stream: HipStream,
        kind: MemoryKind,
        bytes: usize,
    ) -> Result<Option<usize>> {
        let stream = self.streams.get(stream.key)?;
        let device = stream.device;
        let pool = self.device(device)?.pool();
        check_stream_allocation(device, kind, pool.is_some(), bytes)?;
        let _scope = self.enter(device)?;
        // SAFETY: a live stream of the device (held), which is current.
        let allocated =
            allocation_outcome(unsafe { result::memory::alloc_async(self.hip, bytes, stream.raw) });
        self.allocations.record(device, kind, allocated)
    }

    /// `Backend::free`: memory this backend allocated, freed by the step its kind and `after` call
    /// for.
    pub(super) fn free_memory(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<HipStream>,
    ) -> Result<()> {
        self.device(device)?;
        self.allocations.release(device, kind, address, || {
            let after = after
                .map(|stream| self.streams.get(stream.key))
                .transpose()?;
            let _scope = self.enter(device)?;
            let (hip, pointer) = (self.hip, address as *mut c_void);
            // Each arm frees `address`: live memory of this kind that this backend allocated on
            // the device, just taken out of its allocations (so no other free reaches it), that
            // the caller no longer uses but by `after`'s work (the trait's contract).
            match FreeStep::of(kind, after.as_deref()) {
                // SAFETY: device memory as said above, freed in the order of `stream`, a live
                // stream of the device (held), which is current.
                FreeStep::InStreamOrder(stream) => unsafe {
                    result::memory::free_async(hip, pointer, stream.raw)
                },
                // SAFETY: device memory as said above, unused by any work.
                FreeStep::Now => unsafe { result::memory::free(hip, pointer) },
                FreeStep::AfterSynchronizing { after, pinned } => {
                    if let Some(stream) = after {
                        // SAFETY: a live stream of the device (held), which is current.
                        unsafe { result::stream::synchronize(hip, stream.raw) }?;
                    }
                    if pinned {
                        // SAFETY: pinned host memory as said above, unused now that `after`'s
                        // work has finished.
                        unsafe { result::memory::free_host(hip, pointer) }
                    } else {
                        // SAFETY: managed memory as said above, unused now that `after`'s work
                        // has finished.
                        unsafe { result::memory::free(hip, pointer) }
                    }
                }
            }
        })
    }

    /// `Backend::host_register`: registers `range` with HIP and writes each device's address
    /// for it.
    pub(super) fn register_host_range(
        &self,
        range: ByteRange,
        device_ptrs: &mut [usize],
    ) -> Result<()> {
        check_device_slots(self.devices.len(), device_ptrs)?;
        let flags = sys::hipHostRegisterPortable | sys::hipHostRegisterMapped;
        // Looked up, and device 0 made current, before registering: undoing the registration
        // on the error path below can then fail neither for a missing symbol nor for the switch.
        self.hip.hipHostUnregister()?;
        let _scope = self.enter(DeviceId(0))?;
        let host = range.start as *mut c_void;
        // SAFETY: the trait's contract: the caller's host range stays allocated until it is
        // unregistered.
        unsafe { result::memory::host_register(self.hip, host, range.len, flags) }?;
        if let Err(error) = self.device_addresses(range.start, device_ptrs) {
            // SAFETY: the range was registered just above and nothing has used it yet.
            let _ = unsafe { result::memory::host_unregister(self.hip, host) };
            return Err(error);
        }
        self.registrations.record(range);
        Ok(())
    }

    /// `Backend::host_unregister`: unregisters a range this backend registered.
    pub(super) fn unregister_host_range(&self, start: usize) -> Result<()> {
        self.registrations.release(start, || {
            let _scope = self.enter(DeviceId(0))?;
            // SAFETY: a range this backend registered (just taken out of its registrations);
            // the trait's contract: no work still to run uses it.
            unsafe { result::memory::host_unregister(self.hip, start as *mut c_void) }
        })
    }

    /// `Backend::host_pinned_extent`: the pinned host allocation holding `ptr`, as HIP knows it.
    pub(super) fn pinned_host_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        check_device_slots(self.devices.len(), device_ptrs)?;
        let range = {
            let _scope = self.enter(DeviceId(0))?;
            none_on_code(
                result::memory::range_of(self.hip, ptr),
                code(sys::hipErrorInvalidValue),
            )?
        };
        let Some(range) = range.filter(|range| range.memory_type == sys::hipMemoryTypeHost) else {
            return Ok(None);
        };
        let Some(extent) = ByteRange::new(range.start, range.size) else {
            return Ok(None);
        };
        self.device_addresses(extent.start, device_ptrs)?;
        Ok(Some(extent))
    }

    /// Writes each device's address for the pinned host address `host` into `device_ptrs`
    /// (hipHostGetDevicePointer with each device current).
    fn device_addresses(&self, host: usize, device_ptrs: &mut [usize]) -> Result<()> {
        for (index, slot) in device_ptrs.iter_mut().enumerate() {
            let _scope = self.enter(DeviceId(index as u32))?;
            *slot = result::memory::host_device_pointer(self.hip, host)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use core::ptr;

    use gpu_core::Error;

    use super::*;
    use crate::result::driver_error;

    #[test]
    fn out_of_memory_is_none_and_other_codes_are_hip_errors() {
        let failed = |call, code| Error::Driver(driver_error(call, code));
        let address = ptr::without_provenance_mut(0x1000);
        assert_eq!(allocation_outcome(Ok(address)), Ok(Some(0x1000)));
        assert_eq!(
            allocation_outcome(Err(failed("hipMalloc", sys::hipErrorOutOfMemory))),
            Ok(None)
        );
        assert_eq!(
            allocation_outcome(Err(failed("hipHostMalloc", sys::hipErrorInvalidValue))),
            Err(failed("hipHostMalloc", sys::hipErrorInvalidValue))
        );
    }
}
