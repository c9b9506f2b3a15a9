//! The `gpu-alloc-replay` program on the format guide's example and on malformed traces, and
//! its command line (the shared conventions of `gpu_runtime::cli`): messages and exit status.

mod common;

use std::process::Output;

/// The program run with `args`, `input` written to its standard input.
fn run_with(args: &[&str], input: &[u8]) -> Output {
    common::run_with(env!("CARGO_BIN_EXE_gpu-alloc-replay"), args, input)
}

/// The example trace of the format guide (docs/alloc-trace-format.md), read from the guide.
fn guide_example() -> String {
    let guide = include_str!("../docs/alloc-trace-format.md");
    let start = guide
        .find("```text\n# gpu-alloc-trace 1")
        .expect("the guide has the example")
        + "```text\n".len();
    let end = guide[start..].find("```").expect("the example block ends") + start;
    guide[start..end].to_string()
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("UTF-8 output")
}

#[test]
fn the_guide_example_replays_under_each_configuration_from_standard_input() {
    let output = run_with(
        &[
            "--config",
            "default",
            "--config",
            "tight:max_split_size=none,release_before_growing=1",
            "--json",
            "-",
        ],
        guide_example().as_bytes(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(output.stderr));
    let stdout = text(output.stdout);
    assert!(
        stdout.contains("\"default\"") && stdout.contains("\"tight\""),
        "{stdout}"
    );
    // The 4 MiB and the 1,000-byte allocations are live together at the peak, in each report.
    assert_eq!(
        stdout.matches("\"peak_requested\": 4195304").count(),
        2,
        "{stdout}"
    );
}

#[test]
fn help_and_version_answer_and_exit_zero() {
    let help = run_with(&["--help"], b"");
    assert_eq!(help.status.code(), Some(0));
    let help = text(help.stdout);
    assert!(
        help.starts_with("usage: gpu-alloc-replay") && help.contains("--config"),
        "{help}"
    );
    let version = run_with(&["-V"], b"");
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(
        text(version.stdout),
        format!("gpu-alloc-replay {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn an_unknown_option_a_bad_config_or_no_file_is_refused_with_the_usage_line() {
    for args in [
        &["--frobnicate", "-"][..],
        &["--config", "x:no_such_key=1", "-"],
        &[],
    ] {
        let output = run_with(args, b"");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = text(output.stderr);
        assert!(
            stderr.contains("usage: gpu-alloc-replay"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn lines_not_in_the_format_are_named_by_file_and_line_up_to_max_errors() {
    let trace =
        "# gpu-alloc-trace 1\nalloc 1 0 0 64\nfree one\n\u{feff}alloc 2 0 0 64\nfree 1\nuse\n";
    let output = run_with(&["-"], trace.as_bytes());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        output.stdout.is_empty(),
        "no report for a trace with errors"
    );
    let stderr = text(output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].starts_with("gpu-alloc-replay: -:3: expected "),
        "{stderr}"
    );
    // The byte-order mark is shown, not printed invisibly.
    assert!(
        lines[1].starts_with("gpu-alloc-replay: -:4: ")
            && lines[1].contains("`\\xef\\xbb\\xbfalloc`"),
        "{stderr}"
    );
    assert!(lines[2].starts_with("gpu-alloc-replay: -:6: "), "{stderr}");
    assert!(lines[3].contains("3 line(s) not in the format"), "{stderr}");
    // Two at most: the reading stops at the second.
    let two = text(run_with(&["--max-errors", "2", "-"], trace.as_bytes()).stderr);
    assert_eq!(two.lines().count(), 3, "{two}");
    assert!(two.contains("2 line(s) not in the format"), "{two}");
}
