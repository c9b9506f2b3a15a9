//! What the C API costs on top of the runtime, on the host backend, same run: each pair runs the
//! same runtime work once through the exported `gpurt_*` functions (process-wide session, handle
//! tables, token ids, status codes, panic guard) and once through `Runtime` called from Rust.
//! - an allocation hit: alloc + free of a cached device size;
//! - a fork of a token into two and the join of the two branches (planning only: one event
//!   record and waits on the host backend's streams);
//! - a lookup of a locked host range.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gpu_capi::capi::{
    GPURT_MEMORY_DEVICE, GpurtMemory, GpurtToken, gpurt_alloc, gpurt_alloc_after, gpurt_fork,
    gpurt_free, gpurt_join, gpurt_lock, gpurt_lookup, gpurt_open, gpurt_unlock, gpurt_wait,
};
use gpu_capi::shared::GpurtStatus;
use gpu_runtime::allocator::MemoryKind;
use gpu_runtime::host::{HostBackend, HostConfig};
use gpu_runtime::id::DeviceId;
use gpu_runtime::runtime::Runtime;

const D0: DeviceId = DeviceId(0);

fn ok(status: GpurtStatus) {
    assert_eq!(status, GpurtStatus::Ok, "a C API call failed");
}

fn pairs(c: &mut Criterion) {
    // SAFETY: a NUL-terminated name.
    ok(unsafe { gpurt_open(c"host".as_ptr()) });
    let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap();
    let mut group = c.benchmark_group("capi");

    group.bench_function("runtime_alloc_free_hit", |b| {
        b.iter(|| rt.free(black_box(rt.alloc(D0, MemoryKind::Device, 256).unwrap())))
    });
    group.bench_function("capi_alloc_free_hit", |b| {
        let mut memory = GpurtMemory::default();
        b.iter(|| {
            // SAFETY: `memory` is writable.
            ok(unsafe { gpurt_alloc(0, GPURT_MEMORY_DEVICE, 256, &mut memory) });
            ok(gpurt_free(black_box(memory)));
        })
    });

    // A token to fork: the stream-ordered allocation of a buffer kept for the whole run.
    let (_kept, first) = rt
        .alloc_after(D0, MemoryKind::Device, 64, &mut Vec::new())
        .unwrap();
    let mut rt_token = Some(first);
    group.bench_function("runtime_fork_join", |b| {
        b.iter(|| {
            let mut branches = rt.fork(rt_token.take().unwrap(), 2).unwrap();
            rt_token = Some(rt.join(&mut branches).unwrap());
        })
    });
    let (mut kept, mut token) = (GpurtMemory::default(), GpurtToken::default());
    // SAFETY: out-parameters are writable; no `after` tokens.
    ok(unsafe {
        gpurt_alloc_after(
            0,
            GPURT_MEMORY_DEVICE,
            64,
            std::ptr::null(),
            0,
            &mut kept,
            &mut token,
        )
    });
    group.bench_function("capi_fork_join", |b| {
        let mut branches = [GpurtToken::default(); 2];
        b.iter(|| {
            // SAFETY: room for two branches.
            ok(unsafe { gpurt_fork(token, 2, branches.as_mut_ptr()) });
            // SAFETY: the two branches the fork wrote, and room for the joined token.
            ok(unsafe { gpurt_join(branches.as_ptr(), 2, &mut token) });
        })
    });
    rt.wait(rt_token.take().unwrap()).unwrap();
    ok(gpurt_wait(token));
    ok(gpurt_free(kept));

    let host = vec![0u8; 1 << 16];
    let address = host.as_ptr() as usize;
    rt.lock_range(address, host.len()).unwrap();
    group.bench_function("runtime_lookup", |b| {
        b.iter(|| black_box(rt.pinned_address(black_box(address + 64), 256, D0).unwrap()))
    });
    // SAFETY: `host` outlives the lock.
    ok(unsafe { gpurt_lock(host.as_ptr().cast(), host.len()) });
    group.bench_function("capi_lookup", |b| {
        let mut found = std::ptr::null_mut();
        b.iter(|| {
            // SAFETY: `found` is writable.
            ok(unsafe { gpurt_lookup(black_box(host[64..].as_ptr().cast()), 256, 0, &mut found) });
            black_box(found)
        })
    });
    ok(gpurt_unlock(host.as_ptr().cast()));
    rt.unlock_range(address).unwrap();
    group.finish();
}

criterion_group!(benches, pairs);
criterion_main!(benches);
