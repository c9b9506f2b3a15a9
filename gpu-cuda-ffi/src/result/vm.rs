//! Virtual memory management: address ranges reserved and freed, physical memory created,
//! mapped, given access to and released (the allocator's growable segments).

use gpu_core::Result;

use crate::driver::Driver;
use crate::result::check;
use crate::sys;

/// The properties of pinned device memory on device `ordinal`, as cuMemCreate and
/// cuMemGetAllocationGranularity take them (no shareable handle, no compression).
pub fn device_memory(ordinal: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CU_MEM_HANDLE_TYPE_NONE,
        location: location(ordinal),
        ..Default::default()
    }
}

/// Device `ordinal` as a memory location.
fn location(ordinal: sys::CUdevice) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal,
    }
}

/// cuMemGetAllocationGranularity (minimum): the size and alignment physical memory of `prop`
/// is created and mapped in.
pub fn granularity(driver: &Driver, prop: &sys::CUmemAllocationProp) -> Result<usize> {
    let get = driver.cuMemGetAllocationGranularity()?;
    let mut granularity = 0;
    // SAFETY: `granularity` is valid for writes and `prop` for reads; the driver checks both.
    check("cuMemGetAllocationGranularity", unsafe {
        get(
            &mut granularity,
            prop,
            sys::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    })?;
    Ok(granularity)
}

/// cuMemAddressReserve: `size` bytes of address space aligned to `alignment`, anywhere (out of
/// address space is `CUDA_ERROR_OUT_OF_MEMORY`).
pub fn reserve(driver: &Driver, size: usize, alignment: usize) -> Result<sys::CUdeviceptr> {
    let reserve = driver.cuMemAddressReserve()?;
    let mut address = 0;
    // SAFETY: `address` is valid for writes; a reservation touches no memory.
    check("cuMemAddressReserve", unsafe {
        reserve(&mut address, size, alignment, 0, 0)
    })?;
    Ok(address)
}

/// cuMemAddressFree: gives back a range from [`reserve`].
///
/// # Safety
/// `[address, address + size)` is a whole range from cuMemAddressReserve, nothing of it mapped.
pub unsafe fn free_range(driver: &Driver, address: sys::CUdeviceptr, size: usize) -> Result<()> {
    let free = driver.cuMemAddressFree()?;
    // SAFETY: the caller's promise.
    check("cuMemAddressFree", unsafe { free(address, size) })
}

/// cuMemCreate: `size` bytes of physical memory of `prop` (out of memory is
/// `CUDA_ERROR_OUT_OF_MEMORY`).
pub fn create(
    driver: &Driver,
    size: usize,
    prop: &sys::CUmemAllocationProp,
) -> Result<sys::CUmemGenericAllocationHandle> {
    let create = driver.cuMemCreate()?;
    let mut handle = 0;
    // SAFETY: `handle` is valid for writes and `prop` for reads; the driver checks the size.
    check("cuMemCreate", unsafe { create(&mut handle, size, prop, 0) })?;
    Ok(handle)
}

/// cuMemRelease: gives back physical memory from [`create`] (freed once no mapping is left).
///
/// # Safety
/// `handle` is from cuMemCreate and not released yet.
pub unsafe fn release(driver: &Driver, handle: sys::CUmemGenericAllocationHandle) -> Result<()> {
    let release = driver.cuMemRelease()?;
    // SAFETY: the caller's promise.
    check("cuMemRelease", unsafe { release(handle) })
}

/// cuMemMap: maps all `size` bytes of `handle` at `address`.
///
/// # Safety
/// `[address, address + size)` lies in a reserved range and is not mapped; `handle` is live.
pub unsafe fn map(
    driver: &Driver,
    address: sys::CUdeviceptr,
    size: usize,
    handle: sys::CUmemGenericAllocationHandle,
) -> Result<()> {
    let map = driver.cuMemMap()?;
    // SAFETY: the caller's promise.
    check("cuMemMap", unsafe { map(address, size, 0, handle, 0) })
}

/// cuMemUnmap: unmaps `[address, address + size)`.
///
/// # Safety
/// The range is whole mappings, and no work that uses it is pending.
pub unsafe fn unmap(driver: &Driver, address: sys::CUdeviceptr, size: usize) -> Result<()> {
    let unmap = driver.cuMemUnmap()?;
    // SAFETY: the caller's promise.
    check("cuMemUnmap", unsafe { unmap(address, size) })
}

/// cuMemSetAccess: lets device `ordinal` read and write the mapped `[address, address + size)`.
///
/// # Safety
/// The range is mapped throughout.
pub unsafe fn set_access(
    driver: &Driver,
    address: sys::CUdeviceptr,
    size: usize,
    ordinal: sys::CUdevice,
) -> Result<()> {
    let set = driver.cuMemSetAccess()?;
    let access = sys::CUmemAccessDesc {
        location: location(ordinal),
        flags: sys::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: `access` is readable; the caller's promise for the range.
    check("cuMemSetAccess", unsafe { set(address, size, &access, 1) })
}
