//! Allocator benchmarks: a cache hit (alloc + free on one stream), a mixed workload from the
//! seeded trace generator, and cross-stream reuse; each beside a baseline measured in the same
//! run (the system allocator, and an exact-size cache as IREE's HIP allocator keeps). Prints
//! the fragmentation figure (peak reserved / peak requested) of both caches on the trace.

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpu_core::allocator::model::{
    TraceOp, TraceRng, capabilities, mixed_trace, peak_live_bytes, run_trace,
};
use gpu_core::allocator::{
    AllocRequest, AllocatorConfig, DeviceAllocator, MemoryKind, Release, SegmentDriver,
};
use gpu_core::{DeviceId, EventId, Result, StreamId};

const TRACE_SEED: u64 = 0x5EED_A110C;
const TRACE_OPERATIONS: usize = 20_000;
const TRACE_STREAMS: u32 = 4;

/// A driver that costs next to nothing, so the benchmarks time the allocator alone: addresses
/// from a counter; events complete at once (`complete`), or all but the newest one (work
/// still running on the stream that freed the block).
struct NullDriver {
    next_address: usize,
    next_event: u32,
    complete: bool,
}

impl NullDriver {
    fn new(complete: bool) -> Self {
        Self {
            next_address: 1 << 32,
            next_event: 0,
            complete,
        }
    }
}

impl SegmentDriver for NullDriver {
    fn allocate(&mut self, _: DeviceId, _: MemoryKind, size: usize) -> Result<Option<usize>> {
        let address = self.next_address;
        self.next_address += size.next_multiple_of(4096);
        Ok(Some(address))
    }
    fn allocate_on_stream(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
        _: StreamId,
    ) -> Result<Option<usize>> {
        self.allocate(device, kind, size)
    }
    fn free(
        &mut self,
        _: DeviceId,
        _: MemoryKind,
        _: usize,
        _: usize,
        _: Option<StreamId>,
    ) -> Result<()> {
        Ok(())
    }
    fn record_event(&mut self, _: DeviceId, _: StreamId) -> Result<EventId> {
        self.next_event += 1;
        Ok(EventId(self.next_event))
    }
    fn event_completed(&mut self, _: DeviceId, event: EventId) -> Result<bool> {
        Ok(self.complete || event.0 < self.next_event)
    }
    fn wait_event(&mut self, _: DeviceId, _: StreamId, _: EventId) -> Result<()> {
        Ok(())
    }
    fn wait_event_on_host(&mut self, _: DeviceId, _: EventId) -> Result<()> {
        Ok(())
    }
    fn release_event(&mut self, _: DeviceId, _: EventId) {}
    fn synchronize(&mut self, _: DeviceId) -> Result<()> {
        Ok(())
    }
}

fn device_allocator() -> DeviceAllocator {
    DeviceAllocator::new(
        DeviceId(0),
        capabilities([true; 3], true),
        AllocatorConfig::default(),
    )
}

/// The baseline cache: free blocks kept by exact size, a miss goes to the driver for exactly
/// that size (IREE's approach over hipMallocAsync).
#[derive(Default)]
struct ExactSizeCache {
    free: HashMap<usize, Vec<usize>>,
    next_address: usize,
    reserved: usize,
    peak_reserved: usize,
}

impl ExactSizeCache {
    fn allocate(&mut self, size: usize) -> usize {
        if let Some(address) = self.free.get_mut(&size).and_then(Vec::pop) {
            return address;
        }
        let address = self.next_address;
        self.next_address += size;
        self.reserved += size;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        address
    }

    fn free(&mut self, size: usize, address: usize) {
        self.free.entry(size).or_default().push(address);
    }
}

fn hit(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocator/hit");
    for size in [256usize, 64 << 10, 1 << 20, 64 << 20] {
        let mut allocator = device_allocator();
        let mut driver = NullDriver::new(true);
        let request = AllocRequest::new(MemoryKind::Device, size).on_stream(StreamId(0), &[]);
        let warm = allocator.allocate(&mut driver, &request).unwrap();
        allocator
            .free(&mut driver, warm.handle, Release::OnStream(StreamId(0)))
            .unwrap();
        group.bench_function(BenchmarkId::new("caching", size), |b| {
            b.iter(|| {
                let allocation = allocator
                    .allocate(&mut driver, black_box(&request))
                    .unwrap();
                allocator
                    .free(
                        &mut driver,
                        black_box(allocation.handle),
                        Release::OnStream(StreamId(0)),
                    )
                    .unwrap();
            })
        });
        let mut exact = ExactSizeCache::default();
        group.bench_function(BenchmarkId::new("exact-size baseline", size), |b| {
            b.iter(|| {
                let address = exact.allocate(black_box(size));
                exact.free(size, black_box(address));
            })
        });
        group.bench_function(BenchmarkId::new("system malloc baseline", size), |b| {
            b.iter(|| drop(black_box(Vec::<u8>::with_capacity(black_box(size)))))
        });
    }
    group.finish();
}

fn mixed(c: &mut Criterion) {
    let trace = mixed_trace(TRACE_SEED, TRACE_OPERATIONS, TRACE_STREAMS);
    let peak = peak_live_bytes(&trace);
    let stats = run_trace(&trace, AllocatorConfig::default()).unwrap();
    let mut exact = ExactSizeCache::default();
    replay_exact(&trace, &mut exact);
    println!(
        "mixed trace (seed {TRACE_SEED:#x}, {} operations, {TRACE_STREAMS} streams): peak live {:.1} MiB; \
         caching allocator peak reserved {:.1} MiB, fragmentation {:.3} (hits {}, cross-stream {}, misses {}); \
         exact-size cache peak reserved {:.1} MiB, fragmentation {:.3}",
        trace.len(),
        mib(peak),
        mib(stats.peak_reserved),
        stats.peak_reserved as f64 / peak as f64,
        stats.hits,
        stats.cross_stream_hits,
        stats.misses,
        mib(exact.peak_reserved),
        exact.peak_reserved as f64 / peak as f64,
    );

    let mut group = c.benchmark_group("allocator/mixed trace");
    group.sample_size(20);
    group.bench_function("caching, whole trace", |b| {
        // A warm allocator: segments already held, as in a training loop's later steps.
        let mut allocator = device_allocator();
        let mut driver = NullDriver::new(true);
        replay(&trace, &mut allocator, &mut driver);
        b.iter(|| replay(&trace, &mut allocator, &mut driver))
    });
    group.bench_function("exact-size baseline, whole trace", |b| {
        let mut exact = ExactSizeCache::default();
        replay_exact(&trace, &mut exact);
        b.iter(|| replay_exact(&trace, &mut exact))
    });
    group.finish();
}

/// The peer's mixed figure (PyTorch, 607 ns on an H200 box): 64 live blocks of 512 B .. 1 MiB
/// on one stream, each round frees one at random and allocates a new random size.
fn replace_one_of_64(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocator/replace one of 64 live");
    let mut rng = TraceRng::new(88_172_645_463_325_252);
    let mut allocator = device_allocator();
    let mut driver = NullDriver::new(true);
    let random_request = |rng: &mut TraceRng| {
        AllocRequest::new(MemoryKind::Device, 512 + rng.below(1 << 20) as usize)
            .on_stream(StreamId(0), &[])
    };
    let mut live: Vec<_> = (0..64)
        .map(|_| {
            allocator
                .allocate(&mut driver, &random_request(&mut rng))
                .unwrap()
                .handle
        })
        .collect();
    group.bench_function("caching", |b| {
        b.iter(|| {
            let slot = rng.below(64) as usize;
            allocator
                .free(&mut driver, live[slot], Release::OnStream(StreamId(0)))
                .unwrap();
            live[slot] = allocator
                .allocate(&mut driver, &random_request(&mut rng))
                .unwrap()
                .handle;
        })
    });
    let mut exact = ExactSizeCache::default();
    let mut exact_live: Vec<(usize, usize)> = (0..64)
        .map(|_| {
            let size = 512 + rng.below(1 << 20) as usize;
            (size, exact.allocate(size))
        })
        .collect();
    group.bench_function("exact-size baseline", |b| {
        b.iter(|| {
            let slot = rng.below(64) as usize;
            let (size, address) = exact_live[slot];
            exact.free(size, address);
            let size = 512 + rng.below(1 << 20) as usize;
            exact_live[slot] = (size, exact.allocate(size));
        })
    });
    group.finish();
    let stats = allocator.stats(MemoryKind::Device);
    println!(
        "replace one of 64 live: caching allocator {} hits, {} misses, peak reserved {:.1} MiB",
        stats.hits,
        stats.misses,
        mib(stats.peak_reserved)
    );
}

fn replay(trace: &[TraceOp], allocator: &mut DeviceAllocator, driver: &mut NullDriver) {
    let mut live = vec![None; trace.len()];
    for op in trace {
        match *op {
            TraceOp::Allocate { id, size, stream } => {
                let stream = StreamId(stream);
                let request = AllocRequest::new(MemoryKind::Device, size).on_stream(stream, &[]);
                live[id] = Some((allocator.allocate(driver, &request).unwrap().handle, stream));
            }
            TraceOp::Free { id } => {
                let (handle, stream) = live[id].take().unwrap();
                allocator
                    .free(driver, handle, Release::OnStream(stream))
                    .unwrap();
            }
        }
    }
}

fn replay_exact(trace: &[TraceOp], exact: &mut ExactSizeCache) {
    let mut live = vec![(0, 0); trace.len()];
    for op in trace {
        match *op {
            TraceOp::Allocate { id, size, .. } => live[id] = (size, exact.allocate(size)),
            TraceOp::Free { id } => exact.free(live[id].0, live[id].1),
        }
    }
}

fn cross_stream(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocator/cross-stream reuse");
    for (name, complete) in [("free already complete", true), ("one wait", false)] {
        let mut allocator = device_allocator();
        let mut driver = NullDriver::new(complete);
        // A block that fills its segment, so no same-stream remainder can serve the next round.
        let on = |stream| {
            AllocRequest::new(MemoryKind::Device, 20 << 20).on_stream(StreamId(stream), &[])
        };
        let warm = allocator.allocate(&mut driver, &on(0)).unwrap();
        allocator
            .free(&mut driver, warm.handle, Release::OnStream(StreamId(0)))
            .unwrap();
        let mut from = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                // Freed on one stream, taken by the other: every round crosses streams.
                let to = 1 - from;
                let allocation = allocator.allocate(&mut driver, &on(to)).unwrap();
                allocator
                    .free(
                        &mut driver,
                        allocation.handle,
                        Release::OnStream(StreamId(to)),
                    )
                    .unwrap();
                from = to;
            })
        });
    }
    group.finish();
}

/// `gpu-alloc-replay`'s engine: parsing and replaying trace lines (the committed mixed trace
/// written in the allocation trace format, with a use on another stream every 16th
/// allocation), in events per second (target: at least 5 M).
fn trace_replay(c: &mut Criterion) {
    use gpu_core::allocator::replay::Replay;
    let mut text = String::new();
    let mut events = 0u64;
    for op in mixed_trace(0x5EED_A110C, 200_000, 4) {
        match op {
            TraceOp::Allocate { id, size, stream } => {
                text.push_str(&format!("alloc {id} 0 {stream} {size}\n"));
                if id % 16 == 0 {
                    text.push_str(&format!("use {id} {}\n", (stream + 1) % 4));
                    events += 1;
                }
            }
            TraceOp::Free { id } => text.push_str(&format!("free {id}\n")),
        }
        events += 1;
    }
    let mut group = c.benchmark_group("trace_replay");
    group.throughput(criterion::Throughput::Elements(events));
    group.sample_size(10);
    group.bench_function("parse_and_replay_default", |b| {
        b.iter(|| {
            let mut replay = Replay::new(Vec::new(), None);
            for line in text.as_bytes().split(|&b| b == b'\n') {
                replay.feed_line(line).unwrap();
            }
            black_box(replay.finish())
        })
    });
    group.finish();
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

criterion_group!(
    benches,
    hit,
    replace_one_of_64,
    mixed,
    cross_stream,
    trace_replay
);
criterion_main!(benches);
