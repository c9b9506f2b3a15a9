//! The runtime and its devices: initialisation, versions, counts, names, attributes, the
//! calling thread's device, synchronisation and reset, peer access, and default memory pools.

use core::ffi::{CStr, c_char, c_int, c_uint};
use core::ptr;

use gpu_core::Result;

use crate::library::Hip;
use crate::result::check;
use crate::sys;

/// hipInit: initialises HIP (`flags` must be 0).
pub fn init(hip: &Hip, flags: c_uint) -> Result<()> {
    let init = hip.hipInit()?;
    // SAFETY: a value argument, which HIP checks.
    check("hipInit", unsafe { init(flags) })
}

/// hipRuntimeGetVersion: the HIP runtime's version.
pub fn runtime_version(hip: &Hip) -> Result<c_int> {
    let get = hip.hipRuntimeGetVersion()?;
    let mut version = 0;
    // SAFETY: `version` is valid for writes.
    check("hipRuntimeGetVersion", unsafe { get(&mut version) })?;
    Ok(version)
}

/// hipGetDeviceCount: how many devices HIP reports (needs no hipInit; `hipErrorNoDevice` on a
/// machine without one).
pub fn count(hip: &Hip) -> Result<c_int> {
    let get = hip.hipGetDeviceCount()?;
    let mut count = 0;
    // SAFETY: `count` is valid for writes.
    check("hipGetDeviceCount", unsafe { get(&mut count) })?;
    Ok(count)
}

/// hipDeviceGet: the device of ordinal `ordinal`.
pub fn get(hip: &Hip, ordinal: c_int) -> Result<sys::hipDevice_t> {
    let get = hip.hipDeviceGet()?;
    let mut device = 0;
    // SAFETY: `device` is valid for writes; HIP checks the ordinal.
    check("hipDeviceGet", unsafe { get(&mut device, ordinal) })?;
    Ok(device)
}

/// hipDeviceGetName: the device's name (HIP truncates it to 255 bytes).
pub fn name(hip: &Hip, device: sys::hipDevice_t) -> Result<String> {
    let get = hip.hipDeviceGetName()?;
    let mut name = [0 as c_char; 256];
    // SAFETY: `name` is valid for writes of the length passed; HIP checks the device.
    check("hipDeviceGetName", unsafe {
        get(name.as_mut_ptr(), name.len() as c_int, device)
    })?;
    // HIP NUL-terminates what it writes; the last byte stays zero in any case.
    let bytes = name.map(|char| char as u8);
    Ok(CStr::from_bytes_until_nul(&bytes)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// hipDeviceTotalMem: the device's memory in bytes.
pub fn total_memory(hip: &Hip, device: sys::hipDevice_t) -> Result<usize> {
    let get = hip.hipDeviceTotalMem()?;
    let mut bytes = 0;
    // SAFETY: `bytes` is valid for writes; HIP checks the device.
    check("hipDeviceTotalMem", unsafe { get(&mut bytes, device) })?;
    Ok(bytes)
}

/// hipDeviceGetAttribute: the value of `attribute` for device `ordinal`.
pub fn attribute(hip: &Hip, attribute: sys::hipDeviceAttribute_t, ordinal: c_int) -> Result<c_int> {
    let get = hip.hipDeviceGetAttribute()?;
    let mut value = 0;
    // SAFETY: `value` is valid for writes; HIP checks attribute and device.
    check("hipDeviceGetAttribute", unsafe {
        get(&mut value, attribute, ordinal)
    })?;
    Ok(value)
}

/// hipGetDevice: the calling thread's device.
pub fn current(hip: &Hip) -> Result<c_int> {
    let get = hip.hipGetDevice()?;
    let mut ordinal = 0;
    // SAFETY: `ordinal` is valid for writes.
    check("hipGetDevice", unsafe { get(&mut ordinal) })?;
    Ok(ordinal)
}

/// hipSetDevice: makes device `ordinal` the calling thread's device.
pub fn set_current(hip: &Hip, ordinal: c_int) -> Result<()> {
    let set = hip.hipSetDevice()?;
    // SAFETY: a value argument, which HIP checks.
    check("hipSetDevice", unsafe { set(ordinal) })
}

/// hipDeviceSynchronize: blocks until all work of the current device has finished.
pub fn synchronize(hip: &Hip) -> Result<()> {
    let synchronize = hip.hipDeviceSynchronize()?;
    // SAFETY: no arguments.
    check("hipDeviceSynchronize", unsafe { synchronize() })
}

/// hipDeviceReset: destroys every object of the current device (streams, events, memory,
/// modules) in the process.
///
/// # Safety
/// Nothing in the process uses an object of the device afterwards.
pub unsafe fn reset(hip: &Hip) -> Result<()> {
    let reset = hip.hipDeviceReset()?;
    // SAFETY: the caller's promise that nothing uses the device's objects afterwards.
    check("hipDeviceReset", unsafe { reset() })
}

/// hipDeviceCanAccessPeer: whether device `ordinal` can be given direct access to `peer`'s
/// memory.
pub fn can_access_peer(hip: &Hip, ordinal: c_int, peer: c_int) -> Result<bool> {
    let get = hip.hipDeviceCanAccessPeer()?;
    let mut possible = 0;
    // SAFETY: `possible` is valid for writes; HIP checks both devices.
    check("hipDeviceCanAccessPeer", unsafe {
        get(&mut possible, ordinal, peer)
    })?;
    Ok(possible != 0)
}

/// hipDeviceEnablePeerAccess: gives the current device direct access to device `peer`'s memory
/// (`flags` must be 0). Already enabled is `hipErrorPeerAccessAlreadyEnabled`.
pub fn enable_peer_access(hip: &Hip, peer: c_int, flags: c_uint) -> Result<()> {
    let enable = hip.hipDeviceEnablePeerAccess()?;
    // SAFETY: value arguments, which HIP checks.
    check("hipDeviceEnablePeerAccess", unsafe { enable(peer, flags) })
}

/// hipDeviceDisablePeerAccess: takes back the current device's access to `peer`'s memory.
///
/// # Safety
/// No work of the current device that reaches `peer`'s memory directly is still to run.
pub unsafe fn disable_peer_access(hip: &Hip, peer: c_int) -> Result<()> {
    let disable = hip.hipDeviceDisablePeerAccess()?;
    // SAFETY: the caller's promise that no pending work relies on the access.
    check("hipDeviceDisablePeerAccess", unsafe { disable(peer) })
}

/// hipDeviceGetDefaultMemPool: device `ordinal`'s default memory pool.
pub fn default_memory_pool(hip: &Hip, ordinal: c_int) -> Result<sys::hipMemPool_t> {
    let get = hip.hipDeviceGetDefaultMemPool()?;
    let mut pool = ptr::null_mut();
    // SAFETY: `pool` is valid for writes; HIP checks the device.
    check("hipDeviceGetDefaultMemPool", unsafe {
        get(&mut pool, ordinal)
    })?;
    Ok(pool)
}
