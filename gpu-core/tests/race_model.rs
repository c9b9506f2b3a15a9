//! The race checker against a plain reference model, on random multi-stream programs: three
//! streams (blocking or not) and a legacy default stream, two events, three blocks of a
//! sub-allocator read and written in parts, recorded, waited on, synchronised, freed (with and
//! without `block_use`) and handed out again on any stream. The model computes happens-before
//! by reachability over every operation and checks every conflicting pair; every race the
//! checker reports must be one of the model's, and the first racy operation must be the same.

use std::collections::BTreeSet;

use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::token::{
    AccessMode, AddressRange, AllocatorId, CallKind, RaceKind, StreamKind, TraceOp, check_races,
};
use proptest::prelude::*;

const STREAMS: u8 = 4; // stream 3 is the legacy default stream
const LEGACY: u8 = 3;
const EVENTS: u8 = 2;
const BLOCKS: u8 = 3;
const BLOCK_BYTES: u64 = 64;
const BASE: u64 = 0x10000;

#[derive(Clone, Copy, Debug)]
enum Call {
    /// Stream, block, which part (0: all, 1: first half, 2: second half), mode (0 r, 1 w, 2 rw).
    Access(u8, u8, u8, u8),
    Record(u8, u8),
    Wait(u8, u8),
    SyncStream(u8),
    SyncEvent(u8),
    SyncDevice,
    /// Block, stream: the block goes back to that stream's pool (if alive).
    Free(u8, u8),
    /// Block, stream: handed out again on that stream (if freed).
    Alloc(u8, u8),
    /// Block, stream: marked used on that stream (if alive).
    Use(u8, u8),
}

fn call() -> impl Strategy<Value = Call> {
    let s = 0..STREAMS;
    let b = 0..BLOCKS;
    prop_oneof![
        6 => (s.clone(), b.clone(), 0u8..3, 0u8..3).prop_map(|(s, b, p, m)| Call::Access(s, b, p, m)),
        2 => (0..EVENTS, s.clone()).prop_map(|(e, s)| Call::Record(e, s)),
        2 => (s.clone(), 0..EVENTS).prop_map(|(s, e)| Call::Wait(s, e)),
        1 => s.clone().prop_map(Call::SyncStream),
        1 => (0..EVENTS).prop_map(Call::SyncEvent),
        1 => Just(Call::SyncDevice),
        2 => (b.clone(), s.clone()).prop_map(|(b, s)| Call::Free(b, s)),
        2 => (b.clone(), s.clone()).prop_map(|(b, s)| Call::Alloc(b, s)),
        1 => (b, s).prop_map(|(b, s)| Call::Use(b, s)),
    ]
}

/// One operation of the model's program.
#[derive(Clone, Debug)]
enum Op {
    Access {
        stream: u8,
        block: u8,
        range: AddressRange,
        mode: AccessMode,
    },
    Record(u8, u8),
    Wait(u8, u8),
    SyncStream(u8),
    SyncEvent(u8),
    SyncDevice,
    Free(u8, u8),
    Alloc(u8, u8),
    Use(u8, u8),
}

impl Op {
    /// The stream an operation is enqueued on, if it is a stream operation.
    fn stream(&self) -> Option<u8> {
        match *self {
            Op::Access { stream, .. } | Op::Record(_, stream) | Op::Wait(stream, _) => Some(stream),
            Op::Alloc(_, stream) => Some(stream),
            _ => None,
        }
    }

    fn is_host(&self) -> bool {
        matches!(self, Op::SyncStream(_) | Op::SyncEvent(_) | Op::SyncDevice)
    }
}

fn block_range(block: u8) -> AddressRange {
    AddressRange::new(BASE + u64::from(block) * BLOCK_BYTES, BLOCK_BYTES)
}

/// The program: the calls that apply (a free of a freed block, ... are dropped), the streams'
/// kinds, and each block first handed out on a stream.
fn program(calls: &[Call], first: &[u8]) -> Vec<Op> {
    let mut alive = [true; BLOCKS as usize];
    let mut ops: Vec<Op> = (0..BLOCKS)
        .map(|b| Op::Alloc(b, first[b as usize]))
        .collect();
    for &call in calls {
        let op = match call {
            Call::Access(stream, block, part, mode) => {
                let whole = block_range(block);
                let half = BLOCK_BYTES / 2;
                let range = match part {
                    0 => whole,
                    1 => AddressRange::new(whole.start, half),
                    _ => AddressRange::new(whole.start + half, half),
                };
                let mode =
                    [AccessMode::Read, AccessMode::Write, AccessMode::ReadWrite][mode as usize];
                Op::Access {
                    stream,
                    block,
                    range,
                    mode,
                }
            }
            Call::Record(e, s) => Op::Record(e, s),
            Call::Wait(s, e) => Op::Wait(s, e),
            Call::SyncStream(s) => Op::SyncStream(s),
            Call::SyncEvent(e) => Op::SyncEvent(e),
            Call::SyncDevice => Op::SyncDevice,
            Call::Free(b, s) if alive[b as usize] => {
                alive[b as usize] = false;
                Op::Free(b, s)
            }
            Call::Alloc(b, s) if !alive[b as usize] => {
                alive[b as usize] = true;
                Op::Alloc(b, s)
            }
            Call::Use(b, s) if alive[b as usize] => Op::Use(b, s),
            Call::Free(..) | Call::Alloc(..) | Call::Use(..) => continue,
        };
        ops.push(op);
    }
    ops
}

/// The trace of a program, and for each op the position of the trace op a race is reported
/// at (its access or its block allocation).
fn trace(ops: &[Op], blocking: &[bool]) -> (Vec<TraceOp>, Vec<usize>) {
    let s = |n: u8| StreamId(u32::from(n));
    let e = |n: u8| EventId(u32::from(n));
    let torch = AllocatorId(0);
    let mut trace = Vec::new();
    for n in 0..STREAMS {
        if n == LEGACY {
            trace.push(TraceOp::DefaultStream {
                stream: s(n),
                device: DeviceId(0),
            });
        } else {
            trace.push(TraceOp::CreateStream {
                stream: s(n),
                device: DeviceId(0),
            });
            let kind = if blocking[n as usize] {
                StreamKind::Blocking
            } else {
                StreamKind::NonBlocking
            };
            trace.push(TraceOp::SetStreamKind { stream: s(n), kind });
        }
    }
    for n in 0..EVENTS {
        trace.push(TraceOp::CreateEvent {
            event: e(n),
            device: DeviceId(0),
        });
    }
    trace.push(TraceOp::Alloc {
        range: AddressRange::new(BASE, BLOCK_BYTES * u64::from(BLOCKS)),
        stream: None,
        site: None,
    });
    let mut at = Vec::new();
    for op in ops {
        match *op {
            Op::Access {
                stream,
                range,
                mode,
                ..
            } => {
                trace.push(TraceOp::Launch {
                    stream: s(stream),
                    device: None,
                });
                trace.push(TraceOp::Access {
                    stream: s(stream),
                    call: CallKind::Launch,
                    range,
                    mode,
                    site: None,
                });
            }
            Op::Record(ev, st) => trace.push(TraceOp::Record {
                event: e(ev),
                stream: s(st),
            }),
            Op::Wait(st, ev) => trace.push(TraceOp::Wait {
                stream: s(st),
                event: e(ev),
            }),
            Op::SyncStream(st) => trace.push(TraceOp::SynchronizeStream { stream: s(st) }),
            Op::SyncEvent(ev) => trace.push(TraceOp::SynchronizeEvent { event: e(ev) }),
            Op::SyncDevice => trace.push(TraceOp::SynchronizeDevice {
                device: DeviceId(0),
            }),
            Op::Free(b, st) => trace.push(TraceOp::BlockFree {
                allocator: torch,
                address: block_range(b).start,
                stream: s(st),
                site: None,
            }),
            Op::Alloc(b, st) => trace.push(TraceOp::BlockAlloc {
                allocator: torch,
                range: block_range(b),
                stream: s(st),
                site: None,
            }),
            Op::Use(b, st) => trace.push(TraceOp::BlockUse {
                allocator: torch,
                address: block_range(b).start,
                stream: s(st),
                site: None,
            }),
        }
        at.push(trace.len() - 1);
    }
    (trace, at)
}

/// Happens-before by reachability: `before[j]` holds every op that happens before op `j`.
fn happens_before(ops: &[Op], blocking: &[bool]) -> Vec<BTreeSet<usize>> {
    let is_blocking = |s: u8| s != LEGACY && blocking[s as usize];
    let mut before: Vec<BTreeSet<usize>> = Vec::with_capacity(ops.len());
    let last = |j: usize, pred: &dyn Fn(&Op) -> bool| (0..j).rev().find(|&i| pred(&ops[i]));
    for (j, op) in ops.iter().enumerate() {
        let mut preds: Vec<usize> = Vec::new();
        // The host: the last host wait before an op orders every later op after it.
        preds.extend(last(j, &|o: &Op| o.is_host()));
        if let Some(s) = op.stream() {
            preds.extend(last(j, &|o: &Op| o.stream() == Some(s)));
            if s == LEGACY {
                for other in (0..STREAMS).filter(|&o| is_blocking(o)) {
                    preds.extend(last(j, &|o: &Op| o.stream() == Some(other)));
                }
            } else if is_blocking(s) {
                preds.extend(last(j, &|o: &Op| o.stream() == Some(LEGACY)));
            }
        }
        match *op {
            Op::Wait(_, e) | Op::SyncEvent(e) => {
                preds.extend(last(j, &|o: &Op| matches!(o, Op::Record(x, _) if *x == e)));
            }
            Op::SyncStream(s) => preds.extend(last(j, &|o: &Op| o.stream() == Some(s))),
            Op::SyncDevice => {
                for s in 0..STREAMS {
                    preds.extend(last(j, &|o: &Op| o.stream() == Some(s)));
                }
            }
            Op::Alloc(b, _) => {
                // The allocator's promise: after the work, at the free, of the streams the
                // block was marked used on in its last life.
                if let Some(free) = last(j, &|o: &Op| matches!(o, Op::Free(x, _) if *x == b)) {
                    let life =
                        last(free, &|o: &Op| matches!(o, Op::Alloc(x, _) if *x == b)).unwrap_or(0);
                    for op in &ops[life..free] {
                        if let Op::Use(x, u) = *op
                            && x == b
                        {
                            preds.extend(last(free, &|o: &Op| o.stream() == Some(u)));
                        }
                    }
                }
            }
            _ => {}
        }
        let mut set = BTreeSet::new();
        for p in preds {
            set.insert(p);
            set.extend(before[p].iter().copied());
        }
        before.push(set);
    }
    before
}

/// The model's races at each op: (kind, earlier op).
fn model_races(ops: &[Op], blocking: &[bool]) -> Vec<BTreeSet<(RaceKindKey, usize)>> {
    let before = happens_before(ops, blocking);
    let mut races = vec![BTreeSet::new(); ops.len()];
    for (j, op) in ops.iter().enumerate() {
        let life_of = |b: u8| {
            (0..j)
                .rev()
                .find(|&i| matches!(ops[i], Op::Alloc(x, _) if x == b))
        };
        match *op {
            Op::Access {
                stream,
                block,
                range,
                mode,
            } => {
                let life = life_of(block).unwrap_or(0);
                if let Some(free) = (life..j)
                    .rev()
                    .find(|&i| matches!(ops[i], Op::Free(x, _) if x == block))
                {
                    races[j].insert((RaceKindKey(RaceKind::UseAfterFree), free));
                }
                for (i, earlier) in ops.iter().enumerate().take(j).skip(life) {
                    if let Op::Access {
                        stream: s,
                        range: r,
                        mode: m,
                        ..
                    } = *earlier
                        && s != stream
                        && r.overlap(&range).is_some()
                        && (m.writes() || mode.writes())
                        && !before[j].contains(&i)
                    {
                        let kind = match (m.writes(), mode.writes()) {
                            (true, true) => RaceKind::WriteWrite,
                            (true, false) => RaceKind::WriteRead,
                            _ => RaceKind::ReadWrite,
                        };
                        races[j].insert((RaceKindKey(kind), i));
                    }
                }
            }
            Op::Alloc(block, _) => {
                if let Some(life) = life_of(block) {
                    for (i, earlier) in ops.iter().enumerate().take(j).skip(life) {
                        if matches!(*earlier, Op::Access { block: b, .. } if b == block)
                            && !before[j].contains(&i)
                        {
                            races[j].insert((RaceKindKey(RaceKind::Reuse), i));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    races
}

/// A race kind, ordered (for sets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RaceKindKey(RaceKind);

impl PartialOrd for RaceKindKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RaceKindKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |k: RaceKind| k as u8;
        key(self.0).cmp(&key(other.0))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every race the checker reports is one of the model's (the right two operations and
    /// kind), and the first operation with a race in the model is the first the checker
    /// reports at.
    #[test]
    fn the_checker_agrees_with_the_model(
        calls in prop::collection::vec(call(), 0..40),
        blocking in prop::collection::vec(any::<bool>(), STREAMS as usize),
        first in prop::collection::vec(0..STREAMS, BLOCKS as usize),
    ) {
        let ops = program(&calls, &first);
        let (trace, at) = trace(&ops, &blocking);
        let model = model_races(&ops, &blocking);
        let op_of = |position: usize| at.iter().position(|&p| p == position);
        let found = check_races(&trace);
        for race in &found {
            let later = op_of(race.later.position);
            let earlier = op_of(race.earlier.position);
            prop_assert!(later.is_some() && earlier.is_some(), "{race:?}");
            let (later, earlier) = (later.unwrap(), earlier.unwrap());
            prop_assert!(
                model[later].contains(&(RaceKindKey(race.kind), earlier)),
                "checker: {race:?} at op {later} against op {earlier}; model: {:?}\n{ops:#?}",
                model[later]
            );
        }
        let first_model = model.iter().position(|r| !r.is_empty());
        let first_checker = found.iter().map(|r| op_of(r.later.position).unwrap()).min();
        prop_assert_eq!(first_checker, first_model, "{:?}\n{:#?}", model, ops);
    }
}
