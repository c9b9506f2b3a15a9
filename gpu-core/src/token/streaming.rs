//! The streaming trace checker: reads a trace in the text format one line at a time and
//! checks each call as it comes, holding only the names of the objects the checker tracks.
//!
//! Memory is bounded by the objects alive (plus the checker's bounded memory of destroyed
//! ones, see [`Checker`]), not by the trace's length: no line, operation or finding is kept
//! after it has been checked and reported.

use core::fmt;

use super::checker::{Checker, Finding, TraceNames, TraceObject, write_finding};
use super::trace::{LineParser, TraceOp};
use crate::error::Result;

/// Checks a trace in the text format line by line, reporting each finding (with the trace's
/// own names and line numbers) as soon as it is found.
#[derive(Default)]
pub struct StreamingChecker {
    parser: LineParser,
    checker: Checker,
    calls: u64,
}

impl StreamingChecker {
    /// A checker that has read nothing, remembering
    /// [`Checker::REMEMBERED_DESTROYS`] destroyed objects of each kind.
    pub fn new() -> Self {
        Self::default()
    }

    /// A checker that has read nothing, remembering the last `remembered` destroyed objects
    /// of each kind.
    pub fn remembering(remembered: usize) -> Self {
        StreamingChecker {
            checker: Checker::remembering(remembered),
            ..Self::default()
        }
    }

    /// Reads and checks every line of `text`, passing each finding to `found`. `text` must
    /// end where a line ends: at a line break, or at the end of the trace (a line cut in two
    /// reads as two lines). A line not in the format is an error naming the line and what
    /// was expected; the lines before it have been checked, and the trace cannot be checked
    /// further.
    pub fn check_text(
        &mut self,
        mut text: &[u8],
        found: &mut impl FnMut(Report<'_>),
    ) -> Result<()> {
        while !text.is_empty() {
            let read = self.parser.next(text)?;
            text = &text[read..];
            self.check_read_line(found);
        }
        Ok(())
    }

    /// Reads and checks one line: `line` up to its first line break, or all of it (an empty
    /// `line` is a blank line). Unlike [`StreamingChecker::check_text`], a line not in the
    /// format leaves the checker ready for the next line: the error names the line, the line
    /// named no object and is not counted as a call, and the lines after it are read as
    /// usual (a tool can report several such lines; findings after one may be caused by it).
    pub fn check_line(&mut self, line: &[u8], found: &mut impl FnMut(Report<'_>)) -> Result<()> {
        self.parser.next(line)?;
        self.check_read_line(found);
        Ok(())
    }

    /// Checks the operations of the line just read (one call, whatever its footprint).
    fn check_read_line(&mut self, found: &mut impl FnMut(Report<'_>)) {
        let ops = core::mem::take(&mut self.parser.ops);
        if !ops.is_empty() {
            self.calls += 1;
        }
        for op in &ops {
            self.check(op, found);
        }
        self.parser.ops = ops;
    }

    fn check(&mut self, op: &TraceOp, found: &mut impl FnMut(Report<'_>)) {
        let StreamingChecker {
            parser, checker, ..
        } = self;
        checker.step(parser.line(), op, &mut |finding| {
            found(Report { finding, parser })
        });
        for &object in checker.forgotten() {
            match object {
                TraceObject::Stream(s) => parser.streams.release(s.0),
                TraceObject::Event(e) => parser.events.release(e.0),
            }
        }
    }

    /// Ends the trace: reports every object still alive as leaked (unless the trace has an
    /// `exit`, which reported them as alive at exit), in order of creation. Returns how many
    /// calls the trace held.
    pub fn finish(self, found: &mut impl FnMut(Report<'_>)) -> u64 {
        let parser = &self.parser;
        self.checker
            .finish(&mut |finding| found(Report { finding, parser }));
        self.calls
    }

    /// How many calls have been read.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// How many names are held now (streams and events).
    pub fn names_held(&self) -> usize {
        self.parser.streams.len() + self.parser.events.len()
    }

    /// How many objects the checker tracks now: alive, and destroyed but remembered.
    pub fn tracked(&self) -> usize {
        self.checker.tracked()
    }
}

/// One finding, displayed as `line N: message` with the trace's names.
pub struct Report<'a> {
    finding: Finding,
    parser: &'a LineParser,
}

impl Report<'_> {
    /// What was found; its positions are line numbers.
    pub fn finding(&self) -> Finding {
        self.finding
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parser = self.parser;
        write_finding(
            f,
            &self.finding,
            &TraceNames {
                object: &|object| match object {
                    TraceObject::Stream(s) => parser.streams.name(s.0),
                    TraceObject::Event(e) => parser.events.name(e.0),
                },
                site: &|site| parser.sites.name(site.0),
                allocator: &|a| parser.allocators.name(a.0),
            },
            |line| line,
        )
    }
}
