//! Virtual memory management on HIP (the allocator's growable segments): ranges reserved with
//! hipMemAddressReserve, device memory mapped into them piece by piece.
//!
//! The bookkeeping is gpu-core's `LiveMappings`, shared with CUDA: one hipMemCreate allocation
//! per granularity piece, mapped with hipMemMap and opened to the device with hipMemSetAccess,
//! its `hipMemGenericAllocationHandle_t` kept under its address until hipMemUnmap and
//! hipMemRelease. A device has virtual memory here where hipMemGetAllocationGranularity answers
//! for its device memory at open (HIP 5.2.3 has no device attribute for it; the NVIDIA shim
//! answers `hipErrorNotSupported` where CUDA's attribute says no). Calls run with the device
//! current; a reset or the backend's drop gives back whatever is still mapped or reserved.

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::check_same_device;
use gpu_core::backend::live::{LiveMappings, VmCalls, vm_granularity_of};
use gpu_core::{DeviceId, Result};

use super::current::DeviceScope;
use super::{HipBackend, HipStream, code};
use crate::library::Hip;
use crate::result;
use crate::sys;

/// The physical handles of the backend's mapped pieces.
pub(super) type Mappings = LiveMappings<HandleOf>;

/// A physical allocation's handle, as the bookkeeping keeps it (an opaque pointer HIP hands
/// out, moved between threads only as a value).
#[derive(Clone, Copy, Debug)]
pub(super) struct HandleOf(sys::hipMemGenericAllocationHandle_t);

// SAFETY: an opaque HIP handle, never dereferenced here; HIP's calls take it from any thread.
unsafe impl Send for HandleOf {}
// SAFETY: see above.
unsafe impl Sync for HandleOf {}

/// HIP's calls for one device's pieces (the device current).
struct OnDevice<'h> {
    hip: &'h Hip,
    prop: sys::hipMemAllocationProp,
}

impl<'h> VmCalls for OnDevice<'h> {
    type Handle = HandleOf;
    type Current = DeviceScope<'h>;
    const OUT_OF_MEMORY: i64 = code(sys::hipErrorOutOfMemory);

    fn make_current(&self) -> Result<DeviceScope<'h>> {
        DeviceScope::enter(self.hip, self.prop.location.id)
    }

    fn reserve(&self, size: usize, alignment: usize) -> Result<usize> {
        result::vm::reserve(self.hip, size, alignment).map(|start| start as usize)
    }

    fn create(&self, size: usize) -> Result<HandleOf> {
        result::vm::create(self.hip, size, &self.prop).map(HandleOf)
    }

    fn map(&self, address: usize, size: usize, handle: HandleOf) -> Result<()> {
        // SAFETY: an unmapped piece of a range reserved here, and a handle just created.
        unsafe { result::vm::map(self.hip, address, size, handle.0) }
    }

    fn grant(&self, address: usize, size: usize) -> Result<()> {
        // SAFETY: mapped just now, throughout.
        unsafe { result::vm::set_access(self.hip, address, size, self.prop.location.id) }
    }

    fn unmap(&self, address: usize, size: usize) -> Result<()> {
        // SAFETY: a whole piece mapped here, its work done (the stream synchronised before).
        unsafe { result::vm::unmap(self.hip, address, size) }
    }

    fn release(&self, handle: HandleOf) -> Result<()> {
        // SAFETY: a handle of hipMemCreate, given back once.
        unsafe { result::vm::release(self.hip, handle.0) }
    }

    fn free_range(&self, address: usize, size: usize) -> Result<()> {
        // SAFETY: a whole range reserved here, nothing of it mapped any more.
        unsafe { result::vm::free_range(self.hip, address, size) }
    }
}

impl HipBackend {
    /// The calls for `device`'s pieces and its granularity for `kind`.
    fn on_device(&self, device: DeviceId, kind: MemoryKind) -> Result<(OnDevice<'_>, usize)> {
        let state = self.device(device)?;
        let granularity = vm_granularity_of(device, kind, state.vm_granularity)?;
        let prop = result::vm::device_memory(state.ordinal);
        Ok((
            OnDevice {
                hip: self.hip,
                prop,
            },
            granularity,
        ))
    }

    /// `Backend::vm_granularity`.
    pub(super) fn granularity(&self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        let state = self.devices.get(device.index())?;
        vm_granularity_of(device, kind, state.vm_granularity).ok()
    }

    /// `Backend::vm_reserve`: hipMemAddressReserve of `wanted` bytes, else of `needed`.
    pub(super) fn reserve(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        sizes: (usize, usize),
    ) -> Result<Option<(usize, usize)>> {
        let (calls, granularity) = self.on_device(device, kind)?;
        self.mappings
            .reserve((device, kind), granularity, sizes, &calls)
    }

    /// `Backend::vm_map`: hipMemCreate and hipMemMap per piece, then hipMemSetAccess.
    pub(super) fn map(&self, on: (DeviceId, MemoryKind), range: (usize, usize)) -> Result<bool> {
        let (calls, granularity) = self.on_device(on.0, on.1)?;
        self.mappings.map(on, range, granularity, &calls)
    }

    /// `Backend::vm_set_access`: hipMemSetAccess of the mapped range for `peer`.
    pub(super) fn grant(
        &self,
        device: DeviceId,
        range: (usize, usize),
        peer: DeviceId,
    ) -> Result<()> {
        self.device(device)?;
        let peer = self.device(peer)?.ordinal;
        self.mappings.set_access(device, range, || {
            let _scope = self.enter(device)?;
            // SAFETY: `LiveMappings` checked that the range is mapped throughout.
            unsafe { result::vm::set_access(self.hip, range.0, range.1, peer) }
        })
    }

    /// `Backend::vm_unmap`: hipStreamSynchronize of `after`, then hipMemUnmap and
    /// hipMemRelease per piece.
    pub(super) fn unmap(
        &self,
        on: (DeviceId, MemoryKind),
        range: (usize, usize),
        after: Option<HipStream>,
    ) -> Result<()> {
        let (calls, _) = self.on_device(on.0, on.1)?;
        let after = after
            .map(|stream| self.streams.get(stream.key))
            .transpose()?;
        if let Some(stream) = after {
            check_same_device(on.0, stream.device)?;
            let _scope = self.enter(on.0)?;
            // SAFETY: a live stream of the device (held), which is current.
            unsafe { result::stream::synchronize(self.hip, stream.raw) }?;
        }
        self.mappings.unmap(on, range, &calls)
    }

    /// `Backend::vm_release`: hipMemAddressFree of a whole reserved range.
    pub(super) fn release(&self, on: (DeviceId, MemoryKind), range: (usize, usize)) -> Result<()> {
        let (calls, _) = self.on_device(on.0, on.1)?;
        self.mappings.release(on, range, &calls)
    }

    /// Gives back everything of `device` still mapped or reserved (the device current).
    pub(super) fn clear_mappings(&self, device: DeviceId) {
        if let Ok((calls, _)) = self.on_device(device, MemoryKind::Device) {
            self.mappings.clear(device, &calls);
        }
    }
}
