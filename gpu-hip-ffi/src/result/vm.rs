//! Virtual memory management: address ranges reserved and freed, physical memory created,
//! mapped, given access to and released (the allocator's growable segments).

use core::ffi::{c_int, c_void};
use core::ptr;

use gpu_core::Result;

use crate::library::Hip;
use crate::result::check;
use crate::sys;

/// The properties of pinned device memory on device `ordinal`, as hipMemCreate and
/// hipMemGetAllocationGranularity take them (no shareable handle).
pub fn device_memory(ordinal: c_int) -> sys::hipMemAllocationProp {
    sys::hipMemAllocationProp {
        type_: sys::hipMemAllocationTypePinned,
        requestedHandleType: sys::hipMemHandleTypeNone,
        location: sys::hipMemLocation {
            type_: sys::hipMemLocationTypeDevice,
            id: ordinal,
        },
        ..Default::default()
    }
}

/// hipMemGetAllocationGranularity (minimum) of memory of `prop` (`hipErrorNotSupported` where
/// the device has no virtual memory management).
pub fn granularity(hip: &Hip, prop: &sys::hipMemAllocationProp) -> Result<usize> {
    let get = hip.hipMemGetAllocationGranularity()?;
    let mut granularity = 0;
    // SAFETY: `granularity` is valid for writes and `prop` for reads.
    check("hipMemGetAllocationGranularity", unsafe {
        get(
            &mut granularity,
            prop,
            sys::hipMemAllocationGranularityMinimum,
        )
    })?;
    Ok(granularity)
}

/// hipMemAddressReserve: `size` bytes of address space aligned to `alignment`, anywhere.
pub fn reserve(hip: &Hip, size: usize, alignment: usize) -> Result<*mut c_void> {
    let reserve = hip.hipMemAddressReserve()?;
    let mut address = ptr::null_mut();
    // SAFETY: `address` is valid for writes; a reservation touches no memory.
    check("hipMemAddressReserve", unsafe {
        reserve(&mut address, size, alignment, ptr::null_mut(), 0)
    })?;
    Ok(address)
}

/// hipMemAddressFree: gives back a range from [`reserve`].
///
/// # Safety
/// `[address, address + size)` is a whole reserved range, nothing of it mapped.
pub unsafe fn free_range(hip: &Hip, address: usize, size: usize) -> Result<()> {
    let free = hip.hipMemAddressFree()?;
    // SAFETY: the caller's promise.
    check("hipMemAddressFree", unsafe {
        free(address as *mut c_void, size)
    })
}

/// hipMemCreate: `size` bytes of physical memory of `prop` (out of memory is
/// `hipErrorOutOfMemory`).
pub fn create(
    hip: &Hip,
    size: usize,
    prop: &sys::hipMemAllocationProp,
) -> Result<sys::hipMemGenericAllocationHandle_t> {
    let create = hip.hipMemCreate()?;
    let mut handle = ptr::null_mut();
    // SAFETY: `handle` is valid for writes and `prop` for reads.
    check("hipMemCreate", unsafe {
        create(&mut handle, size, prop, 0)
    })?;
    Ok(handle)
}

/// hipMemRelease: gives back physical memory from [`create`].
///
/// # Safety
/// `handle` is from hipMemCreate and not released yet.
pub unsafe fn release(hip: &Hip, handle: sys::hipMemGenericAllocationHandle_t) -> Result<()> {
    let release = hip.hipMemRelease()?;
    // SAFETY: the caller's promise.
    check("hipMemRelease", unsafe { release(handle) })
}

/// hipMemMap: maps all `size` bytes of `handle` at `address`.
///
/// # Safety
/// The range lies in a reserved range and is not mapped; `handle` is live.
pub unsafe fn map(
    hip: &Hip,
    address: usize,
    size: usize,
    handle: sys::hipMemGenericAllocationHandle_t,
) -> Result<()> {
    let map = hip.hipMemMap()?;
    // SAFETY: the caller's promise.
    check("hipMemMap", unsafe {
        map(address as *mut c_void, size, 0, handle, 0)
    })
}

/// hipMemUnmap: unmaps `[address, address + size)`.
///
/// # Safety
/// The range is whole mappings, and no work that uses it is pending.
pub unsafe fn unmap(hip: &Hip, address: usize, size: usize) -> Result<()> {
    let unmap = hip.hipMemUnmap()?;
    // SAFETY: the caller's promise.
    check("hipMemUnmap", unsafe {
        unmap(address as *mut c_void, size)
    })
}

/// hipMemSetAccess: lets device `ordinal` read and write the mapped `[address, address + size)`.
///
/// # Safety
/// The range is mapped throughout.
pub unsafe fn set_access(hip: &Hip, address: usize, size: usize, ordinal: c_int) -> Result<()> {
    let set = hip.hipMemSetAccess()?;
    let access = sys::hipMemAccessDesc {
        location: sys::hipMemLocation {
            type_: sys::hipMemLocationTypeDevice,
            id: ordinal,
        },
        flags: sys::hipMemAccessFlagsProtReadWrite,
    };
    // SAFETY: `access` is readable; the caller's promise for the range.
    check("hipMemSetAccess", unsafe {
        set(address as *mut c_void, size, &access, 1)
    })
}
