//! Allocation in the order of streams the runtime did not create (a framework's, as PyTorch
//! hands its `cudaStream_t` to a pluggable allocator), on the host backend, whose streams stand
//! in for the framework's: a lane per stream, reuse on the same stream at once and on another
//! only after the first stream's work (never a device synchronisation), the out-of-memory
//! ladder, typed errors that change nothing, threads, and a property test against a model of
//! the live allocations.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use gpu_core::allocator::{AllocatorStats, MemoryKind};
use gpu_core::backend::{Backend, KernelArg, LaunchDims};
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig, HostStream, WorkOp};
use gpu_rt::runtime::{Runtime, RuntimeConfig, with_device};
use proptest::prelude::*;

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);
const MIB: usize = 1 << 20;

/// A runtime over a host backend with `devices` devices of `capacity` bytes each; the test
/// keeps the backend too, as the framework owning the streams.
fn runtime(devices: usize, capacity: usize) -> (Arc<HostBackend>, Runtime<HostBackend>) {
    let mut config = HostConfig::with_devices(devices);
    for device in &mut config.devices {
        device.memory_capacity = capacity;
    }
    let backend = Arc::new(HostBackend::new(config));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    (backend, rt)
}

/// A stream "the framework" creates on `device`, behind the runtime's back.
fn framework_stream(backend: &HostBackend, device: DeviceId) -> HostStream {
    with_device(backend, device, || backend.stream_create(device)).unwrap()
}

fn device_stats(rt: &Runtime<HostBackend>, device: DeviceId) -> AllocatorStats {
    rt.stats()
        .allocator
        .into_iter()
        .find(|&(d, kind, _)| d == device && kind == MemoryKind::Device)
        .map(|(_, _, stats)| stats)
        .unwrap()
}

fn alloc(rt: &Runtime<HostBackend>, device: DeviceId, size: usize, stream: HostStream) -> usize {
    // SAFETY: `stream` is a live stream of `device`, destroyed only after the runtime.
    unsafe { rt.alloc_on_foreign_stream(device, MemoryKind::Device, size, stream.raw()) }.unwrap()
}

fn free(
    rt: &Runtime<HostBackend>,
    device: DeviceId,
    address: usize,
    size: usize,
    stream: HostStream,
) -> Result<(), Error> {
    // SAFETY: as in `alloc`.
    unsafe { rt.free_on_foreign_stream(device, address, size, stream.raw()) }
}

/// Shuts the runtime down, then checks the driver got back everything it gave (allocations
/// still live included), that the framework's streams are still alive, and destroys them.
fn finish(backend: &HostBackend, rt: Runtime<HostBackend>, streams: &[(DeviceId, HostStream)]) {
    rt.shutdown().unwrap();
    let stats = backend.stats();
    assert_eq!(
        stats.streams,
        streams.len(),
        "the runtime destroyed a framework stream"
    );
    for &(device, stream) in streams {
        with_device(backend, device, || backend.stream_destroy(stream)).unwrap();
    }
    let stats = backend.stats();
    assert_eq!(
        (stats.allocations, stats.streams, stats.events),
        (0, 0, 0),
        "{stats:?}"
    );
}

/// Runs `f` with `device` current, as the framework would enqueue its own work.
fn on<T>(backend: &HostBackend, device: DeviceId, f: impl FnOnce() -> gpu_core::Result<T>) -> T {
    with_device(backend, device, f).unwrap()
}

#[test]
fn a_block_freed_on_a_stream_is_reused_on_it_at_once_with_no_driver_call() {
    let (backend, rt) = runtime(1, 1 << 30);
    let s = framework_stream(&backend, D0);
    let first = alloc(&rt, D0, 4096, s);
    free(&rt, D0, first, 4096, s).unwrap();
    let (calls, before) = (backend.calls(), device_stats(&rt, D0));
    let again = alloc(&rt, D0, 4096, s);
    assert_eq!(again, first);
    assert_eq!(
        backend.calls().since(&calls).total,
        0,
        "a hit calls no driver"
    );
    let after = device_stats(&rt, D0);
    assert_eq!((after.hits, after.misses), (before.hits + 1, before.misses));
    free(&rt, D0, again, 4096, s).unwrap();
    finish(&backend, rt, &[(D0, s)]);
}

/// The only cached block was freed on S1 while S1's kernel (held at a gate) still writes it:
/// S2 gets it only by waiting on an event recorded on S1, never by synchronising anything,
/// and S2's own use of it runs after the kernel although it was enqueued first.
#[test]
fn a_block_freed_on_another_stream_is_reused_only_after_that_streams_work() {
    const BLOCK: usize = 16 * MIB;
    let (backend, rt) = runtime(1, 1 << 30);
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    backend.register_kernel("gated_write", move |ctx, _| {
        gate_rx.lock().unwrap().recv().ok();
        ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.set(0, 0xdead)
    });
    let (s1, s2) = (
        framework_stream(&backend, D0),
        framework_stream(&backend, D0),
    );
    let x = alloc(&rt, D0, BLOCK, s1);
    let kernel = on(&backend, D0, || backend.kernel(D0, "gated_write"));
    // SAFETY: the kernel writes 4 bytes at the start of the live block it is given.
    on(&backend, D0, || unsafe {
        backend.launch(s1, kernel, LaunchDims::linear(1, 1), &[KernelArg::Ptr(x)])
    });
    free(&rt, D0, x, BLOCK, s1).unwrap();
    let calls = backend.calls();
    let y = alloc(&rt, D0, BLOCK, s2);
    assert_eq!(
        y, x,
        "the block cached on S1 is borrowed before the driver is asked"
    );
    let since = backend.calls().since(&calls);
    assert_eq!(since.of(CallKind::DeviceSynchronize), 0);
    assert_eq!(since.of(CallKind::StreamSynchronize), 0);
    assert_eq!(since.of(CallKind::EventSynchronize), 0);
    assert_eq!(since.of(CallKind::EventRecord), 1);
    assert_eq!(since.of(CallKind::StreamWaitEvent), 1);
    assert_eq!(device_stats(&rt, D0).cross_stream_hits, 1);
    // SAFETY: the block is live and S2's work is ordered after S1's kernel.
    on(&backend, D0, || unsafe { backend.fill(s2, y, 7, BLOCK) });
    gate_tx.send(()).unwrap();
    on(&backend, D0, || backend.stream_synchronize(s2));
    let log = backend.work_log();
    let kernel_done = log
        .iter()
        .find(|r| r.stream == s1 && matches!(r.op, WorkOp::Launch { .. }))
        .unwrap()
        .finished;
    let fill_started = log
        .iter()
        .find(|r| r.stream == s2 && matches!(r.op, WorkOp::Fill { .. }))
        .unwrap()
        .started;
    assert!(fill_started > kernel_done, "{log:?}");
    free(&rt, D0, y, BLOCK, s2).unwrap();
    finish(&backend, rt, &[(D0, s1), (D0, s2)]);
}

/// A block also used on S2 (recorded as PyTorch's `record_stream` does) and freed on S1 is not
/// handed out again, on S1 either, while S2's kernel (held at a gate) may still use it; once
/// that kernel has finished, the block comes back.
#[test]
fn a_block_recorded_on_another_stream_waits_for_that_streams_work() {
    const BLOCK: usize = 16 * MIB;
    let (backend, rt) = runtime(1, 1 << 30);
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    backend.register_kernel("gated_read", move |ctx, _| {
        gate_rx.lock().unwrap().recv().ok();
        ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.get(0).map(drop)
    });
    let (s1, s2) = (
        framework_stream(&backend, D0),
        framework_stream(&backend, D0),
    );
    let x = alloc(&rt, D0, BLOCK, s1);
    let kernel = on(&backend, D0, || backend.kernel(D0, "gated_read"));
    // SAFETY: the kernel reads 4 bytes at the start of the live block it is given.
    on(&backend, D0, || unsafe {
        backend.launch(s2, kernel, LaunchDims::linear(1, 1), &[KernelArg::Ptr(x)])
    });
    // SAFETY: a live stream of the device.
    unsafe { rt.mark_used_on_foreign_stream(D0, x, s2.raw()) }.unwrap();
    free(&rt, D0, x, BLOCK, s1).unwrap();
    let pending = device_stats(&rt, D0).pending;
    assert_eq!(pending, BLOCK, "the block waits for S2's kernel");
    let y = alloc(&rt, D0, BLOCK, s1);
    assert_ne!(y, x, "handed out while S2's kernel may still read it");
    gate_tx.send(()).unwrap();
    on(&backend, D0, || backend.stream_synchronize(s2));
    free(&rt, D0, y, BLOCK, s1).unwrap();
    // The recorded use has completed: the next look at pending blocks (a trim here) returns it.
    rt.trim().unwrap();
    assert_eq!(device_stats(&rt, D0).pending, 0);
    // SAFETY: `s2` is a live stream of D0, destroyed after the runtime; the call is refused
    // before anything is adopted or enqueued.
    let marked = unsafe { rt.mark_used_on_foreign_stream(D0, x + 512, s2.raw()) };
    assert_eq!(
        marked,
        Err(Error::UnknownAddress {
            device: D0,
            address: x + 512
        })
    );
    finish(&backend, rt, &[(D0, s1), (D0, s2)]);
}

/// Bad frees and a stream of another device are typed errors that change nothing.
#[test]
fn misuse_is_a_typed_error_that_changes_nothing() {
    let (backend, rt) = runtime(2, 1 << 30);
    let (s0, s1) = (
        framework_stream(&backend, D0),
        framework_stream(&backend, D1),
    );
    let live = alloc(&rt, D0, 1000, s0);
    let gone = alloc(&rt, D0, 1000, s0);
    free(&rt, D0, gone, 1000, s0).unwrap();
    let (calls, before) = (backend.calls(), rt.stats());
    let unknown = |address| Error::UnknownAddress {
        device: D0,
        address,
    };
    assert_eq!(
        free(&rt, D0, gone, 1000, s0),
        Err(unknown(gone)),
        "double free"
    );
    assert_eq!(
        free(&rt, D0, live + 512, 1000, s0),
        Err(unknown(live + 512))
    );
    assert_eq!(
        free(&rt, D1, live, 1000, s1),
        Err(Error::UnknownAddress {
            device: D1,
            address: live
        }),
        "freed on the wrong device"
    );
    assert_eq!(
        free(&rt, D0, live, 999, s0),
        Err(Error::FreeSizeMismatch {
            address: live,
            given: 999,
            allocated: 1000
        })
    );
    let try_alloc = |device, size, raw| {
        // SAFETY: `raw` is a live stream destroyed after the runtime, or no stream at all; each
        // call here is refused before anything is adopted or enqueued.
        unsafe { rt.alloc_on_foreign_stream(device, MemoryKind::Device, size, raw) }
    };
    let refused = [
        try_alloc(D0, 0, s0.raw()),
        try_alloc(DeviceId(2), 64, s0.raw()),
        try_alloc(D0, 64, s1.raw()),
        try_alloc(D0, 64, 0),
    ];
    assert!(
        matches!(refused[0], Err(Error::ZeroSize { .. })),
        "{refused:?}"
    );
    assert!(
        matches!(refused[1], Err(Error::UnknownDevice { .. })),
        "{refused:?}"
    );
    for other_device_or_unknown in &refused[2..] {
        let Err(Error::Driver(e)) = other_device_or_unknown else {
            panic!("{refused:?}");
        };
        assert_eq!(e.name, "HOST_INVALID_HANDLE");
    }
    assert_eq!(rt.stats(), before, "a refused call changed the runtime");
    assert_eq!(backend.calls().since(&calls).total, 0);
    free(&rt, D0, live, 1000, s0).unwrap();
    finish(&backend, rt, &[(D0, s0), (D1, s1)]);
}

/// A request the driver cannot serve beside a block cached on another stream (too small to
/// serve it, so not released before growing) succeeds after the ladder returns that block's
/// segment; one no ladder can serve is `OutOfMemory` with the numbers, and the live
/// allocations are untouched.
/// A reset destroys every stream of the device, the framework's too: a stream adopted before
/// it is refused after it (the runtime does not map its raw value to the dead stream), a new
/// one is adopted afresh, and the other device's adopted stream goes on.
#[test]
fn streams_adopted_before_a_reset_are_gone_after_it() {
    let (backend, rt) = runtime(2, 1 << 30);
    let (old, on_1) = (
        framework_stream(&backend, D0),
        framework_stream(&backend, D1),
    );
    let kept = alloc(&rt, D1, 4096, on_1);
    free(&rt, D0, alloc(&rt, D0, 4096, old), 4096, old).unwrap();
    rt.reset_device(D0).unwrap();
    // SAFETY: refused (the stream died with the reset), so nothing is enqueued on it.
    let refused = unsafe { rt.alloc_on_foreign_stream(D0, MemoryKind::Device, 64, old.raw()) };
    let Err(Error::Driver(e)) = refused else {
        panic!("{refused:?}");
    };
    assert_eq!(e.name, "HOST_INVALID_HANDLE");
    let new = framework_stream(&backend, D0);
    let address = alloc(&rt, D0, 4096, new);
    free(&rt, D0, address, 4096, new).unwrap();
    free(&rt, D1, kept, 4096, on_1).unwrap();
    finish(&backend, rt, &[(D0, new), (D1, on_1)]);
}

#[test]
fn out_of_memory_climbs_the_ladder_before_failing() {
    let (backend, rt) = runtime(1, 40 * MIB);
    let (s1, s2) = (
        framework_stream(&backend, D0),
        framework_stream(&backend, D0),
    );
    let a = alloc(&rt, D0, 16 * MIB, s1);
    let b = alloc(&rt, D0, 16 * MIB, s1);
    free(&rt, D0, b, 16 * MIB, s1).unwrap();
    let c = alloc(&rt, D0, 20 * MIB, s2);
    let stats = device_stats(&rt, D0);
    assert!(stats.oom_retries >= 1, "{stats:?}");
    assert_eq!(stats.segment_frees, 1, "{stats:?}");
    assert_eq!(stats.reserved, 36 * MIB, "{stats:?}");
    // SAFETY: a live stream of the device.
    let err = unsafe { rt.alloc_on_foreign_stream(D0, MemoryKind::Device, 64 * MIB, s2.raw()) }
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfMemory {
                requested,
                allocated,
                ..
            } if requested == 64 * MIB && allocated == 36 * MIB
        ),
        "{err}"
    );
    free(&rt, D0, a, 16 * MIB, s1).unwrap();
    free(&rt, D0, c, 20 * MIB, s2).unwrap();
    finish(&backend, rt, &[(D0, s1), (D0, s2)]);
}

/// Live allocations, checked for overlap as they are handed out.
#[derive(Default)]
struct Live(BTreeMap<usize, usize>);

impl Live {
    fn insert(&mut self, address: usize, size: usize) {
        let below = self.0.range(..=address).next_back();
        assert!(
            below.is_none_or(|(&start, &len)| start + len <= address),
            "{address:#x}+{size} overlaps {below:?}"
        );
        let above = self.0.range(address..).next();
        assert!(
            above.is_none_or(|(&start, _)| address + size <= start),
            "{address:#x}+{size} overlaps {above:?}"
        );
        self.0.insert(address, size);
    }
}

/// Autograd's threads: each allocates and frees on its own stream, all on one device.
#[test]
fn threads_on_their_own_streams_never_get_overlapping_blocks() {
    let (backend, rt) = runtime(1, 1 << 30);
    let streams: Vec<HostStream> = (0..4).map(|_| framework_stream(&backend, D0)).collect();
    let live = Mutex::new(Live::default());
    std::thread::scope(|scope| {
        for (thread, &stream) in streams.iter().enumerate() {
            let (rt, live) = (&rt, &live);
            scope.spawn(move || {
                let mut mine = Vec::new();
                for step in 0..300usize {
                    let size = 512 + (step * 7919 + thread * 104_729) % (3 * MIB);
                    let address = alloc(rt, D0, size, stream);
                    live.lock().unwrap().insert(address, size);
                    mine.push((address, size));
                    if step % 3 != 0 {
                        let (address, size) = mine.swap_remove((step * 31) % mine.len());
                        live.lock().unwrap().0.remove(&address);
                        free(rt, D0, address, size, stream).unwrap();
                    }
                }
                for (address, size) in mine {
                    live.lock().unwrap().0.remove(&address);
                    free(rt, D0, address, size, stream).unwrap();
                }
            });
        }
    });
    let stats = device_stats(&rt, D0);
    assert_eq!(stats.allocated, 0, "{stats:?}");
    let streams: Vec<_> = streams.into_iter().map(|s| (D0, s)).collect();
    finish(&backend, rt, &streams);
}

const STREAMS: usize = 3;
const SIZES: [usize; 5] = [256, 4000, 600 << 10, 3 * MIB, 12 * MIB];
/// Bytes checked at each end of a block when it is freed.
const CHECKED: usize = 256;

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: usize, stream: usize },
    Free { pick: usize, stream: usize },
    FreeUnknown { offset: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (prop::sample::select(SIZES.to_vec()), 0..STREAMS, 0..64usize)
            .prop_map(|(size, stream, extra)| Op::Alloc { size: size + extra, stream }),
        4 => (any::<usize>(), 0..STREAMS).prop_map(|(pick, stream)| Op::Free { pick, stream }),
        1 => (1..4096usize).prop_map(|offset| Op::FreeUnknown { offset }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random allocations and frees on three framework streams, each block filled on its
    /// stream when handed out and checked on the freeing stream before the free (handed to
    /// that stream with an event when it is another, as a framework must): against a
    /// model of the live set, no two live blocks overlap, every bad free is refused, no
    /// block is written by a later owner before its earlier owner's check ran (the checks
    /// count mismatches), and the driver gets every byte back at shutdown.
    #[test]
    fn foreign_stream_allocation_matches_the_live_set_model(
        ops in prop::collection::vec(op(), 1..40)
    ) {
        let (backend, rt) = runtime(1, 1 << 30);
        let mismatches = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&mismatches);
        backend.register_kernel("check_fill", move |ctx, _| {
            let (address, len, value) = (ctx.arg_ptr(0)?, ctx.arg_u64(1)? as usize, ctx.arg_u32(2)?);
            let view = ctx.view::<u8>(address, len)?;
            let ends = (0..CHECKED.min(len)).chain(len.saturating_sub(CHECKED)..len);
            for index in ends {
                if u32::from(view.get(index)?) != value {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        });
        let check = on(&backend, D0, || backend.kernel(D0, "check_fill"));
        let streams: Vec<HostStream> =
            (0..STREAMS).map(|_| framework_stream(&backend, D0)).collect();
        let mut model = Live::default();
        let mut owners: Vec<(usize, usize, u8, usize)> = Vec::new();
        let handoff = on(&backend, D0, || backend.event_create(D0));
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Alloc { size, stream } => {
                    let address = alloc(&rt, D0, size, streams[stream]);
                    model.insert(address, size);
                    let value = (step % 251) as u8 + 1;
                    // SAFETY: the block is live and ordered on this stream.
                    on(&backend, D0, || unsafe { backend.fill(streams[stream], address, value, size) });
                    owners.push((address, size, value, stream));
                }
                Op::Free { pick, stream } if !owners.is_empty() => {
                    let (address, size, value, owner) = owners.swap_remove(pick % owners.len());
                    if owner != stream {
                        // The framework hands the block to the freeing stream in order, as
                        // the contract of a free on a stream requires.
                        on(&backend, D0, || backend.event_record(handoff, streams[owner]));
                        on(&backend, D0, || backend.stream_wait_event(streams[stream], handoff));
                    }
                    // SAFETY: the kernel reads the live block it is given, on the freeing stream.
                    on(&backend, D0, || unsafe {
                        backend.launch(
                            streams[stream],
                            check,
                            LaunchDims::linear(1, 1),
                            &[KernelArg::Ptr(address), KernelArg::U64(size as u64), KernelArg::U32(value.into())],
                        )
                    });
                    model.0.remove(&address);
                    free(&rt, D0, address, size, streams[stream]).unwrap();
                    prop_assert_eq!(
                        free(&rt, D0, address, size, streams[stream]),
                        Err(Error::UnknownAddress { device: D0, address })
                    );
                }
                Op::Free { .. } => {}
                Op::FreeUnknown { offset } => {
                    let address = owners.first().map_or(offset, |&(a, ..)| a + offset);
                    if !model.0.contains_key(&address) {
                        prop_assert_eq!(
                            free(&rt, D0, address, 1, streams[0]),
                            Err(Error::UnknownAddress { device: D0, address })
                        );
                    }
                }
            }
        }
        for &stream in &streams {
            on(&backend, D0, || backend.stream_synchronize(stream));
        }
        prop_assert_eq!(mismatches.load(Ordering::Relaxed), 0);
        let stats = device_stats(&rt, D0);
        prop_assert_eq!(stats.requested, owners.iter().map(|&(_, size, ..)| size).sum::<usize>());
        on(&backend, D0, || backend.event_destroy(handoff));
        let streams: Vec<_> = streams.into_iter().map(|s| (D0, s)).collect();
        finish(&backend, rt, &streams);
    }
}
