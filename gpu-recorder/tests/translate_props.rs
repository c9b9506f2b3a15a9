//! Random call sequences through the translator (default streams, per-thread forms, failures,
//! captures, an early exit, memory calls with footprints, our allocator's blocks): the output
//! is always a trace the checker reads and checks, each default stream is declared once and
//! before its first use, and nothing but comments follows `exit`.

use std::collections::HashSet;

use gpu_core::token::parse_trace;
use gpu_recorder::{Call, Kind, Outcome, Translator};
use proptest::prelude::*;

const STREAMS: [u64; 5] = [0, 1, 2, 0x10, 0x11];
const EVENTS: [u64; 2] = [0x20, 0x21];
const ADDRESSES: [u64; 2] = [0x1000, 0x2000];

/// Memory calls: footprints, allocations, frees and our allocator's blocks.
fn memory_kind() -> impl Strategy<Value = Kind> {
    let stream = proptest::sample::select(&STREAMS[..]);
    let address = proptest::sample::select(&ADDRESSES[..]);
    let on = (stream.clone(), address.clone());
    prop_oneof![
        stream.clone().prop_map(|stream| Kind::Launch {
            stream,
            function: 0xf1
        }),
        on.clone().prop_map(|(stream, dst)| Kind::Copy {
            stream,
            dst,
            src: dst + 0x100,
            bytes: 64
        }),
        on.clone().prop_map(|(stream, dst)| Kind::Fill {
            stream,
            dst,
            bytes: 16
        }),
        on.clone().prop_map(|(stream, address)| Kind::AllocAsync {
            stream,
            address,
            bytes: 0x100
        }),
        on.clone()
            .prop_map(|(stream, address)| Kind::FreeAsync { stream, address }),
        address.clone().prop_map(|address| Kind::Alloc {
            address,
            bytes: 0x100
        }),
        address.clone().prop_map(|address| Kind::Free { address }),
        on.clone().prop_map(|(stream, address)| Kind::BlockAlloc {
            stream,
            address,
            bytes: 0x40
        }),
        on.clone()
            .prop_map(|(stream, address)| Kind::BlockFree { stream, address }),
        on.prop_map(|(stream, address)| Kind::BlockUse { stream, address }),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    let stream = proptest::sample::select(&STREAMS[..]);
    let event = proptest::sample::select(&EVENTS[..]);
    prop_oneof![
        stream.clone().prop_map(|stream| Kind::Work { stream }),
        (event.clone(), stream.clone())
            .prop_map(|(event, stream)| Kind::EventRecord { event, stream }),
        (stream.clone(), event.clone())
            .prop_map(|(stream, event)| Kind::StreamWaitEvent { stream, event }),
        stream
            .clone()
            .prop_map(|stream| Kind::StreamSynchronize { stream }),
        stream
            .clone()
            .prop_map(|stream| Kind::StreamQuery { stream }),
        event
            .clone()
            .prop_map(|event| Kind::EventSynchronize { event }),
        event.clone().prop_map(|event| Kind::EventQuery { event }),
        stream
            .clone()
            .prop_map(|stream| Kind::BeginCapture { stream }),
        stream
            .clone()
            .prop_map(|stream| Kind::EndCapture { stream }),
        Just(Kind::Note),
        memory_kind(),
    ]
}

fn function(kind: Kind, per_thread: bool) -> &'static str {
    match (kind, per_thread) {
        (Kind::Work { .. }, false) => "cuLaunchKernel",
        (Kind::Work { .. }, true) => "cuLaunchKernel_ptsz",
        (Kind::EventRecord { .. }, false) => "cuEventRecordWithFlags",
        (Kind::EventRecord { .. }, true) => "cuEventRecord_ptsz",
        (Kind::StreamWaitEvent { .. }, false) => "cuStreamWaitEvent",
        (Kind::StreamWaitEvent { .. }, true) => "cuStreamWaitEvent_ptsz",
        (Kind::StreamSynchronize { .. }, _) => "cuStreamSynchronize",
        (Kind::StreamQuery { .. }, _) => "cuStreamQuery",
        (Kind::EventSynchronize { .. }, _) => "cuEventSynchronize",
        (Kind::EventQuery { .. }, _) => "cuEventQuery",
        (Kind::BeginCapture { .. }, false) => "cuStreamBeginCapture_v2",
        (Kind::BeginCapture { .. }, true) => "cuStreamBeginCapture_v2_ptsz",
        (Kind::EndCapture { .. }, _) => "cuStreamEndCapture",
        (Kind::Launch { .. }, false) => "cuLaunchKernel",
        (Kind::Launch { .. }, true) => "cuLaunchKernelEx_ptsz",
        (Kind::Copy { .. }, false) => "cuMemcpyAsync",
        (Kind::Copy { .. }, true) => "cuMemcpyAsync_ptsz",
        (Kind::Fill { .. }, false) => "cuMemsetD8Async",
        (Kind::Fill { .. }, true) => "cuMemsetD8Async_ptsz",
        (Kind::AllocAsync { .. }, _) => "cuMemAllocAsync",
        (Kind::FreeAsync { .. }, _) => "cuMemFreeAsync",
        (Kind::Free { .. }, _) => "cuMemFree_v2",
        // The flag picks our runtime's stream-less buffers (its backends' note_buffer).
        (Kind::BlockAlloc { .. }, false) => "gpurt_block_alloc",
        (Kind::BlockAlloc { .. }, true) => "gpurt_region_block_alloc",
        (Kind::BlockFree { .. }, false) => "gpurt_block_free",
        (Kind::BlockFree { .. }, true) => "gpurt_region_block_free",
        (Kind::BlockUse { .. }, _) => "gpurt_block_use",
        _ => "cuMemAlloc_v2",
    }
}

fn calls() -> impl Strategy<Value = Vec<(Call, bool)>> {
    let call = (
        kind(),
        any::<bool>(),
        7u64..9,
        0u64..2,
        prop_oneof![Just(0u32), Just(1), Just(600)],
        any::<bool>(),
    )
        .prop_map(|(kind, per_thread, thread, context, code, exit_after)| {
            (
                Call {
                    function: function(kind, per_thread),
                    kind,
                    context: 0xc0 + context,
                    device: Some(context as u32),
                    thread,
                    outcome: Outcome::Returned(code),
                    // A launch's words: inside each address's allocation or block, and not.
                    args: match kind {
                        Kind::Launch { .. } => vec![0x1010, 0x2000, 7],
                        _ => Vec::new(),
                    },
                },
                exit_after,
            )
        });
    proptest::collection::vec(call, 0..60)
}

proptest! {
    // A failure prints its shrunk sequence instead of writing a file.
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn translated_traces_are_well_formed(calls in calls()) {
        // Streams and events created up front, so every named handle exists.
        let mut translator = Translator::new();
        let mut trace = String::new();
        for (handle, function) in [(0x10, "cuStreamCreate"), (0x11, "cuStreamCreate")] {
            translator.translate(&Call { function, kind: Kind::StreamCreate { stream: handle, flags: 0 }, context: 0xc0, device: Some(0), thread: 7, outcome: Outcome::Returned(0), args: Vec::new() }, &mut trace);
        }
        for event in EVENTS {
            translator.translate(&Call { function: "cuEventCreate", kind: Kind::EventCreate { event }, context: 0xc0, device: Some(0), thread: 7, outcome: Outcome::Returned(0), args: Vec::new() }, &mut trace);
        }
        let mut exited = false;
        for (call, exit_after) in &calls {
            translator.translate(call, &mut trace);
            if *exit_after && !exited && calls.len() % 7 == 0 {
                translator.exit(&mut trace);
                exited = true;
            }
        }
        translator.exit(&mut trace);

        let mut declared = HashSet::new();
        let mut after_exit = false;
        for line in trace.lines() {
            if line.starts_with('#') {
                continue;
            }
            prop_assert!(!after_exit, "a call after exit: {line}\n{trace}");
            if line == "exit" {
                after_exit = true;
                continue;
            }
            let code = line.split('#').next().unwrap_or("");
            let words: Vec<&str> = code.split_whitespace().collect();
            if words[0] == "stream_default" {
                prop_assert!(declared.insert(words[1].to_string()), "declared twice: {line}");
                continue;
            }
            for word in &words[1..] {
                if word.starts_with("legacy.") || word.starts_with("ptds.") {
                    prop_assert!(declared.contains(*word), "used before declared: {line}\n{trace}");
                }
            }
        }
        // Well-formed, and the checkers (lifetimes and races) take it whole.
        let parsed = parse_trace(&trace).map_err(|e| TestCaseError::fail(format!("{e}\n{trace}")))?;
        let _ = parsed.check();
    }
}
