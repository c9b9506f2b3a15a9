//! One recorded driver call as plain data (`Call`): what CUPTI's callback said, with the
//! handles read out of its parameters, and its one-line text form (the recorded fixtures).

use core::fmt;

use crate::sys;

/// What kind of call a driver function is, for the translation (its handles aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Creates a stream (`cuStreamCreate`, `cuStreamCreateWithPriority`, ...).
    StreamCreate,
    /// Destroys a stream.
    StreamDestroy,
    /// Creates an event (`cuEventCreate`, `cuIpcOpenEventHandle`).
    EventCreate,
    /// Destroys an event.
    EventDestroy,
    /// Records an event on a stream (`cuEventRecord`, `cuEventRecordWithFlags`, ...).
    EventRecord,
    /// Makes a stream wait for an event.
    StreamWaitEvent,
    /// The host waits for a stream.
    StreamSynchronize,
    /// The host asks whether a stream is idle.
    StreamQuery,
    /// The host waits for an event.
    EventSynchronize,
    /// The host asks whether an event has completed.
    EventQuery,
    /// Stream-ordered work: a kernel, a graph, an asynchronous copy, fill, allocation or free.
    Work,
    /// A stream begins capturing into a CUDA graph.
    BeginCapture,
    /// A stream's capture ends.
    EndCapture,
    /// A memory or context call the trace keeps as a comment.
    Note,
}

/// A call's handles, by shape. Handles are the driver's raw values (`CUstream`, `CUevent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `stream` was created (0 when the call failed).
    StreamCreate {
        /// The new stream.
        stream: u64,
    },
    /// `stream` is destroyed.
    StreamDestroy {
        /// The stream.
        stream: u64,
    },
    /// `event` was created (0 when the call failed).
    EventCreate {
        /// The new event.
        event: u64,
    },
    /// `event` is destroyed.
    EventDestroy {
        /// The event.
        event: u64,
    },
    /// `event` recorded on `stream`.
    EventRecord {
        /// The event.
        event: u64,
        /// The stream.
        stream: u64,
    },
    /// `stream` waits for `event`.
    StreamWaitEvent {
        /// The stream.
        stream: u64,
        /// The event.
        event: u64,
    },
    /// The host waits for `stream`.
    StreamSynchronize {
        /// The stream.
        stream: u64,
    },
    /// The host asks whether `stream` is idle.
    StreamQuery {
        /// The stream.
        stream: u64,
    },
    /// The host waits for `event`.
    EventSynchronize {
        /// The event.
        event: u64,
    },
    /// The host asks whether `event` has completed.
    EventQuery {
        /// The event.
        event: u64,
    },
    /// Work enqueued on `stream`.
    Work {
        /// The stream.
        stream: u64,
    },
    /// `stream` begins capturing.
    BeginCapture {
        /// The stream.
        stream: u64,
    },
    /// `stream`'s capture ends.
    EndCapture {
        /// The stream.
        stream: u64,
    },
    /// A memory or context call, kept as a comment.
    Note,
}

impl Kind {
    /// The shape of this kind.
    pub fn shape(self) -> Shape {
        match self {
            Self::StreamCreate { .. } => Shape::StreamCreate,
            Self::StreamDestroy { .. } => Shape::StreamDestroy,
            Self::EventCreate { .. } => Shape::EventCreate,
            Self::EventDestroy { .. } => Shape::EventDestroy,
            Self::EventRecord { .. } => Shape::EventRecord,
            Self::StreamWaitEvent { .. } => Shape::StreamWaitEvent,
            Self::StreamSynchronize { .. } => Shape::StreamSynchronize,
            Self::StreamQuery { .. } => Shape::StreamQuery,
            Self::EventSynchronize { .. } => Shape::EventSynchronize,
            Self::EventQuery { .. } => Shape::EventQuery,
            Self::Work { .. } => Shape::Work,
            Self::BeginCapture { .. } => Shape::BeginCapture,
            Self::EndCapture { .. } => Shape::EndCapture,
            Self::Note => Shape::Note,
        }
    }

    /// The stream handle this call names, if any.
    pub fn stream(self) -> Option<u64> {
        match self {
            Self::StreamCreate { stream }
            | Self::StreamDestroy { stream }
            | Self::EventRecord { stream, .. }
            | Self::StreamWaitEvent { stream, .. }
            | Self::StreamSynchronize { stream }
            | Self::StreamQuery { stream }
            | Self::Work { stream }
            | Self::BeginCapture { stream }
            | Self::EndCapture { stream } => Some(stream),
            _ => None,
        }
    }

    /// The event handle this call names, if any.
    pub fn event(self) -> Option<u64> {
        match self {
            Self::EventCreate { event }
            | Self::EventDestroy { event }
            | Self::EventRecord { event, .. }
            | Self::StreamWaitEvent { event, .. }
            | Self::EventSynchronize { event }
            | Self::EventQuery { event } => Some(event),
            _ => None,
        }
    }

    /// The kind of `shape` with these handles (a missing one is 0); `None` for a shape that
    /// needs a handle it was not given.
    pub fn from_shape(shape: Shape, stream: Option<u64>, event: Option<u64>) -> Option<Self> {
        Some(match shape {
            Shape::StreamCreate => Self::StreamCreate { stream: stream? },
            Shape::StreamDestroy => Self::StreamDestroy { stream: stream? },
            Shape::EventCreate => Self::EventCreate { event: event? },
            Shape::EventDestroy => Self::EventDestroy { event: event? },
            Shape::EventRecord => Self::EventRecord {
                event: event?,
                stream: stream?,
            },
            Shape::StreamWaitEvent => Self::StreamWaitEvent {
                stream: stream?,
                event: event?,
            },
            Shape::StreamSynchronize => Self::StreamSynchronize { stream: stream? },
            Shape::StreamQuery => Self::StreamQuery { stream: stream? },
            Shape::EventSynchronize => Self::EventSynchronize { event: event? },
            Shape::EventQuery => Self::EventQuery { event: event? },
            Shape::Work => Self::Work { stream: stream? },
            Shape::BeginCapture => Self::BeginCapture { stream: stream? },
            Shape::EndCapture => Self::EndCapture { stream: stream? },
            Shape::Note => Self::Note,
        })
    }
}

/// Where the call was when it was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Before the driver ran it (destroys are recorded then, before the handle can be reused).
    Entered,
    /// After the driver returned this `CUresult`.
    Returned(u32),
}

/// One driver call seen by the recorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// The driver function as CUPTI names its callback (`cuLaunchKernel_ptsz`).
    pub function: &'static str,
    /// Its handles.
    pub kind: Kind,
    /// The calling thread's current context (0 if none).
    pub context: u64,
    /// That context's device, if known.
    pub device: Option<u32>,
    /// The calling thread (the kernel's thread id).
    pub thread: u64,
    /// Before or after the driver ran it.
    pub outcome: Outcome,
}

impl Call {
    /// Whether the function is a per-thread-default-stream form (`_ptsz`, `_ptds`): its null
    /// stream is the calling thread's default stream, not the context's legacy one.
    pub fn per_thread(&self) -> bool {
        self.function.ends_with("_ptsz") || self.function.ends_with("_ptds")
    }
}

/// Every driver function the recorder subscribes to: CUPTI's callback id, the name, the shape.
pub static RECORDED_FUNCTIONS: &[(u32, &str, Shape)] = &recorded_functions();

const fn recorded_functions() -> [(u32, &'static str, Shape); FUNCTION_COUNT] {
    macro_rules! rows {
        ($(($name:ident, $cbid:ident, $params:ident, $kind:ident, [$($field:ident),*])),* $(,)?) => {
            [$((sys::$cbid, stringify!($name), shape_of!($kind)),)*]
        };
    }
    macro_rules! note_rows {
        ($(($name:ident, $cbid:ident)),* $(,)?) => {
            [$((sys::$cbid, stringify!($name), Shape::Note),)*]
        };
    }
    let recorded = sys::recorded_calls!(rows);
    let noted = sys::noted_calls!(note_rows);
    let mut all = [(0, "", Shape::Note); FUNCTION_COUNT];
    let mut i = 0;
    while i < recorded.len() {
        all[i] = recorded[i];
        i += 1;
    }
    let mut j = 0;
    while j < noted.len() {
        all[i + j] = noted[j];
        j += 1;
    }
    all
}

/// The shape a kind name of the generated table stands for.
macro_rules! shape_of {
    (stream_create) => {
        Shape::StreamCreate
    };
    (stream_destroy) => {
        Shape::StreamDestroy
    };
    (event_create) => {
        Shape::EventCreate
    };
    (event_destroy) => {
        Shape::EventDestroy
    };
    (event_record) => {
        Shape::EventRecord
    };
    (stream_wait_event) => {
        Shape::StreamWaitEvent
    };
    (stream_synchronize) => {
        Shape::StreamSynchronize
    };
    (stream_query) => {
        Shape::StreamQuery
    };
    (event_synchronize) => {
        Shape::EventSynchronize
    };
    (event_query) => {
        Shape::EventQuery
    };
    (work) => {
        Shape::Work
    };
    (work_config) => {
        Shape::Work
    };
    (work_each) => {
        Shape::Work
    };
    (begin_capture) => {
        Shape::BeginCapture
    };
    (end_capture) => {
        Shape::EndCapture
    };
}
pub(crate) use shape_of;

const FUNCTION_COUNT: usize = {
    macro_rules! count {
        ($($row:tt),* $(,)?) => {
            [$(count!(@one $row)),*].len()
        };
        (@one $row:tt) => {
            ()
        };
    }
    sys::recorded_calls!(count) + sys::noted_calls!(count)
};

/// The name and shape of a recorded function, by name.
pub fn function_named(name: &str) -> Option<(&'static str, Shape)> {
    RECORDED_FUNCTIONS
        .iter()
        .find(|(_, known, _)| *known == name)
        .map(|&(_, name, shape)| (name, shape))
}

/// The text form: `FUNCTION ctx=0xC dev=D tid=T ret=R [stream=0xS] [event=0xE]`, with `dev=-`
/// for an unknown device and `ret=enter` for a call recorded before it ran.
impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ctx={:#x} dev=", self.function, self.context)?;
        match self.device {
            Some(device) => write!(f, "{device}")?,
            None => f.write_str("-")?,
        }
        write!(f, " tid={} ret=", self.thread)?;
        match self.outcome {
            Outcome::Entered => f.write_str("enter")?,
            Outcome::Returned(code) => write!(f, "{code}")?,
        }
        if let Some(stream) = self.kind.stream() {
            write!(f, " stream={stream:#x}")?;
        }
        if let Some(event) = self.kind.event() {
            write!(f, " event={event:#x}")?;
        }
        Ok(())
    }
}

/// A line of a calls file that is not a call.
#[derive(Debug, PartialEq, Eq)]
pub struct ParseCallError(pub String);

impl fmt::Display for ParseCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseCallError {}

impl core::str::FromStr for Call {
    type Err = ParseCallError;

    /// Reads the text form back.
    fn from_str(line: &str) -> Result<Self, ParseCallError> {
        let error = |what: String| ParseCallError(format!("{what} in `{line}`"));
        let mut words = line.split_whitespace();
        let name = words.next().ok_or_else(|| error("no function".into()))?;
        let (function, shape) =
            function_named(name).ok_or_else(|| error(format!("unknown function {name}")))?;
        let (mut context, mut device, mut thread, mut outcome) = (None, None, None, None);
        let (mut stream, mut event) = (None, None);
        for word in words {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| error(format!("`{word}` is not key=value")))?;
            let hex = || {
                value
                    .strip_prefix("0x")
                    .and_then(|digits| u64::from_str_radix(digits, 16).ok())
                    .ok_or_else(|| error(format!("{key}={value} is not a 0x number")))
            };
            let decimal = || {
                value
                    .parse::<u64>()
                    .map_err(|_| error(format!("{key}={value} is not a number")))
            };
            match key {
                "ctx" => context = Some(hex()?),
                "dev" if value == "-" => device = Some(None),
                "dev" => {
                    let number = u32::try_from(decimal()?)
                        .map_err(|_| error(format!("dev={value} is too large")))?;
                    device = Some(Some(number));
                }
                "tid" => thread = Some(decimal()?),
                "ret" if value == "enter" => outcome = Some(Outcome::Entered),
                "ret" => {
                    let code = u32::try_from(decimal()?)
                        .map_err(|_| error(format!("ret={value} is too large")))?;
                    outcome = Some(Outcome::Returned(code));
                }
                "stream" => stream = Some(hex()?),
                "event" => event = Some(hex()?),
                _ => return Err(error(format!("unknown key {key}"))),
            }
        }
        let missing = |what: &str| error(format!("no {what}="));
        let kind = Kind::from_shape(shape, stream, event)
            .ok_or_else(|| error(format!("{name} needs its stream= and event= handles")))?;
        Ok(Self {
            function,
            kind,
            context: context.ok_or_else(|| missing("ctx"))?,
            device: device.ok_or_else(|| missing("dev"))?,
            thread: thread.ok_or_else(|| missing("tid"))?,
            outcome: outcome.ok_or_else(|| missing("ret"))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_each_function_once_with_its_callback_id() {
        for (i, (cbid, name, _)) in RECORDED_FUNCTIONS.iter().enumerate() {
            assert!(!name.is_empty());
            assert!(
                !RECORDED_FUNCTIONS[..i]
                    .iter()
                    .any(|(other_cbid, other, _)| other == name || other_cbid == cbid),
                "{name} ({cbid}) twice"
            );
        }
        assert_eq!(
            function_named("cuLaunchKernelEx_ptsz"),
            Some(("cuLaunchKernelEx_ptsz", Shape::Work))
        );
        assert_eq!(
            function_named("cuEventRecordWithFlags"),
            Some(("cuEventRecordWithFlags", Shape::EventRecord))
        );
        assert_eq!(
            function_named("cuMemAlloc_v2"),
            Some(("cuMemAlloc_v2", Shape::Note))
        );
        assert_eq!(function_named("cuNothing"), None);
    }

    #[test]
    fn text_form_reads_back() {
        let calls = [
            Call {
                function: "cuEventRecordWithFlags_ptsz",
                kind: Kind::EventRecord {
                    event: 0xe1,
                    stream: 0,
                },
                context: 0x5555,
                device: Some(1),
                thread: 77,
                outcome: Outcome::Returned(0),
            },
            Call {
                function: "cuStreamDestroy_v2",
                kind: Kind::StreamDestroy { stream: 0xabc },
                context: 0,
                device: None,
                thread: 1,
                outcome: Outcome::Entered,
            },
            Call {
                function: "cuMemAlloc_v2",
                kind: Kind::Note,
                context: 0x1,
                device: Some(0),
                thread: 2,
                outcome: Outcome::Returned(2),
            },
        ];
        for call in calls {
            let text = call.to_string();
            assert_eq!(text.parse::<Call>(), Ok(call), "{text}");
        }
        assert_eq!(
            calls[0].to_string(),
            "cuEventRecordWithFlags_ptsz ctx=0x5555 dev=1 tid=77 ret=0 stream=0x0 event=0xe1"
        );
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let cases = [
            ("", "no function"),
            ("cuNothing ctx=0x1", "unknown function cuNothing"),
            (
                "cuLaunchKernel ctx=0x1 dev=0 tid=1 ret=0",
                "needs its stream= and event=",
            ),
            (
                "cuLaunchKernel ctx=1 dev=0 tid=1 ret=0 stream=0x1",
                "ctx=1 is not a 0x number",
            ),
            ("cuLaunchKernel dev=0 tid=1 ret=0 stream=0x1", "no ctx="),
            (
                "cuLaunchKernel ctx=0x1 dev=0 tid=1 ret=0 stream=0x1 x=1",
                "unknown key x",
            ),
            (
                "cuLaunchKernel ctx=0x1 dev=99999999999 tid=1 ret=0 stream=0x1",
                "too large",
            ),
            ("cuLaunchKernel ctx=0x1 stream", "is not key=value"),
        ];
        for (line, expected) in cases {
            let error = line.parse::<Call>().unwrap_err().to_string();
            assert!(error.contains(expected), "{line}: {error}");
        }
    }

    #[test]
    fn per_thread_forms_are_told_by_their_suffix() {
        let mut call = Call {
            function: "cuLaunchKernel_ptsz",
            kind: Kind::Work { stream: 0 },
            context: 1,
            device: Some(0),
            thread: 1,
            outcome: Outcome::Returned(0),
        };
        assert!(call.per_thread());
        call.function = "cuMemcpy_ptds";
        assert!(call.per_thread());
        call.function = "cuLaunchKernel";
        assert!(!call.per_thread());
    }
}
