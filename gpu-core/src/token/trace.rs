//! Stream/event traces: the operations the checker reads, their plain text format (one call
//! per line) and its parser, and the translation of a plan into a trace.
//!
//! Text format (`#` starts a comment; names are any text without ASCII whitespace or `#`,
//! streams and events have separate names; devices are decimal numbers):
//! ```text
//! stream_create NAME DEVICE      event_create NAME DEVICE
//! stream_destroy NAME            event_destroy NAME
//! launch STREAM [DEVICE]         event_record EVENT STREAM
//! stream_wait_event STREAM EVENT
//! stream_synchronize NAME        event_synchronize NAME
//! stream_query NAME              event_query NAME
//! stream_default NAME DEVICE     exit
//! ```
//! `launch` is any operation enqueued on a stream; its optional device is the device that was
//! current when it was issued. `stream_default` declares a stream that exists without being
//! created (a default stream); `exit` says the process ended there, and only comments and
//! blank lines may follow it.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};
use core::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::checker::{Defect, Finding, TraceObject, check};
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
    /// A copy between two devices' memory was enqueued on `stream`: over the link between them
    /// (`direct`, peer access enabled) or staged through the host by the driver. For the
    /// checker, an operation on the stream like [`TraceOp::Launch`].
    PeerCopy {
        /// The stream.
        stream: StreamId,
        /// Whether the devices had peer access to each other.
        direct: bool,
    },
    /// A stream that exists without being created (a context's legacy default stream, a
    /// per-thread default stream) is declared, on `device`: never leaked, never destroyed;
    /// declaring it again is harmless.
    DefaultStream {
        /// The stream.
        stream: StreamId,
        /// Its device.
        device: DeviceId,
    },
    /// The process ended here: the streams and events alive are reported as alive at exit
    /// rather than leaked. Nothing may follow.
    Exit,
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

/// A trace read from text into memory: the operations, the line each came from, and the
/// names. For traces of any length, [`StreamingChecker`](super::StreamingChecker) checks
/// line by line instead, with memory bounded by the objects alive.
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
}

struct DescribedDefect<'a> {
    trace: &'a ParsedTrace,
    defect: &'a Defect,
}

impl fmt::Display for DescribedDefect<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let trace = self.trace;
        write_finding(
            f,
            &Finding::Defect(*self.defect),
            |object| match object {
                TraceObject::Stream(s) => trace.stream_names.get(s.index()).map(String::as_str),
                TraceObject::Event(e) => trace.event_names.get(e.index()).map(String::as_str),
            },
            |position| trace.lines.get(position).copied().unwrap_or(0),
        )
    }
}

/// Writes `finding` as `line N: message`, naming objects with `name_of` (an id without a
/// name is written as the id) and turning positions into lines with `line_of`.
pub(super) fn write_finding<'n>(
    f: &mut fmt::Formatter<'_>,
    finding: &Finding,
    name_of: impl Fn(TraceObject) -> Option<&'n str>,
    line_of: impl Fn(usize) -> usize,
) -> fmt::Result {
    write!(f, "line {}: ", line_of(finding.position()))?;
    finding.describe(
        f,
        &mut |f, object| match (object, name_of(object)) {
            (TraceObject::Stream(_), Some(name)) => write!(f, "stream `{name}`"),
            (TraceObject::Event(_), Some(name)) => write!(f, "event `{name}`"),
            (TraceObject::Stream(s), None) => write!(f, "{s}"),
            (TraceObject::Event(e), None) => write!(f, "{e}"),
        },
        &mut |f, position| write!(f, "line {}", line_of(position)),
    )
}

/// Names of one kind of object to small ids. A released name's id is given to the next new
/// name, so a reader that releases the names of objects it no longer tracks keeps as many
/// names as objects tracked.
#[derive(Default)]
pub(super) struct Names {
    /// Ids, found by the hash of their name.
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// Names by id; a released id's name is empty.
    names: Vec<Box<str>>,
    released: Vec<u32>,
}

impl Names {
    /// The id of `name`, given a fresh one if it has none. Fails, saying what was expected,
    /// for a new name that is not UTF-8 or when 2^32 names are held.
    fn id(&mut self, name: &[u8]) -> core::result::Result<u32, &'static str> {
        let hash = self.hasher.hash_one(name);
        let names = &self.names;
        if let Some(&id) = self
            .table
            .find(hash, |&id| same_bytes(names[id as usize].as_bytes(), name))
        {
            return Ok(id);
        }
        let text = core::str::from_utf8(name).map_err(|_| "a name in UTF-8")?;
        let id = match self.released.pop() {
            Some(id) => {
                self.names[id as usize] = text.into();
                id
            }
            None => {
                let id = u32::try_from(self.names.len())
                    .map_err(|_| "fewer than 2^32 names of one kind")?;
                self.names.push(text.into());
                id
            }
        };
        let (names, hasher) = (&self.names, &self.hasher);
        self.table.insert_unique(hash, id, |&id| {
            hasher.hash_one(names[id as usize].as_bytes())
        });
        Ok(id)
    }

    /// Forgets `id`'s name (nothing if it has none).
    pub(super) fn release(&mut self, id: u32) {
        let Some(name) = self.names.get_mut(id as usize) else {
            return;
        };
        let hash = self.hasher.hash_one(name.as_bytes());
        if let Ok(entry) = self.table.find_entry(hash, |&held| held == id) {
            entry.remove();
            *name = Box::default();
            self.released.push(id);
        }
    }

    /// The name of `id`, if it has one.
    pub(super) fn name(&self, id: u32) -> Option<&str> {
        self.names
            .get(id as usize)
            .filter(|name| !name.is_empty())
            .map(|name| &**name)
    }

    /// How many names are held.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// The names by id (released ones empty).
    fn into_names(self) -> Vec<String> {
        self.names.into_iter().map(String::from).collect()
    }
}

/// Whether `a` and `b` hold the same bytes; names of 8 to 16 bytes (handle values) compare as
/// two overlapping words, without a call.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if !(8..=16).contains(&n) {
        return a == b;
    }
    let word = |bytes: &[u8], at: usize| {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_ne_bytes(word)
    };
    word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
}

/// Reads the text format one line at a time (see the module documentation), turning names
/// into ids through one [`Names`] per kind.
#[derive(Default)]
pub(super) struct LineParser {
    /// Stream names.
    pub(super) streams: Names,
    /// Event names.
    pub(super) events: Names,
    line: usize,
    exited: bool,
}

impl LineParser {
    /// The number of the last line read (from 1).
    pub(super) fn line(&self) -> usize {
        self.line
    }

    /// Reads the line at the start of `text`, up to its line break or the end of `text`:
    /// returns its operation (`None` for a blank or comment line) and the bytes read (the line
    /// break included). A line not in the format is an error naming the line and what was
    /// expected; nothing is named then.
    pub(super) fn next(&mut self, text: &[u8]) -> Result<(Option<TraceOp>, usize)> {
        self.line += 1;
        let line = self.line;
        let mut words = Words { text, at: 0 };
        let Some(call) = words.next() else {
            return Ok((None, words.line_length()));
        };
        let mut fields = Fields { words, line };
        if self.exited {
            return Err(fields.error("nothing after `exit` but comments and blank lines"));
        }
        let (streams, events) = (&mut self.streams, &mut self.events);
        // Each call reads all its words before naming anything, so a malformed line names
        // nothing.
        let op = match call {
            b"launch" => {
                let stream = fields.name("a stream name")?;
                let device = fields.optional_device()?;
                fields.end()?;
                TraceOp::Launch {
                    stream: fields.stream(streams, stream)?,
                    device,
                }
            }
            b"peer_copy" => {
                let (stream, path) = fields.two_names("a stream name", "`direct` or `staged`")?;
                let direct = match path {
                    b"direct" => true,
                    b"staged" => false,
                    _ => return Err(fields.error("`direct` or `staged`")),
                };
                TraceOp::PeerCopy {
                    stream: fields.stream(streams, stream)?,
                    direct,
                }
            }
            b"event_record" => {
                let (event, stream) = fields.two_names("an event name", "a stream name")?;
                TraceOp::Record {
                    event: fields.event(events, event)?,
                    stream: fields.stream(streams, stream)?,
                }
            }
            b"stream_wait_event" => {
                let (stream, event) = fields.two_names("a stream name", "an event name")?;
                TraceOp::Wait {
                    stream: fields.stream(streams, stream)?,
                    event: fields.event(events, event)?,
                }
            }
            b"stream_create" | b"stream_default" => {
                let (stream, device) = fields.name_and_device("a stream name")?;
                let stream = fields.stream(streams, stream)?;
                if call == b"stream_create" {
                    TraceOp::CreateStream { stream, device }
                } else {
                    TraceOp::DefaultStream { stream, device }
                }
            }
            b"event_create" => {
                let (event, device) = fields.name_and_device("an event name")?;
                TraceOp::CreateEvent {
                    event: fields.event(events, event)?,
                    device,
                }
            }
            b"stream_destroy" | b"stream_synchronize" | b"stream_query" => {
                let stream = fields.only_name("a stream name")?;
                let stream = fields.stream(streams, stream)?;
                match call {
                    b"stream_destroy" => TraceOp::DestroyStream { stream },
                    b"stream_synchronize" => TraceOp::SynchronizeStream { stream },
                    _ => TraceOp::QueryStream { stream },
                }
            }
            b"event_destroy" | b"event_synchronize" | b"event_query" => {
                let event = fields.only_name("an event name")?;
                let event = fields.event(events, event)?;
                match call {
                    b"event_destroy" => TraceOp::DestroyEvent { event },
                    b"event_synchronize" => TraceOp::SynchronizeEvent { event },
                    _ => TraceOp::QueryEvent { event },
                }
            }
            b"exit" => {
                fields.end()?;
                self.exited = true;
                TraceOp::Exit
            }
            _ => {
                return Err(Error::TraceSyntax {
                    line,
                    expected: "a call (stream_create, stream_default, stream_destroy, \
                               event_create, event_destroy, event_record, stream_wait_event, \
                               stream_synchronize, event_synchronize, stream_query, \
                               event_query, launch, exit)",
                    found: String::from_utf8_lossy(call).into_owned(),
                });
            }
        };
        Ok((Some(op), fields.words.line_length()))
    }
}

/// Reads a whole trace in the text format (see the module documentation) into memory. Fails
/// at the first line that is not in the format, naming the line and what was expected.
pub fn parse_trace(text: &str) -> Result<ParsedTrace> {
    let mut parser = LineParser::default();
    let (mut ops, mut lines) = (Vec::new(), Vec::new());
    let mut text = text.as_bytes();
    while !text.is_empty() {
        let (op, read) = parser.next(text)?;
        text = &text[read..];
        if let Some(op) = op {
            ops.push(op);
            lines.push(parser.line());
        }
    }
    Ok(ParsedTrace {
        ops,
        lines,
        stream_names: parser.streams.into_names(),
        event_names: parser.events.into_names(),
    })
}

/// The words of the line at the start of `text`, before its comment, separated by ASCII
/// whitespace (a `#` ends the line's content, inside a word too).
struct Words<'t> {
    text: &'t [u8],
    /// Where reading goes on: after the last word read, or, once the words are read, at the
    /// line's break (or the end of `text`).
    at: usize,
}

impl<'t> Iterator for Words<'t> {
    type Item = &'t [u8];

    #[inline(always)]
    fn next(&mut self) -> Option<&'t [u8]> {
        loop {
            match self.text.get(self.at) {
                None | Some(b'\n') => return None,
                Some(b'#') => {
                    self.at = memchr::memchr(b'\n', &self.text[self.at..])
                        .map_or(self.text.len(), |newline| self.at + newline);
                    return None;
                }
                Some(byte) if byte.is_ascii_whitespace() => self.at += 1,
                Some(_) => break,
            }
        }
        let start = self.at;
        self.at += word_end(&self.text[start..]);
        Some(&self.text[start..self.at])
    }
}

impl<'t> Words<'t> {
    /// The bytes of the line, its break included; call once every word has been read.
    fn line_length(&self) -> usize {
        (self.at + 1).min(self.text.len())
    }

    /// The line's content before its comment, without the whitespace around it.
    fn content(&self) -> &'t [u8] {
        let line = match memchr::memchr(b'\n', self.text) {
            Some(newline) => &self.text[..newline],
            None => self.text,
        };
        line.split(|&b| b == b'#')
            .next()
            .unwrap_or_default()
            .trim_ascii()
    }
}

/// Whether `byte` ends a word.
fn ends_word(byte: u8) -> bool {
    byte.is_ascii_whitespace() || byte == b'#'
}

/// The length of the word at the start of `bytes`: up to the first ASCII whitespace or `#`.
/// Eight bytes at a time: a byte at most 0x20 or equal to `#` is a candidate (every ASCII
/// whitespace is at most 0x20); the first candidate of a block is exact (the subtraction's
/// borrows only flag bytes after a true one), and a candidate that is another control
/// character is passed byte by byte.
#[inline]
fn word_end(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut at = 0;
    while let Some(block) = bytes.get(at..at + 8) {
        let mut word = [0; 8];
        word.copy_from_slice(block);
        let word = u64::from_le_bytes(word);
        let low = word.wrapping_sub(ONES * 0x21) & !word & HIGH;
        let hash = word ^ (ONES * u64::from(b'#'));
        let hash = hash.wrapping_sub(ONES) & !hash & HIGH;
        let candidates = low | hash;
        if candidates != 0 {
            let first = at + (candidates.trailing_zeros() / 8) as usize;
            if ends_word(bytes[first]) {
                return first;
            }
            return first + 1 + word_end_bytewise(&bytes[first + 1..]);
        }
        at += 8;
    }
    at + word_end_bytewise(&bytes[at..])
}

fn word_end_bytewise(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|&b| ends_word(b))
        .unwrap_or(bytes.len())
}

/// A decimal device number without sign, or `None`.
fn parse_device(word: &[u8]) -> Option<DeviceId> {
    if word.is_empty() {
        return None;
    }
    word.iter()
        .try_fold(0u32, |n, &digit| {
            let digit = digit.checked_sub(b'0').filter(|&d| d < 10)?;
            n.checked_mul(10)?.checked_add(u32::from(digit))
        })
        .map(DeviceId)
}

/// The rest of one line's words, after the call name.
struct Fields<'t> {
    words: Words<'t>,
    line: usize,
}

impl<'t> Fields<'t> {
    fn error(&self, expected: &'static str) -> Error {
        Error::TraceSyntax {
            line: self.line,
            expected,
            found: String::from_utf8_lossy(self.words.content()).into_owned(),
        }
    }

    fn name(&mut self, expected: &'static str) -> Result<&'t [u8]> {
        self.words.next().ok_or_else(|| self.error(expected))
    }

    /// One name, and the end of the line.
    fn only_name(&mut self, expected: &'static str) -> Result<&'t [u8]> {
        let name = self.name(expected)?;
        self.end()?;
        Ok(name)
    }

    /// Two names, and the end of the line.
    fn two_names(
        &mut self,
        first: &'static str,
        second: &'static str,
    ) -> Result<(&'t [u8], &'t [u8])> {
        let names = (self.name(first)?, self.name(second)?);
        self.end()?;
        Ok(names)
    }

    /// A name and a device, and the end of the line.
    fn name_and_device(&mut self, expected: &'static str) -> Result<(&'t [u8], DeviceId)> {
        let name = self.name(expected)?;
        let device = self
            .optional_device()?
            .ok_or_else(|| self.error("a device number"))?;
        self.end()?;
        Ok((name, device))
    }

    fn optional_device(&mut self) -> Result<Option<DeviceId>> {
        match self.words.next() {
            None => Ok(None),
            Some(word) => parse_device(word)
                .map(Some)
                .ok_or_else(|| self.error("a device number")),
        }
    }

    fn end(&mut self) -> Result<()> {
        match self.words.next() {
            None => Ok(()),
            Some(_) => Err(self.error("the end of the line")),
        }
    }

    fn stream(&self, names: &mut Names, name: &[u8]) -> Result<StreamId> {
        names
            .id(name)
            .map(StreamId)
            .map_err(|expected| self.error(expected))
    }

    fn event(&self, names: &mut Names, name: &[u8]) -> Result<EventId> {
        names
            .id(name)
            .map(EventId)
            .map_err(|expected| self.error(expected))
    }
}

/// Writes operations in the text format, naming stream `n` `sN` and event `n` `eN`, so that
/// [`parse_trace`] reads back the same calls (if nothing follows an [`TraceOp::Exit`]: the
/// format refuses that).
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
            TraceOp::PeerCopy { stream, direct } => {
                let path = if direct { "direct" } else { "staged" };
                writeln!(text, "peer_copy s{} {path}", stream.0)
            }
            TraceOp::DefaultStream { stream, device } => {
                writeln!(text, "stream_default s{} {}", stream.0, device.0)
            }
            TraceOp::Exit => writeln!(text, "exit"),
        };
    }
    text
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
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
             stream_destroy x\n\
             stream_default y 3\n\
             peer_copy x direct\n\
             peer_copy x staged\n\
             exit\n\
             # only comments and blank lines after exit\n\
             \n",
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
                TraceOp::DefaultStream {
                    stream: StreamId(1),
                    device: DeviceId(3)
                },
                TraceOp::PeerCopy {
                    stream: s,
                    direct: true
                },
                TraceOp::PeerCopy {
                    stream: s,
                    direct: false
                },
                TraceOp::Exit,
            ]
        );
        assert_eq!(
            trace.lines,
            vec![2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
        );
        assert_eq!(trace.stream_names, vec!["x".to_string(), "y".to_string()]);
        assert_eq!(trace.event_names, vec!["x".to_string()]);
        let written = write_trace(&trace.ops);
        assert_eq!(parse_trace(&written).unwrap().ops, trace.ops, "{written}");
    }

    /// Reads `text` line by line as the streaming checker does; the first error.
    fn first_error(text: &[u8]) -> Option<Error> {
        let mut parser = LineParser::default();
        let mut rest = text;
        while !rest.is_empty() {
            match parser.next(rest) {
                Ok((_, read)) => rest = &rest[read..],
                Err(e) => return Some(e),
            }
        }
        None
    }

    #[test]
    fn malformed_lines_name_the_line_and_what_was_expected() {
        let cases: [(&[u8], usize, &str); 20] = [
            (b"peer_copy s fast\n", 1, "`direct` or `staged`"),
            (b"peer_copy s\n", 1, "`direct` or `staged`"),
            (b"peer_copy s direct now\n", 1, "the end of the line"),
            (b"stream_create s 0\nfrobnicate s\n", 2, "a call"),
            (b"stream_create\n", 1, "a stream name"),
            (b"stream_create s zero\n", 1, "a device number"),
            (b"stream_create s\n", 1, "a device number"),
            (b"event_record e\n", 1, "a stream name"),
            (b"launch s 0 extra\n", 1, "the end of the line"),
            (b"launch s -1\n", 1, "a device number"),
            (b"launch s +1\n", 1, "a device number"),
            (b"launch s 4294967296\n", 1, "a device number"),
            (b"stream_default s\n", 1, "a device number"),
            (b"stream_default\n", 1, "a stream name"),
            (b"stream_default s 0 0\n", 1, "the end of the line"),
            (b"exit now\n", 1, "the end of the line"),
            (b"exit\n# fine\n\nlaunch s\n", 4, "nothing after `exit`"),
            (b"exit\nexit", 2, "nothing after `exit`"),
            (b"launch \xff\n", 1, "a name in UTF-8"),
            (
                b"stream_create s 0\r\nstream_destroy s t\r\n",
                2,
                "the end of the line",
            ),
        ];
        for (text, line, expected) in cases {
            let shown = String::from_utf8_lossy(text);
            match first_error(text) {
                Some(Error::TraceSyntax {
                    line: l,
                    expected: e,
                    found,
                }) => {
                    assert_eq!(l, line, "{shown}");
                    assert!(e.starts_with(expected), "{shown}: {e}");
                    assert!(!found.contains('\n') && !found.contains('\r'), "{found}");
                }
                other => panic!("{shown}: {other:?}"),
            }
            if let Ok(text) = core::str::from_utf8(text) {
                assert_eq!(parse_trace(text).err(), first_error(text.as_bytes()));
            }
        }
    }

    #[test]
    fn comments_end_words_and_line_ends_need_not_be_unix() {
        let trace = parse_trace(
            "stream_create s#comment\r\n\
             launch s 0# comment\r\n\
             \t launch\ts\t0\x0c\r\n\
             stream_destroy s",
        );
        // `s#comment` is the name `s` and a comment: the device is missing.
        assert!(matches!(
            trace,
            Err(Error::TraceSyntax {
                line: 1,
                expected: "a device number",
                ..
            })
        ));
        let trace = parse_trace(
            "stream_create s 0#c\r\nlaunch s 0# c\r\n\t launch\ts\t0\x0c\r\nstream_destroy s",
        )
        .unwrap();
        assert_eq!(trace.ops.len(), 4);
        assert_eq!(trace.lines, vec![1, 2, 3, 4]);
        assert_eq!(trace.stream_names, vec!["s".to_string()]);
    }

    #[test]
    fn a_comment_may_hold_any_bytes() {
        let text = b"stream_create s 0 # \xff\xfe not UTF-8\nstream_destroy s\n";
        assert_eq!(first_error(text), None);
    }

    #[test]
    fn long_and_odd_names_read_whole() {
        // Names longer than the eight-byte blocks the word scanner reads, with a control
        // character that is not whitespace inside.
        let long = "0x7fffffffffffffff.stream\u{1}name\u{b}end";
        let trace = parse_trace(&alloc::format!(
            "stream_create {long} 0\nlaunch {long}\nstream_destroy {long}"
        ))
        .unwrap();
        assert_eq!(trace.stream_names, vec![long.to_string()]);
        assert_eq!(trace.ops.len(), 3);
        assert_eq!(word_end(b"abcdefghijklmnop\tq"), 16);
        assert_eq!(word_end(b"abcdefg#"), 7);
        assert_eq!(word_end(b"ab\x01cdefghij klm"), 11);
        assert_eq!(word_end(b"abcdefghij"), 10);
    }

    #[test]
    fn names_compare_every_byte() {
        let base = b"0x7f0007800000ab";
        for len in 0..=base.len() {
            assert!(same_bytes(&base[..len], &base[..len]));
            for at in 0..len {
                let mut other = base[..len].to_vec();
                other[at] ^= 1;
                assert!(!same_bytes(&base[..len], &other), "{len} {at}");
            }
            if len > 0 {
                assert!(!same_bytes(&base[..len], &base[..len - 1]));
            }
        }
        let mut names = Names::default();
        assert_eq!(names.id(b"0x7f000780"), Ok(0));
        assert_eq!(names.id(b"0x7f001780"), Ok(1));
        assert_eq!(names.id(b"0x7f000780"), Ok(0));
    }

    #[test]
    fn released_names_give_their_ids_to_new_names() {
        let mut names = Names::default();
        assert_eq!(names.id(b"a"), Ok(0));
        assert_eq!(names.id(b"b"), Ok(1));
        assert_eq!(names.id(b"a"), Ok(0));
        names.release(0);
        names.release(0); // twice: nothing more
        names.release(7); // never given: nothing
        assert_eq!(names.len(), 1);
        assert_eq!(names.name(0), None);
        assert_eq!(names.id(b"c"), Ok(0));
        assert_eq!(names.name(0), Some("c"));
        assert_eq!(names.id(b"a"), Ok(2));
        assert_eq!(names.len(), 3);
        assert_eq!(names.id(b"\xff"), Err("a name in UTF-8"));
        assert_eq!(names.len(), 3);
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
