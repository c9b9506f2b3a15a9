//! Reading the text format: [`parse_trace`] reads a whole trace into a [`ParsedTrace`], and
//! the line parser under it reads one line at a time, for it and for the streaming checker.

use alloc::string::String;
use alloc::vec::Vec;

use super::memory::{AccessMode, AddressRange, AllocatorId, CallKind, SiteId, StreamKind};
use super::names::Names;
use super::op::TraceOp;
use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, StreamId};

/// A trace read from text into memory: the operations, the line each came from, and the
/// names. For traces of any length, [`StreamingChecker`](crate::token::StreamingChecker)
/// checks line by line instead, with memory bounded by the objects alive.
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
    /// Call site names, indexed by [`SiteId`].
    pub site_names: Vec<String>,
    /// Sub-allocator names, indexed by [`AllocatorId`].
    pub allocator_names: Vec<String>,
}

/// Reads the text format one line at a time (see the module documentation), turning names
/// into ids through one [`Names`] per kind.
#[derive(Default)]
pub(in crate::token) struct LineParser {
    /// Stream names.
    pub(in crate::token) streams: Names,
    /// Event names.
    pub(in crate::token) events: Names,
    /// Call site names (never released: as many as the program has sites).
    pub(in crate::token) sites: Names,
    /// Sub-allocator names (never released).
    pub(in crate::token) allocators: Names,
    /// The operations of the last line read.
    pub(in crate::token) ops: Vec<TraceOp>,
    /// The footprint of the line being read, before its stream is named.
    accesses: Vec<(AccessMode, AddressRange)>,
    line: usize,
    exited: bool,
}

impl LineParser {
    /// The number of the last line read (from 1).
    pub(in crate::token) fn line(&self) -> usize {
        self.line
    }

    /// Reads the line at the start of `text`, up to its line break or the end of `text`,
    /// into [`ops`](Self::ops) (none for a blank or comment line; a stream operation with a
    /// footprint is followed by one [`TraceOp::Access`] per range); returns the bytes read
    /// (the line break included). A line not in the format is an error naming the line and
    /// what was expected; nothing is named then.
    pub(in crate::token) fn next(&mut self, text: &[u8]) -> Result<usize> {
        self.ops.clear();
        self.line += 1;
        let line = self.line;
        let mut words = Words { text, at: 0 };
        let Some(call) = words.next() else {
            return Ok(words.line_length());
        };
        let mut fields = Fields {
            words,
            line,
            site: None,
        };
        if self.exited {
            return Err(fields.error("nothing after `exit` but comments and blank lines"));
        }
        let op = self.read_call(call, &mut fields)?;
        self.ops.push(op);
        if let TraceOp::Launch { stream, .. } | TraceOp::PeerCopy { stream, .. } = op {
            let call = match (call, op) {
                (b"copy", _) => CallKind::Copy,
                (b"fill", _) => CallKind::Fill,
                (_, TraceOp::PeerCopy { .. }) => CallKind::PeerCopy,
                _ => CallKind::Launch,
            };
            let site = fields.name_site(&mut self.sites)?;
            self.ops.extend(
                self.accesses
                    .drain(..)
                    .map(|(mode, range)| TraceOp::Access {
                        stream,
                        call,
                        range,
                        mode,
                        site,
                    }),
            );
        }
        Ok(fields.words.line_length())
    }

    /// Reads one line's call after its name (`call`): all its words before naming anything,
    /// so a malformed line names nothing.
    fn read_call(&mut self, call: &[u8], fields: &mut Fields<'_>) -> Result<TraceOp> {
        let (streams, events) = (&mut self.streams, &mut self.events);
        let op = match call {
            b"launch" | b"copy" | b"fill" => {
                let stream = fields.name("a stream name")?;
                let device = fields.device_then_footprint(&mut self.accesses)?;
                TraceOp::Launch {
                    stream: fields.stream(streams, stream)?,
                    device,
                }
            }
            b"peer_copy" => {
                let stream = fields.name("a stream name")?;
                let direct = match fields.name("`direct` or `staged`")? {
                    b"direct" => true,
                    b"staged" => false,
                    _ => return Err(fields.error("`direct` or `staged`")),
                };
                fields.footprint(&mut self.accesses)?;
                TraceOp::PeerCopy {
                    stream: fields.stream(streams, stream)?,
                    direct,
                }
            }
            b"mem_alloc" | b"mem_free" => {
                let at = fields.name("an address range `ADDR+LEN` or an address")?;
                let stream = fields.optional_name()?;
                fields.end()?;
                let alloc = if call == b"mem_alloc" {
                    Ok(parse_range(at).ok_or_else(|| fields.error(RANGE))?)
                } else {
                    Err(parse_number(at).ok_or_else(|| fields.error(ADDRESS))?)
                };
                let stream = stream
                    .map(|stream| fields.stream(streams, stream))
                    .transpose()?;
                let site = fields.name_site(&mut self.sites)?;
                match alloc {
                    Ok(range) => TraceOp::Alloc {
                        range,
                        stream,
                        site,
                    },
                    Err(address) => TraceOp::Free {
                        address,
                        stream,
                        site,
                    },
                }
            }
            b"block_alloc" | b"block_free" | b"block_use" => {
                let allocator = fields.name("an allocator name")?;
                let at = fields.name("an address range `ADDR+LEN` or an address")?;
                let stream = fields.name("a stream name")?;
                fields.end()?;
                let (range, address) = if call == b"block_alloc" {
                    let range = parse_range(at).ok_or_else(|| fields.error(RANGE))?;
                    (range, range.start)
                } else {
                    let address = parse_number(at).ok_or_else(|| fields.error(ADDRESS))?;
                    (AddressRange::new(address, 0), address)
                };
                if core::str::from_utf8(allocator).is_err() {
                    return Err(fields.error("a name in UTF-8"));
                }
                let stream = fields.stream(streams, stream)?;
                let allocator = AllocatorId(
                    self.allocators
                        .id(allocator)
                        .map_err(|expected| fields.error(expected))?,
                );
                let site = fields.name_site(&mut self.sites)?;
                match call {
                    b"block_alloc" => TraceOp::BlockAlloc {
                        allocator,
                        range,
                        stream,
                        site,
                    },
                    b"block_free" => TraceOp::BlockFree {
                        allocator,
                        address,
                        stream,
                        site,
                    },
                    _ => TraceOp::BlockUse {
                        allocator,
                        address,
                        stream,
                        site,
                    },
                }
            }
            b"stream_kind" => {
                let (stream, kind) = fields.two_names("a stream name", KINDS)?;
                let kind = match kind {
                    b"blocking" => StreamKind::Blocking,
                    b"nonblocking" => StreamKind::NonBlocking,
                    b"legacy" => StreamKind::Legacy,
                    b"per_thread" => StreamKind::PerThread,
                    _ => return Err(fields.error(KINDS)),
                };
                TraceOp::SetStreamKind {
                    stream: fields.stream(streams, stream)?,
                    kind,
                }
            }
            b"device_synchronize" => {
                let device = fields
                    .optional_device()?
                    .ok_or_else(|| fields.error("a device number"))?;
                fields.end()?;
                TraceOp::SynchronizeDevice { device }
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
                    line: fields.line,
                    expected: "a call (stream_create, stream_default, stream_destroy, \
                               stream_kind, event_create, event_destroy, event_record, \
                               stream_wait_event, stream_synchronize, event_synchronize, \
                               device_synchronize, stream_query, event_query, launch, copy, \
                               fill, peer_copy, mem_alloc, mem_free, block_alloc, block_free, \
                               block_use, exit)",
                    found: String::from_utf8_lossy(call).into_owned(),
                });
            }
        };
        Ok(op)
    }
}

const RANGE: &str = "an address range `ADDR+LEN` (a hexadecimal `0x...` or decimal address, a \
                     length, not past the end of the address space)";
const ADDRESS: &str = "an address (hexadecimal `0x...` or decimal)";
const ACCESS: &str = "an access (`r:ADDR+LEN`, `w:ADDR+LEN` or `rw:ADDR+LEN`) or a call site \
                      `@SITE` (the last word), after an optional device number";
const KINDS: &str = "a stream kind (`blocking`, `nonblocking`, `legacy` or `per_thread`)";

/// Reads a whole trace in the text format (see the module documentation) into memory. Fails
/// at the first line that is not in the format, naming the line and what was expected.
pub fn parse_trace(text: &str) -> Result<ParsedTrace> {
    let mut parser = LineParser::default();
    let (mut ops, mut lines) = (Vec::new(), Vec::new());
    let mut text = text.as_bytes();
    while !text.is_empty() {
        let read = parser.next(text)?;
        text = &text[read..];
        ops.extend_from_slice(&parser.ops);
        lines.resize(ops.len(), parser.line());
    }
    Ok(ParsedTrace {
        ops,
        lines,
        stream_names: parser.streams.into_names(),
        event_names: parser.events.into_names(),
        site_names: parser.sites.into_names(),
        allocator_names: parser.allocators.into_names(),
    })
}

/// A number: hexadecimal after `0x`, else decimal; `None` if not one or above `u64::MAX`.
fn parse_number(word: &[u8]) -> Option<u64> {
    let (digits, radix) = match word.strip_prefix(b"0x") {
        Some(hex) => (hex, 16),
        None => (word, 10),
    };
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &digit| {
        let digit = char::from(digit).to_digit(radix)?;
        n.checked_mul(u64::from(radix))?
            .checked_add(u64::from(digit))
    })
}

/// `ADDR+LEN`, not past the end of the address space.
fn parse_range(word: &[u8]) -> Option<AddressRange> {
    let plus = word.iter().position(|&b| b == b'+')?;
    let start = parse_number(&word[..plus])?;
    let len = parse_number(&word[plus + 1..])?;
    start.checked_add(len)?;
    Some(AddressRange { start, len })
}

/// `r:RANGE`, `w:RANGE` or `rw:RANGE`.
fn parse_access(word: &[u8]) -> Option<(AccessMode, AddressRange)> {
    let colon = word.iter().position(|&b| b == b':')?;
    let mode = match &word[..colon] {
        b"r" => AccessMode::Read,
        b"w" => AccessMode::Write,
        b"rw" => AccessMode::ReadWrite,
        _ => return None,
    };
    Some((mode, parse_range(&word[colon + 1..])?))
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
pub(super) fn word_end(bytes: &[u8]) -> usize {
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
    /// The call site (`@SITE`, the last word), once read.
    site: Option<&'t [u8]>,
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

    /// The end of the line, after an optional call site `@SITE`.
    fn end(&mut self) -> Result<()> {
        match self.words.next() {
            None => Ok(()),
            Some(word) => self.site_then_end(word),
        }
    }

    /// `word` is the call site `@SITE`, and the line ends after it.
    fn site_then_end(&mut self, word: &'t [u8]) -> Result<()> {
        match word.strip_prefix(b"@") {
            Some(site) if !site.is_empty() && self.words.next().is_none() => {
                // Checked here, before the line names anything.
                if core::str::from_utf8(site).is_err() {
                    return Err(self.error("a call site in UTF-8"));
                }
                self.site = Some(site);
                Ok(())
            }
            _ => Err(self.error("the end of the line, or a call site `@SITE`")),
        }
    }

    /// A name if the line has one more word (not a call site), then maybe the site.
    fn optional_name(&mut self) -> Result<Option<&'t [u8]>> {
        match self.words.next() {
            None => Ok(None),
            Some(word) if word.starts_with(b"@") => self.site_then_end(word).map(|()| None),
            Some(word) => Ok(Some(word)),
        }
    }

    /// An optional device, then the footprint (see [`Fields::footprint`]).
    fn device_then_footprint(
        &mut self,
        accesses: &mut Vec<(AccessMode, AddressRange)>,
    ) -> Result<Option<DeviceId>> {
        accesses.clear();
        let Some(word) = self.words.next() else {
            return Ok(None);
        };
        if let Some(device) = parse_device(word) {
            self.footprint(accesses)?;
            return Ok(Some(device));
        }
        self.access_or_site(word, accesses)?;
        self.footprint(accesses)?;
        Ok(None)
    }

    /// The rest of the line: accesses (`r:`, `w:`, `rw:` and a range), then maybe a site.
    fn footprint(&mut self, accesses: &mut Vec<(AccessMode, AddressRange)>) -> Result<()> {
        while self.site.is_none()
            && let Some(word) = self.words.next()
        {
            self.access_or_site(word, accesses)?;
        }
        Ok(())
    }

    fn access_or_site(
        &mut self,
        word: &'t [u8],
        accesses: &mut Vec<(AccessMode, AddressRange)>,
    ) -> Result<()> {
        if word.starts_with(b"@") {
            return self.site_then_end(word);
        }
        let access = parse_access(word).ok_or_else(|| self.error(ACCESS))?;
        accesses.push(access);
        Ok(())
    }

    /// Names the call site read, if any (after the line's other names).
    fn name_site(&self, sites: &mut Names) -> Result<Option<SiteId>> {
        self.site
            .map(|site| {
                sites
                    .id(site)
                    .map(SiteId)
                    .map_err(|expected| self.error(expected))
            })
            .transpose()
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
