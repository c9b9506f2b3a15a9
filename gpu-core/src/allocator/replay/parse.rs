//! The allocation trace's line format (docs/alloc-trace-format.md): one event per line, parsed
//! without allocating; errors name the line, the field and what it held, invisible bytes shown.

use alloc::format;

use crate::error::{Error, Result};

/// One event of an allocation trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// `alloc ID DEVICE STREAM SIZE`: allocation `id` of `size` bytes of device memory on
    /// `device`, for use on `stream` (`None`, written `-`: synchronous, usable at once).
    Alloc {
        /// The allocation's number, live until its free.
        id: u64,
        /// The device.
        device: u32,
        /// The stream it is for, or `None` for a synchronous allocation.
        stream: Option<u32>,
        /// Bytes asked for (above zero).
        size: u64,
    },
    /// `free ID [STREAM|-]`: allocation `id` freed in the order of `stream` (`None`: the stream
    /// it was allocated for; `Some(None)`, written `-`: after all its work completed).
    Free {
        /// The allocation's number.
        id: u64,
        /// The stream the free is ordered on, if not the allocation's own.
        stream: Option<Option<u32>>,
    },
    /// `use ID STREAM`: allocation `id` is also used by work on `stream` (PyTorch's
    /// `record_stream`), so its free waits for that work.
    Use {
        /// The allocation's number.
        id: u64,
        /// The other stream.
        stream: u32,
    },
}

/// The first line a trace written by the runtime or the converter carries (optional).
pub const TRACE_HEADER: &str = "# gpu-alloc-trace 1";

/// Parses one line (without its line end; a trailing `\r` is ignored) numbered `line` from 1:
/// `Ok(None)` for a blank or comment-only line.
pub fn parse_line(text: &[u8], line: usize) -> Result<Option<TraceEvent>> {
    const ID: &str = "`id`: a decimal number below 2^64";
    const DEVICE: &str = "`device`: a decimal device number below 2^32";
    const SIZE: &str = "`size`: a decimal byte count above zero, below 2^64";
    let text = match memchr::memchr(b'#', text) {
        Some(comment) => &text[..comment],
        None => text,
    };
    let mut fields = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|field| !field.is_empty());
    let Some(action) = fields.next() else {
        return Ok(None);
    };
    let mut next = |expected: &'static str| {
        fields
            .next()
            .ok_or_else(|| syntax(line, expected, b"(end of line)"))
    };
    let event = match action {
        b"alloc" => {
            let id = number(next(ID)?, line, ID)?;
            let device = next(DEVICE)?;
            let device = u32::try_from(number(device, line, DEVICE)?)
                .map_err(|_| syntax(line, DEVICE, device))?;
            let stream = stream(next(STREAM)?, line)?;
            let size = next(SIZE)?;
            let size = match number(size, line, SIZE)? {
                0 => return Err(syntax(line, SIZE, size)),
                bytes => bytes,
            };
            TraceEvent::Alloc {
                id,
                device,
                stream,
                size,
            }
        }
        b"free" => {
            let id = number(next(ID)?, line, ID)?;
            let stream = match fields.next() {
                None => None,
                Some(field) => Some(stream(field, line)?),
            };
            TraceEvent::Free { id, stream }
        }
        b"use" => {
            let id = number(next(ID)?, line, ID)?;
            let field = next(STREAM)?;
            let stream = stream(field, line)?.ok_or_else(|| syntax(line, USE_STREAM, field))?;
            TraceEvent::Use { id, stream }
        }
        other => return Err(syntax(line, "`action`: alloc, free or use", other)),
    };
    match fields.next() {
        Some(extra) => Err(syntax(line, "the end of the line", extra)),
        None => Ok(Some(event)),
    }
}

const STREAM: &str = "`stream`: a decimal stream number below 2^32, or `-`";
const USE_STREAM: &str = "`stream`: a decimal stream number below 2^32";

/// A decimal number.
fn number(field: &[u8], line: usize, expected: &'static str) -> Result<u64> {
    let mut value: u64 = 0;
    for &byte in field {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return Err(syntax(line, expected, field));
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit)))
            .ok_or_else(|| syntax(line, expected, field))?;
    }
    Ok(value)
}

/// A stream number, or `-` (none).
fn stream(field: &[u8], line: usize) -> Result<Option<u32>> {
    if field == b"-" {
        return Ok(None);
    }
    let value = number(field, line, STREAM)?;
    u32::try_from(value)
        .map(Some)
        .map_err(|_| syntax(line, STREAM, field))
}

/// The error for `line`, whose field held `found` instead of `expected` (invisible bytes and
/// anything not ASCII shown escaped).
pub(super) fn syntax(line: usize, expected: &'static str, found: &[u8]) -> Error {
    Error::TraceSyntax {
        line,
        expected,
        found: format!("{}", found.escape_ascii()),
    }
}
