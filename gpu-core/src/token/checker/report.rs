//! Findings as a text trace's reader sees them: `line N: message`, with the trace's own names
//! for streams and events, for a parsed trace and for the streaming checker.

use alloc::string::String;
use core::fmt;

use super::finding::{Defect, Finding, TraceObject};
use crate::token::trace::ParsedTrace;

impl ParsedTrace {
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
pub(in crate::token) fn write_finding<'n>(
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
