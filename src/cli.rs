//! What this crate's command-line tools share: the command line (`--help`, `--version`,
//! refusals with a usage line), reading a path or `-` as bounded lines, and showing errors.
//!
//! Every tool of the crate (`gpu-trace-check`, and each later one) is built on this module, so
//! they behave alike:
//!
//! - [`Tool`] names the tool and holds its usage line and help; the tool parses its own
//!   options with [`lexopt`] and hands every argument it does not know to [`Tool::common`],
//!   which answers `--help`/`-h` and `--version`/`-V` and refuses anything else. [`Tool::stop`]
//!   prints what a [`Stop`] calls for and gives the exit status: 0 after help or version,
//!   [`USAGE_ERROR`] (2) after a refusal, with the usage line.
//! - [`open`] opens a path, or standard input for `-`; [`LineReader`] reads it line by line
//!   in time linear in the input, holding at most one line (comments dropped while streaming)
//!   of at most a set length: a longer line is an error naming it, and reading goes on after it.
//! - [`Located`] shows an error as `FILE:LINE: message`, and [`Shown`] shows a field of the
//!   input in it: shortened when long, with invisible characters (a byte-order mark, control
//!   characters, invalid UTF-8) written out.
//! - [`ErrorBudget`] counts the errors a tool reports, to stop at a set number
//!   (`--max-errors`) rather than at the first.
//!
//! A tool's `main` (lexopt comes re-exported, so a tool of another crate needs no dependency of
//! its own):
//!
//! ```no_run
//! use std::process::ExitCode;
//! use gpu_runtime::cli::{Stop, Tool, lexopt};
//!
//! const TOOL: Tool = Tool {
//!     name: "my-tool",
//!     usage: "my-tool [--verbose] FILE...",
//!     help: "Does something to each FILE (`-`: standard input).\n",
//! };
//!
//! fn parse() -> Result<(bool, Vec<std::ffi::OsString>), Stop> {
//!     use lexopt::prelude::*;
//!     let (mut verbose, mut files) = (false, Vec::new());
//!     let mut args = lexopt::Parser::from_env();
//!     while let Some(arg) = args.next()? {
//!         match arg {
//!             Long("verbose") => verbose = true,
//!             Value(file) => files.push(file),
//!             other => return Err(TOOL.common(other)),
//!         }
//!     }
//!     Ok((verbose, files))
//! }
//!
//! fn main() -> ExitCode {
//!     let (verbose, files) = match parse() {
//!         Ok(parsed) => parsed,
//!         Err(stop) => return TOOL.stop(stop),
//!     };
//!     // ... open each file with `gpu_runtime::cli::open`, read it with `LineReader` ...
//!     ExitCode::SUCCESS
//! }
//! ```

use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::process::ExitCode;

pub use lexopt;

/// The exit status of a command line refused (an unknown option, a missing or bad value), and
/// by this crate's tools' convention of an input that cannot be read or parsed.
pub const USAGE_ERROR: u8 = 2;

/// A command-line tool's name, usage line and help.
#[derive(Clone, Copy, Debug)]
pub struct Tool {
    /// The program's name, as users type it.
    pub name: &'static str,
    /// Its usage line, without the leading `usage: `.
    pub usage: &'static str,
    /// What `--help` prints after the usage line: what the tool does, its options, its exit
    /// statuses (ends with a line break).
    pub help: &'static str,
}

/// Why a command line stops before the tool runs.
#[derive(Debug)]
pub enum Stop {
    /// `--help` or `-h`: print the help, exit 0.
    Help,
    /// `--version` or `-V`: print the version, exit 0.
    Version,
    /// The arguments are refused: print why and the usage line, exit [`USAGE_ERROR`].
    Refused(lexopt::Error),
}

impl From<lexopt::Error> for Stop {
    fn from(error: lexopt::Error) -> Self {
        Stop::Refused(error)
    }
}

impl Tool {
    /// What an argument the tool does not take itself stops with: help, version, or a refusal
    /// naming it (an unknown option, or a value where none is taken).
    pub fn common(&self, arg: lexopt::Arg<'_>) -> Stop {
        match arg {
            lexopt::Arg::Long("help") | lexopt::Arg::Short('h') => Stop::Help,
            lexopt::Arg::Long("version") | lexopt::Arg::Short('V') => Stop::Version,
            other => Stop::Refused(other.unexpected()),
        }
    }

    /// Prints what `stop` calls for (help and version on standard output, a refusal with the
    /// usage line on standard error) and returns the exit status.
    pub fn stop(&self, stop: Stop) -> ExitCode {
        let mut out = io::stdout().lock();
        let mut err = io::stderr().lock();
        ExitCode::from(self.stop_to(stop, &mut out, &mut err))
    }

    /// [`Tool::stop`], writing to `out` and `err`; the exit status.
    fn stop_to(&self, stop: Stop, out: &mut impl Write, err: &mut impl Write) -> u8 {
        // A closed standard output or error leaves nothing to report to.
        let _ = match stop {
            Stop::Help => write!(out, "usage: {}\n\n{}", self.usage, self.help),
            Stop::Version => writeln!(out, "{} {}", self.name, env!("CARGO_PKG_VERSION")),
            Stop::Refused(ref error) => writeln!(
                err,
                "{}: {error}\nusage: {}\n(`{} --help` says more)",
                self.name, self.usage, self.name
            ),
        };
        match stop {
            Stop::Help | Stop::Version => 0,
            Stop::Refused(_) => USAGE_ERROR,
        }
    }
}

/// Opens `path` for reading; `-` is standard input.
pub fn open(path: &OsStr) -> io::Result<Box<dyn Read>> {
    if path == "-" {
        Ok(Box::new(io::stdin().lock()))
    } else {
        Ok(Box::new(File::open(path)?))
    }
}

/// One line read by a [`LineReader`].
#[derive(Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// Its number, from 1 (every line counts: blank, comment and too long ones too).
    pub number: u64,
    /// Its bytes, without the line break and without the comment.
    pub text: &'a [u8],
}

/// Why a [`LineReader`] could not give the next line.
#[derive(Debug)]
pub enum ReadError {
    /// The input failed.
    Io(io::Error),
    /// The line, without its comment, is longer than the reader's limit. It is skipped: the
    /// next call gives the line after it.
    TooLong {
        /// The line's number.
        line: u64,
        /// The limit, in bytes.
        limit: usize,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(error) => write!(f, "cannot read: {error}"),
            ReadError::TooLong { limit, .. } => write!(
                f,
                "line longer than {limit} bytes before its comment (skipped; \
                 --max-line-bytes raises the limit)"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads lines from an input in time linear in its length, holding at most one line: every
/// byte is searched for a line break once (a line cut across reads is not searched again), a
/// comment (from the comment byte to the line's end) is dropped as it streams past, and a line
/// longer than the limit is refused and skipped. Its buffer is at most the larger of 64 KiB
/// and twice the limit ([`LineReader::capacity`]), whatever the input holds.
pub struct LineReader<R> {
    input: R,
    buffer: Vec<u8>,
    /// Where the current line starts in `buffer`.
    start: usize,
    /// The end of the bytes read into `buffer`.
    end: usize,
    /// How far the current line has been searched.
    scanned: usize,
    /// Where the current line's comment starts, once found (what follows is dropped).
    comment_at: Option<usize>,
    /// The current line was refused as too long: drop everything up to its break.
    skipping: bool,
    eof: bool,
    /// The number of the last line given (or refused).
    line: u64,
    limit: usize,
    comment: Option<u8>,
    /// Bytes searched for a break or comment, and bytes moved to the buffer's start: each at
    /// most the input's length (the reader's tests check it).
    searched: u64,
    moved: u64,
}

impl<R: Read> LineReader<R> {
    /// The buffer's size before any line needs more.
    pub const INITIAL_CAPACITY: usize = 1 << 16;

    /// A reader of `input` refusing lines longer than `limit` bytes, without comments.
    pub fn new(input: R, limit: usize) -> Self {
        LineReader {
            input,
            buffer: vec![0; Self::INITIAL_CAPACITY],
            start: 0,
            end: 0,
            scanned: 0,
            comment_at: None,
            skipping: false,
            eof: false,
            line: 0,
            limit,
            comment: None,
            searched: 0,
            moved: 0,
        }
    }

    /// The same reader, dropping each line's comment: from `byte` (outside any quoting: the
    /// reader knows none) to the line's end.
    pub fn with_comments(mut self, byte: u8) -> Self {
        self.comment = Some(byte);
        self
    }

    /// The buffer's size now: the reader's memory.
    pub fn capacity(&self) -> usize {
        self.buffer.len()
    }

    /// The next line (`None` at the end of the input). A last line without a break is a line.
    pub fn next_line(&mut self) -> Result<Option<Line<'_>>, ReadError> {
        loop {
            let hay = &self.buffer[self.scanned..self.end];
            let hit = match self.comment {
                Some(comment) if self.comment_at.is_none() && !self.skipping => {
                    memchr::memchr2(b'\n', comment, hay)
                }
                _ => memchr::memchr(b'\n', hay),
            };
            self.searched += hit.map_or(hay.len(), |found| found + 1) as u64;
            if let Some(found) = hit {
                let at = self.scanned + found;
                self.scanned = at + 1;
                if self.buffer[at] != b'\n' {
                    self.comment_at = Some(at);
                    continue;
                }
                let (start, content_end) = (self.start, self.comment_at.unwrap_or(at));
                self.start = at + 1;
                self.comment_at = None;
                if std::mem::take(&mut self.skipping) {
                    continue;
                }
                return self.give(start, content_end);
            }
            // Nothing after a comment's start, or in a skipped line, is kept.
            if self.skipping {
                self.end = self.start;
            } else if let Some(comment_at) = self.comment_at {
                self.end = comment_at;
            }
            self.scanned = self.end;
            if !self.skipping && self.end - self.start > self.limit {
                self.skipping = true;
                self.end = self.start;
                self.scanned = self.start;
                self.comment_at = None;
                self.line += 1;
                return Err(ReadError::TooLong {
                    line: self.line,
                    limit: self.limit,
                });
            }
            if self.eof {
                if self.skipping || (self.start == self.end && self.comment_at.is_none()) {
                    return Ok(None);
                }
                let start = self.start;
                let content_end = self.comment_at.take().unwrap_or(self.end);
                self.start = self.end;
                return self.give(start, content_end);
            }
            self.fill().map_err(ReadError::Io)?;
        }
    }

    /// Counts the line that `start..content_end` holds and gives it, or refuses it when it is
    /// longer than the limit (it came whole in one read).
    fn give(&mut self, start: usize, content_end: usize) -> Result<Option<Line<'_>>, ReadError> {
        self.line += 1;
        if content_end - start > self.limit {
            return Err(ReadError::TooLong {
                line: self.line,
                limit: self.limit,
            });
        }
        Ok(Some(Line {
            number: self.line,
            text: &self.buffer[start..content_end],
        }))
    }

    /// Reads more input after `end`, first moving the current line to the buffer's start or
    /// growing the buffer when it is full.
    fn fill(&mut self) -> io::Result<()> {
        if self.end == self.buffer.len() {
            if self.start > 0 {
                self.buffer.copy_within(self.start..self.end, 0);
                self.moved += (self.end - self.start) as u64;
                let shift = self.start;
                self.start = 0;
                self.end -= shift;
                self.scanned -= shift;
                self.comment_at = self.comment_at.map(|at| at - shift);
            } else {
                // Only a line within the limit fills the buffer: at most twice the limit.
                self.buffer.resize(self.buffer.len() * 2, 0);
            }
        }
        loop {
            match self.input.read(&mut self.buffer[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(read) => self.end += read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            return Ok(());
        }
    }
}

/// An error shown as `FILE:LINE: message` (a line number of 0 leaves the line out).
pub struct Located<'a, M> {
    /// The file, as given on the command line (`-`: standard input).
    pub file: &'a str,
    /// The line, from 1.
    pub line: u64,
    /// What is wrong there.
    pub message: M,
}

impl<M: fmt::Display> fmt::Display for Located<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

/// A field of the input as an error message shows it: between backticks, at most
/// [`Shown::MAX_CHARS`] characters (then `...` and the field's length), with a backslash, the
/// control characters, the invisible ones (a byte-order mark, zero-width and non-breaking
/// spaces, direction marks) as `\u{...}` escapes (`\t`, `\r`, `\n` as such), and bytes that
/// are not UTF-8 as `\xNN`.
pub struct Shown<'a>(pub &'a [u8]);

impl Shown<'_> {
    /// The most characters shown of a field.
    pub const MAX_CHARS: usize = 60;
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("`")?;
        let mut shown = 0;
        let mut cut = false;
        'chunks: for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                if shown == Self::MAX_CHARS {
                    cut = true;
                    break 'chunks;
                }
                shown += 1;
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '\t' => f.write_str("\\t")?,
                    '\r' => f.write_str("\\r")?,
                    '\n' => f.write_str("\\n")?,
                    c if c.is_control() || invisible(c) => write!(f, "\\u{{{:x}}}", c as u32)?,
                    c => write!(f, "{c}")?,
                }
            }
            for byte in chunk.invalid() {
                if shown == Self::MAX_CHARS {
                    cut = true;
                    break 'chunks;
                }
                shown += 1;
                write!(f, "\\x{byte:02x}")?;
            }
        }
        if cut {
            write!(f, "...` ({} bytes)", self.0.len())
        } else {
            f.write_str("`")
        }
    }
}

/// Characters that print as nothing or as a plain space: they would make a field look like
/// another.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{a0}' | '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}'
        | '\u{17b5}' | '\u{180b}'..='\u{180f}' | '\u{2000}'..='\u{200f}' | '\u{2028}'..='\u{202f}'
        | '\u{205f}'..='\u{206f}' | '\u{3000}' | '\u{3164}' | '\u{fe00}'..='\u{fe0f}'
        | '\u{feff}' | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}' | '\u{e0000}'..='\u{e0fff}')
}

/// How many errors a tool reports before it stops (`--max-errors`).
#[derive(Clone, Copy, Debug)]
pub struct ErrorBudget {
    max: u64,
    reported: u64,
}

impl ErrorBudget {
    /// The default of this crate's tools' `--max-errors`.
    pub const DEFAULT: u64 = 20;

    /// A budget of `max` errors (at least one is always reported).
    pub fn new(max: u64) -> Self {
        ErrorBudget {
            max: max.max(1),
            reported: 0,
        }
    }

    /// Counts one error; whether it may still be reported (false once `max` were).
    pub fn take(&mut self) -> bool {
        self.reported += 1;
        self.reported <= self.max
    }

    /// Whether the budget is spent: the tool stops reading.
    pub fn spent(&self) -> bool {
        self.reported >= self.max
    }

    /// How many errors were counted.
    pub fn reported(&self) -> u64 {
        self.reported
    }
}

#[cfg(test)]
mod tests;
