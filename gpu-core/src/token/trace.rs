//! Stream/event traces: the operations the checker reads, their plain text format (one call
//! per line), and the translation of a plan into a trace.
//!
//! Text format (`#` starts a comment; names are any text without spaces or `#`, streams and
//! events have separate names; devices are decimal numbers):
//! ```text
//! stream_create NAME DEVICE      event_create NAME DEVICE
//! stream_destroy NAME            event_destroy NAME
//! launch STREAM [DEVICE]         event_record EVENT STREAM
//! stream_wait_event STREAM EVENT
//! stream_synchronize NAME        event_synchronize NAME
//! stream_query NAME              event_query NAME
//! ```
//! `launch` is any operation enqueued on a stream; its optional device is the device that was
//! current when it was issued.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::{self, Write};

use hashbrown::HashMap;

use super::checker::{Defect, TraceObject, check};
use super::planner::PlanStep;
use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, StreamId};

/// One stream/event call of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceOp {
    /// A stream was created on `device`.
    CreateStream {
        /// The stream.
        stream: StreamId,
        /// Its device.
        device: DeviceId,
    },
    /// A stream was destroyed.
    DestroyStream {
        /// The stream.
        stream: StreamId,
    },
    /// An event was created on `device`.
    CreateEvent {
        /// The event.
        event: EventId,
        /// Its device.
        device: DeviceId,
    },
    /// An event was destroyed.
    DestroyEvent {
        /// The event.
        event: EventId,
    },
    /// `event` was recorded on `stream`.
    Record {
        /// The event.
        event: EventId,
        /// The stream.
        stream: StreamId,
    },
    /// `stream` was made to wait for `event`.
    Wait {
        /// The stream.
        stream: StreamId,
        /// The event.
        event: EventId,
    },
    /// The host waited for all work on a stream.
    SynchronizeStream {
        /// The stream.
        stream: StreamId,
    },
    /// The host waited for an event.
    SynchronizeEvent {
        /// The event.
        event: EventId,
    },
    /// The host asked whether a stream is idle.
    QueryStream {
        /// The stream.
        stream: StreamId,
    },
    /// The host asked whether an event has completed.
    QueryEvent {
        /// The event.
        event: EventId,
    },
    /// An operation was enqueued on `stream`, with `device` current if known.
    Launch {
        /// The stream.
        stream: StreamId,
        /// The device current at the call, if the trace says.
        device: Option<DeviceId>,
    },
}

/// Which calls a plan's trace shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceView {
    /// Pool acquire and release as create and destroy: checks that the plan never uses a
    /// stream or event it has given back to its pool, nor gives one back twice.
    Logical,
    /// Only driver calls: a fresh acquire creates, a pool drain destroys, pooled acquire and
    /// release are not calls; checks that every driver object is destroyed exactly once.
    Driver,
}

/// The trace of a plan's steps, as seen in `view`.
pub fn plan_trace(steps: &[PlanStep], view: TraceView) -> Vec<TraceOp> {
    let logical = view == TraceView::Logical;
    steps
        .iter()
        .filter_map(|step| match *step {
            PlanStep::AcquireStream {
                device,
                stream,
                fresh,
            } => (logical || fresh).then_some(TraceOp::CreateStream { stream, device }),
            PlanStep::ReleaseStream { stream, .. } => {
                logical.then_some(TraceOp::DestroyStream { stream })
            }
            PlanStep::DestroyStream { stream, .. } => {
                (!logical).then_some(TraceOp::DestroyStream { stream })
            }
            PlanStep::AcquireEvent {
                device,
                event,
                fresh,
            } => (logical || fresh).then_some(TraceOp::CreateEvent { event, device }),
            PlanStep::ReleaseEvent { event, .. } => {
                logical.then_some(TraceOp::DestroyEvent { event })
            }
            PlanStep::DestroyEvent { event, .. } => {
                (!logical).then_some(TraceOp::DestroyEvent { event })
            }
            PlanStep::Record { event, stream } => Some(TraceOp::Record { event, stream }),
            PlanStep::Wait { stream, event } => Some(TraceOp::Wait { stream, event }),
            PlanStep::Run { device, stream, .. } => Some(TraceOp::Launch {
                stream,
                device: Some(device),
            }),
            PlanStep::SynchronizeStream { stream } => Some(TraceOp::SynchronizeStream { stream }),
            PlanStep::SynchronizeEvent { event } => Some(TraceOp::SynchronizeEvent { event }),
        })
        .collect()
}

/// A trace read from text: the operations, the line each came from, and the names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedTrace {
    /// The operations, with streams and events numbered in order of first mention.
    pub ops: Vec<TraceOp>,
    /// For each operation, its line number (from 1).
    pub lines: Vec<usize>,
    /// Stream names, indexed by [`StreamId`].
    pub stream_names: Vec<String>,
    /// Event names, indexed by [`EventId`].
    pub event_names: Vec<String>,
}

impl ParsedTrace {
    /// Checks the trace; see [`check`].
    pub fn check(&self) -> Vec<Defect> {
        check(&self.ops)
    }

    /// A defect described with the trace's own line numbers and names.
    pub fn describe<'a>(&'a self, defect: &'a Defect) -> impl fmt::Display + 'a {
        DescribedDefect {
            trace: self,
            defect,
        }
    }

    fn line_of(&self, position: usize) -> usize {
        self.lines.get(position).copied().unwrap_or(0)
    }
}

struct DescribedDefect<'a> {
    trace: &'a ParsedTrace,
    defect: &'a Defect,
}

impl fmt::Display for DescribedDefect<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let trace = self.trace;
        write!(f, "line {}: ", trace.line_of(self.defect.position))?;
        self.defect.kind.describe(
            f,
            &mut |f, object| match object {
                TraceObject::Stream(s) => match trace.stream_names.get(s.index()) {
                    Some(name) => write!(f, "stream `{name}`"),
                    None => write!(f, "{s}"),
                },
                TraceObject::Event(e) => match trace.event_names.get(e.index()) {
                    Some(name) => write!(f, "event `{name}`"),
                    None => write!(f, "{e}"),
                },
            },
            &mut |f, position| write!(f, "line {}", trace.line_of(position)),
        )
    }
}

/// Names to dense ids, in order of first mention.
#[derive(Default)]
struct Names<'t> {
    ids: HashMap<&'t str, u32>,
    names: Vec<String>,
}

impl<'t> Names<'t> {
    fn id(&mut self, name: &'t str) -> u32 {
        let next = self.names.len() as u32;
        *self.ids.entry(name).or_insert_with(|| {
            self.names.push(name.to_string());
            next
        })
    }
}

/// Reads a trace in the text format (see the module documentation). Fails at the first line
/// that is not in the format, naming the line and what was expected.
pub fn parse_trace(text: &str) -> Result<ParsedTrace> {
    let mut streams = Names::default();
    let mut events = Names::default();
    let mut ops = Vec::new();
    let mut lines = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.split('#').next().unwrap_or("");
        let mut words = content.split_whitespace();
        let Some(call) = words.next() else {
            continue;
        };
        let mut fields = Fields {
            words,
            line,
            content,
        };
        let op = match call {
            "stream_create" => TraceOp::CreateStream {
                stream: StreamId(streams.id(fields.name("a stream name")?)),
                device: fields.device()?,
            },
            "stream_destroy" => TraceOp::DestroyStream {
                stream: StreamId(streams.id(fields.name("a stream name")?)),
            },
            "event_create" => TraceOp::CreateEvent {
                event: EventId(events.id(fields.name("an event name")?)),
                device: fields.device()?,
            },
            "event_destroy" => TraceOp::DestroyEvent {
                event: EventId(events.id(fields.name("an event name")?)),
            },
            "event_record" => TraceOp::Record {
                event: EventId(events.id(fields.name("an event name")?)),
                stream: StreamId(streams.id(fields.name("a stream name")?)),
            },
            "stream_wait_event" => TraceOp::Wait {
                stream: StreamId(streams.id(fields.name("a stream name")?)),
                event: EventId(events.id(fields.name("an event name")?)),
            },
            "stream_synchronize" => TraceOp::SynchronizeStream {
                stream: StreamId(streams.id(fields.name("a stream name")?)),
            },
            "event_synchronize" => TraceOp::SynchronizeEvent {
                event: EventId(events.id(fields.name("an event name")?)),
            },
            "stream_query" => TraceOp::QueryStream {
                stream: StreamId(streams.id(fields.name("a stream name")?)),
            },
            "event_query" => TraceOp::QueryEvent {
                event: EventId(events.id(fields.name("an event name")?)),
            },
            "launch" => TraceOp::Launch {
                stream: StreamId(streams.id(fields.name("a stream name")?)),
                device: fields.optional_device()?,
            },
            _ => {
                return Err(Error::TraceSyntax {
                    line,
                    expected: "a call (stream_create, stream_destroy, event_create, \
                               event_destroy, event_record, stream_wait_event, \
                               stream_synchronize, event_synchronize, stream_query, \
                               event_query, launch)",
                    found: call.to_string(),
                });
            }
        };
        fields.end()?;
        ops.push(op);
        lines.push(line);
    }
    Ok(ParsedTrace {
        ops,
        lines,
        stream_names: streams.names,
        event_names: events.names,
    })
}

/// The rest of one line's words, after the call name.
struct Fields<'t> {
    words: core::str::SplitWhitespace<'t>,
    line: usize,
    content: &'t str,
}

impl<'t> Fields<'t> {
    fn error(&self, expected: &'static str) -> Error {
        Error::TraceSyntax {
            line: self.line,
            expected,
            found: self.content.trim().to_string(),
        }
    }

    fn name(&mut self, expected: &'static str) -> Result<&'t str> {
        self.words.next().ok_or_else(|| self.error(expected))
    }

    fn device(&mut self) -> Result<DeviceId> {
        self.optional_device()?
            .ok_or_else(|| self.error("a device number"))
    }

    fn optional_device(&mut self) -> Result<Option<DeviceId>> {
        match self.words.next() {
            None => Ok(None),
            Some(word) => word
                .parse::<u32>()
                .map(|n| Some(DeviceId(n)))
                .map_err(|_| self.error("a device number")),
        }
    }

    fn end(&mut self) -> Result<()> {
        match self.words.next() {
            None => Ok(()),
            Some(_) => Err(self.error("the end of the line")),
        }
    }
}

/// Writes operations in the text format, naming stream `n` `sN` and event `n` `eN`, so that
/// [`parse_trace`] reads back the same calls.
pub fn write_trace(ops: &[TraceOp]) -> String {
    let mut text = String::new();
    for op in ops {
        // Writing to a String cannot fail.
        let _ = match *op {
            TraceOp::CreateStream { stream, device } => {
                writeln!(text, "stream_create s{} {}", stream.0, device.0)
            }
            TraceOp::DestroyStream { stream } => writeln!(text, "stream_destroy s{}", stream.0),
            TraceOp::CreateEvent { event, device } => {
                writeln!(text, "event_create e{} {}", event.0, device.0)
            }
            TraceOp::DestroyEvent { event } => writeln!(text, "event_destroy e{}", event.0),
            TraceOp::Record { event, stream } => {
                writeln!(text, "event_record e{} s{}", event.0, stream.0)
            }
            TraceOp::Wait { stream, event } => {
                writeln!(text, "stream_wait_event s{} e{}", stream.0, event.0)
            }
            TraceOp::SynchronizeStream { stream } => {
                writeln!(text, "stream_synchronize s{}", stream.0)
            }
            TraceOp::SynchronizeEvent { event } => {
                writeln!(text, "event_synchronize e{}", event.0)
            }
            TraceOp::QueryStream { stream } => writeln!(text, "stream_query s{}", stream.0),
            TraceOp::QueryEvent { event } => writeln!(text, "event_query e{}", event.0),
            TraceOp::Launch {
                stream,
                device: Some(device),
            } => writeln!(text, "launch s{} {}", stream.0, device.0),
            TraceOp::Launch {
                stream,
                device: None,
            } => writeln!(text, "launch s{}", stream.0),
        };
    }
    text
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::*;
    use crate::token::{OpId, Planner};

    #[test]
    fn every_call_parses_with_names_per_kind() {
        let trace = parse_trace(
            "# a comment line\n\
             stream_create x 0\n\
             \n\
             event_create x 1   # an event may share a stream's name\n\
             launch x\n\
             launch x 2\n\
             event_record x x\n\
             stream_wait_event x x\n\
             stream_synchronize x\n\
             event_synchronize x\n\
             stream_query x\n\
             event_query x\n\
             event_destroy x\n\
             stream_destroy x\n",
        )
        .unwrap();
        let (s, e) = (StreamId(0), EventId(0));
        assert_eq!(
            trace.ops,
            vec![
                TraceOp::CreateStream {
                    stream: s,
                    device: DeviceId(0)
                },
                TraceOp::CreateEvent {
                    event: e,
                    device: DeviceId(1)
                },
                TraceOp::Launch {
                    stream: s,
                    device: None
                },
                TraceOp::Launch {
                    stream: s,
                    device: Some(DeviceId(2))
                },
                TraceOp::Record {
                    event: e,
                    stream: s
                },
                TraceOp::Wait {
                    stream: s,
                    event: e
                },
                TraceOp::SynchronizeStream { stream: s },
                TraceOp::SynchronizeEvent { event: e },
                TraceOp::QueryStream { stream: s },
                TraceOp::QueryEvent { event: e },
                TraceOp::DestroyEvent { event: e },
                TraceOp::DestroyStream { stream: s },
            ]
        );
        assert_eq!(trace.lines, vec![2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        assert_eq!(trace.stream_names, vec!["x".to_string()]);
        assert_eq!(trace.event_names, vec!["x".to_string()]);
    }

    #[test]
    fn malformed_lines_name_the_line_and_what_was_expected() {
        let cases = [
            ("stream_create s 0\nfrobnicate s\n", 2, "a call"),
            ("stream_create\n", 1, "a stream name"),
            ("stream_create s zero\n", 1, "a device number"),
            ("stream_create s\n", 1, "a device number"),
            ("event_record e\n", 1, "a stream name"),
            ("launch s 0 extra\n", 1, "the end of the line"),
            ("launch s -1\n", 1, "a device number"),
        ];
        for (text, line, expected) in cases {
            match parse_trace(text) {
                Err(Error::TraceSyntax {
                    line: l,
                    expected: e,
                    ..
                }) => {
                    assert_eq!(l, line, "{text}");
                    assert!(e.starts_with(expected), "{text}: {e}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn written_traces_read_back_as_the_same_calls() {
        let mut planner = Planner::new(2);
        let a = planner.run(OpId(0), DeviceId(0), &mut Vec::new()).unwrap();
        let b = planner.run(OpId(1), DeviceId(1), &mut vec![a]).unwrap();
        planner.wait(b).unwrap();
        planner.end_program();
        planner.drain_pools();
        for view in [TraceView::Logical, TraceView::Driver] {
            let ops = plan_trace(planner.steps(), view);
            let text = write_trace(&ops);
            let parsed = parse_trace(&text).unwrap();
            // The planner numbers streams and events in order of first use, as the parser does.
            assert_eq!(parsed.ops, ops, "{text}");
            assert_eq!(write_trace(&parsed.ops), text);
        }
    }

    #[test]
    fn the_driver_view_shows_only_driver_calls() {
        let mut planner = Planner::new(1);
        for op in 0..2 {
            let t = planner.run(OpId(op), DeviceId(0), &mut Vec::new()).unwrap();
            planner.wait(t).unwrap();
        }
        planner.drain_pools();
        let creates = |view| {
            plan_trace(planner.steps(), view)
                .iter()
                .filter(|op| matches!(op, TraceOp::CreateStream { .. }))
                .count()
        };
        assert_eq!(creates(TraceView::Logical), 2);
        assert_eq!(creates(TraceView::Driver), 1);
        assert_eq!(
            check(&plan_trace(planner.steps(), TraceView::Driver)),
            vec![]
        );
        assert_eq!(
            check(&plan_trace(planner.steps(), TraceView::Logical)),
            vec![]
        );
    }
}
