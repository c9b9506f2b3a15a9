//! Streams: in-order queues of work of the current context.

use core::ffi::c_uint;
use core::ptr;

use gpu_core::Result;

use crate::driver::Driver;
use crate::result::check;
use crate::sys;

/// cuStreamCreate: a stream of the current context (`flags`: `CU_STREAM_NON_BLOCKING` for one
/// that does not synchronise with the legacy default stream).
pub fn create(driver: &Driver, flags: c_uint) -> Result<sys::CUstream> {
    let create = driver.cuStreamCreate()?;
    let mut stream = ptr::null_mut();
    // SAFETY: `stream` is valid for writes; the driver checks the flags and the context.
    check("cuStreamCreate", unsafe { create(&mut stream, flags) })?;
    Ok(stream)
}

/// cuStreamDestroy: destroys `stream`; work already enqueued on it still runs.
///
/// # Safety
/// `stream` is a live stream of the current context that no other thread uses meanwhile and
/// nothing uses afterwards.
pub unsafe fn destroy(driver: &Driver, stream: sys::CUstream) -> Result<()> {
    let destroy = driver.cuStreamDestroy()?;
    // SAFETY: the caller's promise that the stream is live and not used again.
    check("cuStreamDestroy", unsafe { destroy(stream) })
}

/// cuStreamSynchronize: blocks until all work enqueued on `stream` has finished.
///
/// # Safety
/// `stream` is a live stream of the current context, or one of the default-stream handles.
pub unsafe fn synchronize(driver: &Driver, stream: sys::CUstream) -> Result<()> {
    let synchronize = driver.cuStreamSynchronize()?;
    // SAFETY: the caller's promise that the stream is live.
    check("cuStreamSynchronize", unsafe { synchronize(stream) })
}

/// cuStreamWaitEvent: work enqueued on `stream` after this call waits for `event`'s last
/// record (`flags` 0).
///
/// # Safety
/// `stream` is a live stream of the current context (or a default-stream handle), and `event`
/// a live event of any context.
pub unsafe fn wait_event(
    driver: &Driver,
    stream: sys::CUstream,
    event: sys::CUevent,
    flags: c_uint,
) -> Result<()> {
    let wait = driver.cuStreamWaitEvent()?;
    // SAFETY: the caller's promise that the stream and the event are live.
    check("cuStreamWaitEvent", unsafe { wait(stream, event, flags) })
}
