//! Threads sharing one device, on the host backend: N threads (1, 4 and 16), each doing rounds
//! of one kernel launch (`fill_u32` of 64 words into a 256-byte buffer of its own) and one
//! 256-byte device-to-device copy (from that buffer to a second one of its own):
//! - `threads/runtime/N`: through the runtime, each thread its own token chain (the launch,
//!   through a kernel handle, after the previous token, the copy after the launch), so that
//!   the planner keeps each thread on a stream of its own; the chain waited for every 64
//!   rounds and at the end;
//! - `threads/backend/N`: the same calls on the backend directly, each thread on its own
//!   stream made ahead (`Backend::launch`, `Backend::copy`), synchronised every 64 rounds and
//!   at the end.
//!
//! The figure is the time of one round of every thread: the wall time from the barrier that
//! starts the threads together until the last of them has finished (its final wait included),
//! divided by the rounds; the throughput counts N elements per round (one launch and one copy
//! per thread). The device is current on every thread for both sides, and the backend keeps no
//! work log (a debugging aid whose lock every thread would share).

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gpu_core::DeviceId;
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, KernelArg, LaunchDims};
use gpu_rt::host::{HostBackend, HostConfig};
use gpu_rt::runtime::{Arg, Runtime};

const D0: DeviceId = DeviceId(0);
/// The thread counts measured.
const THREADS: [usize; 3] = [1, 4, 16];
/// Bytes of each buffer, all of which the kernel writes and the copy moves.
const BYTES: usize = 256;
/// The words the kernel writes, one per GPU thread.
const WORDS: u32 = (BYTES / 4) as u32;
/// Rounds between waits, so queues stay short.
const ROUNDS_PER_WAIT: u64 = 64;

/// The wall time from the barrier that starts `threads` threads together until the last of
/// them has returned from `work(thread)`; the device is made current on each thread first.
/// The clock starts when the first thread leaves the barrier (the threads read it themselves:
/// with more threads than cores, a thread that only watched could run late).
fn time_threads(threads: usize, backend: &HostBackend, work: impl Fn(usize) + Sync) -> Duration {
    let start = Barrier::new(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let (start, work) = (&start, &work);
                scope.spawn(move || {
                    backend.set_current_device(Some(D0)).unwrap();
                    start.wait();
                    let started = Instant::now();
                    work(thread);
                    (started, Instant::now())
                })
            })
            .collect();
        let spans: Vec<_> = workers
            .into_iter()
            .map(|worker| worker.join().unwrap())
            .collect();
        let started = spans.iter().map(|&(started, _)| started).min().unwrap();
        let finished = spans.iter().map(|&(_, finished)| finished).max().unwrap();
        finished - started
    })
}

fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads");
    let rt = Runtime::new(HostBackend::new(HostConfig {
        work_log_capacity: 0,
        ..HostConfig::with_devices(1)
    }))
    .unwrap();
    let most = THREADS[THREADS.len() - 1];
    // Each thread's pair: the kernel fills the first buffer, the copy moves it to the second.
    let buffers: Vec<_> = (0..most)
        .map(|_| {
            let alloc = || rt.alloc(D0, MemoryKind::Device, BYTES).unwrap();
            (alloc(), alloc())
        })
        .collect();
    let fill = rt.kernel(D0, "fill_u32").unwrap();
    let dims = LaunchDims::linear(1, WORDS);

    let backend = rt.backend();
    backend.set_current_device(Some(D0)).unwrap();
    let kernel = backend.kernel(D0, "fill_u32").unwrap();
    let streams: Vec<_> = (0..most)
        .map(|_| backend.stream_create(D0).unwrap())
        .collect();

    for n in THREADS {
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new("runtime", n), |b| {
            b.iter_custom(|rounds| {
                time_threads(n, backend, |thread| {
                    let (filled, copy) = &buffers[thread];
                    let args = [
                        Arg::Span(filled.all()),
                        Arg::U32(thread as u32),
                        Arg::U64(u64::from(WORDS)),
                    ];
                    let mut chain = Vec::with_capacity(1);
                    for round in 0..rounds {
                        // SAFETY: a library kernel: the runtime checks how far it reaches into
                        // its span.
                        let launched = unsafe { fill.launch(dims, &args, &mut chain) }.unwrap();
                        chain.push(launched);
                        let copied = rt.copy(D0, copy.all(), filled.all(), &mut chain).unwrap();
                        chain.push(copied);
                        if round % ROUNDS_PER_WAIT == ROUNDS_PER_WAIT - 1 {
                            rt.wait(chain.pop().unwrap()).unwrap();
                        }
                    }
                    if let Some(token) = chain.pop() {
                        rt.wait(token).unwrap();
                    }
                })
            })
        });
        group.bench_function(BenchmarkId::new("backend", n), |b| {
            b.iter_custom(|rounds| {
                time_threads(n, backend, |thread| {
                    let ((filled, copy), stream) = (&buffers[thread], streams[thread]);
                    let args = [
                        KernelArg::Ptr(filled.address()),
                        KernelArg::U32(thread as u32),
                        KernelArg::U64(u64::from(WORDS)),
                    ];
                    for round in 0..rounds {
                        // SAFETY: (both calls) the thread's own two live buffers of the
                        // runtime, which the runtime does not use meanwhile; the kernel writes
                        // its 64 words of the first, which fit.
                        unsafe {
                            backend.launch(stream, kernel, dims, &args).unwrap();
                            backend
                                .copy(stream, copy.address(), filled.address(), BYTES)
                                .unwrap();
                        }
                        if round % ROUNDS_PER_WAIT == ROUNDS_PER_WAIT - 1 {
                            backend.stream_synchronize(stream).unwrap();
                        }
                    }
                    backend.stream_synchronize(stream).unwrap();
                })
            })
        });
    }
    for stream in streams {
        backend.stream_destroy(stream).unwrap();
    }
    backend.set_current_device(None).unwrap();
    group.finish();
}

criterion_group!(benches, threads);
criterion_main!(benches);
