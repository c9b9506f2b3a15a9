//! The translation of recorded driver calls into trace lines (`Translator`): names for the
//! default streams, what stream capture hides, failed calls and the end of the process.
//!
//! Pure: it sees only [`Call`]s, in the order the recorder serialised them, and writes text.
//! Rules (the README's "Check your own program" explains them to users):
//! - a stream or event is named by its handle (`0x7f..`); the null stream is the context's legacy
//!   default stream `legacy.CTX`, or with a per-thread function (`_ptsz`) the thread's
//!   `ptds.CTX.TID`; the handles `CU_STREAM_LEGACY` (1) and `CU_STREAM_PER_THREAD` (2) name them
//!   too. Each is declared with `stream_default` just before its first use;
//! - a call that failed did nothing: it is a comment. Destroys are written before they run (the
//!   handle may be reused as soon as they return) and a failure is noted after them;
//! - while a stream captures into a graph, calls on it (and on streams that joined the capture
//!   by waiting on an event recorded in it) are not executed: comments (`# captured: ...`);
//! - memory and context calls are comments; after [`Translator::exit`] every call is one.

use core::fmt::Write as _;
use std::collections::{HashMap, HashSet};

use crate::call::{Call, Kind, Outcome};

/// `CUDA_ERROR_NOT_READY`: what a query returns for pending work (not a failure).
const NOT_READY: u32 = 600;
/// `CU_STREAM_LEGACY`: the legacy default stream, whatever the function.
const STREAM_LEGACY: u64 = 1;
/// `CU_STREAM_PER_THREAD`: the calling thread's default stream, whatever the function.
const STREAM_PER_THREAD: u64 = 2;

/// A stream as the trace names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum StreamKey {
    /// A stream somebody created: its handle.
    Handle(u64),
    /// A context's legacy default stream.
    Legacy { context: u64 },
    /// A thread's per-thread default stream in a context.
    PerThread { context: u64, thread: u64 },
}

impl StreamKey {
    fn of(call: &Call, handle: u64) -> Self {
        match handle {
            0 if call.per_thread() => Self::per_thread(call),
            0 | STREAM_LEGACY => Self::Legacy {
                context: call.context,
            },
            STREAM_PER_THREAD => Self::per_thread(call),
            handle => Self::Handle(handle),
        }
    }

    fn per_thread(call: &Call) -> Self {
        Self::PerThread {
            context: call.context,
            thread: call.thread,
        }
    }

    fn is_default(self) -> bool {
        !matches!(self, Self::Handle(_))
    }
}

impl core::fmt::Display for StreamKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Handle(handle) => write!(f, "{handle:#x}"),
            Self::Legacy { context } => write!(f, "legacy.{context:#x}"),
            Self::PerThread { context, thread } => write!(f, "ptds.{context:#x}.{thread}"),
        }
    }
}

/// Turns calls into trace lines, one call at a time, keeping what the lines depend on: the
/// default streams declared so far, the streams capturing (each with the stream whose capture
/// it belongs to) and the events last recorded during a capture.
#[derive(Debug, Default)]
pub struct Translator {
    declared: HashSet<StreamKey>,
    capture_of: HashMap<StreamKey, StreamKey>,
    captured_events: HashMap<u64, StreamKey>,
    exited: bool,
}

impl Translator {
    /// A translator at the start of a process.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the lines for `call` to `out` (each ends with a newline).
    pub fn translate(&mut self, call: &Call, out: &mut String) {
        if self.exited {
            let _ = writeln!(out, "# after exit: {call}");
            return;
        }
        let code = match call.outcome {
            Outcome::Entered => None,
            Outcome::Returned(code) => Some(code),
        };
        match call.kind {
            Kind::StreamDestroy { stream } => {
                let key = StreamKey::of(call, stream);
                match code {
                    // A default stream cannot be reused: written once the driver accepted it.
                    None if key.is_default() => {}
                    Some(0) if !key.is_default() => {}
                    None | Some(0) => {
                        self.forget_capture(key);
                        self.declare(call, key, out);
                        line(call, format_args!("stream_destroy {key}"), out);
                    }
                    Some(code) => failed(call, code, !key.is_default(), out),
                }
            }
            Kind::EventDestroy { event } => match code {
                None => {
                    self.captured_events.remove(&event);
                    line(call, format_args!("event_destroy {event:#x}"), out);
                }
                Some(0) => {}
                Some(code) => failed(call, code, true, out),
            },
            // Anything else is recorded once it returned.
            _ => match code {
                None => {}
                Some(code) if code == 0 || (code == NOT_READY && is_query(call.kind)) => {
                    self.succeeded(call, out);
                }
                Some(code) => failed(call, code, false, out),
            },
        }
    }

    /// Appends `exit`: the process ends here; later calls become comments.
    pub fn exit(&mut self, out: &mut String) {
        if !self.exited {
            self.exited = true;
            out.push_str("exit\n");
        }
    }

    fn succeeded(&mut self, call: &Call, out: &mut String) {
        let device = call.device.unwrap_or(0);
        match call.kind {
            Kind::StreamCreate { stream } => {
                line(
                    call,
                    format_args!("stream_create {stream:#x} {device}"),
                    out,
                );
            }
            Kind::EventCreate { event } => {
                self.captured_events.remove(&event);
                line(call, format_args!("event_create {event:#x} {device}"), out);
            }
            Kind::EventRecord { event, stream } => {
                let key = StreamKey::of(call, stream);
                let text = format_args!("event_record {event:#x} {key}");
                if let Some(&origin) = self.capture_of.get(&key) {
                    self.captured_events.insert(event, origin);
                    captured(call, text, out);
                } else {
                    self.captured_events.remove(&event);
                    self.declare(call, key, out);
                    line(call, text, out);
                }
            }
            Kind::StreamWaitEvent { stream, event } => {
                let key = StreamKey::of(call, stream);
                let text = format_args!("stream_wait_event {key} {event:#x}");
                if self.capture_of.contains_key(&key) {
                    captured(call, text, out);
                } else if let Some(&origin) = self.captured_events.get(&event) {
                    // Waiting on an event recorded during a capture joins that capture.
                    self.capture_of.insert(key, origin);
                    let _ = writeln!(
                        out,
                        "# {key} joins the capture of {origin}: its calls are captured"
                    );
                    captured(call, text, out);
                } else {
                    self.declare(call, key, out);
                    line(call, text, out);
                }
            }
            Kind::StreamSynchronize { stream } => {
                self.on_stream(call, stream, "stream_synchronize", out);
            }
            Kind::StreamQuery { stream } => self.on_stream(call, stream, "stream_query", out),
            Kind::Work { stream } => self.on_stream(call, stream, "launch", out),
            Kind::EventSynchronize { event } => {
                self.on_event(call, event, "event_synchronize", out)
            }
            Kind::EventQuery { event } => self.on_event(call, event, "event_query", out),
            Kind::BeginCapture { stream } => {
                let key = StreamKey::of(call, stream);
                self.capture_of.insert(key, key);
                let _ = writeln!(
                    out,
                    "# {key} begins capturing into a graph: its calls are captured, not run \
                     ({} tid={})",
                    call.function, call.thread
                );
            }
            Kind::EndCapture { stream } => {
                let key = StreamKey::of(call, stream);
                let origin = self.capture_of.get(&key).copied().unwrap_or(key);
                self.capture_of.retain(|_, of| *of != origin);
                self.captured_events.retain(|_, of| *of != origin);
                let _ = writeln!(
                    out,
                    "# the capture of {origin} ends ({} tid={})",
                    call.function, call.thread
                );
            }
            Kind::StreamDestroy { .. } | Kind::EventDestroy { .. } => {}
            Kind::Note => {
                let _ = writeln!(out, "# {call}");
            }
        }
    }

    /// A call naming one stream: a line, or a comment while that stream captures.
    fn on_stream(&mut self, call: &Call, stream: u64, verb: &str, out: &mut String) {
        let key = StreamKey::of(call, stream);
        let text = format_args!("{verb} {key}");
        if self.capture_of.contains_key(&key) {
            captured(call, text, out);
        } else {
            self.declare(call, key, out);
            line(call, text, out);
        }
    }

    /// A host call naming one event: a line, or a comment if the event was last recorded
    /// during a capture (it was never recorded for real).
    fn on_event(&mut self, call: &Call, event: u64, verb: &str, out: &mut String) {
        let text = format_args!("{verb} {event:#x}");
        if self.captured_events.contains_key(&event) {
            captured(call, text, out);
        } else {
            line(call, text, out);
        }
    }

    /// Declares a default stream before its first use.
    fn declare(&mut self, call: &Call, key: StreamKey, out: &mut String) {
        if key.is_default() && self.declared.insert(key) {
            let device = call.device.unwrap_or(0);
            let _ = writeln!(out, "stream_default {key} {device}");
        }
    }

    /// A destroyed stream leaves any capture.
    fn forget_capture(&mut self, key: StreamKey) {
        self.capture_of.remove(&key);
    }
}

fn is_query(kind: Kind) -> bool {
    matches!(kind, Kind::StreamQuery { .. } | Kind::EventQuery { .. })
}

/// A trace line with the function and thread as a trailing comment.
fn line(call: &Call, text: core::fmt::Arguments<'_>, out: &mut String) {
    let _ = writeln!(out, "{text}  # {} tid={}", call.function, call.thread);
}

/// A call made while its stream captures: a comment.
fn captured(call: &Call, text: core::fmt::Arguments<'_>, out: &mut String) {
    let _ = writeln!(
        out,
        "# captured: {text}  ({} tid={})",
        call.function, call.thread
    );
}

/// A call that failed: a comment. `written_before` says its line was already written (a
/// destroy, recorded before it ran).
fn failed(call: &Call, code: u32, written_before: bool, out: &mut String) {
    let what = if written_before {
        "the call above failed"
    } else {
        "failed"
    };
    let _ = writeln!(out, "# {what} with CUresult {code}: {call}");
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: u64 = 0xc0;

    fn call(function: &'static str, kind: Kind, code: u32) -> Call {
        Call {
            function,
            kind,
            context: CTX,
            device: Some(1),
            thread: 7,
            outcome: Outcome::Returned(code),
        }
    }

    fn on_thread(mut call: Call, thread: u64) -> Call {
        call.thread = thread;
        call
    }

    fn entered(mut call: Call) -> Call {
        call.outcome = Outcome::Entered;
        call
    }

    /// The lines for `calls`, trailing comments cut, comment lines kept.
    fn translate(calls: &[Call]) -> Vec<String> {
        let mut translator = Translator::new();
        let mut out = String::new();
        for call in calls {
            translator.translate(call, &mut out);
        }
        out.lines()
            .map(|line| match line.split_once("  #") {
                Some((code, _)) if !line.starts_with('#') => code.to_string(),
                _ => line.to_string(),
            })
            .collect()
    }

    #[test]
    fn the_null_stream_is_the_legacy_default_stream_declared_once_before_its_first_use() {
        let lines = translate(&[
            call("cuLaunchKernel", Kind::Work { stream: 0 }, 0),
            call("cuMemcpyAsync", Kind::Work { stream: 1 }, 0),
            call(
                "cuStreamSynchronize",
                Kind::StreamSynchronize { stream: 0 },
                0,
            ),
        ]);
        assert_eq!(
            lines,
            [
                "stream_default legacy.0xc0 1",
                "launch legacy.0xc0",
                "launch legacy.0xc0",
                "stream_synchronize legacy.0xc0",
            ]
        );
    }

    #[test]
    fn per_thread_forms_and_the_per_thread_handle_name_each_threads_default_stream() {
        let lines = translate(&[
            call("cuLaunchKernel_ptsz", Kind::Work { stream: 0 }, 0),
            on_thread(call("cuLaunchKernel", Kind::Work { stream: 2 }, 0), 8),
            call("cuLaunchKernel", Kind::Work { stream: 2 }, 0),
            call("cuLaunchKernel_ptsz", Kind::Work { stream: 1 }, 0),
            call(
                "cuEventRecord_ptsz",
                Kind::EventRecord {
                    event: 0xe,
                    stream: 0,
                },
                0,
            ),
        ]);
        assert_eq!(
            lines,
            [
                "stream_default ptds.0xc0.7 1",
                "launch ptds.0xc0.7",
                "stream_default ptds.0xc0.8 1",
                "launch ptds.0xc0.8",
                "launch ptds.0xc0.7",
                "stream_default legacy.0xc0 1",
                "launch legacy.0xc0",
                "event_record 0xe ptds.0xc0.7",
            ]
        );
    }

    #[test]
    fn created_streams_and_events_are_named_by_handle_on_the_current_device() {
        let lines = translate(&[
            call("cuStreamCreate", Kind::StreamCreate { stream: 0x10 }, 0),
            call("cuEventCreate", Kind::EventCreate { event: 0x20 }, 0),
            call(
                "cuEventRecordWithFlags",
                Kind::EventRecord {
                    event: 0x20,
                    stream: 0x10,
                },
                0,
            ),
            call(
                "cuStreamWaitEvent",
                Kind::StreamWaitEvent {
                    stream: 0x10,
                    event: 0x20,
                },
                0,
            ),
            call("cuEventQuery", Kind::EventQuery { event: 0x20 }, 0),
            call(
                "cuEventSynchronize",
                Kind::EventSynchronize { event: 0x20 },
                0,
            ),
            call("cuStreamQuery", Kind::StreamQuery { stream: 0x10 }, 0),
        ]);
        assert_eq!(
            lines,
            [
                "stream_create 0x10 1",
                "event_create 0x20 1",
                "event_record 0x20 0x10",
                "stream_wait_event 0x10 0x20",
                "event_query 0x20",
                "event_synchronize 0x20",
                "stream_query 0x10",
            ]
        );
    }

    #[test]
    fn a_failed_call_is_a_comment_and_not_ready_is_a_failure_only_outside_queries() {
        let lines = translate(&[
            call("cuStreamCreate", Kind::StreamCreate { stream: 0 }, 2),
            call(
                "cuStreamQuery",
                Kind::StreamQuery { stream: 0x10 },
                NOT_READY,
            ),
            call("cuEventQuery", Kind::EventQuery { event: 0x20 }, NOT_READY),
            call(
                "cuStreamSynchronize",
                Kind::StreamSynchronize { stream: 0x10 },
                NOT_READY,
            ),
        ]);
        assert_eq!(
            lines,
            [
                "# failed with CUresult 2: cuStreamCreate ctx=0xc0 dev=1 tid=7 ret=2 stream=0x0",
                "stream_query 0x10",
                "event_query 0x20",
                "# failed with CUresult 600: cuStreamSynchronize ctx=0xc0 dev=1 tid=7 ret=600 \
                 stream=0x10",
            ]
        );
    }

    #[test]
    fn destroys_are_written_when_entered_and_a_failure_is_noted_after_them() {
        let destroy = call(
            "cuStreamDestroy_v2",
            Kind::StreamDestroy { stream: 0x10 },
            0,
        );
        let event_destroy = call("cuEventDestroy_v2", Kind::EventDestroy { event: 0x20 }, 0);
        let lines = translate(&[
            entered(destroy),
            destroy,
            entered(event_destroy),
            Call {
                outcome: Outcome::Returned(400),
                ..event_destroy
            },
        ]);
        assert_eq!(
            lines,
            [
                "stream_destroy 0x10",
                "event_destroy 0x20",
                "# the call above failed with CUresult 400: cuEventDestroy_v2 ctx=0xc0 dev=1 \
                 tid=7 ret=400 event=0x20",
            ]
        );
    }

    #[test]
    fn a_default_stream_destroy_is_written_only_once_the_driver_accepted_it() {
        let destroy = call("cuStreamDestroy_v2", Kind::StreamDestroy { stream: 0 }, 0);
        let refused = Call {
            outcome: Outcome::Returned(400),
            ..destroy
        };
        assert_eq!(
            translate(&[entered(destroy), refused]),
            [
                "# failed with CUresult 400: cuStreamDestroy_v2 ctx=0xc0 dev=1 tid=7 ret=400 \
              stream=0x0"
            ]
        );
        assert_eq!(
            translate(&[entered(destroy), destroy]),
            ["stream_default legacy.0xc0 1", "stream_destroy legacy.0xc0"]
        );
    }

    #[test]
    fn captured_calls_are_comments_and_a_stream_joins_by_waiting_on_a_captured_event() {
        let (origin, joined, other) = (0x10, 0x11, 0x12);
        let (fork, join) = (0x20, 0x21);
        let lines = translate(&[
            call(
                "cuStreamBeginCapture_v2",
                Kind::BeginCapture { stream: origin },
                0,
            ),
            call("cuLaunchKernel", Kind::Work { stream: origin }, 0),
            call(
                "cuEventRecord",
                Kind::EventRecord {
                    event: fork,
                    stream: origin,
                },
                0,
            ),
            call(
                "cuStreamWaitEvent",
                Kind::StreamWaitEvent {
                    stream: joined,
                    event: fork,
                },
                0,
            ),
            call("cuLaunchKernel", Kind::Work { stream: joined }, 0),
            call("cuLaunchKernel", Kind::Work { stream: other }, 0),
            call(
                "cuEventRecord",
                Kind::EventRecord {
                    event: join,
                    stream: joined,
                },
                0,
            ),
            call(
                "cuEventSynchronize",
                Kind::EventSynchronize { event: join },
                0,
            ),
            call(
                "cuStreamWaitEvent",
                Kind::StreamWaitEvent {
                    stream: origin,
                    event: join,
                },
                0,
            ),
            call("cuStreamEndCapture", Kind::EndCapture { stream: origin }, 0),
            call("cuLaunchKernel", Kind::Work { stream: joined }, 0),
            call("cuGraphLaunch", Kind::Work { stream: other }, 0),
            call(
                "cuEventSynchronize",
                Kind::EventSynchronize { event: join },
                0,
            ),
        ]);
        assert_eq!(
            lines,
            [
                "# 0x10 begins capturing into a graph: its calls are captured, not run \
                 (cuStreamBeginCapture_v2 tid=7)",
                "# captured: launch 0x10  (cuLaunchKernel tid=7)",
                "# captured: event_record 0x20 0x10  (cuEventRecord tid=7)",
                "# 0x11 joins the capture of 0x10: its calls are captured",
                "# captured: stream_wait_event 0x11 0x20  (cuStreamWaitEvent tid=7)",
                "# captured: launch 0x11  (cuLaunchKernel tid=7)",
                "launch 0x12",
                "# captured: event_record 0x21 0x11  (cuEventRecord tid=7)",
                "# captured: event_synchronize 0x21  (cuEventSynchronize tid=7)",
                "# captured: stream_wait_event 0x10 0x21  (cuStreamWaitEvent tid=7)",
                "# the capture of 0x10 ends (cuStreamEndCapture tid=7)",
                "launch 0x11",
                "launch 0x12",
                "event_synchronize 0x21",
            ]
        );
    }

    #[test]
    fn an_event_re_recorded_outside_a_capture_is_real_again() {
        let lines = translate(&[
            call(
                "cuStreamBeginCapture",
                Kind::BeginCapture { stream: 0x10 },
                0,
            ),
            call(
                "cuEventRecord",
                Kind::EventRecord {
                    event: 0x20,
                    stream: 0x10,
                },
                0,
            ),
            call(
                "cuEventRecord",
                Kind::EventRecord {
                    event: 0x20,
                    stream: 0x11,
                },
                0,
            ),
            call(
                "cuStreamWaitEvent",
                Kind::StreamWaitEvent {
                    stream: 0x12,
                    event: 0x20,
                },
                0,
            ),
        ]);
        assert_eq!(
            lines[2..],
            ["event_record 0x20 0x11", "stream_wait_event 0x12 0x20"]
        );
    }

    #[test]
    fn after_exit_every_call_is_a_comment() {
        let mut translator = Translator::new();
        let mut out = String::new();
        translator.translate(&call("cuMemAlloc_v2", Kind::Note, 0), &mut out);
        translator.exit(&mut out);
        translator.exit(&mut out);
        translator.translate(
            &entered(call(
                "cuStreamDestroy_v2",
                Kind::StreamDestroy { stream: 0x10 },
                0,
            )),
            &mut out,
        );
        assert_eq!(
            out,
            "# cuMemAlloc_v2 ctx=0xc0 dev=1 tid=7 ret=0\n\
             exit\n\
             # after exit: cuStreamDestroy_v2 ctx=0xc0 dev=1 tid=7 ret=enter stream=0x10\n"
        );
    }
}
