//! Streams: in-order queues of work of a device.

use core::ffi::c_uint;
use core::ptr;

use gpu_core::Result;

use crate::library::Hip;
use crate::result::check;
use crate::sys;

/// hipStreamCreateWithFlags: a stream of the current device (`flags`: `hipStreamNonBlocking`
/// for one that does not synchronise with the null stream).
pub fn create(hip: &Hip, flags: c_uint) -> Result<sys::hipStream_t> {
    let create = hip.hipStreamCreateWithFlags()?;
    let mut stream = ptr::null_mut();
    // SAFETY: `stream` is valid for writes; HIP checks the flags.
    check("hipStreamCreateWithFlags", unsafe {
        create(&mut stream, flags)
    })?;
    Ok(stream)
}

/// hipStreamDestroy: destroys `stream`; work already enqueued on it still runs.
///
/// # Safety
/// `stream` is a live stream that no other thread uses meanwhile and nothing uses afterwards.
pub unsafe fn destroy(hip: &Hip, stream: sys::hipStream_t) -> Result<()> {
    let destroy = hip.hipStreamDestroy()?;
    // SAFETY: the caller's promise that the stream is live and not used again.
    check("hipStreamDestroy", unsafe { destroy(stream) })
}

/// hipStreamSynchronize: blocks until all work enqueued on `stream` has finished.
///
/// # Safety
/// `stream` is a live stream, or one of the default-stream handles.
pub unsafe fn synchronize(hip: &Hip, stream: sys::hipStream_t) -> Result<()> {
    let synchronize = hip.hipStreamSynchronize()?;
    // SAFETY: the caller's promise that the stream is live.
    check("hipStreamSynchronize", unsafe { synchronize(stream) })
}

/// hipStreamWaitEvent: work enqueued on `stream` after this call waits for `event`'s last
/// record (`flags` 0).
///
/// # Safety
/// `stream` is a live stream (or a default-stream handle) and `event` a live event.
pub unsafe fn wait_event(
    hip: &Hip,
    stream: sys::hipStream_t,
    event: sys::hipEvent_t,
    flags: c_uint,
) -> Result<()> {
    let wait = hip.hipStreamWaitEvent()?;
    // SAFETY: the caller's promise that the stream and the event are live.
    check("hipStreamWaitEvent", unsafe { wait(stream, event, flags) })
}
