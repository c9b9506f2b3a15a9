//! The race rules on small traces: each kind of race found with its two operations, and
//! each ordering edge (events, host waits, legacy default stream, allocators' promises)
//! making it clean.

use alloc::string::String;
use alloc::vec::Vec;

use super::*;
use crate::token::trace::parse_trace;

/// The races of a trace: (kind, line of the earlier op, line of the later op, range).
fn races(text: &str) -> Vec<(RaceKind, usize, usize, String)> {
    let trace = parse_trace(text).unwrap();
    check_races(&trace.ops)
        .into_iter()
        .map(|race| {
            (
                race.kind,
                trace.lines[race.earlier.position],
                trace.lines[race.later.position],
                alloc::format!("{}", race.range),
            )
        })
        .collect()
}

const TWO_STREAMS: &str = "stream_create a 0\nstream_kind a nonblocking\n\
                           stream_create b 0\nstream_kind b nonblocking\n\
                           event_create e 0\nmem_alloc 0x1000+256\n";

#[test]
fn unordered_writes_and_reads_on_two_streams_race() {
    let text = alloc::format!(
        "{TWO_STREAMS}launch a w:0x1000+64\nlaunch b r:0x1020+64\nlaunch b w:0x1000+16\n"
    );
    assert_eq!(
        races(&text),
        [
            (RaceKind::WriteRead, 7, 8, "0x1020+32".into()),
            (RaceKind::WriteWrite, 7, 9, "0x1000+16".into()),
        ]
    );
    // Reads do not race reads; disjoint bytes do not race.
    let text = alloc::format!("{TWO_STREAMS}launch a r:0x1000+64\nlaunch b r:0x1000+64\n");
    assert!(races(&text).is_empty());
    let text = alloc::format!("{TWO_STREAMS}launch a w:0x1000+64\nlaunch b w:0x1040+64\n");
    assert!(races(&text).is_empty());
    // A read then an unordered write.
    let text = alloc::format!("{TWO_STREAMS}copy a r:0x1000+8\nfill b w:0x1000+8\n");
    assert_eq!(
        races(&text),
        [(RaceKind::ReadWrite, 7, 8, "0x1000+8".into())]
    );
}

#[test]
fn events_and_host_waits_order_streams() {
    let wait = alloc::format!(
        "{TWO_STREAMS}launch a w:0x1000+64\nevent_record e a\nstream_wait_event b e\n\
         launch b rw:0x1000+64\n"
    );
    assert!(races(&wait).is_empty());
    // A wait before the record orders nothing.
    let early = alloc::format!(
        "{TWO_STREAMS}event_record e a\nlaunch a w:0x1000+64\nstream_wait_event b e\n\
         launch b rw:0x1000+64\n"
    );
    assert_eq!(
        races(&early),
        [(RaceKind::WriteWrite, 8, 10, "0x1000+64".into())]
    );
    for sync in [
        "stream_synchronize a",
        "event_record e a\nevent_synchronize e",
        "device_synchronize 0",
    ] {
        let text =
            alloc::format!("{TWO_STREAMS}launch a w:0x1000+64\n{sync}\nlaunch b r:0x1000+64\n");
        assert!(races(&text).is_empty(), "{sync}");
    }
    // Another device's synchronisation orders nothing here.
    let text = alloc::format!(
        "{TWO_STREAMS}launch a w:0x1000+64\ndevice_synchronize 1\nlaunch b r:0x1000+64\n"
    );
    assert_eq!(races(&text).len(), 1);
}

#[test]
fn the_legacy_default_stream_orders_blocking_streams_only() {
    let base = "stream_default l 0\nstream_create a 0\nstream_create n 0\n\
                stream_kind n nonblocking\nstream_default p 0\nstream_kind p per_thread\n";
    // blocking -> legacy -> blocking, and per-thread streams are blocking.
    for (first, second) in [("a", "l"), ("l", "a"), ("p", "l"), ("l", "p")] {
        let text = alloc::format!("{base}launch {first} w:0x10+8\nlaunch {second} w:0x10+8\n");
        assert!(races(&text).is_empty(), "{first} {second}");
    }
    // Through the legacy stream, two blocking streams are ordered too.
    let text = alloc::format!("{base}launch a w:0x10+8\nlaunch l\nlaunch p r:0x10+8\n");
    assert!(races(&text).is_empty());
    // Without it, not; nor is a non-blocking stream.
    let text = alloc::format!("{base}launch a w:0x10+8\nlaunch p r:0x10+8\n");
    assert_eq!(races(&text).len(), 1);
    for (first, second) in [("n", "l"), ("l", "n")] {
        let text = alloc::format!("{base}launch {first} w:0x10+8\nlaunch {second} w:0x10+8\n");
        assert_eq!(races(&text).len(), 1, "{first} {second}");
    }
}

#[test]
fn a_block_reused_on_another_stream_needs_an_edge_from_its_last_use() {
    let base = "stream_create main 0\nstream_kind main nonblocking\n\
                stream_create side 0\nstream_kind side nonblocking\nmem_alloc 0x1000+1024\n\
                block_alloc torch 0x1000+512 main @empty\nlaunch side w:0x1000+512 @k\n";
    // Freed without record_stream, handed out again on its stream: the side stream's write
    // may still run.
    let text = alloc::format!(
        "{base}block_free torch 0x1000 main\nblock_alloc torch 0x1000+256 main @empty2\n"
    );
    assert_eq!(races(&text), [(RaceKind::Reuse, 7, 9, "0x1000+256".into())]);
    // record_stream (block_use) makes the allocator wait for the side stream.
    let text = alloc::format!(
        "{base}block_use torch 0x1000 side\nblock_free torch 0x1000 main\n\
         block_alloc torch 0x1000+256 main\nlaunch main w:0x1000+256\n"
    );
    assert!(races(&text).is_empty());
    // A use after the block was freed, before it is handed out again (which also races the
    // side stream's write).
    let text = alloc::format!("{base}block_free torch 0x1000 main\nlaunch main r:0x1100+8\n");
    assert_eq!(
        races(&text),
        [
            (RaceKind::UseAfterFree, 8, 9, "0x1100+8".into()),
            (RaceKind::WriteRead, 7, 9, "0x1100+8".into())
        ]
    );
}

#[test]
fn stream_ordered_frees_race_unordered_uses_and_reuse_follows_the_free() {
    let base = "stream_create a 0\nstream_kind a nonblocking\n\
                stream_create b 0\nstream_kind b nonblocking\nevent_create e 0\n\
                mem_alloc 0x1000+64 a\nlaunch a w:0x1000+64\nevent_record e a\n\
                stream_wait_event b e\n";
    let text = alloc::format!("{base}launch b r:0x1000+64\nmem_free 0x1000 a\n");
    assert_eq!(
        races(&text),
        [(RaceKind::FreeWhileInUse, 10, 11, "0x1000+64".into())]
    );
    let text = alloc::format!(
        "{base}launch b r:0x1000+64\nevent_record e b\nstream_wait_event a e\n\
         mem_free 0x1000 a\nmem_alloc 0x1000+64 b\nlaunch b w:0x1000+64\n"
    );
    assert!(races(&text).is_empty());
    // After the free, the bytes are gone until allocated again.
    let text = alloc::format!("{base}mem_free 0x1000 a\nlaunch a r:0x1000+8\n");
    assert_eq!(
        races(&text),
        [(RaceKind::UseAfterFree, 10, 11, "0x1000+8".into())]
    );
    // A synchronous free waits for the device: nothing races it.
    let text = alloc::format!(
        "{base}launch b r:0x1000+64\nmem_free 0x1000\nmem_alloc 0x1000+8\nlaunch b w:0x1000+8\n"
    );
    assert!(races(&text).is_empty());
}

#[test]
fn a_destroyed_streams_slot_is_reused_only_after_the_host_waited_for_it() {
    let mut checker = RaceChecker::new();
    let mut text = String::from("stream_create keep 0\nstream_kind keep nonblocking\n");
    for n in 0..1000 {
        text.push_str(&alloc::format!(
            "stream_create s{n} 0\nstream_kind s{n} nonblocking\nlaunch s{n} w:0x10+8\n\
             stream_synchronize s{n}\nstream_destroy s{n}\nlaunch keep rw:0x100+8\n"
        ));
    }
    let trace = parse_trace(&text).unwrap();
    let mut found = 0;
    for (position, op) in trace.ops.iter().enumerate() {
        checker.step(position, op, &mut |_| found += 1);
    }
    assert_eq!(found, 0);
    // keep's slot, the last stream's, and two runs of bytes.
    assert!(checker.held() <= 4, "{}", checker.held());
    // Without the host's wait, the last write races the next stream's, and is found.
    let text = "stream_create x 0\nstream_kind x nonblocking\nlaunch x w:0x10+8\nstream_destroy x\n\
                stream_create y 0\nstream_kind y nonblocking\nlaunch y w:0x10+8\n";
    assert_eq!(races(text), [(RaceKind::WriteWrite, 3, 7, "0x10+8".into())]);
}

#[test]
fn reports_name_both_operations_with_the_traces_names_and_sites() {
    let text = "stream_create main 0\nstream_kind main nonblocking\n\
                stream_create side 0\nstream_kind side nonblocking\n\
                block_alloc torch 0x1000+512 main @empty\nlaunch side w:0x1000+512 @add_kernel\n\
                block_free torch 0x1000 main @free\nblock_alloc torch 0x1000+256 main @zeros\n";
    let mut printed = Vec::new();
    let mut checker = crate::token::StreamingChecker::new();
    checker
        .check_text(text.as_bytes(), &mut |report| {
            if let crate::token::Finding::Race(_) = report.finding() {
                printed.push(alloc::format!("{report}"));
            }
        })
        .unwrap();
    let expected = "line 8: `block_alloc` of `torch` on stream `main` (@zeros) hands out \
                    0x1000+256 again, on a stream not ordered after its last use by `launch` on \
                    stream `side` (@add_kernel) at line 6 (block reused across streams without \
                    an ordering edge)";
    assert_eq!(printed, [expected]);
    // The same words from a trace read into memory.
    let trace = parse_trace(text).unwrap();
    let race = check_races(&trace.ops)[0];
    let described = alloc::format!(
        "{}",
        trace.describe_finding(crate::token::Finding::Race(race))
    );
    assert_eq!(described, expected);
}

#[test]
fn streams_declared_before_the_first_access_keep_their_order_whatever_their_ids() {
    // Two legacy default streams declared for one device (the later one is its legacy
    // stream), then a per-thread stream's launch, an allocation on the first default stream,
    // and a new stream of the per-thread stream's name allocating the launch's bytes. The same
    // program with the two default streams' ids swapped must be checked alike.
    let text = "stream_default x 1\nstream_default y 1\nstream_create t 1\n\
                stream_kind t per_thread\nlaunch t rw:0xa0+35 w:0x70+7\n\
                mem_alloc 0x0+7 x\nstream_create t 1\nmem_alloc 0xa0+43 t\n";
    let ops = parse_trace(text).unwrap().ops;
    // x and y were numbered 0 and 1 by first mention; swap them.
    let swap = |stream: StreamId| {
        StreamId(match stream.0 {
            0 => 1,
            1 => 0,
            other => other,
        })
    };
    let swapped: Vec<TraceOp> = ops
        .iter()
        .map(|op| match *op {
            TraceOp::DefaultStream { stream, device } => TraceOp::DefaultStream {
                stream: swap(stream),
                device,
            },
            TraceOp::Alloc {
                range,
                stream,
                site,
            } => TraceOp::Alloc {
                range,
                stream: stream.map(swap),
                site,
            },
            other => other,
        })
        .collect();
    let found = |ops: &[TraceOp]| -> Vec<(RaceKind, usize, usize)> {
        check_races(ops)
            .into_iter()
            .map(|r| (r.kind, r.earlier.position, r.later.position))
            .collect()
    };
    // (Before, the waiting streams were created in order of id: the swapped ids made x the
    // legacy stream and found a race the declared order does not have.)
    assert_eq!(found(&swapped), found(&ops));
}
