//! Events: completion markers recorded on streams.

use core::ffi::c_uint;
use core::ptr;

use gpu_core::Result;

use crate::library::Hip;
use crate::result::{check, driver_error};
use crate::sys;

/// hipEventCreateWithFlags: an event of the current device (`flags`: `hipEventDisableTiming`
/// for one without timing).
pub fn create(hip: &Hip, flags: c_uint) -> Result<sys::hipEvent_t> {
    let create = hip.hipEventCreateWithFlags()?;
    let mut event = ptr::null_mut();
    // SAFETY: `event` is valid for writes; HIP checks the flags.
    check("hipEventCreateWithFlags", unsafe {
        create(&mut event, flags)
    })?;
    Ok(event)
}

/// hipEventDestroy: destroys `event`; waits already enqueued on it stay valid.
///
/// # Safety
/// `event` is a live event that no other thread uses meanwhile and nothing uses afterwards.
pub unsafe fn destroy(hip: &Hip, event: sys::hipEvent_t) -> Result<()> {
    let destroy = hip.hipEventDestroy()?;
    // SAFETY: the caller's promise that the event is live and not used again.
    check("hipEventDestroy", unsafe { destroy(event) })
}

/// hipEventRecord: records `event` on `stream`, of the same device.
///
/// # Safety
/// `event` is a live event and `stream` a live stream (or a default-stream handle).
pub unsafe fn record(hip: &Hip, event: sys::hipEvent_t, stream: sys::hipStream_t) -> Result<()> {
    let record = hip.hipEventRecord()?;
    // SAFETY: the caller's promise that the event and the stream are live.
    check("hipEventRecord", unsafe { record(event, stream) })
}

/// hipEventQuery: whether `event`'s last record has completed (`hipSuccess`: true,
/// `hipErrorNotReady`: false).
///
/// # Safety
/// `event` is a live event.
pub unsafe fn query(hip: &Hip, event: sys::hipEvent_t) -> Result<bool> {
    let query = hip.hipEventQuery()?;
    // SAFETY: the caller's promise that the event is live.
    match unsafe { query(event) } {
        sys::hipSuccess => Ok(true),
        sys::hipErrorNotReady => Ok(false),
        failed => Err(driver_error("hipEventQuery", failed).into()),
    }
}

/// hipEventSynchronize: blocks until `event`'s last record has completed.
///
/// # Safety
/// `event` is a live event.
pub unsafe fn synchronize(hip: &Hip, event: sys::hipEvent_t) -> Result<()> {
    let synchronize = hip.hipEventSynchronize()?;
    // SAFETY: the caller's promise that the event is live.
    check("hipEventSynchronize", unsafe { synchronize(event) })
}
