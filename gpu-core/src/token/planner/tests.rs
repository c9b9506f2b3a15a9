//! The planner's plans, each checked step by step and as a trace in both views: chains, joins,
//! forks, waits, pools, reserved streams and devices, and misuse as typed errors.

use alloc::vec;

use super::*;
use crate::token::{TraceOp, TraceView, check, parse_trace, plan_trace, write_trace};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn start(planner: &mut Planner, op: u32, device: DeviceId) -> Token {
    planner.run(OpId(op), device, &mut Vec::new()).unwrap()
}

fn then(planner: &mut Planner, op: u32, device: DeviceId, deps: Vec<Token>) -> Token {
    let mut deps = deps;
    planner.run(OpId(op), device, &mut deps).unwrap()
}

/// The steps planned since the last call, also appended to the whole `plan`.
fn take(planner: &mut Planner, plan: &mut Vec<PlanStep>) -> Vec<PlanStep> {
    let steps: Vec<PlanStep> = planner.drain_steps().collect();
    plan.extend_from_slice(&steps);
    steps
}

fn waits(steps: &[PlanStep]) -> usize {
    steps
        .iter()
        .filter(|s| matches!(s, PlanStep::Wait { .. }))
        .count()
}

fn records(steps: &[PlanStep]) -> usize {
    steps
        .iter()
        .filter(|s| matches!(s, PlanStep::Record { .. }))
        .count()
}

fn fork(planner: &mut Planner, token: Token, count: usize) -> Vec<Token> {
    let mut branches = Vec::new();
    planner.fork(token, count, &mut branches).unwrap();
    branches
}

/// Ends the program, drains the pools, and checks the whole plan in both views.
fn finish_clean(planner: &mut Planner, plan: &mut Vec<PlanStep>) -> ProgramReport {
    let report = planner.end_program();
    planner.drain_pools();
    plan.extend(planner.drain_steps());
    for view in [TraceView::Logical, TraceView::Driver] {
        assert_eq!(check(&plan_trace(plan, view)), vec![], "{view:?}");
    }
    report
}

#[test]
fn a_begun_wait_keeps_its_stream_and_event_out_of_the_pools_until_it_ends() {
    let recorded = |steps: &[PlanStep]| {
        steps.iter().find_map(|step| match *step {
            PlanStep::Record { event, .. } => Some(event),
            _ => None,
        })
    };
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    // A stream: not handed to the next operation while the wait is open.
    let a = start(&mut p, 0, D0);
    let held = p.stream_of(&a).unwrap();
    let pending = p.begin_wait(a).unwrap();
    assert_eq!(pending, PendingWait::Stream(held));
    let b = start(&mut p, 1, D0);
    assert_ne!(p.stream_of(&b).unwrap(), held);
    p.end_wait(pending, true);
    let c = start(&mut p, 2, D0);
    assert_eq!(
        p.stream_of(&c).unwrap(),
        held,
        "back in the pool once the wait ended"
    );
    // A fork event: recorded by the wait that needs it first, and not taken by another fork
    // while that wait is open.
    let [keep, branch] = <[Token; 2]>::try_from(fork(&mut p, c, 2)).unwrap();
    assert_eq!(recorded(&take(&mut p, &mut plan)), None, "deferred");
    let pending = p.begin_wait(branch).unwrap();
    let event = recorded(&take(&mut p, &mut plan)).expect("the wait needs the record");
    assert_eq!(pending, PendingWait::Event(event));
    let [keep_b, branch_b] = <[Token; 2]>::try_from(fork(&mut p, b, 2)).unwrap();
    let taken_again = take(&mut p, &mut plan).iter().find_map(|step| match *step {
        PlanStep::AcquireEvent { event, .. } => Some(event),
        _ => None,
    });
    assert!(taken_again.is_some(), "the second fork takes an event");
    assert_ne!(taken_again, Some(event));
    p.end_wait(pending, true);
    assert!(
        take(&mut p, &mut plan).contains(&PlanStep::ReleaseEvent { device: D0, event }),
        "the last share ended with the wait"
    );
    for token in [keep, keep_b, branch_b] {
        p.wait(token).unwrap();
    }
    let report = finish_clean(&mut p, &mut plan);
    assert_eq!(report.unwaited, vec![]);
}

#[test]
fn a_reserved_stream_is_never_planned_on_and_its_id_never_handed_out() {
    let mut p = Planner::new(2);
    let reserved = p.reserve_stream(D0).unwrap();
    assert_eq!(p.steps(), &[], "reserving plans nothing");
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let b = then(&mut p, 1, D0, vec![a]);
    p.wait(b).unwrap();
    p.drain_pools();
    let steps = take(&mut p, &mut plan);
    let named: Vec<StreamId> = steps
        .iter()
        .filter_map(|step| match *step {
            PlanStep::AcquireStream { stream, .. }
            | PlanStep::ReleaseStream { stream, .. }
            | PlanStep::DestroyStream { stream, .. }
            | PlanStep::Run { stream, .. }
            | PlanStep::SynchronizeStream { stream } => Some(stream),
            _ => None,
        })
        .collect();
    assert!(!named.is_empty());
    assert!(!named.contains(&reserved), "{steps:?}");
    assert_eq!(
        p.reserve_stream(DeviceId(2)),
        Err(Error::UnknownDevice {
            device: DeviceId(2),
            device_count: 2
        })
    );
}

#[test]
fn a_chain_stays_on_one_stream_without_events() {
    let mut p = Planner::new(1);
    let a = start(&mut p, 0, D0);
    let b = then(&mut p, 1, D0, vec![a]);
    let c = then(&mut p, 2, D0, vec![b]);
    p.wait(c).unwrap();
    let s = StreamId(0);
    assert_eq!(
        p.steps(),
        &[
            PlanStep::AcquireStream {
                device: D0,
                stream: s,
                fresh: true
            },
            PlanStep::Run {
                op: OpId(0),
                device: D0,
                stream: s
            },
            PlanStep::Run {
                op: OpId(1),
                device: D0,
                stream: s
            },
            PlanStep::Run {
                op: OpId(2),
                device: D0,
                stream: s
            },
            PlanStep::SynchronizeStream { stream: s },
            PlanStep::ReleaseStream {
                device: D0,
                stream: s
            },
        ]
    );
}

#[test]
fn two_dependencies_cost_one_wait_and_release_the_other_stream() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let b = start(&mut p, 1, D0);
    take(&mut p, &mut plan);
    let c = then(&mut p, 2, D0, vec![a, b]);
    let steps = take(&mut p, &mut plan);
    assert_eq!(waits(&steps), 1);
    assert_eq!(records(&steps), 1);
    // The latest dependency's stream is kept; the other goes back to the pool (the join
    // that leaks its input streams is the defect this rules out).
    assert!(steps.contains(&PlanStep::ReleaseStream {
        device: D0,
        stream: StreamId(0)
    }));
    assert_eq!(p.stream_of(&c).unwrap(), StreamId(1));
    p.wait(c).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn a_dependency_already_waited_for_costs_nothing() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let [a_keep, a_branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
    let b = then(&mut p, 1, D0, vec![a_branch]);
    take(&mut p, &mut plan);
    let c = then(&mut p, 2, D0, vec![b, a_keep]);
    let steps = take(&mut p, &mut plan);
    assert_eq!(waits(&steps), 0, "{steps:?}");
    assert_eq!(records(&steps), 0);
    p.wait(c).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn a_dependency_implied_by_another_dependency_costs_nothing() {
    let mut p = Planner::new(2);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let [a_keep, a_branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
    let b = then(&mut p, 1, D0, vec![a_branch]);
    take(&mut p, &mut plan);
    // On device 1 neither stream can be kept; b's stream already waited for a's point.
    let c = then(&mut p, 2, D1, vec![a_keep, b]);
    let steps = take(&mut p, &mut plan);
    assert_eq!(waits(&steps), 1, "{steps:?}");
    p.wait(c).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn a_fan_in_wider_than_a_clock_lists_still_implies_every_branch() {
    // Ten branches of one fork joined on one stream raise its clock at more streams than
    // a clock lists above its base; a later merge of that clock must still carry all ten.
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let mut branches = fork(&mut p, a, 12).into_iter();
    let keep = branches.next().unwrap();
    let last = then(&mut p, 1, D0, vec![branches.next().unwrap()]);
    let first = then(&mut p, 2, D0, vec![branches.next().unwrap()]);
    let [first_joined, first_later] = <[Token; 2]>::try_from(fork(&mut p, first, 2)).unwrap();
    let mut ran = vec![first_joined];
    for (i, branch) in branches.enumerate() {
        ran.push(then(&mut p, 10 + i as u32, D0, vec![branch]));
    }
    assert_eq!(ran.len(), 10);
    let joined = then(&mut p, 30, D0, ran);
    // A branch running on past the join, so the next operation continues on its stream.
    let last = then(&mut p, 31, D0, vec![last]);
    let both = then(&mut p, 32, D0, vec![joined, last]);
    take(&mut p, &mut plan);
    // The first branch's point came through the join: no wait.
    let after = then(&mut p, 33, D0, vec![both, first_later]);
    assert_eq!(waits(&take(&mut p, &mut plan)), 0);
    p.wait(after).unwrap();
    p.wait(keep).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn fork_records_once_at_its_point_and_waits_lazily_per_branch() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let stream = p.stream_of(&a).unwrap();
    take(&mut p, &mut plan);
    let branches = fork(&mut p, a, 3);
    let at_fork = take(&mut p, &mut plan);
    assert_eq!((records(&at_fork), waits(&at_fork)), (0, 0), "deferred");
    let mut rest = branches.into_iter();
    let keep = rest.next().unwrap();
    let b1 = rest.next().unwrap();
    let b2 = rest.next().unwrap();
    // The stream moves on: the event is recorded just before, at the fork's point.
    let k = then(&mut p, 1, D0, vec![keep]);
    let moved_on = take(&mut p, &mut plan);
    assert!(
        matches!(
            moved_on[..],
            [PlanStep::Record { stream: s, .. }, PlanStep::Run { op: OpId(1), .. }] if s == stream
        ),
        "{moved_on:?}"
    );
    let x = then(&mut p, 2, D0, vec![b1]);
    let first_use = take(&mut p, &mut plan);
    assert_eq!((records(&first_use), waits(&first_use)), (0, 1));
    assert!(
        !first_use
            .iter()
            .any(|s| matches!(s, PlanStep::ReleaseEvent { .. })),
        "the event is still shared by one branch"
    );
    p.discard(b2).unwrap();
    let last = take(&mut p, &mut plan);
    assert!(matches!(last[..], [PlanStep::ReleaseEvent { .. }]));
    p.wait(k).unwrap();
    p.wait(x).unwrap();
    let report = finish_clean(&mut p, &mut plan);
    assert_eq!(report.unwaited.len(), 1);
    assert_eq!(report.unwaited[0].kind, UnwaitedKind::Discarded);
}

#[test]
fn the_unwaited_report_names_a_bounded_number_and_counts_the_rest() {
    let mut p = Planner::new(1);
    let extra = 5;
    for op in 0..(UNWAITED_NAMED + extra) as u32 {
        let t = start(&mut p, op, D0);
        p.discard(t).unwrap();
        p.drain_steps();
    }
    let footprint = p.footprint();
    assert_eq!(footprint.unwaited_named, UNWAITED_NAMED);
    assert_eq!(footprint.unwaited_unnamed, extra as u64);
    assert_eq!(footprint.live_tokens, 0);
    let report = p.end_program();
    assert_eq!(report.unwaited.len(), UNWAITED_NAMED);
    assert_eq!(report.unnamed, extra as u64);
    assert_eq!(report.unwaited_count(), (UNWAITED_NAMED + extra) as u64);
    assert_eq!(report.unwaited[0].producer, Some(OpId(0)));
    // The next program's report starts from nothing.
    assert_eq!(p.end_program(), ProgramReport::default());
}

#[test]
fn a_detached_fork_gives_the_stream_back_and_its_releases_go_unreported() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let stream = p.stream_of(&a).unwrap();
    take(&mut p, &mut plan);
    let mut branches = Vec::new();
    p.fork_detached(a, 2, &mut branches).unwrap();
    let at_fork = take(&mut p, &mut plan);
    assert_eq!(records(&at_fork), 1);
    assert!(
        at_fork
            .iter()
            .any(|s| matches!(s, PlanStep::ReleaseStream { stream: s, .. } if *s == stream)),
        "{at_fork:?}"
    );
    let [b1, b2] = <[Token; 2]>::try_from(branches).unwrap();
    // The stream is free: new work after a branch runs on it, and its order implies the
    // fork event, so nothing waits.
    let next = then(&mut p, 1, D0, vec![b1]);
    assert_eq!(p.stream_of(&next).unwrap(), stream);
    assert_eq!(waits(&take(&mut p, &mut plan)), 0);
    p.release(b2).unwrap();
    assert!(matches!(p.release(Token::from_id(next.id())), Ok(())));
    assert!(matches!(p.wait(next), Err(Error::TokenConsumed { .. })));
    let mut none = Vec::new();
    let c = start(&mut p, 2, D0);
    assert!(matches!(
        p.fork_detached(c, 0, &mut none),
        Err(Error::ZeroSize { .. })
    ));
    assert_eq!(
        finish_clean(&mut p, &mut plan).unwaited.len(),
        1,
        "only `c`"
    );
}

#[test]
fn forking_a_branch_shares_its_event() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let [keep, branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
    take(&mut p, &mut plan);
    let again = fork(&mut p, branch, 3);
    assert!(p.steps().is_empty(), "{:?}", p.steps());
    for (i, token) in again.into_iter().enumerate() {
        let t = then(&mut p, 10 + i as u32, D0, vec![token]);
        p.wait(t).unwrap();
    }
    p.wait(keep).unwrap();
    assert_eq!(finish_clean(&mut p, &mut plan).unwaited, vec![]);
}

/// Branches used again on the fork's stream before it moves on need no event at all: the
/// fork takes one from the pool (no driver call when warm) and gives it back unrecorded.
#[test]
fn a_fork_whose_branches_land_on_its_stream_records_no_event() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let stream = p.stream_of(&a).unwrap();
    // Into one operation after all branches.
    let branches = fork(&mut p, a, 3);
    let after = then(&mut p, 1, D0, branches);
    assert_eq!(p.stream_of(&after).unwrap(), stream);
    // Into a join, then an operation.
    let mut branches = fork(&mut p, after, 2);
    let joined = p.join(&mut branches).unwrap();
    let last = then(&mut p, 2, D0, vec![joined]);
    let steps = take(&mut p, &mut plan);
    assert_eq!((records(&steps), waits(&steps)), (0, 0), "{steps:?}");
    assert_eq!(p.stream_of(&last).unwrap(), stream);
    p.wait(last).unwrap();
    assert_eq!(finish_clean(&mut p, &mut plan).unwaited, vec![]);
}

/// A second fork at the point of the first (its first branch forked again before the stream
/// moved on) shares the first's event: one event, one record, one wait per using stream.
#[test]
fn forking_again_at_the_same_point_shares_the_event() {
    let mut p = Planner::new(2);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let [keep, first] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
    let [keep, second] = <[Token; 2]>::try_from(fork(&mut p, keep, 2)).unwrap();
    let forks = take(&mut p, &mut plan);
    let acquired = |steps: &[PlanStep]| {
        steps
            .iter()
            .filter(|s| matches!(s, PlanStep::AcquireEvent { .. }))
            .count()
    };
    assert_eq!((acquired(&forks), records(&forks)), (1, 0), "{forks:?}");
    let moved_on = then(&mut p, 1, D0, vec![keep]);
    let elsewhere = then(&mut p, 2, D1, vec![first, second]);
    let steps = take(&mut p, &mut plan);
    assert_eq!((records(&steps), waits(&steps)), (1, 1), "{steps:?}");
    p.wait(moved_on).unwrap();
    p.wait(elsewhere).unwrap();
    assert_eq!(finish_clean(&mut p, &mut plan).unwaited, vec![]);
}

/// What a host synchronisation saw complete: its point and everything ordered before it, and
/// only once it succeeded. A branch whose event is not recorded yet is asked about on its
/// stream.
#[test]
fn a_synchronisation_that_succeeded_completes_what_it_covered() {
    let mut p = Planner::new(2);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let stream = p.stream_of(&a).unwrap();
    let [keep, branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
    assert_eq!(p.pending_of(&branch), Ok(PendingWait::Stream(stream)));
    let other = start(&mut p, 1, D1);
    let later = then(&mut p, 2, D0, vec![keep]);
    assert_eq!(p.completed(&branch), Ok(false));
    // A failed synchronisation sees nothing complete.
    let pending = p.begin_wait(other).unwrap();
    p.end_wait(pending, false);
    assert_eq!(p.completed(&branch), Ok(false));
    // The branch's point is before `later`'s, on its stream.
    let pending = p.begin_wait(later).unwrap();
    p.end_wait(pending, true);
    assert_eq!(p.completed(&branch), Ok(true));
    let after = then(&mut p, 3, D0, vec![branch]);
    assert_eq!(
        p.completed(&after),
        Ok(false),
        "a point after the synchronisation"
    );
    // Through a wait: `joined` waited on D1's point, so synchronising it covers D1's work.
    let d1 = start(&mut p, 4, D1);
    let [d1_keep, d1_branch] = <[Token; 2]>::try_from(fork(&mut p, d1, 2)).unwrap();
    let joined = then(&mut p, 5, D0, vec![after, d1_branch]);
    assert_eq!(p.completed(&d1_keep), Ok(false));
    p.wait(joined).unwrap();
    assert_eq!(p.completed(&d1_keep), Ok(true));
    assert!(matches!(
        p.completed(&Token::from_id(TokenId::new(p.id(), 999, 0))),
        Err(Error::TokenUnknown { .. })
    ));
    p.wait(d1_keep).unwrap();
    take(&mut p, &mut plan);
    assert_eq!(finish_clean(&mut p, &mut plan).unwaited, vec![]);
}

#[test]
fn a_writer_after_two_readers_waits_for_both() {
    // cudarc keeps one read event per buffer, so a writer after two readers on different
    // streams waits only for the last one; tokens keep both.
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let [keep, r1, r2] = <[Token; 3]>::try_from(fork(&mut p, a, 3)).unwrap();
    let read1 = then(&mut p, 1, D0, vec![r1]);
    let read2 = then(&mut p, 2, D0, vec![r2]);
    let s1 = p.stream_of(&read1).unwrap();
    let s2 = p.stream_of(&read2).unwrap();
    assert_ne!(s1, s2);
    take(&mut p, &mut plan);
    let w = then(&mut p, 3, D0, vec![read1, read2, keep]);
    let steps = take(&mut p, &mut plan);
    // Kept on the last reader's stream, one wait for the other reader; the fork point is
    // implied (both readers waited for it).
    assert_eq!(waits(&steps), 1, "{steps:?}");
    let ran_on = steps.iter().find_map(|s| match s {
        PlanStep::Run { stream, .. } => Some(*stream),
        _ => None,
    });
    assert_eq!(ran_on, Some(s2));
    let waited = steps.iter().find_map(|s| match s {
        PlanStep::Wait { event, .. } => Some(*event),
        _ => None,
    });
    let recorded_on_first_reader = steps.iter().any(|s| {
        matches!(s, PlanStep::Record { event, stream } if Some(*event) == waited && *stream == s1)
    });
    assert!(recorded_on_first_reader, "{steps:?}");
    p.wait(w).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn a_cross_device_dependency_waits_on_an_event_of_the_producing_device() {
    let mut p = Planner::new(2);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    take(&mut p, &mut plan);
    let b = then(&mut p, 1, D1, vec![a]);
    let steps = take(&mut p, &mut plan);
    let (s0, s1, e) = (StreamId(0), StreamId(1), EventId(0));
    assert_eq!(
        steps,
        vec![
            PlanStep::AcquireStream {
                device: D1,
                stream: s1,
                fresh: true
            },
            PlanStep::AcquireEvent {
                device: D0,
                event: e,
                fresh: true
            },
            PlanStep::Record {
                event: e,
                stream: s0
            },
            PlanStep::Wait {
                stream: s1,
                event: e
            },
            PlanStep::ReleaseEvent {
                device: D0,
                event: e
            },
            PlanStep::ReleaseStream {
                device: D0,
                stream: s0
            },
            PlanStep::Run {
                op: OpId(1),
                device: D1,
                stream: s1
            },
        ]
    );
    p.wait(b).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn a_synchronous_wait_on_a_branch_synchronises_its_event() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let [keep, branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
    take(&mut p, &mut plan);
    p.wait(branch).unwrap();
    let steps = take(&mut p, &mut plan);
    // Nothing needed the fork's event before: the wait records it first.
    assert!(matches!(
        steps[..],
        [
            PlanStep::Record { event: e0, .. },
            PlanStep::SynchronizeEvent { event: e1 },
            PlanStep::ReleaseEvent { event: e2, .. }
        ] if e0 == e1 && e1 == e2
    ));
    p.wait(keep).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn unused_tokens_are_released_once_and_reported_at_the_end() {
    let mut p = Planner::new(2);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    let b = start(&mut p, 1, D1);
    let branches = fork(&mut p, a, 2);
    let a_id = branches[0].id();
    core::mem::drop(branches);
    let report = finish_clean(&mut p, &mut plan);
    assert_eq!(report.unwaited.len(), 3);
    assert!(
        report
            .unwaited
            .iter()
            .all(|u| u.kind == UnwaitedKind::Outstanding)
    );
    assert!(report.unwaited.iter().any(|u| u.token == a_id));
    assert!(
        report
            .unwaited
            .iter()
            .any(|u| u.token == b.id() && u.producer == Some(OpId(1)))
    );
    // Every token is void after the end.
    assert_eq!(
        p.wait(b),
        Err(Error::TokenConsumed {
            token: b_id(&report)
        })
    );
}

fn b_id(report: &ProgramReport) -> TokenId {
    report
        .unwaited
        .iter()
        .find(|u| u.producer == Some(OpId(1)))
        .unwrap()
        .token
}

#[test]
fn misuse_is_a_typed_error_and_changes_nothing() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let mut other = Planner::new(1);
    let a = start(&mut p, 0, D0);
    let b = start(&mut p, 1, D0);
    let a_id = a.id();
    let c = then(&mut p, 2, D0, vec![a]);
    let before = p.clone();
    let foreign = start(&mut other, 0, D0);
    let foreign_id = foreign.id();
    let unknown = TokenId::new(p.id(), 99, 0);
    let cases: Vec<(Vec<Token>, Error)> = vec![
        (
            vec![Token::from_id(b.id()), Token::from_id(a_id)],
            Error::TokenConsumed { token: a_id },
        ),
        (
            vec![Token::from_id(b.id()), foreign],
            Error::TokenForeign {
                token: foreign_id,
                planner: p.id(),
            },
        ),
        (
            vec![Token::from_id(unknown)],
            Error::TokenUnknown { token: unknown },
        ),
        (
            vec![Token::from_id(c.id()), Token::from_id(c.id())],
            Error::TokenConsumed { token: c.id() },
        ),
    ];
    for (mut deps, error) in cases {
        let given = deps.len();
        assert_eq!(p.run(OpId(9), D0, &mut deps), Err(error.clone()));
        assert_eq!(p.join(&mut deps), Err(error));
        assert_eq!(deps.len(), given, "a failed call keeps its dependencies");
        assert!(p == before);
    }
    let mut none = Vec::new();
    assert!(matches!(p.join(&mut none), Err(Error::ZeroSize { .. })));
    let mut keep = vec![Token::from_id(b.id())];
    assert_eq!(
        p.run(OpId(9), DeviceId(1), &mut keep),
        Err(Error::UnknownDevice {
            device: DeviceId(1),
            device_count: 1
        })
    );
    assert_eq!(keep.len(), 1);
    assert!(matches!(
        p.fork(Token::from_id(b.id()), 0, &mut Vec::new()),
        Err(Error::ZeroSize { .. })
    ));
    assert!(matches!(
        p.fork(Token::from_id(b.id()), usize::MAX, &mut Vec::new()),
        Err(Error::LimitExceeded { .. })
    ));
    assert_eq!(
        p.wait(Token::from_id(a_id)),
        Err(Error::TokenConsumed { token: a_id })
    );
    assert_eq!(
        p.discard(Token::from_id(unknown)),
        Err(Error::TokenUnknown { token: unknown })
    );
    assert!(p == before);
    // The tokens are still good.
    let d = then(&mut p, 3, D0, keep);
    p.wait(d).unwrap();
    p.wait(c).unwrap();
    finish_clean(&mut p, &mut plan);
}

/// Fork counts above the stated limit, up to `usize::MAX`, are refused before anything is
/// allocated (`Vec::with_capacity(1 << 40)` aborted the process), changing nothing: the
/// token stays live and forks within the limit.
#[test]
fn a_fork_above_the_branch_limit_is_refused_and_changes_nothing() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let token = start(&mut p, 0, D0);
    let id = token.id();
    let before = p.clone();
    // 2^40 where usize holds it (the i686 run of this suite has 32 bits).
    let huge = usize::try_from(1u64 << 40).unwrap_or(usize::MAX);
    for count in [MAX_FORK_BRANCHES + 1, u32::MAX as usize, huge, usize::MAX] {
        let refused = Error::LimitExceeded {
            what: "fork branch count",
            required: count,
            limit: MAX_FORK_BRANCHES,
            detail: alloc::vec![String::from(
                "branches of one fork; fork a branch again for more"
            )],
        };
        let mut branches = Vec::new();
        assert_eq!(
            p.fork(Token::from_id(id), count, &mut branches),
            Err(refused.clone())
        );
        assert_eq!(
            p.fork_detached(Token::from_id(id), count, &mut branches),
            Err(refused)
        );
        assert!(branches.is_empty() && branches.capacity() == 0);
        assert!(p == before);
    }
    let branches = fork(&mut p, Token::from_id(id), MAX_FORK_BRANCHES);
    assert_eq!(branches.len(), MAX_FORK_BRANCHES);
    for branch in branches {
        p.wait(branch).unwrap();
    }
    finish_clean(&mut p, &mut plan);
}

/// The live-token limit names the tokens a request would need, capped at `usize::MAX`: on
/// a 32-bit target "live + count" overflowed (a panic in debug builds, a wrong number in
/// release).
#[test]
fn the_live_token_limit_names_the_tokens_needed_without_overflow() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let kept = start(&mut p, 0, D0);
    assert_eq!(
        p.check_room(usize::MAX),
        Err(Error::LimitExceeded {
            what: "live tokens of one planner",
            required: usize::MAX,
            limit: TokenId::SLOT_LIMIT,
            detail: Vec::new(),
        })
    );
    assert_eq!(p.check_room(TokenId::SLOT_LIMIT - 1), Ok(()));
    p.wait(kept).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn warm_pools_hand_out_the_same_streams_and_events() {
    let program = |p: &mut Planner| {
        let a = start(p, 0, D0);
        let [x, y] = <[Token; 2]>::try_from(fork(p, a, 2)).unwrap();
        let y = then(p, 1, D0, vec![y]);
        let z = then(p, 2, D0, vec![x, y]);
        p.wait(z).unwrap();
        p.end_program()
    };
    let mut p = Planner::new(1);
    program(&mut p);
    let first: Vec<_> = p.drain_steps().collect();
    assert!(first.iter().any(|s| matches!(
        s,
        PlanStep::AcquireStream { fresh: true, .. } | PlanStep::AcquireEvent { fresh: true, .. }
    )));
    program(&mut p);
    let second: Vec<_> = p.drain_steps().collect();
    assert!(!second.iter().any(|s| matches!(
        s,
        PlanStep::AcquireStream { fresh: true, .. } | PlanStep::AcquireEvent { fresh: true, .. }
    )));
    assert!(
        second
            .iter()
            .any(|s| matches!(s, PlanStep::AcquireStream { .. }))
    );
}

#[test]
fn drained_ids_are_never_handed_out_again() {
    let mut p = Planner::new(1);
    let mut plan = Vec::new();
    let a = start(&mut p, 0, D0);
    p.wait(a).unwrap();
    p.drain_pools();
    let drained = take(&mut p, &mut plan);
    assert!(drained.contains(&PlanStep::DestroyStream {
        device: D0,
        stream: StreamId(0)
    }));
    let b = start(&mut p, 1, D0);
    assert_eq!(p.stream_of(&b).unwrap(), StreamId(1));
    p.wait(b).unwrap();
    finish_clean(&mut p, &mut plan);
}

#[test]
fn written_traces_read_back_as_the_same_calls() {
    let mut planner = Planner::new(2);
    let a = planner.run(OpId(0), DeviceId(0), &mut Vec::new()).unwrap();
    let b = planner.run(OpId(1), DeviceId(1), &mut vec![a]).unwrap();
    planner.wait(b).unwrap();
    planner.end_program();
    planner.drain_pools();
    for view in [TraceView::Logical, TraceView::Driver] {
        let ops = plan_trace(planner.steps(), view);
        let text = write_trace(&ops);
        let parsed = parse_trace(&text).unwrap();
        // The planner numbers streams and events in order of first use, as the parser does.
        assert_eq!(parsed.ops, ops, "{text}");
        assert_eq!(write_trace(&parsed.ops), text);
    }
}

#[test]
fn the_driver_view_shows_only_driver_calls() {
    let mut planner = Planner::new(1);
    for op in 0..2 {
        let t = planner.run(OpId(op), DeviceId(0), &mut Vec::new()).unwrap();
        planner.wait(t).unwrap();
    }
    planner.drain_pools();
    let creates = |view| {
        plan_trace(planner.steps(), view)
            .iter()
            .filter(|op| matches!(op, TraceOp::CreateStream { .. }))
            .count()
    };
    assert_eq!(creates(TraceView::Logical), 2);
    assert_eq!(creates(TraceView::Driver), 1);
    assert_eq!(
        check(&plan_trace(planner.steps(), TraceView::Driver)),
        vec![]
    );
    assert_eq!(
        check(&plan_trace(planner.steps(), TraceView::Logical)),
        vec![]
    );
}
