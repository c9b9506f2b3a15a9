//! The `gpu-trace-check` program on the trace format guide's example and on clean, defective and
//! malformed traces: its messages and exit status.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn run_on(trace: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-trace-check"))
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(trace.as_bytes())
        .expect("the trace is written");
    child.wait_with_output().expect("the program ends")
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
        stderr.contains("trace line 2: expected an event name"),
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
