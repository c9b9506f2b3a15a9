//! The streaming trace checker against the in-memory one, and its memory: bounded by the
//! objects alive, not by the trace's length.

use gpu_core::token::synthetic::SyntheticTrace;
use gpu_core::token::{Checker, Finding, StreamingChecker, parse_trace};

/// Every finding of `text` as the streaming checker prints it, fed `chunk` lines at a time.
fn streamed(checker: &mut StreamingChecker, text: &str, chunk: usize) -> Vec<String> {
    let mut printed = Vec::new();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for group in lines.chunks(chunk) {
        checker
            .check_text(group.concat().as_bytes(), &mut |report| {
                printed.push(report.to_string())
            })
            .unwrap();
    }
    printed
}

const DEFECTIVE: &str = "\
stream_default legacy.1 0
stream_create s 0
event_create e 1
stream_wait_event s e         # wait before record
event_record e s              # other device
launch s 1                    # other device
stream_destroy s
launch s 0                    # after destroy
stream_destroy s              # twice
stream_destroy legacy.1       # a default stream
launch nobody                 # never created
stream_create s 0
stream_create s 0             # while alive
event_query e
stream_create leaked 0
";

#[test]
fn streaming_reports_what_the_in_memory_checker_reports() {
    let parsed = parse_trace(DEFECTIVE).unwrap();
    let expected: Vec<String> = parsed
        .check()
        .iter()
        .map(|d| parsed.describe(d).to_string())
        .collect();
    assert_eq!(expected.len(), 11, "{expected:#?}");
    for chunk in [1, 2, 100] {
        let mut checker = StreamingChecker::new();
        let mut printed = streamed(&mut checker, DEFECTIVE, chunk);
        let calls = checker.finish(&mut |report| printed.push(report.to_string()));
        assert_eq!(printed, expected);
        assert_eq!(calls, parsed.ops.len() as u64);
    }
}

#[test]
fn streaming_reports_objects_alive_at_exit_in_order_of_creation() {
    let text = "stream_create s 0\nevent_create e 0\nstream_default d 0\nexit\n# done\n";
    let mut checker = StreamingChecker::new();
    let mut found = Vec::new();
    checker
        .check_text(text.as_bytes(), &mut |report| {
            found.push((report.finding(), report.to_string()))
        })
        .unwrap();
    checker.finish(&mut |report| found.push((report.finding(), report.to_string())));
    let messages: Vec<&str> = found.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(
        messages,
        vec![
            "line 1: stream `s` created here is alive at exit",
            "line 2: event `e` created here is alive at exit",
        ]
    );
    assert!(
        found
            .iter()
            .all(|(f, _)| matches!(f, Finding::AliveAtExit { .. }))
    );
}

/// The most names held and objects tracked while checking a synthetic trace of `calls`
/// calls, and how many distinct names the trace had.
fn peak_memory(calls: u64, remembered: usize) -> (usize, usize, usize, u64) {
    let mut trace = SyntheticTrace::new(7, calls);
    let mut checker = StreamingChecker::remembering(remembered);
    let (mut names, mut tracked) = (0, 0);
    let mut distinct = std::collections::HashSet::new();
    let mut line = String::new();
    let mut defects = 0;
    while trace.next_line(&mut line) {
        if let Some(name) = line.split_whitespace().nth(1)
            && !line.starts_with('#')
        {
            distinct.insert(name.to_string());
        }
        line.push('\n');
        checker
            .check_text(line.as_bytes(), &mut |report| {
                if matches!(report.finding(), Finding::Defect(_)) {
                    defects += 1;
                }
            })
            .unwrap();
        names = names.max(checker.names_held());
        tracked = tracked.max(checker.tracked());
    }
    assert_eq!(defects, 0, "the synthetic trace is clean");
    let calls = checker.calls();
    (names, tracked, distinct.len(), calls)
}

#[test]
fn a_ten_times_longer_trace_needs_no_more_memory() {
    const REMEMBERED: usize = 64;
    let bound = SyntheticTrace::MAX_ALIVE + 2 * REMEMBERED;
    let short = peak_memory(20_000, REMEMBERED);
    let long = peak_memory(200_000, REMEMBERED);
    assert!(long.3 >= 10 * (short.3 - 100), "{short:?} {long:?}");
    // Names and tracked objects stay within the live set plus the remembered destroys...
    for (names, tracked, ..) in [short, long] {
        assert!(names <= bound && tracked <= bound, "{short:?} {long:?}");
    }
    // ... though the long trace names many more objects than that (short-lived streams get
    // fresh handles), so keeping every name would exceed it.
    assert!(long.2 > 10 * bound, "{long:?}");
    // The short trace already fills the memory of destroys: the long one holds no more.
    assert!(
        long.0 <= short.0 + 8 && long.1 <= short.1 + 8,
        "{short:?} {long:?}"
    );
}

#[test]
fn the_default_memory_bound_holds_too() {
    let (names, tracked, ..) = peak_memory(30_000, Checker::REMEMBERED_DESTROYS);
    let bound = SyntheticTrace::MAX_ALIVE + 2 * Checker::REMEMBERED_DESTROYS;
    assert!(names <= bound && tracked <= bound);
}

#[test]
fn a_line_not_in_the_format_leaves_the_line_checker_ready_for_the_next() {
    let mut checker = StreamingChecker::new();
    let mut found = Vec::new();
    let mut errors = Vec::new();
    let lines: [&[u8]; 6] = [
        b"stream_create s 0",
        b"",
        b"stream_create t",
        b"frobnicate s",
        b"stream_destroy s\nlaunch s",
        b"launch t",
    ];
    for line in lines {
        if let Err(error) = checker.check_line(line, &mut |r| found.push(r.to_string())) {
            errors.push(error.to_string());
        }
    }
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains("trace line 3: expected a device number"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("trace line 4: expected a call"),
        "{errors:?}"
    );
    // Only the first line break's line is read; the malformed lines named nothing.
    let calls = checker.finish(&mut |r| found.push(r.to_string()));
    assert_eq!(calls, 3);
    assert_eq!(found, ["line 6: stream `t` used but never created"]);
}
