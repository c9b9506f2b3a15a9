//! The trace parser and checker on fuzzer input: text that may be anything (parse errors are
//! fine, panics are not), and call sequences over a few streams, events and devices, which
//! must read back from their text form as the same calls with the same defects.
#![no_main]

use arbitrary::Arbitrary;
use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::token::{TraceOp, check, parse_trace, write_trace};
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
}

impl Call {
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
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Input<'a> {
    Text(&'a str),
    Calls(Vec<Call>),
}

fuzz_target!(|input: Input| {
    match input {
        Input::Text(text) => {
            if let Ok(trace) = parse_trace(text) {
                assert_eq!(trace.ops.len(), trace.lines.len());
                for defect in trace.check() {
                    let _ = trace.describe(&defect).to_string();
                }
                let again = parse_trace(&write_trace(&trace.ops)).expect("written traces parse");
                assert_eq!(again.ops, trace.ops);
            }
        }
        Input::Calls(calls) => {
            let ops: Vec<TraceOp> = calls.iter().map(Call::op).collect();
            let defects = check(&ops);
            for defect in &defects {
                assert!(defect.position < ops.len());
                let _ = defect.to_string();
            }
            // Ids renumber in order of first mention, so compare defect positions and counts.
            let parsed = parse_trace(&write_trace(&ops)).expect("written traces parse");
            let reread = parsed.check();
            let positions =
                |d: &[gpu_core::token::Defect]| d.iter().map(|d| d.position).collect::<Vec<_>>();
            assert_eq!(positions(&reread), positions(&defects));
        }
    }
});
