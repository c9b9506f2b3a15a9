//! Threads sharing one runtime on the host backend: each gets its own data back and nothing
//! leaks, and a thread blocked waiting for its token or inside a driver call holds up no other.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use gpu_core::DeviceId;
use gpu_core::Error;
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::LaunchDims;
use gpu_core::token::Token;
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::{Arg, LiveObjects, RecordingBackend, Runtime, RuntimeConfig};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

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

/// A backend of two devices with a kernel "gate" that blocks until the returned sender sends.
fn gated(config: HostConfig) -> (HostBackend, mpsc::Sender<()>) {
    let backend = HostBackend::new(config);
    let (open_tx, open_rx) = mpsc::channel::<()>();
    let open_rx = Mutex::new(open_rx);
    backend.register_kernel("gate", move |_, _| {
        open_rx.lock().unwrap().recv().ok();
        Ok(())
    });
    (backend, open_tx)
}

/// Launches the gate kernel on device 0 after `after`.
fn launch_gate(rt: &Runtime<HostBackend>, after: &mut Vec<Token>) -> Result<Token, Error> {
    // SAFETY: the kernel touches no memory.
    unsafe { rt.launch(D0, "gate", LaunchDims::linear(1, 1), &[], after) }
}

/// While another thread is blocked inside a driver call, a third one allocates, fills,
/// launches and waits for its own work on both devices; then the gate opens. Work that
/// waited for the blocked thread would never finish: not a timing assertion.
fn another_thread_goes_on(rt: &Runtime<HostBackend>, open_gate: mpsc::Sender<()>) {
    std::thread::scope(|scope| {
        let (done_tx, done_rx) = mpsc::channel();
        scope.spawn(move || {
            let outcome = [D0, D1].into_iter().try_for_each(|device| {
                let buffer = rt.alloc(device, MemoryKind::Device, 4096)?;
                let filled = rt.fill(device, buffer.all(), 3, &mut vec![])?;
                let fill = rt.kernel(device, "fill_u32")?;
                let args = [Arg::Span(buffer.all()), Arg::U32(4), Arg::U64(1024)];
                // SAFETY: a library kernel, checked against its span.
                let launched =
                    unsafe { fill.launch(LaunchDims::linear(4, 256), &args, &mut vec![filled]) }?;
                rt.wait(launched)
            });
            done_tx.send(outcome).ok();
        });
        let outcome = done_rx.recv_timeout(std::time::Duration::from_secs(60));
        open_gate.send(()).unwrap();
        assert_eq!(
            outcome,
            Ok(Ok(())),
            "the other thread waited for the blocked one"
        );
    });
}

/// A thread blocked in `Runtime::wait` holds no lock: while it waits for a kernel held at a
/// gate, another thread allocates, fills and waits for its own work on both devices.
#[test]
fn a_thread_waiting_for_its_token_does_not_hold_up_other_threads() {
    let (backend, open_gate) = gated(HostConfig::with_devices(2));
    let rt = Runtime::new(backend).unwrap();
    let gated = launch_gate(&rt, &mut vec![]).unwrap();
    let synchronizations = || rt.backend().calls().of(CallKind::StreamSynchronize);
    let before = synchronizations();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| rt.wait(gated));
        // The waiter is inside the driver's synchronisation (blocked on the gate) from here on.
        while synchronizations() == before {
            std::thread::yield_now();
        }
        another_thread_goes_on(&rt, open_gate);
        assert_eq!(waiter.join().unwrap(), Ok(()));
    });
    let report = rt.shutdown().unwrap();
    assert!(report.program.unwaited.is_empty(), "{report:?}");
}

/// A thread blocked inside a launch call (its stream's launch queue is full, as a GPU
/// driver's call blocks) holds none of the runtime's locks: the runtime plans under its lock
/// and makes the operation's driver call after letting it go, so another thread plans, runs
/// and waits for its own work meanwhile.
#[test]
fn a_thread_blocked_in_a_launch_call_does_not_hold_up_other_threads() {
    let (backend, open_gate) = gated(HostConfig {
        launch_queue_depth: 1,
        ..HostConfig::with_devices(2)
    });
    let rt = Runtime::new(backend).unwrap();
    let gated = launch_gate(&rt, &mut vec![]).unwrap();
    let launches = || rt.backend().calls().of(CallKind::Launch);
    let before = launches();
    std::thread::scope(|scope| {
        // The gate holds the stream's one place: the next launch on it blocks in its call.
        let launcher = scope.spawn(|| launch_gate(&rt, &mut vec![gated]));
        while launches() == before {
            std::thread::yield_now();
        }
        another_thread_goes_on(&rt, open_gate.clone());
        // The second gate kernel runs once opened too.
        open_gate.send(()).unwrap();
        let second = launcher.join().unwrap().unwrap();
        assert_eq!(rt.wait(second), Ok(()));
    });
    let report = rt.shutdown().unwrap();
    assert!(report.program.unwaited.is_empty(), "{report:?}");
}
