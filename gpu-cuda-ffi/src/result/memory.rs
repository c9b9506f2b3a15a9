//! Memory: device, managed and pinned host allocations, stream-ordered allocation from pools,
//! host registration, copies and fills, and what the driver knows about an address.

use core::ffi::{c_uint, c_void};
use core::ptr;

use gpu_core::Result;

use crate::driver::Driver;
use crate::result::check;
use crate::sys;

/// cuMemAlloc: `bytes` of device memory of the current context (out of memory is
/// `CUDA_ERROR_OUT_OF_MEMORY`).
pub fn alloc(driver: &Driver, bytes: usize) -> Result<sys::CUdeviceptr> {
    let alloc = driver.cuMemAlloc()?;
    let mut address = 0;
    // SAFETY: `address` is valid for writes.
    check("cuMemAlloc", unsafe { alloc(&mut address, bytes) })?;
    Ok(address)
}

/// cuMemAllocManaged: `bytes` of managed memory (`flags`: `CU_MEM_ATTACH_GLOBAL` for memory
/// every stream may use).
pub fn alloc_managed(driver: &Driver, bytes: usize, flags: c_uint) -> Result<sys::CUdeviceptr> {
    let alloc = driver.cuMemAllocManaged()?;
    let mut address = 0;
    // SAFETY: `address` is valid for writes; the driver checks the flags.
    check("cuMemAllocManaged", unsafe {
        alloc(&mut address, bytes, flags)
    })?;
    Ok(address)
}

/// cuMemHostAlloc: `bytes` of page-locked host memory (`flags`: `CU_MEMHOSTALLOC_*`).
pub fn alloc_host(driver: &Driver, bytes: usize, flags: c_uint) -> Result<*mut c_void> {
    let alloc = driver.cuMemHostAlloc()?;
    let mut address = ptr::null_mut();
    // SAFETY: `address` is valid for writes; the driver checks the flags.
    check("cuMemHostAlloc", unsafe {
        alloc(&mut address, bytes, flags)
    })?;
    Ok(address)
}

/// cuMemAllocFromPoolAsync: `bytes` of device memory from `pool`, in `stream`'s order.
///
/// # Safety
/// `pool` is a live memory pool and `stream` a live stream of the current context (or a
/// default-stream handle).
pub unsafe fn alloc_from_pool_async(
    driver: &Driver,
    bytes: usize,
    pool: sys::CUmemoryPool,
    stream: sys::CUstream,
) -> Result<sys::CUdeviceptr> {
    let alloc = driver.cuMemAllocFromPoolAsync()?;
    let mut address = 0;
    // SAFETY: `address` is valid for writes; the caller's promise for the pool and the stream.
    check("cuMemAllocFromPoolAsync", unsafe {
        alloc(&mut address, bytes, pool, stream)
    })?;
    Ok(address)
}

/// cuMemAllocAsync: `bytes` of device memory from the current device's pool, in `stream`'s
/// order.
///
/// # Safety
/// `stream` is a live stream of the current context (or a default-stream handle).
pub unsafe fn alloc_async(
    driver: &Driver,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<sys::CUdeviceptr> {
    let alloc = driver.cuMemAllocAsync()?;
    let mut address = 0;
    // SAFETY: `address` is valid for writes; the caller's promise for the stream.
    check("cuMemAllocAsync", unsafe {
        alloc(&mut address, bytes, stream)
    })?;
    Ok(address)
}

/// cuMemFree: frees device or managed memory (memory of a pool is freed at once, as in the
/// legacy default stream's order).
///
/// # Safety
/// `address` is the start of a live allocation of cuMemAlloc, cuMemAllocManaged or a pool, no
/// work still to run uses it, and nothing uses it afterwards.
pub unsafe fn free(driver: &Driver, address: sys::CUdeviceptr) -> Result<()> {
    let free = driver.cuMemFree()?;
    // SAFETY: the caller's promise that the allocation is live and unused.
    check("cuMemFree", unsafe { free(address) })
}

/// cuMemFreeHost: frees memory of cuMemHostAlloc.
///
/// # Safety
/// `host` is the start of a live allocation of cuMemHostAlloc, no work still to run uses it,
/// and nothing uses it afterwards.
pub unsafe fn free_host(driver: &Driver, host: *mut c_void) -> Result<()> {
    let free = driver.cuMemFreeHost()?;
    // SAFETY: the caller's promise that the allocation is live and unused.
    check("cuMemFreeHost", unsafe { free(host) })
}

/// cuMemFreeAsync: frees device memory once the work enqueued on `stream` before it has
/// finished (a null stream: the legacy default stream).
///
/// # Safety
/// `address` is the start of a live device allocation that no work outside `stream`'s order
/// still uses and nothing uses afterwards; `stream` is a live stream of the current context
/// (or a default-stream handle).
pub unsafe fn free_async(
    driver: &Driver,
    address: sys::CUdeviceptr,
    stream: sys::CUstream,
) -> Result<()> {
    let free = driver.cuMemFreeAsync()?;
    // SAFETY: the caller's promise for the allocation and the stream.
    check("cuMemFreeAsync", unsafe { free(address, stream) })
}

/// cuMemHostRegister: page-locks `[host, host + bytes)` for the devices' DMA (`flags`:
/// `CU_MEMHOSTREGISTER_*`).
///
/// # Safety
/// The range is host memory of the process that stays allocated until it is unregistered.
pub unsafe fn host_register(
    driver: &Driver,
    host: *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> Result<()> {
    let register = driver.cuMemHostRegister()?;
    // SAFETY: the caller's promise that the range stays allocated while registered.
    check("cuMemHostRegister", unsafe { register(host, bytes, flags) })
}

/// cuMemHostUnregister: unpins the registration that starts at `host`.
///
/// # Safety
/// No work still to run reaches the registered range through a device address.
pub unsafe fn host_unregister(driver: &Driver, host: *mut c_void) -> Result<()> {
    let unregister = driver.cuMemHostUnregister()?;
    // SAFETY: the caller's promise that no pending work reaches the range.
    check("cuMemHostUnregister", unsafe { unregister(host) })
}

/// cuMemHostGetDevicePointer: the current context's device address of the pinned host memory
/// at `host`.
pub fn host_device_pointer(driver: &Driver, host: usize) -> Result<sys::CUdeviceptr> {
    let get = driver.cuMemHostGetDevicePointer()?;
    let mut address = 0;
    // SAFETY: `address` is valid for writes; the driver only looks `host` up (flags 0).
    check("cuMemHostGetDevicePointer", unsafe {
        get(&mut address, host as *mut c_void, 0)
    })?;
    Ok(address)
}

/// cuMemcpyAsync: copies `bytes` from `src` to `dst` (any memory the driver knows; host
/// memory the driver does not know is read or written by the host) in `stream`'s order.
///
/// # Safety
/// `[src, src + bytes)` is valid for reads and `[dst, dst + bytes)` for writes until the copy
/// has completed, and nothing else writes either meanwhile (or reads the destination); `stream`
/// is a live stream of the current context (or a default-stream handle).
pub unsafe fn copy_async(
    driver: &Driver,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    let copy = driver.cuMemcpyAsync()?;
    // SAFETY: the caller's promise for both ranges and the stream.
    check("cuMemcpyAsync", unsafe { copy(dst, src, bytes, stream) })
}

/// cuMemcpyPeerAsync: copies `bytes` from memory of context `src_context` to memory of
/// `dst_context` in `stream`'s order.
///
/// # Safety
/// As [`copy_async`], with each range memory of its context, both contexts live.
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_peer_async(
    driver: &Driver,
    dst: sys::CUdeviceptr,
    dst_context: sys::CUcontext,
    src: sys::CUdeviceptr,
    src_context: sys::CUcontext,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    let copy = driver.cuMemcpyPeerAsync()?;
    // SAFETY: the caller's promise for both ranges, both contexts and the stream.
    check("cuMemcpyPeerAsync", unsafe {
        copy(dst, dst_context, src, src_context, bytes, stream)
    })
}

/// cuMemcpyHtoDAsync: copies `bytes` of host memory to device memory in `stream`'s order.
///
/// # Safety
/// As [`copy_async`].
pub unsafe fn copy_host_to_device_async(
    driver: &Driver,
    dst: sys::CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    let copy = driver.cuMemcpyHtoDAsync()?;
    // SAFETY: the caller's promise for both ranges and the stream.
    check("cuMemcpyHtoDAsync", unsafe {
        copy(dst, src, bytes, stream)
    })
}

/// cuMemcpyDtoHAsync: copies `bytes` of device memory to host memory in `stream`'s order.
///
/// # Safety
/// As [`copy_async`].
pub unsafe fn copy_device_to_host_async(
    driver: &Driver,
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    let copy = driver.cuMemcpyDtoHAsync()?;
    // SAFETY: the caller's promise for both ranges and the stream.
    check("cuMemcpyDtoHAsync", unsafe {
        copy(dst, src, bytes, stream)
    })
}

/// cuMemsetD8Async: sets `count` bytes at `dst` to `value` in `stream`'s order.
///
/// # Safety
/// `[dst, dst + count)` is memory the device can reach, valid for writes until the fill has
/// completed and not touched by anything else meanwhile; `stream` is a live stream of the
/// current context (or a default-stream handle).
pub unsafe fn set_d8_async(
    driver: &Driver,
    dst: sys::CUdeviceptr,
    value: u8,
    count: usize,
    stream: sys::CUstream,
) -> Result<()> {
    let set = driver.cuMemsetD8Async()?;
    // SAFETY: the caller's promise for the range and the stream.
    check("cuMemsetD8Async", unsafe { set(dst, value, count, stream) })
}

/// cuMemsetD16Async: sets `count` 16-bit elements at `dst` (2-byte aligned) to `value`.
///
/// # Safety
/// As [`set_d8_async`], for `2 * count` bytes.
pub unsafe fn set_d16_async(
    driver: &Driver,
    dst: sys::CUdeviceptr,
    value: u16,
    count: usize,
    stream: sys::CUstream,
) -> Result<()> {
    let set = driver.cuMemsetD16Async()?;
    // SAFETY: the caller's promise for the range and the stream.
    check("cuMemsetD16Async", unsafe {
        set(dst, value, count, stream)
    })
}

/// cuMemsetD32Async: sets `count` 32-bit elements at `dst` (4-byte aligned) to `value`.
///
/// # Safety
/// As [`set_d8_async`], for `4 * count` bytes.
pub unsafe fn set_d32_async(
    driver: &Driver,
    dst: sys::CUdeviceptr,
    value: u32,
    count: usize,
    stream: sys::CUstream,
) -> Result<()> {
    let set = driver.cuMemsetD32Async()?;
    // SAFETY: the caller's promise for the range and the stream.
    check("cuMemsetD32Async", unsafe {
        set(dst, value, count, stream)
    })
}

/// cuPointerGetAttribute(`MEMPOOL_HANDLE`): the pool `address` was allocated from, null for
/// memory of no pool.
pub fn memory_pool_of(driver: &Driver, address: sys::CUdeviceptr) -> Result<sys::CUmemoryPool> {
    let mut pool: sys::CUmemoryPool = ptr::null_mut();
    // SAFETY: the attribute's value is a CUmemoryPool, which `pool` holds.
    unsafe {
        pointer_attribute(
            driver,
            (&raw mut pool).cast(),
            sys::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            address,
        )
    }?;
    Ok(pool)
}

/// cuPointerGetAttribute(`DEVICE_POINTER`): the current context's device address of `address`.
pub fn device_pointer_of(driver: &Driver, address: sys::CUdeviceptr) -> Result<sys::CUdeviceptr> {
    let mut device_pointer: sys::CUdeviceptr = 0;
    // SAFETY: the attribute's value is a CUdeviceptr, which `device_pointer` holds.
    unsafe {
        pointer_attribute(
            driver,
            (&raw mut device_pointer).cast(),
            sys::CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
            address,
        )
    }?;
    Ok(device_pointer)
}

/// cuPointerGetAttribute(`MEMORY_TYPE`): the kind of memory at `address`
/// (`CU_MEMORYTYPE_HOST`, `_DEVICE`, ...).
pub fn memory_type_of(driver: &Driver, address: sys::CUdeviceptr) -> Result<c_uint> {
    let mut memory_type: c_uint = 0;
    // SAFETY: the attribute's value is an unsigned int, which `memory_type` holds.
    unsafe {
        pointer_attribute(
            driver,
            (&raw mut memory_type).cast(),
            sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            address,
        )
    }?;
    Ok(memory_type)
}

/// cuPointerGetAttribute into `value`.
///
/// # Safety
/// `value` is valid for writes of `attribute`'s value type.
unsafe fn pointer_attribute(
    driver: &Driver,
    value: *mut c_void,
    attribute: sys::CUpointer_attribute,
    address: sys::CUdeviceptr,
) -> Result<()> {
    let get = driver.cuPointerGetAttribute()?;
    // SAFETY: the caller's promise for `value`; the driver only looks `address` up.
    check("cuPointerGetAttribute", unsafe {
        get(value, attribute, address)
    })
}

/// What [`range_of`] reports about an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerRange {
    /// `CU_MEMORYTYPE_*`, or 0 for memory the driver does not know.
    pub memory_type: c_uint,
    /// The start of the allocation (or registration) the address lies in.
    pub start: sys::CUdeviceptr,
    /// Its size in bytes.
    pub size: usize,
}

/// One cuPointerGetAttributes for the memory type and the allocation's range of `address`
/// (unknown memory: type 0; older drivers say `CUDA_ERROR_INVALID_VALUE`).
pub fn range_of(driver: &Driver, address: sys::CUdeviceptr) -> Result<PointerRange> {
    let get = driver.cuPointerGetAttributes()?;
    let mut range = PointerRange {
        memory_type: 0,
        start: 0,
        size: 0,
    };
    let mut attributes = [
        sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        sys::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        sys::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut values: [*mut c_void; 3] = [
        (&raw mut range.memory_type).cast(),
        (&raw mut range.start).cast(),
        (&raw mut range.size).cast(),
    ];
    // SAFETY: one out-parameter per attribute, each of that attribute's type (unsigned int,
    // CUdeviceptr, size_t); the driver only looks `address` up.
    check("cuPointerGetAttributes", unsafe {
        get(
            attributes.len() as c_uint,
            attributes.as_mut_ptr(),
            values.as_mut_ptr(),
            address,
        )
    })?;
    Ok(range)
}

/// cuMemPoolSetAttribute(`RELEASE_THRESHOLD`): how many bytes `pool` keeps reserved at a
/// synchronisation instead of giving them back to the system.
///
/// # Safety
/// `pool` is a live memory pool.
pub unsafe fn set_pool_release_threshold(
    driver: &Driver,
    pool: sys::CUmemoryPool,
    bytes: u64,
) -> Result<()> {
    let set = driver.cuMemPoolSetAttribute()?;
    let mut threshold = bytes;
    // SAFETY: the attribute's value is a cuuint64_t, which `threshold` holds; the caller's
    // promise for the pool.
    check("cuMemPoolSetAttribute", unsafe {
        set(
            pool,
            sys::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut threshold).cast(),
        )
    })
}

/// cuMemPoolSetAccess: who may reach `pool`'s memory, and how.
///
/// # Safety
/// `pool` is a live memory pool.
pub unsafe fn set_pool_access(
    driver: &Driver,
    pool: sys::CUmemoryPool,
    access: &[sys::CUmemAccessDesc],
) -> Result<()> {
    let set = driver.cuMemPoolSetAccess()?;
    // SAFETY: `access` is readable for its length; the caller's promise for the pool.
    check("cuMemPoolSetAccess", unsafe {
        set(pool, access.as_ptr(), access.len())
    })
}
