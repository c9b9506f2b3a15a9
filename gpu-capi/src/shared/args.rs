//! Pointer and string arguments as they cross the C boundary, checked the same way for every
//! client ABI: a null pointer is refused by name, and a C string is read only after that check.

use std::ffi::{CStr, c_char};

use gpu_runtime::error::Error;

use super::status::CapiError;

/// The address of pointer argument `ptr`, refusing null with the core's null-pointer error
/// naming `what`.
pub(crate) fn non_null<T>(ptr: *const T, what: &'static str) -> Result<usize, CapiError> {
    if ptr.is_null() {
        return Err(Error::NullPointer { what }.into());
    }
    Ok(ptr as usize)
}

/// The C string argument at `text` (its bytes, not yet taken as UTF-8), refusing null as
/// [`non_null`] does.
///
/// # Safety
/// `text` is null or points to a NUL-terminated string that stays unchanged for `'a`.
pub(crate) unsafe fn c_str<'a>(
    text: *const c_char,
    what: &'static str,
) -> Result<&'a CStr, CapiError> {
    non_null(text, what)?;
    // SAFETY: not null (checked above), so by this function's contract a NUL-terminated string
    // that stays unchanged for `'a`.
    Ok(unsafe { CStr::from_ptr(text) })
}
