//! Race checker throughput (trace operations per second) on a synthetic training-loop trace:
//! four non-blocking streams and the legacy default stream handing blocks of a caching
//! allocator to each other through events, kernels with three-range footprints, copies, blocks
//! marked used on a second stream and freed, a device synchronisation every 64 steps; in memory
//! (the race checker alone, and with the lifetime checker) and streamed from text.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::token::{
    AccessMode, AddressRange, AllocatorId, CallKind, Checker, RaceChecker, StreamKind,
    StreamingChecker, TraceOp, write_trace,
};

const STREAMS: u32 = 4;
const BLOCKS: u64 = 64;
const BLOCK: u64 = 1 << 16;
const BASE: u64 = 0x7f00_0000_0000;

/// A clean trace of about `ops` operations.
fn training_loop(ops: usize) -> Vec<TraceOp> {
    let s = StreamId;
    let torch = AllocatorId(0);
    let mut trace = vec![TraceOp::DefaultStream {
        stream: s(0),
        device: DeviceId(0),
    }];
    for n in 1..=STREAMS {
        trace.push(TraceOp::CreateStream {
            stream: s(n),
            device: DeviceId(0),
        });
        trace.push(TraceOp::SetStreamKind {
            stream: s(n),
            kind: StreamKind::NonBlocking,
        });
        trace.push(TraceOp::CreateEvent {
            event: EventId(n),
            device: DeviceId(0),
        });
    }
    trace.push(TraceOp::Alloc {
        range: AddressRange::new(BASE, BLOCKS * BLOCK),
        stream: None,
        site: None,
    });
    let block = |k: usize| AddressRange::new(BASE + (k as u64 % BLOCKS) * BLOCK, BLOCK);
    let stream_of = |k: usize| s(1 + (k as u32 % STREAMS));
    let access = |stream, call, range, mode| TraceOp::Access {
        stream,
        call,
        range,
        mode,
        site: None,
    };
    let mut k = 0;
    while trace.len() < ops {
        let (me, range) = (stream_of(k), block(k));
        trace.push(TraceOp::BlockAlloc {
            allocator: torch,
            range,
            stream: me,
            site: None,
        });
        if k > 0 {
            // Wait for the previous step, whose block this one reads.
            trace.push(TraceOp::Wait {
                stream: me,
                event: EventId(stream_of(k - 1).0),
            });
        }
        trace.push(TraceOp::Launch {
            stream: me,
            device: None,
        });
        trace.push(access(me, CallKind::Launch, range, AccessMode::Write));
        if k > 0 {
            trace.push(access(me, CallKind::Launch, block(k - 1), AccessMode::Read));
        }
        trace.push(access(
            me,
            CallKind::Launch,
            AddressRange::new(range.start, 256),
            AccessMode::ReadWrite,
        ));
        if k % 4 == 0 {
            trace.push(TraceOp::Launch {
                stream: me,
                device: None,
            });
            trace.push(access(me, CallKind::Copy, range, AccessMode::Read));
        }
        trace.push(TraceOp::Record {
            event: EventId(me.0),
            stream: me,
        });
        if k >= 2 {
            // The block of two steps ago was read on the next step's stream.
            let old = block(k - 2);
            trace.push(TraceOp::BlockUse {
                allocator: torch,
                address: old.start,
                stream: stream_of(k - 1),
                site: None,
            });
            trace.push(TraceOp::BlockFree {
                allocator: torch,
                address: old.start,
                stream: stream_of(k - 2),
                site: None,
            });
        }
        if k % 64 == 63 {
            trace.push(TraceOp::SynchronizeDevice {
                device: DeviceId(0),
            });
        }
        k += 1;
    }
    trace
}

fn races(c: &mut Criterion) {
    let trace = training_loop(1 << 20);
    assert!(gpu_core::token::check_races(&trace).is_empty());
    let text = write_trace(&trace);
    let mut group = c.benchmark_group("races");
    group.sample_size(10);
    group.throughput(Throughput::Elements(trace.len() as u64));
    group.bench_function("race checker, in memory", |b| {
        b.iter(|| {
            let mut checker = RaceChecker::new();
            let mut found = 0usize;
            for (position, op) in trace.iter().enumerate() {
                checker.step(position, op, &mut |_| found += 1);
            }
            black_box(found)
        })
    });
    group.bench_function("lifetime and race checkers, in memory", |b| {
        b.iter(|| {
            let mut checker = Checker::new();
            let mut found = 0usize;
            for (position, op) in trace.iter().enumerate() {
                checker.step(position, op, &mut |_| found += 1);
            }
            black_box(found)
        })
    });
    group.bench_function("streamed from text", |b| {
        b.iter(|| {
            let mut checker = StreamingChecker::new();
            let mut found = 0usize;
            checker
                .check_text(text.as_bytes(), &mut |_| found += 1)
                .unwrap();
            black_box(found)
        })
    });
    group.finish();
}

criterion_group!(benches, races);
criterion_main!(benches);
