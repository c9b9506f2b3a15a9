//! The runtime's cost over the raw backend call, on the host backend, same run:
//! - an operation in a token chain (`Runtime::fill` after the previous token) against the raw
//!   `Backend::fill` on a stream made ahead, with the device already current;
//! - a join of two chains (one event record and one wait) against raw record + wait;
//! - the device guard, switching and not switching, against one raw current-device query
//!   and one raw save of the current state (what the guard does first);
//! - a worker hand-off round trip (submit an empty action and wait for it);
//! - an allocation hit (alloc + free of a cached size) through the runtime against the same
//!   pair on a bare `DeviceAllocator` (no lock, a fake driver): what the runtime's memory lock,
//!   buffer and use list cost; through the host backend (which records every buffer),
//!   through one that takes no note of buffers, and through one whose `note_buffer` is the CUDA
//!   and HIP backends' (gpu-recorder told of each buffer; not loaded here: a cached check);
//! - the pinned lookup (`Runtime::pinned_address(ptr, 64, device 0)`) with 4,096 locked regions
//!   of 32 KiB at random addresses inside them, as the hardware bench's case 3 asks it, against
//!   the bare lock table's lookup (no lock) of the same regions and addresses: what the
//!   runtime's lock and wrapper cost over the table's search; warm, and in batches of 4,096
//!   that each start after 64 MiB of other memory traffic (`_cold`), as the hardware bench's
//!   batches start after a batch of driver calls;
//! - a chained launch through a kernel handle on a backend whose calls do nothing
//!   (`NullBackend`), against that backend's own launch: the runtime's cost per launch, which on
//!   a GPU comes on top of the driver's; and the same through one whose `footprints_wanted` is
//!   the CUDA and HIP backends' (gpu-recorder not loaded: a cached check, no footprint built); and on the same backend a round of a k-way join (k = 2,
//!   4, 8: k fills on k streams, their join, one fill after), against the same round of raw
//!   calls (k fills, k - 1 records and k - 1 waits, one fill);
//! - what the CUDA and HIP backends add to each driver call that takes a handle (`live_handles`):
//!   the check that the handle is live and its hold for the call's length, uncontended, in a
//!   registry of 64 live handles (a launch does it twice: stream and kernel), the two atomics
//!   that make it, a destroyed handle's refusal, and the record and release of an address that
//!   each allocation and free adds.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gpu_core::allocator::model::{FakeDriver, capabilities};
use gpu_core::allocator::{AllocRequest, AllocatorConfig, DeviceAllocator, MemoryKind, Release};
use gpu_core::backend::live::{HandleKey, LiveAllocations, LiveHandles};
use gpu_core::backend::{Backend, DeviceInfo, FillValue, KernelArg, LaunchDims};
use gpu_core::lock_table::LockTable;
use gpu_core::lock_table::model::HostAddressPins;
use gpu_core::seeded::SplitMix64;
use gpu_core::token::Token;
use gpu_core::{ByteRange, DeviceId, Result};
use gpu_rt::host::{HostBackend, HostConfig};
use gpu_rt::runtime::{Arg, Runtime, with_device};
use std::ffi::{CStr, c_void};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);
/// Operations between synchronisations, so queues stay short.
const BATCH: usize = 256;

fn operations(c: &mut Criterion) {
    let mut group = c.benchmark_group("operation");
    let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    group.bench_function("runtime_fill_in_chain", |b| {
        b.iter_custom(|iterations| {
            let start = std::time::Instant::now();
            let mut chain: Option<Token> = None;
            for i in 0..iterations {
                let token = rt
                    .fill(
                        D0,
                        buffer.all(),
                        i as u8,
                        &mut chain.take().into_iter().collect(),
                    )
                    .unwrap();
                chain = Some(token);
                if i as usize % BATCH == BATCH - 1 {
                    rt.wait(chain.take().unwrap()).unwrap();
                }
            }
            if let Some(token) = chain {
                rt.wait(token).unwrap();
            }
            start.elapsed()
        })
    });

    let backend = rt.backend();
    backend.set_current_device(Some(D0)).unwrap();
    let stream = backend.stream_create(D0).unwrap();
    group.bench_function("raw_backend_fill", |b| {
        b.iter_custom(|iterations| {
            let start = std::time::Instant::now();
            for i in 0..iterations {
                // SAFETY: the runtime's live 64-byte buffer, untouched by the host.
                unsafe { backend.fill(stream, buffer.address(), i as u8, 64) }.unwrap();
                if i as usize % BATCH == BATCH - 1 {
                    backend.stream_synchronize(stream).unwrap();
                }
            }
            backend.stream_synchronize(stream).unwrap();
            start.elapsed()
        })
    });

    group.bench_function("runtime_join_of_two_chains", |b| {
        b.iter_custom(|iterations| {
            let start = std::time::Instant::now();
            for _ in 0..iterations {
                let first = rt
                    .fill(D0, buffer.span(0, 32).unwrap(), 1, &mut vec![])
                    .unwrap();
                let second = rt
                    .fill(D0, buffer.span(32, 32).unwrap(), 2, &mut vec![])
                    .unwrap();
                let joined = rt.join(&mut vec![first, second]).unwrap();
                rt.wait(joined).unwrap();
            }
            start.elapsed()
        })
    });
    let other = backend.stream_create(D0).unwrap();
    let event = backend.event_create(D0).unwrap();
    group.bench_function("raw_two_fills_record_wait_sync", |b| {
        b.iter(|| {
            // SAFETY: the two halves of the runtime's live 64-byte buffer.
            unsafe {
                backend.fill(stream, buffer.address(), 1, 32).unwrap();
                backend.fill(other, buffer.address() + 32, 2, 32).unwrap();
            }
            backend.event_record(event, other).unwrap();
            backend.stream_wait_event(stream, event).unwrap();
            backend.stream_synchronize(stream).unwrap();
        })
    });
    backend.event_destroy(event).unwrap();
    backend.stream_destroy(other).unwrap();
    backend.stream_destroy(stream).unwrap();
    backend.set_current_device(None).unwrap();
    group.finish();
}

fn guard(c: &mut Criterion) {
    let mut group = c.benchmark_group("device_guard");
    let backend = HostBackend::new(HostConfig::with_devices(2));
    backend.set_current_device(Some(D0)).unwrap();
    group.bench_function("raw_current_device_query", |b| {
        b.iter(|| black_box(backend.current_device().unwrap()))
    });
    group.bench_function("raw_save_current", |b| {
        b.iter(|| black_box(backend.save_current().unwrap()))
    });
    group.bench_function("guard_same_device", |b| {
        b.iter(|| with_device(&backend, D0, || Ok(black_box(1))).unwrap())
    });
    group.bench_function("guard_switch_and_restore", |b| {
        b.iter(|| with_device(&backend, D1, || Ok(black_box(1))).unwrap())
    });
    group.finish();
}

fn worker(c: &mut Criterion) {
    let mut group = c.benchmark_group("worker");
    let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap();
    let worker = rt.worker(D1).unwrap();
    group.bench_function("hand_off_round_trip", |b| {
        b.iter(|| {
            worker
                .submit(|_: &HostBackend| -> Result<u32> { Ok(1) })
                .wait()
                .unwrap()
        })
    });
    group.finish();
}

fn allocation_hit(c: &mut Criterion) {
    const SIZE: usize = 64 << 10;
    let mut group = c.benchmark_group("allocation_hit");
    let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap();
    rt.free(rt.alloc(D0, MemoryKind::Device, SIZE).unwrap())
        .unwrap();
    group.bench_function("runtime_alloc_free", |b| {
        b.iter(|| {
            let buffer = rt.alloc(D0, MemoryKind::Device, black_box(SIZE)).unwrap();
            rt.free(black_box(buffer)).unwrap();
        })
    });
    // The CUDA backend's case: a backend that takes no note of buffers (the host backend
    // records each one, to bound accesses by it).
    let null = Runtime::new(NullBackend::new()).unwrap();
    null.free(null.alloc(D0, MemoryKind::Device, SIZE).unwrap())
        .unwrap();
    group.bench_function("null_backend_runtime_alloc_free", |b| {
        b.iter(|| {
            let buffer = null.alloc(D0, MemoryKind::Device, black_box(SIZE)).unwrap();
            null.free(black_box(buffer)).unwrap();
        })
    });
    // The CUDA and HIP backends' note_buffer, the recorder not loaded: one cached atomic load
    // and a branch for each alloc and each free.
    let noting = Runtime::new(NullBackend::<true>::with_notes()).unwrap();
    noting
        .free(noting.alloc(D0, MemoryKind::Device, SIZE).unwrap())
        .unwrap();
    group.bench_function("null_backend_noting_recorder_alloc_free", |b| {
        b.iter(|| {
            let buffer = noting
                .alloc(D0, MemoryKind::Device, black_box(SIZE))
                .unwrap();
            noting.free(black_box(buffer)).unwrap();
        })
    });
    let mut driver = FakeDriver::new(1 << 40);
    let mut allocator = DeviceAllocator::new(
        D0,
        capabilities([true; 3], true),
        AllocatorConfig::default(),
    );
    group.bench_function("bare_allocator_alloc_free", |b| {
        b.iter(|| {
            let request = AllocRequest::new(MemoryKind::Device, black_box(SIZE));
            let allocation = allocator.allocate(&mut driver, &request).unwrap();
            allocator
                .free(&mut driver, black_box(allocation.handle), Release::Idle)
                .unwrap();
        })
    });
    group.finish();
}

fn pinned_lookup(c: &mut Criterion) {
    // As gpu-cuda-ffi's hardware bench (case 3): 32 KiB regions 64 KiB apart, queries of 64
    // bytes at random offsets inside random regions, taken in a cycle of 4,096.
    const REGIONS: usize = 4096;
    const REGION: usize = 32 << 10;
    const STRIDE: usize = 64 << 10;
    const QUERY_LEN: usize = 64;
    const QUERIES: usize = 4096;
    let mut group = c.benchmark_group("pinned_lookup");
    let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap();
    // Zeroed: the pages are never touched, so this reserves address space, not memory.
    let backing = vec![0u8; REGIONS * STRIDE + STRIDE];
    let base = (backing.as_ptr() as usize).next_multiple_of(STRIDE);
    let mut table = LockTable::new(2).unwrap();
    for index in 0..REGIONS {
        let region = base + index * STRIDE;
        rt.lock_range(region, REGION).unwrap();
        table.lock(&mut HostAddressPins, region, REGION).unwrap();
    }
    let mut random = SplitMix64::new(0x9e37_79b9_7f4a_7c15);
    let queries: Vec<usize> = (0..QUERIES)
        .map(|_| base + random.below(REGIONS) * STRIDE + random.below(REGION - QUERY_LEN))
        .collect();
    for &query in &queries {
        let ours = rt.pinned_address(query, QUERY_LEN, D0).unwrap();
        assert_eq!(ours, Some(query), "every query hits");
        assert_eq!(table.lookup(query, QUERY_LEN, D0).unwrap(), ours);
    }
    let mut next = 0;
    let mut query = || {
        next = (next + 1) & (QUERIES - 1);
        black_box(queries[next])
    };
    group.bench_function("runtime_pinned_address_4096", |b| {
        b.iter(|| rt.pinned_address(query(), QUERY_LEN, D0).unwrap())
    });
    group.bench_function("bare_table_lookup_4096", |b| {
        b.iter(|| table.lookup(query(), QUERY_LEN, D0).unwrap())
    });
    // On the GPU box each batch of 4,096 lookups follows a batch of driver calls, which leave
    // little of the table in the core's caches: the same, after other memory traffic.
    let mut other = vec![0u64; EVICT_BYTES / 8];
    group.bench_function("runtime_pinned_address_4096_cold", |b| {
        b.iter_custom(|iterations| {
            cold_batches(iterations, QUERIES, &mut other, || {
                black_box(rt.pinned_address(query(), QUERY_LEN, D0).unwrap());
            })
        })
    });
    group.bench_function("bare_table_lookup_4096_cold", |b| {
        b.iter_custom(|iterations| {
            cold_batches(iterations, QUERIES, &mut other, || {
                black_box(table.lookup(query(), QUERY_LEN, D0).unwrap());
            })
        })
    });
    group.finish();
    for index in 0..REGIONS {
        rt.unlock_range(base + index * STRIDE).unwrap();
    }
}

/// Bytes of other memory traffic before each cold batch: twice this 2-core machine's
/// last-level cache (32 MiB), so that each batch finds the table in memory, not in any cache.
/// On the H200 box case 3's batches each follow 8,192 driver calls; this bench's figure before
/// the lock-free lookups (47.6 ns) was close to the box's (51.8 ns), the warm one (19.7 ns) far.
const EVICT_BYTES: usize = 64 << 20;

/// Times `iterations` calls of `op` in batches of `batch`, writing `other` (untimed) before
/// each batch so that the batch starts with cold core caches.
fn cold_batches(
    iterations: u64,
    batch: usize,
    other: &mut [u64],
    mut op: impl FnMut(),
) -> std::time::Duration {
    let mut total = std::time::Duration::ZERO;
    let mut left = iterations;
    while left > 0 {
        // One write a cache line.
        for word in other.iter_mut().step_by(8) {
            *word = word.wrapping_add(1);
        }
        black_box(&mut *other);
        let calls = left.min(batch as u64);
        let start = std::time::Instant::now();
        for _ in 0..calls {
            op();
        }
        total += start.elapsed();
        left -= calls;
    }
    total
}

/// A backend whose calls succeed and do nothing (device descriptions from the host backend's
/// defaults), so a benchmark through it times the runtime alone; with `NOTES`, its
/// `note_buffer` and `footprints_wanted` are the CUDA and HIP backends' (gpu-recorder told of
/// each buffer and asked whether it wants launch footprints, when loaded).
struct NullBackend<const NOTES: bool = false> {
    infos: Vec<DeviceInfo>,
    next_handle: std::sync::atomic::AtomicUsize,
}

impl NullBackend {
    fn new() -> Self {
        NullBackend::with_notes()
    }
}

impl<const NOTES: bool> NullBackend<NOTES> {
    fn with_notes() -> Self {
        let host = HostBackend::new(HostConfig::with_devices(1));
        Self {
            infos: vec![host.device_info(D0).unwrap()],
            next_handle: std::sync::atomic::AtomicUsize::new(1 << 20),
        }
    }

    /// A fresh handle or address (`bytes` apart), never zero.
    fn next(&self, bytes: usize) -> usize {
        let step = bytes.next_multiple_of(4096);
        self.next_handle
            .fetch_add(step, std::sync::atomic::Ordering::Relaxed)
    }
}

impl<const NOTES: bool> Backend for NullBackend<NOTES> {
    type Stream = usize;
    type Event = usize;
    type Kernel = usize;
    type Module = usize;
    type SavedCurrent = ();
    type Graph = core::convert::Infallible;
    const SCOPES_ITS_CALLS: bool = true;

    fn name(&self) -> &'static str {
        "null"
    }
    fn device_count(&self) -> usize {
        self.infos.len()
    }
    fn device_info(&self, device: DeviceId) -> Result<DeviceInfo> {
        Ok(self.infos[device.index()].clone())
    }
    fn current_device(&self) -> Result<Option<DeviceId>> {
        Ok(None)
    }
    fn set_current_device(&self, _: Option<DeviceId>) -> Result<()> {
        Ok(())
    }
    fn save_current(&self) -> Result<()> {
        Ok(())
    }
    fn restore_current(&self, _: ()) -> Result<()> {
        Ok(())
    }
    fn is_current(&self, _: (), _: DeviceId) -> bool {
        true
    }
    fn allocate(&self, _: DeviceId, _: MemoryKind, bytes: usize) -> Result<Option<usize>> {
        Ok(Some(self.next(bytes)))
    }
    fn allocate_on_stream(&self, _: usize, _: MemoryKind, bytes: usize) -> Result<Option<usize>> {
        Ok(Some(self.next(bytes)))
    }
    fn free(&self, _: DeviceId, _: MemoryKind, _: usize, _: Option<usize>) -> Result<()> {
        Ok(())
    }
    fn note_buffer(&self, _: DeviceId, range: ByteRange, live: bool) -> Result<()> {
        if NOTES {
            gpu_ffi_loader::recorder::note_buffer(range, live);
        }
        Ok(())
    }
    fn footprints_wanted(&self) -> bool {
        NOTES && gpu_ffi_loader::recorder::footprints_wanted()
    }
    fn host_register(&self, _: ByteRange, _: &mut [usize]) -> Result<()> {
        Ok(())
    }
    fn host_unregister(&self, _: usize) -> Result<()> {
        Ok(())
    }
    fn host_pinned_extent(&self, _: usize, _: &mut [usize]) -> Result<Option<ByteRange>> {
        Ok(None)
    }
    fn stream_create(&self, _: DeviceId) -> Result<usize> {
        Ok(self.next(1))
    }
    unsafe fn adopt_stream(&self, _: DeviceId, raw: usize) -> Result<usize> {
        Ok(raw)
    }
    fn stream_destroy(&self, _: usize) -> Result<()> {
        Ok(())
    }
    fn stream_synchronize(&self, _: usize) -> Result<()> {
        Ok(())
    }
    fn event_create(&self, _: DeviceId) -> Result<usize> {
        Ok(self.next(1))
    }
    fn event_destroy(&self, _: usize) -> Result<()> {
        Ok(())
    }
    fn event_record(&self, _: usize, _: usize) -> Result<()> {
        Ok(())
    }
    fn stream_wait_event(&self, _: usize, _: usize) -> Result<()> {
        Ok(())
    }
    fn event_query(&self, _: usize) -> Result<bool> {
        Ok(true)
    }
    fn event_synchronize(&self, _: usize) -> Result<()> {
        Ok(())
    }
    fn device_synchronize(&self, _: DeviceId) -> Result<()> {
        Ok(())
    }
    fn reset_device(&self, _: DeviceId) -> Result<()> {
        Ok(())
    }
    fn peer_access_possible(&self, _: DeviceId, _: DeviceId) -> Result<bool> {
        Ok(false)
    }
    fn enable_peer_access(&self, _: DeviceId, _: DeviceId) -> Result<()> {
        Ok(())
    }
    unsafe fn copy(&self, _: usize, _: usize, _: usize, _: usize) -> Result<()> {
        Ok(())
    }
    unsafe fn copy_peer(
        &self,
        _: usize,
        _: usize,
        _: DeviceId,
        _: usize,
        _: DeviceId,
        _: usize,
    ) -> Result<()> {
        Ok(())
    }
    unsafe fn fill(&self, _: usize, _: usize, _: u8, _: usize) -> Result<()> {
        Ok(())
    }
    unsafe fn fill_elements(&self, _: usize, _: usize, _: FillValue, _: usize) -> Result<()> {
        Ok(())
    }
    unsafe fn module_load(&self, _: DeviceId, _: *const c_void) -> Result<usize> {
        Ok(self.next(1))
    }
    fn module_unload(&self, _: usize) -> Result<()> {
        Ok(())
    }
    fn module_kernel(&self, _: usize, _: &CStr) -> Result<usize> {
        Ok(self.next(1))
    }
    fn kernel(&self, _: DeviceId, _: &str) -> Result<usize> {
        Ok(self.next(1))
    }
    fn kernel_static_workgroup_bytes(&self, _: usize) -> Result<u32> {
        Ok(0)
    }
    fn kernel_allow_workgroup_bytes(&self, _: usize, _: u32) -> Result<()> {
        Ok(())
    }
    unsafe fn launch(
        &self,
        stream: usize,
        kernel: usize,
        _: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        black_box((stream, kernel, args));
        Ok(())
    }
    unsafe fn launch_packed(
        &self,
        stream: usize,
        kernel: usize,
        _: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        black_box((stream, kernel, params));
        Ok(())
    }
}

fn null_backend(c: &mut Criterion) {
    let mut group = c.benchmark_group("null_backend");
    let rt = Runtime::new(NullBackend::new()).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 1024).unwrap();
    let dims = LaunchDims::linear(1, 256);
    launch_in_chain(&mut group, "runtime_launch_in_chain", &rt);
    // The CUDA and HIP backends' `footprints_wanted`, the recorder not loaded: one cached
    // atomic load per launch, no footprint built.
    let asking = Runtime::new(NullBackend::<true>::with_notes()).unwrap();
    launch_in_chain(
        &mut group,
        "runtime_launch_in_chain_recorder_check",
        &asking,
    );
    let backend = rt.backend();
    let (stream, kernel) = (
        backend.stream_create(D0).unwrap(),
        backend.kernel(D0, "fill_u32").unwrap(),
    );
    let values = [
        KernelArg::Ptr(buffer.address()),
        KernelArg::U32(7),
        KernelArg::U64(256),
    ];
    group.bench_function("backend_launch", |b| {
        // SAFETY: the null backend touches no memory.
        b.iter(|| unsafe { backend.launch(black_box(stream), kernel, dims, &values) }.unwrap())
    });
    for k in [2, 4, 8] {
        join_of(&mut group, &rt, k);
    }
    group.finish();
}

/// `name`: chained launches of `fill_u32` through a kernel handle on `rt`, waited for every
/// `BATCH`.
fn launch_in_chain<const NOTES: bool>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    rt: &Runtime<NullBackend<NOTES>>,
) {
    let buffer = rt.alloc(D0, MemoryKind::Device, 1024).unwrap();
    let fill = rt.kernel(D0, "fill_u32").unwrap();
    let dims = LaunchDims::linear(1, 256);
    let args = [Arg::Span(buffer.all()), Arg::U32(7), Arg::U64(256)];
    group.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            let start = std::time::Instant::now();
            let mut chain = Vec::with_capacity(1);
            for i in 0..iterations {
                // SAFETY: the null backend touches no memory.
                let token = unsafe { fill.launch(dims, &args, &mut chain) }.unwrap();
                chain.push(token);
                if i as usize % BATCH == BATCH - 1 {
                    rt.wait(chain.pop().unwrap()).unwrap();
                }
            }
            if let Some(token) = chain.pop() {
                rt.wait(token).unwrap();
            }
            start.elapsed()
        })
    });
}

/// A k-way join per round on the null backend: k fills on k streams (the first continues the
/// previous round's chain, the others start on pool streams), their join, and one fill after
/// it; against the same round as raw backend calls on k streams made ahead (k fills, k - 1
/// records on the side streams, k - 1 waits on the first, one fill).
fn join_of(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &Runtime<NullBackend>,
    k: usize,
) {
    let buffers: Vec<_> = (0..k)
        .map(|_| rt.alloc(D0, MemoryKind::Device, 64).unwrap())
        .collect();
    group.bench_function(format!("runtime_join_of_{k}"), |b| {
        b.iter_custom(|rounds| {
            let start = std::time::Instant::now();
            let mut chain = Vec::with_capacity(1);
            let mut joined = Vec::with_capacity(k);
            for round in 0..rounds {
                joined.push(rt.fill(D0, buffers[0].all(), 1, &mut chain).unwrap());
                for buffer in &buffers[1..] {
                    joined.push(rt.fill(D0, buffer.all(), 2, &mut Vec::new()).unwrap());
                }
                chain.push(rt.join(&mut joined).unwrap());
                let after = rt.fill(D0, buffers[0].all(), 3, &mut chain).unwrap();
                chain.push(after);
                if round as usize % BATCH == BATCH - 1 {
                    rt.wait(chain.pop().unwrap()).unwrap();
                }
            }
            if let Some(token) = chain.pop() {
                rt.wait(token).unwrap();
            }
            start.elapsed()
        })
    });
    let backend = rt.backend();
    let streams: Vec<usize> = (0..k).map(|_| backend.stream_create(D0).unwrap()).collect();
    let events: Vec<usize> = (1..k).map(|_| backend.event_create(D0).unwrap()).collect();
    group.bench_function(format!("backend_join_of_{k}"), |b| {
        b.iter(|| {
            // SAFETY: the null backend touches no memory.
            unsafe {
                for (stream, buffer) in streams.iter().zip(&buffers) {
                    backend
                        .fill(black_box(*stream), buffer.address(), 2, 64)
                        .unwrap();
                }
                for (event, stream) in events.iter().zip(&streams[1..]) {
                    backend.event_record(black_box(*event), *stream).unwrap();
                    backend.stream_wait_event(streams[0], *event).unwrap();
                }
                backend
                    .fill(streams[0], buffers[0].address(), 3, 64)
                    .unwrap();
            }
        })
    });
}

fn live_handles(c: &mut Criterion) {
    let mut group = c.benchmark_group("live_handles");
    /// A backend's handle, carrying its key as the CUDA and HIP handles do.
    #[derive(Clone, Copy)]
    struct Stream(HandleKey<Stream>);
    let streams = LiveHandles::new("bench", "stream");
    let keys: Vec<HandleKey<Stream>> = (0..64u32)
        .map(|index| streams.register(DeviceId(index % 2), Stream).0)
        .collect();
    let live = keys[17];
    // The `Live` is dropped inside each iteration: the check and the end of the hold.
    group.bench_function("check_and_hold", |b| {
        b.iter(|| black_box(streams.get(black_box(live)).unwrap()))
    });
    // Its part, for reading the figure on another machine: the two atomics on the handle's
    // slot (the check's add, which also reads the generation and the live bit, and the hold's
    // end).
    let state = std::sync::atomic::AtomicU64::new(1 << 31);
    group.bench_function("part_add_and_sub", |b| {
        b.iter(|| {
            let before = black_box(&state).fetch_add(1, std::sync::atomic::Ordering::Acquire);
            black_box(&state).fetch_sub(1, std::sync::atomic::Ordering::Release);
            before
        })
    });
    let stale = streams.register(D0, Stream).0;
    streams.destroy(stale, || {}, |_| Ok(())).unwrap();
    group.bench_function("stale_refused", |b| {
        b.iter(|| black_box(streams.get(black_box(stale)).is_err()))
    });
    let allocations = LiveAllocations::new();
    for index in 0..64 {
        allocations
            .record(D0, MemoryKind::Device, Ok(Some(0x10_0000 + index * 0x1000)))
            .unwrap();
    }
    group.bench_function("allocation_record_and_release", |b| {
        b.iter(|| {
            let address = black_box(0x1000);
            allocations
                .record(D0, MemoryKind::Device, Ok(Some(address)))
                .unwrap();
            allocations
                .release(D0, MemoryKind::Device, address, || Ok(()))
                .unwrap();
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    operations,
    guard,
    worker,
    allocation_hit,
    pinned_lookup,
    null_backend,
    live_handles
);
criterion_main!(benches);
