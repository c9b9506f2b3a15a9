//! Events: completion markers recorded on streams.

use core::ffi::c_uint;
use core::ptr;

use gpu_core::Result;

use crate::driver::Driver;
use crate::result::{check, driver_error};
use crate::sys;

/// cuEventCreate: an event of the current context (`flags`: `CU_EVENT_DISABLE_TIMING` for one
/// without timing).
pub fn create(driver: &Driver, flags: c_uint) -> Result<sys::CUevent> {
    let create = driver.cuEventCreate()?;
    let mut event = ptr::null_mut();
    // SAFETY: `event` is valid for writes; the driver checks the flags and the context.
    check("cuEventCreate", unsafe { create(&mut event, flags) })?;
    Ok(event)
}

/// cuEventDestroy: destroys `event`; waits already enqueued on it stay valid.
///
/// # Safety
/// `event` is a live event that no other thread uses meanwhile and nothing uses afterwards.
pub unsafe fn destroy(driver: &Driver, event: sys::CUevent) -> Result<()> {
    let destroy = driver.cuEventDestroy()?;
    // SAFETY: the caller's promise that the event is live and not used again.
    check("cuEventDestroy", unsafe { destroy(event) })
}

/// cuEventRecord: records `event` on `stream`, of the same context.
///
/// # Safety
/// `event` is a live event and `stream` a live stream (or a default-stream handle) of the
/// current context.
pub unsafe fn record(driver: &Driver, event: sys::CUevent, stream: sys::CUstream) -> Result<()> {
    let record = driver.cuEventRecord()?;
    // SAFETY: the caller's promise that the event and the stream are live.
    check("cuEventRecord", unsafe { record(event, stream) })
}

/// cuEventQuery: whether `event`'s last record has completed (`CUDA_SUCCESS`: true,
/// `CUDA_ERROR_NOT_READY`: false; true if it was never recorded).
///
/// # Safety
/// `event` is a live event.
pub unsafe fn query(driver: &Driver, event: sys::CUevent) -> Result<bool> {
    let query = driver.cuEventQuery()?;
    // SAFETY: the caller's promise that the event is live.
    match unsafe { query(event) } {
        sys::CUDA_SUCCESS => Ok(true),
        sys::CUDA_ERROR_NOT_READY => Ok(false),
        failed => Err(driver_error("cuEventQuery", failed).into()),
    }
}

/// cuEventSynchronize: blocks until `event`'s last record has completed.
///
/// # Safety
/// `event` is a live event.
pub unsafe fn synchronize(driver: &Driver, event: sys::CUevent) -> Result<()> {
    let synchronize = driver.cuEventSynchronize()?;
    // SAFETY: the caller's promise that the event is live.
    check("cuEventSynchronize", unsafe { synchronize(event) })
}
