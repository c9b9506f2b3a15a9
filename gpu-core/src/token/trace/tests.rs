//! The text format read and written: every call, malformed lines, comments and line ends,
//! long names, and the name table's ids.

use alloc::string::{String, ToString};
use alloc::vec;

use super::names::{Names, same_bytes};
use super::parse::word_end;
use super::*;
use crate::error::Error;
use crate::id::{DeviceId, EventId, StreamId};

#[test]
fn every_call_parses_with_names_per_kind() {
    let trace = parse_trace(
        "# a comment line\n\
         stream_create x 0\n\
         \n\
         event_create x 1   # an event may share a stream's name\n\
         launch x\n\
         launch x 2\n\
         event_record x x\n\
         stream_wait_event x x\n\
         stream_synchronize x\n\
         event_synchronize x\n\
         stream_query x\n\
         event_query x\n\
         event_destroy x\n\
         stream_destroy x\n\
         stream_default y 3\n\
         peer_copy x direct\n\
         peer_copy x staged\n\
         exit\n\
         # only comments and blank lines after exit\n\
         \n",
    )
    .unwrap();
    let (s, e) = (StreamId(0), EventId(0));
    assert_eq!(
        trace.ops,
        vec![
            TraceOp::CreateStream {
                stream: s,
                device: DeviceId(0)
            },
            TraceOp::CreateEvent {
                event: e,
                device: DeviceId(1)
            },
            TraceOp::Launch {
                stream: s,
                device: None
            },
            TraceOp::Launch {
                stream: s,
                device: Some(DeviceId(2))
            },
            TraceOp::Record {
                event: e,
                stream: s
            },
            TraceOp::Wait {
                stream: s,
                event: e
            },
            TraceOp::SynchronizeStream { stream: s },
            TraceOp::SynchronizeEvent { event: e },
            TraceOp::QueryStream { stream: s },
            TraceOp::QueryEvent { event: e },
            TraceOp::DestroyEvent { event: e },
            TraceOp::DestroyStream { stream: s },
            TraceOp::DefaultStream {
                stream: StreamId(1),
                device: DeviceId(3)
            },
            TraceOp::PeerCopy {
                stream: s,
                direct: true
            },
            TraceOp::PeerCopy {
                stream: s,
                direct: false
            },
            TraceOp::Exit,
        ]
    );
    assert_eq!(
        trace.lines,
        vec![2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
    );
    assert_eq!(trace.stream_names, vec!["x".to_string(), "y".to_string()]);
    assert_eq!(trace.event_names, vec!["x".to_string()]);
    let written = write_trace(&trace.ops);
    assert_eq!(parse_trace(&written).unwrap().ops, trace.ops, "{written}");
}

#[test]
fn memory_lines_parse_with_footprints_and_sites() {
    let trace = parse_trace(
        "stream_create s 0\n\
         stream_kind s nonblocking\n\
         stream_default l 0 @main\n\
         mem_alloc 0x1000+256 @torch::empty\n\
         mem_alloc 4096+16 s\n\
         launch s 0 rw:0x1000+256 r:0x2000+8 @k\n\
         copy s w:0x1000+16 r:4096+16\n\
         fill s 0 w:0x1010+16 @k\n\
         peer_copy s direct r:0x1000+4\n\
         launch s @k\n\
         block_alloc torch 0x1000+64 s @alloc\n\
         block_use torch 0x1000 s\n\
         block_free torch 0x1000 s @free\n\
         mem_free 0x1000\n\
         mem_free 0x1000 s @k\n\
         device_synchronize 1\n",
    )
    .unwrap();
    let (s, d0) = (StreamId(0), Some(DeviceId(0)));
    let r = AddressRange::new;
    let access = |call, range, mode, site| TraceOp::Access {
        stream: s,
        call,
        range,
        mode,
        site,
    };
    let (empty, k, alloc_site, free_site) = (SiteId(0), SiteId(1), SiteId(2), SiteId(3));
    let torch = AllocatorId(0);
    assert_eq!(
        trace.ops,
        vec![
            TraceOp::CreateStream {
                stream: s,
                device: DeviceId(0)
            },
            TraceOp::SetStreamKind {
                stream: s,
                kind: StreamKind::NonBlocking
            },
            TraceOp::DefaultStream {
                stream: StreamId(1),
                device: DeviceId(0)
            },
            TraceOp::Alloc {
                range: r(0x1000, 256),
                stream: None,
                site: Some(empty)
            },
            TraceOp::Alloc {
                range: r(4096, 16),
                stream: Some(s),
                site: None
            },
            TraceOp::Launch {
                stream: s,
                device: d0
            },
            access(
                CallKind::Launch,
                r(0x1000, 256),
                AccessMode::ReadWrite,
                Some(k)
            ),
            access(CallKind::Launch, r(0x2000, 8), AccessMode::Read, Some(k)),
            TraceOp::Launch {
                stream: s,
                device: None
            },
            access(CallKind::Copy, r(0x1000, 16), AccessMode::Write, None),
            access(CallKind::Copy, r(4096, 16), AccessMode::Read, None),
            TraceOp::Launch {
                stream: s,
                device: d0
            },
            access(CallKind::Fill, r(0x1010, 16), AccessMode::Write, Some(k)),
            TraceOp::PeerCopy {
                stream: s,
                direct: true
            },
            access(CallKind::PeerCopy, r(0x1000, 4), AccessMode::Read, None),
            TraceOp::Launch {
                stream: s,
                device: None
            },
            TraceOp::BlockAlloc {
                allocator: torch,
                range: r(0x1000, 64),
                stream: s,
                site: Some(alloc_site)
            },
            TraceOp::BlockUse {
                allocator: torch,
                address: 0x1000,
                stream: s,
                site: None
            },
            TraceOp::BlockFree {
                allocator: torch,
                address: 0x1000,
                stream: s,
                site: Some(free_site)
            },
            TraceOp::Free {
                address: 0x1000,
                stream: None,
                site: None
            },
            TraceOp::Free {
                address: 0x1000,
                stream: Some(s),
                site: Some(k)
            },
            TraceOp::SynchronizeDevice {
                device: DeviceId(1)
            },
        ]
    );
    assert_eq!(
        trace.lines,
        vec![
            1, 2, 3, 4, 5, 6, 6, 6, 7, 7, 7, 8, 8, 9, 9, 10, 11, 12, 13, 14, 15, 16
        ]
    );
    // A site on a line whose operation keeps none (`@main`) is read and dropped.
    assert_eq!(trace.site_names, vec!["torch::empty", "k", "alloc", "free"]);
    assert_eq!(trace.allocator_names, vec!["torch"]);
    // The lifetime checker sees the memory lines' streams as used: only `s`'s leak.
    let defects = trace.check();
    assert_eq!(defects.len(), 1, "{defects:?}");
    assert_eq!(defects[0].position, 0);
    let written = write_trace(&trace.ops);
    assert_eq!(parse_trace(&written).unwrap().ops, trace.ops, "{written}");
}

/// Reads `text` line by line as the streaming checker does; the first error.
fn first_error(text: &[u8]) -> Option<Error> {
    let mut parser = LineParser::default();
    let mut rest = text;
    while !rest.is_empty() {
        match parser.next(rest) {
            Ok(read) => rest = &rest[read..],
            Err(e) => return Some(e),
        }
    }
    None
}

#[test]
fn malformed_lines_name_the_line_and_what_was_expected() {
    let cases: [(&[u8], usize, &str); 32] = [
        (b"launch s rw:0x10\n", 1, "an access"),
        (b"launch s q:0x10+4\n", 1, "an access"),
        (
            b"copy s r:0x10+4 @f extra\n",
            1,
            "the end of the line, or a call site",
        ),
        (b"fill s w:0xffffffffffffffff+2\n", 1, "an access"),
        (b"launch s @\n", 1, "the end of the line, or a call site"),
        (b"mem_alloc 0x10\n", 1, "an address range"),
        (b"mem_alloc\n", 1, "an address range"),
        (b"mem_free 0x10+4\n", 1, "an address"),
        (b"block_alloc a 0x10+4\n", 1, "a stream name"),
        (b"block_use a 0xg s\n", 1, "an address"),
        (b"stream_kind s fast\n", 1, "a stream kind"),
        (b"device_synchronize\n", 1, "a device number"),
        (b"peer_copy s fast\n", 1, "`direct` or `staged`"),
        (b"peer_copy s\n", 1, "`direct` or `staged`"),
        (b"peer_copy s direct now\n", 1, "an access"),
        (b"stream_create s 0\nfrobnicate s\n", 2, "a call"),
        (b"stream_create\n", 1, "a stream name"),
        (b"stream_create s zero\n", 1, "a device number"),
        (b"stream_create s\n", 1, "a device number"),
        (b"event_record e\n", 1, "a stream name"),
        (b"launch s 0 extra\n", 1, "an access"),
        (b"launch s -1\n", 1, "an access"),
        (b"launch s +1\n", 1, "an access"),
        (b"launch s 4294967296\n", 1, "an access"),
        (b"stream_default s\n", 1, "a device number"),
        (b"stream_default\n", 1, "a stream name"),
        (b"stream_default s 0 0\n", 1, "the end of the line"),
        (b"exit now\n", 1, "the end of the line"),
        (b"exit\n# fine\n\nlaunch s\n", 4, "nothing after `exit`"),
        (b"exit\nexit", 2, "nothing after `exit`"),
        (b"launch \xff\n", 1, "a name in UTF-8"),
        (
            b"stream_create s 0\r\nstream_destroy s t\r\n",
            2,
            "the end of the line",
        ),
    ];
    for (text, line, expected) in cases {
        let shown = String::from_utf8_lossy(text);
        match first_error(text) {
            Some(Error::TraceSyntax {
                line: l,
                expected: e,
                found,
            }) => {
                assert_eq!(l, line, "{shown}");
                assert!(e.starts_with(expected), "{shown}: {e}");
                assert!(!found.contains('\n') && !found.contains('\r'), "{found}");
            }
            other => panic!("{shown}: {other:?}"),
        }
        if let Ok(text) = core::str::from_utf8(text) {
            assert_eq!(parse_trace(text).err(), first_error(text.as_bytes()));
        }
    }
}

#[test]
fn comments_end_words_and_line_ends_need_not_be_unix() {
    let trace = parse_trace(
        "stream_create s#comment\r\n\
         launch s 0# comment\r\n\
         \t launch\ts\t0\x0c\r\n\
         stream_destroy s",
    );
    // `s#comment` is the name `s` and a comment: the device is missing.
    assert!(matches!(
        trace,
        Err(Error::TraceSyntax {
            line: 1,
            expected: "a device number",
            ..
        })
    ));
    let trace = parse_trace(
        "stream_create s 0#c\r\nlaunch s 0# c\r\n\t launch\ts\t0\x0c\r\nstream_destroy s",
    )
    .unwrap();
    assert_eq!(trace.ops.len(), 4);
    assert_eq!(trace.lines, vec![1, 2, 3, 4]);
    assert_eq!(trace.stream_names, vec!["s".to_string()]);
}

#[test]
fn a_comment_may_hold_any_bytes() {
    let text = b"stream_create s 0 # \xff\xfe not UTF-8\nstream_destroy s\n";
    assert_eq!(first_error(text), None);
}

#[test]
fn long_and_odd_names_read_whole() {
    // Names longer than the eight-byte blocks the word scanner reads, with a control
    // character that is not whitespace inside.
    let long = "0x7fffffffffffffff.stream\u{1}name\u{b}end";
    let trace = parse_trace(&alloc::format!(
        "stream_create {long} 0\nlaunch {long}\nstream_destroy {long}"
    ))
    .unwrap();
    assert_eq!(trace.stream_names, vec![long.to_string()]);
    assert_eq!(trace.ops.len(), 3);
    assert_eq!(word_end(b"abcdefghijklmnop\tq"), 16);
    assert_eq!(word_end(b"abcdefg#"), 7);
    assert_eq!(word_end(b"ab\x01cdefghij klm"), 11);
    assert_eq!(word_end(b"abcdefghij"), 10);
}

#[test]
fn names_compare_every_byte() {
    let base = b"0x7f0007800000ab";
    for len in 0..=base.len() {
        assert!(same_bytes(&base[..len], &base[..len]));
        for at in 0..len {
            let mut other = base[..len].to_vec();
            other[at] ^= 1;
            assert!(!same_bytes(&base[..len], &other), "{len} {at}");
        }
        if len > 0 {
            assert!(!same_bytes(&base[..len], &base[..len - 1]));
        }
    }
    let mut names = Names::default();
    assert_eq!(names.id(b"0x7f000780"), Ok(0));
    assert_eq!(names.id(b"0x7f001780"), Ok(1));
    assert_eq!(names.id(b"0x7f000780"), Ok(0));
}

#[test]
fn released_names_give_their_ids_to_new_names() {
    let mut names = Names::default();
    assert_eq!(names.id(b"a"), Ok(0));
    assert_eq!(names.id(b"b"), Ok(1));
    assert_eq!(names.id(b"a"), Ok(0));
    names.release(0);
    names.release(0); // twice: nothing more
    names.release(7); // never given: nothing
    assert_eq!(names.len(), 1);
    assert_eq!(names.name(0), None);
    assert_eq!(names.id(b"c"), Ok(0));
    assert_eq!(names.name(0), Some("c"));
    assert_eq!(names.id(b"a"), Ok(2));
    assert_eq!(names.len(), 3);
    assert_eq!(names.id(b"\xff"), Err("a name in UTF-8"));
    assert_eq!(names.len(), 3);
}
