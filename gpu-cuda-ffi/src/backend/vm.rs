//! Virtual memory management on the driver API (the allocator's growable segments): ranges
//! reserved with cuMemAddressReserve, device memory mapped into them piece by piece.
//!
//! Each piece of a granularity is its own cuMemCreate allocation, mapped with cuMemMap and
//! opened to the device with cuMemSetAccess; its `CUmemGenericAllocationHandle` is kept in the
//! backend's [`LiveMappings`] under its address until cuMemUnmap and cuMemRelease give it back,
//! so that the allocator can unmap the tail of what it mapped in one call (the driver unmaps
//! only whole mappings). Only device memory has virtual memory here, on devices that report
//! `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` with a driver that has the entry
//! points. Every call runs in the device's primary context, like the rest of the backend; a
//! reset or the backend's drop gives back whatever is still mapped or reserved.

use super::*;
use gpu_core::backend::live::{LiveMappings, VmCalls, vm_granularity_of};

/// The physical handles of the backend's mapped pieces.
pub(super) type Mappings = LiveMappings<sys::CUmemGenericAllocationHandle>;

/// The driver's calls for one device's mappings (its context current).
pub(super) struct DeviceVm {
    driver: &'static Driver,
    context: sys::CUcontext,
    prop: sys::CUmemAllocationProp,
}

impl DeviceVm {
    /// The calls for the device `state`.
    pub(super) fn new(driver: &'static Driver, state: &DeviceState) -> Self {
        Self {
            driver,
            context: state.context(),
            prop: result::vm::device_memory(state.ordinal),
        }
    }
}

impl VmCalls for DeviceVm {
    type Handle = sys::CUmemGenericAllocationHandle;
    type Current = ContextScope<'static>;
    const OUT_OF_MEMORY: i64 = code(sys::CUDA_ERROR_OUT_OF_MEMORY);

    fn make_current(&self) -> Result<ContextScope<'static>> {
        ContextScope::enter(self.driver, self.context)
    }

    fn reserve(&self, size: usize, alignment: usize) -> Result<usize> {
        result::vm::reserve(self.driver, size, alignment).map(|start| start as usize)
    }

    fn create(&self, size: usize) -> Result<Self::Handle> {
        result::vm::create(self.driver, size, &self.prop)
    }

    fn map(&self, address: usize, size: usize, handle: Self::Handle) -> Result<()> {
        // SAFETY: `LiveMappings` maps only unmapped pieces of ranges this backend reserved on
        // the device, with a handle just created.
        unsafe { result::vm::map(self.driver, address as sys::CUdeviceptr, size, handle) }
    }

    fn grant(&self, address: usize, size: usize) -> Result<()> {
        let ordinal = self.prop.location.id;
        // SAFETY: the range was mapped just now, throughout.
        unsafe { result::vm::set_access(self.driver, address as sys::CUdeviceptr, size, ordinal) }
    }

    fn unmap(&self, address: usize, size: usize) -> Result<()> {
        // SAFETY: a whole piece this backend mapped; its work is done (the trait's contract,
        // the stream synchronised before).
        unsafe { result::vm::unmap(self.driver, address as sys::CUdeviceptr, size) }
    }

    fn release(&self, handle: Self::Handle) -> Result<()> {
        // SAFETY: a handle of cuMemCreate that `LiveMappings` gives back once.
        unsafe { result::vm::release(self.driver, handle) }
    }

    fn free_range(&self, address: usize, size: usize) -> Result<()> {
        // SAFETY: a whole range this backend reserved, nothing of it mapped any more.
        unsafe { result::vm::free_range(self.driver, address as sys::CUdeviceptr, size) }
    }
}

/// The granularity of device memory on device `ordinal` (its context current), where the device
/// and the driver have virtual memory management; `None` otherwise, or where asking fails (the
/// allocator then uses ordinary segments).
pub(super) fn device_granularity(driver: &Driver, ordinal: sys::CUdevice) -> Option<usize> {
    let supported = result::device::attribute(
        driver,
        sys::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        ordinal,
    );
    let entry_points = [
        driver.cuMemAddressReserve().is_ok(),
        driver.cuMemAddressFree().is_ok(),
        driver.cuMemCreate().is_ok(),
        driver.cuMemRelease().is_ok(),
        driver.cuMemMap().is_ok(),
        driver.cuMemUnmap().is_ok(),
        driver.cuMemSetAccess().is_ok(),
    ];
    if supported.ok()? == 0 || entry_points.contains(&false) {
        return None;
    }
    result::vm::granularity(driver, &result::vm::device_memory(ordinal))
        .ok()
        .filter(|granularity| granularity.is_power_of_two())
}

impl CudaBackend {
    /// The device's granularity, where `kind` is device memory and the device has virtual
    /// memory management.
    pub(super) fn granularity(&self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        let state = self.devices.get(device.index())?;
        vm_granularity_of(device, kind, state.vm_granularity).ok()
    }

    /// The device and its granularity for a `vm_*` call: [`Error::UnknownDevice`] for a device
    /// the backend lacks, [`Error::KindUnsupported`] where `kind` has no virtual memory there.
    fn vm_device(&self, device: DeviceId, kind: MemoryKind) -> Result<(&DeviceState, usize)> {
        let state = self.device(device)?;
        Ok((
            state,
            vm_granularity_of(device, kind, state.vm_granularity)?,
        ))
    }

    /// `Backend::vm_reserve`: cuMemAddressReserve of `wanted` bytes, else of `needed`, aligned
    /// to the granularity; `None` where the driver has no address space for `needed`.
    pub(super) fn reserve_range(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        wanted: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        let (state, granularity) = self.vm_device(device, kind)?;
        let calls = DeviceVm::new(self.driver, state);
        self.mappings
            .reserve((device, kind), granularity, (wanted, needed), &calls)
    }

    /// `Backend::vm_map`: one cuMemCreate, cuMemMap per piece, then cuMemSetAccess for the
    /// device; `false` (nothing left mapped) when the device is out of memory.
    pub(super) fn map_range(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        address: usize,
        size: usize,
    ) -> Result<bool> {
        let (state, granularity) = self.vm_device(device, kind)?;
        let calls = DeviceVm::new(self.driver, state);
        self.mappings
            .map((device, kind), (address, size), granularity, &calls)
    }

    /// `Backend::vm_set_access`: cuMemSetAccess of the mapped range for `peer`.
    pub(super) fn grant_peer(
        &self,
        device: DeviceId,
        (address, size): (usize, usize),
        peer: DeviceId,
    ) -> Result<()> {
        self.device(device)?;
        let peer_ordinal = self.device(peer)?.ordinal;
        self.mappings.set_access(device, (address, size), || {
            let _scope = self.enter(device)?;
            // SAFETY: `LiveMappings` checked that the range is mapped throughout.
            unsafe {
                result::vm::set_access(self.driver, address as sys::CUdeviceptr, size, peer_ordinal)
            }
        })
    }

    /// `Backend::vm_unmap`: synchronises `after` (a stream of the device), then cuMemUnmap and
    /// cuMemRelease for each piece of the range.
    pub(super) fn unmap_range(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        (address, size): (usize, usize),
        after: Option<CudaStream>,
    ) -> Result<()> {
        let (state, _) = self.vm_device(device, kind)?;
        let after = after
            .map(|stream| self.streams.get(stream.key))
            .transpose()?;
        if let Some(stream) = &after {
            check_same_device(device, stream.device)?;
        }
        if let Some(stream) = after {
            let _scope = self.enter(device)?;
            // SAFETY: a live stream of the device (held), whose context is current.
            unsafe { result::stream::synchronize(self.driver, stream.raw) }?;
        }
        let calls = DeviceVm::new(self.driver, state);
        self.mappings.unmap((device, kind), (address, size), &calls)
    }

    /// `Backend::vm_release`: cuMemAddressFree of a whole reserved range, nothing of it mapped.
    pub(super) fn release_range(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        address: usize,
        size: usize,
    ) -> Result<()> {
        let (state, _) = self.vm_device(device, kind)?;
        let calls = DeviceVm::new(self.driver, state);
        self.mappings
            .release((device, kind), (address, size), &calls)
    }

    /// Gives back everything of `state`'s device still mapped or reserved (its context
    /// current): before a reset, and when the backend drops.
    pub(super) fn clear_mappings(&self, device: DeviceId, state: &DeviceState) {
        let calls = DeviceVm::new(self.driver, state);
        self.mappings.clear(device, &calls);
    }
}
