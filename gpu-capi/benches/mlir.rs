//! What the MLIR ABI (`mgpu*`) costs on the host backend, same run:
//! - one warm iteration of `clients/mlir/forkjoin.mlir` as the lowering calls the ABI (23
//!   calls; the kernels as memsets, as in the tests): ns per iteration, all in one session, so
//!   the stream table grows by the join input each iteration leaks (an execution of
//!   `clients/mlir/forkjoin.c` runs 1,000 iterations by default; criterion runs hundreds of
//!   thousands);
//! - a memset in a chain on one MLIR stream (`mgpuMemset32`) against the same fill in a token
//!   chain through `Runtime` called from Rust (a raw span, the device current, one `Vec` of
//!   dependencies kept): what the ABI adds to an operation;
//! - an event created and destroyed (two calls that reach no backend): the ABI's fixed cost per
//!   call (the process session, the panic guard, the objects' lock, a handle map).
//!
//! The host backend's own work (its stream threads, its queues) is in every figure but the
//! last; on a GPU the driver's calls take its place.

use std::ffi::c_void;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use gpu_capi::mlir::*;
use gpu_capi::shared::{BackendChoice, OpenOptions, open};
use gpu_runtime::allocator::MemoryKind;
use gpu_runtime::backend::Backend;
use gpu_runtime::backend::FillValue;
use gpu_runtime::host::{HostBackend, HostConfig};
use gpu_runtime::id::DeviceId;
use gpu_runtime::runtime::{Runtime, Span};
use gpu_runtime::token::Token;

#[path = "../src/mlir/forkjoin.rs"]
mod forkjoin;

use forkjoin::{WORDS, forkjoin_iteration};

/// Operations between synchronisations in a chain, so queues stay short.
const BATCH: u64 = 256;

/// Bytes each chained memset writes.
const FILL_BYTES: usize = 64;

fn mlir(c: &mut Criterion) {
    open(OpenOptions {
        backend: BackendChoice::Host,
        trace: None,
    })
    .expect("the host backend opens");
    mgpuSetDefaultDevice(0);
    let mut group = c.benchmark_group("mlir");

    let input = [3u32; WORDS];
    let mut out = [0u32; WORDS];
    // The pools, the allocator's cache and the idle queue warm up.
    forkjoin_iteration(&input, &mut out);
    assert!(out.iter().all(|&word| word == 8), "{out:?}");
    group.bench_function("forkjoin_iteration", |b| {
        b.iter(|| forkjoin_iteration(black_box(&input), &mut out))
    });

    let stream = mgpuStreamCreate();
    let buffer = mgpuMemAlloc(FILL_BYTES as u64, stream, false);
    group.bench_function("mlir_memset_in_chain", |b| {
        b.iter_custom(|iterations| {
            timed(|| {
                for i in 0..iterations {
                    mgpuMemset32(buffer, i as u32, (FILL_BYTES / 4) as u64, stream);
                    if i % BATCH == BATCH - 1 {
                        mgpuStreamSynchronize(stream);
                    }
                }
                mgpuStreamSynchronize(stream);
            })
        })
    });
    mgpuMemFree(buffer, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);

    // The same fill as the ABI's: a raw span, the device current on this thread, and one
    // `Vec` of dependencies kept for the whole chain.
    let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap();
    let d0 = DeviceId(0);
    rt.backend().set_current_device(Some(d0)).unwrap();
    let kept = rt.alloc(d0, MemoryKind::Device, FILL_BYTES).unwrap();
    // SAFETY: `kept` outlives every fill of the chain, each waited for before it goes.
    let span = unsafe { Span::from_raw(kept.address(), FILL_BYTES) };
    group.bench_function("runtime_fill_in_chain", |b| {
        b.iter_custom(|iterations| {
            let mut after: Vec<Token> = Vec::with_capacity(1);
            timed(|| {
                for i in 0..iterations {
                    let value = FillValue::U32(i as u32);
                    let token = rt.fill_elements(d0, span, value, &mut after).unwrap();
                    if i % BATCH == BATCH - 1 {
                        rt.wait(token).unwrap();
                    } else {
                        after.push(token);
                    }
                }
                if let Some(token) = after.pop() {
                    rt.wait(token).unwrap();
                }
            })
        })
    });

    group.bench_function("event_create_destroy", |b| {
        b.iter(|| {
            let event: *mut c_void = mgpuEventCreate();
            mgpuEventDestroy(black_box(event));
        })
    });
    group.finish();
}

/// How long `run` takes.
fn timed(run: impl FnOnce()) -> Duration {
    let start = Instant::now();
    run();
    start.elapsed()
}

criterion_group!(benches, mlir);
criterion_main!(benches);
