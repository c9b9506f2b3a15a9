//! Tests of the MLIR ABI through its exported functions on the host backend: stream order, the
//! join MLIR's lowering emits and the driver calls of a fork/join iteration, refusals that
//! change nothing, handles across sessions, traces.

use std::ffi::c_void;

use gpu_runtime::DeviceId;
use gpu_runtime::backend::Backend;
use gpu_runtime::host::CallKind;

use super::forkjoin::{WORDS, forkjoin_iteration};
use super::objects::Objects;
use super::*;
use crate::shared::status::{last_error, set_last_error};
use crate::shared::{
    self, BackendChoice, CapiError, OpenOptions, Session, open, process_test_lock, with_session,
};

const NULL: *mut c_void = core::ptr::null_mut();

/// Opens the host backend and makes device 0 this thread's default.
pub(super) fn open_host() {
    shared::open_host();
    mgpuSetDefaultDevice(0);
}

/// Runs `call` and returns the message it failed with, or `None` when it succeeded (the
/// thread's last error is set to a marker first: only a failure replaces it).
fn refusal(call: impl FnOnce()) -> Option<String> {
    const MARKER: &str = "no failure yet";
    set_last_error(&CapiError::InvalidArgument {
        what: MARKER,
        detail: String::new(),
    });
    call();
    let message = last_error();
    (!message.starts_with(MARKER)).then_some(message)
}

/// The operations the runtime has planned so far, and the bytes allocated now.
fn enqueued_and_allocated() -> (u64, usize) {
    inspect(|_, session| {
        let stats = session.runtime().stats();
        let allocated = stats
            .allocator
            .iter()
            .map(|(_, _, kind)| kind.allocated)
            .sum();
        (stats.operations, allocated)
    })
}

/// `mgpuMemFree` with a destroyed stream is refused and leaves the allocation live: its
/// address is not handed out again, its contents stay, and the correct free afterwards
/// succeeds.
#[test]
fn a_refused_free_leaves_the_allocation_live() {
    let _serial = process_test_lock();
    open_host();
    let stream = mgpuStreamCreate();
    let ptr = mgpuMemAlloc(256, stream, false);
    mgpuMemset32(ptr, 7, 64, stream);
    let dead = mgpuStreamCreate();
    mgpuStreamDestroy(dead);
    let refused = refusal(|| mgpuMemFree(ptr, dead)).expect("a destroyed stream is refused");
    assert!(refused.contains("MLIR stream"), "{refused}");
    assert!(
        inspect(|objects, _| objects.buffers.contains_key(&(ptr as usize))),
        "the refused free left the allocation live"
    );
    let other = mgpuMemAlloc(256, NULL, false);
    assert_ne!(
        other, ptr,
        "a live allocation's address is not handed out again"
    );
    let mut host = [0u32; 64];
    mgpuMemcpy(host.as_mut_ptr().cast(), ptr, 256, stream);
    mgpuStreamSynchronize(stream);
    assert!(host.iter().all(|&word| word == 7), "{host:?}");
    assert_eq!(
        refusal(|| mgpuMemFree(ptr, stream)),
        None,
        "the correct free"
    );
    assert_eq!(refusal(|| mgpuMemFree(other, NULL)), None);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    let report = shared::shutdown().unwrap();
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}

/// Every call that takes a stream refuses a destroyed one before it does anything, whatever
/// its other arguments (no bytes, managed memory, a null pointer).
#[test]
fn a_destroyed_stream_is_refused_by_every_call_before_anything_happens() {
    let _serial = process_test_lock();
    open_host();
    let buffer = mgpuMemAlloc(64, NULL, false);
    let dead = mgpuStreamCreate();
    mgpuStreamDestroy(dead);
    let before = enqueued_and_allocated();
    let mut host = [0u8; 64];
    let h = host.as_mut_ptr().cast::<c_void>();
    let cases: [(&str, Option<String>); 8] = [
        (
            "managed alloc",
            refusal(|| assert!(mgpuMemAlloc(64, dead, true).is_null())),
        ),
        (
            "alloc of no bytes",
            refusal(|| assert!(mgpuMemAlloc(0, dead, false).is_null())),
        ),
        (
            "alloc",
            refusal(|| assert!(mgpuMemAlloc(64, dead, false).is_null())),
        ),
        ("free of null", refusal(|| mgpuMemFree(NULL, dead))),
        (
            "memset of nothing",
            refusal(|| mgpuMemset32(buffer, 1, 0, dead)),
        ),
        ("memset16", refusal(|| mgpuMemset16(buffer, 1, 8, dead))),
        (
            "memcpy of no bytes",
            refusal(|| mgpuMemcpy(h, buffer, 0, dead)),
        ),
        ("memcpy", refusal(|| mgpuMemcpy(h, buffer, 64, dead))),
    ];
    for (what, refused) in cases {
        let message = refused.unwrap_or_else(|| panic!("{what} with a destroyed stream ran"));
        assert!(message.contains("MLIR stream"), "{what}: {message}");
    }
    assert_eq!(
        enqueued_and_allocated(),
        before,
        "nothing enqueued or allocated"
    );
    mgpuMemFree(buffer, NULL);
    shared::shutdown().unwrap();
}

/// Handles of a session that was shut down are refused in the next one, and never act on
/// its objects (before, handles restarted at the same values in every session).
#[test]
fn a_handle_of_an_earlier_session_is_refused_and_leaves_the_new_one_alone() {
    let _serial = process_test_lock();
    open_host();
    let old_stream = mgpuStreamCreate();
    let old_event = mgpuEventCreate();
    shared::shutdown().unwrap();
    open_host();
    let stream = mgpuStreamCreate();
    let event = mgpuEventCreate();
    assert_ne!(
        stream, old_stream,
        "a new session issues new stream handles"
    );
    assert_ne!(event, old_event, "and new event handles");
    let buffer = mgpuMemAlloc(64, stream, false);
    mgpuMemset32(buffer, 3, 16, stream);
    let before = enqueued_and_allocated();
    let cases = [
        refusal(|| mgpuStreamDestroy(old_stream)),
        refusal(|| mgpuStreamSynchronize(old_stream)),
        refusal(|| mgpuStreamWaitEvent(old_stream, event)),
        refusal(|| mgpuStreamWaitEvent(stream, old_event)),
        refusal(|| mgpuEventRecord(old_event, stream)),
        refusal(|| mgpuEventSynchronize(old_event)),
        refusal(|| mgpuEventDestroy(old_event)),
        refusal(|| mgpuMemset32(buffer, 9, 16, old_stream)),
        refusal(|| mgpuMemFree(buffer, old_stream)),
    ];
    for refused in cases {
        let message = refused.expect("a handle of the earlier session is refused");
        assert!(message.contains("earlier session"), "{message}");
    }
    assert_eq!(
        enqueued_and_allocated(),
        before,
        "nothing enqueued or freed"
    );
    let live = inspect(|objects, _| (objects.streams.len(), objects.events.len()));
    assert_eq!(live, (1, 1), "the new session's stream and event are alive");
    let mut host = [0u32; 16];
    mgpuMemcpy(host.as_mut_ptr().cast(), buffer, 64, stream);
    assert_eq!(refusal(|| mgpuStreamSynchronize(stream)), None);
    assert!(host.iter().all(|&word| word == 3), "{host:?}");
    mgpuMemFree(buffer, stream);
    mgpuEventDestroy(event);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    let report = shared::shutdown().unwrap();
    assert_eq!(report.released_objects, 0);
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}

/// A memset or copy whose range starts in an allocation of `mgpuMemAlloc` must end inside
/// it: past its end is refused, and nothing is enqueued.
#[test]
fn memsets_and_copies_past_an_allocations_end_are_refused_with_nothing_enqueued() {
    let _serial = process_test_lock();
    open_host();
    let stream = mgpuStreamCreate();
    let buffer = mgpuMemAlloc(64, stream, false);
    mgpuMemset32(buffer, 1, 16, stream);
    mgpuStreamSynchronize(stream);
    let before = enqueued_and_allocated();
    let mut host = [0u32; 32];
    let h = host.as_mut_ptr().cast::<c_void>();
    let inside = |offset: usize| buffer.wrapping_byte_add(offset);
    let cases: [(&str, Option<String>); 7] = [
        ("memset32", refusal(|| mgpuMemset32(buffer, 2, 17, stream))),
        (
            "memset32 inside",
            refusal(|| mgpuMemset32(inside(4), 2, 16, stream)),
        ),
        (
            "memset32, no stream",
            refusal(|| mgpuMemset32(buffer, 2, 17, NULL)),
        ),
        (
            "memset16",
            refusal(|| mgpuMemset16(inside(32), 2, 17, stream)),
        ),
        (
            "memcpy source",
            refusal(|| mgpuMemcpy(h, inside(8), 64, stream)),
        ),
        (
            "memcpy destination",
            refusal(|| mgpuMemcpy(buffer, h, 65, stream)),
        ),
        (
            "memcpy within",
            refusal(|| mgpuMemcpy(inside(32), buffer, 33, stream)),
        ),
    ];
    for (what, refused) in cases {
        let message = refused.unwrap_or_else(|| panic!("{what} past the end was accepted"));
        assert!(message.contains("past the end"), "{what}: {message}");
    }
    assert_eq!(enqueued_and_allocated(), before, "nothing was enqueued");
    mgpuMemcpy(h, buffer, 64, stream);
    mgpuStreamSynchronize(stream);
    assert!(host[..16].iter().all(|&word| word == 1), "{host:?}");
    mgpuMemFree(buffer, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    let report = shared::shutdown().unwrap();
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}

/// Runs `check` on the session's MLIR objects and runtime.
pub(super) fn inspect<T>(
    check: impl FnOnce(
        &Objects<gpu_runtime::host::HostBackend>,
        &Session<gpu_runtime::host::HostBackend>,
    ) -> T,
) -> T {
    with_session(|session| match session {
        shared::AnySession::Host(s) => Ok(check(&s.mlir.lock(), s)),
        _ => panic!("the tests open the host backend"),
    })
    .unwrap()
}

#[test]
fn copies_and_16_and_32_bit_memsets_run_in_stream_order() {
    let _serial = process_test_lock();
    open_host();
    let stream = mgpuStreamCreate();
    assert!(!stream.is_null());
    let device = mgpuMemAlloc(64, stream, false);
    let mut host = [0u8; 64];
    mgpuMemset32(device, 0x0102_0304, 8, stream);
    mgpuMemset16(device.wrapping_byte_add(32), 0xbeef, 16, stream);
    mgpuMemcpy(host.as_mut_ptr().cast(), device, 64, stream);
    mgpuStreamSynchronize(stream);
    assert!(
        host[..32]
            .chunks(4)
            .all(|w| w == 0x0102_0304u32.to_ne_bytes())
    );
    assert!(host[32..].chunks(2).all(|h| h == 0xbeefu16.to_ne_bytes()));
    mgpuMemFree(device, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    let report = shared::shutdown().unwrap();
    assert_eq!(
        report.released_objects, 0,
        "the program destroyed its stream"
    );
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}

/// MLIR's join: two streams recorded into events, a third waiting on both; the inputs are
/// never destroyed. Their driver streams go back at once, an idle input whose event has
/// completed is dropped at the next stream creation, and shutdown counts what was left.
#[test]
fn a_join_leaves_no_driver_stream_behind_and_its_inputs_are_reclaimed() {
    let _serial = process_test_lock();
    open_host();
    let buffer = mgpuMemAlloc(256, NULL, false);
    for _ in 0..3 {
        let (s1, s2) = (mgpuStreamCreate(), mgpuStreamCreate());
        mgpuMemset32(buffer, 1, 32, s1);
        mgpuMemset32(buffer.wrapping_byte_add(128), 2, 32, s2);
        let (e1, e2) = (mgpuEventCreate(), mgpuEventCreate());
        mgpuEventRecord(e1, s1);
        mgpuEventRecord(e2, s2);
        let s3 = mgpuStreamCreate();
        mgpuStreamWaitEvent(s3, e1);
        mgpuStreamWaitEvent(s3, e2);
        mgpuEventDestroy(e1);
        mgpuEventDestroy(e2);
        let mut host = [0u32; 64];
        mgpuMemcpy(host.as_mut_ptr().cast(), buffer, 256, s3);
        mgpuStreamSynchronize(s3);
        mgpuStreamDestroy(s3);
        assert!(host[..32].iter().all(|&w| w == 1) && host[32..].iter().all(|&w| w == 2));
    }
    let (streams, held) = inspect(|objects, _| {
        let held = objects
            .streams
            .iter()
            .filter(|(_, s)| s.tail.is_some())
            .count();
        (objects.streams.len(), held)
    });
    assert_eq!(streams, 6, "the program never destroyed the join inputs");
    assert!(
        held <= 2,
        "only the last iteration's inputs may still hold a branch"
    );
    let created = inspect(|_, session| session.runtime().stats().streams_created);
    assert_eq!(
        created, 2,
        "two pooled driver streams (the inputs run side by side) served all nine MLIR streams"
    );
    mgpuMemFree(buffer, NULL);
    let report = shared::shutdown().unwrap();
    assert_eq!(report.released_objects, 6);
    assert_eq!(report.shutdown.program.unwaited, vec![], "nothing was lost");
}

/// With a trace asked for, the program's own calls are written beside the backend's and
/// checked: the checker names the join's input streams the program never destroyed.
#[test]
fn the_programs_own_trace_shows_the_streams_it_leaked() {
    let _serial = process_test_lock();
    let path = std::env::temp_dir().join(format!("mlir-trace-{}.txt", std::process::id()));
    open(OpenOptions {
        backend: BackendChoice::Host,
        trace: Some(path.clone()),
    })
    .unwrap();
    mgpuSetDefaultDevice(0);
    let buffer = mgpuMemAlloc(64, NULL, false);
    let (s1, s2) = (mgpuStreamCreate(), mgpuStreamCreate());
    mgpuMemset32(buffer, 1, 8, s1);
    mgpuMemset32(buffer.wrapping_byte_add(32), 2, 8, s2);
    let (e1, e2) = (mgpuEventCreate(), mgpuEventCreate());
    mgpuEventRecord(e1, s1);
    mgpuEventRecord(e2, s2);
    let s3 = mgpuStreamCreate();
    mgpuStreamWaitEvent(s3, e1);
    mgpuStreamWaitEvent(s3, e2);
    mgpuEventDestroy(e1);
    mgpuEventDestroy(e2);
    mgpuMemFree(buffer, s3);
    mgpuStreamSynchronize(s3);
    mgpuStreamDestroy(s3);
    let report = shared::shutdown().unwrap();
    assert_eq!(
        report.trace.unwrap().defects,
        Vec::<String>::new(),
        "ours is clean"
    );
    let program = path.with_extension("txt.mlir");
    let text = std::fs::read_to_string(&program).unwrap();
    let parsed = gpu_runtime::token::parse_trace(&text).unwrap();
    let defects: Vec<String> = parsed
        .check()
        .iter()
        .map(|d| parsed.describe(d).to_string())
        .collect();
    assert_eq!(defects.len(), 2, "{defects:?}");
    assert!(
        defects.iter().all(|d| d.contains("never destroyed")),
        "{defects:?}"
    );
    for file in [path, program] {
        let _ = std::fs::remove_file(file);
    }
}

#[test]
fn nested_registrations_are_counted_and_unregistered_in_any_order() {
    let _serial = process_test_lock();
    open_host();
    let mut data = vec![0i32; 4096];
    let base = data.as_mut_ptr() as i64;
    // A rank-1 descriptor: sizes then strides follow the offset.
    let descriptor = |offset: i64, len: i64| [base, base, offset, len, 1];
    let whole = descriptor(0, 4096);
    let part = descriptor(1024, 512);
    let whole_ptr = whole.as_ptr().cast::<MemRefDescriptor>();
    let part_ptr = part.as_ptr().cast::<MemRefDescriptor>();
    let start = data.as_ptr() as usize;
    let pinned = |at: usize, len: usize| {
        inspect(|_, s| s.runtime().pinned_address(at, len, DeviceId(0)).unwrap())
    };
    // SAFETY: both calls get descriptors of rank 1 over `data`, which outlives them.
    unsafe {
        mgpuMemHostRegisterMemRef(1, whole_ptr, 4);
        mgpuMemHostRegisterMemRef(1, part_ptr, 4);
    }
    assert!(pinned(start + 4096, 2048).is_some());
    // SAFETY: as above.
    unsafe { mgpuMemHostUnregisterMemRef(1, whole_ptr, 4) };
    assert!(pinned(start, 16384).is_some(), "one registration is left");
    // SAFETY: as above.
    unsafe { mgpuMemHostUnregisterMemRef(1, part_ptr, 4) };
    assert!(pinned(start, 4).is_none(), "the last one unpinned it");
    // SAFETY: as above; a third unregistration has nothing left to count down.
    unsafe { mgpuMemHostUnregisterMemRef(1, part_ptr, 4) };
    assert!(last_error().contains("no locked range"), "{}", last_error());
    let strided = [base, base, 0, 8, 2];
    // SAFETY: a rank-1 descriptor over `data`.
    unsafe { mgpuMemHostRegisterMemRef(1, strided.as_ptr().cast(), 4) };
    assert!(last_error().contains("not dense"), "{}", last_error());
    // SAFETY: null is checked.
    unsafe { mgpuMemHostRegisterMemRef(1, core::ptr::null(), 4) };
    assert!(last_error().contains("null"), "{}", last_error());
    // Offsets and sizes that would reach outside the memref (before: a negative offset
    // wrapped to memory below it; a huge one overflowed, a panic caught at the boundary).
    for (offset, len, element_bytes, message) in [
        (-1, 16, 4, "offset: -1 is negative"),
        (i64::MAX, 16, 4, "do not fit the address space"),
        (0, -16, 4, "negative"),
        (0, 16, 0, "element size"),
        (0, i64::MAX, 8, "do not fit the address space"),
    ] {
        let bad = [base, base, offset, len, 1];
        // SAFETY: a rank-1 descriptor; nothing is registered.
        unsafe { mgpuMemHostRegisterMemRef(1, bad.as_ptr().cast(), element_bytes) };
        assert!(last_error().contains(message), "{}", last_error());
    }
    assert!(pinned(start, 4).is_none(), "nothing was registered");
    shared::shutdown().unwrap();
}

#[test]
fn the_default_device_moves_every_later_call() {
    let _serial = process_test_lock();
    open_host();
    let on_zero = mgpuMemAlloc(64, NULL, false);
    mgpuSetDefaultDevice(1);
    let stream = mgpuStreamCreate();
    let on_one = mgpuMemAlloc(64, stream, false);
    mgpuMemset32(on_one, 5, 16, stream);
    mgpuStreamSynchronize(stream);
    let devices = inspect(|objects, _| {
        [on_zero, on_one].map(|ptr| objects.buffers[&(ptr as usize)].device())
    });
    assert_eq!(devices, [DeviceId(0), DeviceId(1)]);
    mgpuMemFree(on_one, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    mgpuSetDefaultDevice(0);
    mgpuMemFree(on_zero, NULL);
    mgpuSetDefaultDevice(-1);
    assert!(last_error().contains("negative"), "{}", last_error());
    shared::shutdown().unwrap();
}

#[test]
fn bad_handles_and_images_are_reported_and_change_nothing() {
    let _serial = process_test_lock();
    open_host();
    mgpuStreamSynchronize(0x1234 as *mut c_void);
    assert!(
        last_error().contains("0x1234 is not a handle of this library (a MLIR stream"),
        "{}",
        last_error()
    );
    mgpuEventRecord(0x1234 as *mut c_void, NULL);
    assert!(
        last_error().contains("not a handle of this library (a MLIR event"),
        "{}",
        last_error()
    );
    let event = mgpuEventCreate();
    mgpuEventRecord(event, NULL);
    assert!(
        last_error().contains("MLIR stream handle is a null pointer"),
        "{}",
        last_error()
    );
    mgpuStreamDestroy(event);
    assert!(
        last_error().contains("is a MLIR event handle where a MLIR stream handle"),
        "{}",
        last_error()
    );
    mgpuEventDestroy(event);
    assert_eq!(
        inspect(|objects, _| objects.events.len()),
        0,
        "destroyed by its own call only"
    );
    let stream = mgpuStreamCreate();
    mgpuStreamDestroy(stream);
    mgpuStreamDestroy(stream);
    assert!(
        last_error().contains("names no live MLIR stream: it was already released"),
        "double destroy: {}",
        last_error()
    );
    let local = 0u32;
    mgpuMemFree((&raw const local).cast_mut().cast(), NULL);
    assert!(last_error().contains("no allocation"), "{}", last_error());
    let buffer = mgpuMemAlloc(64, NULL, false);
    mgpuMemFree(buffer.wrapping_byte_add(8), NULL);
    assert!(
        last_error().contains("lies inside the allocation"),
        "{}",
        last_error()
    );
    mgpuMemFree(buffer, NULL);
    let image = c"// PTX";
    // SAFETY: a NUL-terminated image (refused by the host backend).
    let module = unsafe { mgpuModuleLoadJIT(image.as_ptr().cast_mut().cast(), 2) };
    assert!(module.is_null());
    assert!(
        last_error().contains("host backend does not support"),
        "{}",
        last_error()
    );
    // SAFETY: a NUL-terminated name; the module handle is checked first.
    let function = unsafe { mgpuModuleGetFunction(module, c"k".as_ptr()) };
    assert!(function.is_null());
    let mut params: [*mut c_void; 0] = [];
    // SAFETY: refused before the parameters are read.
    unsafe {
        mgpuLaunchKernel(
            function,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            NULL,
            params.as_mut_ptr(),
            core::ptr::null_mut(),
        )
    };
    assert!(
        last_error().contains("MLIR function handle is a null pointer"),
        "{}",
        last_error()
    );
    assert!(
        mgpuMemAlloc(0, NULL, false).is_null(),
        "no bytes: null, as upstream"
    );
    let report = shared::shutdown().unwrap();
    assert_eq!(report.released_objects, 0);
}

/// The driver calls of one warm fork/join iteration: the work (3 memsets standing in for the
/// kernels, 2 copies, 1 synchronisation) and the 2 records of the program's events, which
/// the stream moves past before the join waits for them. No event query: the idle input `s1`
/// of each iteration is dropped at the next stream creation without asking the driver, as the
/// synchronisation of `s2` covered it (before, one `event_query` per iteration).
#[test]
fn a_warm_forkjoin_iteration_makes_the_works_calls_and_two_records_only() {
    let _serial = process_test_lock();
    open_host();
    let input = [3u32; WORDS];
    let calls = || inspect(|_, session| session.runtime().backend().calls());
    for iteration in 0..4 {
        let before = calls();
        let mut out = [0u32; WORDS];
        forkjoin_iteration(&input, &mut out);
        assert!(out.iter().all(|&word| word == 8));
        let made = calls().since(&before);
        if iteration == 0 {
            continue; // the pools, the allocator's cache and the idle queue warm up
        }
        let of = |kind| made.of(kind);
        assert_eq!(
            (of(CallKind::Fill), of(CallKind::Copy)),
            (3, 2),
            "iteration {iteration}: the work"
        );
        assert_eq!(
            (of(CallKind::EventRecord), of(CallKind::StreamSynchronize)),
            (2, 1),
            "iteration {iteration}"
        );
        assert_eq!(of(CallKind::EventQuery), 0, "iteration {iteration}");
        assert_eq!(made.total, 8, "iteration {iteration}: {made:?}");
    }
    let held = inspect(|objects, _| {
        objects
            .streams
            .iter()
            .filter(|(_, s)| s.tail.is_some())
            .count()
    });
    assert_eq!(
        held, 1,
        "only the last iteration's `s1` still holds a branch"
    );
    let report = shared::shutdown().unwrap();
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}

/// A program that never synchronises what its join inputs ran (the host waits for the device
/// behind the runtime's back here, so every query finds the work done): past
/// `IDLE_UNASKED` idle streams, each stream creation asks about the oldest, so the branches
/// held stay bounded.
#[test]
fn idle_join_inputs_no_synchronisation_covers_are_asked_about_past_a_bound() {
    let _serial = process_test_lock();
    open_host();
    let buffer = mgpuMemAlloc(256, NULL, false);
    let queries = || inspect(|_, s| s.runtime().backend().calls().of(CallKind::EventQuery));
    let before = queries();
    for _ in 0..3 * super::streams::IDLE_UNASKED {
        inspect(|_, s| s.runtime().backend().device_synchronize(DeviceId(0))).unwrap();
        let input = mgpuStreamCreate();
        mgpuMemset32(buffer, 1, 64, input);
        let event = mgpuEventCreate();
        mgpuEventRecord(event, input);
        let joined = mgpuStreamCreate();
        mgpuStreamWaitEvent(joined, event);
        mgpuEventDestroy(event);
        mgpuMemset32(buffer, 2, 64, joined);
        mgpuStreamDestroy(joined);
    }
    let held = inspect(|objects, _| {
        objects
            .streams
            .iter()
            .filter(|(_, s)| s.tail.is_some())
            .count()
    });
    assert!(
        queries() > before,
        "the oldest idle inputs were asked about"
    );
    assert!(
        held <= super::streams::IDLE_UNASKED + 1,
        "{held} idle inputs still hold branches"
    );
    mgpuMemFree(buffer, NULL);
    shared::shutdown().unwrap();
}
