//! The C API's arguments as Rust values, each checked before it is used: C strings, and
//! out-parameters and arrays (null, alignment, a length that fits the address space).

use std::ffi::c_char;

use crate::shared::CapiError;
use crate::shared::args::{c_str, non_null};

/// Reads an optional C string argument (null: none).
///
/// # Safety
/// `text` is null or points to a NUL-terminated string.
pub(super) unsafe fn optional_str<'a>(
    text: *const c_char,
    what: &'static str,
) -> Result<Option<&'a str>, CapiError> {
    if text.is_null() {
        return Ok(None);
    }
    // SAFETY: this function's contract: `text`, not null here, points to a NUL-terminated
    // string.
    unsafe { required_str(text, what) }.map(Some)
}

/// Reads a C string argument, refusing null and text that is not UTF-8.
///
/// # Safety
/// `text` is null or points to a NUL-terminated string.
pub(super) unsafe fn required_str<'a>(
    text: *const c_char,
    what: &'static str,
) -> Result<&'a str, CapiError> {
    // SAFETY: this function's contract: null (refused) or a NUL-terminated string.
    let text = unsafe { c_str(text, what) }?;
    text.to_str().map_err(|_| CapiError::InvalidArgument {
        what,
        detail: format!("{text:?} is not valid UTF-8"),
    })
}

/// `ptr` as an out-parameter: refused when null or misaligned (writing through it would be
/// undefined behaviour).
pub(super) fn out_param<T>(ptr: *mut T, what: &'static str) -> Result<*mut T, CapiError> {
    check_array(ptr, 1, what)?;
    Ok(ptr)
}

/// Writes `value` to an out-parameter checked by [`out_param`].
pub(super) fn write_out<T>(out: *mut T, value: T) {
    // SAFETY: `out` passed `out_param` (non-null, aligned); every exported function's contract
    // says its out-parameters point to writable memory of their type.
    unsafe { out.write(value) }
}

/// Refuses a C array of `count` values of `T` at `ptr` that no slice can stand for: a null or
/// misaligned pointer, or more bytes than fit below the top of the address space (or above
/// `isize::MAX`, the most one Rust slice may span). Making a slice of such an array is
/// undefined behaviour, whatever the caller promised.
pub(super) fn check_array<T>(
    ptr: *const T,
    count: usize,
    what: &'static str,
) -> Result<(), CapiError> {
    non_null(ptr, what)?;
    if !ptr.is_aligned() {
        return Err(CapiError::InvalidArgument {
            what,
            detail: format!(
                "{ptr:p} is not aligned to {} bytes",
                core::mem::align_of::<T>()
            ),
        });
    }
    let bytes = count
        .checked_mul(core::mem::size_of::<T>())
        .filter(|&bytes| isize::try_from(bytes).is_ok());
    match bytes.and_then(|bytes| (ptr as usize).checked_add(bytes)) {
        Some(_) => Ok(()),
        None => Err(CapiError::InvalidArgument {
            what,
            detail: format!(
                "{count} elements of {} bytes at {ptr:p} do not fit the address space",
                core::mem::size_of::<T>()
            ),
        }),
    }
}

/// `count` values at `ptr` (none when `count` is 0, whatever `ptr` is), after [`check_array`].
///
/// # Safety
/// When the checks pass, `ptr` points to `count` initialised values that stay valid and
/// unchanged for `'a`.
pub(super) unsafe fn c_slice<'a, T>(
    ptr: *const T,
    count: usize,
    what: &'static str,
) -> Result<&'a [T], CapiError> {
    if count == 0 {
        return Ok(&[]);
    }
    check_array(ptr, count, what)?;
    // SAFETY: checked above (non-null, aligned, a size a slice may have); the caller's promise
    // for the rest.
    Ok(unsafe { std::slice::from_raw_parts(ptr, count) })
}

/// `count` writable values at `ptr` (none when `count` is 0), after [`check_array`].
///
/// # Safety
/// When the checks pass, `ptr` points to `count` values that nothing else accesses for `'a`.
pub(super) unsafe fn c_slice_mut<'a, T>(
    ptr: *mut T,
    count: usize,
    what: &'static str,
) -> Result<&'a mut [T], CapiError> {
    if count == 0 {
        return Ok(&mut []);
    }
    check_array(ptr, count, what)?;
    // SAFETY: as in `c_slice`.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, count) })
}
