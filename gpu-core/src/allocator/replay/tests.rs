//! The replay's line format and its figures: errors naming line and field, failures under a
//! cap, and random traces against a plain model of live bytes.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use proptest::prelude::*;

use super::*;

fn replay(text: &str, cap: Option<usize>) -> Result<Vec<ReplayReport>> {
    let mut replay = Replay::new(Vec::new(), cap);
    for line in text.lines() {
        replay.feed_line(line.as_bytes())?;
    }
    Ok(replay.finish())
}

fn error_at(text: &str) -> (usize, &'static str, String) {
    match replay(text, None) {
        Err(Error::TraceSyntax {
            line,
            expected,
            found,
        }) => (line, expected, found),
        other => panic!("{text:?} gave {other:?}"),
    }
}

#[test]
fn lines_parse_into_events_and_comments_are_skipped() {
    assert_eq!(
        parse_line(b"alloc 7 1 - 4096 # a comment\r", 1),
        Ok(Some(TraceEvent::Alloc {
            id: 7,
            device: 1,
            stream: None,
            size: 4096
        }))
    );
    assert_eq!(
        parse_line(b"free 7 -", 2),
        Ok(Some(TraceEvent::Free {
            id: 7,
            stream: Some(None)
        }))
    );
    assert_eq!(
        parse_line(b"\tuse 7 3", 3),
        Ok(Some(TraceEvent::Use { id: 7, stream: 3 }))
    );
    assert_eq!(parse_line(TRACE_HEADER.as_bytes(), 1), Ok(None));
    assert_eq!(parse_line(b"   ", 1), Ok(None));
}

#[test]
fn bad_lines_name_their_line_and_field_with_invisible_bytes_shown() {
    let (line, expected, found) = error_at("alloc 1 0 0 64\nalloc 2 0 0 6\u{200b}4");
    assert_eq!(line, 2);
    assert!(expected.starts_with("`size`"), "{expected}");
    assert_eq!(found, "6\\xe2\\x80\\x8b4");
    let (_, expected, found) = error_at("alloc 1 0\u{7} 0 64");
    assert!(expected.starts_with("`device`"), "{expected}");
    assert_eq!(found, "0\\x07");
    for (text, field) in [
        ("alloc 1 0 0", "`size`"),
        ("alloc 1 0 0 0", "`size`"),
        ("alloc 99999999999999999999 0 0 1", "`id`"),
        ("alloc 1 0 x 1", "`stream`"),
        ("malloc 1 0 0 1", "`action`"),
        ("free 1 0 extra", "the end of the line"),
        ("free 1", "`id`: a live allocation"),
        ("alloc 1 0 0 8 9", "the end of the line"),
        ("alloc 1 5000 0 8", "`device`"),
        ("alloc 1 0 99999 8", "`stream`"),
        ("alloc 1 0 0 8\nalloc 1 0 0 8", "`id`: a number not live"),
        ("use 4 0", "`id`: a live allocation"),
    ] {
        let expected = error_at(text).1;
        assert!(expected.starts_with(field), "{text:?}: {expected}");
    }
}

#[test]
fn a_failed_line_changes_nothing() {
    let mut replay = Replay::new(Vec::new(), None);
    replay.feed_line(b"alloc 1 0 0 4096").unwrap();
    assert!(replay.feed_line(b"alloc 1 0 0 4096").is_err());
    assert!(replay.feed_line(b"free 2").is_err());
    assert_eq!(replay.events(), 1);
    replay.feed_line(b"free 1").unwrap();
    let report = &replay.finish()[0];
    assert_eq!(report.devices[0].1.allocated, 0);
    assert_eq!(report.devices[0].1.peak_requested, 4096);
}

#[test]
fn the_cap_names_the_first_request_that_would_have_failed() {
    let trace = "alloc 1 0 0 1000000\nalloc 2 0 0 1000000\nalloc 3 0 0 1000000\nfree 3\nfree 1";
    let capped = replay(trace, Some(3 << 20)).unwrap();
    let failure = capped[0].first_failure.clone().unwrap();
    assert_eq!((failure.line, failure.id, failure.size), (3, 3, 1_000_000));
    assert_eq!(capped[0].failures, 1);
    assert!(replay(trace, None).unwrap()[0].first_failure.is_none());
}

#[test]
fn each_configuration_is_reported_by_its_name() {
    let configs = ["wide", "no-release"]
        .iter()
        .map(|name| ReplayConfig {
            name: (*name).into(),
            allocator: AllocatorConfig {
                release_before_growing: *name == "wide",
                ..AllocatorConfig::default()
            },
        })
        .collect();
    let mut replay = Replay::new(configs, None);
    // Two freed 20 MiB segments hold enough bytes for 30 MB, but no block that fits.
    for line in [
        "alloc 1 0 0 20000000",
        "alloc 2 0 0 20000000",
        "free 1",
        "free 2",
        "alloc 3 0 0 30000000",
    ] {
        replay.feed_line(line.as_bytes()).unwrap();
    }
    let reports = replay.finish();
    let frees: Vec<(&str, u64)> = reports
        .iter()
        .map(|r| (r.name.as_str(), r.devices[0].1.segment_frees))
        .collect();
    assert_eq!(frees, [("wide", 2), ("no-release", 0)]);
}

/// A random trace over a few ids, devices and streams, written as text.
fn trace() -> impl Strategy<Value = Vec<(u8, u8, u8, u8, u32)>> {
    proptest::collection::vec((0u8..4, 0u8..12, 0u8..2, 0u8..3, 1u32..3_000_000), 1..150)
}

proptest! {
    #[test]
    fn peak_live_matches_a_plain_model_and_bad_lines_are_refused_as_the_model_says(
        ops in trace()
    ) {
        let mut replay = Replay::new(Vec::new(), None);
        let mut live: HashMap<u64, (u8, u64)> = HashMap::new();
        let mut bytes = [0u64; 2];
        let mut peak = [0u64; 2];
        for (action, id, device, stream, size) in ops {
            let id = u64::from(id);
            let (text, valid) = match action {
                0 | 1 => (format!("alloc {id} {device} {stream} {size}"), !live.contains_key(&id)),
                2 => (format!("free {id}"), live.contains_key(&id)),
                _ => (format!("use {id} {stream}"), live.contains_key(&id)),
            };
            let result = replay.feed_line(text.as_bytes());
            prop_assert_eq!(result.is_ok(), valid, "{}: {:?}", text, result);
            if !valid {
                continue;
            }
            match action {
                0 | 1 => {
                    live.insert(id, (device, u64::from(size)));
                    bytes[device as usize] += u64::from(size);
                    peak[device as usize] = peak[device as usize].max(bytes[device as usize]);
                }
                2 => {
                    let (device, size) = live.remove(&id).unwrap();
                    bytes[device as usize] -= size;
                }
                _ => {}
            }
        }
        for (device, stats) in &replay.finish()[0].devices {
            prop_assert_eq!(stats.peak_requested as u64, peak[device.0 as usize]);
            prop_assert_eq!(stats.requested as u64, bytes[device.0 as usize]);
        }
    }
}

#[test]
fn growable_segments_replay_a_growing_buffer_with_maps_instead_of_segments() {
    let configs = [false, true]
        .into_iter()
        .map(|growable_segments| ReplayConfig {
            name: format!("growable={growable_segments}"),
            allocator: AllocatorConfig {
                growable_segments,
                ..AllocatorConfig::default()
            },
        })
        .collect();
    let mut replay = Replay::new(configs, None);
    for step in 1..=8u64 {
        replay
            .feed_line(format!("alloc {step} 0 0 {}", (step * 12) << 20).as_bytes())
            .unwrap();
        replay.feed_line(format!("free {step}").as_bytes()).unwrap();
    }
    let reports = replay.finish();
    let (plain, growable) = (&reports[0].devices[0].1, &reports[1].devices[0].1);
    assert_eq!((growable.segment_allocations, growable.maps), (0, 8));
    assert_eq!(plain.maps, 0);
    assert_eq!(growable.peak_reserved, 96 << 20);
    assert!(plain.segment_allocations >= 8, "{plain:?}");
}
