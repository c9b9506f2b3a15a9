//! The C API of `include/gpu_runtime.h`: `gpurt_*` functions over the process-wide runtime.
//! Each translates its arguments and handles, calls the runtime, and returns a status code.
//!
//! Every function returns a [`GpurtStatus`](crate::shared::GpurtStatus) (0 is success;
//! `gpurt_last_error()` has the calling thread's last failure message) and never unwinds into
//! the caller. Out-parameters are written only on success (`gpurt_shutdown`'s report excepted:
//! the runtime is closed even when its shutdown reports a failure). All functions may be called
//! from any thread at any time unless their documentation says otherwise.
//!
//! Every argument is checked before the call changes anything: arrays and out-parameters (null,
//! alignment, a length that fits the address space) before a slice is made of them or anything
//! is written, spans before the caller's host memory is taken at their length, and handles are
//! taken before the runtime consumes tokens, so that storing one cannot fail afterwards.
//!
//! One module per concern, each with the value types of the header it needs, its operations
//! (written once for every backend) and its exported functions. This module keeps the objects
//! the C API holds in a session and the argument checks they all use.
//!
//! The modules are declared in the header's order, each on its own (rustfmt would sort a block
//! of them): cbindgen writes the functions, and the types they need, in the order it reads them,
//! so moving a function to another module, or the modules around, reorders the header.

// Opening and shutting the runtime down; the last error, status names, the device count.
mod session;

// Memory handles: allocating, freeing and describing memory.
mod memory;

// Pinning the caller's host memory: registrations, locks, lookups.
mod pinning;

// Tokens: after-lists, done tokens, fork, join and wait.
mod tokens;

// Copies, fills, uploads and downloads in stream order.
mod transfers;

// Loading and launching kernels.
mod kernels;

// The runtime's counters.
mod stats;

#[cfg(test)]
mod tests;

use hashbrown::HashMap;
use std::ffi::c_char;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use gpu_runtime::id::DeviceId;
use gpu_runtime::runtime::Kernel;

use memory::Memory;

use crate::shared::args::{c_str, non_null};
use crate::shared::{
    CapiError, CapiSlot, ClientBackend, ClientObjects, ClientSlot, Generation, HandleKind,
    HandleTable, Session,
};

pub use kernels::{
    GPURT_ARG_F32, GPURT_ARG_SPAN, GPURT_ARG_U32, GPURT_ARG_U64, GpurtArg, GpurtDims, GpurtKernel,
    gpurt_kernel, gpurt_launch,
};
pub use memory::{
    GPURT_MEMORY_DEVICE, GPURT_MEMORY_MANAGED, GPURT_MEMORY_PINNED, GPURT_MEMORY_REGISTERED,
    GpurtMemory, GpurtMemoryInfo, GpurtSpan, gpurt_alloc, gpurt_alloc_after, gpurt_free,
    gpurt_memory_info,
};
pub use pinning::{
    gpurt_host_register, gpurt_host_unregister, gpurt_lock, gpurt_lookup, gpurt_unlock,
};
pub use session::{
    GpurtReport, gpurt_device_count, gpurt_last_error, gpurt_open, gpurt_shutdown,
    gpurt_status_name,
};
pub use stats::{GpurtStats, gpurt_stats};
pub use tokens::{GpurtToken, gpurt_fork, gpurt_join, gpurt_wait};
pub use transfers::{gpurt_copy, gpurt_download, gpurt_fill, gpurt_upload};

/// The objects C callers hold handles to, in one session.
pub struct Objects<B: ClientBackend> {
    memory: HandleTable<Arc<Memory<B>>>,
    kernels: HandleTable<Kernel<'static, B>>,
    /// The handle of each kernel loaded, so asking twice gives the same handle.
    kernel_handles: Mutex<HashMap<(DeviceId, String), u64>>,
}

impl<B: ClientBackend> ClientSlot<B> for CapiSlot {
    type Objects = Objects<B>;
}

impl<B: ClientBackend> ClientObjects<B> for Objects<B> {
    /// No objects, for the session of `generation` (the C API records no trace of its own).
    fn open(generation: Generation, _trace: Option<&Path>) -> Self {
        Self {
            memory: HandleTable::new(HandleKind::Memory, generation),
            kernels: HandleTable::new(HandleKind::Kernel, generation),
            kernel_handles: Mutex::new(HashMap::new()),
        }
    }

    /// Releases every object (at shutdown, with no call in flight): buffers are freed,
    /// registrations unpinned after their transfers. Returns how many there were.
    fn release(&self, _session: &Session<B>) -> usize {
        let memory = self.memory.drain().len();
        let kernels = self.kernels.drain().len();
        self.kernel_handles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        memory + kernels
    }
}

/// Reads an optional C string argument (null: none).
///
/// # Safety
/// `text` is null or points to a NUL-terminated string.
unsafe fn optional_str<'a>(
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
unsafe fn required_str<'a>(text: *const c_char, what: &'static str) -> Result<&'a str, CapiError> {
    // SAFETY: this function's contract: null (refused) or a NUL-terminated string.
    let text = unsafe { c_str(text, what) }?;
    text.to_str().map_err(|_| CapiError::InvalidArgument {
        what,
        detail: format!("{text:?} is not valid UTF-8"),
    })
}

/// `ptr` as an out-parameter: refused when null or misaligned (writing through it would be
/// undefined behaviour).
fn out_param<T>(ptr: *mut T, what: &'static str) -> Result<*mut T, CapiError> {
    check_array(ptr, 1, what)?;
    Ok(ptr)
}

/// Writes `value` to an out-parameter checked by [`out_param`].
fn write_out<T>(out: *mut T, value: T) {
    // SAFETY: `out` passed `out_param` (non-null, aligned); every exported function's contract
    // says its out-parameters point to writable memory of their type.
    unsafe { out.write(value) }
}

/// Refuses a C array of `count` values of `T` at `ptr` that no slice can stand for: a null or
/// misaligned pointer, or more bytes than fit below the top of the address space (or above
/// `isize::MAX`, the most one Rust slice may span). Making a slice of such an array is
/// undefined behaviour, whatever the caller promised.
fn check_array<T>(ptr: *const T, count: usize, what: &'static str) -> Result<(), CapiError> {
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
unsafe fn c_slice<'a, T>(
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
unsafe fn c_slice_mut<'a, T>(
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
