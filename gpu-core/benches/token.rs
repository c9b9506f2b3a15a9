//! Planning cost per operation for chains, wide fan-out/fan-in and random DAGs over two
//! devices, on warm pools, against a naive baseline in the same run (a fresh stream per
//! operation and a record+wait per dependency, no bookkeeping: the cost of emitting steps);
//! and checker throughput (trace operations per second) against a plain pass over the trace,
//! and the streaming text checker against the in-memory one (read all, then check) on the
//! same text: a plan's trace and a synthetic recorder-style trace.
//! The spec's anchor: one cuEventRecord+cuStreamWaitEvent costs 370 ns on an H200.

use std::collections::VecDeque;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::token::synthetic::SyntheticTrace;
use gpu_core::token::{
    OpId, PlanStep, Planner, StreamingChecker, Token, TraceOp, TraceView, check, parse_trace,
    plan_trace, write_trace,
};

/// One operation of a benchmark program: its device, the live tokens it consumes (each an
/// index into the live queue, taken in turn with `swap_remove_front`, so index 0 is the oldest;
/// new tokens go to the back), and into how many branches its token forks.
#[derive(Clone)]
struct Op {
    device: u32,
    deps: Vec<usize>,
    fork: usize,
}

fn chain(len: usize) -> Vec<Op> {
    (0..len)
        .map(|i| Op {
            device: 0,
            deps: if i == 0 { vec![] } else { vec![0] },
            fork: 1,
        })
        .collect()
}

/// Repeated: a root (after the previous round) forked into `width` branches, an operation on
/// each, and an operation after all of them.
fn fan(width: usize, ops: usize) -> Vec<Op> {
    let mut program = Vec::new();
    while program.len() < ops {
        program.push(Op {
            device: 0,
            deps: if program.is_empty() { vec![] } else { vec![0] },
            fork: width,
        });
        for _ in 0..width {
            // Each branch operation takes the oldest branch (index 0) and goes to the end.
            program.push(Op {
                device: 0,
                deps: vec![0],
                fork: 1,
            });
        }
        program.push(Op {
            device: 0,
            deps: vec![0; width],
            fork: 1,
        });
    }
    program
}

/// Random DAG over two devices: each operation takes 0 to 3 live tokens, and one in four
/// forks its token in two or three; at most 32 tokens stay live.
fn random_dag(ops: usize) -> Vec<Op> {
    let mut seed = 0x9e37_79b9_u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut live = 0usize;
    let mut program = Vec::new();
    for _ in 0..ops {
        let mut want = if live > 32 { 3 } else { next(4) };
        want = want.min(live);
        let deps: Vec<usize> = (0..want).map(|k| next(live - k)).collect();
        live -= want;
        let fork = if next(4) == 0 { 2 + next(2) } else { 1 };
        live += fork;
        program.push(Op {
            device: next(2) as u32,
            deps,
            fork,
        });
    }
    program
}

/// Plans `program` once on a warm planner; returns the number of steps.
fn plan(
    planner: &mut Planner,
    program: &[Op],
    live: &mut VecDeque<Token>,
    deps: &mut Vec<Token>,
) -> usize {
    issue(planner, program, live, deps);
    for token in live.drain(..) {
        planner.wait(token).expect("benchmark programs are valid");
    }
    planner.end_program();
    let steps = planner.steps().len();
    planner.drain_steps();
    steps
}

/// Plans the operations of `program`, leaving their tokens in `live`.
fn issue(planner: &mut Planner, program: &[Op], live: &mut VecDeque<Token>, deps: &mut Vec<Token>) {
    let mut branches = Vec::new();
    for (i, op) in program.iter().enumerate() {
        for &index in &op.deps {
            deps.push(
                live.swap_remove_front(index.min(live.len() - 1))
                    .expect("a live token"),
            );
        }
        let token = planner
            .run(OpId(i as u32), DeviceId(op.device), deps)
            .expect("benchmark programs are valid");
        if op.fork > 1 {
            planner
                .fork(token, op.fork, &mut branches)
                .expect("benchmark programs are valid");
            live.extend(branches.drain(..));
        } else {
            live.push_back(token);
        }
    }
}

/// The baseline: the same programs with a fresh stream per operation and an event
/// recorded and waited for every dependency; tokens are plain stream ids.
fn plan_naive(program: &[Op], live: &mut VecDeque<StreamId>, steps: &mut Vec<PlanStep>) -> usize {
    let (mut streams, mut events) = (0u32, 0u32);
    for (i, op) in program.iter().enumerate() {
        let device = DeviceId(op.device);
        let stream = StreamId(streams);
        streams += 1;
        steps.push(PlanStep::AcquireStream {
            device,
            stream,
            fresh: true,
        });
        for &index in &op.deps {
            let dep = live
                .remove(index.min(live.len() - 1))
                .expect("a live token");
            let event = EventId(events);
            events += 1;
            steps.push(PlanStep::AcquireEvent {
                device,
                event,
                fresh: true,
            });
            steps.push(PlanStep::Record { event, stream: dep });
            steps.push(PlanStep::Wait { stream, event });
        }
        steps.push(PlanStep::Run {
            op: OpId(i as u32),
            device,
            stream,
        });
        for _ in 0..op.fork {
            live.push_back(stream);
        }
    }
    live.clear();
    let count = steps.len();
    steps.clear();
    count
}

fn planning(c: &mut Criterion) {
    const OPS: usize = 1024;
    let programs = [
        ("chain", chain(OPS)),
        ("fan_8", fan(8, OPS)),
        ("fan_64", fan(64, OPS)),
        ("random_dag_2_devices", random_dag(OPS)),
    ];
    let mut group = c.benchmark_group("token_plan");
    for (name, program) in &programs {
        group.throughput(Throughput::Elements(program.len() as u64));
        let mut planner = Planner::new(2);
        let (mut live, mut deps) = (VecDeque::new(), Vec::new());
        // Warm the pools and buffers.
        plan(&mut planner, program, &mut live, &mut deps);
        group.bench_with_input(BenchmarkId::new("planner", name), program, |b, program| {
            b.iter(|| black_box(plan(&mut planner, black_box(program), &mut live, &mut deps)))
        });
        let (mut live, mut steps) = (VecDeque::new(), Vec::new());
        group.bench_with_input(BenchmarkId::new("naive", name), program, |b, program| {
            b.iter(|| black_box(plan_naive(black_box(program), &mut live, &mut steps)))
        });
    }
    group.finish();
}

fn checking(c: &mut Criterion) {
    let mut planner = Planner::new(2);
    let (mut live, mut deps) = (VecDeque::new(), Vec::new());
    issue(&mut planner, &random_dag(16 * 1024), &mut live, &mut deps);
    planner.end_program();
    planner.drain_pools();
    let trace: Vec<TraceOp> = plan_trace(planner.steps(), TraceView::Logical);
    assert!(check(&trace).is_empty());
    let text = write_trace(&trace);

    let mut group = c.benchmark_group("token_check");
    group.throughput(Throughput::Elements(trace.len() as u64));
    group.bench_function("checker", |b| {
        b.iter(|| black_box(check(black_box(&trace))))
    });
    group.bench_function("parse_and_check", |b| {
        b.iter(|| black_box(parse_trace(black_box(&text)).expect("valid").check()))
    });
    group.bench_function("streaming", |b| b.iter(|| stream_check(black_box(&text))));
    // Baseline: one pass that only looks at each operation.
    group.bench_function("plain_pass", |b| {
        b.iter(|| {
            black_box(&trace)
                .iter()
                .filter(|op| matches!(op, TraceOp::Launch { .. }))
                .count()
        })
    });
    group.finish();
}

/// Checks `text` with the streaming checker; the number of findings.
fn stream_check(text: &str) -> usize {
    let mut checker = StreamingChecker::new();
    let mut findings = 0;
    checker
        .check_text(text.as_bytes(), &mut |_| findings += 1)
        .expect("valid");
    checker.finish(&mut |_| findings += 1);
    findings
}

/// A recorder-style trace (hex handles, default streams, comments, pools alive at exit):
/// the streaming checker against reading it all into memory, then checking.
fn checking_recorded(c: &mut Criterion) {
    let mut trace = SyntheticTrace::new(1, 100_000);
    let (mut text, mut line) = (String::new(), String::new());
    while trace.next_line(&mut line) {
        text.push_str(&line);
        text.push('\n');
    }
    let calls = parse_trace(&text).expect("valid").ops.len();
    let mut group = c.benchmark_group("token_check_recorded");
    group.throughput(Throughput::Elements(calls as u64));
    group.bench_function("parse_and_check", |b| {
        b.iter(|| black_box(parse_trace(black_box(&text)).expect("valid").check()))
    });
    group.bench_function("streaming", |b| b.iter(|| stream_check(black_box(&text))));
    group.finish();
}

criterion_group!(benches, planning, checking, checking_recorded);
criterion_main!(benches);
