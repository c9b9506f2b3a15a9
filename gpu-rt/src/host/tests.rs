//! Unit tests of the host backend: one per rule of the module documentation.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use super::*;
use gpu_core::allocator::KindSupport;

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn backend() -> HostBackend {
    HostBackend::new(HostConfig::default())
}

fn code<T: core::fmt::Debug>(result: Result<T>) -> HostErrorCode {
    let error = result.expect_err("the call should fail");
    HostErrorCode::of(&error).unwrap_or_else(|| panic!("not a host driver error: {error:?}"))
}

fn addr<T>(data: &[T]) -> usize {
    data.as_ptr() as usize
}

fn addr_mut<T>(data: &mut [T]) -> usize {
    data.as_mut_ptr() as usize
}

/// Copies `bytes` of device memory at `src` into a fresh vector (synchronising `stream`).
///
/// # Safety
/// `[src, src + bytes)` lies in a live allocation of `b`.
unsafe fn read_back(b: &HostBackend, stream: HostStream, src: usize, bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    // SAFETY: `out` is ours until the stream is synchronised below; the caller vouches for `src`.
    unsafe { b.copy(stream, addr_mut(&mut out), src, bytes) }.unwrap();
    b.stream_synchronize(stream).unwrap();
    out
}

/// Copies `n` values of type `T` at `src` into a fresh vector (synchronising `stream`).
///
/// # Safety
/// As for [`read_back`], for `n * size_of::<T>()` bytes.
unsafe fn read_words<T: Copy + Default>(
    b: &HostBackend,
    stream: HostStream,
    src: usize,
    n: usize,
) -> Vec<T> {
    let mut out = vec![T::default(); n];
    // SAFETY: as in `read_back`.
    unsafe { b.copy(stream, addr_mut(&mut out), src, n * size_of::<T>()) }.unwrap();
    b.stream_synchronize(stream).unwrap();
    out
}

/// A kernel (registered as "wait_gate") that blocks until the test opens the gate.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn install(b: &HostBackend) -> Arc<Gate> {
        let gate = Arc::new(Gate::default());
        let kernel_gate = gate.clone();
        b.register_kernel("wait_gate", move |_, _| {
            let mut open = lock(&kernel_gate.open);
            while !*open {
                open = kernel_gate
                    .opened
                    .wait(open)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            Ok(())
        });
        gate
    }

    fn open(&self) {
        *lock(&self.open) = true;
        self.opened.notify_all();
    }
}

/// Loads kernel `name` on `device` and launches it on `stream`.
///
/// # Safety
/// A pointer argument that lies in a registered host range keeps that memory valid, registered
/// and untouched by the host until the kernel has run (the host backend's `launch` contract).
unsafe fn launch_named(
    b: &HostBackend,
    stream: HostStream,
    device: DeviceId,
    name: &str,
    dims: LaunchDims,
    args: &[KernelArg],
) -> Result<()> {
    let kernel = b.kernel(device, name)?;
    // SAFETY: the caller's obligation, passed on.
    unsafe { b.launch(stream, kernel, dims, args) }
}

fn zero_stats(b: &HostBackend) {
    let stats = b.stats();
    assert_eq!(
        HostStats {
            faults_injected: stats.faults_injected,
            draining_streams: stats.draining_streams,
            ..HostStats::default()
        },
        stats
    );
}

// ----- devices and the current device -----

#[test]
fn default_config_has_two_h200_like_devices() {
    let b = backend();
    assert_eq!(b.device_count(), 2);
    let info = b.device_info(D1).unwrap();
    assert_eq!(info.workgroup.default_per_block, 48 * 1024);
    assert_eq!(info.workgroup.max_per_block(), 232_448);
    assert!(info.unified_addressing);
    assert!(!info.pageable_memory_access);
    assert!(info.allocator.device.stream_ordered);
    assert_eq!(
        b.device_info(DeviceId(2)),
        Err(Error::UnknownDevice {
            device: DeviceId(2),
            device_count: 2
        })
    );
}

#[test]
fn current_device_is_per_thread_and_per_backend() {
    let a = backend();
    let b = backend();
    a.set_current_device(Some(D1)).unwrap();
    assert_eq!(a.current_device().unwrap(), Some(D1));
    assert_eq!(b.current_device().unwrap(), None);
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(a.current_device().unwrap(), None));
    });
    a.set_current_device(None).unwrap();
    assert_eq!(a.current_device().unwrap(), None);
    assert!(matches!(
        a.set_current_device(Some(DeviceId(5))),
        Err(Error::UnknownDevice { .. })
    ));
}

#[test]
fn saving_and_restoring_the_current_device_round_trips() {
    let b = backend();
    let nothing = b.save_current().unwrap();
    assert_eq!(nothing, None);
    assert!(!b.is_current(nothing, D0));
    b.set_current_device(Some(D1)).unwrap();
    let saved = b.save_current().unwrap();
    assert!(b.is_current(saved, D1));
    assert!(!b.is_current(saved, D0));
    b.restore_current(nothing).unwrap();
    assert_eq!(b.current_device().unwrap(), None);
    b.restore_current(saved).unwrap();
    assert_eq!(b.current_device().unwrap(), Some(D1));
    assert!(matches!(
        b.restore_current(Some(DeviceId(5))),
        Err(Error::UnknownDevice { .. })
    ));
    assert_eq!(b.current_device().unwrap(), Some(D1));

    // Counted by kind, outside the total, and failable by kind with no effect.
    let before = b.calls();
    b.fail_nth(CallKind::RestoreCurrent, 1);
    assert_eq!(code(b.restore_current(None)), HostErrorCode::InjectedFault);
    assert_eq!(b.current_device().unwrap(), Some(D1));
    b.fail_nth(CallKind::SaveCurrent, 1);
    assert_eq!(code(b.save_current()), HostErrorCode::InjectedFault);
    let made = b.calls().since(&before);
    assert_eq!(made.of(CallKind::RestoreCurrent), 1);
    assert_eq!(made.of(CallKind::SaveCurrent), 1);
    assert_eq!(made.total, 0);
    b.set_current_device(None).unwrap();
}

#[test]
fn calls_on_a_device_that_is_not_current_are_refused() {
    let b = backend();
    let wrong = HostErrorCode::WrongCurrentDevice;
    assert_eq!(code(b.allocate(D0, MemoryKind::Device, 64)), wrong);
    assert_eq!(code(b.stream_create(D0)), wrong);
    assert_eq!(code(b.event_create(D0)), wrong);
    assert_eq!(code(b.kernel(D0, "fill_u32")), wrong);

    b.set_current_device(Some(D0)).unwrap();
    let stream = b.stream_create(D0).unwrap();
    let event = b.event_create(D0).unwrap();
    let kernel = b.kernel(D0, "fill_u32").unwrap();
    let buffer = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    let mut host = [0u8; 16];

    b.set_current_device(Some(D1)).unwrap();
    assert_eq!(code(b.allocate(D0, MemoryKind::Device, 64)), wrong);
    assert_eq!(
        code(b.allocate_on_stream(stream, MemoryKind::Device, 64)),
        wrong
    );
    assert_eq!(code(b.free(D0, MemoryKind::Device, buffer, None)), wrong);
    assert_eq!(code(b.stream_synchronize(stream)), wrong);
    assert_eq!(code(b.stream_destroy(stream)), wrong);
    assert_eq!(code(b.event_record(event, stream)), wrong);
    assert_eq!(code(b.stream_wait_event(stream, event)), wrong);
    assert_eq!(code(b.event_destroy(event)), wrong);
    // SAFETY: each call is refused before anything is enqueued (the host backend checks the
    // current device, the handles and the allocation bounds first).
    assert_eq!(
        code(unsafe { b.copy(stream, addr_mut(&mut host), buffer, 16) }),
        wrong
    );
    // SAFETY: as above.
    assert_eq!(code(unsafe { b.fill(stream, buffer, 1, 16) }), wrong);
    assert_eq!(
        code(b.kernel_allow_workgroup_bytes(kernel, 64 * 1024)),
        wrong
    );
    // SAFETY: as above.
    assert_eq!(
        code(unsafe { b.launch(stream, kernel, LaunchDims::linear(1, 1), &[]) }),
        wrong
    );
    assert_eq!(code(b.device_synchronize(D0)), wrong);

    // Needing no current device: event query and synchronise, host registration.
    b.set_current_device(None).unwrap();
    assert!(b.event_query(event).unwrap());
    b.event_synchronize(event).unwrap();
    let mut ptrs = [0usize; 2];
    b.host_register(ByteRange::new(addr(&host), 16).unwrap(), &mut ptrs)
        .unwrap();
    assert!(
        b.host_pinned_extent(addr(&host), &mut ptrs)
            .unwrap()
            .is_some()
    );
    b.host_unregister(addr(&host)).unwrap();

    b.set_current_device(Some(D0)).unwrap();
    b.free(D0, MemoryKind::Device, buffer, None).unwrap();
    b.event_destroy(event).unwrap();
    b.stream_destroy(stream).unwrap();
    zero_stats(&b);
}

// ----- streams and events -----

#[test]
fn recording_an_event_on_another_devices_stream_is_refused() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let event = b.event_create(D0).unwrap();
    b.set_current_device(Some(D1)).unwrap();
    let stream = b.stream_create(D1).unwrap();
    assert_eq!(
        code(b.event_record(event, stream)),
        HostErrorCode::InvalidHandle
    );
    // Nothing was recorded or enqueued.
    assert!(b.event_query(event).unwrap());
    b.stream_synchronize(stream).unwrap();
    assert!(b.work_log().is_empty());
    b.stream_destroy(stream).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    b.event_destroy(event).unwrap();
}

#[test]
fn a_stream_of_one_device_waits_for_an_event_of_another() {
    let b = backend();
    const BYTES: usize = 4 << 20;
    b.set_current_device(Some(D0)).unwrap();
    let s0 = b.stream_create(D0).unwrap();
    let e0 = b.event_create(D0).unwrap();
    let buffer = b.allocate(D0, MemoryKind::Device, BYTES).unwrap().unwrap();
    for value in 1..=8u8 {
        // SAFETY: a live allocation of `b`, held by the host backend for the fill.
        unsafe { b.fill(s0, buffer, value, BYTES) }.unwrap();
    }
    b.event_record(e0, s0).unwrap();

    b.set_current_device(Some(D1)).unwrap();
    let s1 = b.stream_create(D1).unwrap();
    b.stream_wait_event(s1, e0).unwrap();
    let mut host = vec![0u8; BYTES];
    // SAFETY: `buffer` is a live allocation; `host` is untouched until the synchronise below.
    unsafe { b.copy(s1, addr_mut(&mut host), buffer, BYTES) }.unwrap();
    b.stream_synchronize(s1).unwrap();
    assert!(host.iter().all(|&byte| byte == 8));

    let log = b.work_log();
    let last_fill = log
        .iter()
        .filter(|r| {
            matches!(
                r.op,
                WorkOp::Fill {
                    value: FillValue::U8(8),
                    ..
                }
            )
        })
        .map(|r| r.finished)
        .max()
        .unwrap();
    let copy = log
        .iter()
        .find(|r| matches!(r.op, WorkOp::Copy { .. }))
        .unwrap();
    assert!(copy.started > last_fill);
    assert_eq!(copy.device, D1);

    b.stream_destroy(s1).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    b.stream_destroy(s0).unwrap();
    b.event_destroy(e0).unwrap();
    b.free(D0, MemoryKind::Device, buffer, None).unwrap();
    zero_stats(&b);
}

#[test]
fn a_stream_runs_its_work_in_order() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 1024).unwrap().unwrap();
    let mut first = vec![0u8; 1024];
    let mut second = vec![0u8; 1024];
    // SAFETY: `a` is a live allocation; `first` and `second` are untouched until the
    // synchronise below.
    unsafe {
        b.fill(s, a, 1, 1024).unwrap();
        b.copy(s, addr_mut(&mut first), a, 1024).unwrap();
        b.fill(s, a, 2, 1024).unwrap();
        b.copy(s, addr_mut(&mut second), a, 1024).unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert!(first.iter().all(|&x| x == 1));
    assert!(second.iter().all(|&x| x == 2));
    let log = b.work_log();
    assert_eq!(log.len(), 4);
    for pair in log.windows(2) {
        assert!(pair[0].started < pair[0].finished);
        assert!(pair[1].started > pair[0].finished);
        assert_eq!(pair[1].outcome, WorkOutcome::Done);
    }
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    b.stream_destroy(s).unwrap();
}

#[test]
fn destroying_a_stream_with_queued_work_still_runs_it() {
    let b = backend();
    let gate = Gate::install(&b);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let e = b.event_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    // SAFETY: no pointer arguments; `a` is a live allocation of `b`.
    unsafe {
        launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]).unwrap();
        b.fill(s, a, 7, 256).unwrap();
    }
    b.event_record(e, s).unwrap();
    b.stream_destroy(s).unwrap();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::InvalidHandle);
    assert!(!b.event_query(e).unwrap());
    gate.open();
    b.event_synchronize(e).unwrap();
    let s2 = b.stream_create(D0).unwrap();
    // SAFETY: `a` is a live allocation of `b`.
    assert!(unsafe { read_back(&b, s2, a, 256) }.iter().all(|&x| x == 7));
    b.stream_destroy(s2).unwrap();
    b.event_destroy(e).unwrap();
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    zero_stats(&b);
}

#[test]
fn an_event_never_recorded_is_complete_and_waits_capture_the_last_record() {
    let b = backend();
    let gate = Gate::install(&b);
    b.set_current_device(Some(D0)).unwrap();
    let (s, other) = (b.stream_create(D0).unwrap(), b.stream_create(D0).unwrap());
    let e = b.event_create(D0).unwrap();
    assert!(b.event_query(e).unwrap());
    b.event_synchronize(e).unwrap();
    b.stream_wait_event(other, e).unwrap();
    b.stream_synchronize(other).unwrap();

    // SAFETY: no pointer arguments.
    unsafe { launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]) }.unwrap();
    b.event_record(e, s).unwrap();
    b.stream_wait_event(other, e).unwrap();
    // The wait stays valid after the event is gone.
    b.event_destroy(e).unwrap();
    assert_eq!(code(b.event_query(e)), HostErrorCode::InvalidHandle);
    gate.open();
    b.stream_synchronize(other).unwrap();
    b.device_synchronize(D0).unwrap();
    b.stream_destroy(s).unwrap();
    b.stream_destroy(other).unwrap();
    zero_stats(&b);
}

#[test]
fn device_synchronize_waits_for_every_stream_of_the_device() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let streams: Vec<_> = (0..3).map(|_| b.stream_create(D0).unwrap()).collect();
    let a = b
        .allocate(D0, MemoryKind::Device, 3 << 20)
        .unwrap()
        .unwrap();
    for (i, &s) in streams.iter().enumerate() {
        // SAFETY: the i-th MiB of the live 3 MiB allocation `a`.
        unsafe { b.fill(s, a + (i << 20), i as u8 + 1, 1 << 20) }.unwrap();
    }
    b.device_synchronize(D0).unwrap();
    assert_eq!(b.work_log().len(), 3);
    for s in streams {
        b.stream_destroy(s).unwrap();
    }
    b.free(D0, MemoryKind::Device, a, None).unwrap();
}

#[test]
fn handles_of_another_backend_or_destroyed_objects_are_invalid() {
    let (a, b) = (backend(), backend());
    a.set_current_device(Some(D0)).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    let s = a.stream_create(D0).unwrap();
    let e = a.event_create(D0).unwrap();
    let k = a.kernel(D0, "fill_u32").unwrap();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::InvalidHandle);
    assert_eq!(code(b.event_query(e)), HostErrorCode::InvalidHandle);
    assert_eq!(
        code(b.kernel_allow_workgroup_bytes(k, 0)),
        HostErrorCode::InvalidHandle
    );
    a.stream_destroy(s).unwrap();
    a.event_destroy(e).unwrap();
    assert_eq!(code(a.stream_destroy(s)), HostErrorCode::InvalidHandle);
    assert_eq!(code(a.event_destroy(e)), HostErrorCode::InvalidHandle);
}

// ----- memory -----

#[test]
fn allocations_are_aligned_zeroed_and_limited_by_capacity() {
    let mut config = HostConfig::with_devices(1);
    config.devices[0].memory_capacity = 4096;
    let b = HostBackend::new(config);
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(b.allocate(D0, MemoryKind::Device, 4097).unwrap(), None);
    let a = b.allocate(D0, MemoryKind::Device, 4000).unwrap().unwrap();
    assert_eq!(a % HOST_ALLOCATION_ALIGNMENT, 0);
    assert_eq!(b.allocate(D0, MemoryKind::HostPinned, 97).unwrap(), None);
    assert!(b.allocate(D0, MemoryKind::Device, 96).unwrap().is_some());
    let s = b.stream_create(D0).unwrap();
    // SAFETY: `a` is a live allocation of `b`.
    assert!(unsafe { read_back(&b, s, a, 4000) }.iter().all(|&x| x == 0));
    assert_eq!(
        b.allocate_on_stream(s, MemoryKind::Device, 1).unwrap(),
        None
    );
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 4096);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    assert_eq!(b.stats().allocations, 1);
    let c = b
        .allocate_on_stream(s, MemoryKind::Device, 4000)
        .unwrap()
        .unwrap();
    assert_eq!(b.stats().allocated_bytes, 4096);
    assert!(matches!(
        b.allocate(D0, MemoryKind::Device, 0),
        Err(Error::ZeroSize { .. })
    ));
    b.free(D0, MemoryKind::Device, c, Some(s)).unwrap();
    b.stream_destroy(s).unwrap();
}

#[test]
fn capabilities_decide_which_kinds_and_forms_exist() {
    let mut config = HostConfig::with_devices(1);
    config.devices[0].allocator.device.stream_ordered = false;
    config.devices[0].allocator.managed = KindSupport::NONE;
    let b = HostBackend::new(config);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    assert!(!b.device_info(D0).unwrap().allocator.device.stream_ordered);
    assert_eq!(
        code(b.allocate_on_stream(s, MemoryKind::Device, 64)),
        HostErrorCode::NotSupported
    );
    assert_eq!(
        code(b.allocate(D0, MemoryKind::Managed, 64)),
        HostErrorCode::NotSupported
    );
    let p = b
        .allocate_on_stream(s, MemoryKind::HostPinned, 64)
        .unwrap()
        .unwrap();
    b.free(D0, MemoryKind::HostPinned, p, None).unwrap();
    b.stream_destroy(s).unwrap();
    zero_stats(&b);
}

#[test]
fn frees_of_unknown_or_mismatched_addresses_are_errors() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let a = b.allocate(D0, MemoryKind::Managed, 512).unwrap().unwrap();
    let invalid = HostErrorCode::InvalidValue;
    assert_eq!(
        code(b.free(D0, MemoryKind::Managed, a + 256, None)),
        invalid
    );
    assert_eq!(code(b.free(D0, MemoryKind::Device, a, None)), invalid);
    b.set_current_device(Some(D1)).unwrap();
    assert_eq!(code(b.free(D1, MemoryKind::Managed, a, None)), invalid);
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(b.stats().allocations, 1);
    b.free(D0, MemoryKind::Managed, a, None).unwrap();
    assert_eq!(code(b.free(D0, MemoryKind::Managed, a, None)), invalid);
    zero_stats(&b);
}

#[test]
fn a_free_after_a_stream_waits_for_its_queued_work() {
    let b = backend();
    let gate = Gate::install(&b);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b
        .allocate(D0, MemoryKind::Device, 1 << 20)
        .unwrap()
        .unwrap();
    // SAFETY: no pointer arguments; `a` is a live allocation of `b`.
    unsafe {
        launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]).unwrap();
        b.fill(s, a, 3, 1 << 20).unwrap();
    }
    b.free(D0, MemoryKind::Device, a, Some(s)).unwrap();
    // The address is gone for the caller at once; the memory stays until the stream gets there.
    assert_eq!(b.stats().allocations, 0);
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 1 << 20);
    assert_eq!(
        code(b.free(D0, MemoryKind::Device, a, Some(s))),
        HostErrorCode::InvalidValue
    );
    gate.open();
    b.stream_synchronize(s).unwrap();
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 0);
    let log = b.work_log();
    let fill = log
        .iter()
        .find(|r| matches!(r.op, WorkOp::Fill { .. }))
        .unwrap();
    let free = log
        .iter()
        .find(|r| r.op == WorkOp::Free { address: a })
        .unwrap();
    assert!(free.started > fill.finished);
    b.stream_destroy(s).unwrap();
}

#[test]
fn a_synchronous_free_never_pulls_memory_from_queued_work() {
    let b = backend();
    let gate = Gate::install(&b);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 4096).unwrap().unwrap();
    // SAFETY: no pointer arguments; `a` is a live allocation of `b`.
    unsafe {
        launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]).unwrap();
        b.fill(s, a, 3, 4096).unwrap();
    }
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 4096);
    gate.open();
    b.stream_synchronize(s).unwrap();
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 0);
    b.stream_destroy(s).unwrap();
}

#[test]
fn copies_must_stay_inside_the_allocations_they_touch() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    let mut host = vec![0u8; 512];
    let h = addr_mut(&mut host);
    // SAFETY: `host` outlives the stream's work and is untouched by the host; every call
    // here but the last, whose range is empty, is refused before anything is enqueued (a
    // range touching `a` partly, a null address, an overflowing range).
    unsafe {
        assert_eq!(code(b.copy(s, h, a, 257)), HostErrorCode::InvalidValue);
        assert_eq!(
            code(b.copy(s, a + 128, h, 129)),
            HostErrorCode::InvalidValue
        );
        assert_eq!(code(b.fill(s, a - 1, 0, 2)), HostErrorCode::InvalidValue);
        assert!(matches!(b.copy(s, 0, h, 1), Err(Error::NullPointer { .. })));
        assert!(matches!(
            b.fill(s, usize::MAX, 0, 2),
            Err(Error::AddressOverflow { .. })
        ));
        b.copy(s, h, a, 0).unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert_eq!(b.work_log().len(), 1);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    b.stream_destroy(s).unwrap();
}

// ----- host registration -----

#[test]
fn registration_follows_the_drivers_rules() {
    let b = backend();
    let host = vec![0u8; 8192];
    let p = addr(&host);
    let range = |start: usize, len: usize| ByteRange::new(start, len).unwrap();
    let mut ptrs = [0usize; 2];
    b.host_register(range(p, 4096), &mut ptrs).unwrap();
    assert_eq!(ptrs, [p, p]);
    let mut short = [0usize; 1];
    assert_eq!(
        code(b.host_register(range(p + 4096, 16), &mut short)),
        HostErrorCode::InvalidValue
    );
    let already = HostErrorCode::MemoryAlreadyRegistered;
    assert_eq!(code(b.host_register(range(p + 16, 16), &mut ptrs)), already);
    assert_eq!(
        code(b.host_register(range(p + 4000, 1000), &mut ptrs)),
        already
    );
    assert_eq!(code(b.host_register(range(p - 1, 2), &mut ptrs)), already);
    assert_eq!(b.stats().registered_ranges, 1);

    let mut extent_ptrs = [0usize; 2];
    assert_eq!(
        b.host_pinned_extent(p + 100, &mut extent_ptrs).unwrap(),
        Some(range(p, 4096))
    );
    assert_eq!(extent_ptrs, [p, p]);
    assert_eq!(
        b.host_pinned_extent(p + 4096, &mut extent_ptrs).unwrap(),
        None
    );

    assert_eq!(code(b.host_unregister(p + 1)), HostErrorCode::InvalidValue);
    b.host_unregister(p).unwrap();
    assert_eq!(
        code(b.host_unregister(p)),
        HostErrorCode::MemoryNotRegistered
    );
    assert_eq!(
        b.host_pinned_extent(p + 100, &mut extent_ptrs).unwrap(),
        None
    );
    zero_stats(&b);
}

#[test]
fn host_pinned_allocations_count_as_pinned() {
    let b = backend();
    b.set_current_device(Some(D1)).unwrap();
    let pinned = b
        .allocate(D1, MemoryKind::HostPinned, 1000)
        .unwrap()
        .unwrap();
    let device = b.allocate(D1, MemoryKind::Device, 1000).unwrap().unwrap();
    let mut ptrs = [0usize; 2];
    assert_eq!(
        b.host_pinned_extent(pinned + 999, &mut ptrs).unwrap(),
        ByteRange::new(pinned, 1000)
    );
    assert_eq!(ptrs, [pinned, pinned]);
    assert_eq!(b.host_pinned_extent(device, &mut ptrs).unwrap(), None);
    let over = |start| ByteRange::new(start, 10).unwrap();
    assert_eq!(
        code(b.host_register(over(pinned), &mut ptrs)),
        HostErrorCode::MemoryAlreadyRegistered
    );
    assert_eq!(
        code(b.host_register(over(device), &mut ptrs)),
        HostErrorCode::InvalidValue
    );
    b.free(D1, MemoryKind::HostPinned, pinned, None).unwrap();
    b.free(D1, MemoryKind::Device, device, None).unwrap();
    zero_stats(&b);
}

// ----- kernels -----

#[test]
fn kernel_names_and_workgroup_opt_in_follow_the_drivers_rules() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    assert!(
        matches!(
            b.kernel(D0, "no_such_kernel"),
            Err(Error::UnknownKernel { backend: "host", ref name }) if name == "no_such_kernel"
        ),
        "an unknown kernel name is Error::UnknownKernel, as on the CUDA backend"
    );
    let k = b.kernel(D0, "workgroup_reverse_u32").unwrap();
    assert_eq!(b.kernel(D0, "workgroup_reverse_u32").unwrap(), k);
    let with_bytes = |bytes| LaunchDims {
        dynamic_workgroup_bytes: bytes,
        ..LaunchDims::linear(1, 32)
    };
    let invalid = HostErrorCode::InvalidValue;
    // SAFETY: no pointer arguments.
    assert_eq!(
        code(unsafe { b.launch(s, k, with_bytes(48 * 1024 + 4), &[]) }),
        invalid
    );
    assert_eq!(code(b.kernel_allow_workgroup_bytes(k, 232_449)), invalid);
    b.kernel_allow_workgroup_bytes(k, 64 * 1024).unwrap();
    // SAFETY: no pointer arguments.
    assert_eq!(
        code(unsafe { b.launch(s, k, with_bytes(64 * 1024 + 4), &[]) }),
        invalid
    );
    // SAFETY: no pointer arguments.
    assert_eq!(
        code(unsafe { b.launch(s, k, LaunchDims::linear(0, 32), &[]) }),
        invalid
    );
    // The opt-in sets the kernel's limit, also below the default one, as CUDA's attribute does.
    b.kernel_allow_workgroup_bytes(k, 1024).unwrap();
    // SAFETY: no pointer arguments.
    assert_eq!(
        code(unsafe { b.launch(s, k, with_bytes(1028), &[]) }),
        invalid
    );
    // SAFETY: no pointer arguments.
    assert_eq!(
        code(unsafe { b.launch(s, k, LaunchDims::linear(1, 1025), &[]) }),
        invalid
    );
    b.set_current_device(Some(D1)).unwrap();
    let s1 = b.stream_create(D1).unwrap();
    // SAFETY: no pointer arguments.
    assert_eq!(
        code(unsafe { b.launch(s1, k, LaunchDims::linear(1, 1), &[]) }),
        HostErrorCode::InvalidHandle
    );
    b.stream_destroy(s1).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    b.stream_synchronize(s).unwrap();
    assert!(b.work_log().is_empty());
    b.stream_destroy(s).unwrap();
}

#[test]
fn standard_kernels_compute_their_results() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();

    // fill_u32 with fewer threads than words (grid-stride loop).
    let n = 1000usize;
    let words = b.allocate(D0, MemoryKind::Device, n * 4).unwrap().unwrap();
    let args = [
        KernelArg::Ptr(words),
        KernelArg::U32(0xDEAD_BEEF),
        KernelArg::U64(n as u64 - 1),
    ];
    // SAFETY: `words` is a live allocation of `n` words, the kernel's only pointer.
    let filled: Vec<u32> = unsafe {
        launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(3, 64), &args).unwrap();
        read_words(&b, s, words, n)
    };
    assert!(filled[..n - 1].iter().all(|&w| w == 0xDEAD_BEEF));
    assert_eq!(filled[n - 1], 0);

    // axpy_f32.
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 + i as f32).collect();
    let (dx, dy) = (
        b.allocate(D0, MemoryKind::Device, n * 4).unwrap().unwrap(),
        b.allocate(D0, MemoryKind::Managed, n * 4).unwrap().unwrap(),
    );
    let args = [
        KernelArg::F32(2.0),
        KernelArg::Ptr(dx),
        KernelArg::Ptr(dy),
        KernelArg::U64(n as u64),
    ];
    // SAFETY: `dx` and `dy` are live allocations of `n` words; `x` and `y` live, untouched,
    // until `read_words` has synchronised the stream.
    let result: Vec<f32> = unsafe {
        b.copy(s, dx, addr(&x), n * 4).unwrap();
        b.copy(s, dy, addr(&y), n * 4).unwrap();
        launch_named(&b, s, D0, "axpy_f32", LaunchDims::linear(4, 128), &args).unwrap();
        read_words(&b, s, dy, n)
    };
    assert!(
        result
            .iter()
            .enumerate()
            .all(|(i, &v)| v == 2.0 * i as f32 + 1.0 + i as f32)
    );

    // workgroup_reverse_u32 with 64 KiB of workgroup memory per group (needs the opt-in).
    let w = 16 * 1024usize;
    let groups = 3usize;
    let data: Vec<u32> = (0..(w * groups) as u32).collect();
    let dd = b
        .allocate(D0, MemoryKind::Device, data.len() * 4)
        .unwrap()
        .unwrap();
    // SAFETY: `dd` is a live allocation of `data`'s size; `data` is untouched until the
    // stream is synchronised by `read_words` below.
    unsafe { b.copy(s, dd, addr(&data), data.len() * 4) }.unwrap();
    let k = b.kernel(D0, "workgroup_reverse_u32").unwrap();
    b.kernel_allow_workgroup_bytes(k, (w * 4) as u32).unwrap();
    let dims = LaunchDims {
        dynamic_workgroup_bytes: (w * 4) as u32,
        ..LaunchDims::linear(groups as u32, 256)
    };
    // SAFETY: `dd` is a live allocation of `groups * w` words, the kernel's only pointer.
    let reversed: Vec<u32> = unsafe {
        b.launch(s, k, dims, &[KernelArg::Ptr(dd), KernelArg::U32(w as u32)])
            .unwrap();
        read_words(&b, s, dd, data.len())
    };
    for g in 0..groups {
        for i in 0..w {
            assert_eq!(reversed[g * w + i], data[g * w + w - 1 - i] + 1);
        }
    }

    for (kind, a) in [
        (MemoryKind::Device, words),
        (MemoryKind::Device, dx),
        (MemoryKind::Managed, dy),
        (MemoryKind::Device, dd),
    ] {
        b.free(D0, kind, a, None).unwrap();
    }
    b.stream_destroy(s).unwrap();
    zero_stats(&b);
}

/// The failure model of the module documentation: work that fails loses its device, every
/// later call that works on it reports the failure (destroys and frees still work), the other
/// device goes on, and a reset makes the device usable again with its objects gone.
#[test]
fn a_failed_kernel_loses_its_device_until_reset_and_the_other_device_goes_on() {
    let b = backend();
    b.register_kernel("fail", |_, _| {
        Err(HostErrorCode::IllegalAddress.error("launch"))
    });
    b.register_kernel("panic", |_, _| panic!("kernel bug"));
    b.set_current_device(Some(D1)).unwrap();
    let other = b.stream_create(D1).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    let (s, t) = (b.stream_create(D0).unwrap(), b.stream_create(D0).unwrap());
    let (before, after) = (b.event_create(D0).unwrap(), b.event_create(D0).unwrap());
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // The stream waits at a gate, so everything below is enqueued before the kernel fails.
    let gate = Gate::install(&b);
    // SAFETY: no pointer arguments; `a` is a live allocation of `b`.
    unsafe {
        launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]).unwrap();
    }
    b.event_record(before, s).unwrap();
    // SAFETY: as above.
    unsafe {
        launch_named(&b, s, D0, "fail", LaunchDims::linear(1, 1), &[]).unwrap();
        b.fill(s, a, 9, 64).unwrap();
    }
    b.event_record(after, s).unwrap();
    gate.open();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::IllegalAddress);
    assert!(b.device_lost(D0).is_some() && b.device_lost(D1).is_none());
    // The fill after the failure did not run.
    let outcomes: Vec<_> = b
        .work_log()
        .iter()
        .filter(|r| r.stream == s)
        .map(|r| r.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            WorkOutcome::Done,
            WorkOutcome::Done,
            WorkOutcome::Failed,
            WorkOutcome::Skipped,
            WorkOutcome::Skipped
        ]
    );
    // Every call that works on device 0 reports the failure, on any stream or event of it.
    assert_eq!(code(b.stream_synchronize(t)), HostErrorCode::IllegalAddress);
    assert_eq!(
        code(b.event_synchronize(before)),
        HostErrorCode::IllegalAddress
    );
    assert_eq!(code(b.event_query(after)), HostErrorCode::IllegalAddress);
    assert_eq!(
        code(b.device_synchronize(D0)),
        HostErrorCode::IllegalAddress
    );
    assert_eq!(code(b.stream_create(D0)), HostErrorCode::IllegalAddress);
    assert_eq!(
        code(b.allocate(D0, MemoryKind::Device, 64)),
        HostErrorCode::IllegalAddress
    );
    // SAFETY: `a` is a live allocation of `b`.
    assert_eq!(
        code(unsafe { b.fill(t, a, 1, 64) }),
        HostErrorCode::IllegalAddress
    );
    // Device 1 goes on, waiting on device 0's failed record included.
    b.set_current_device(Some(D1)).unwrap();
    b.stream_wait_event(other, after).unwrap();
    let on_1 = b.allocate(D1, MemoryKind::Device, 64).unwrap().unwrap();
    // SAFETY: a live allocation of device 1.
    assert_eq!(unsafe { read_back(&b, other, on_1, 64) }, vec![0; 64]);

    // A reset makes device 0 usable; its streams, events and allocations are gone.
    b.reset_device(D0).unwrap();
    assert!(b.device_lost(D0).is_none());
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::InvalidHandle);
    assert_eq!(code(b.event_query(before)), HostErrorCode::InvalidHandle);
    assert_eq!(
        code(b.free(D0, MemoryKind::Device, a, None)),
        HostErrorCode::InvalidValue
    );
    let u = b.stream_create(D0).unwrap();
    let fresh = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // SAFETY: a live allocation of `b`; the kernel has no pointer arguments.
    unsafe {
        assert_eq!(read_back(&b, u, fresh, 64), vec![0; 64]);
        launch_named(&b, u, D0, "panic", LaunchDims::linear(1, 1), &[]).unwrap();
    }
    assert_eq!(code(b.stream_synchronize(u)), HostErrorCode::LaunchFailed);
    // Destroys and frees work on a lost device, so its owner can clean up.
    b.stream_destroy(u).unwrap();
    b.free(D0, MemoryKind::Device, fresh, None).unwrap();
    b.reset_device(D0).unwrap();
    b.set_current_device(Some(D1)).unwrap();
    b.stream_destroy(other).unwrap();
    b.free(D1, MemoryKind::Device, on_1, None).unwrap();
    b.set_current_device(None).unwrap();
    zero_stats(&b);
}

#[test]
fn kernels_reach_only_memory_their_pointer_arguments_lie_in() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // 17 words run past the 64-byte allocation: a library kernel is refused at launch, naming
    // the argument, what it was given and what it would reach.
    let args = [KernelArg::Ptr(a), KernelArg::U32(1), KernelArg::U64(17)];
    // SAFETY: refused before anything is queued.
    let refused = unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), &args) };
    assert!(
        matches!(
            refused,
            Err(Error::KernelReach {
                argument: Some(0),
                given: 64,
                reach: 68,
                ..
            })
        ),
        "{refused:?}"
    );
    // A kernel the library does not describe runs, and its access past the end faults.
    b.register_kernel("write_past", |ctx, _| {
        ctx.view::<u32>(ctx.arg_ptr(0)?, 17)?.set(16, 1)
    });
    // SAFETY: the pointer is an allocation of `b`, which the kernel cannot reach past.
    unsafe {
        launch_named(
            &b,
            s,
            D0,
            "write_past",
            LaunchDims::linear(1, 1),
            &args[..1],
        )
    }
    .unwrap();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::IllegalAddress);
    // The fault lost the device: a reset brings it back, without its objects.
    b.reset_device(D0).unwrap();

    // Pageable host memory is not device-accessible (a library kernel may reach none of it);
    // registered memory is.
    let s = b.stream_create(D0).unwrap();
    let mut host = vec![0u32; 16];
    let args = [
        KernelArg::Ptr(addr_mut(&mut host)),
        KernelArg::U32(5),
        KernelArg::U64(16),
    ];
    // SAFETY: refused before anything is queued.
    let refused = unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), &args) };
    assert!(
        matches!(
            refused,
            Err(Error::KernelReach {
                given: 0,
                reach: 64,
                ..
            })
        ),
        "{refused:?}"
    );
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let mut ptrs = [0usize; 2];
    b.host_register(ByteRange::new(addr(&host), 64).unwrap(), &mut ptrs)
        .unwrap();
    // SAFETY: `host` stays alive, registered and untouched until the synchronise below.
    unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), &args) }.unwrap();
    b.stream_synchronize(s).unwrap();
    assert!(host.iter().all(|&w| w == 5));
    b.host_unregister(addr(&host)).unwrap();

    // Arguments of the wrong number or kinds are refused at launch, naming the parameters;
    // nothing is queued and the stream stays usable.
    let mismatch = Error::KernelArgumentMismatch {
        kernel: "fill_u32",
        expected: "(Ptr dst, U32 value, U64 count)",
    };
    let wrong: [&[KernelArg]; 3] = [
        &[KernelArg::U32(0)],
        &[KernelArg::Ptr(a), KernelArg::U32(0)],
        &[KernelArg::Ptr(a), KernelArg::U64(0), KernelArg::U64(1)],
    ];
    for args in wrong {
        // SAFETY: refused before anything is queued.
        let refused =
            unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), args) };
        assert_eq!(refused, Err(mismatch.clone()));
    }
    b.stream_synchronize(s).unwrap();
    let args = [KernelArg::Ptr(a), KernelArg::U32(3), KernelArg::U64(16)];
    // SAFETY: 16 words of the 64-byte allocation `a`.
    unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), &args) }.unwrap();
    // SAFETY: `a` is a live allocation of 64 bytes.
    let words: Vec<u32> = unsafe { read_words(&b, s, a, 16) };
    assert!(words.iter().all(|&w| w == 3));
    b.stream_destroy(s).unwrap();
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    zero_stats(&b);
}

// ----- faults and counters -----

#[test]
fn calls_are_counted_by_kind_and_in_total() {
    let b = backend();
    let start = b.calls();
    b.set_current_device(Some(D0)).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let _ = b.allocate(D0, MemoryKind::Device, 0);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    let made = b.calls().since(&start);
    assert_eq!(made.of(CallKind::Allocate), 2);
    assert_eq!(made.of(CallKind::Free), 1);
    assert_eq!(made.of(CallKind::SetCurrentDevice), 1);
    assert_eq!(made.total, 3);
}

#[test]
fn a_fault_by_kind_fails_the_nth_call_and_changes_nothing() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let e = b.event_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    let host = vec![0u8; 256];
    let mut ptrs = [0usize; 2];
    let host_range = ByteRange::new(addr(&host), 256).unwrap();
    let injected = HostErrorCode::InjectedFault;

    b.fail_nth(CallKind::Allocate, 2);
    let first = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let stats = b.stats();
    assert_eq!(code(b.allocate(D0, MemoryKind::Device, 64)), injected);
    assert_eq!(b.stats().allocations, stats.allocations);
    b.free(D0, MemoryKind::Device, first, None).unwrap();

    let base = b.stats();
    let checks: [(CallKind, &dyn Fn() -> Result<()>); 14] = [
        (CallKind::Free, &|| {
            b.free(D0, MemoryKind::Device, a, Some(s))
        }),
        (CallKind::HostRegister, &|| {
            b.host_register(host_range, &mut [0usize; 2])
        }),
        (CallKind::StreamCreate, &|| b.stream_create(D0).map(drop)),
        (CallKind::StreamDestroy, &|| b.stream_destroy(s)),
        (CallKind::EventCreate, &|| b.event_create(D0).map(drop)),
        (CallKind::EventDestroy, &|| b.event_destroy(e)),
        (CallKind::EventRecord, &|| b.event_record(e, s)),
        (CallKind::StreamWaitEvent, &|| b.stream_wait_event(s, e)),
        // SAFETY: failed by the injected fault before anything is enqueued; besides, `a` is
        // a live allocation and `host` outlives `b`'s work.
        (CallKind::Copy, &|| unsafe {
            b.copy(s, a, addr(&host), 256)
        }),
        // SAFETY: as for the copy.
        (CallKind::Fill, &|| unsafe { b.fill(s, a, 1, 256) }),
        (CallKind::KernelLoad, &|| b.kernel(D0, "axpy_f32").map(drop)),
        // SAFETY: no pointer arguments.
        (CallKind::Launch, &|| unsafe {
            launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 1), &[])
        }),
        (CallKind::AllocateOnStream, &|| {
            b.allocate_on_stream(s, MemoryKind::Device, 64).map(drop)
        }),
        (CallKind::StreamSynchronize, &|| b.stream_synchronize(s)),
    ];
    for (fired, (kind, call)) in (1..).zip(checks) {
        b.fail_nth(kind, 1);
        assert_eq!(code(call()), injected, "{kind:?}");
        b.stream_synchronize(s).unwrap();
        let expected = HostStats {
            faults_injected: base.faults_injected + fired,
            ..base
        };
        assert_eq!(b.stats(), expected, "{kind:?}");
        assert!(b.work_log().is_empty(), "{kind:?} enqueued work");
        assert!(b.event_query(e).unwrap(), "{kind:?} recorded the event");
    }

    b.host_register(host_range, &mut ptrs).unwrap();
    b.fail_nth(CallKind::HostUnregister, 1);
    b.fail_nth(CallKind::HostPinnedExtent, 1);
    b.fail_nth(CallKind::EventQuery, 1);
    b.fail_nth(CallKind::EventSynchronize, 1);
    b.fail_nth(CallKind::DeviceSynchronize, 1);
    b.fail_nth(CallKind::DeviceInfo, 1);
    b.fail_nth(CallKind::SetCurrentDevice, 1);
    assert_eq!(code(b.host_unregister(addr(&host))), injected);
    assert_eq!(code(b.host_pinned_extent(addr(&host), &mut ptrs)), injected);
    assert_eq!(code(b.event_query(e)), injected);
    assert_eq!(code(b.event_synchronize(e)), injected);
    assert_eq!(code(b.device_synchronize(D0)), injected);
    assert_eq!(code(b.device_info(D0)), injected);
    assert_eq!(code(b.set_current_device(Some(D1))), injected);
    assert_eq!(b.current_device().unwrap(), Some(D0));
    assert_eq!(b.clear_faults(), 0);
    b.host_unregister(addr(&host)).unwrap();

    b.free(D0, MemoryKind::Device, a, None).unwrap();
    b.event_destroy(e).unwrap();
    b.stream_destroy(s).unwrap();
    zero_stats(&b);
}

#[test]
fn a_fault_by_global_count_also_skips_calls_outside_the_total() {
    let b = backend();
    b.fail_nth_call(2);
    b.set_current_device(Some(D0)).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    assert_eq!(b.current_device().unwrap(), Some(D0));
    assert_eq!(code(b.stream_create(D0)), HostErrorCode::InjectedFault);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    assert_eq!(b.clear_faults(), 0);
    zero_stats(&b);
}

/// Objects a scenario made and has not yet destroyed.
#[derive(Default)]
struct Made {
    streams: Vec<(DeviceId, HostStream)>,
    events: Vec<(DeviceId, HostEvent)>,
    allocations: Vec<(DeviceId, usize)>,
    registered: Vec<usize>,
}

impl Made {
    /// Destroys what is left (no fault is armed any more: each fires once).
    fn clean_up(self, b: &HostBackend) {
        for (device, stream) in self.streams {
            b.set_current_device(Some(device)).unwrap();
            b.stream_destroy(stream).unwrap();
        }
        for (device, event) in self.events {
            b.set_current_device(Some(device)).unwrap();
            b.event_destroy(event).unwrap();
        }
        for (device, address) in self.allocations {
            b.set_current_device(Some(device)).unwrap();
            b.free(device, MemoryKind::Device, address, None).unwrap();
        }
        for start in self.registered {
            b.host_unregister(start).unwrap();
        }
        b.set_current_device(None).unwrap();
    }
}

/// Two devices, a kernel on device 0, a cross-device wait, a copy back into registered memory
/// on device 1, which peer access lets reach device 0's stream-ordered memory.
///
/// # Safety
/// `host` stays valid and untouched until `b`'s queued work has run (a failed scenario may
/// leave its copy into it queued): drop `b` first.
unsafe fn scenario(b: &HostBackend, made: &mut Made, host: &mut [u32]) -> Result<()> {
    const WORDS: usize = 1024;
    let oom = Error::HostOutOfMemory { what: "scenario" };
    b.set_current_device(Some(D0))?;
    let _ = b.device_info(D0)?;
    let s0 = b.stream_create(D0)?;
    made.streams.push((D0, s0));
    let e0 = b.event_create(D0)?;
    made.events.push((D0, e0));
    let a = b
        .allocate_on_stream(s0, MemoryKind::Device, WORDS * 4)?
        .ok_or(oom)?;
    made.allocations.push((D0, a));
    let mut ptrs = [0usize; 2];
    let host_range =
        ByteRange::new(addr_mut(host), WORDS * 4).ok_or(Error::ZeroSize { what: "host" })?;
    b.host_register(host_range, &mut ptrs)?;
    made.registered.push(host_range.start);
    b.host_pinned_extent(host_range.start, &mut ptrs)?;
    let k = b.kernel(D0, "fill_u32")?;
    // SAFETY: `a` is a live allocation of `WORDS` words, the kernel's only pointer.
    unsafe {
        b.launch(
            s0,
            k,
            LaunchDims::linear(2, 64),
            &[
                KernelArg::Ptr(a),
                KernelArg::U32(7),
                KernelArg::U64(WORDS as u64),
            ],
        )
    }?;
    b.event_record(e0, s0)?;

    b.set_current_device(Some(D1))?;
    // Device 1's stream copies device 0's stream-ordered memory: only with peer access.
    b.enable_peer_access(D1, D0)?;
    let s1 = b.stream_create(D1)?;
    made.streams.push((D1, s1));
    b.stream_wait_event(s1, e0)?;
    // SAFETY: `a` is live until the stream-ordered free after this copy; the caller keeps
    // `host` valid and untouched until the copy has run.
    unsafe { b.copy(s1, host_range.start, a, WORDS * 4) }?;
    b.stream_synchronize(s1)?;
    b.event_query(e0)?;
    b.stream_destroy(s1)?;
    made.streams.pop();
    b.host_unregister(host_range.start)?;
    made.registered.pop();

    b.set_current_device(Some(D0))?;
    b.free(D0, MemoryKind::Device, a, Some(s0))?;
    made.allocations.pop();
    b.event_synchronize(e0)?;
    b.event_destroy(e0)?;
    made.events.pop();
    b.stream_destroy(s0)?;
    made.streams.pop();
    b.set_current_device(None)
}

#[test]
fn failing_each_call_of_a_scenario_in_turn_leaks_nothing() {
    let mut host = vec![0u32; 1024];
    let clean = backend();
    let mut made = Made::default();
    // SAFETY: `host` outlives `clean`, declared after it.
    unsafe { scenario(&clean, &mut made, &mut host) }.unwrap();
    assert!(host.iter().all(|&w| w == 7));
    let calls = clean.calls().total;
    assert!(calls >= 20, "{calls} calls");
    zero_stats(&clean);

    for n in 1..=calls {
        // Declared first so that it outlives the backend's workers (a failed scenario leaves
        // its copy into it queued).
        let mut host = vec![0u32; 1024];
        let b = backend();
        let mut made = Made::default();
        b.fail_nth_call(n);
        // SAFETY: `host` outlives `b`, declared after it.
        let result = unsafe { scenario(&b, &mut made, &mut host) };
        assert_eq!(code(result), HostErrorCode::InjectedFault, "call {n}");
        assert_eq!(b.clear_faults(), 0, "call {n}: the fault did not fire");
        made.clean_up(&b);
        zero_stats(&b);
        assert_eq!(b.stats().faults_injected, 1);
    }
}

// ----- work log and shutdown -----

#[test]
fn the_work_log_keeps_the_most_recent_items() {
    let b = HostBackend::new(HostConfig {
        work_log_capacity: 2,
        ..HostConfig::default()
    });
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let mut host = [0u8; 3];
    // The address is taken once: borrowing `host` again while the stream fills it would race
    // with that fill (Miri saw it).
    let base = addr_mut(&mut host);
    for (i, value) in (1..=3u8).enumerate() {
        // SAFETY: byte `i` of `host`, untouched until the synchronise below.
        unsafe { b.fill(s, base + i, value, 1) }.unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert_eq!(host, [1, 2, 3]);
    let values: Vec<u8> = b
        .work_log()
        .iter()
        .map(|r| match r.op {
            WorkOp::Fill {
                value: FillValue::U8(value),
                ..
            } => value,
            _ => 0,
        })
        .collect();
    assert_eq!(values, [2, 3]);
    b.clear_work_log();
    assert!(b.work_log().is_empty());
    b.stream_destroy(s).unwrap();
}

#[test]
fn dropping_the_backend_runs_queued_work_joins_workers_and_frees_everything() {
    let ran = Arc::new(AtomicUsize::new(0));
    let host = vec![0u8; 4096];
    let b = backend();
    let counter = ran.clone();
    b.register_kernel("count", move |_, _| {
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    let registered = Arc::new(AtomicBool::new(false));
    for device in [D0, D1] {
        b.set_current_device(Some(device)).unwrap();
        let s = b.stream_create(device).unwrap();
        let e = b.event_create(device).unwrap();
        let a = b
            .allocate(device, MemoryKind::Device, 1 << 20)
            .unwrap()
            .unwrap();
        b.allocate(device, MemoryKind::HostPinned, 4096)
            .unwrap()
            .unwrap();
        // SAFETY: no pointer arguments; `a` is live until the stream-ordered free below.
        unsafe {
            for _ in 0..3 {
                launch_named(&b, s, device, "count", LaunchDims::linear(1, 1), &[]).unwrap();
            }
            b.fill(s, a, 1, 1 << 20).unwrap();
        }
        b.event_record(e, s).unwrap();
        b.free(device, MemoryKind::Device, a, Some(s)).unwrap();
    }
    let draining = b.stream_create(D1).unwrap();
    // SAFETY: no pointer arguments.
    unsafe { launch_named(&b, draining, D1, "count", LaunchDims::linear(1, 1), &[]) }.unwrap();
    b.stream_destroy(draining).unwrap();
    b.host_register(ByteRange::new(addr(&host), 4096).unwrap(), &mut [0usize; 2])
        .unwrap();
    registered.store(true, Ordering::Relaxed);
    drop(b);
    assert_eq!(ran.load(Ordering::Relaxed), 7);
    // Every clone of the kernel (registry, loaded kernels, queued launches) is gone: the
    // workers that held them have been joined.
    assert_eq!(Arc::strong_count(&ran), 1);
    assert!(registered.load(Ordering::Relaxed));
}

#[test]
fn registering_a_name_again_changes_later_loads_only() {
    let runs = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let b = backend();
    let register = |which: usize| {
        let runs = runs.clone();
        b.register_kernel("count", move |_, _| {
            runs[which].fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
    };
    register(0);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let old = b.kernel(D0, "count").unwrap();
    register(1);
    let new = b.kernel(D0, "count").unwrap();
    assert_ne!(new, old, "a name registered again loads afresh");
    assert_eq!(b.kernel(D0, "count").unwrap(), new);
    // SAFETY: no pointer arguments.
    unsafe {
        b.launch(s, old, LaunchDims::linear(1, 1), &[]).unwrap();
        b.launch(s, new, LaunchDims::linear(2, 1), &[]).unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert_eq!(
        runs[0].load(Ordering::Relaxed),
        1,
        "the old handle keeps its function"
    );
    assert_eq!(runs[1].load(Ordering::Relaxed), 2);
    b.stream_destroy(s).unwrap();
}

#[test]
fn fill_elements_sets_16_and_32_bit_values_and_refuses_misaligned_or_overflowing_ones() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let buffer = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // SAFETY (every fill and copy here): a live allocation of `b` (held by the backend while
    // the work runs) and `host`, untouched until the synchronise.
    unsafe { b.fill_elements(s, buffer, FillValue::U32(0x0102_0304), 8) }.unwrap();
    unsafe { b.fill_elements(s, buffer + 32, FillValue::U16(0xbeef), 16) }.unwrap();
    let mut host = [0u8; 64];
    unsafe { b.copy(s, addr_mut(&mut host), buffer, 64) }.unwrap();
    b.stream_synchronize(s).unwrap();
    let words: Vec<u32> = host[..32]
        .chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    let halves: Vec<u16> = host[32..]
        .chunks(2)
        .map(|c| u16::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [0x0102_0304; 8]);
    assert_eq!(halves, [0xbeef; 16]);

    let misaligned = unsafe { b.fill_elements(s, buffer + 2, FillValue::U32(1), 1) };
    assert_eq!(code(misaligned), HostErrorCode::InvalidValue);
    let overflowing = unsafe { b.fill_elements(s, buffer, FillValue::U16(1), usize::MAX) };
    assert!(matches!(overflowing, Err(Error::AddressOverflow { .. })));
    b.stream_destroy(s).unwrap();
    b.free(D0, MemoryKind::Device, buffer, None).unwrap();
}

#[test]
fn foreign_module_images_and_packed_launches_are_unsupported_on_the_host() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let image = c"// PTX text";
    // SAFETY: a NUL-terminated image, readable during the call.
    let loaded = unsafe { b.module_load(D0, image.as_ptr().cast()) };
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
    // SAFETY: as above; the device does not exist, which is checked first.
    let unknown = unsafe { b.module_load(DeviceId(7), image.as_ptr().cast()) };
    assert!(matches!(unknown, Err(Error::UnknownDevice { .. })));
    let s = b.stream_create(D0).unwrap();
    let kernel = b.kernel(D0, "fill_u32").unwrap();
    // SAFETY: refused before anything reads the (null) parameter array.
    let launched =
        unsafe { b.launch_packed(s, kernel, LaunchDims::linear(1, 1), core::ptr::null_mut()) };
    assert!(matches!(launched, Err(Error::Unsupported { .. })));
    b.stream_destroy(s).unwrap();
}

/// The peer rule of the module documentation, case by case as the CUDA driver answered it on
/// two H100s: device 1's plain copy refuses device 0's stream-ordered device memory until
/// device 1 has peer access to device 0; synchronous allocations, host kinds and the peer copy
/// are accepted throughout.
#[test]
fn a_plain_copy_reaches_another_devices_pool_memory_only_with_peer_access() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s0 = b.stream_create(D0).unwrap();
    let pooled = b
        .allocate_on_stream(s0, MemoryKind::Device, 256)
        .unwrap()
        .unwrap();
    let plain = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    let pinned = b
        .allocate_on_stream(s0, MemoryKind::HostPinned, 256)
        .unwrap()
        .unwrap();
    // SAFETY: device 0's stream fills its own allocations.
    unsafe {
        b.fill(s0, pooled, 0x5a, 256).unwrap();
        b.fill(s0, plain, 0x3c, 256).unwrap();
    }
    b.stream_synchronize(s0).unwrap();
    b.set_current_device(Some(D1)).unwrap();
    let s1 = b.stream_create(D1).unwrap();
    let target = b.allocate(D1, MemoryKind::Device, 256).unwrap().unwrap();
    let calls = b.calls().total;
    // SAFETY (all copies below): live allocations of 256 bytes each.
    let refused = unsafe { b.copy(s1, target, pooled, 256) };
    assert_eq!(code(refused), HostErrorCode::InvalidValue);
    let refused = unsafe { b.copy(s1, pooled, target, 256) };
    assert_eq!(code(refused), HostErrorCode::InvalidValue);
    assert_eq!(b.calls().total, calls + 2);
    unsafe { b.copy(s1, target, plain, 256) }.unwrap();
    unsafe { b.copy(s1, pinned, target, 256) }.unwrap();
    // The peer copy names each side's device, and a side of the wrong device is refused.
    unsafe { b.copy_peer(s1, target, D1, pooled, D0, 256) }.unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { read_back(&b, s1, target, 256) }, vec![0x5a; 256]);
    let wrong = unsafe { b.copy_peer(s1, target, D0, pooled, D0, 256) };
    assert_eq!(code(wrong), HostErrorCode::InvalidValue);
    assert!(b.peer_access_possible(D1, D0).unwrap());
    b.enable_peer_access(D1, D0).unwrap();
    b.enable_peer_access(D1, D0).unwrap();
    unsafe { b.copy(s1, target, pooled, 256) }.unwrap();
    assert_eq!(unsafe { read_back(&b, s1, target, 256) }, vec![0x5a; 256]);
    // One direction a call: device 0 still does not reach device 1's pool memory.
    let pooled_1 = b
        .allocate_on_stream(s1, MemoryKind::Device, 256)
        .unwrap()
        .unwrap();
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(
        code(unsafe { b.copy(s0, plain, pooled_1, 256) }),
        HostErrorCode::InvalidValue
    );
    b.stream_synchronize(s0).unwrap();
    b.free(D0, MemoryKind::Device, pooled, Some(s0)).unwrap();
    b.free(D0, MemoryKind::Device, plain, None).unwrap();
    b.free(D0, MemoryKind::HostPinned, pinned, None).unwrap();
    b.stream_destroy(s0).unwrap();
    b.set_current_device(Some(D1)).unwrap();
    b.stream_synchronize(s1).unwrap();
    b.free(D1, MemoryKind::Device, target, None).unwrap();
    b.free(D1, MemoryKind::Device, pooled_1, None).unwrap();
    b.stream_destroy(s1).unwrap();
    b.set_current_device(None).unwrap();
    zero_stats(&b);
}

#[test]
fn peer_access_needs_a_link_on_both_devices_and_another_device() {
    let mut config = HostConfig::with_devices(3);
    config.devices[2].peer_link = false;
    let b = HostBackend::new(config);
    assert!(b.peer_access_possible(D0, D1).unwrap());
    assert!(!b.peer_access_possible(D0, DeviceId(2)).unwrap());
    assert!(!b.peer_access_possible(DeviceId(2), D0).unwrap());
    assert!(!b.peer_access_possible(D0, D0).unwrap());
    assert!(matches!(
        b.peer_access_possible(D0, DeviceId(3)),
        Err(Error::UnknownDevice { .. })
    ));
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(
        code(b.enable_peer_access(D0, DeviceId(2))),
        HostErrorCode::PeerAccessUnsupported
    );
    assert_eq!(
        code(b.enable_peer_access(D0, D0)),
        HostErrorCode::PeerAccessUnsupported
    );
    // The device given access must be current, as every call acting on a device.
    assert_eq!(
        code(b.enable_peer_access(D1, D0)),
        HostErrorCode::WrongCurrentDevice
    );
    b.enable_peer_access(D0, D1).unwrap();
    b.set_current_device(None).unwrap();
}
