//! Checks stream/event trace files (one call per line; the format is in the README's "Trace
//! format" section) and prints every defect with its line as it is found: leaks, double
//! destroys, uses after destroy, waits on events never recorded, records and launches on the
//! wrong device, default streams destroyed; and the objects alive at the process's `exit`.
//!
//! Usage: `gpu-trace-check [--alive-at-exit-is-defect] FILE...` (`-` reads standard input).
//! Each file is one process's trace, checked on its own (the recorder writes one per
//! process). Exit status: 0 when every trace is clean, 1 when one has defects, 2 when one
//! cannot be read or parsed. A trace is read line by line: memory is bounded by the objects
//! alive, not by the trace's length.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::process::ExitCode;

use gpu_runtime::token::{Finding, Report, StreamingChecker, TraceObject};

const USAGE: &str = "usage: gpu-trace-check [--alive-at-exit-is-defect] FILE...   \
                     (FILE `-` reads standard input)";

/// The exit status of a clean trace, of one with defects, of one not read or not parsed.
const CLEAN: u8 = 0;
const DEFECTS: u8 = 1;
const UNREADABLE: u8 = 2;

/// What the printed findings add up to.
#[derive(Default)]
struct Tally {
    defects: u64,
    streams_alive_at_exit: u64,
    events_alive_at_exit: u64,
}

fn main() -> ExitCode {
    // Paths need not be Unicode: `args` would panic on one that is not.
    let mut files: Vec<OsString> = std::env::args_os().skip(1).collect();
    let alive_at_exit_is_defect = match files.iter().position(|a| a == "--alive-at-exit-is-defect")
    {
        Some(flag) => {
            files.remove(flag);
            true
        }
        None => false,
    };
    if files.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(UNREADABLE);
    }
    let mut out = BufWriter::new(io::stdout().lock());
    ExitCode::from(check_files(&files, alive_at_exit_is_defect, &mut out))
}

/// Checks each file on its own; the worst exit status.
fn check_files(files: &[OsString], alive_at_exit_is_defect: bool, out: &mut impl Write) -> u8 {
    files
        .iter()
        .map(|file| check_file(file, alive_at_exit_is_defect, out))
        .fold(CLEAN, u8::max)
}

/// Checks one file (`-`: standard input); its exit status.
fn check_file(file: &OsString, alive_at_exit_is_defect: bool, out: &mut impl Write) -> u8 {
    let path = file.to_string_lossy();
    let input: Box<dyn Read> = if file == "-" {
        Box::new(io::stdin().lock())
    } else {
        match File::open(file) {
            Ok(file) => Box::new(file),
            Err(e) => {
                let _ = out.flush();
                eprintln!("gpu-trace-check: cannot read {path}: {e}");
                return UNREADABLE;
            }
        }
    };
    match check(input, &path, alive_at_exit_is_defect, out) {
        Ok(status) => status,
        Err(message) => {
            // The findings printed so far come first.
            let _ = out.flush();
            eprintln!("gpu-trace-check: {message}");
            UNREADABLE
        }
    }
}

/// Checks the trace read from `input`, printing each finding to `out` as it is found.
fn check(
    mut input: impl Read,
    path: &str,
    alive_at_exit_is_defect: bool,
    out: &mut impl Write,
) -> Result<u8, String> {
    let mut checker = StreamingChecker::new();
    let mut tally = Tally::default();
    let mut written = Ok(());
    let mut print = |report: Report<'_>| {
        match report.finding() {
            Finding::Defect(_) => tally.defects += 1,
            Finding::AliveAtExit { object, .. } => {
                match object {
                    TraceObject::Stream(_) => tally.streams_alive_at_exit += 1,
                    TraceObject::Event(_) => tally.events_alive_at_exit += 1,
                }
                if alive_at_exit_is_defect {
                    tally.defects += 1;
                }
            }
        }
        if written.is_ok() {
            written = writeln!(out, "{path}: {report}");
        }
    };
    // The whole lines read are checked where they lie in the buffer; a line cut by the
    // buffer's end moves to its start before the next read (the buffer grows for a longer
    // line).
    let mut buffer = vec![0; 1 << 16];
    let mut filled = 0;
    loop {
        if filled == buffer.len() {
            buffer.resize(buffer.len() * 2, 0);
        }
        let read = loop {
            match input.read(&mut buffer[filled..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                read => break read.map_err(|e| format!("cannot read {path}: {e}"))?,
            }
        };
        let whole_lines = if read == 0 {
            // The last line needs no line break.
            filled
        } else {
            filled += read;
            buffer[..filled]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |newline| newline + 1)
        };
        checker
            .check_text(&buffer[..whole_lines], &mut print)
            .map_err(|e| format!("{path}: {e}"))?;
        if read == 0 {
            break;
        }
        buffer.copy_within(whole_lines..filled, 0);
        filled -= whole_lines;
    }
    let calls = checker.finish(&mut print);
    written.map_err(|e| format!("cannot write the report: {e}"))?;
    let counted = if alive_at_exit_is_defect {
        "counted as defects"
    } else {
        "not defects; --alive-at-exit-is-defect counts them"
    };
    let summary = |out: &mut dyn Write| -> io::Result<()> {
        for (count, kind) in [
            (tally.streams_alive_at_exit, "stream"),
            (tally.events_alive_at_exit, "event"),
        ] {
            if count > 0 {
                writeln!(out, "{path}: {count} {kind}(s) alive at exit ({counted})")?;
            }
        }
        if tally.defects == 0 {
            writeln!(out, "{path}: {calls} calls, no defects")?;
        } else {
            writeln!(out, "{path}: {} defect(s) in {calls} calls", tally.defects)?;
        }
        out.flush()
    };
    summary(out).map_err(|e| format!("cannot write the report: {e}"))?;
    Ok(if tally.defects == 0 { CLEAN } else { DEFECTS })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `step` bytes per read, to cut lines anywhere.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    fn run(
        text: &[u8],
        step: usize,
        alive_at_exit_is_defect: bool,
    ) -> (Result<u8, String>, String) {
        let mut out = Vec::new();
        let status = check(
            Trickle { bytes: text, step },
            "t",
            alive_at_exit_is_defect,
            &mut out,
        );
        (status, String::from_utf8(out).unwrap())
    }

    #[test]
    fn lines_cut_by_reads_and_a_last_line_without_break_are_read_whole() {
        let text = b"stream_create s 0\nlaunch s 0   # tid=1\nstream_destroy s\nlaunch s";
        for step in [1, 3, 7, 1 << 20] {
            let (status, out) = run(text, step, false);
            assert_eq!(status, Ok(1), "{out}");
            assert_eq!(
                out,
                "t: line 4: stream `s` used after it was destroyed at line 3\n\
                 t: 1 defect(s) in 4 calls\n"
            );
        }
    }

    #[test]
    fn a_line_longer_than_the_buffer_is_read_whole() {
        let name = "n".repeat(200_000);
        let text = format!("stream_create {name} 0\nstream_destroy {name}\n");
        let (status, out) = run(text.as_bytes(), 1 << 20, false);
        assert_eq!(status, Ok(0));
        assert_eq!(out, "t: 2 calls, no defects\n");
    }

    #[test]
    fn objects_alive_at_exit_are_defects_only_when_asked() {
        let text = b"stream_create s 0\nevent_create e 0\nevent_create f 0\nexit\n";
        let (status, out) = run(text, 5, false);
        assert_eq!(status, Ok(0));
        assert_eq!(
            out,
            "t: line 1: stream `s` created here is alive at exit\n\
             t: line 2: event `e` created here is alive at exit\n\
             t: line 3: event `f` created here is alive at exit\n\
             t: 1 stream(s) alive at exit (not defects; --alive-at-exit-is-defect counts them)\n\
             t: 2 event(s) alive at exit (not defects; --alive-at-exit-is-defect counts them)\n\
             t: 4 calls, no defects\n"
        );
        let (status, out) = run(text, 5, true);
        assert_eq!(status, Ok(1));
        assert!(out.ends_with(
            "t: 2 event(s) alive at exit (counted as defects)\nt: 3 defect(s) in 4 calls\n"
        ));
    }

    #[test]
    fn a_line_not_in_the_format_stops_the_check_after_what_was_found() {
        let text = b"launch s\nexit\nlaunch s\n";
        let (status, out) = run(text, 4, false);
        assert_eq!(
            status,
            Err(
                "t: trace line 3: expected nothing after `exit` but comments and blank lines, \
                 found `launch s`"
                    .to_string()
            )
        );
        assert_eq!(out, "t: line 1: stream `s` used but never created\n");
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
        let mut ignored = Vec::new();
        for (n, worst) in [(1, CLEAN), (2, DEFECTS), (3, UNREADABLE)] {
            assert_eq!(check_files(&files[..n], false, &mut ignored), worst);
        }
        assert_eq!(check_files(&files[3..], false, &mut ignored), UNREADABLE);
        assert_eq!(check_files(&files[..1], true, &mut ignored), CLEAN);
        let mut out = Vec::new();
        assert_eq!(check_files(&files[..2], false, &mut out), DEFECTS);
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
}
