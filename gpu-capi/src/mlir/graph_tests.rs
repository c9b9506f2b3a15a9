//! Tests of the graph mode (`mlir::graphs`) on the host backend: the same call sequences give
//! the same results with the mode off and on, repeats are replayed as graphs, host memory is
//! read at the call and written by the synchronisation, and mismatches and failures fall back.

use std::ffi::c_void;

use proptest::prelude::*;

use gpu_runtime::DeviceId;
use gpu_runtime::allocator::MemoryKind;
use gpu_runtime::host::CallKind;
use gpu_runtime::token::UnwaitedKind;

use super::forkjoin::{WORDS, forkjoin_iteration};
use super::graph_launches::set_params;
use super::graph_log::GraphStats;
use super::graphs::set_mode;
use super::tests::{inspect, open_host};
use super::*;
use crate::shared::status::last_error;
use crate::shared::{self, HandleKind, HandleMap, process_test_lock};

const NULL: *mut c_void = core::ptr::null_mut();
const BYTES: u64 = WORDS as u64 * 4;

/// Turns the graph mode on or off for the open session (on any backend: a traced session's
/// too).
fn mode(on: bool) {
    shared::with_session(|session| {
        crate::shared::session::dispatch!(session, s => {
            set_mode(&s.mlir, s.runtime(), on)
        })
    })
    .unwrap();
}

/// The graph mode's counts (all zero when it is off).
fn stats() -> GraphStats {
    inspect(|objects, _| {
        objects
            .graphs
            .as_ref()
            .map(|log| log.stats)
            .unwrap_or_default()
    })
}

/// How many driver calls of `kind` the host backend has seen.
fn calls_of(kind: CallKind) -> u64 {
    inspect(|_, s| s.runtime().backend().calls().of(kind))
}

/// A fork/join iteration repeated is replayed as one graph from its second occurrence, with
/// the same results and far fewer driver calls; nothing is left at shutdown.
#[test]
fn a_repeated_forkjoin_iteration_is_replayed_as_a_graph() {
    let _serial = process_test_lock();
    open_host();
    mode(true);
    let input = [3u32; WORDS];
    for iteration in 0..6 {
        let before = inspect(|_, s| s.runtime().backend().calls());
        let mut out = [0u32; WORDS];
        forkjoin_iteration(&input, &mut out);
        assert!(out.iter().all(|&word| word == 8), "iteration {iteration}");
        if iteration >= 2 {
            // One replay and the synchronisation (without the mode: 3 fills, 2 copies, 2
            // event records and the synchronisation); the allocations come back at the same
            // addresses, so no node is updated.
            let made = inspect(|_, s| s.runtime().backend().calls()).since(&before);
            assert_eq!(made.of(CallKind::GraphLaunch), 1, "iteration {iteration}");
            assert_eq!(made.total, 2, "iteration {iteration}: {made:?}");
        }
    }
    let seen = stats();
    assert_eq!(seen.issued, 1, "the first occurrence is issued: {seen:?}");
    assert_eq!(seen.instantiated, 1, "{seen:?}");
    assert_eq!((seen.replays, seen.updates), (5, 0), "{seen:?}");
    assert_eq!(calls_of(CallKind::GraphLaunch), 5);
    assert_eq!(inspect(|_, s| s.runtime().backend().stats().graphs), 1);
    let report = shared::shutdown().unwrap();
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}

/// A host source changed right after its copy was called does not change what is copied; a
/// copy into host memory is there once the stream is synchronised; both as graph replays.
#[test]
fn host_memory_is_read_at_the_call_and_written_by_the_synchronisation() {
    let _serial = process_test_lock();
    open_host();
    mode(true);
    let stream = mgpuStreamCreate();
    let device = mgpuMemAlloc(BYTES, stream, false);
    for round in 0..4u32 {
        let mut source = [round + 10; WORDS];
        let mut out = [0u32; WORDS];
        mgpuMemcpy(device, source.as_mut_ptr().cast(), BYTES, stream);
        source.fill(99); // after the call: the copy must not see it
        mgpuMemcpy(out.as_mut_ptr().cast(), device, BYTES, stream);
        mgpuStreamSynchronize(stream);
        assert!(
            out.iter().all(|&w| w == round + 10),
            "round {round}: {out:?}"
        );
    }
    assert!(stats().replays >= 2, "{:?}", stats());
    let pinned = || {
        inspect(|_, s| {
            let stats = s.runtime().stats();
            let kinds = stats.allocator.iter();
            kinds
                .filter(|(_, kind, _)| *kind == MemoryKind::HostPinned)
                .map(|(_, _, stats)| stats.allocated)
                .sum::<usize>()
        })
    };
    assert!(pinned() > 0, "the staging is pinned memory");
    mode(false); // releases the log as shutdown does
    assert_eq!(pinned(), 0, "the staging is given back");
    mgpuMemFree(device, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    let report = shared::shutdown().unwrap();
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}

/// Runs one round of memsets on one stream (all words 0, then the first `words` `value`),
/// copied out and checked.
fn memset_round(stream: *mut c_void, device: *mut c_void, words: usize, value: u32) {
    let mut out = vec![0u32; WORDS];
    mgpuMemset32(device, 0, WORDS as u64, stream);
    mgpuMemset32(device, value, words as u64, stream);
    mgpuMemcpy(out.as_mut_ptr().cast(), device, BYTES, stream);
    mgpuStreamSynchronize(stream);
    let (set, kept) = out.split_at(words);
    assert!(set.iter().all(|&w| w == value), "{out:?}");
    assert!(kept.iter().all(|&w| w == 0), "{out:?}");
}

/// Opens a session in graph mode and runs `rounds` memset rounds of 8 words on one stream
/// (the first issued, the others replayed); returns the stream and its allocation.
fn replaying_memset_rounds(rounds: u32) -> (*mut c_void, *mut c_void) {
    open_host();
    mode(true);
    let stream = mgpuStreamCreate();
    let device = mgpuMemAlloc(BYTES, stream, false);
    mgpuStreamSynchronize(stream);
    for value in 1..=rounds {
        memset_round(stream, device, 8, value);
    }
    (stream, device)
}

/// A sequence of another shape (here a memset of another length) is not replayed by the
/// cached graph: it is issued, with the right results, and the cached one still serves its own.
#[test]
fn a_changed_shape_is_issued_and_the_cached_graph_still_serves_its_own() {
    let _serial = process_test_lock();
    let (stream, device) = replaying_memset_rounds(3);
    let cached = stats();
    assert_eq!((cached.issued, cached.replays), (1, 2), "{cached:?}");
    memset_round(stream, device, 16, 7);
    let changed = stats();
    assert_eq!(changed.issued, 2, "the new shape is issued: {changed:?}");
    assert_eq!(changed.replays, 2);
    memset_round(stream, device, 8, 5);
    assert_eq!(stats().replays, 3, "the first shape replays again");
    assert!(
        stats().updates >= 1,
        "its memset value was updated in place"
    );
    let before = stats();
    for value in 0..3 {
        mgpuMemset32(device, value, 8, stream);
        mgpuStreamSynchronize(stream);
    }
    let single = stats();
    assert_eq!(
        single.replays, before.replays,
        "one memset is never replayed"
    );
    assert_eq!(single.issued, before.issued + 3);
    mgpuMemFree(device, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    shared::shutdown().unwrap();
}

/// A refused call in the middle of a sequence is reported at the call (as without the mode)
/// and logs nothing; a graph launch that fails is issued call by call instead, with the same
/// results; a kernel launch ends the sequence.
#[test]
fn refusals_are_reported_at_the_call_and_failed_replays_fall_back() {
    let _serial = process_test_lock();
    let (stream, device) = replaying_memset_rounds(2);
    let deferred = stats().deferred;
    mgpuMemset32(device, 1, WORDS as u64 + 1, stream);
    assert!(last_error().contains("past the end"), "{}", last_error());
    assert_eq!(
        stats().deferred,
        deferred,
        "the refused memset was not logged"
    );
    inspect(|_, s| s.runtime().backend().fail_nth(CallKind::GraphLaunch, 1));
    memset_round(stream, device, 8, 6);
    let failed = stats();
    assert_eq!(failed.failures, 1, "{failed:?}");
    assert_eq!(failed.issued, 2, "the failed replay was issued: {failed:?}");
    memset_round(stream, device, 8, 9);
    assert_eq!(
        stats().replays,
        failed.replays + 1,
        "and the next one replays"
    );
    // A kernel launch ends the sequence before it (the host backend refuses packed launches).
    mgpuMemset32(device, 4, 8, stream);
    // SAFETY: a null function is refused before the parameters are read.
    unsafe { mgpuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, stream, NULL.cast(), NULL.cast()) };
    assert!(last_error().contains("function"), "{}", last_error());
    let logged = inspect(|objects, _| objects.graphs.as_ref().map(|l| l.pending()));
    assert_eq!(logged, Some(0), "the launch flushed the memset before it");
    // A deferred call failing when issued does not stop the call that ended its sequence: its
    // failure is printed with its name and becomes the thread's last error.
    mgpuStreamSynchronize(stream);
    inspect(|_, s| s.runtime().backend().fail_nth(CallKind::Fill, 1));
    mgpuMemset32(device, 3, 8, stream);
    let mut host = [0u32; WORDS];
    mgpuMemcpy(host.as_mut_ptr().cast(), device, BYTES, NULL);
    assert!(last_error().contains("INJECTED"), "{}", last_error());
    assert_eq!(host[0], 4, "the copy ran; the failed memset did not");
    mgpuMemFree(device, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    shuts_down_with_failed_operations(2);
}

/// Shuts down and checks that the only tokens left unwaited are those of `failed` failed
/// operations (discarded, as any failed operation's is, with or without the mode).
fn shuts_down_with_failed_operations(failed: usize) {
    let report = shared::shutdown().unwrap();
    let unwaited = &report.shutdown.program.unwaited;
    assert_eq!(unwaited.len(), failed, "{unwaited:?}");
    assert!(
        unwaited.iter().all(|u| u.kind == UnwaitedKind::Discarded),
        "{unwaited:?}"
    );
}

/// Registered host memory is used in place (no staging); a memset of pageable memory ends the
/// sequence before it and is issued at once, with the same result.
#[test]
fn registered_memory_is_used_in_place_and_a_pageable_memset_ends_the_sequence() {
    let _serial = process_test_lock();
    let (stream, device) = replaying_memset_rounds(0);
    let mut pinned = vec![0u32; WORDS];
    mgpuMemHostRegister(pinned.as_mut_ptr().cast(), BYTES);
    for round in 1..4u32 {
        mgpuMemset32(device, round, WORDS as u64, stream);
        mgpuMemcpy(pinned.as_mut_ptr().cast(), device, BYTES, stream);
        mgpuStreamSynchronize(stream);
        assert!(pinned.iter().all(|&w| w == round), "round {round}");
    }
    let staging = inspect(|objects, _| objects.graphs.as_ref().map(|l| l.staging_buffers()));
    assert_eq!(staging, Some(0), "registered memory needs no staging");
    assert_eq!(stats().replays, 2);
    let mut host = vec![7u32; WORDS];
    mgpuMemset32(device, 5, 4, stream);
    mgpuMemset32(host.as_mut_ptr().cast(), 9, WORDS as u64, stream);
    let pending = inspect(|objects, _| objects.graphs.as_ref().map(|l| l.pending()));
    assert_eq!(
        pending,
        Some(0),
        "the sequence ended before the pageable memset"
    );
    mgpuStreamSynchronize(stream);
    assert!(host.iter().all(|&w| w == 9), "{host:?}");
    mgpuMemHostUnregister(pinned.as_mut_ptr().cast());
    mgpuMemFree(device, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    let report = shared::shutdown().unwrap();
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}

/// Past `CACHED_GRAPHS` shapes, the least recently used graph is destroyed: the backend
/// holds no more than that many, and none once the log is released.
#[test]
fn the_graph_cache_is_bounded() {
    let _serial = process_test_lock();
    let (stream, device) = replaying_memset_rounds(0);
    let shapes = super::graph_log::CACHED_GRAPHS + 4;
    for words in 1..=shapes {
        memset_round(stream, device, words, 1);
        memset_round(stream, device, words, 2);
    }
    assert_eq!(stats().instantiated, shapes as u64);
    let live = || inspect(|_, s| s.runtime().backend().stats().graphs);
    assert_eq!(live(), super::graph_log::CACHED_GRAPHS);
    mode(false); // releases the log as shutdown does
    assert_eq!(live(), 0, "its graphs are destroyed");
    mgpuMemFree(device, stream);
    mgpuStreamDestroy(stream);
    shared::shutdown().unwrap();
}

/// A launch whose parameter sizes are known is deferred with its values copied at the call
/// and replayed as a launch node. On the host backend (which loads no module image and refuses
/// packed launches) a library kernel stands under a function handle with its sizes noted.
#[test]
fn launches_of_known_parameter_sizes_are_replayed_as_launch_nodes() {
    let _serial = process_test_lock();
    let (stream, device) = replaying_memset_rounds(0);
    let function = shared::with_session(|session| match session {
        shared::AnySession::Host(s) => {
            let mut handles = HandleMap::new(HandleKind::Function, s.generation());
            let handle = handles.insert(()).unwrap();
            let kernel = s.runtime().kernel(DeviceId(0), "fill_u32").unwrap();
            let mut objects = s.mlir.lock();
            objects.kernels.insert((handle, 0), kernel);
            set_params(&mut objects, handle, &[8, 4, 8]); // fill_u32(dst, value, count)
            Ok(handle)
        }
        _ => panic!("the tests open the host backend"),
    })
    .unwrap();
    let launches = || calls_of(CallKind::Launch);
    for round in 1..5u32 {
        let before = launches();
        let mut out = [0u32; WORDS];
        let (mut dst, mut value, mut count) = (device as u64, round, WORDS as u64 / 2);
        let mut params: [*mut c_void; 3] = [
            (&raw mut dst).cast(),
            (&raw mut value).cast(),
            (&raw mut count).cast(),
        ];
        mgpuMemset32(device, 0, WORDS as u64, stream);
        // SAFETY: one pointer per parameter of fill_u32, each to a value of its type; the
        // words it writes lie in `device`, which outlives the launch.
        unsafe {
            mgpuLaunchKernel(
                function as *mut c_void,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                NULL.cast(),
            )
        };
        value = 99; // after the call: the launch took its value then
        mgpuMemcpy(out.as_mut_ptr().cast(), device, BYTES, stream);
        mgpuStreamSynchronize(stream);
        if round == 1 {
            // Issued call by call, through the program's parameter array again: the host
            // backend refuses packed launches (as without the mode), reported by the
            // synchronisation.
            assert!(last_error().contains("host"), "{}", last_error());
            continue;
        }
        let (set, kept) = out.split_at(WORDS / 2);
        assert!(
            set.iter().all(|&w| w == round),
            "round {round}: {out:?} ({value})"
        );
        assert!(kept.iter().all(|&w| w == 0), "round {round}: {out:?}");
        assert_eq!(
            launches(),
            before,
            "round {round}: a replay launches no kernel"
        );
    }
    let seen = stats();
    assert_eq!(
        (seen.issued, seen.instantiated, seen.replays),
        (1, 1, 3),
        "{seen:?}"
    );
    assert!(
        seen.updates >= 2,
        "the launch's value was updated in place: {seen:?}"
    );
    mgpuMemFree(device, stream);
    mgpuStreamDestroy(stream);
    shuts_down_with_failed_operations(1); // the refused packed launch of round 1
}

/// One call of a random sequence; buffers and host slots are indices, and the runner orders
/// every access after the last one to the same memory (through an event when the streams
/// differ), so no sequence races and both modes must give the same bytes.
#[derive(Clone, Debug)]
enum Step {
    Fill {
        stream: usize,
        buffer: usize,
        value: u32,
        words: u64,
        wide: bool,
    },
    Upload {
        stream: usize,
        buffer: usize,
        value: u32,
    },
    Download {
        stream: usize,
        buffer: usize,
        slot: usize,
    },
    DeviceCopy {
        stream: usize,
        dst: usize,
        src: usize,
    },
    Sync {
        stream: usize,
    },
    /// A scratch allocation on the stream, filled, copied into the buffer and freed there.
    Scratch {
        stream: usize,
        buffer: usize,
        value: u32,
    },
}

const STREAMS: usize = 3;
const BUFFERS: usize = 3;
const SLOTS: usize = 2;

fn step() -> impl Strategy<Value = Step> {
    let s = 0..STREAMS;
    let b = 0..BUFFERS;
    prop_oneof![
        (
            s.clone(),
            b.clone(),
            any::<u32>(),
            1..=WORDS as u64,
            any::<bool>()
        )
            .prop_map(|(stream, buffer, value, words, wide)| Step::Fill {
                stream,
                buffer,
                value,
                words,
                wide
            }),
        (s.clone(), b.clone(), any::<u32>()).prop_map(|(stream, buffer, value)| Step::Upload {
            stream,
            buffer,
            value
        }),
        (s.clone(), b.clone(), 0..SLOTS).prop_map(|(stream, buffer, slot)| Step::Download {
            stream,
            buffer,
            slot
        }),
        (s.clone(), b.clone(), b.clone()).prop_map(|(stream, dst, src)| Step::DeviceCopy {
            stream,
            dst,
            src
        }),
        (s.clone(), b, any::<u32>()).prop_map(|(stream, buffer, value)| Step::Scratch {
            stream,
            buffer,
            value
        }),
        s.prop_map(|stream| Step::Sync { stream }),
    ]
}

/// Runs `steps` three times over (with the same handles' kinds of work each time: repeats) in
/// a fresh session with the mode `on`; returns every host slot and buffer after each round.
fn run(steps: &[Step], on: bool) -> (Vec<Vec<u32>>, GraphStats) {
    open_host();
    mode(on);
    let streams: Vec<_> = (0..STREAMS).map(|_| mgpuStreamCreate()).collect();
    let buffers: Vec<_> = (0..BUFFERS)
        .map(|_| mgpuMemAlloc(BYTES, NULL, false))
        .collect();
    let mut slots = vec![[0u32; WORDS]; SLOTS];
    let mut seen = Vec::new();
    for round in 0..3u32 {
        let mut sources: Vec<Vec<u32>> = Vec::new();
        // The stream that last touched each buffer, then each slot.
        let mut last: Vec<Option<usize>> = vec![None; BUFFERS + SLOTS];
        let order = |stream: usize, memory: &[usize], last: &mut Vec<Option<usize>>| {
            for &m in memory {
                if let Some(previous) = last[m].filter(|&p| p != stream) {
                    let event = mgpuEventCreate();
                    mgpuEventRecord(event, streams[previous]);
                    mgpuStreamWaitEvent(streams[stream], event);
                    mgpuEventDestroy(event);
                }
                last[m] = Some(stream);
            }
        };
        for step in steps {
            match *step {
                Step::Fill {
                    stream,
                    buffer,
                    value,
                    words,
                    wide,
                } => {
                    order(stream, &[buffer], &mut last);
                    let value = value ^ round;
                    if wide {
                        mgpuMemset32(buffers[buffer], value, words, streams[stream]);
                    } else {
                        mgpuMemset16(buffers[buffer], value as u16, words, streams[stream]);
                    }
                }
                Step::Upload {
                    stream,
                    buffer,
                    value,
                } => {
                    order(stream, &[buffer], &mut last);
                    // Kept as it is until the round's end: without the mode the host backend
                    // reads a source when the copy runs.
                    sources.push(vec![value ^ round; WORDS]);
                    let source = sources.last_mut().map_or(NULL, |s| s.as_mut_ptr().cast());
                    mgpuMemcpy(buffers[buffer], source, BYTES, streams[stream]);
                }
                Step::Download {
                    stream,
                    buffer,
                    slot,
                } => {
                    order(stream, &[buffer, BUFFERS + slot], &mut last);
                    mgpuMemcpy(
                        slots[slot].as_mut_ptr().cast(),
                        buffers[buffer],
                        BYTES,
                        streams[stream],
                    );
                }
                Step::DeviceCopy { stream, dst, src } if dst != src => {
                    order(stream, &[dst, src], &mut last);
                    mgpuMemcpy(buffers[dst], buffers[src], BYTES, streams[stream]);
                }
                Step::DeviceCopy { .. } => {}
                Step::Sync { stream } => mgpuStreamSynchronize(streams[stream]),
                Step::Scratch {
                    stream,
                    buffer,
                    value,
                } => {
                    order(stream, &[buffer], &mut last);
                    let scratch = mgpuMemAlloc(BYTES, streams[stream], false);
                    mgpuMemset32(scratch, value ^ round, WORDS as u64, streams[stream]);
                    mgpuMemcpy(buffers[buffer], scratch, BYTES, streams[stream]);
                    mgpuMemFree(scratch, streams[stream]);
                }
            }
        }
        for &stream in &streams {
            mgpuStreamSynchronize(stream);
        }
        seen.extend(slots.iter().map(|slot| slot.to_vec()));
        for &buffer in &buffers {
            let mut out = vec![0u32; WORDS];
            mgpuMemcpy(out.as_mut_ptr().cast(), buffer, BYTES, NULL);
            seen.push(out);
        }
    }
    let counts = stats();
    for buffer in buffers {
        mgpuMemFree(buffer, NULL);
    }
    for stream in streams {
        mgpuStreamDestroy(stream);
    }
    let report = shared::shutdown().unwrap();
    assert_eq!(report.shutdown.program.unwaited, vec![]);
    (seen, counts)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random sequences of memsets, copies in every direction, event edges, allocations and
    /// frees on streams and synchronisations give the same bytes with the mode off and on.
    #[test]
    fn the_mode_changes_no_result(steps in proptest::collection::vec(step(), 1..14)) {
        let _serial = process_test_lock();
        let (off, _) = run(&steps, false);
        let (on, counts) = run(&steps, true);
        prop_assert_eq!(off, on, "{:?}", counts);
        // Nothing the sequences do makes a graph fail (a fallback is never needed here).
        prop_assert_eq!(counts.failures, 0, "{:?}", counts);
    }
}

/// With a trace asked for, the program's own calls are noted where they are made in both
/// modes (the same number of calls, the same verdict), and the backend's trace of replays is
/// clean.
#[test]
fn the_programs_trace_is_the_same_with_the_mode() {
    let _serial = process_test_lock();
    let mut seen = Vec::new();
    for on in [false, true] {
        let path =
            std::env::temp_dir().join(format!("mlir-graphs-{}-{on}.txt", std::process::id()));
        shared::open(shared::OpenOptions {
            backend: shared::BackendChoice::Host,
            trace: Some(path.clone()),
        })
        .unwrap();
        mgpuSetDefaultDevice(0);
        mode(on);
        for _ in 0..3 {
            let mut out = [0u32; WORDS];
            forkjoin_iteration(&[1; WORDS], &mut out);
        }
        let report = shared::shutdown().unwrap();
        assert_eq!(
            report.trace.unwrap().defects,
            Vec::<String>::new(),
            "mode {on}"
        );
        let program = path.with_extension("txt.mlir");
        let text = std::fs::read_to_string(&program).unwrap();
        let parsed = gpu_runtime::token::parse_trace(&text).unwrap();
        seen.push((text.lines().count(), parsed.check().len()));
        for file in [path, program] {
            let _ = std::fs::remove_file(file);
        }
    }
    assert_eq!(
        seen[0], seen[1],
        "(calls, defects) without and with the mode"
    );
}

/// With the mode off, each call it would defer or that would end its sequence locks the
/// session's objects once, for its own work: the mode is read without the lock.
#[test]
fn with_the_mode_off_each_call_locks_the_objects_once() {
    let _serial = process_test_lock();
    open_host();
    mode(false);
    let stream = mgpuStreamCreate();
    let event = mgpuEventCreate();
    let device = mgpuMemAlloc(BYTES, stream, false);
    let scratch = mgpuMemAlloc(BYTES, stream, false);
    let mut host = [0u32; WORDS];
    let h: *mut c_void = host.as_mut_ptr().cast();
    let locks = |call: &str, run: &dyn Fn()| {
        let before = super::objects::locks_taken();
        run();
        assert_eq!(super::objects::locks_taken() - before, 1, "{call}");
    };
    locks("mgpuMemset16", &|| mgpuMemset16(device, 5, 2, stream));
    locks("mgpuMemset32", &|| {
        mgpuMemset32(device, 7, WORDS as u64, stream)
    });
    locks("mgpuMemcpy", &|| mgpuMemcpy(h, device, BYTES, stream));
    locks("mgpuEventRecord", &|| mgpuEventRecord(event, stream));
    locks("mgpuStreamWaitEvent", &|| {
        mgpuStreamWaitEvent(stream, event)
    });
    locks("mgpuLaunchKernel (no such function)", &|| {
        // SAFETY: refused before anything runs: no function.
        unsafe { mgpuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, stream, NULL.cast(), NULL.cast()) }
    });
    locks("mgpuMemFree", &|| mgpuMemFree(scratch, stream));
    locks("mgpuEventSynchronize", &|| mgpuEventSynchronize(event));
    locks("mgpuStreamSynchronize", &|| mgpuStreamSynchronize(stream));
    locks("mgpuEventDestroy", &|| mgpuEventDestroy(event));
    assert!(host.iter().all(|&word| word == 7), "{host:?}");
    mgpuMemFree(device, stream);
    mgpuStreamSynchronize(stream);
    mgpuStreamDestroy(stream);
    let report = shared::shutdown().unwrap();
    assert_eq!(report.shutdown.program.unwaited, vec![]);
}
