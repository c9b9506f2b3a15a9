//! The trace parser and checkers on fuzzer input: text that may be anything (parse errors are
//! fine, panics are not; the streaming checker, fed in pieces, must report exactly what the
//! in-memory one reports, races included, and fail at the same line), and call sequences over
//! a few streams, events, devices and address ranges (footprints, allocations, blocks), which
//! must read back from their text form as the same calls with the same defects and races.
#![no_main]

use arbitrary::Arbitrary;
use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::token::{
    AccessMode, AddressRange, AllocatorId, CallKind, Checker, DefectKind, Finding, SiteId,
    StreamKind, StreamingChecker, TraceOp, check, check_races, parse_trace, write_trace,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Call {
    CreateStream(u8, u8),
    DestroyStream(u8),
    CreateEvent(u8, u8),
    DestroyEvent(u8),
    Record(u8, u8),
    Wait(u8, u8),
    SynchronizeStream(u8),
    SynchronizeEvent(u8),
    QueryStream(u8),
    QueryEvent(u8),
    Launch(u8, Option<u8>),
    PeerCopy(u8, bool),
    DefaultStream(u8, u8),
    Exit,
    /// Stream, call kind, and (mode, start, length, site) per range.
    Footprint(u8, u8, Vec<(u8, u8, u8, Option<u8>)>),
    Kind(u8, u8),
    SynchronizeDevice(u8),
    Alloc(u8, u8, Option<u8>),
    Free(u8, Option<u8>),
    BlockAlloc(u8, u8, u8, u8),
    BlockFree(u8, u8, u8),
    BlockUse(u8, u8, u8),
}

/// A byte range over a small address space, so that calls overlap.
fn range(start: u8, len: u8) -> AddressRange {
    AddressRange::new(u64::from(start % 16) * 16, u64::from(len % 64))
}

impl Call {
    /// The calls' operations, a footprint as its stream operation and one access per range
    /// (of one kind and one site, as a line holds them).
    fn push_ops(&self, ops: &mut Vec<TraceOp>) {
        let s = |n: u8| StreamId(u32::from(n % 8));
        let site = |n: Option<u8>| n.map(|n| SiteId(u32::from(n % 4)));
        let allocator = |n: u8| AllocatorId(u32::from(n % 2));
        let op = match *self {
            Call::Footprint(stream, call, ref ranges) => {
                let call =
                    [CallKind::Launch, CallKind::Copy, CallKind::Fill][usize::from(call % 3)];
                ops.push(TraceOp::Launch {
                    stream: s(stream),
                    device: None,
                });
                let line_site = ranges.first().and_then(|r| site(r.3));
                for &(mode, start, len, _) in ranges {
                    let mode = [AccessMode::Read, AccessMode::Write, AccessMode::ReadWrite]
                        [usize::from(mode % 3)];
                    ops.push(TraceOp::Access {
                        stream: s(stream),
                        call,
                        range: range(start, len),
                        mode,
                        site: line_site,
                    });
                }
                return;
            }
            Call::Kind(stream, kind) => TraceOp::SetStreamKind {
                stream: s(stream),
                kind: [
                    StreamKind::Blocking,
                    StreamKind::NonBlocking,
                    StreamKind::Legacy,
                    StreamKind::PerThread,
                ][usize::from(kind % 4)],
            },
            Call::SynchronizeDevice(device) => TraceOp::SynchronizeDevice {
                device: DeviceId(u32::from(device % 3)),
            },
            Call::Alloc(start, len, stream) => TraceOp::Alloc {
                range: range(start, len),
                stream: stream.map(s),
                site: None,
            },
            Call::Free(start, stream) => TraceOp::Free {
                address: range(start, 0).start,
                stream: stream.map(s),
                site: None,
            },
            Call::BlockAlloc(a, start, len, stream) => TraceOp::BlockAlloc {
                allocator: allocator(a),
                range: range(start, len),
                stream: s(stream),
                site: None,
            },
            Call::BlockFree(a, start, stream) => TraceOp::BlockFree {
                allocator: allocator(a),
                address: range(start, 0).start,
                stream: s(stream),
                site: None,
            },
            Call::BlockUse(a, start, stream) => TraceOp::BlockUse {
                allocator: allocator(a),
                address: range(start, 0).start,
                stream: s(stream),
                site: None,
            },
            _ => self.op(),
        };
        ops.push(op);
    }

    fn op(&self) -> TraceOp {
        let s = |n: u8| StreamId(u32::from(n % 8));
        let e = |n: u8| EventId(u32::from(n % 8));
        let d = |n: u8| DeviceId(u32::from(n % 3));
        match *self {
            Call::CreateStream(x, dev) => TraceOp::CreateStream {
                stream: s(x),
                device: d(dev),
            },
            Call::DestroyStream(x) => TraceOp::DestroyStream { stream: s(x) },
            Call::CreateEvent(x, dev) => TraceOp::CreateEvent {
                event: e(x),
                device: d(dev),
            },
            Call::DestroyEvent(x) => TraceOp::DestroyEvent { event: e(x) },
            Call::Record(x, y) => TraceOp::Record {
                event: e(x),
                stream: s(y),
            },
            Call::Wait(x, y) => TraceOp::Wait {
                stream: s(x),
                event: e(y),
            },
            Call::SynchronizeStream(x) => TraceOp::SynchronizeStream { stream: s(x) },
            Call::SynchronizeEvent(x) => TraceOp::SynchronizeEvent { event: e(x) },
            Call::QueryStream(x) => TraceOp::QueryStream { stream: s(x) },
            Call::QueryEvent(x) => TraceOp::QueryEvent { event: e(x) },
            Call::Launch(x, dev) => TraceOp::Launch {
                stream: s(x),
                device: dev.map(d),
            },
            Call::PeerCopy(x, direct) => TraceOp::PeerCopy {
                stream: s(x),
                direct,
            },
            Call::DefaultStream(x, dev) => TraceOp::DefaultStream {
                stream: s(x),
                device: d(dev),
            },
            Call::Exit => TraceOp::Exit,
            // The memory calls are `push_ops`'s.
            _ => TraceOp::Exit,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Input<'a> {
    /// Text, checked in memory and streamed in pieces cut after every `piece`-th line break,
    /// remembering `remembered` destroys of each kind.
    Text {
        text: &'a [u8],
        piece: u8,
        remembered: u8,
    },
    Calls(Vec<Call>),
}

/// The streaming checker's findings on `text`, fed in pieces of `piece` lines (at least 1),
/// and the error it stopped at, if any.
fn streamed(
    text: &[u8],
    piece: usize,
    remembered: usize,
) -> (Vec<String>, Option<gpu_core::error::Error>) {
    let mut checker = StreamingChecker::remembering(remembered);
    let mut printed = Vec::new();
    let mut pieces = text.split_inclusive(|&b| b == b'\n').peekable();
    while pieces.peek().is_some() {
        let piece: Vec<u8> = pieces.by_ref().take(piece).flatten().copied().collect();
        let mut print = |report: gpu_core::token::Report<'_>| {
            if let Finding::Defect(_) | Finding::Race(_) = report.finding() {
                printed.push(report.to_string());
            }
        };
        if let Err(e) = checker.check_text(&piece, &mut print) {
            return (printed, Some(e));
        }
        assert_eq!(
            checker.names_held(),
            checker.tracked(),
            "a name for each object tracked"
        );
    }
    checker.finish(&mut |report| {
        if let Finding::Defect(_) | Finding::Race(_) = report.finding() {
            printed.push(report.to_string());
        }
    });
    (printed, None)
}

fuzz_target!(|input: Input| {
    match input {
        Input::Text {
            text,
            piece,
            remembered,
        } => {
            let remembered = usize::from(remembered % 8);
            let (printed, error) = streamed(text, usize::from(piece % 4) + 1, remembered);
            let Ok(text) = std::str::from_utf8(text) else {
                return;
            };
            match parse_trace(text) {
                Ok(trace) => {
                    assert_eq!(trace.ops.len(), trace.lines.len());
                    assert_eq!(error, None);
                    // The in-memory checker, with the same memory of destroys.
                    let mut checker = Checker::remembering(remembered);
                    let mut expected = Vec::new();
                    let mut keep = |finding| {
                        if let Finding::Defect(_) | Finding::Race(_) = finding {
                            expected.push(trace.describe_finding(finding).to_string());
                        }
                    };
                    for (position, op) in trace.ops.iter().enumerate() {
                        checker.step(position, op, &mut keep);
                    }
                    checker.finish(&mut keep);
                    assert_eq!(printed, expected);
                    let again =
                        parse_trace(&write_trace(&trace.ops)).expect("written traces parse");
                    assert_eq!(again.ops, trace.ops);
                }
                Err(e) => assert_eq!(error, Some(e)),
            }
        }
        Input::Calls(calls) => {
            let mut ops: Vec<TraceOp> = Vec::new();
            for call in &calls {
                call.push_ops(&mut ops);
            }
            let defects = check(&ops);
            for defect in &defects {
                assert!(defect.position < ops.len());
                let _ = defect.to_string();
            }
            // Calls after an exit are reported one by one; the text format refuses them.
            let end = ops
                .iter()
                .position(|op| *op == TraceOp::Exit)
                .map_or(ops.len(), |exit| exit + 1);
            let after_exit = defects
                .iter()
                .filter(|d| d.kind == DefectKind::CallAfterExit)
                .count();
            assert_eq!(after_exit, ops.len() - end);
            let defects: Vec<_> = defects
                .into_iter()
                .filter(|d| d.kind != DefectKind::CallAfterExit)
                .collect();
            let ops = &ops[..end];
            // Ids renumber in order of first mention, so compare defect positions and counts.
            let parsed = parse_trace(&write_trace(ops)).expect("written traces parse");
            let reread = parsed.check();
            let positions =
                |d: &[gpu_core::token::Defect]| d.iter().map(|d| d.position).collect::<Vec<_>>();
            assert_eq!(positions(&reread), positions(&defects));
            // The same races, at the same positions, from the text.
            let races = |ops: &[TraceOp]| {
                check_races(ops)
                    .into_iter()
                    .map(|r| (r.kind, r.earlier.position, r.later.position, r.range))
                    .collect::<Vec<_>>()
            };
            assert_eq!(races(&parsed.ops), races(ops));
        }
    }
});
