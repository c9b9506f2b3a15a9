//! The CUDA backend's hardware benchmark: each figure of the user API (`Runtime<CudaBackend>`)
//! beside the same work done with raw driver calls in the same process and run, as one table.
//!
//! Cases: (1) device alloc+free cache hit against a warm driver pool and cuMemAlloc/cuMemFree;
//! (2) pinned host alloc+free cache hit against cuMemHostAlloc/cuMemFreeHost; (3) "is this range
//! pinned, and where?" through the lock table with 4,096 locked regions against
//! cuPointerGetAttribute; (4) streams and events from the runtime's pools against creating and
//! destroying them; (5) a k-way join against hand-written record+wait; (6) 256 MiB copies from
//! and to locked memory against raw async copies, and from and to pageable memory through the
//! runtime's staging against the driver's own pageable copies; (7) a chained kernel launch
//! against cuLaunchKernel: the host's cost per launch (short batches, so that no call waits for
//! the GPU) and the time to completion of long chains, with the backend alone and a CUkernel
//! launch beside them to show where the difference lies.
//!
//! Timing: each measurement runs one untimed warm-up batch per side, then N batches of M calls
//! per side, each batch timed with `Instant` around the calls (and the one synchronisation that
//! GPU work needs, inside the timed region); the figure is the median over batches of the batch
//! time divided by M. Where a row sets ours against a driver call of similar cost, the sides
//! are measured interleaved (a batch of each in turn, N rounds), so that drift during the run
//! (GPU clocks, driver state) reaches both alike; the cases say where they measure one side at
//! a time, and why. Device 0's primary context is current on the measuring thread throughout,
//! for both sides.
//!
//! `cargo bench` passes `--bench`: the full run (under ~3 minutes on an H200). Without it
//! (`cargo test --benches`) every case runs once with tiny batches, as a smoke test whose
//! figures mean nothing. Without a driver or a device it prints a skip line and exits 0.
//! Environment: `GIT_COMMIT` (printed in the header), `HW_BENCH_OUT` (a file that also gets the
//! table).
// The raw sides call the driver through the crate's typed calls (`result::memory::alloc` is
// cuMemAlloc), which look each entry point up in the loader's cache (one atomic load) and
// check its code, as the backend's own calls do.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::hint::black_box;
use std::process::ExitCode;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, KernelArg, LaunchDims};
use gpu_core::token::Token;
use gpu_core::{DeviceId, Error};
use gpu_cuda_ffi::{CudaBackend, Driver, check, reports_no_device, result, sys};
use gpu_ffi_loader::hw_bench::{
    KIB, MIB, Outcome, Plan, Report, Target, figure, size_text, today, whole,
};
use gpu_rt::runtime::{Arg, Runtime, RuntimeConfig};

const D0: DeviceId = DeviceId(0);

/// A non-blocking stream of the current context, destroyed on drop.
struct RawStream {
    driver: &'static Driver,
    raw: sys::CUstream,
}

impl RawStream {
    fn new(driver: &'static Driver) -> Outcome<Self> {
        let raw = result::stream::create(driver, sys::CU_STREAM_NON_BLOCKING)?;
        Ok(Self { driver, raw })
    }

    fn synchronize(&self) -> Outcome<()> {
        // SAFETY: the stream lives until `self` drops.
        Ok(unsafe { result::stream::synchronize(self.driver, self.raw) }?)
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: the stream was created by `new` and is destroyed once, here.
        let _ = unsafe { result::stream::destroy(self.driver, self.raw) };
    }
}

/// An event without timing of the current context, destroyed on drop.
struct RawEvent {
    driver: &'static Driver,
    raw: sys::CUevent,
}

impl RawEvent {
    fn new(driver: &'static Driver) -> Outcome<Self> {
        let raw = result::event::create(driver, sys::CU_EVENT_DISABLE_TIMING)?;
        Ok(Self { driver, raw })
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: the event was created by `new` and is destroyed once, here.
        let _ = unsafe { result::event::destroy(self.driver, self.raw) };
    }
}

/// What every case needs.
struct Bench<'a> {
    /// The backend, shared with the extra runtimes of the staging sweep.
    backend: &'a Arc<CudaBackend>,
    rt: &'a Runtime<CudaBackend>,
    driver: &'static Driver,
    plan: Plan,
}

impl Bench<'_> {
    /// The allocator's counters of device 0 for `kind`.
    fn allocator_stats(&self, kind: MemoryKind) -> gpu_core::allocator::AllocatorStats {
        self.rt
            .stats()
            .allocator
            .into_iter()
            .find(|&(device, k, _)| device == D0 && k == kind)
            .map(|(_, _, stats)| stats)
            .unwrap_or_default()
    }
}

/// Case 1: device memory cache hit against the warm driver pool and cuMemAlloc/cuMemFree.
fn device_alloc_free(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let stream = RawStream::new(driver)?;
    let ordinal = result::device::get(driver, 0)?;
    let pool = result::device::default_memory_pool(driver, ordinal)?;
    // SAFETY: device 0's default pool, which lives as long as its context.
    unsafe { result::memory::set_pool_release_threshold(driver, pool, u64::MAX) }?;
    let before = bench.allocator_stats(MemoryKind::Device);
    for size in [256, 64 * KIB, MIB] {
        let [ours, pool] = plan.interleaved(
            51,
            1000,
            [
                &mut whole(|calls| {
                    for _ in 0..calls {
                        let buffer = rt.alloc(D0, MemoryKind::Device, black_box(size))?;
                        rt.free(black_box(buffer))?;
                    }
                    Ok(())
                }),
                &mut whole(|calls| {
                    for _ in 0..calls {
                        // SAFETY: a live stream of the current context.
                        let address = unsafe {
                            result::memory::alloc_async(driver, black_box(size), stream.raw)
                        }?;
                        // SAFETY: the allocation just made, unused, freed in the same order.
                        unsafe {
                            result::memory::free_async(driver, black_box(address), stream.raw)
                        }?;
                    }
                    stream.synchronize()
                }),
            ],
        )?;
        // Not interleaved: cuMemAlloc + cuMemFree costs ~1,000 times a hit, far beyond any
        // drift, and the row has no target.
        let plain = plan.median_per_call(15, 40, |calls| {
            for _ in 0..calls {
                let address = result::memory::alloc(driver, black_box(size))?;
                // SAFETY: the allocation just made, unused by any work.
                unsafe { result::memory::free(driver, black_box(address)) }?;
            }
            Ok(())
        })?;
        let label = format!("alloc + free, device, {} (cache hit)", size_text(size));
        report.row(
            "1",
            label.clone(),
            ours,
            "cuMemAllocAsync + cuMemFreeAsync, warm default pool (threshold max), sync per batch",
            pool,
            None,
            Target::FasterBy(10.0),
        );
        report.row(
            "1",
            label,
            ours,
            "cuMemAlloc + cuMemFree",
            plain,
            None,
            Target::None,
        );
    }
    let after = bench.allocator_stats(MemoryKind::Device);
    report.notes.push(format!(
        "case 1: the runtime's device requests during case 1: {} hits, {} misses, {} driver calls \
         (a miss is a first request, in a warm-up batch)",
        after.hits - before.hits,
        after.misses - before.misses,
        after.driver_calls - before.driver_calls,
    ));
    Ok(())
}

/// Case 2: pinned host memory cache hit against cuMemHostAlloc/cuMemFreeHost.
fn host_pinned_alloc_free(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    // The flags the backend uses when the runtime's cache misses.
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    let before = bench.allocator_stats(MemoryKind::HostPinned);
    for size in [256, 64 * KIB, MIB] {
        let ours = plan.median_per_call(51, 2000, |calls| {
            for _ in 0..calls {
                let buffer = rt.alloc(D0, MemoryKind::HostPinned, black_box(size))?;
                rt.free(black_box(buffer))?;
            }
            Ok(())
        })?;
        // Not interleaved: a cuMemHostAlloc + cuMemFreeHost pair takes ~10,000 times a hit (it
        // maps and unmaps pages), far beyond any drift, so few and short batches suffice there
        // while the hit needs long ones; the row has no target.
        let driver_ns = plan.median_per_call(7, 10, |calls| {
            for _ in 0..calls {
                let address = result::memory::alloc_host(driver, black_box(size), flags)?;
                // SAFETY: the allocation just made, unused by any work.
                unsafe { result::memory::free_host(driver, black_box(address)) }?;
            }
            Ok(())
        })?;
        report.row(
            "2",
            format!("alloc + free, pinned host, {} (cache hit)", size_text(size)),
            ours,
            "cuMemHostAlloc(PORTABLE | DEVICEMAP) + cuMemFreeHost",
            driver_ns,
            None,
            Target::None,
        );
    }
    let after = bench.allocator_stats(MemoryKind::HostPinned);
    report.notes.push(format!(
        "case 2: the runtime's pinned host requests during case 2: {} hits, {} misses, {} driver \
         calls",
        after.hits - before.hits,
        after.misses - before.misses,
        after.driver_calls - before.driver_calls,
    ));
    Ok(())
}

/// Ranges locked through `Runtime::lock_range`, unlocked on drop (before their memory goes).
struct LockedRanges<'a> {
    rt: &'a Runtime<CudaBackend>,
    starts: Vec<usize>,
}

impl Drop for LockedRanges<'_> {
    fn drop(&mut self) {
        for &start in &self.starts {
            let _ = self.rt.unlock_range(start);
        }
    }
}

/// A small deterministic generator (xorshift64*) for query addresses.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as usize % bound
    }
}

/// Case 3: "is this range pinned, and where?" with 4,096 locked regions.
fn pinned_lookup(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let regions = plan.pick(4096, 64);
    // 32 KiB regions 64 KiB apart, from a 64 KiB-aligned start: disjoint and page-aligned with
    // 4 KiB and with 64 KiB pages, no two regions sharing a page.
    const REGION: usize = 32 * KIB;
    const STRIDE: usize = 64 * KIB;
    const QUERY_LEN: usize = 64;
    let backing = vec![1u8; regions * STRIDE + STRIDE];
    let base = (backing.as_ptr() as usize).next_multiple_of(STRIDE);
    let pins_before = rt.stats().locks.driver_pins;
    let start = Instant::now();
    let mut locked = LockedRanges {
        rt,
        starts: Vec::with_capacity(regions),
    };
    for index in 0..regions {
        let region = base + index * STRIDE;
        rt.lock_range(region, REGION)?;
        locked.starts.push(region);
    }
    let lock_time = start.elapsed();
    let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
    let queries: Vec<usize> = (0..4096)
        .map(|_| base + random.below(regions) * STRIDE + random.below(REGION - QUERY_LEN))
        .collect();
    // Both sides must give the same answer before either is timed.
    for &query in queries.iter().take(64) {
        let ours = rt.pinned_address(query, QUERY_LEN, D0)?;
        let theirs = result::memory::device_pointer_of(driver, query as sys::CUdeviceptr)?;
        if ours != Some(theirs as usize) {
            return Err(format!(
                "pinned_address({query:#x}) = {ours:x?}, the driver's device pointer {theirs:#x}"
            )
            .into());
        }
    }
    // One cursor per side, so each side walks the same addresses in the same order.
    let mut next = [0usize; 3];
    let query = |next: &mut usize| {
        let query = queries[*next % queries.len()];
        *next += 1;
        black_box(query)
    };
    let [ours_next, device_pointer_next, memory_type_next] = &mut next;
    let driver_lookup = |attribute: sys::CUpointer_attribute, query: usize| -> Outcome<()> {
        let query = query as sys::CUdeviceptr;
        match attribute {
            sys::CU_POINTER_ATTRIBUTE_DEVICE_POINTER => {
                black_box(result::memory::device_pointer_of(driver, query)?);
            }
            _ => {
                black_box(result::memory::memory_type_of(driver, query)?);
            }
        }
        Ok(())
    };
    let [ours, device_pointer, memory_type] = plan.interleaved(
        31,
        queries.len(),
        [
            &mut whole(|calls| {
                for _ in 0..calls {
                    black_box(rt.pinned_address(query(ours_next), QUERY_LEN, D0)?);
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    driver_lookup(
                        sys::CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                        query(device_pointer_next),
                    )?;
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    driver_lookup(
                        sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                        query(memory_type_next),
                    )?;
                }
                Ok(())
            }),
        ],
    )?;
    let label = format!("pinned_address(ptr, 64, device 0), {regions} locked regions, random ptr");
    for (name, driver_ns) in [
        ("DEVICE_POINTER", device_pointer),
        ("MEMORY_TYPE", memory_type),
    ] {
        report.row(
            "3",
            label.clone(),
            ours,
            format!("cuPointerGetAttribute({name}), same registered regions and addresses"),
            driver_ns,
            None,
            Target::FasterBy(4.0),
        );
    }
    report.notes.push(format!(
        "case 3: locking {regions} regions of {} took {:.0} ms ({} driver pins)",
        size_text(REGION),
        lock_time.as_secs_f64() * 1e3,
        rt.stats().locks.driver_pins - pins_before,
    ));
    drop(locked);
    drop(backing);
    Ok(())
}

/// Case 4: streams and events from the runtime's pools against creating and destroying them.
fn stream_event_pools(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let buffer = rt.alloc(D0, MemoryKind::Device, 64)?;
    let address = buffer.address() as sys::CUdeviceptr;
    let kept_stream = RawStream::new(driver)?;
    let kept_event = RawEvent::new(driver)?;
    let before = rt.stats();

    // Streams: an operation with no dependency takes a stream from the pool; waiting for its
    // token synchronises the stream and gives it back.
    let [ours, created, kept] = plan.interleaved(
        51,
        200,
        [
            &mut whole(|calls| {
                for _ in 0..calls {
                    let token = rt.fill(D0, buffer.all(), 1, &mut Vec::new())?;
                    rt.wait(token)?;
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    let stream = result::stream::create(driver, sys::CU_STREAM_NON_BLOCKING)?;
                    // SAFETY: (the three calls) the stream just created, and 64 bytes of the
                    // runtime's live buffer, which nothing else uses meanwhile.
                    unsafe {
                        result::memory::set_d8_async(driver, address, 1, 64, stream)?;
                        result::stream::synchronize(driver, stream)?;
                        result::stream::destroy(driver, stream)?;
                    }
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    // SAFETY: the kept stream, and 64 bytes of the live buffer.
                    unsafe {
                        result::memory::set_d8_async(driver, address, 1, 64, kept_stream.raw)?;
                    }
                    kept_stream.synchronize()?;
                }
                Ok(())
            }),
        ],
    )?;
    let label = "fill 64 B with no dependency (stream from the pool) + wait";
    report.row(
        "4",
        label,
        ours,
        "cuStreamCreate + cuMemsetD8Async + cuStreamSynchronize + cuStreamDestroy",
        created,
        None,
        Target::None,
    );
    report.row(
        "4",
        label,
        ours,
        "cuMemsetD8Async + cuStreamSynchronize on one kept stream (the floor)",
        kept,
        None,
        Target::None,
    );

    // Events: forking a token records an event from the pool on its stream; waiting for the
    // second branch synchronises that event and gives it back.
    let [ours, created, kept] = plan.interleaved(
        51,
        400,
        [
            &mut whole(|calls| {
                for _ in 0..calls {
                    let token = rt.fill(D0, buffer.all(), 2, &mut Vec::new())?;
                    for branch in rt.fork(token, 2)? {
                        rt.wait(branch)?;
                    }
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    // SAFETY: the kept stream, and 64 bytes of the live buffer.
                    unsafe {
                        result::memory::set_d8_async(driver, address, 2, 64, kept_stream.raw)?;
                    }
                    let event = result::event::create(driver, sys::CU_EVENT_DISABLE_TIMING)?;
                    // SAFETY: the event just created, recorded on the kept stream, waited for
                    // and destroyed.
                    unsafe {
                        result::event::record(driver, event, kept_stream.raw)?;
                        result::stream::synchronize(driver, kept_stream.raw)?;
                        result::event::synchronize(driver, event)?;
                        result::event::destroy(driver, event)?;
                    }
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    // SAFETY: the kept stream and event, and 64 bytes of the live buffer.
                    unsafe {
                        result::memory::set_d8_async(driver, address, 2, 64, kept_stream.raw)?;
                        result::event::record(driver, kept_event.raw, kept_stream.raw)?;
                        result::stream::synchronize(driver, kept_stream.raw)?;
                        result::event::synchronize(driver, kept_event.raw)?;
                    }
                }
                Ok(())
            }),
        ],
    )?;
    let label = "fill 64 B with no dependency, fork in 2 (event from the pool), wait both";
    report.row(
        "4",
        label,
        ours,
        "cuMemsetD8Async + cuEventCreate + cuEventRecord + cuStreamSynchronize + \
         cuEventSynchronize + cuEventDestroy",
        created,
        None,
        Target::None,
    );
    report.row(
        "4",
        label,
        ours,
        "the same on one kept stream and one kept event (the floor)",
        kept,
        None,
        Target::None,
    );
    let after = rt.stats();
    report.notes.push(format!(
        "case 4: the runtime handed out {} streams and {} events, of which the driver created {} \
         and {} (pool misses)",
        after.stream_acquires - before.stream_acquires,
        after.event_acquires - before.event_acquires,
        after.streams_created - before.streams_created,
        after.events_created - before.events_created,
    ));
    rt.free(buffer)?;
    Ok(())
}

/// Case 5: k tokens from k streams joined, then one operation after the join.
fn k_way_join(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    const SPAN: usize = 64;
    let buffer = rt.alloc(D0, MemoryKind::Device, 8 * SPAN)?;
    let streams = (0..8)
        .map(|_| RawStream::new(driver))
        .collect::<Outcome<Vec<_>>>()?;
    let events = (0..8)
        .map(|_| RawEvent::new(driver))
        .collect::<Outcome<Vec<_>>>()?;
    let before = rt.stats();
    for k in [2, 4, 8] {
        // Each round: k fills with no dependency between them (the first continues the previous
        // round's chain, the others take pool streams), joined, then one fill after the join.
        // The rounds chain, so one wait per batch synchronises everything.
        let [ours, raw] = plan.interleaved(
            31,
            200,
            [
                &mut whole(|rounds| {
                    let mut carry: Vec<Token> = Vec::with_capacity(1);
                    let mut tokens: Vec<Token> = Vec::with_capacity(k);
                    for _ in 0..rounds {
                        tokens.push(rt.fill(D0, buffer.span(0, SPAN)?, 1, &mut carry)?);
                        for branch in 1..k {
                            let span = buffer.span(branch * SPAN, SPAN)?;
                            tokens.push(rt.fill(D0, span, 1, &mut Vec::new())?);
                        }
                        carry.push(rt.join(&mut tokens)?);
                        let after_join = rt.fill(D0, buffer.span(0, SPAN)?, 2, &mut carry)?;
                        carry.push(after_join);
                    }
                    for token in carry {
                        rt.wait(token)?;
                    }
                    Ok(())
                }),
                &mut whole(|rounds| {
                    let base = buffer.address() as sys::CUdeviceptr;
                    // SAFETY: (the whole loop) the kept streams and events, and spans of the
                    // runtime's live buffer, which nothing else uses meanwhile.
                    unsafe {
                        for _ in 0..rounds {
                            for (branch, stream) in streams.iter().take(k).enumerate() {
                                let span = base + (branch * SPAN) as sys::CUdeviceptr;
                                result::memory::set_d8_async(driver, span, 1, SPAN, stream.raw)?;
                            }
                            for (stream, event) in streams.iter().zip(&events).take(k).skip(1) {
                                result::event::record(driver, event.raw, stream.raw)?;
                                result::stream::wait_event(driver, streams[0].raw, event.raw, 0)?;
                            }
                            result::memory::set_d8_async(driver, base, 2, SPAN, streams[0].raw)?;
                        }
                    }
                    streams[0].synchronize()
                }),
            ],
        )?;
        report.row(
            "5",
            format!("{k} fills on {k} streams, join, 1 fill after (chained rounds)"),
            ours,
            format!(
                "{k} cuMemsetD8Async on {k} streams, {} x (cuEventRecord + cuStreamWaitEvent), \
                 1 cuMemsetD8Async",
                k - 1
            ),
            raw,
            None,
            Target::None,
        );
    }
    let after = rt.stats();
    report.notes.push(format!(
        "case 5: the runtime inserted {} waits; the driver created {} streams and {} events \
         (pool misses)",
        after.waits - before.waits,
        after.streams_created - before.streams_created,
        after.events_created - before.events_created,
    ));
    rt.free(buffer)?;
    Ok(())
}

/// The driver's own synchronous pageable copies, which the bindings do not include: looked up
/// through cuGetProcAddress with the ABI of `cuMemcpyHtoD_v2` / `cuMemcpyDtoH_v2` (CUDA 3.2).
struct PageableCopies {
    host_to_device: unsafe extern "C" fn(sys::CUdeviceptr, *const c_void, usize) -> sys::CUresult,
    device_to_host: unsafe extern "C" fn(*mut c_void, sys::CUdeviceptr, usize) -> sys::CUresult,
}

impl PageableCopies {
    fn find(driver: &Driver) -> Outcome<Self> {
        let get_proc_address = driver.cuGetProcAddress()?;
        let lookup = |name: &std::ffi::CStr| -> Outcome<*mut c_void> {
            let mut address = ptr::null_mut();
            let mut status = sys::CU_GET_PROC_ADDRESS_SUCCESS;
            // SAFETY: `name` is NUL-terminated and both out-parameters are valid for writes.
            check("cuGetProcAddress", unsafe {
                get_proc_address(
                    name.as_ptr(),
                    &mut address,
                    3020,
                    sys::CU_GET_PROC_ADDRESS_LEGACY_STREAM as sys::cuuint64_t,
                    &mut status,
                )
            })?;
            if address.is_null() || status != sys::CU_GET_PROC_ADDRESS_SUCCESS {
                return Err(format!("the driver has no {name:?} with the ABI of CUDA 3.2").into());
            }
            Ok(address)
        };
        let host_to_device = lookup(c"cuMemcpyHtoD")?;
        let device_to_host = lookup(c"cuMemcpyDtoH")?;
        // SAFETY: the driver returned these for cuMemcpyHtoD / cuMemcpyDtoH at the ABI of CUDA
        // 3.2, whose signatures (cuda.h: cuMemcpyHtoD_v2, cuMemcpyDtoH_v2) these types spell.
        unsafe {
            Ok(Self {
                host_to_device: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(sys::CUdeviceptr, *const c_void, usize) -> sys::CUresult,
                >(host_to_device),
                device_to_host: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut c_void, sys::CUdeviceptr, usize) -> sys::CUresult,
                >(device_to_host),
            })
        }
    }

    /// cuMemcpyHtoD: copies `bytes` of host memory to device memory, synchronously.
    ///
    /// # Safety
    /// `[src, src + bytes)` is valid for reads and `[dst, dst + bytes)` device memory valid
    /// for writes, and nothing else uses the destination meanwhile.
    unsafe fn host_to_device(
        &self,
        dst: sys::CUdeviceptr,
        src: *const c_void,
        bytes: usize,
    ) -> Result<(), Error> {
        // SAFETY: the caller's promise for both ranges.
        check("cuMemcpyHtoD", unsafe {
            (self.host_to_device)(dst, src, bytes)
        })
    }

    /// cuMemcpyDtoH: copies `bytes` of device memory to host memory, synchronously.
    ///
    /// # Safety
    /// As [`PageableCopies::host_to_device`], the other way.
    unsafe fn device_to_host(
        &self,
        dst: *mut c_void,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<(), Error> {
        // SAFETY: the caller's promise for both ranges.
        check("cuMemcpyDtoH", unsafe {
            (self.device_to_host)(dst, src, bytes)
        })
    }
}

/// Case 6: 256 MiB copies, locked and pageable, both directions.
fn copies(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let pageable_copies = PageableCopies::find(driver)?;
    let bytes = plan.pick(256 * MIB, 8 * MIB);
    let stream = RawStream::new(driver)?;
    let device = rt.alloc(D0, MemoryKind::Device, bytes)?;
    let device_address = device.address() as sys::CUdeviceptr;

    // Locked: the runtime's copy of a LockedHost span against raw async copies of the same
    // (registered) memory on a kept stream, each followed by its synchronisation.
    // Not interleaved (nor the pageable copies below): each call moves 256 MiB over the bus
    // for milliseconds, bound by the link, not by clocks or driver state, and the sides
    // already agree within 1% when measured one after the other. The pageable rows compare
    // several staging sizes, each with a runtime of its own, against one driver figure.
    let mut locked_memory = vec![1u8; bytes];
    {
        let locked = rt.lock_host(&mut locked_memory)?;
        let host = locked.span(0, bytes)?.address();
        let ours_h2d = plan.median_per_call(11, 1, |calls| {
            for _ in 0..calls {
                let token = rt.copy(D0, device.all(), locked.span(0, bytes)?, &mut Vec::new())?;
                rt.wait(token)?;
            }
            Ok(())
        })?;
        let raw_h2d = plan.median_per_call(11, 1, |calls| {
            for _ in 0..calls {
                // SAFETY: the locked span and the device buffer, both `bytes` long and live; the
                // copy is synchronised before either is touched.
                unsafe {
                    result::memory::copy_host_to_device_async(
                        driver,
                        device_address,
                        host as *const c_void,
                        bytes,
                        stream.raw,
                    )
                }?;
                stream.synchronize()?;
            }
            Ok(())
        })?;
        let ours_d2h = plan.median_per_call(11, 1, |calls| {
            for _ in 0..calls {
                let token = rt.copy(D0, locked.span(0, bytes)?, device.all(), &mut Vec::new())?;
                rt.wait(token)?;
            }
            Ok(())
        })?;
        let raw_d2h = plan.median_per_call(11, 1, |calls| {
            for _ in 0..calls {
                // SAFETY: as for the upload above.
                unsafe {
                    result::memory::copy_device_to_host_async(
                        driver,
                        host as *mut c_void,
                        device_address,
                        bytes,
                        stream.raw,
                    )
                }?;
                stream.synchronize()?;
            }
            Ok(())
        })?;
        let size = size_text(bytes);
        report.row(
            "6",
            format!("H2D {size}, copy from lock_host memory + wait"),
            ours_h2d,
            "cuMemcpyHtoDAsync + cuStreamSynchronize, same registered memory",
            raw_h2d,
            Some(bytes),
            Target::WithinPercent(5.0),
        );
        report.row(
            "6",
            format!("D2H {size}, copy to lock_host memory + wait"),
            ours_d2h,
            "cuMemcpyDtoHAsync + cuStreamSynchronize, same registered memory",
            raw_d2h,
            Some(bytes),
            Target::WithinPercent(5.0),
        );
        locked.unlock()?;
    }
    drop(locked_memory);

    // Pageable: the driver's own synchronous copies, then the runtime's staged upload and
    // download with each staging chunk size (a runtime of its own per size, sharing the
    // backend).
    let mut pageable = vec![3u8; bytes];
    let driver_h2d = plan.median_per_call(7, 1, |calls| {
        for _ in 0..calls {
            // SAFETY: the pageable vector and the device buffer, both `bytes` long and live.
            unsafe {
                pageable_copies.host_to_device(device_address, pageable.as_ptr().cast(), bytes)
            }?;
        }
        Ok(())
    })?;
    let driver_d2h = plan.median_per_call(7, 1, |calls| {
        for _ in 0..calls {
            // SAFETY: as for the upload above.
            unsafe {
                pageable_copies.device_to_host(pageable.as_mut_ptr().cast(), device_address, bytes)
            }?;
        }
        Ok(())
    })?;
    rt.free(device)?;
    for chunk in plan.pick(
        vec![2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB],
        vec![4 * MIB],
    ) {
        let staged = Runtime::shared(
            Arc::clone(bench.backend),
            RuntimeConfig {
                staging_chunk: chunk,
                ..RuntimeConfig::default()
            },
        )?;
        let device = staged.alloc(D0, MemoryKind::Device, bytes)?;
        let ours_h2d = plan.median_per_call(7, 1, |calls| {
            for _ in 0..calls {
                let token = staged.upload(D0, device.all(), &pageable, &mut Vec::new())?;
                staged.wait(token)?;
            }
            Ok(())
        })?;
        let ours_d2h = plan.median_per_call(7, 1, |calls| {
            for _ in 0..calls {
                staged.download(D0, &mut pageable, device.all(), &mut Vec::new())?;
            }
            Ok(())
        })?;
        let (size, staging) = (size_text(bytes), size_text(chunk));
        report.row(
            "6",
            format!("H2D {size} pageable, upload + wait, staging chunk {staging}"),
            ours_h2d,
            "cuMemcpyHtoD, same pageable memory",
            driver_h2d,
            Some(bytes),
            Target::Faster,
        );
        report.row(
            "6",
            format!("D2H {size} pageable, download, staging chunk {staging}"),
            ours_d2h,
            "cuMemcpyDtoH, same pageable memory",
            driver_d2h,
            Some(bytes),
            Target::Faster,
        );
        staged.free(device)?;
        let shutdown = staged.shutdown()?;
        if !shutdown.program.unwaited.is_empty() {
            report.notes.push(format!(
                "case 6: staging {staging}: {} tokens ended unwaited",
                shutdown.program.unwaited.len()
            ));
        }
    }
    Ok(())
}

/// Where a batch of launches stops its clock.
#[derive(Clone, Copy)]
enum Until {
    /// When the last launch call returns: the host's cost (a short batch never fills the
    /// driver's queue, so no call waits for the GPU).
    Enqueued,
    /// When the work has completed, after the synchronisation: the GPU's time for a chain of
    /// dependent kernels included.
    Completed,
}

/// Launches per batch when timing the host's cost, few enough that the driver's queue never
/// fills (a full queue makes a launch call wait for the GPU, timing the GPU instead).
const HOST_BATCH: usize = 64;

/// Times `calls` launches (`launch`), then `finish` (the synchronisation), to `until`.
fn time_launches(
    calls: usize,
    until: Until,
    mut launch: impl FnMut() -> Outcome<()>,
    finish: impl FnOnce() -> Outcome<()>,
) -> Outcome<Duration> {
    let start = Instant::now();
    for _ in 0..calls {
        launch()?;
    }
    let enqueued = start.elapsed();
    finish()?;
    Ok(match until {
        Until::Enqueued => enqueued,
        Until::Completed => start.elapsed(),
    })
}

/// Case 7: kernel launch of fill_u32 on a tiny buffer, each launch after the previous token,
/// against cuLaunchKernel of the same function on one stream. Four sides, interleaved: the
/// runtime (through a kernel handle), the backend alone (splits the gap into the runtime's and
/// the backend's part), raw cuLaunchKernel of the CUfunction, and raw cuLaunchKernel of a
/// CUkernel (which takes its context from the stream: the backend would need no current
/// context, at the price the row shows). Timed twice: the host's cost per launch (short
/// batches, the row with the target) and the time to completion of long chains.
fn kernel_launch(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    const WORDS: u32 = 256;
    let buffer = rt.alloc(D0, MemoryKind::Device, WORDS as usize * 4)?;
    let dims = LaunchDims::linear(1, WORDS);
    let stream = RawStream::new(driver)?;
    let synchronize = || stream.synchronize();

    // Ours: a handle resolved once, as the raw sides hold their function.
    let fill = rt.kernel(D0, "fill_u32")?;
    let args = [
        Arg::Span(buffer.all()),
        Arg::U32(7),
        Arg::U64(u64::from(WORDS)),
    ];
    let before = rt.stats();
    let launches = Cell::new(0u64);
    let ours = |calls: usize, until: Until| -> Outcome<Duration> {
        let chain = RefCell::new(Vec::<Token>::with_capacity(1));
        launches.set(launches.get() + calls as u64);
        time_launches(
            calls,
            until,
            || {
                let mut chain = chain.borrow_mut();
                // SAFETY: the kernel touches its count of words of its span, which fit.
                let token = unsafe { fill.launch(dims, &args, &mut chain) }?;
                chain.push(token);
                Ok(())
            },
            || {
                Ok(chain
                    .take()
                    .into_iter()
                    .try_for_each(|token| rt.wait(token))?)
            },
        )
    };

    // The backend alone (no planner, no state lock, no use list) on a stream of its own.
    let backend = rt.backend();
    let kernel = backend.kernel(D0, "fill_u32")?;
    let backend_stream = backend.stream_create(D0)?;
    let kernel_args = [
        KernelArg::Ptr(buffer.address()),
        KernelArg::U32(7),
        KernelArg::U64(u64::from(WORDS)),
    ];
    let backend_only = |calls: usize, until: Until| -> Outcome<Duration> {
        time_launches(
            calls,
            until,
            // SAFETY: the kernel writes its count of words of the buffer, which fit.
            || Ok(unsafe { backend.launch(backend_stream, kernel, dims, &kernel_args) }?),
            || Ok(backend.stream_synchronize(backend_stream)?),
        )
    };

    // Raw: the backend's CUfunction, and the same kernel as a CUkernel of a library.
    let function = kernel.raw();
    let ptx = concat!(include_str!("../kernels/kernels.ptx"), "\0");
    // SAFETY: the PTX ends with a NUL and lives as long as the program.
    let library = unsafe { result::module::library_load_data(driver, ptx.as_ptr().cast()) }?;
    // SAFETY: the library just loaded.
    let context_free = unsafe { result::module::library_kernel(driver, library, c"fill_u32") }?;
    let mut destination = buffer.address() as u64;
    let mut value: u32 = 7;
    let mut count = u64::from(WORDS);
    let params: [*mut c_void; 3] = [
        (&mut destination as *mut u64).cast(),
        (&mut value as *mut u32).cast(),
        (&mut count as *mut u64).cast(),
    ];
    let shape = result::module::LaunchShape {
        grid: [1, 1, 1],
        block: [WORDS, 1, 1],
        shared_bytes: 0,
    };
    let raw_launch = |f: sys::CUfunction| -> Outcome<()> {
        let mut params = params;
        // SAFETY: fill_u32 of the backend's module or of the library (both live until the
        // end), on a live stream of the current context, with one pointer per parameter; it
        // writes `WORDS` words of the live buffer.
        Ok(unsafe { result::module::launch(driver, f, shape, stream.raw, params.as_mut_ptr()) }?)
    };
    let raw = |calls: usize, until: Until| {
        time_launches(calls, until, || raw_launch(function), synchronize)
    };
    let raw_kernel = |calls: usize, until: Until| {
        time_launches(
            calls,
            until,
            || raw_launch(context_free.cast()),
            synchronize,
        )
    };

    let measure = |until: Until, rounds: usize, batch: usize| {
        plan.interleaved(
            rounds,
            batch,
            [
                &mut |calls| ours(calls, until),
                &mut |calls| backend_only(calls, until),
                &mut |calls| raw(calls, until),
                &mut |calls| raw_kernel(calls, until),
            ],
        )
    };
    let [ours_host, backend_host, raw_host, raw_kernel_host] =
        measure(Until::Enqueued, 101, HOST_BATCH)?;
    let [ours_done, backend_done, raw_done, raw_kernel_done] = measure(Until::Completed, 31, 1000)?;
    // SAFETY: the library loaded above, whose kernel's launches have all completed.
    unsafe { result::module::library_unload(driver, library) }?;
    backend.stream_destroy(backend_stream)?;
    let after = rt.stats();

    let host = format!("host cost per launch ({HOST_BATCH} per batch, to the last call's return)");
    let done = "1000 chained launches, to completion";
    let label = "launch fill_u32 (1 x 256 threads) after the previous token, kernel handle";
    for (scope, ours, backend, raw, raw_kernel, target) in [
        (
            host.as_str(),
            ours_host,
            backend_host,
            raw_host,
            raw_kernel_host,
            Target::WithinPercent(10.0),
        ),
        (
            done,
            ours_done,
            backend_done,
            raw_done,
            raw_kernel_done,
            Target::None,
        ),
    ] {
        let rows = [
            (
                format!("{label}: {scope}"),
                ours,
                "cuLaunchKernel of the same CUfunction",
                raw,
                target,
            ),
            (
                format!("{label}: {scope}"),
                ours,
                "CudaBackend::launch (the runtime's part)",
                backend,
                Target::None,
            ),
            (
                format!("CudaBackend::launch: {scope}"),
                backend,
                "cuLaunchKernel (the backend's part)",
                raw,
                Target::None,
            ),
            (
                format!("cuLaunchKernel of a CUkernel: {scope}"),
                raw_kernel,
                "cuLaunchKernel of the CUfunction",
                raw,
                Target::None,
            ),
        ];
        for (ours_label, ours, driver_label, driver, target) in rows {
            report.row("7", ours_label, ours, driver_label, driver, None, target);
        }
    }
    let get_current = plan.median_per_call(31, 1000, |calls| {
        for _ in 0..calls {
            black_box(result::context::current(driver)?);
        }
        Ok(())
    })?;
    report.notes.push(format!(
        "case 7: cuCtxGetCurrent, which the backend asks before each launch, costs {} alone",
        figure(get_current, None)
    ));
    report.notes.push(format!(
        "case 7: the runtime's planner during {} launches: {} operations planned, {} \
         cross-stream waits, {} event acquires, {} stream acquires (streams created: {}, \
         events created: {})",
        launches.get(),
        after.operations - before.operations,
        after.waits - before.waits,
        after.event_acquires - before.event_acquires,
        after.stream_acquires - before.stream_acquires,
        after.streams_created - before.streams_created,
        after.events_created - before.events_created,
    ));
    rt.free(buffer)?;
    Ok(())
}

/// Whether opening the backend failed for want of a driver or of a device.
fn no_driver_or_device(error: &Error) -> bool {
    match error {
        Error::DriverLibraryNotFound { .. } => true,
        other => reports_no_device(other),
    }
}

/// A case: its title and the function that measures it.
type Case = (&'static str, fn(&Bench<'_>, &mut Report) -> Outcome<()>);

const CASES: [Case; 7] = [
    ("device alloc+free cache hit", device_alloc_free),
    ("pinned host alloc+free cache hit", host_pinned_alloc_free),
    ("pinned lookup with 4,096 locked regions", pinned_lookup),
    ("stream and event pools", stream_event_pools),
    ("k-way join", k_way_join),
    ("256 MiB copies", copies),
    ("kernel launch", kernel_launch),
];

fn run(backend: CudaBackend, plan: Plan) -> Outcome<bool> {
    let driver = backend.driver();
    let context = backend.primary_context(D0)?;
    let backend = Arc::new(backend);
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default())?;
    // Device 0's context stays current on this thread for both sides.
    // SAFETY: device 0's primary context, which the backend holds retained until it drops.
    unsafe { result::context::set_current(driver, context) }?;
    let version = driver.driver_version();
    let header = format!(
        "# CUDA backend hardware benchmark\n\n\
         device 0: {} ({} devices); driver API version {} (CUDA {}.{}); date {}; commit {}\n\
         mode: {}; figures are medians over batches of the per-call time, host clock around \
         each batch (GPU work synchronised inside it); speed-up = driver / ours \
         (above 1: ours is faster)\n",
        rt.device_info(D0)?.name,
        rt.device_count(),
        version,
        version / 1000,
        version % 1000 / 10,
        today(),
        std::env::var("GIT_COMMIT").unwrap_or_else(|_| "unknown".into()),
        if plan.full {
            "full (--bench)"
        } else {
            "smoke run without --bench: figures are not meaningful"
        },
    );
    let bench = Bench {
        backend: &backend,
        rt: &rt,
        driver,
        plan,
    };
    let mut report = Report::default();
    let started = Instant::now();
    for (index, (title, case)) in CASES.iter().enumerate() {
        eprintln!(
            "[hw {:6.1}s] case {}/{}: {title}",
            started.elapsed().as_secs_f64(),
            index + 1,
            CASES.len()
        );
        if let Err(error) = case(&bench, &mut report) {
            report.failed = true;
            report
                .notes
                .push(format!("case {} ({title}) FAILED: {error}", index + 1));
        }
    }
    match rt.shutdown() {
        Ok(shutdown) if shutdown.program.unwaited.is_empty() => {}
        Ok(shutdown) => report.notes.push(format!(
            "shutdown: {} tokens ended unwaited",
            shutdown.program.unwaited.len()
        )),
        Err(error) => {
            report.failed = true;
            report.notes.push(format!("shutdown FAILED: {error}"));
        }
    }
    // The backend releases the primary context when it drops: leave none current.
    // SAFETY: no context.
    unsafe { result::context::set_current(driver, ptr::null_mut()) }?;
    eprintln!("[hw {:6.1}s] done", started.elapsed().as_secs_f64());
    report.publish(&header)
}

fn main() -> ExitCode {
    let plan = Plan {
        full: std::env::args().any(|argument| argument == "--bench"),
    };
    let backend = match CudaBackend::new() {
        Ok(backend) => backend,
        Err(error) if no_driver_or_device(&error) => {
            println!("backend cuda: skipped: no CUDA driver/no device");
            eprintln!("({error})");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("backend cuda: opening the backend failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    match run(backend, plan) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("backend cuda: {error}");
            ExitCode::FAILURE
        }
    }
}
