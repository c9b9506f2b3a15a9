//! Findings as a text trace's reader sees them: `line N: message`, with the trace's own names
//! for streams and events, for a parsed trace and for the streaming checker.

use alloc::string::String;
use core::fmt;

use super::finding::{Defect, Finding, TraceObject};
use crate::token::races::RaceNames;
use crate::token::trace::{AllocatorId, ParsedTrace, SiteId};

impl ParsedTrace {
    /// A defect described with the trace's own line numbers and names.
    pub fn describe<'a>(&'a self, defect: &'a Defect) -> impl fmt::Display + 'a {
        self.describe_finding(Finding::Defect(*defect))
    }

    /// A finding (a defect, an object alive at exit, a race) described with the trace's own
    /// line numbers and names.
    pub fn describe_finding(&self, finding: Finding) -> impl fmt::Display + '_ {
        DescribedFinding {
            trace: self,
            finding,
        }
    }
}

struct DescribedFinding<'a> {
    trace: &'a ParsedTrace,
    finding: Finding,
}

impl fmt::Display for DescribedFinding<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let trace = self.trace;
        fn name(names: &[String], index: usize) -> Option<&str> {
            names.get(index).map(String::as_str)
        }
        write_finding(
            f,
            &self.finding,
            &TraceNames {
                object: &|object| match object {
                    TraceObject::Stream(s) => name(&trace.stream_names, s.index()),
                    TraceObject::Event(e) => name(&trace.event_names, e.index()),
                },
                site: &|site| name(&trace.site_names, site.0 as usize),
                allocator: &|a| name(&trace.allocator_names, a.0 as usize),
            },
            |position| trace.lines.get(position).copied().unwrap_or(0),
        )
    }
}

/// A trace reader's names for what findings name (`None`: written as the id).
pub(in crate::token) struct TraceNames<'a, 'n> {
    pub(in crate::token) object: &'a dyn Fn(TraceObject) -> Option<&'n str>,
    pub(in crate::token) site: &'a dyn Fn(SiteId) -> Option<&'n str>,
    pub(in crate::token) allocator: &'a dyn Fn(AllocatorId) -> Option<&'n str>,
}

/// Writes `finding` as `line N: message`, naming with `names` and turning positions into
/// lines with `line_of`.
pub(in crate::token) fn write_finding(
    f: &mut fmt::Formatter<'_>,
    finding: &Finding,
    names: &TraceNames<'_, '_>,
    line_of: impl Fn(usize) -> usize,
) -> fmt::Result {
    write!(f, "line {}: ", line_of(finding.position()))?;
    let name_of = names.object;
    if let Finding::Race(race) = finding {
        return race.describe(
            f,
            &mut RaceNames {
                stream: &mut |f, s| match name_of(TraceObject::Stream(s)) {
                    Some(name) => write!(f, "stream `{name}`"),
                    None => write!(f, "{s}"),
                },
                site: &mut |f, site| match (names.site)(site) {
                    Some(name) => write!(f, "@{name}"),
                    None => write!(f, "site {}", site.0),
                },
                allocator: &mut |f, a| match (names.allocator)(a) {
                    Some(name) => write!(f, "`{name}`"),
                    None => write!(f, "allocator {}", a.0),
                },
                position: &mut |f, position| write!(f, "line {}", line_of(position)),
            },
        );
    }
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
