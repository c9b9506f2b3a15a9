//! The runtime's own rules on the host backend: token misuse, bounds and devices, buffers
//! freed while work is pending, the device guard (its calls, and on errors and unwinding),
//! device workers, one user thread driving two devices without one delaying the other, and
//! threads sharing one runtime.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, FillValue, LaunchDims};
use gpu_core::error::ByteRange;
use gpu_core::lock_table::{LockCounts, LockOutcome, LockOwner};
use gpu_core::token::UnwaitedKind;
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::{
    Arg, DeviceGuard, LiveObjects, RecordingBackend, Runtime, RuntimeConfig, restore_failures,
    with_device,
};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap()
}

#[test]
fn a_token_used_twice_is_a_typed_error_and_the_deps_stay_with_the_caller() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let token = rt.fill(D0, buffer.all(), 1, &mut vec![]).unwrap();
    let id = token.id();
    rt.wait(token).unwrap();
    let mut deps = vec![gpu_core::token::Token::from_id(id)];
    let err = rt.fill(D0, buffer.all(), 2, &mut deps).unwrap_err();
    assert!(matches!(err, Error::TokenConsumed { .. }), "{err}");
    assert_eq!(
        deps.len(),
        1,
        "a refused call leaves the caller's tokens untouched"
    );
}

#[test]
fn spans_are_bounded_and_device_memory_stays_on_its_device() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 100).unwrap();
    assert_eq!(
        buffer.span(90, 20).err(),
        Some(Error::OutOfBounds {
            offset: 90,
            len: 20,
            size: 100
        })
    );
    assert_eq!(
        buffer.span(usize::MAX, 2).err(),
        Some(Error::OutOfBounds {
            offset: usize::MAX,
            len: 2,
            size: 100
        })
    );
    assert!(matches!(buffer.span(0, 0), Err(Error::ZeroSize { .. })));
    assert_eq!(
        rt.fill(D1, buffer.all(), 0, &mut vec![]).err(),
        Some(Error::WrongDevice {
            expected: D1,
            found: D0
        })
    );
    let other = rt.alloc(D0, MemoryKind::Device, 50).unwrap();
    assert!(matches!(
        rt.copy(D0, other.all(), buffer.all(), &mut vec![]),
        Err(Error::OutOfBounds { .. })
    ));
}

/// A buffer dropped while a kernel that writes it is still running is not handed to another
/// stream before that kernel has finished. The buffer fills a segment of its own (20 MiB), so
/// the only block the allocator can hand out without growing is the one still in use.
#[test]
fn a_buffer_freed_while_in_use_is_reused_only_after_the_use() {
    const BLOCK: usize = 20 << 20;
    let backend = HostBackend::new(HostConfig::with_devices(1));
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let (order_tx, order_rx) = mpsc::channel::<&'static str>();
    let order_tx = Mutex::new(order_tx);
    backend.register_kernel("gated_write", move |ctx, _| {
        release_rx.lock().unwrap().recv().ok();
        let view = ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?;
        view.set(0, 0xdead)?;
        order_tx.lock().unwrap().send("gated write done").ok();
        Ok(())
    });
    let rt = Runtime::new(backend).unwrap();
    let first = rt.alloc(D0, MemoryKind::Device, BLOCK).unwrap();
    let address = first.address();
    // SAFETY: the kernel touches only the span it is given (or none).
    let written = unsafe {
        rt.launch(
            D0,
            "gated_write",
            LaunchDims::linear(1, 1),
            &[Arg::Span(first.all())],
            &mut vec![],
        )
    }
    .unwrap();
    drop(first); // freed while the kernel still waits for its gate
    let (second, ready) = rt
        .alloc_after(D0, MemoryKind::Device, BLOCK, &mut vec![])
        .unwrap();
    let filled = rt.fill(D0, second.all(), 7, &mut vec![ready]).unwrap();
    release_tx.send(()).unwrap();
    assert_eq!(order_rx.recv().unwrap(), "gated write done");
    rt.wait(written).unwrap();
    // Had the fill not been ordered after the gated kernel, the kernel's write would now sit
    // in the reused block.
    let mut back = vec![0u8; BLOCK];
    rt.download(D0, &mut back, second.all(), &mut vec![filled])
        .unwrap();
    if second.address() == address {
        assert!(
            back.iter().all(|&b| b == 7),
            "the reused block was overwritten by the old kernel"
        );
    } else {
        let stats = rt.stats().allocator;
        let device = stats
            .iter()
            .find(|(_, kind, _)| *kind == MemoryKind::Device)
            .unwrap();
        assert!(
            device.2.misses >= 2,
            "not reused, so a second segment was allocated"
        );
    }
}

#[test]
fn the_guard_restores_the_device_on_error_and_on_unwinding() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    backend.set_current_device(Some(D1)).unwrap();
    let failed: Result<(), Error> = with_device(&backend, D0, || {
        assert_eq!(backend.current_device().unwrap(), Some(D0));
        Err(Error::ZeroSize { what: "test" })
    });
    assert!(failed.is_err());
    assert_eq!(backend.current_device().unwrap(), Some(D1));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _guard = DeviceGuard::new(&backend, D0).unwrap();
        panic!("unwinding through a guard");
    }));
    assert!(unwound.is_err());
    assert_eq!(backend.current_device().unwrap(), Some(D1));
    backend.set_current_device(None).unwrap();
}

#[test]
fn the_guard_saves_once_switches_only_to_another_device_and_restores_what_was_saved() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    let guard_calls = |since: &gpu_rt::host::CallCounts| {
        let made = backend.calls().since(since);
        [
            made.of(CallKind::SaveCurrent),
            made.of(CallKind::SetCurrentDevice),
            made.of(CallKind::RestoreCurrent),
            made.of(CallKind::CurrentDevice),
        ]
    };
    for start in [None, Some(D0)] {
        backend.set_current_device(start).unwrap();
        let before = backend.calls();
        with_device(&backend, D0, || Ok(())).unwrap();
        let switch = u64::from(start != Some(D0));
        assert_eq!(
            guard_calls(&before),
            [1, switch, switch, 0],
            "from {start:?}"
        );
        assert_eq!(backend.current_device().unwrap(), start);

        let before = backend.calls();
        let inside = with_device(&backend, D1, || backend.current_device()).unwrap();
        assert_eq!(inside, Some(D1));
        assert_eq!(guard_calls(&before), [1, 1, 1, 1], "from {start:?}");
        assert_eq!(backend.current_device().unwrap(), start);
    }

    // A failed restore leaves the switch in place; the call's own result still comes back.
    let failures = restore_failures();
    backend.fail_nth(CallKind::RestoreCurrent, 1);
    assert_eq!(with_device(&backend, D1, || Ok(7)), Ok(7));
    assert!(restore_failures() > failures);
    assert_eq!(backend.current_device().unwrap(), Some(D1));
    // A failed save fails the bracket before anything changes.
    backend.fail_nth(CallKind::SaveCurrent, 1);
    assert!(with_device(&backend, D0, || Ok(())).is_err());
    assert_eq!(backend.current_device().unwrap(), Some(D1));
    backend.set_current_device(None).unwrap();
}

#[test]
fn workers_run_with_their_device_current_and_errors_are_sticky_until_cleared() {
    let rt = runtime();
    let worker = rt.worker(D1).unwrap();
    assert_eq!(worker.device(), D1);
    let seen = worker
        .submit(|backend: &HostBackend| backend.current_device())
        .wait();
    assert_eq!(seen, Ok(Some(D1)));
    let failed = worker.submit(|_: &HostBackend| -> gpu_core::Result<()> {
        Err(Error::ZeroSize { what: "action" })
    });
    let refused = worker.submit(|_: &HostBackend| Ok(1));
    assert_eq!(failed.wait(), Err(Error::ZeroSize { what: "action" }));
    assert!(matches!(
        refused.wait(),
        Err(Error::QueueFailed { device: D1, .. })
    ));
    assert_eq!(
        worker.clear_error(),
        Some(Error::ZeroSize { what: "action" })
    );
    assert_eq!(worker.submit(|_: &HostBackend| Ok(2)).wait(), Ok(2));
    let panicked =
        worker.submit(|_: &HostBackend| -> gpu_core::Result<()> { panic!("in an action") });
    assert_eq!(panicked.wait(), Err(Error::ActionPanicked { device: D1 }));
    worker.clear_error();
    assert_eq!(
        worker.submit(|_: &HostBackend| Ok(3)).wait(),
        Ok(3),
        "the worker survived"
    );
    assert!(
        std::ptr::eq(worker, rt.worker(D1).unwrap()),
        "one worker per device"
    );
    assert!(matches!(
        rt.worker(DeviceId(2)),
        Err(Error::UnknownDevice { .. })
    ));
}

/// Work on device 0 that cannot finish (its kernel waits for a gate) does not delay a whole
/// round of submissions and a wait on device 1, from the same user thread.
#[test]
fn a_busy_device_does_not_delay_another() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    backend.register_kernel("wait_for_gate", move |_, _| {
        gate_rx.lock().unwrap().recv().ok();
        Ok(())
    });
    let rt = Runtime::new(backend).unwrap();
    // SAFETY: the kernel touches only the span it is given (or none).
    let busy = unsafe {
        rt.launch(
            D0,
            "wait_for_gate",
            LaunchDims::linear(1, 1),
            &[],
            &mut vec![],
        )
    }
    .unwrap();
    let buffer = rt.alloc(D1, MemoryKind::Device, 1 << 20).unwrap();
    let filled = rt.fill(D1, buffer.all(), 3, &mut vec![]).unwrap();
    let mut back = vec![0u8; 1 << 20];
    rt.download(D1, &mut back, buffer.all(), &mut vec![filled])
        .unwrap();
    assert!(
        back.iter().all(|&b| b == 3),
        "device 1 finished while device 0 is still busy"
    );
    gate_tx.send(()).unwrap();
    rt.wait(busy).unwrap();
}

#[test]
fn a_token_left_unwaited_is_reported_at_shutdown() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let forgotten = rt.fill(D0, buffer.all(), 1, &mut vec![]).unwrap();
    let id = forgotten.id();
    drop(forgotten);
    drop(buffer);
    let report = rt.shutdown().unwrap();
    assert_eq!(report.program.unwaited.len(), 1);
    assert_eq!(report.program.unwaited[0].token, id);
}

#[test]
fn locked_host_memory_is_used_directly_and_unpinned_after_its_transfers() {
    let rt = Arc::new(runtime());
    let mut host = vec![5u8; 1 << 16];
    let buffer = rt.alloc(D0, MemoryKind::Device, 1 << 16).unwrap();
    let locked = rt.lock_host(&mut host).unwrap();
    let address = locked.span(0, 1).unwrap().address();
    assert!(rt.pinned_address(address, 1 << 16, D0).unwrap().is_some());
    let uploaded = rt
        .copy(
            D0,
            buffer.all(),
            locked.span(0, 1 << 16).unwrap(),
            &mut vec![],
        )
        .unwrap();
    locked.unlock().unwrap(); // waits for the copy that reads it
    assert_eq!(rt.pinned_address(address, 1, D0).unwrap(), None);
    assert_eq!(rt.stats().locks.entries, 0);
    let mut back = vec![0u8; 1 << 16];
    rt.download(D0, &mut back, buffer.all(), &mut vec![uploaded])
        .unwrap();
    assert!(back.iter().all(|&b| b == 5));
}

/// A copy whose source and destination share bytes is refused before anything is enqueued
/// (cuMemcpyAsync leaves the result undefined); adjacent ranges, and a range onto itself, are
/// fine.
#[test]
fn an_overlapping_copy_is_refused_and_adjacent_ranges_copy() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let operations = rt.stats().operations;
    let err = rt
        .copy(
            D0,
            buffer.span(64, 128).unwrap(),
            buffer.span(0, 128).unwrap(),
            &mut vec![],
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::CopyOverlap { dst, src } if dst.start == src.start + 64),
        "{err}"
    );
    assert_eq!(rt.stats().operations, operations, "nothing was planned");
    let copied = rt
        .copy(
            D0,
            buffer.span(128, 128).unwrap(),
            buffer.span(0, 128).unwrap(),
            &mut vec![],
        )
        .unwrap();
    let onto_itself = rt
        .copy(
            D0,
            buffer.span(0, 128).unwrap(),
            buffer.span(0, 128).unwrap(),
            &mut vec![copied],
        )
        .unwrap();
    rt.wait(onto_itself).unwrap();
}

/// Raw guards (memory the caller manages, e.g. a C program's) nest: a range inside a pinned
/// one is counted, not pinned again; a partial overlap is refused; the last guard unpins, and
/// each guard's transfers land in the caller's memory.
#[test]
fn raw_locked_host_guards_nest_and_carry_transfers() {
    let rt = runtime();
    let mut host = vec![0u8; 4096];
    let base = host.as_mut_ptr();
    let buffer = rt.alloc(D0, MemoryKind::Device, 1024).unwrap();
    let filled = rt.fill(D0, buffer.all(), 7, &mut vec![]).unwrap();
    // SAFETY: `host` outlives both guards and is not touched until they are dropped.
    let (outer, inner) = unsafe {
        (
            rt.lock_host_raw(base, 4096).unwrap(),
            rt.lock_host_raw(base.add(1024), 1024).unwrap(),
        )
    };
    assert_eq!(rt.stats().locks.entries, 1);
    assert_eq!(rt.stats().locks.driver_pins, 1);
    // SAFETY: as above.
    let overlap = unsafe { rt.lock_host_raw(base.add(3072), 2048) }.err();
    assert!(
        matches!(overlap, Some(Error::LockOverlap { .. })),
        "{overlap:?}"
    );
    let copied = rt
        .copy(
            D0,
            inner.span(0, 1024).unwrap(),
            buffer.all(),
            &mut vec![filled],
        )
        .unwrap();
    rt.wait(copied).unwrap();
    inner.unlock().unwrap();
    assert_eq!(rt.stats().locks.entries, 1, "the outer guard still pins");
    drop(outer);
    assert_eq!(rt.stats().locks.entries, 0);
    assert_eq!(rt.stats().locks.driver_unpins, 1);
    assert!(host[1024..2048].iter().all(|&b| b == 7));
    assert!(host[..1024].iter().chain(&host[2048..]).all(|&b| b == 0));
}

/// Issue 20 ("safe means safe"), point 5: `unlock_range` (safe code) took away the pin of a
/// live `LockedHost`, so the lookup said "not pinned" while the guard still handed out spans,
/// and the guard's own unlock then failed with `NotLocked`. The guard owns its lock now: a raw
/// unlock is a typed error that changes nothing, a raw lock nested in the guard's range is the
/// raw unlock's to release, transfers through the guard go on, and the guard unpins cleanly.
#[test]
fn a_raw_unlock_cannot_take_the_pin_of_a_live_locked_host() {
    let rt = runtime();
    let mut host = vec![0u8; 4096];
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let filled = rt.fill(D0, buffer.all(), 9, &mut vec![]).unwrap();
    let mut locked = rt.lock_host(&mut host).unwrap();
    let address = locked.span(0, 1).unwrap().address();
    let entry = ByteRange::new(address, 4096).unwrap();
    let guard_only = LockCounts { raw: 0, guards: 1 };
    let owned = |ptr| Error::PinOwned {
        ptr,
        entry,
        releaser: LockOwner::Raw,
        held: guard_only,
    };
    let before = rt.stats().locks;
    assert_eq!(before.held, guard_only, "the guard's lock is the guard's");
    assert_eq!(rt.unlock_range(address + 100), Err(owned(address + 100)));
    assert_eq!(rt.unlock_range(address), Err(owned(address)));
    assert_eq!(rt.stats().locks, before, "a refused unlock changes nothing");
    assert!(rt.pinned_address(address, 4096, D0).unwrap().is_some());

    let nested = rt.lock_range(address + 64, 64).unwrap();
    assert_eq!(
        (nested.outcome, nested.locks),
        (LockOutcome::Nested, LockCounts { raw: 1, guards: 1 })
    );
    assert_eq!(rt.unlock_range(address).unwrap().remaining, guard_only);
    assert_eq!(rt.unlock_range(address), Err(owned(address)));
    assert!(rt.pinned_address(address, 4096, D1).unwrap().is_some());

    let copied = rt
        .copy(
            D0,
            locked.span(0, 4096).unwrap(),
            buffer.all(),
            &mut vec![filled],
        )
        .unwrap();
    rt.wait(copied).unwrap();
    assert!(locked.memory().unwrap().iter().all(|&b| b == 9));
    drop(locked);
    let after = rt.stats().locks;
    assert_eq!((after.entries, after.held), (0, LockCounts::default()));
    assert_eq!(after.driver_unpins, before.driver_unpins + 1);
    assert_eq!(rt.pinned_address(address, 1, D0).unwrap(), None);
    assert_eq!(rt.backend().stats().registered_ranges, 0);
    drop(buffer);
    assert_eq!(rt.shutdown().unwrap().unpinned_ranges, 0, "nothing left");
}

/// Pageable memory goes through the pinned staging buffers in chunks, each copied on the host
/// by several threads (parts of 2 MiB): a 13 MiB round trip with odd sizes checks every byte.
#[test]
fn staged_transfers_of_pageable_memory_round_trip() {
    let rt = runtime();
    let size = (13 << 20) + 12345;
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let buffer = rt.alloc(D1, MemoryKind::Device, size).unwrap();
    let uploaded = rt.upload(D1, buffer.all(), &data, &mut vec![]).unwrap();
    let mut back = vec![0u8; size];
    rt.download(D1, &mut back, buffer.all(), &mut vec![uploaded])
        .unwrap();
    assert!(back == data, "the round trip changed the data");
}

/// Four threads on two devices allocate (hits and misses), fill through forked tokens (so a
/// buffer is used by two streams and its free records an event, which takes the runtime's state
/// under the device's memory lock), read back through pinned staging and free, all at once.
#[test]
fn threads_sharing_a_runtime_get_their_data_back_and_leak_nothing() {
    const THREADS: u8 = 4;
    const ROUNDS: u8 = 40;
    let backend = Arc::new(RecordingBackend::new(HostBackend::new(
        HostConfig::with_devices(2),
    )));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let rt = &rt;
            scope.spawn(move || {
                let device = DeviceId(u32::from(thread % 2));
                for round in 0..ROUNDS {
                    let value = thread.wrapping_mul(61).wrapping_add(round) | 1;
                    let size = 512 << (round % 5);
                    let half = size / 2;
                    let buffer = rt.alloc(device, MemoryKind::Device, size).unwrap();
                    let cleared = rt.fill(device, buffer.all(), 0, &mut vec![]).unwrap();
                    let mut branches = rt.fork(cleared, 2).unwrap();
                    let (low, high) = (branches.pop().unwrap(), branches.pop().unwrap());
                    let low = rt
                        .fill(device, buffer.span(0, half).unwrap(), value, &mut vec![low])
                        .unwrap();
                    let high = rt
                        .fill(
                            device,
                            buffer.span(half, half).unwrap(),
                            value,
                            &mut vec![high],
                        )
                        .unwrap();
                    let mut back = vec![0u8; size];
                    rt.download(device, &mut back, buffer.all(), &mut vec![low, high])
                        .unwrap();
                    assert!(
                        back.iter().all(|&byte| byte == value),
                        "thread {thread} round {round}: another thread's bytes or a stale fill"
                    );
                    rt.free(buffer).unwrap();
                }
            });
        }
    });
    let stats = rt.stats();
    assert!(stats.waits > 0, "the forked fills ran on two streams");
    let report = rt.shutdown().unwrap();
    assert!(report.program.unwaited.is_empty(), "{report:?}");
    assert_eq!(backend.live(), LiveObjects::default());
    assert_eq!(backend.defects(), vec![]);
}

/// A kernel handle loads once per device, opts in above the default workgroup limit once (to
/// the device's whole opt-in limit), and refuses spans of another device; unknown names are typed errors.
#[test]
fn kernel_handles_load_once_and_opt_in_once() {
    let rt = runtime();
    let unknown = rt.kernel(D0, "no_such_kernel").err().unwrap();
    assert!(
        matches!(unknown, Error::UnknownKernel { backend: "host", ref name } if name == "no_such_kernel"),
        "{unknown:?}"
    );
    let before = rt.backend().calls();
    let fill = rt.kernel(D0, "fill_u32").unwrap();
    let again = rt.kernel(D0, "fill_u32").unwrap();
    assert_eq!(fill.device(), D0);
    let buffer = rt.alloc(D0, MemoryKind::Device, 1024).unwrap();
    let default = rt.device_info(D0).unwrap().workgroup.default_per_block;
    let mut chain = vec![];
    for (handle, bytes) in [
        (fill, 0),
        (again, default),
        (fill, default + 4),
        (again, default + 4),
        (fill, default + 8),
    ] {
        let dims = LaunchDims {
            dynamic_workgroup_bytes: bytes,
            ..LaunchDims::linear(1, 256)
        };
        let args = [Arg::Span(buffer.all()), Arg::U32(bytes), Arg::U64(256)];
        // SAFETY: fill_u32 writes its count of words (256 of 4 bytes) of the 1 KiB span.
        let token = unsafe { handle.launch(dims, &args, &mut chain) }.unwrap();
        chain.push(token);
    }
    let mut back = vec![0u8; 1024];
    rt.download(D0, &mut back, buffer.all(), &mut chain)
        .unwrap();
    let last = (default + 8).to_le_bytes();
    assert!(back.chunks_exact(4).all(|word| word == last));
    let calls = rt.backend().calls().since(&before);
    assert_eq!(calls.of(CallKind::KernelLoad), 1);
    // One opt-in, to the device's whole limit, covers every larger size.
    assert_eq!(calls.of(CallKind::KernelAllowWorkgroupBytes), 1);
    assert_eq!(calls.of(CallKind::Launch), 5);

    let elsewhere = rt.alloc(D1, MemoryKind::Device, 1024).unwrap();
    let args = [Arg::Span(elsewhere.all()), Arg::U32(1), Arg::U64(256)];
    // SAFETY: refused before anything runs.
    let refused = unsafe { fill.launch(LaunchDims::linear(1, 256), &args, &mut vec![]) };
    assert!(matches!(
        refused,
        Err(Error::WrongDevice {
            expected: D0,
            found: D1
        })
    ));
}

/// A thread blocked in `Runtime::wait` holds no lock: while it waits for a kernel held at a
/// gate, another thread allocates, fills and waits for its own work on both devices.
#[test]
fn a_thread_waiting_for_its_token_does_not_hold_up_other_threads() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    let (open_tx, open_rx) = mpsc::channel::<()>();
    let open_rx = Mutex::new(open_rx);
    backend.register_kernel("gate", move |_, _| {
        open_rx.lock().unwrap().recv().ok();
        Ok(())
    });
    let rt = Runtime::new(backend).unwrap();
    // SAFETY: the kernel touches no memory.
    let gated =
        unsafe { rt.launch(D0, "gate", LaunchDims::linear(1, 1), &[], &mut vec![]) }.unwrap();
    let synchronizations = || rt.backend().calls().of(CallKind::StreamSynchronize);
    let before = synchronizations();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| rt.wait(gated));
        // The waiter is inside the driver's synchronisation (blocked on the gate) from here on.
        while synchronizations() == before {
            std::thread::yield_now();
        }
        let (done_tx, done_rx) = mpsc::channel();
        let rt = &rt;
        scope.spawn(move || {
            let outcome = [D0, D1].into_iter().try_for_each(|device| {
                let buffer = rt.alloc(device, MemoryKind::Device, 4096)?;
                let filled = rt.fill(device, buffer.all(), 3, &mut vec![])?;
                rt.wait(filled)
            });
            done_tx.send(outcome).ok();
        });
        // Not a timing assertion: work that waited for the blocked thread would never finish.
        let outcome = done_rx.recv_timeout(std::time::Duration::from_secs(60));
        open_tx.send(()).unwrap();
        assert_eq!(
            outcome,
            Ok(Ok(())),
            "the other thread waited for the blocked one"
        );
        assert_eq!(waiter.join().unwrap(), Ok(()));
    });
    let report = rt.shutdown().unwrap();
    assert!(report.program.unwaited.is_empty(), "{report:?}");
}

/// A fork into no branch is refused; its token, which cannot be handed back, is discarded, so
/// its stream goes back to the pool (and shutdown reports the token as discarded).
#[test]
fn a_fork_into_no_branch_is_refused_and_its_stream_goes_back_to_the_pool() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let filled = rt.fill(D0, buffer.all(), 1, &mut vec![]).unwrap();
    assert!(matches!(
        rt.fork(filled, 0),
        Err(Error::ZeroSize {
            what: "fork branch count"
        })
    ));
    let again = rt.fill(D0, buffer.all(), 2, &mut vec![]).unwrap();
    rt.wait(again).unwrap();
    assert_eq!(
        rt.stats().streams_created,
        1,
        "the refused fork's stream was reused"
    );
    drop(buffer);
    let report = rt.shutdown().unwrap();
    let kinds: Vec<_> = report.program.unwaited.iter().map(|t| t.kind).collect();
    assert_eq!(kinds, [UnwaitedKind::Discarded]);
}

/// A staged transfer that fails part-way discards every token it held, the caller's
/// dependencies included: none stays live (its stream out of the pools) until shutdown.
#[test]
fn a_transfer_failing_part_way_leaves_no_token_behind() {
    const BYTES: usize = 64 << 10;
    let config = RuntimeConfig {
        staging_chunk: 4096,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::with_config(HostBackend::new(HostConfig::with_devices(1)), config).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, BYTES).unwrap();
    let mut data = vec![5u8; BYTES];

    let cleared = rt.fill(D0, buffer.all(), 0, &mut vec![]).unwrap();
    rt.backend().fail_nth(CallKind::Copy, 3);
    let mut after = vec![cleared];
    assert!(rt.upload(D0, buffer.all(), &data, &mut after).is_err());
    assert!(after.is_empty(), "the upload took its dependencies");

    let cleared = rt.fill(D0, buffer.all(), 0, &mut vec![]).unwrap();
    rt.backend().fail_nth(CallKind::Copy, 3);
    let mut after = vec![cleared];
    assert!(
        rt.download(D0, &mut data, buffer.all(), &mut after)
            .is_err()
    );
    assert!(after.is_empty(), "the download took its dependencies");

    drop(buffer);
    let report = rt.shutdown().unwrap();
    let outstanding: Vec<_> = report
        .program
        .unwaited
        .iter()
        .filter(|token| token.kind == UnwaitedKind::Outstanding)
        .collect();
    assert_eq!(outstanding, Vec::<&gpu_core::token::UnwaitedToken>::new());
}

/// Found by the stress run: the allocator's events are created on the device of the stream
/// they are recorded on, but went back to the pool of the memory's device. A buffer of device 0
/// used by a stream of device 1 (a peer copy) then gave device 1's event to device 0, whose
/// next multi-stream free recorded it on a device-0 stream: HOST_INVALID_HANDLE (CUDA's
/// "invalid resource handle"). (A trim completes the pending frees, as memory pressure does.)
#[test]
fn a_free_after_a_peer_use_pools_each_event_with_its_own_device() {
    let rt = runtime();
    let on_d1 = rt.alloc(D1, MemoryKind::Device, 4096).unwrap();
    for round in 0..6u8 {
        let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
        let filled = rt.fill(D0, buffer.all(), round, &mut vec![]).unwrap();
        let mut branches = rt.fork(filled, 2).unwrap();
        let (a, b) = (branches.pop().unwrap(), branches.pop().unwrap());
        // Two streams of device 0 use the buffer, and (every other round) one of device 1.
        let low = rt
            .fill(D0, buffer.span(0, 2048).unwrap(), round, &mut vec![a])
            .unwrap();
        let high = if round % 2 == 0 {
            rt.copy(D1, on_d1.all(), buffer.all(), &mut vec![b])
                .unwrap()
        } else {
            rt.fill(D0, buffer.span(2048, 2048).unwrap(), round, &mut vec![b])
                .unwrap()
        };
        rt.wait(low).unwrap();
        rt.wait(high).unwrap();
        rt.free(buffer).unwrap();
        // Completes the free's fences, giving their events back to the pools.
        rt.trim().unwrap();
    }
    drop(on_d1);
    rt.shutdown().unwrap();
}

/// The planner's events and the allocators' come from one pool per device: every driver event
/// created is counted once in `events_created`, and every event handed out by either (a pool
/// hit saves a create/destroy pair) in `event_acquires`. Before, the allocators kept pools of
/// their own whose creations were counted as both, and whose reuse was never counted.
#[test]
fn one_event_pool_per_device_counts_each_create_once_and_every_reuse() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    for round in 0..8u8 {
        let filled = rt.fill(D0, buffer.all(), round, &mut vec![]).unwrap();
        let mut branches = rt.fork(filled, 2).unwrap();
        let (a, b) = (branches.pop().unwrap(), branches.pop().unwrap());
        let low = rt
            .fill(D0, buffer.span(0, 2048).unwrap(), round, &mut vec![a])
            .unwrap();
        let high = rt
            .fill(D0, buffer.span(2048, 2048).unwrap(), round, &mut vec![b])
            .unwrap();
        // A block used on two streams: its free records an event on the other one.
        let scratch = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
        let used = rt.fill(D0, scratch.all(), 1, &mut vec![low]).unwrap();
        rt.wait(used).unwrap();
        rt.wait(high).unwrap();
        rt.free(scratch).unwrap();
        rt.trim().unwrap();
    }
    let stats = rt.stats();
    let created = rt.backend().calls().of(CallKind::EventCreate);
    assert_eq!(stats.events_created, created, "{stats:?}");
    assert!(
        stats.event_acquires > stats.events_created + 8,
        "the allocators' reuse is counted: {stats:?}"
    );
    assert_eq!(
        stats.pool_calls_saved(),
        (stats.stream_acquires - stats.streams_created) + (stats.event_acquires - created)
    );
    drop(buffer);
    let report = rt.shutdown().unwrap();
    assert_eq!(report.left.events, 0);
}

/// Found by the stress run with faults: one failed event record poisoned the runtime, so every
/// thread's later work failed. The host now stands in for the record (it synchronises the
/// stream) and the waits on that event are skipped: later work succeeds, in order, and the
/// backend sees no wait on an unrecorded event.
#[test]
fn a_failed_event_record_is_replaced_by_a_host_synchronisation() {
    let backend = Arc::new(RecordingBackend::new(HostBackend::new(
        HostConfig::with_devices(2),
    )));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let filled = rt.fill(D0, buffer.all(), 5, &mut vec![]).unwrap();
    let records = backend.inner().calls().of(CallKind::EventRecord);
    backend.inner().fail_nth(CallKind::EventRecord, 1);
    let mut branches = rt.fork(filled, 2).unwrap();
    assert_eq!(backend.inner().stats().faults_injected, 1);
    assert_eq!(
        backend.inner().calls().of(CallKind::EventRecord),
        records + 1
    );
    let (a, b) = (branches.pop().unwrap(), branches.pop().unwrap());
    // Branch `b` runs on another stream: ordered by the host's synchronisation.
    let target = rt.alloc(D1, MemoryKind::Device, 4096).unwrap();
    let copied = rt
        .copy(D1, target.all(), buffer.all(), &mut vec![b])
        .unwrap();
    let mut back = vec![0u8; 4096];
    rt.download(D1, &mut back, target.all(), &mut vec![copied])
        .unwrap();
    assert!(back.iter().all(|&byte| byte == 5));
    rt.wait(a).unwrap();
    // Not poisoned: the next fork records normally.
    let again = rt.fill(D0, buffer.all(), 6, &mut vec![]).unwrap();
    for branch in rt.fork(again, 3).unwrap() {
        rt.wait(branch).unwrap();
    }
    drop((buffer, target));
    let report = rt.shutdown().unwrap();
    assert_eq!(report.program.unwaited_count(), 0);
    assert_eq!(backend.live(), LiveObjects::default());
    assert_eq!(backend.defects(), vec![], "{:#?}", backend.trace());
}

/// Launches `workgroup_reverse_u32` over `words` words in one group with `words * 4` bytes of
/// dynamic workgroup memory, and waits for it.
fn reverse_in_one_group<B: Backend>(rt: &Runtime<B>, words: u32) -> Result<(), Error> {
    let buffer = rt.alloc(D0, MemoryKind::Device, words as usize * 4)?;
    let dims = LaunchDims {
        dynamic_workgroup_bytes: words * 4,
        ..LaunchDims::linear(1, 128)
    };
    let args = [Arg::Span(buffer.all()), Arg::U32(words)];
    // SAFETY: one group of `words` words: the whole buffer.
    let token = unsafe { rt.launch(D0, "workgroup_reverse_u32", dims, &args, &mut vec![]) }?;
    rt.wait(token)
}

/// Found by the scaling run (one runtime per thread over one backend): the kernel's opt-in
/// lives in the driver's kernel object, which runtimes sharing a backend share. One runtime
/// opting in exactly 50 KB lowered another's 64 KB opt-in, whose next 64 KB launch failed.
/// The opt-in now asks for all the kernel may have (the device's limit less its static bytes);
/// an opt-in the driver fails is the launch's typed error, and the next launch tries again.
#[test]
fn runtimes_sharing_a_backend_never_lower_each_others_workgroup_opt_in() {
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
    let first = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let second = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    reverse_in_one_group(&first, 16_384).unwrap();
    reverse_in_one_group(&second, 12_800).unwrap();
    reverse_in_one_group(&first, 16_384).unwrap();
    assert_eq!(backend.calls().of(CallKind::KernelAllowWorkgroupBytes), 2);

    let third = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    backend.fail_nth(CallKind::KernelAllowWorkgroupBytes, 1);
    let failed = reverse_in_one_group(&third, 12_800).unwrap_err();
    assert!(matches!(failed, Error::Driver(_)), "{failed}");
    reverse_in_one_group(&third, 12_800).unwrap();
    assert_eq!(backend.calls().of(CallKind::KernelAllowWorkgroupBytes), 4);
}

/// Found by compute-sanitizer on MLIR's shared_memory program (H100): the opt-in asked for the
/// device's whole opt-in limit, which the driver refuses for a kernel with static shared memory
/// (static and dynamic bytes share the limit), and only then for the exact size: one failed
/// driver call per kernel, an error to every sanitizer. The runtime now asks for the kernel's
/// static bytes once, opts in to the limit less them, refuses more as `LimitExceeded` before
/// the driver, and opts in between the default limit less them and the default limit too.
#[test]
fn the_opt_in_leaves_room_for_a_kernels_static_workgroup_memory() {
    const STATIC: u32 = 8 * 1024;
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
    backend.register_kernel_with_static_workgroup_bytes("with_static", STATIC, |_, _| Ok(()));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let limits = rt.device_info(D0).unwrap().workgroup;
    let kernel = rt.kernel(D0, "with_static").unwrap();
    let launch = |bytes: u32| {
        let dims = LaunchDims {
            dynamic_workgroup_bytes: bytes,
            ..LaunchDims::linear(1, 32)
        };
        // SAFETY: the kernel takes no arguments and touches no memory.
        let token = unsafe { kernel.launch(dims, &[], &mut vec![]) }?;
        rt.wait(token)
    };
    let before = backend.calls();
    // Under the default limit, but not with the static bytes: needs the opt-in.
    launch(limits.default_per_block - STATIC + 4).unwrap();
    let most = limits.max_per_block_opt_in - STATIC;
    launch(most).unwrap();
    let refused = launch(most + 1).unwrap_err();
    assert!(
        matches!(refused, Error::LimitExceeded { required, limit, .. }
            if required == most as usize + 1 && limit == most as usize),
        "{refused}"
    );
    launch(0).unwrap();
    launch(64).unwrap();
    let calls = backend.calls().since(&before);
    assert_eq!(calls.of(CallKind::KernelStaticWorkgroupBytes), 1);
    // One opt-in, which the driver took: no refused attempt before it.
    assert_eq!(calls.of(CallKind::KernelAllowWorkgroupBytes), 1);
    assert_eq!(calls.of(CallKind::Launch), 4);
}

/// Found by the stress run with faults (shutdown still found pins): a `LockedHost` whose unpin
/// the driver refused was gone, and its memory stayed pinned after the caller freed it. A
/// refused unpin changes nothing, so unlocking tries once more.
#[test]
fn a_refused_unpin_of_locked_host_memory_is_tried_again() {
    let rt = runtime();
    let mut memory = vec![3u8; 8192];
    let locked = rt.lock_host(&mut memory).unwrap();
    rt.backend().fail_nth(CallKind::HostUnregister, 1);
    locked.unlock().unwrap();
    assert_eq!(rt.stats().locks.entries, 0);
    assert_eq!(rt.backend().stats().registered_ranges, 0);
    assert_eq!(rt.backend().stats().faults_injected, 1);
    let report = rt.shutdown().unwrap();
    assert_eq!(report.unpinned_ranges, 0);
}

/// Found by the stress run with faults (a driver allocation alive after a clean shutdown): a
/// block freed on a stream returns to the cache once a fence recorded after the free reports
/// complete, and teardown's two trims asked each fence once: a free retried at teardown (the
/// driver had failed it), or a query that failed, left its segment cached and never given back.
/// Teardown now retires every stream in the allocator once all are idle, which completes their
/// frees without asking the driver. (Failed event queries stand in for the race here.)
#[test]
fn teardown_gives_back_memory_freed_on_streams_whose_fences_it_never_saw_complete() {
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    // Two blocks of one segment, freed on two streams while their fills are pending: they can
    // merge (and the segment go back) only once both frees are known complete.
    let (a, b) = (
        rt.alloc(D0, MemoryKind::Device, 4096).unwrap(),
        rt.alloc(D0, MemoryKind::Device, 4096).unwrap(),
    );
    let on_a = rt.fill(D0, a.all(), 1, &mut vec![]).unwrap();
    let on_b = rt.fill(D0, b.all(), 2, &mut vec![]).unwrap();
    rt.free(a).unwrap();
    rt.free(b).unwrap();
    rt.wait(on_a).unwrap();
    rt.wait(on_b).unwrap();
    for n in 1..=64 {
        backend.fail_nth(CallKind::EventQuery, n);
    }
    rt.shutdown().unwrap();
    backend.clear_faults();
    assert_eq!(backend.stats().allocations, 0, "{:?}", backend.stats());
}

/// Found by the HSA backend's conformance run on its CPU stand-in with random delays: a block
/// used on a second stream (here another device's copy reads it) is freed pending an event
/// recorded on that stream, and teardown asked that event whether it had completed; a query
/// that failed, or that a backend answered "not yet" though its stream had been synchronised,
/// left the block pending and its segment with the driver at shutdown. Teardown now takes
/// every fence and pending free as complete once it has synchronised every stream.
#[test]
fn teardown_gives_back_memory_freed_after_a_use_on_another_stream_whatever_queries_say() {
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(2)));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let source = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let target = rt.alloc(D1, MemoryKind::Device, 4096).unwrap();
    let filled = rt.fill(D0, source.all(), 1, &mut vec![]).unwrap();
    let copied = rt
        .copy(D1, target.all(), source.all(), &mut vec![filled])
        .unwrap();
    rt.free(source).unwrap();
    rt.wait(copied).unwrap();
    rt.free(target).unwrap();
    for n in 1..=64 {
        backend.fail_nth(CallKind::EventQuery, n);
    }
    rt.shutdown().unwrap();
    backend.clear_faults();
    assert_eq!(backend.stats().allocations, 0, "{:?}", backend.stats());
}

#[test]
fn a_launch_above_the_opt_in_limit_is_refused_before_the_driver() {
    let rt = runtime();
    let fill = rt.kernel(D0, "fill_u32").unwrap();
    let limit = rt.device_info(D0).unwrap().workgroup.max_per_block_opt_in;
    let buffer = rt.alloc(D0, MemoryKind::Device, 1024).unwrap();
    let before = rt.backend().calls();
    let dims = LaunchDims {
        dynamic_workgroup_bytes: limit + 1,
        ..LaunchDims::linear(1, 256)
    };
    let args = [Arg::Span(buffer.all()), Arg::U32(0), Arg::U64(256)];
    let mut after = vec![];
    // SAFETY: refused before anything runs.
    let refused = unsafe { fill.launch(dims, &args, &mut after) }.unwrap_err();
    assert!(
        matches!(refused, Error::LimitExceeded { required, limit: l, .. }
            if required == limit as usize + 1 && l == limit as usize),
        "{refused}"
    );
    // SAFETY: refused before the (null) parameter array is read.
    let packed = unsafe { fill.launch_packed(dims, std::ptr::null_mut(), &mut after) };
    assert!(matches!(packed, Err(Error::LimitExceeded { .. })));
    assert_eq!(rt.backend().calls().since(&before).total, 0);
}

#[test]
fn module_images_are_refused_by_the_host_backend_through_the_runtime() {
    let rt = runtime();
    let image = c"// PTX";
    // SAFETY: a NUL-terminated image that outlives the call (it is refused anyway).
    let loaded = unsafe { rt.load_module(D0, image.as_ptr().cast()) };
    assert!(
        matches!(
            loaded,
            Err(Error::Unsupported {
                backend: "host",
                ..
            })
        ),
        "{loaded:?}"
    );
    // SAFETY: as above.
    let unknown = unsafe { rt.load_module(DeviceId(5), image.as_ptr().cast()) };
    assert!(matches!(unknown, Err(Error::UnknownDevice { .. })));
}

#[test]
fn fill_elements_writes_16_and_32_bit_words_through_raw_spans() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    // SAFETY: a live buffer of this runtime, waited for below before it is freed.
    let raw = unsafe { gpu_rt::runtime::Span::from_raw(buffer.address(), 64) };
    let words = rt
        .fill_elements(
            D0,
            raw.sub(0, 32).unwrap(),
            FillValue::U32(0xa1b2_c3d4),
            &mut vec![],
        )
        .unwrap();
    let halves = rt
        .fill_elements(
            D0,
            raw.sub(32, 32).unwrap(),
            FillValue::U16(0x0bad),
            &mut vec![words],
        )
        .unwrap();
    let mut back = vec![0u8; 64];
    rt.download(D0, &mut back, buffer.all(), &mut vec![halves])
        .unwrap();
    assert!(
        back[..32]
            .chunks_exact(4)
            .all(|w| w == 0xa1b2_c3d4u32.to_ne_bytes())
    );
    assert!(
        back[32..]
            .chunks_exact(2)
            .all(|h| h == 0x0badu16.to_ne_bytes())
    );
    let ragged = rt.fill_elements(D0, raw.sub(0, 6).unwrap(), FillValue::U32(1), &mut vec![]);
    assert!(matches!(
        ragged,
        Err(Error::OutOfBounds {
            offset: 4,
            len: 4,
            size: 6
        })
    ));
}

/// A detached fork gives its stream back at once; a branch found done by `wait_if_done` ends
/// without a synchronisation, a released one goes unreported, and a buffer can be freed after a
/// branch (which names the stream its point was recorded on).
#[test]
fn detached_forks_polls_releases_and_frees_after_a_token() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let filled = rt.fill(D0, buffer.all(), 7, &mut vec![]).unwrap();
    let streams_before = rt.stats().stream_acquires;
    let [for_event, for_stream] =
        <[gpu_core::token::Token; 2]>::try_from(rt.fork_detached(filled, 2).unwrap()).unwrap();
    // The stream went back: new work with no dependency takes it from the pool again.
    let other = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let next = rt.fill(D0, other.all(), 1, &mut vec![]).unwrap();
    assert_eq!(
        rt.stats().streams_created,
        1,
        "the pooled stream was reused"
    );
    assert!(rt.stats().stream_acquires > streams_before);
    rt.wait(next).unwrap();
    // Done by now (the same in-order stream ran the fill): ended without a wait.
    let synchronizes = rt.backend().calls().of(CallKind::EventSynchronize);
    let for_event_id = for_event.id();
    assert!(rt.wait_if_done(for_event).unwrap().is_none());
    assert_eq!(
        rt.backend().calls().of(CallKind::EventSynchronize),
        synchronizes
    );
    rt.free_after(buffer, &for_stream).unwrap();
    rt.release(for_stream).unwrap();
    assert!(matches!(
        rt.release(gpu_core::token::Token::from_id(for_event_id)),
        Err(Error::TokenConsumed { .. })
    ));
    drop(other);
    let report = rt.shutdown().unwrap();
    assert_eq!(report.program.unwaited, vec![], "releases are not reported");
}

/// Unordered writes from safe code: eight fills of one buffer with no tokens between them land
/// on different streams, which a GPU allows (the bytes end up holding one of the values). On
/// the host backend that must not be a data race either: its work touches device memory with
/// relaxed atomic bytes. Before, the stream threads wrote the same bytes with plain memset,
/// which ThreadSanitizer reported (run this test under Miri or ThreadSanitizer to check).
#[test]
fn unordered_fills_of_one_buffer_leave_one_of_the_values_and_no_race() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let tokens: Vec<_> = (1..=8u8)
        .map(|value| rt.fill(D0, buffer.all(), value, &mut vec![]).unwrap())
        .collect();
    let mut after = tokens;
    let joined = rt.join(&mut after).unwrap();
    let mut back = vec![0u8; 256];
    rt.download(D0, &mut back, buffer.all(), &mut vec![joined])
        .unwrap();
    assert!(back.iter().all(|&b| (1..=8).contains(&b)), "{back:?}");
}
