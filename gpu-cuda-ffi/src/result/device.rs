//! The driver itself and its devices: initialisation, versions, counts, names, attributes,
//! peer capability and default memory pools. Every call here takes only values, so every
//! function is safe.

use core::ffi::{CStr, c_char, c_int, c_uint};
use core::ptr;

use gpu_core::Result;

use crate::driver::Driver;
use crate::result::check;
use crate::sys;

/// cuInit: initialises the driver API for the process (`flags` must be 0).
pub fn init(driver: &Driver, flags: c_uint) -> Result<()> {
    let init = driver.cuInit()?;
    // SAFETY: a value argument, which the driver checks.
    check("cuInit", unsafe { init(flags) })
}

/// cuDeviceGetCount: how many devices the driver reports.
pub fn count(driver: &Driver) -> Result<c_int> {
    let get = driver.cuDeviceGetCount()?;
    let mut count = 0;
    // SAFETY: `count` is valid for writes.
    check("cuDeviceGetCount", unsafe { get(&mut count) })?;
    Ok(count)
}

/// cuDeviceGet: the device of ordinal `ordinal`.
pub fn get(driver: &Driver, ordinal: c_int) -> Result<sys::CUdevice> {
    let get = driver.cuDeviceGet()?;
    let mut device = 0;
    // SAFETY: `device` is valid for writes; the driver checks the ordinal.
    check("cuDeviceGet", unsafe { get(&mut device, ordinal) })?;
    Ok(device)
}

/// cuDeviceGetName: the device's name (the driver truncates it to 255 bytes).
pub fn name(driver: &Driver, device: sys::CUdevice) -> Result<String> {
    let get = driver.cuDeviceGetName()?;
    let mut name = [0 as c_char; 256];
    // SAFETY: `name` is valid for writes of the length passed; the driver checks the device.
    check("cuDeviceGetName", unsafe {
        get(name.as_mut_ptr(), name.len() as c_int, device)
    })?;
    // The driver NUL-terminates what it writes; the last byte stays zero in any case.
    let bytes = name.map(|char| char as u8);
    Ok(CStr::from_bytes_until_nul(&bytes)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// cuDeviceTotalMem: the device's memory in bytes.
pub fn total_memory(driver: &Driver, device: sys::CUdevice) -> Result<usize> {
    let get = driver.cuDeviceTotalMem()?;
    let mut bytes = 0;
    // SAFETY: `bytes` is valid for writes; the driver checks the device.
    check("cuDeviceTotalMem", unsafe { get(&mut bytes, device) })?;
    Ok(bytes)
}

/// cuDeviceGetAttribute: the value of `attribute` for `device`.
pub fn attribute(
    driver: &Driver,
    attribute: sys::CUdevice_attribute,
    device: sys::CUdevice,
) -> Result<c_int> {
    let get = driver.cuDeviceGetAttribute()?;
    let mut value = 0;
    // SAFETY: `value` is valid for writes; the driver checks attribute and device.
    check("cuDeviceGetAttribute", unsafe {
        get(&mut value, attribute, device)
    })?;
    Ok(value)
}

/// cuDeviceCanAccessPeer: whether `device` can be given direct access to `peer`'s memory.
pub fn can_access_peer(
    driver: &Driver,
    device: sys::CUdevice,
    peer: sys::CUdevice,
) -> Result<bool> {
    let get = driver.cuDeviceCanAccessPeer()?;
    let mut possible = 0;
    // SAFETY: `possible` is valid for writes; the driver checks both devices.
    check("cuDeviceCanAccessPeer", unsafe {
        get(&mut possible, device, peer)
    })?;
    Ok(possible != 0)
}

/// cuDeviceGetDefaultMemPool: the device's default memory pool (the stream-ordered
/// allocator's, CUDA 11.2 and later).
pub fn default_memory_pool(driver: &Driver, device: sys::CUdevice) -> Result<sys::CUmemoryPool> {
    let get = driver.cuDeviceGetDefaultMemPool()?;
    let mut pool = ptr::null_mut();
    // SAFETY: `pool` is valid for writes; the driver checks the device.
    check("cuDeviceGetDefaultMemPool", unsafe {
        get(&mut pool, device)
    })?;
    Ok(pool)
}
