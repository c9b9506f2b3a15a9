//! Memory: device, managed and pinned host allocations, stream-ordered allocation from the
//! default pool, host registration, copies and fills, and what HIP knows about an address.

use core::ffi::{c_int, c_uint, c_void};
use core::ptr;

use gpu_core::Result;

use crate::library::Hip;
use crate::result::check;
use crate::sys;

/// hipMalloc: `bytes` of device memory of the current device (out of memory is
/// `hipErrorOutOfMemory`).
pub fn alloc(hip: &Hip, bytes: usize) -> Result<*mut c_void> {
    let alloc = hip.hipMalloc()?;
    let mut address = ptr::null_mut();
    // SAFETY: `address` is valid for writes.
    check("hipMalloc", unsafe { alloc(&mut address, bytes) })?;
    Ok(address)
}

/// hipMallocManaged: `bytes` of managed memory (`flags`: `hipMemAttachGlobal` for memory every
/// stream may use).
pub fn alloc_managed(hip: &Hip, bytes: usize, flags: c_uint) -> Result<*mut c_void> {
    let alloc = hip.hipMallocManaged()?;
    let mut address = ptr::null_mut();
    // SAFETY: `address` is valid for writes; HIP checks the flags.
    check("hipMallocManaged", unsafe {
        alloc(&mut address, bytes, flags)
    })?;
    Ok(address)
}

/// hipHostMalloc: `bytes` of page-locked host memory (`flags`: `hipHostMalloc*`).
pub fn alloc_host(hip: &Hip, bytes: usize, flags: c_uint) -> Result<*mut c_void> {
    let alloc = hip.hipHostMalloc()?;
    let mut address = ptr::null_mut();
    // SAFETY: `address` is valid for writes; HIP checks the flags.
    check("hipHostMalloc", unsafe {
        alloc(&mut address, bytes, flags)
    })?;
    Ok(address)
}

/// hipMallocAsync: `bytes` of device memory from the current device's default pool, in
/// `stream`'s order.
///
/// # Safety
/// `stream` is a live stream of the current device (or a default-stream handle).
pub unsafe fn alloc_async(
    hip: &Hip,
    bytes: usize,
    stream: sys::hipStream_t,
) -> Result<*mut c_void> {
    let alloc = hip.hipMallocAsync()?;
    let mut address = ptr::null_mut();
    // SAFETY: `address` is valid for writes; the caller's promise for the stream.
    check("hipMallocAsync", unsafe {
        alloc(&mut address, bytes, stream)
    })?;
    Ok(address)
}

/// hipFree: frees device or managed memory.
///
/// # Safety
/// `address` is the start of a live allocation of hipMalloc, hipMallocManaged or a pool, no
/// work still to run uses it, and nothing uses it afterwards.
pub unsafe fn free(hip: &Hip, address: *mut c_void) -> Result<()> {
    let free = hip.hipFree()?;
    // SAFETY: the caller's promise that the allocation is live and unused.
    check("hipFree", unsafe { free(address) })
}

/// hipHostFree: frees memory of hipHostMalloc.
///
/// # Safety
/// `host` is the start of a live allocation of hipHostMalloc, no work still to run uses it,
/// and nothing uses it afterwards.
pub unsafe fn free_host(hip: &Hip, host: *mut c_void) -> Result<()> {
    let free = hip.hipHostFree()?;
    // SAFETY: the caller's promise that the allocation is live and unused.
    check("hipHostFree", unsafe { free(host) })
}

/// hipFreeAsync: frees device memory once the work enqueued on `stream` before it has
/// finished.
///
/// # Safety
/// `address` is the start of a live device allocation that no work outside `stream`'s order
/// still uses and nothing uses afterwards; `stream` is a live stream (or a default-stream
/// handle).
pub unsafe fn free_async(hip: &Hip, address: *mut c_void, stream: sys::hipStream_t) -> Result<()> {
    let free = hip.hipFreeAsync()?;
    // SAFETY: the caller's promise for the allocation and the stream.
    check("hipFreeAsync", unsafe { free(address, stream) })
}

/// hipHostRegister: page-locks `[host, host + bytes)` for the devices' DMA (`flags`:
/// `hipHostRegister*`).
///
/// # Safety
/// The range is host memory of the process that stays allocated until it is unregistered.
pub unsafe fn host_register(
    hip: &Hip,
    host: *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> Result<()> {
    let register = hip.hipHostRegister()?;
    // SAFETY: the caller's promise that the range stays allocated while registered.
    check("hipHostRegister", unsafe { register(host, bytes, flags) })
}

/// hipHostUnregister: unpins the registration that starts at `host`.
///
/// # Safety
/// No work still to run reaches the registered range through a device address.
pub unsafe fn host_unregister(hip: &Hip, host: *mut c_void) -> Result<()> {
    let unregister = hip.hipHostUnregister()?;
    // SAFETY: the caller's promise that no pending work reaches the range.
    check("hipHostUnregister", unsafe { unregister(host) })
}

/// hipHostGetDevicePointer: the current device's address of the pinned host memory at `host`.
pub fn host_device_pointer(hip: &Hip, host: usize) -> Result<usize> {
    let get = hip.hipHostGetDevicePointer()?;
    let mut address = ptr::null_mut();
    // SAFETY: `address` is valid for writes; HIP only looks `host` up (flags 0).
    check("hipHostGetDevicePointer", unsafe {
        get(&mut address, host as *mut c_void, 0)
    })?;
    Ok(address as usize)
}

/// hipPointerGetAttributes: what HIP knows about the memory at `address` (its device pointer,
/// type, device).
pub fn attributes_of(hip: &Hip, address: usize) -> Result<sys::hipPointerAttribute_t> {
    let get = hip.hipPointerGetAttributes()?;
    let mut attributes = sys::hipPointerAttribute_t::default();
    // SAFETY: `attributes` is valid for writes; HIP only looks `address` up.
    check("hipPointerGetAttributes", unsafe {
        get(&mut attributes, address as *const c_void)
    })?;
    Ok(attributes)
}

/// What [`range_of`] reports about an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerRange {
    /// `hipMemoryType*`.
    pub memory_type: c_uint,
    /// The start of the allocation (or registration) the address lies in.
    pub start: usize,
    /// Its size in bytes.
    pub size: usize,
}

/// One hipDrvPointerGetAttributes for the memory type and the allocation's range of `address`
/// (unknown memory is `hipErrorInvalidValue`).
pub fn range_of(hip: &Hip, address: usize) -> Result<PointerRange> {
    let get = hip.hipDrvPointerGetAttributes()?;
    let mut range = PointerRange {
        memory_type: 0,
        start: 0,
        size: 0,
    };
    let mut attributes = [
        sys::HIP_POINTER_ATTRIBUTE_MEMORY_TYPE,
        sys::HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        sys::HIP_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut values: [*mut c_void; 3] = [
        (&raw mut range.memory_type).cast(),
        (&raw mut range.start).cast(),
        (&raw mut range.size).cast(),
    ];
    // SAFETY: one out-parameter per attribute, each of that attribute's type (unsigned int,
    // a pointer, size_t); HIP only looks `address` up.
    check("hipDrvPointerGetAttributes", unsafe {
        get(
            attributes.len() as c_uint,
            attributes.as_mut_ptr(),
            values.as_mut_ptr(),
            address as *mut c_void,
        )
    })?;
    Ok(range)
}

/// hipMemcpyAsync: copies `bytes` from `src` to `dst` in `stream`'s order (`kind`:
/// `hipMemcpyDefault` finds each side's memory from its address).
///
/// # Safety
/// `[src, src + bytes)` is valid for reads and `[dst, dst + bytes)` for writes until the copy
/// has completed, and nothing else writes either meanwhile (or reads the destination); `stream`
/// is a live stream (or a default-stream handle).
pub unsafe fn copy_async(
    hip: &Hip,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: sys::hipMemcpyKind,
    stream: sys::hipStream_t,
) -> Result<()> {
    let copy = hip.hipMemcpyAsync()?;
    // SAFETY: the caller's promise for both ranges and the stream.
    check("hipMemcpyAsync", unsafe {
        copy(dst, src, bytes, kind, stream)
    })
}

/// hipMemcpyPeerAsync: copies `bytes` from memory of device `src_ordinal` to memory of device
/// `dst_ordinal` in `stream`'s order.
///
/// # Safety
/// As [`copy_async`], with each range memory of its device.
pub unsafe fn copy_peer_async(
    hip: &Hip,
    dst: *mut c_void,
    dst_ordinal: c_int,
    src: *const c_void,
    src_ordinal: c_int,
    bytes: usize,
    stream: sys::hipStream_t,
) -> Result<()> {
    let copy = hip.hipMemcpyPeerAsync()?;
    // SAFETY: the caller's promise for both ranges and the stream.
    check("hipMemcpyPeerAsync", unsafe {
        copy(dst, dst_ordinal, src, src_ordinal, bytes, stream)
    })
}

/// hipMemsetD8Async: sets `count` bytes at `dst` to `value` in `stream`'s order.
///
/// # Safety
/// `[dst, dst + count)` is memory the device can reach, valid for writes until the fill has
/// completed and not touched by anything else meanwhile; `stream` is a live stream (or a
/// default-stream handle).
pub unsafe fn set_d8_async(
    hip: &Hip,
    dst: sys::hipDeviceptr_t,
    value: u8,
    count: usize,
    stream: sys::hipStream_t,
) -> Result<()> {
    let set = hip.hipMemsetD8Async()?;
    // SAFETY: the caller's promise for the range and the stream.
    check("hipMemsetD8Async", unsafe {
        set(dst, value, count, stream)
    })
}

/// hipMemsetD16Async: sets `count` 16-bit elements at `dst` (2-byte aligned) to `value`.
///
/// # Safety
/// As [`set_d8_async`], for `2 * count` bytes.
pub unsafe fn set_d16_async(
    hip: &Hip,
    dst: sys::hipDeviceptr_t,
    value: u16,
    count: usize,
    stream: sys::hipStream_t,
) -> Result<()> {
    let set = hip.hipMemsetD16Async()?;
    // SAFETY: the caller's promise for the range and the stream.
    check("hipMemsetD16Async", unsafe {
        set(dst, value, count, stream)
    })
}

/// hipMemsetD32Async: sets `count` 32-bit elements at `dst` (4-byte aligned) to `value` (HIP
/// declares it an `int`: the same bits).
///
/// # Safety
/// As [`set_d8_async`], for `4 * count` bytes.
pub unsafe fn set_d32_async(
    hip: &Hip,
    dst: sys::hipDeviceptr_t,
    value: u32,
    count: usize,
    stream: sys::hipStream_t,
) -> Result<()> {
    let set = hip.hipMemsetD32Async()?;
    // SAFETY: the caller's promise for the range and the stream.
    check("hipMemsetD32Async", unsafe {
        set(dst, value as c_int, count, stream)
    })
}

/// hipMemPoolSetAttribute(`hipMemPoolAttrReleaseThreshold`): how many bytes `pool` keeps
/// reserved at a synchronisation instead of giving them back.
///
/// # Safety
/// `pool` is a live memory pool.
pub unsafe fn set_pool_release_threshold(
    hip: &Hip,
    pool: sys::hipMemPool_t,
    bytes: u64,
) -> Result<()> {
    let set = hip.hipMemPoolSetAttribute()?;
    let mut threshold = bytes;
    // SAFETY: the attribute's value is a uint64_t, which `threshold` holds; the caller's
    // promise for the pool.
    check("hipMemPoolSetAttribute", unsafe {
        set(
            pool,
            sys::hipMemPoolAttrReleaseThreshold,
            (&raw mut threshold).cast(),
        )
    })
}

/// hipMemPoolSetAccess: who may reach `pool`'s memory, and how.
///
/// # Safety
/// `pool` is a live memory pool.
pub unsafe fn set_pool_access(
    hip: &Hip,
    pool: sys::hipMemPool_t,
    access: &[sys::hipMemAccessDesc],
) -> Result<()> {
    let set = hip.hipMemPoolSetAccess()?;
    // SAFETY: `access` is readable for its length; the caller's promise for the pool.
    check("hipMemPoolSetAccess", unsafe {
        set(pool, access.as_ptr(), access.len())
    })
}
