//! Host backend benchmarks, each beside a baseline measured in the same run: a stream round
//! trip (enqueue + synchronise) beside a bare channel round trip to a worker thread; an
//! allocation pair beside the system allocator's; a 64 MiB device-to-host copy beside
//! `copy_from_slice`; an event record + cross-stream wait + synchronise.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::hint::black_box;
use std::sync::mpsc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpu_core::DeviceId;
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_rt::host::{HostBackend, HostConfig, HostStream};

const D0: DeviceId = DeviceId(0);
const COPY_BYTES: usize = 64 << 20;

fn open() -> (HostBackend, HostStream) {
    let backend = HostBackend::new(HostConfig {
        work_log_capacity: 0,
        ..HostConfig::with_devices(1)
    });
    backend.set_current_device(Some(D0)).unwrap();
    let stream = backend.stream_create(D0).unwrap();
    (backend, stream)
}

fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_trip");
    let (backend, stream) = open();
    let buffer = backend
        .allocate(D0, MemoryKind::Device, 256)
        .unwrap()
        .unwrap();
    group.bench_function("host_fill_256B_and_synchronize", |b| {
        b.iter(|| {
            // SAFETY: `buffer` is a live 256-byte allocation of `backend`.
            unsafe { backend.fill(stream, buffer, 1, 256) }.unwrap();
            backend.stream_synchronize(stream).unwrap();
        })
    });

    // Baseline: hand a message to a worker thread and wait for its answer.
    let (to_worker, work) = mpsc::channel::<u64>();
    let (to_caller, done) = mpsc::channel::<u64>();
    let worker = std::thread::spawn(move || {
        for n in work {
            if to_caller.send(n + 1).is_err() {
                break;
            }
        }
    });
    group.bench_function("baseline_channel_round_trip", |b| {
        b.iter(|| {
            to_worker.send(black_box(1)).unwrap();
            black_box(done.recv().unwrap());
        })
    });
    drop(to_worker);
    worker.join().unwrap();
    backend.free(D0, MemoryKind::Device, buffer, None).unwrap();
    backend.stream_destroy(stream).unwrap();
    group.finish();
}

fn allocation(c: &mut Criterion) {
    let mut group = c.benchmark_group("alloc_free_4KiB");
    let (backend, stream) = open();
    group.bench_function("host_allocate_free", |b| {
        b.iter(|| {
            let a = backend
                .allocate(D0, MemoryKind::Device, 4096)
                .unwrap()
                .unwrap();
            backend
                .free(D0, MemoryKind::Device, black_box(a), None)
                .unwrap();
        })
    });
    let layout = Layout::from_size_align(4096, 256).unwrap();
    group.bench_function("baseline_alloc_zeroed_dealloc", |b| {
        b.iter(|| {
            // SAFETY: non-zero layout; the pointer is freed with the same layout.
            unsafe {
                let p = alloc_zeroed(layout);
                dealloc(black_box(p), layout);
            }
        })
    });
    backend.stream_destroy(stream).unwrap();
    group.finish();
}

fn copy(c: &mut Criterion) {
    let mut group = c.benchmark_group("copy_64MiB");
    group.throughput(Throughput::Bytes(COPY_BYTES as u64));
    group.sample_size(20);
    let (backend, stream) = open();
    let device = backend
        .allocate(D0, MemoryKind::Device, COPY_BYTES)
        .unwrap()
        .unwrap();
    let mut host = vec![0u8; COPY_BYTES];
    // SAFETY: `device` is a live allocation of `COPY_BYTES`.
    unsafe { backend.fill(stream, device, 7, COPY_BYTES) }.unwrap();
    group.bench_function("host_device_to_host", |b| {
        b.iter(|| {
            // SAFETY: `device` is a live allocation and `host` a vector of `COPY_BYTES`, which
            // the host does not touch until the copy is synchronised on the next line.
            unsafe { backend.copy(stream, host.as_mut_ptr() as usize, device, COPY_BYTES) }
                .unwrap();
            backend.stream_synchronize(stream).unwrap();
        })
    });
    let source = vec![7u8; COPY_BYTES];
    group.bench_function("baseline_copy_from_slice", |b| {
        b.iter(|| host.copy_from_slice(black_box(&source)))
    });
    backend.free(D0, MemoryKind::Device, device, None).unwrap();
    backend.stream_destroy(stream).unwrap();
    group.finish();
}

fn event_wait(c: &mut Criterion) {
    let mut group = c.benchmark_group("event");
    let (backend, first) = open();
    let second = backend.stream_create(D0).unwrap();
    let event = backend.event_create(D0).unwrap();
    group.bench_function("host_record_wait_synchronize", |b| {
        b.iter(|| {
            backend.event_record(event, first).unwrap();
            backend.stream_wait_event(second, event).unwrap();
            backend.stream_synchronize(second).unwrap();
        })
    });
    backend.event_destroy(event).unwrap();
    backend.stream_destroy(first).unwrap();
    backend.stream_destroy(second).unwrap();
    group.finish();
}

criterion_group!(benches, round_trip, allocation, copy, event_wait);
criterion_main!(benches);
