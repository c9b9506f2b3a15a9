//! Moving bytes in stream order: copies and fills between memory handles, and uploads and
//! downloads between handles and the caller's pageable host memory.

use std::ffi::c_void;

use gpu_runtime::id::DeviceId;
use gpu_runtime::token::Token;

use crate::shared::{
    CapiError, ClientBackend, GpurtStatus, Session, dispatch, status_of, with_session,
};

use super::args::{c_slice, c_slice_mut};
use super::memory::{GpurtSpan, held};
use super::tokens::{GpurtToken, enqueue, token_out, tokens_in};
use crate::shared::args::non_null;

fn copy<B: ClientBackend>(
    s: &Session<B>,
    device: u32,
    dst: GpurtSpan,
    src: GpurtSpan,
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let (to, from) = (held(s, &dst)?, held(s, &src)?);
    let (to, from) = (
        to.span(dst.offset, dst.len)?,
        from.span(src.offset, src.len)?,
    );
    Ok(token_out(s.runtime().copy(
        DeviceId(device),
        to,
        from,
        after,
    )?))
}

fn fill<B: ClientBackend>(
    s: &Session<B>,
    device: u32,
    dst: GpurtSpan,
    value: u8,
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let to = held(s, &dst)?;
    let to = to.span(dst.offset, dst.len)?;
    Ok(token_out(s.runtime().fill(
        DeviceId(device),
        to,
        value,
        after,
    )?))
}

/// # Safety
/// As for `gpurt_upload`: `src` points to `dst.len` readable bytes, unwritten until the return.
unsafe fn upload<B: ClientBackend>(
    s: &Session<B>,
    device: u32,
    dst: GpurtSpan,
    src: *const c_void,
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let to = held(s, &dst)?;
    // The span is checked before the caller's bytes are taken as a slice of its length.
    let to = to.span(dst.offset, dst.len)?;
    // SAFETY: the caller's promise: `dst.len` readable bytes at `src`.
    let src = unsafe { c_slice(src.cast::<u8>(), to.len(), "upload source") }?;
    Ok(token_out(s.runtime().upload(
        DeviceId(device),
        to,
        src,
        after,
    )?))
}

/// # Safety
/// As for `gpurt_download`: `dst` points to `src.len` writable bytes nothing else accesses
/// during the call.
unsafe fn download<B: ClientBackend>(
    s: &Session<B>,
    device: u32,
    dst: *mut c_void,
    src: GpurtSpan,
    after: &mut Vec<Token>,
) -> Result<(), CapiError> {
    let from = held(s, &src)?;
    // The span is checked before the caller's bytes are taken as a slice of its length.
    let from = from.span(src.offset, src.len)?;
    // SAFETY: the caller's promise: `src.len` writable bytes at `dst`, not accessed elsewhere.
    let dst = unsafe { c_slice_mut(dst.cast::<u8>(), from.len(), "download destination") }?;
    Ok(s.runtime().download(DeviceId(device), dst, from, after)?)
}

/// Enqueues a copy of `src` into `dst` (equal lengths) on a stream of `device` after the tokens
/// of `after`; writes the token of the copy to `*done`. Memory of another device is
/// `GPURT_STATUS_WRONG_DEVICE`; host memory must be pinned, managed or registered (for pageable
/// memory use `gpurt_upload`/`gpurt_download`). Consumes `after` on success.
///
/// Thread safety: any thread.
///
/// # Safety
/// `after` points to `after_count` tokens (or is NULL with 0); `done` to writable memory for a
/// token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_copy(
    device: u32,
    dst: GpurtSpan,
    src: GpurtSpan,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |after: &mut Vec<Token>| {
        with_session(|s| dispatch!(s, s => copy(s, device, dst, src, after)))
    };
    // SAFETY: `gpurt_copy`'s contract: `after` points to `after_count` tokens (or is NULL with
    // 0) and `done` to writable memory for a token, as `enqueue` needs.
    unsafe { enqueue(after, after_count, done, operation) }
}

/// Enqueues setting every byte of `dst` to `value` on a stream of `device`; as `gpurt_copy`.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_fill(
    device: u32,
    dst: GpurtSpan,
    value: u8,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |after: &mut Vec<Token>| {
        with_session(|s| dispatch!(s, s => fill(s, device, dst, value, after)))
    };
    // SAFETY: `gpurt_fill`'s contract: `after` and `done` as for `gpurt_copy`, as `enqueue`
    // needs.
    unsafe { enqueue(after, after_count, done, operation) }
}

/// Copies `dst.len` bytes of the caller's pageable host memory at `src` into `dst` on `device`
/// after `after`. Returns once `src` is no longer needed (staged through pinned buffers, or
/// directly when `src` is locked); `*done` stands for the device side. Consumes `after` on
/// success.
///
/// Thread safety: any thread.
///
/// # Safety
/// `src` points to `dst.len` readable bytes, which nothing writes (neither the host nor work
/// on a device) until the call returns; `after` and `done` as for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_upload(
    device: u32,
    dst: GpurtSpan,
    src: *const c_void,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |after: &mut Vec<Token>| {
        non_null(src, "upload source")?;
        // SAFETY: `gpurt_upload`'s contract: `src` points to `dst.len` readable bytes unwritten
        // until the return, as `upload` needs.
        with_session(|s| dispatch!(s, s => unsafe { upload(s, device, dst, src, after) }))
    };
    // SAFETY: `gpurt_upload`'s contract: `after` and `done` as for `gpurt_copy`, as `enqueue`
    // needs.
    unsafe { enqueue(after, after_count, done, operation) }
}

/// Copies `src` on `device`, after `after`, into the caller's pageable host memory at `dst`
/// (`src.len` bytes); returns once `dst` holds the data. Consumes `after` on success.
///
/// Thread safety: any thread; blocks the caller until the data is there.
///
/// # Safety
/// `dst` points to `src.len` writable bytes that nothing else accesses during the call;
/// `after` as for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_download(
    device: u32,
    dst: *mut c_void,
    src: GpurtSpan,
    after: *const GpurtToken,
    after_count: usize,
) -> GpurtStatus {
    status_of(|| {
        non_null(dst, "download destination")?;
        // SAFETY: `gpurt_download`'s contract: `after` points to `after_count` tokens (or is
        // NULL with 0).
        let mut after = unsafe { tokens_in(after, after_count) }?;
        // SAFETY: `gpurt_download`'s contract: `dst` points to `src.len` writable bytes nothing
        // else accesses during the call, as `download` needs.
        with_session(|s| dispatch!(s, s => unsafe { download(s, device, dst, src, &mut after) }))
    })
}
