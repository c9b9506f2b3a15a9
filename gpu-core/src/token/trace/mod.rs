//! Stream/event traces: the operations the checker reads ([`TraceOp`]) and their plain text
//! format, one call per line, with its reader ([`parse_trace`]) and writer ([`write_trace`]).
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
//!
//! Checking a trace is the checker's (`ParsedTrace::check`, `ParsedTrace::describe` are
//! there); turning a plan into a trace is the planner's (`plan_trace`). This module imports
//! from neither.

mod memory;
mod names;
mod op;
mod parse;
#[cfg(test)]
mod tests;
mod write;

pub use memory::{AccessMode, AddressRange, AllocatorId, CallKind, SiteId, StreamKind};
pub use op::TraceOp;
pub(super) use parse::LineParser;
pub use parse::{ParsedTrace, parse_trace};
pub use write::write_trace;
