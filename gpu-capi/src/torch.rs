//! PyTorch's pluggable allocator: `gpurt_torch_alloc` / `gpurt_torch_free` with the signatures
//! `torch.cuda.memory.CUDAPluggableAllocator` loads, and `gpurt_torch_stats` for ctypes.
//!
//! Each call translates PyTorch's arguments (a byte count, a device index, its `cudaStream_t`)
//! and goes to the process-wide runtime's allocation in the order of a foreign stream
//! ([`Runtime::alloc_on_foreign_stream`]): every PyTorch stream, the legacy default stream `0`
//! and the per-thread default stream included, gets a lane of its own in the caching allocator,
//! which decides everything (same-stream reuse at once, cross-stream reuse after an event, the
//! out-of-memory ladder). On the CUDA backend the memory comes from the devices' primary
//! contexts, the ones PyTorch uses. Any thread may call (autograd's backward threads do).
//!
//! Failures cross the boundary as PyTorch's contract allows: `gpurt_torch_alloc` returns NULL
//! (the message is in `gpurt_last_error()`), `gpurt_torch_free` returns nothing (a refused free,
//! such as a double free, only records its message). Setting `GPU_RUNTIME_TRACE` before the
//! first call records the stream/event calls, as for every client of the library. When
//! gpu-recorder records the process (`CUDA_INJECTION64_PATH`), each block handed out, freed
//! and marked used on another stream is also a `block_alloc`, `block_free` or `block_use` of
//! the allocator `gpurt` in its trace, beside the kernels that use the block
//! ([`recorder`](crate::shared::recorder)); otherwise that costs a cached null check.
//!
//! [`Runtime::alloc_on_foreign_stream`]: gpu_runtime::runtime::Runtime::alloc_on_foreign_stream

use core::ffi::{c_int, c_void};
use core::ptr;

use gpu_runtime::allocator::{AllocatorStats, MemoryKind};
use gpu_runtime::error::Error;
use gpu_runtime::id::DeviceId;

use crate::shared::args::non_null;
use crate::shared::recorder::{BlockEvent, block_event};
use crate::shared::{
    CapiError, ClientBackend, GpurtStatus, Session, dispatch, guarded, status_of,
    with_open_session, with_session,
};

/// The device-memory figures of one device, as `gpurt_torch_stats` writes them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtTorchStats {
    /// Bytes of blocks handed out and not yet freed (after rounding).
    pub allocated: u64,
    /// Highest `allocated` seen.
    pub peak_allocated: u64,
    /// Bytes held from the driver (all segments).
    pub reserved: u64,
    /// Highest `reserved` seen.
    pub peak_reserved: u64,
    /// Requests served from the cache (same stream, or a block no work can be using).
    pub hits: u64,
    /// Requests served with a block freed on another stream (after its event).
    pub cross_stream_hits: u64,
    /// Requests that needed a new segment from the driver.
    pub misses: u64,
    /// Driver calls of every kind the allocator made (segments, events, waits).
    pub driver_calls: u64,
    /// Segments obtained from the driver.
    pub segment_allocations: u64,
    /// Segments returned to the driver.
    pub segment_frees: u64,
    /// Retries after a rung of the out-of-memory ladder.
    pub oom_retries: u64,
    /// Requests that failed with out of memory after the whole ladder.
    pub oom_errors: u64,
}

impl From<&AllocatorStats> for GpurtTorchStats {
    fn from(stats: &AllocatorStats) -> Self {
        // usize is at most 64 bits on every target the library builds for.
        let bytes = |value: usize| value as u64;
        Self {
            allocated: bytes(stats.allocated),
            peak_allocated: bytes(stats.peak_allocated),
            reserved: bytes(stats.reserved),
            peak_reserved: bytes(stats.peak_reserved),
            hits: stats.hits,
            cross_stream_hits: stats.cross_stream_hits,
            misses: stats.misses,
            driver_calls: stats.driver_calls,
            segment_allocations: stats.segment_allocations,
            segment_frees: stats.segment_frees,
            oom_retries: stats.oom_retries,
            oom_errors: stats.oom_errors,
        }
    }
}

/// PyTorch's device index as a device id (negative indices are refused).
fn device_id(device: c_int) -> Result<DeviceId, CapiError> {
    u32::try_from(device)
        .map(DeviceId)
        .map_err(|_| CapiError::InvalidArgument {
            what: "device",
            detail: format!("{device} is negative; PyTorch's device indices start at 0"),
        })
}

/// PyTorch's byte count (an `ssize_t`) as a size (negative sizes are refused).
fn byte_count(size: isize) -> Result<usize, CapiError> {
    usize::try_from(size).map_err(|_| CapiError::InvalidArgument {
        what: "size",
        detail: format!("{size} bytes is negative"),
    })
}

/// Allocates `size` bytes of device memory on `device` for work on PyTorch's stream `stream`
/// (its `cudaStream_t`: `0` is the legacy default stream). Returns NULL for a size of 0 (as
/// PyTorch's own allocator does, with no error) and on failure: a negative size or device, an
/// unknown device, or out of memory after the allocator's out-of-memory ladder (the message,
/// with requested, reserved, allocated and largest free block, is in `gpurt_last_error()`).
///
/// Thread safety: any thread; a cache hit takes only `device`'s memory lock.
///
/// # Safety
/// `stream` is a live stream of `device`'s primary context (or a default-stream handle) that
/// stays alive for as long as the process-wide runtime is open, as PyTorch's streams do.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_torch_alloc(
    size: isize,
    device: c_int,
    stream: *mut c_void,
) -> *mut c_void {
    guarded(ptr::null_mut(), || {
        let size = byte_count(size)?;
        if size == 0 {
            return Ok(ptr::null_mut());
        }
        let device = device_id(device)?;
        let address = with_session(|s| dispatch!(s, s => allocate(s, device, size, stream)))?;
        block_event(BlockEvent::Alloc, address, size, stream as usize);
        Ok(address as *mut c_void)
    })
}

/// Frees memory from `gpurt_torch_alloc` (`ptr`, with the `size` and `device` it was allocated
/// with) in the order of PyTorch's stream `stream`: all work using it was enqueued there. The
/// block is reusable on that stream at once, on others after an event. NULL is ignored (the
/// allocation of 0 bytes). A refused free (an address that is no live allocation of `device`,
/// a double free included, or another size) changes nothing and records its message in
/// `gpurt_last_error()`: PyTorch's contract gives a free no way to fail. A free while no
/// runtime is open (after `gpurt_shutdown`, which gave all memory back) opens none: it records
/// `GPURT_STATUS_NOT_OPEN`'s message.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `gpurt_torch_alloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_torch_free(
    ptr: *mut c_void,
    size: isize,
    device: c_int,
    stream: *mut c_void,
) {
    guarded((), || {
        if ptr.is_null() {
            return Ok(());
        }
        let (size, device) = (byte_count(size)?, device_id(device)?);
        // Told before the block can be handed out again (by another thread, at once); a free
        // the runtime then refuses (a double free) is a block_free of a block not handed out.
        block_event(BlockEvent::Free, ptr as usize, size, stream as usize);
        with_open_session(|s| dispatch!(s, s => release(s, device, ptr as usize, size, stream)))
    })
}

/// Records that the memory at `ptr` (from `gpurt_torch_alloc`, on any device) is also used by
/// work enqueued on `stream` (PyTorch's `recordStream`): when it is freed, it is reused only
/// after that work too. For C++ programs that install it with
/// `CUDAPluggableAllocator::set_record_stream_fn` (Python has no way to). An address that is
/// no live allocation records an error and changes nothing.
///
/// Thread safety: any thread.
///
/// # Safety
/// `stream` is a live stream of the allocation's device (as for `gpurt_torch_alloc`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_torch_record_stream(ptr: *mut c_void, stream: *mut c_void) {
    guarded((), || {
        with_open_session(|s| dispatch!(s, s => record_stream(s, ptr as usize, stream)))?;
        block_event(BlockEvent::Use, ptr as usize, 0, stream as usize);
        Ok(())
    })
}

/// Gives every cached block that no work can still use back to the driver (PyTorch's
/// `emptyCache`; C++ programs install it with `CUDAPluggableAllocator::set_reset_fn`). Does
/// nothing while no runtime is open; a failure records its message.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_torch_empty_cache() {
    guarded((), || {
        with_open_session(|s| dispatch!(s, s => s.runtime().trim().map(drop).map_err(Into::into)))
            .or_else(|error| match error {
                CapiError::NotOpen => Ok(()),
                other => Err(other),
            })
    })
}

/// Writes `device`'s device-memory figures into `*out` (for ctypes: allocated, reserved, peak
/// reserved, hits, misses, driver calls, ...). Returns `GPURT_STATUS_OK`, or
/// `GPURT_STATUS_NULL_POINTER`, `GPURT_STATUS_INVALID_ARGUMENT` (a negative device) or
/// `GPURT_STATUS_UNKNOWN_DEVICE`, leaving `*out` unwritten.
///
/// Thread safety: any thread; takes every device's memory lock in turn.
///
/// # Safety
/// `out` is NULL or valid for writing one `GpurtTorchStats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_torch_stats(
    device: c_int,
    out: *mut GpurtTorchStats,
) -> GpurtStatus {
    status_of(|| {
        non_null(out, "stats out")?;
        let device = device_id(device)?;
        let stats = with_session(|s| dispatch!(s, s => device_stats(s, device)))?;
        // SAFETY: the caller's promise: `out` is valid for one write.
        unsafe { out.write(stats) };
        Ok(())
    })
}

fn allocate<B: ClientBackend>(
    session: &Session<B>,
    device: DeviceId,
    size: usize,
    stream: *mut c_void,
) -> Result<usize, CapiError> {
    // SAFETY: the exported function's caller vouches for the stream.
    let address = unsafe {
        session
            .runtime()
            .alloc_on_foreign_stream(device, MemoryKind::Device, size, stream as usize)
    }?;
    Ok(address)
}

fn release<B: ClientBackend>(
    session: &Session<B>,
    device: DeviceId,
    address: usize,
    size: usize,
    stream: *mut c_void,
) -> Result<(), CapiError> {
    // SAFETY: the exported function's caller vouches for the stream.
    unsafe {
        session
            .runtime()
            .free_on_foreign_stream(device, address, size, stream as usize)
    }?;
    Ok(())
}

fn record_stream<B: ClientBackend>(
    session: &Session<B>,
    address: usize,
    stream: *mut c_void,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    // PyTorch names no device here: the allocation's device is the one that holds it.
    for index in 0..runtime.device_count() {
        // SAFETY: the exported function's caller vouches for the stream.
        match unsafe {
            runtime.mark_used_on_foreign_stream(DeviceId(index as u32), address, stream as usize)
        } {
            Err(Error::UnknownAddress { .. }) => continue,
            recorded => return Ok(recorded?),
        }
    }
    Err(CapiError::InvalidArgument {
        what: "ptr",
        detail: format!("{address:#x} is no live allocation of any device"),
    })
}

fn device_stats<B: ClientBackend>(
    session: &Session<B>,
    device: DeviceId,
) -> Result<GpurtTorchStats, CapiError> {
    let stats = session
        .runtime()
        .allocator_stats(device, MemoryKind::Device)?;
    Ok(GpurtTorchStats::from(&stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::status::last_error;
    use crate::shared::{AnySession, open_host, process_test_lock, shutdown};
    use gpu_runtime::backend::Backend;
    use gpu_runtime::host::HostBackend;
    use gpu_runtime::runtime::with_device;

    /// Opens the host backend and creates `count` streams on `device` behind the runtime's
    /// back, as PyTorch creates its own; returns them as PyTorch passes them (raw handles).
    fn host_with_streams(device: DeviceId, count: usize) -> Vec<*mut c_void> {
        open_host();
        with_session(|session| {
            let AnySession::Host(session) = session else {
                panic!("the host backend was asked for");
            };
            let backend: &HostBackend = session.runtime().backend();
            Ok((0..count)
                .map(|_| {
                    let stream =
                        with_device(backend, device, || backend.stream_create(device)).unwrap();
                    stream.raw() as *mut c_void
                })
                .collect())
        })
        .unwrap()
    }

    // The tests call the exported functions only through these, with streams that
    // `host_with_streams` made.

    /// `gpurt_torch_alloc` on one of the tests' streams.
    fn alloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
        // SAFETY: `stream` is one `host_with_streams` made, alive until the runtime shuts down;
        // the host backend checks a stream handle before it uses one, so a stream passed with
        // another device's index (or after the shutdown) is refused, never used.
        unsafe { gpurt_torch_alloc(size, device, stream) }
    }

    /// `gpurt_torch_free` on one of the tests' streams.
    fn free(ptr: *mut c_void, size: isize, device: c_int, stream: *mut c_void) {
        // SAFETY: as in `alloc`.
        unsafe { gpurt_torch_free(ptr, size, device, stream) }
    }

    /// `gpurt_torch_record_stream` on one of the tests' streams.
    fn record_stream(ptr: *mut c_void, stream: *mut c_void) {
        // SAFETY: as in `alloc`.
        unsafe { gpurt_torch_record_stream(ptr, stream) }
    }

    fn stats(device: c_int) -> GpurtTorchStats {
        let mut out = GpurtTorchStats::default();
        // SAFETY: `out` is valid for one write.
        let status = unsafe { gpurt_torch_stats(device, &mut out) };
        assert_eq!(status, GpurtStatus::Ok);
        out
    }

    #[test]
    fn alloc_and_free_through_the_c_symbols_reuse_per_stream() {
        let _serial = process_test_lock();
        let streams = host_with_streams(DeviceId(0), 2);
        let (s1, s2) = (streams[0], streams[1]);
        let first = alloc(4096, 0, s1);
        assert!(!first.is_null(), "{}", last_error());
        free(first, 4096, 0, s1);
        let before = stats(0);
        let again = alloc(4096, 0, s1);
        assert_eq!(again, first, "reused on its stream at once");
        let after = stats(0);
        assert_eq!(after.hits, before.hits + 1);
        assert_eq!(after.segment_allocations, before.segment_allocations);
        assert_eq!(after.allocated, 4096);
        free(again, 4096, 0, s1);
        // The other stream's first request is served from the block cached on s1, ordered
        // behind an event (s1 has no work, so its event completes).
        let other = alloc(4096, 0, s2);
        assert!(!other.is_null(), "{}", last_error());
        free(other, 4096, 0, s2);
        let end = stats(0);
        assert_eq!(end.allocated, 0);
        assert!(end.peak_reserved >= 4096 && end.reserved <= end.peak_reserved);
        let report = shutdown().unwrap();
        assert!(report.shutdown.trimmed_bytes >= 4096, "{report:?}");
    }

    #[test]
    fn bad_calls_return_null_or_record_the_error_and_change_nothing() {
        let _serial = process_test_lock();
        let streams = host_with_streams(DeviceId(0), 1);
        let s = streams[0];
        let live = alloc(1000, 0, s);
        assert!(!live.is_null());
        let before = stats(0);
        assert!(alloc(0, 0, s).is_null(), "0 bytes is NULL");
        assert!(alloc(-1, 0, s).is_null());
        assert!(last_error().contains("negative"), "{}", last_error());
        assert!(alloc(64, -1, s).is_null());
        assert!(last_error().contains("device"), "{}", last_error());
        assert!(alloc(64, 7, s).is_null());
        assert!(last_error().contains("does not exist"), "{}", last_error());
        assert!(alloc(64, 1, s).is_null(), "a stream of device 0");
        assert!(
            last_error().contains("HOST_INVALID_HANDLE"),
            "{}",
            last_error()
        );
        let huge = isize::MAX;
        assert!(alloc(huge, 0, s).is_null());
        free(live.wrapping_byte_add(512), 1000, 0, s);
        assert!(
            last_error().contains("no live allocation"),
            "{}",
            last_error()
        );
        free(live, 999, 0, s);
        assert!(last_error().contains("1000 bytes"), "{}", last_error());
        free(ptr::null_mut(), 0, 0, s);
        let mut out = GpurtTorchStats::default();
        // SAFETY: a null pointer is refused before any write.
        let status = unsafe { gpurt_torch_stats(0, ptr::null_mut()) };
        assert_eq!(status, GpurtStatus::NullPointer);
        // SAFETY: `out` is valid for one write.
        let status = unsafe { gpurt_torch_stats(9, &mut out) };
        assert_eq!(status, GpurtStatus::UnknownDevice);
        assert_eq!(out, GpurtTorchStats::default(), "not written on failure");
        let after = stats(0);
        assert_eq!(
            (after.allocated, after.reserved, after.hits),
            (before.allocated, before.reserved, before.hits),
            "a refused call changed the allocator"
        );
        free(live, 1000, 0, s);
        free(live, 1000, 0, s);
        assert!(
            last_error().contains("freed already"),
            "double free: {}",
            last_error()
        );
        assert_eq!(stats(0).allocated, 0);
        let kept = alloc(1000, 0, s);
        shutdown().unwrap();
        // PyTorch frees what it still holds at exit, after a shutdown: refused, nothing opened.
        free(kept, 1000, 0, s);
        assert!(
            last_error().contains("no runtime is open"),
            "{}",
            last_error()
        );
        assert_eq!(shutdown().unwrap_err(), CapiError::NotOpen);
    }

    #[test]
    fn record_stream_and_empty_cache_through_the_c_symbols() {
        let _serial = process_test_lock();
        let streams = host_with_streams(DeviceId(1), 2);
        let (s1, s2) = (streams[0], streams[1]);
        let block = alloc(4096, 1, s1);
        record_stream(block, s2);
        assert_eq!(last_error(), "", "recorded");
        record_stream(block.wrapping_byte_add(256), s2);
        assert!(last_error().contains("any device"), "{}", last_error());
        free(block, 4096, 1, s1);
        // The free waits for an event recorded on s2 (idle, but the host backend completes a
        // record on the stream's own thread): once it has, emptying the cache gives it all back.
        for _ in 0..1000 {
            gpurt_torch_empty_cache();
            if stats(1).reserved == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let after = stats(1);
        assert_eq!((after.allocated, after.reserved), (0, 0), "{after:?}");
        shutdown().unwrap();
        gpurt_torch_empty_cache();
        assert_eq!(
            shutdown().unwrap_err(),
            CapiError::NotOpen,
            "nothing opened"
        );
    }

    /// Autograd's threads: four threads allocate and free through the C symbols, each on a
    /// stream of its own, and never hold overlapping blocks.
    #[test]
    fn threads_share_the_allocator_without_overlap() {
        let _serial = process_test_lock();
        let streams: Vec<usize> = host_with_streams(DeviceId(1), 4)
            .into_iter()
            .map(|s| s as usize)
            .collect();
        let live = std::sync::Mutex::new(std::collections::BTreeMap::<usize, usize>::new());
        std::thread::scope(|scope| {
            for (thread, &stream) in streams.iter().enumerate() {
                let live = &live;
                scope.spawn(move || {
                    let stream = stream as *mut c_void;
                    for step in 0..200usize {
                        let size = 256 + (step * 7919 + thread * 104_729) % (2 << 20);
                        let block = alloc(size as isize, 1, stream);
                        assert!(!block.is_null(), "{}", last_error());
                        let start = block as usize;
                        {
                            let mut live = live.lock().unwrap();
                            let below = live.range(..=start).next_back();
                            assert!(below.is_none_or(|(&s, &len)| s + len <= start));
                            let above = live.range(start..).next();
                            assert!(above.is_none_or(|(&s, _)| start + size <= s));
                            live.insert(start, size);
                        }
                        live.lock().unwrap().remove(&start);
                        free(block, size as isize, 1, stream);
                    }
                });
            }
        });
        assert_eq!(stats(1).allocated, 0);
        shutdown().unwrap();
    }
}
