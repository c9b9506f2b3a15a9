//! Contexts: devices' primary contexts, the calling thread's current context and its stack,
//! synchronisation, and peer access between contexts.

use core::ffi::c_uint;
use core::ptr;

use gpu_core::Result;

use crate::driver::Driver;
use crate::result::check;
use crate::sys;

/// cuDevicePrimaryCtxRetain: `device`'s primary context (the one the CUDA runtime API and
/// libraries such as PyTorch use), created at the first retain; each retain needs a
/// [`release_primary`].
pub fn retain_primary(driver: &Driver, device: sys::CUdevice) -> Result<sys::CUcontext> {
    let retain = driver.cuDevicePrimaryCtxRetain()?;
    let mut context = ptr::null_mut();
    // SAFETY: `context` is valid for writes; the driver checks the device.
    check("cuDevicePrimaryCtxRetain", unsafe {
        retain(&mut context, device)
    })?;
    Ok(context)
}

/// cuDevicePrimaryCtxRelease: gives back one retain of `device`'s primary context; the last one
/// destroys the context and everything in it.
///
/// # Safety
/// The caller holds a retain of the context (from [`retain_primary`]) that it gives back here,
/// and uses none of the context's objects through it afterwards.
pub unsafe fn release_primary(driver: &Driver, device: sys::CUdevice) -> Result<()> {
    let release = driver.cuDevicePrimaryCtxRelease()?;
    // SAFETY: the caller gives back a retain it holds.
    check("cuDevicePrimaryCtxRelease", unsafe { release(device) })
}

/// cuDevicePrimaryCtxReset: destroys every object of `device`'s primary context (streams,
/// events, memory, modules) and the context itself, whoever retained it.
///
/// # Safety
/// Nothing in the process uses an object of that context afterwards, nor the context itself
/// before it is retained again.
pub unsafe fn reset_primary(driver: &Driver, device: sys::CUdevice) -> Result<()> {
    let reset = driver.cuDevicePrimaryCtxReset()?;
    // SAFETY: the caller's promise that nothing uses the context's objects afterwards.
    check("cuDevicePrimaryCtxReset", unsafe { reset(device) })
}

/// cuCtxGetCurrent: the context on top of the calling thread's context stack (null when none).
pub fn current(driver: &Driver) -> Result<sys::CUcontext> {
    let get = driver.cuCtxGetCurrent()?;
    let mut context = ptr::null_mut();
    // SAFETY: `context` is valid for writes.
    check("cuCtxGetCurrent", unsafe { get(&mut context) })?;
    Ok(context)
}

/// cuCtxSetCurrent: replaces the top of the calling thread's context stack with `context`
/// (null: pops it).
///
/// # Safety
/// `context` is null or a context that exists (not destroyed).
pub unsafe fn set_current(driver: &Driver, context: sys::CUcontext) -> Result<()> {
    let set = driver.cuCtxSetCurrent()?;
    // SAFETY: the caller's promise that the context exists.
    check("cuCtxSetCurrent", unsafe { set(context) })
}

/// cuCtxPushCurrent: pushes `context` on the calling thread's context stack.
///
/// # Safety
/// `context` is a context that exists, and stays so while it is on the stack.
pub unsafe fn push_current(driver: &Driver, context: sys::CUcontext) -> Result<()> {
    let push = driver.cuCtxPushCurrent()?;
    // SAFETY: the caller's promise that the context exists.
    check("cuCtxPushCurrent", unsafe { push(context) })
}

/// cuCtxPopCurrent: pops the calling thread's current context and returns it.
pub fn pop_current(driver: &Driver) -> Result<sys::CUcontext> {
    let pop = driver.cuCtxPopCurrent()?;
    let mut popped = ptr::null_mut();
    // SAFETY: `popped` is valid for writes.
    check("cuCtxPopCurrent", unsafe { pop(&mut popped) })?;
    Ok(popped)
}

/// cuCtxSynchronize: blocks until all work of the current context has finished.
pub fn synchronize(driver: &Driver) -> Result<()> {
    let synchronize = driver.cuCtxSynchronize()?;
    // SAFETY: no arguments; the driver checks that a context is current.
    check("cuCtxSynchronize", unsafe { synchronize() })
}

/// cuCtxEnablePeerAccess: gives the current context direct access to `peer`'s memory
/// (`flags` must be 0). Already enabled is `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
///
/// # Safety
/// `peer` is a context that exists.
pub unsafe fn enable_peer_access(
    driver: &Driver,
    peer: sys::CUcontext,
    flags: c_uint,
) -> Result<()> {
    let enable = driver.cuCtxEnablePeerAccess()?;
    // SAFETY: the caller's promise that the peer context exists.
    check("cuCtxEnablePeerAccess", unsafe { enable(peer, flags) })
}

/// cuCtxDisablePeerAccess: takes back the current context's access to `peer`'s memory.
///
/// # Safety
/// `peer` is a context that exists, and no work of the current context that reaches its
/// memory directly is still to run.
pub unsafe fn disable_peer_access(driver: &Driver, peer: sys::CUcontext) -> Result<()> {
    let disable = driver.cuCtxDisablePeerAccess()?;
    // SAFETY: the caller's promise for the peer context and the work.
    check("cuCtxDisablePeerAccess", unsafe { disable(peer) })
}
