//! Checks stream/event trace files (one call per line; the format is in docs/trace-format.md)
//! and prints every defect with its line as it is found: leaks, double destroys, uses after
//! destroy, waits on events never recorded, records and launches on the wrong device, default
//! streams destroyed; memory races between streams where the trace has footprints (blocks
//! reused without an ordering edge, frees racing uses, uses after free, unordered writes and
//! reads); and the objects alive at the process's `exit`.
//!
//! Its command line, input and error display are `gpu_runtime::cli`'s (`--help` says it all).
//! Each file is one process's trace, checked on its own (the recorder writes one per
//! process). A trace is streamed line by line, comments dropped as they pass: memory is
//! bounded by the objects alive and the longest line allowed, not by the trace's length.

use std::ffi::OsString;
use std::io::{self, BufWriter, Read, Write};
use std::process::ExitCode;

use gpu_runtime::Error;
use gpu_runtime::cli::{
    ErrorBudget, LineReader, Located, ReadError, Shown, Stop, Tool, USAGE_ERROR,
};
use gpu_runtime::token::{Finding, Report, StreamingChecker, TraceObject};

const TOOL: Tool = Tool {
    name: "gpu-trace-check",
    usage: "gpu-trace-check [--alive-at-exit-is-defect] [--max-errors N] [--max-line-bytes N] FILE...",
    help: "\
Checks each FILE, one process's stream/event trace (docs/trace-format.md), on its own, and
prints each defect with its line as it is found (`-` reads standard input); where the trace
has memory footprints, memory races between streams too, each with its two operations.

options:
  --alive-at-exit-is-defect  count objects alive at the trace's `exit` as defects
  --max-errors N             report up to N lines not in the format per file, then stop
                             (default 20); findings after the first such line are not reported
  --max-line-bytes N         refuse (and skip) lines longer than N bytes before their comment
                             (default 1048576); comments may be of any length
  -h, --help                 print this help
  -V, --version              print the version

exit status: 0 every trace is clean, 1 one has defects, 2 one cannot be read or has lines not
in the format (or the command line is refused)
",
};

/// The exit status of a clean trace, of one with defects, of one not read or not parsed.
const CLEAN: u8 = 0;
const DEFECTS: u8 = 1;
const UNREADABLE: u8 = USAGE_ERROR;

/// What the command line asks for.
struct Options {
    alive_at_exit_is_defect: bool,
    max_errors: u64,
    max_line_bytes: usize,
    files: Vec<OsString>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            alive_at_exit_is_defect: false,
            max_errors: ErrorBudget::DEFAULT,
            max_line_bytes: 1 << 20,
            files: Vec::new(),
        }
    }
}

/// Prints findings as they come and counts them.
struct Printer<'o, W> {
    path: &'o str,
    out: &'o mut W,
    alive_at_exit_is_defect: bool,
    /// Set at the first line not in the format: what is found after it may be its consequence.
    muted: bool,
    written: io::Result<()>,
    defects: u64,
    streams_alive_at_exit: u64,
    events_alive_at_exit: u64,
}

fn main() -> ExitCode {
    let options = match parse(lexopt::Parser::from_env()) {
        Ok(options) => options,
        Err(stop) => return TOOL.stop(stop),
    };
    let mut out = BufWriter::new(io::stdout().lock());
    ExitCode::from(check_files(&options, &mut out, &mut io::stderr().lock()))
}

/// The options of the command line `args`.
fn parse(mut args: lexopt::Parser) -> Result<Options, Stop> {
    use lexopt::prelude::*;
    let mut options = Options::default();
    while let Some(arg) = args.next()? {
        match arg {
            Long("alive-at-exit-is-defect") => options.alive_at_exit_is_defect = true,
            Long("max-errors") => options.max_errors = args.value()?.parse()?,
            Long("max-line-bytes") => options.max_line_bytes = args.value()?.parse()?,
            Value(file) => options.files.push(file),
            other => return Err(TOOL.common(other)),
        }
    }
    if options.files.is_empty() {
        return Err(Stop::Refused(
            "no FILE given (`-` reads standard input)".into(),
        ));
    }
    if options.max_errors == 0 {
        return Err(Stop::Refused("--max-errors must be at least 1".into()));
    }
    Ok(options)
}

/// Checks each file on its own; the worst exit status.
fn check_files(options: &Options, out: &mut impl Write, err: &mut impl Write) -> u8 {
    options
        .files
        .iter()
        .map(|file| check_file(file, options, out, err))
        .fold(CLEAN, u8::max)
}

/// Checks one file (`-`: standard input); its exit status.
fn check_file(
    file: &OsString,
    options: &Options,
    out: &mut impl Write,
    err: &mut impl Write,
) -> u8 {
    let path = file.to_string_lossy();
    match gpu_runtime::cli::open(file) {
        Ok(input) => check(input, &path, options, out, err),
        Err(e) => {
            let _ = writeln!(err, "{}: cannot read {path}: {e}", TOOL.name);
            UNREADABLE
        }
    }
}

/// Prints an error about `path`'s line `line` on `err`, after the findings printed so far.
fn report(
    out: &mut impl Write,
    err: &mut impl Write,
    path: &str,
    line: u64,
    message: impl std::fmt::Display,
) {
    let _ = out.flush();
    let _ = writeln!(
        err,
        "{}: {}",
        TOOL.name,
        Located {
            file: path,
            line,
            message
        }
    );
}

/// Checks the trace read from `input`, printing each finding to `out` as it is found and each
/// line not in the format to `err`; the exit status.
fn check(
    input: impl Read,
    path: &str,
    options: &Options,
    out: &mut impl Write,
    err: &mut impl Write,
) -> u8 {
    let mut checker = StreamingChecker::new();
    let mut printer = Printer {
        path,
        out,
        alive_at_exit_is_defect: options.alive_at_exit_is_defect,
        muted: false,
        written: Ok(()),
        defects: 0,
        streams_alive_at_exit: 0,
        events_alive_at_exit: 0,
    };
    let mut first_error = None;
    let mut budget = ErrorBudget::new(options.max_errors);
    let mut reader = LineReader::new(input, options.max_line_bytes).with_comments(b'#');
    loop {
        let mut print = |report: Report<'_>| printer.print(report);
        let (line, error) = match reader.next_line() {
            Ok(None) => break,
            Ok(Some(line)) => match checker.check_line(line.text, &mut print) {
                Ok(()) => continue,
                Err(Error::TraceSyntax {
                    line,
                    expected,
                    found,
                }) => (
                    line as u64,
                    format!("expected {expected}, found {}", Shown(found.as_bytes())),
                ),
                Err(other) => (line.number, other.to_string()),
            },
            Err(ReadError::Io(e)) => {
                report(printer.out, err, path, 0, format_args!("cannot read: {e}"));
                return UNREADABLE;
            }
            Err(too_long @ ReadError::TooLong { line, .. }) => {
                // The checker counts the skipped line as a blank one, to keep its numbering.
                let _ = checker.check_line(b"", &mut print);
                (line, too_long.to_string())
            }
        };
        printer.muted = true;
        let first = *first_error.get_or_insert(line);
        if budget.take() {
            report(printer.out, err, path, line, error);
        }
        if budget.spent() {
            let stopped = format_args!(
                "stopped at line {line} after {} errors (--max-errors); findings after line \
                 {first} are not reported",
                budget.reported()
            );
            report(printer.out, err, path, 0, stopped);
            return UNREADABLE;
        }
    }
    if let Some(first) = first_error {
        let summary = format_args!(
            "{} line(s) not in the trace format; findings after line {first} are not reported",
            budget.reported()
        );
        report(printer.out, err, path, 0, summary);
        return UNREADABLE;
    }
    let calls = checker.finish(&mut |report| printer.print(report));
    match printer.summary(calls) {
        Ok(()) if printer.defects == 0 => CLEAN,
        Ok(()) => DEFECTS,
        Err(e) => {
            let _ = writeln!(err, "{}: cannot write the report: {e}", TOOL.name);
            UNREADABLE
        }
    }
}

impl<W: Write> Printer<'_, W> {
    /// Counts one finding and prints it (unless muted).
    fn print(&mut self, report: Report<'_>) {
        if self.muted {
            return;
        }
        match report.finding() {
            Finding::Defect(_) | Finding::Race(_) => self.defects += 1,
            Finding::AliveAtExit { object, .. } => {
                match object {
                    TraceObject::Stream(_) => self.streams_alive_at_exit += 1,
                    TraceObject::Event(_) => self.events_alive_at_exit += 1,
                }
                if self.alive_at_exit_is_defect {
                    self.defects += 1;
                }
            }
        }
        if self.written.is_ok() {
            self.written = writeln!(self.out, "{}: {report}", self.path);
        }
    }

    /// Writes the trace's last lines (objects alive at exit, the verdict), or the first
    /// failure to write.
    fn summary(&mut self, calls: u64) -> io::Result<()> {
        std::mem::replace(&mut self.written, Ok(()))?;
        let (path, out) = (self.path, &mut self.out);
        let counted = if self.alive_at_exit_is_defect {
            "counted as defects"
        } else {
            "not defects; --alive-at-exit-is-defect counts them"
        };
        for (count, kind) in [
            (self.streams_alive_at_exit, "stream"),
            (self.events_alive_at_exit, "event"),
        ] {
            if count > 0 {
                writeln!(out, "{path}: {count} {kind}(s) alive at exit ({counted})")?;
            }
        }
        if self.defects == 0 {
            writeln!(out, "{path}: {calls} calls, no defects")?;
        } else {
            writeln!(out, "{path}: {} defect(s) in {calls} calls", self.defects)?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit status, standard output and standard error of checking `text` as `t` (lines
    /// cut across reads are the line reader's tests, in `gpu_runtime::cli`).
    fn run_with(text: &[u8], options: &Options) -> (u8, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = check(text, "t", options, &mut out, &mut err);
        let text = |bytes| String::from_utf8(bytes).unwrap();
        (status, text(out), text(err))
    }

    fn run(text: &[u8], alive_at_exit_is_defect: bool) -> (u8, String, String) {
        let options = Options {
            alive_at_exit_is_defect,
            ..Options::default()
        };
        run_with(text, &options)
    }

    #[test]
    fn comments_and_a_last_line_without_break_are_read() {
        let text = b"stream_create s 0\nlaunch s 0   # tid=1\nstream_destroy s\nlaunch s";
        let (status, out, err) = run(text, false);
        assert_eq!((status, err.as_str()), (DEFECTS, ""), "{out}");
        assert_eq!(
            out,
            "t: line 4: stream `s` used after it was destroyed at line 3\n\
             t: 1 defect(s) in 4 calls\n"
        );
    }

    #[test]
    fn a_line_longer_than_the_buffer_is_read_whole() {
        let name = "n".repeat(200_000);
        let text = format!("stream_create {name} 0\nstream_destroy {name}\n");
        let (status, out, _) = run(text.as_bytes(), false);
        assert_eq!(status, CLEAN);
        assert_eq!(out, "t: 2 calls, no defects\n");
    }

    #[test]
    fn a_line_over_the_limit_is_an_error_naming_it_and_the_rest_is_still_parsed() {
        let options = Options {
            max_line_bytes: 20,
            ..Options::default()
        };
        let text = b"stream_create s 0   # a comment longer than the limit\n\
                     stream_create a_very_long_name 0\nstream_destroy s\nbad\n";
        let (status, out, err) = run_with(text, &options);
        assert_eq!((status, out.as_str()), (UNREADABLE, ""));
        assert_eq!(
            err,
            "gpu-trace-check: t:2: line longer than 20 bytes before its comment (skipped; \
             --max-line-bytes raises the limit)\n\
             gpu-trace-check: t:4: expected a call (stream_create, stream_default, \
             stream_destroy, stream_kind, event_create, event_destroy, event_record, \
             stream_wait_event, stream_synchronize, event_synchronize, device_synchronize, \
             stream_query, event_query, launch, copy, fill, peer_copy, mem_alloc, mem_free, \
             block_alloc, block_free, block_use, exit), found `bad`\n\
             gpu-trace-check: t: 2 line(s) not in the trace format; findings after line 2 are \
             not reported\n"
        );
    }

    #[test]
    fn objects_alive_at_exit_are_defects_only_when_asked() {
        let text = b"stream_create s 0\nevent_create e 0\nevent_create f 0\nexit\n";
        let (status, out, _) = run(text, false);
        assert_eq!(status, CLEAN);
        assert_eq!(
            out,
            "t: line 1: stream `s` created here is alive at exit\n\
             t: line 2: event `e` created here is alive at exit\n\
             t: line 3: event `f` created here is alive at exit\n\
             t: 1 stream(s) alive at exit (not defects; --alive-at-exit-is-defect counts them)\n\
             t: 2 event(s) alive at exit (not defects; --alive-at-exit-is-defect counts them)\n\
             t: 4 calls, no defects\n"
        );
        let (status, out, _) = run(text, true);
        assert_eq!(status, DEFECTS);
        assert!(out.ends_with(
            "t: 2 event(s) alive at exit (counted as defects)\nt: 3 defect(s) in 4 calls\n"
        ));
    }

    #[test]
    fn lines_not_in_the_format_are_each_reported_and_end_the_findings() {
        let text = b"launch s\nexit\nlaunch s\nlaunch t\n";
        let (status, out, err) = run(text, false);
        assert_eq!(status, UNREADABLE);
        assert_eq!(out, "t: line 1: stream `s` used but never created\n");
        assert_eq!(
            err,
            "gpu-trace-check: t:3: expected nothing after `exit` but comments and blank \
             lines, found `launch s`\n\
             gpu-trace-check: t:4: expected nothing after `exit` but comments and blank \
             lines, found `launch t`\n\
             gpu-trace-check: t: 2 line(s) not in the trace format; findings after line 3 are \
             not reported\n"
        );
    }

    #[test]
    fn reporting_stops_at_max_errors() {
        let options = Options {
            max_errors: 2,
            ..Options::default()
        };
        let (status, _, err) = run_with(b"a\nb\nc\nd\n", &options);
        assert_eq!(status, UNREADABLE);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 3, "{err}");
        assert!(lines[0].starts_with("gpu-trace-check: t:1: expected a call"));
        assert!(lines[1].starts_with("gpu-trace-check: t:2: expected a call"));
        assert_eq!(
            lines[2],
            "gpu-trace-check: t: stopped at line 2 after 2 errors (--max-errors); findings \
             after line 1 are not reported"
        );
    }

    #[test]
    fn each_file_is_checked_on_its_own_and_the_worst_status_wins() {
        let dir = std::env::temp_dir().join(format!("gpu-trace-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let clean = dir.join("clean.trace");
        let leaky = dir.join("leaky.trace");
        let broken = dir.join("broken.trace");
        std::fs::write(&clean, "stream_create s 0\nstream_destroy s\n").unwrap();
        // The same name in another process's trace is another object.
        std::fs::write(&leaky, "stream_destroy s\nstream_create s 0\n").unwrap();
        std::fs::write(&broken, "frobnicate\n").unwrap();
        let missing = dir.join("missing.trace");
        let files = [&clean, &leaky, &broken, &missing].map(|f| f.as_os_str().to_owned());
        let options = |files: &[OsString], alive_at_exit_is_defect| Options {
            alive_at_exit_is_defect,
            files: files.to_vec(),
            ..Options::default()
        };
        let (mut ignored, mut err) = (Vec::new(), Vec::new());
        for (n, worst) in [(1, CLEAN), (2, DEFECTS), (3, UNREADABLE)] {
            let status = check_files(&options(&files[..n], false), &mut ignored, &mut err);
            assert_eq!(status, worst);
        }
        let status = check_files(&options(&files[3..], false), &mut ignored, &mut err);
        assert_eq!(status, UNREADABLE);
        let status = check_files(&options(&files[..1], true), &mut ignored, &mut err);
        assert_eq!(status, CLEAN);
        let mut out = Vec::new();
        let status = check_files(&options(&files[..2], false), &mut out, &mut err);
        assert_eq!(status, DEFECTS);
        let out = String::from_utf8(out).unwrap();
        let (clean, leaky) = (clean.display(), leaky.display());
        assert_eq!(
            out,
            format!(
                "{clean}: 2 calls, no defects\n\
                 {leaky}: line 1: stream `s` used but never created\n\
                 {leaky}: line 2: stream `s` created here is never destroyed (leak)\n\
                 {leaky}: 2 defect(s) in 2 calls\n"
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_command_line_is_parsed_and_refused_with_reasons() {
        let parsed = |args: &[&str]| parse(lexopt::Parser::from_args(args.iter().copied()));
        let options = parsed(&["--max-errors", "3", "--max-line-bytes=64", "a", "-"]).unwrap();
        assert_eq!((options.max_errors, options.max_line_bytes), (3, 64));
        assert_eq!(options.files, ["a", "-"]);
        assert!(!options.alive_at_exit_is_defect);
        assert!(
            parsed(&["--alive-at-exit-is-defect", "a"])
                .unwrap()
                .alive_at_exit_is_defect
        );
        for (args, reason) in [
            (&[][..], "no FILE given"),
            (&["--max-errors", "0", "a"], "at least 1"),
            (&["--max-errors", "many", "a"], "invalid digit"),
            (&["--frob", "a"], "invalid option '--frob'"),
        ] {
            match parsed(args) {
                Err(Stop::Refused(e)) => assert!(e.to_string().contains(reason), "{e}"),
                _ => panic!("{args:?} accepted"),
            }
        }
        assert!(matches!(parsed(&["a", "--help"]), Err(Stop::Help)));
        assert!(matches!(parsed(&["-V"]), Err(Stop::Version)));
    }
}
