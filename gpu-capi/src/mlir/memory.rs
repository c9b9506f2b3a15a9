//! Memory: allocations of `mgpuMemAlloc` (device memory in stream order, or managed), frees,
//! copies and memsets checked against them, and host registration (plain and memref).

use std::ffi::{c_char, c_void};

use gpu_runtime::Error;
use gpu_runtime::allocator::MemoryKind;
use gpu_runtime::backend::FillValue;
use gpu_runtime::backend::graph::NodeOp;

use crate::shared::args::non_null;
use crate::shared::{CapiError, ClientBackend, Session};

use super::core_ops::{check_stream, copy_on, fill_on, mem_free_now, not_allocated, on_stream};
use super::graphs::{self, Deferral};
use super::objects::Allocations;
use super::session::{device, on_session};

/// Refuses a range `[address, address + len)` that an operation would read or write when
/// it is null, runs past the top of the address space, runs past the end of the
/// allocation of `mgpuMemAlloc` it starts in, or starts outside every such allocation and
/// runs into one. Memory this ABI did not allocate (the host's, say) is the program's to
/// size.
fn check_range<B: ClientBackend>(
    buffers: &Allocations<B>,
    address: usize,
    len: usize,
    what: &'static str,
) -> Result<(), CapiError> {
    if address == 0 {
        return Err(Error::NullPointer { what }.into());
    }
    // Built only on failure (an error made eagerly for `ok_or` is dropped on every call).
    let Some(end) = address.checked_add(len) else {
        return Err(Error::AddressOverflow { ptr: address, len }.into());
    };
    let refused = |detail: String| Err(CapiError::InvalidArgument { what, detail });
    if let Some((&start, buffer)) = buffers.range(..=address).next_back()
        && address - start < buffer.size()
    {
        let (offset, size) = (address - start, buffer.size());
        if len > size - offset {
            return refused(format!(
                "{len} bytes at {address:#x} (offset {offset}) run past the end of the \
                 {size}-byte allocation at {start:#x}"
            ));
        }
        return Ok(());
    }
    match buffers.range(address..end).next() {
        Some((&start, _)) => refused(format!(
            "{len} bytes at {address:#x} start outside every allocation of mgpuMemAlloc but \
             run into the one at {start:#x}"
        )),
        None => Ok(()),
    }
}

/// MLIR's 64-bit byte count as a size; a count the address space cannot hold is refused as a
/// range from `at` that overflows it.
fn byte_count(bytes: u64, at: usize) -> Result<usize, Error> {
    usize::try_from(bytes).map_err(|_| Error::AddressOverflow {
        ptr: at,
        len: usize::MAX,
    })
}

fn mem_alloc<B: ClientBackend>(
    session: &'static Session<B>,
    size: u64,
    stream: u64,
    host_shared: bool,
) -> Result<usize, CapiError> {
    let runtime = session.runtime();
    let size = byte_count(size, 0)?;
    let kind = if host_shared {
        MemoryKind::Managed
    } else {
        MemoryKind::Device
    };
    let device = device();
    if stream != 0 && !host_shared && size != 0 {
        return on_stream(
            session,
            stream,
            |_| Ok(()),
            |buffers, after| {
                let (buffer, token) = runtime.alloc_after(device, kind, size, after)?;
                let address = buffer.address();
                buffers.insert(address, buffer);
                Ok((token, address))
            },
        );
    }
    // Managed memory is allocated at once (as upstream's); the stream is still checked.
    check_stream(session, stream)?;
    if size == 0 {
        return Ok(0); // upstream returns null for no bytes
    }
    let buffer = runtime.alloc(device, kind, size)?;
    let address = buffer.address();
    session.mlir.lock().buffers.insert(address, buffer);
    Ok(address)
}

/// Frees an allocation of `mgpuMemAlloc` after `stream`'s work (at once with no stream). The
/// stream and the pointer are both checked before anything happens: a refused free leaves the
/// allocation live (a correct free of it later succeeds) and the stream as it was.
fn mem_free<B: ClientBackend>(
    session: &'static Session<B>,
    ptr: usize,
    stream: u64,
) -> Result<(), CapiError> {
    if stream == 0 {
        // Freed at once: the deferred work that may use it is issued first.
        graphs::flush_before(session);
    } else if let Deferral::Done(done) = graphs::defer_free(session, ptr, stream, not_allocated) {
        return done;
    }
    mem_free_now(session, ptr, stream)
}

fn memcpy<B: ClientBackend>(
    session: &'static Session<B>,
    dst: usize,
    src: usize,
    bytes: u64,
    stream: u64,
) -> Result<(), CapiError> {
    let bytes = byte_count(bytes, src)?;
    if bytes == 0 {
        return check_stream(session, stream);
    }
    let check = |buffers: &Allocations<B>| {
        check_range(buffers, dst, bytes, "copy destination")?;
        check_range(buffers, src, bytes, "copy source")
    };
    if stream == 0 {
        graphs::flush_before(session);
    } else if let Deferral::Done(done) =
        graphs::defer_work(session, stream, NodeOp::Copy { dst, src, bytes }, check)
    {
        return done;
    }
    copy_on(session, device(), stream, (dst, src, bytes), check)
}

fn memset<B: ClientBackend>(
    session: &'static Session<B>,
    dst: usize,
    value: FillValue,
    count: u64,
    stream: u64,
) -> Result<(), CapiError> {
    let bytes = usize::try_from(count)
        .ok()
        .and_then(|count| count.checked_mul(value.width()));
    let Some(bytes) = bytes else {
        return Err(Error::AddressOverflow {
            ptr: dst,
            len: usize::MAX,
        }
        .into());
    };
    if bytes == 0 {
        return check_stream(session, stream);
    }
    let check = |buffers: &Allocations<B>| check_range(buffers, dst, bytes, "memset destination");
    let count = bytes / value.width();
    if stream == 0 {
        graphs::flush_before(session);
    } else if let Deferral::Done(done) =
        graphs::defer_work(session, stream, NodeOp::Fill { dst, value, count }, check)
    {
        return done;
    }
    fill_on(session, device(), stream, (dst, value, count), check)
}

/// MLIR's ranked memref descriptor as the register functions receive it: rank 1's layout,
/// followed in memory by `rank` sizes and `rank` strides.
#[repr(C)]
pub struct MemRefDescriptor {
    allocated: *mut c_char,
    aligned: *mut c_char,
    offset: i64,
    sizes: [i64; 1],
}

/// The host range a memref covers: from its first element, sizes times element size bytes
/// (dense only, as upstream requires). A negative size, offset or element size, and a range
/// whose size or end does not fit the address space, are refused.
///
/// # Safety
/// `descriptor` points to a ranked memref descriptor of `rank` dimensions.
unsafe fn memref_range(
    rank: i64,
    descriptor: *const MemRefDescriptor,
    element_bytes: i64,
) -> Result<(usize, usize), CapiError> {
    non_null(descriptor, "memref descriptor")?;
    let invalid = |what: &'static str, detail: String| CapiError::InvalidArgument { what, detail };
    let rank =
        usize::try_from(rank).map_err(|_| invalid("memref rank", format!("{rank} is negative")))?;
    let element_bytes = usize::try_from(element_bytes)
        .ok()
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| invalid("memref element size", format!("{element_bytes} bytes")))?;
    // SAFETY: the caller's promise: the descriptor has `rank` sizes, then `rank` strides.
    let (d, sizes, strides) = unsafe {
        let d = &*descriptor;
        let sizes = core::slice::from_raw_parts(d.sizes.as_ptr(), rank);
        let strides = core::slice::from_raw_parts(d.sizes.as_ptr().add(rank), rank);
        (d, sizes, strides)
    };
    let too_large = || {
        invalid(
            "memref",
            format!(
                "sizes {sizes:?} of {element_bytes}-byte elements at offset {} do not fit the address space",
                d.offset
            ),
        )
    };
    let mut dense = 1usize;
    for (&size, &stride) in sizes.iter().zip(strides).rev() {
        let size = usize::try_from(size)
            .map_err(|_| invalid("memref", format!("sizes {sizes:?} include a negative one")))?;
        if size > 1 && usize::try_from(stride) != Ok(dense) {
            return Err(invalid(
                "memref",
                format!("strides {strides:?} of sizes {sizes:?} are not dense"),
            ));
        }
        dense = dense.checked_mul(size).ok_or_else(too_large)?;
    }
    let bytes = dense.checked_mul(element_bytes).ok_or_else(too_large)?;
    let offset = usize::try_from(d.offset)
        .map_err(|_| invalid("memref offset", format!("{} is negative", d.offset)))?;
    let start = offset
        .checked_mul(element_bytes)
        .and_then(|offset| (d.aligned as usize).checked_add(offset))
        .ok_or_else(too_large)?;
    Ok((start, bytes))
}

fn host_register<B: ClientBackend>(
    session: &'static Session<B>,
    start: usize,
    bytes: usize,
) -> Result<(), CapiError> {
    graphs::flush_before(session);
    session.runtime().lock_range(start, bytes)?;
    Ok(())
}

fn host_unregister<B: ClientBackend>(
    session: &'static Session<B>,
    start: usize,
) -> Result<(), CapiError> {
    graphs::flush_before(session);
    session.runtime().unlock_range(start)?;
    Ok(())
}

// ----- the exported ABI -----

/// Allocates `size` bytes on the default device: device memory in `stream`'s order through
/// the caching allocator, or managed memory (`is_host_shared`, synchronous as upstream's).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemAlloc(
    size: u64,
    stream: *mut c_void,
    is_host_shared: bool,
) -> *mut c_void {
    on_session!("mgpuMemAlloc", 0, |s| mem_alloc(
        s,
        size,
        stream as u64,
        is_host_shared
    )) as *mut c_void
}

/// Frees memory from `mgpuMemAlloc` after the work on `stream` (the cache reuses it then).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemFree(ptr: *mut c_void, stream: *mut c_void) {
    on_session!("mgpuMemFree", (), |s| mem_free(
        s,
        ptr as usize,
        stream as u64
    ))
}

/// Copies `size` bytes from `src` to `dst` (host or device) in `stream`'s order.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemcpy(dst: *mut c_void, src: *mut c_void, size: u64, stream: *mut c_void) {
    on_session!("mgpuMemcpy", (), |s| memcpy(
        s,
        dst as usize,
        src as usize,
        size,
        stream as u64
    ))
}

/// Sets `count` 32-bit words at `dst` to `value` in `stream`'s order.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemset32(dst: *mut c_void, value: u32, count: u64, stream: *mut c_void) {
    on_session!("mgpuMemset32", (), |s| memset(
        s,
        dst as usize,
        FillValue::U32(value),
        count,
        stream as u64
    ))
}

/// Sets `count` 16-bit words at `dst` to `value` in `stream`'s order.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemset16(dst: *mut c_void, value: u16, count: u64, stream: *mut c_void) {
    on_session!("mgpuMemset16", (), |s| memset(
        s,
        dst as usize,
        FillValue::U16(value),
        count,
        stream as u64
    ))
}

/// Registers (pins) `size` bytes at `ptr` for every device, through the lock table: a range
/// inside a registered one counts one more registration.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemHostRegister(ptr: *mut c_void, size: u64) {
    on_session!("mgpuMemHostRegister", (), |s| {
        let bytes = byte_count(size, ptr as usize)?;
        host_register(s, ptr as usize, bytes)
    })
}

/// Registers the memory of a dense memref (as `mgpuMemHostRegister`).
///
/// # Safety
/// `descriptor` points to a ranked memref descriptor of `rank` dimensions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuMemHostRegisterMemRef(
    rank: i64,
    descriptor: *const MemRefDescriptor,
    element_bytes: i64,
) {
    on_session!("mgpuMemHostRegisterMemRef", (), |s| {
        // SAFETY: this function's contract: `descriptor` points to a ranked memref descriptor of
        // `rank` dimensions, as `memref_range` needs.
        let (start, bytes) = unsafe { memref_range(rank, descriptor, element_bytes) }?;
        host_register(s, start, bytes)
    })
}

/// Counts one registration of the range containing `ptr` down; the last one unpins it.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemHostUnregister(ptr: *mut c_void) {
    on_session!("mgpuMemHostUnregister", (), |s| host_unregister(
        s,
        ptr as usize
    ))
}

/// Unregisters the memory of a memref (as `mgpuMemHostUnregister`).
///
/// # Safety
/// `descriptor` points to a ranked memref descriptor of `rank` dimensions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuMemHostUnregisterMemRef(
    rank: i64,
    descriptor: *const MemRefDescriptor,
    element_bytes: i64,
) {
    on_session!("mgpuMemHostUnregisterMemRef", (), |s| {
        // SAFETY: this function's contract: `descriptor` points to a ranked memref descriptor of
        // `rank` dimensions, as `memref_range` needs.
        let (start, _) = unsafe { memref_range(rank, descriptor, element_bytes) }?;
        host_unregister(s, start)
    })
}
