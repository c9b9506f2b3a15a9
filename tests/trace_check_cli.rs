//! The `gpu-trace-check` program on the trace format guide's example and on clean, defective and
//! malformed traces, and its command line: its messages and exit status.

mod common;

use std::process::{Command, Output};

fn run_on(trace: &str) -> Output {
    run_with(&["-"], trace.as_bytes())
}

/// The program run with `args`, `input` written to its standard input.
fn run_with(args: &[&str], input: &[u8]) -> Output {
    common::run_with(env!("CARGO_BIN_EXE_gpu-trace-check"), args, input)
}

/// The example trace of the trace format guide (docs/trace-format.md), read from the guide.
fn guide_example() -> String {
    let guide = include_str!("../docs/trace-format.md");
    let start = guide
        .find("# join.trace")
        .expect("the guide has the example");
    let end = guide[start..].find("```").expect("the example block ends") + start;
    guide[start..end].to_string()
}

#[test]
fn the_guide_example_reports_the_leaked_join_inputs() {
    let output = run_on(&guide_example());
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout,
        "-: line 2: stream `s1` created here is never destroyed (leak)\n\
         -: line 4: stream `s2` created here is never destroyed (leak)\n\
         -: 2 defect(s) in 15 calls\n"
    );
}

#[test]
fn a_clean_trace_exits_zero() {
    let output = run_on("stream_create s 0\nlaunch s 0\nstream_destroy s\n");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "-: 3 calls, no defects\n"
    );
}

#[test]
fn a_malformed_trace_exits_two_naming_the_line() {
    let output = run_on("stream_create s 0\nstream_wait_event s\n");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with(
            "gpu-trace-check: -:2: expected an event name, found `stream_wait_event s`\n"
        ),
        "{stderr}"
    );
}

#[cfg(unix)]
#[test]
fn a_path_that_is_not_unicode_is_a_read_error_not_a_panic() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    let path = OsStr::from_bytes(b"no-such-trace-\xff.trace");
    let output = Command::new(env!("CARGO_BIN_EXE_gpu-trace-check"))
        .arg(path)
        .output()
        .expect("the program runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with("gpu-trace-check: cannot read no-such-trace-\u{fffd}.trace: "),
        "{stderr}"
    );
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

#[test]
fn help_and_version_print_and_exit_zero() {
    let help = run_with(&["--help"], b"");
    assert_eq!(help.status.code(), Some(0));
    let help = text(help.stdout);
    assert!(
        help.starts_with("usage: gpu-trace-check [--alive-at-exit-is-defect]"),
        "{help}"
    );
    assert!(help.contains("--max-errors N"), "{help}");
    let version = run_with(&["--version"], b"");
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(
        text(version.stdout),
        format!("gpu-trace-check {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn an_unknown_flag_is_refused_with_the_usage_line() {
    let output = run_with(&["--frobnicate", "-"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = text(output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines[0], "gpu-trace-check: invalid option '--frobnicate'");
    assert!(lines[1].starts_with("usage: gpu-trace-check "), "{stderr}");
    // No file at all is refused the same way.
    let output = run_with(&[], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(text(output.stderr).contains("no FILE given"));
}

#[test]
fn a_byte_order_mark_is_shown_visibly() {
    let output = run_with(
        &["-"],
        "\u{feff}stream_create s 0\nstream_destroy s\n".as_bytes(),
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(output.stderr);
    assert!(
        stderr
            .starts_with("gpu-trace-check: -:1: expected a call (stream_create, stream_default, "),
        "{stderr}"
    );
    assert!(
        stderr.contains(", found `\\u{feff}stream_create`\n"),
        "{stderr}"
    );
}

#[test]
fn several_syntax_errors_are_reported_up_to_max_errors() {
    let trace = "stream_create s\nstream_create t 0\nlaunch t x\nevent_record e\nfrob\n";
    let output = run_with(&["-"], trace.as_bytes());
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(output.stderr);
    let located: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("gpu-trace-check: -:"))
        .map(|rest| &rest[..1])
        .filter(|line| line != &" ")
        .collect();
    assert_eq!(located, ["1", "3", "4", "5"], "{stderr}");
    assert!(stderr.ends_with(
        "gpu-trace-check: -: 4 line(s) not in the trace format; findings after line 1 are not \
         reported\n"
    ));
    let output = run_with(&["--max-errors", "2", "-"], trace.as_bytes());
    let stderr = text(output.stderr);
    assert_eq!(stderr.lines().count(), 3, "{stderr}");
    assert!(
        stderr.contains("stopped at line 3 after 2 errors (--max-errors)"),
        "{stderr}"
    );
}

#[test]
fn a_huge_comment_line_and_a_long_line_stream_through_a_pipe() {
    // 64 MiB of comment (the reader's unit tests check its buffer stays at 64 KiB), and a
    // 2 MiB name: refused by default, read with a higher limit.
    let mut trace = b"stream_create s 0\n# ".to_vec();
    trace.resize(trace.len() + (64 << 20), b'c');
    let name = "n".repeat(2 << 20);
    trace.extend_from_slice(format!("\nstream_destroy s\nstream_create {name} 0\n").as_bytes());
    let output = run_with(&["-"], &trace);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(output.stderr);
    assert!(
        stderr.starts_with("gpu-trace-check: -:4: line longer than 1048576 bytes"),
        "{stderr}"
    );
    let output = run_with(&["--max-line-bytes", "4000000", "-"], &trace);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(output.stdout);
    assert!(stdout.ends_with("-: 1 defect(s) in 3 calls\n"), "{stdout}");
}
