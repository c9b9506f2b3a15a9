//! The checker's rules, one defect kind at a time, on traces built in code and parsed from
//! text.
//!
//! Leaks, double destroys, uses after destroy, waits before record, wrong devices, default
//! streams, exits, and the bounded memory of destroyed objects.

use alloc::string::ToString;
use alloc::vec;

use super::*;
use crate::id::DeviceId;
use crate::token::parse_trace;

const S0: StreamId = StreamId(0);
const S1: StreamId = StreamId(1);
const E0: EventId = EventId(0);
const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn stream(n: u32) -> TraceObject {
    TraceObject::Stream(StreamId(n))
}

fn event(n: u32) -> TraceObject {
    TraceObject::Event(EventId(n))
}

fn create_stream(stream: StreamId, device: DeviceId) -> TraceOp {
    TraceOp::CreateStream { stream, device }
}

fn create_event(event: EventId, device: DeviceId) -> TraceOp {
    TraceOp::CreateEvent { event, device }
}

fn record(event: EventId, stream: StreamId) -> TraceOp {
    TraceOp::Record { event, stream }
}

fn wait(stream: StreamId, event: EventId) -> TraceOp {
    TraceOp::Wait { stream, event }
}

fn launch(stream: StreamId, device: Option<DeviceId>) -> TraceOp {
    TraceOp::Launch { stream, device }
}

fn leaked(object: TraceObject) -> DefectKind {
    DefectKind::Leaked { object }
}

fn never_created(object: TraceObject) -> DefectKind {
    DefectKind::NeverCreated { object }
}

fn kinds(ops: &[TraceOp]) -> Vec<(usize, DefectKind)> {
    check(ops)
        .into_iter()
        .map(|d| (d.position, d.kind))
        .collect()
}

fn text_kinds(text: &str) -> Vec<(usize, DefectKind)> {
    let trace = parse_trace(text).unwrap();
    trace
        .check()
        .into_iter()
        .map(|d| (trace.lines[d.position], d.kind))
        .collect()
}

#[test]
fn a_clean_life_has_no_defect() {
    let ops = [
        create_stream(S0, D0),
        create_event(E0, D0),
        launch(S0, Some(D0)),
        record(E0, S0),
        TraceOp::QueryEvent { event: E0 },
        TraceOp::SynchronizeEvent { event: E0 },
        TraceOp::QueryStream { stream: S0 },
        TraceOp::SynchronizeStream { stream: S0 },
        TraceOp::DestroyEvent { event: E0 },
        TraceOp::DestroyStream { stream: S0 },
    ];
    assert_eq!(kinds(&ops), vec![]);
}

#[test]
fn leaks_are_reported_at_their_creation() {
    let ops = [create_stream(S0, D0), create_event(E0, D0)];
    assert_eq!(
        kinds(&ops),
        vec![(0, leaked(stream(0))), (1, leaked(event(0)))]
    );
}

#[test]
fn a_second_destroy_is_reported_with_the_first() {
    let ops = [
        create_event(E0, D0),
        TraceOp::DestroyEvent { event: E0 },
        TraceOp::DestroyEvent { event: E0 },
    ];
    assert_eq!(
        kinds(&ops),
        vec![(
            2,
            DefectKind::DestroyedTwice {
                object: event(0),
                first_destroyed_at: 1
            }
        )]
    );
}

#[test]
fn every_use_after_destroy_is_reported() {
    let ops = [
        create_stream(S0, D0),
        create_event(E0, D0),
        TraceOp::DestroyStream { stream: S0 },
        launch(S0, None),
        record(E0, S0),
        TraceOp::DestroyEvent { event: E0 },
        TraceOp::QueryEvent { event: E0 },
    ];
    let stream_gone = DefectKind::UsedAfterDestroy {
        object: stream(0),
        destroyed_at: 2,
    };
    assert_eq!(
        kinds(&ops),
        vec![
            (3, stream_gone),
            (4, stream_gone),
            (
                6,
                DefectKind::UsedAfterDestroy {
                    object: event(0),
                    destroyed_at: 5
                }
            ),
        ]
    );
}

#[test]
fn objects_never_created_and_created_twice_are_reported() {
    let ops = [
        TraceOp::SynchronizeStream { stream: S1 },
        TraceOp::DestroyEvent { event: E0 },
        create_stream(S0, D0),
        create_stream(S0, D1),
        TraceOp::DestroyStream { stream: S0 },
    ];
    assert_eq!(
        kinds(&ops),
        vec![
            (0, never_created(stream(1))),
            (1, never_created(event(0))),
            (
                3,
                DefectKind::CreatedWhileAlive {
                    object: stream(0),
                    created_at: 2
                }
            ),
        ]
    );
}

#[test]
fn waiting_on_an_event_never_recorded_is_reported() {
    let ops = [
        create_stream(S0, D0),
        create_event(E0, D0),
        wait(S0, E0),
        TraceOp::SynchronizeEvent { event: E0 },
        // A query of an unrecorded event is legal (it reports completion).
        TraceOp::QueryEvent { event: E0 },
        record(E0, S0),
        wait(S0, E0),
        // Re-created: unrecorded again.
        TraceOp::DestroyEvent { event: E0 },
        create_event(E0, D0),
        wait(S0, E0),
        TraceOp::DestroyEvent { event: E0 },
        TraceOp::DestroyStream { stream: S0 },
    ];
    let unrecorded = DefectKind::WaitBeforeRecord { event: E0 };
    assert_eq!(
        kinds(&ops),
        vec![(2, unrecorded), (3, unrecorded), (9, unrecorded)]
    );
}

#[test]
fn recording_and_launching_across_devices_is_reported() {
    let ops = [
        create_stream(S0, D0),
        create_stream(S1, D1),
        create_event(E0, D0),
        record(E0, S1),
        launch(S1, Some(D0)),
        // Legal: a stream waits on another device's event.
        record(E0, S0),
        wait(S1, E0),
        launch(S1, Some(D1)),
        TraceOp::DestroyEvent { event: E0 },
        TraceOp::DestroyStream { stream: S0 },
        TraceOp::DestroyStream { stream: S1 },
    ];
    assert_eq!(
        kinds(&ops),
        vec![
            (
                3,
                DefectKind::RecordOnOtherDevice {
                    event: E0,
                    event_device: D0,
                    stream: S1,
                    stream_device: D1
                }
            ),
            (
                4,
                DefectKind::StreamOnOtherDevice {
                    stream: S1,
                    stream_device: D1,
                    device: D0
                }
            ),
        ]
    );
}

#[test]
fn destroying_with_work_pending_is_legal() {
    // CUDA releases a stream or event destroyed while work that uses it is pending once
    // the work completes.
    let trace = "
        stream_create s 0
        stream_create t 0
        event_create e 0
        launch s 0
        event_record e s
        stream_wait_event t e
        event_destroy e
        stream_destroy s
        launch t 0
        stream_synchronize t
        stream_destroy t
    ";
    assert_eq!(text_kinds(trace), vec![]);
}

/// MLIR's lowering of `gpu.wait async [%t1, %t2]`: records events on the input streams,
/// makes a new stream wait on them, and never destroys the input streams.
#[test]
fn a_join_that_leaks_its_input_streams_is_flagged() {
    let trace = "
        stream_create s1 0       # %t1 = gpu.launch async
        launch s1
        stream_create s2 0       # %t2 = gpu.launch async
        launch s2
        event_create e1 0
        event_record e1 s1
        event_create e2 0
        event_record e2 s2
        stream_create s3 0       # gpu.wait async [%t1, %t2]
        stream_wait_event s3 e1
        stream_wait_event s3 e2
        event_destroy e1
        event_destroy e2
        launch s3
        stream_synchronize s3
        stream_destroy s3
    ";
    let leak = |s| leaked(stream(s));
    assert_eq!(text_kinds(trace), vec![(2, leak(0)), (4, leak(1))]);
}

/// A token used twice without an explicit fork: both users land on one stream, which is
/// then synchronised and destroyed once per user.
#[test]
fn an_implicit_fork_destroyed_twice_is_flagged() {
    let trace = "
        stream_create s 0
        launch s          # producer of %t
        launch s          # first user of %t
        launch s          # second user of %t
        stream_synchronize s
        stream_destroy s
        stream_synchronize s
        stream_destroy s
    ";
    let s = stream(0);
    assert_eq!(
        text_kinds(trace),
        vec![
            (
                8,
                DefectKind::UsedAfterDestroy {
                    object: s,
                    destroyed_at: 5
                }
            ),
            (
                9,
                DefectKind::DestroyedTwice {
                    object: s,
                    first_destroyed_at: 5
                }
            ),
        ]
    );
}

/// `%t = gpu.wait async` whose token nobody uses creates a stream nobody destroys.
#[test]
fn an_unused_tokens_stream_is_flagged() {
    let trace = "
        stream_create s 0
        stream_synchronize s
    ";
    assert_eq!(text_kinds(trace), vec![(2, leaked(stream(0)))]);
}

#[test]
fn a_correct_fork_join_program_passes() {
    let trace = "
        stream_create main 0
        launch main              # a
        event_create fork 0
        event_record fork main   # fork a into two
        stream_create side 0
        stream_wait_event side fork
        launch side              # b after branch 2
        launch main              # c after branch 1
        event_create joined 0
        event_record joined side
        stream_wait_event main joined   # join b and c
        event_destroy joined
        event_destroy fork
        stream_destroy side
        launch main              # d after the join
        stream_synchronize main
        stream_destroy main
    ";
    assert_eq!(text_kinds(trace), vec![]);
}

#[test]
fn messages_name_the_objects_and_positions() {
    let trace = parse_trace("event_create ev 1\nevent_destroy ev\nevent_destroy ev\n").unwrap();
    let defects = trace.check();
    assert_eq!(defects.len(), 1);
    assert_eq!(
        trace.describe(&defects[0]).to_string(),
        "line 3: event `ev` destroyed twice (first destroyed at line 2)"
    );
    assert_eq!(
        defects[0].to_string(),
        "op 2: event 0 destroyed twice (first destroyed at op 1)"
    );
}

fn findings(checker: &mut Checker, ops: &[TraceOp]) -> Vec<Finding> {
    let mut found = Vec::new();
    for (position, op) in ops.iter().enumerate() {
        checker.step(position, op, &mut |f| found.push(f));
    }
    found
}

#[test]
fn a_default_stream_is_never_leaked_and_needs_no_creation() {
    let trace = "
        stream_default legacy.1 0
        launch legacy.1 0
        stream_default legacy.1 0     # declared again: harmless
        stream_default ptds.1.77 1
        event_create e 0
        event_record e legacy.1
        stream_wait_event ptds.1.77 e
        stream_synchronize legacy.1
        event_destroy e
    ";
    assert_eq!(text_kinds(trace), vec![]);
}

#[test]
fn destroying_a_default_stream_is_reported_and_leaves_it_alive() {
    let trace = "
        stream_default legacy.1 0
        stream_destroy legacy.1
        launch legacy.1 0
        stream_destroy legacy.1
    ";
    let destroyed = DefectKind::DefaultStreamDestroyed {
        stream: StreamId(0),
    };
    assert_eq!(text_kinds(trace), vec![(3, destroyed), (5, destroyed)]);
    let parsed = parse_trace(trace).unwrap();
    assert_eq!(
        parsed.describe(&parsed.check()[0]).to_string(),
        "line 3: stream `legacy.1` is a default stream: it cannot be destroyed \
         (default stream destroyed)"
    );
}

#[test]
fn a_default_stream_and_a_created_stream_cannot_share_a_name() {
    let trace = "
        stream_create s 0
        stream_default s 0
        stream_destroy s
        stream_default t 1
        stream_create t 1
    ";
    assert_eq!(
        text_kinds(trace),
        vec![
            (
                3,
                DefectKind::CreatedWhileAlive {
                    object: stream(0),
                    created_at: 0
                }
            ),
            (
                6,
                DefectKind::CreatedWhileAlive {
                    object: stream(1),
                    created_at: 3
                }
            ),
        ]
    );
}

#[test]
fn objects_alive_at_exit_are_reported_apart_from_defects() {
    let ops = [
        TraceOp::DefaultStream {
            stream: S1,
            device: D0,
        },
        create_event(E0, D0),
        create_stream(S0, D0),
        create_event(EventId(1), D0),
        TraceOp::DestroyEvent { event: EventId(1) },
        TraceOp::Exit,
    ];
    let mut checker = Checker::new();
    let mut found = findings(&mut checker, &ops);
    checker.finish(&mut |f| found.push(f));
    // In order of creation; the default stream and the destroyed event are not alive.
    assert_eq!(
        found,
        vec![
            Finding::AliveAtExit {
                object: event(0),
                created_at: 1
            },
            Finding::AliveAtExit {
                object: stream(0),
                created_at: 2
            },
        ]
    );
    assert_eq!(check(&ops), vec![]);
    // Without the exit they are leaks.
    assert_eq!(
        kinds(&ops[..5]),
        vec![(1, leaked(event(0))), (2, leaked(stream(0)))]
    );
}

#[test]
fn calls_after_exit_are_reported_and_change_nothing() {
    let ops = [
        create_stream(S0, D0),
        TraceOp::Exit,
        TraceOp::DestroyStream { stream: S0 },
        TraceOp::Exit,
    ];
    let mut checker = Checker::new();
    let found = findings(&mut checker, &ops);
    assert_eq!(
        found,
        vec![
            Finding::AliveAtExit {
                object: stream(0),
                created_at: 0
            },
            Finding::Defect(Defect {
                position: 2,
                kind: DefectKind::CallAfterExit
            }),
            Finding::Defect(Defect {
                position: 3,
                kind: DefectKind::CallAfterExit
            }),
        ]
    );
    assert_eq!(checker.tracked(), 1);
    let mut at_finish = Vec::new();
    checker.finish(&mut |f| at_finish.push(f));
    assert_eq!(at_finish, vec![]);
}

#[test]
fn destroyed_objects_are_remembered_up_to_a_bound() {
    let create = |n| create_stream(StreamId(n), D0);
    let destroy = |n| TraceOp::DestroyStream {
        stream: StreamId(n),
    };
    let launch = |n| launch(StreamId(n), None);
    let mut checker = Checker::remembering(2);
    let mut found = Vec::new();
    let mut step = |checker: &mut Checker, position, op| {
        checker.step(position, &op, &mut |f| found.push(f));
        checker.forgotten().to_vec()
    };
    // A use of an object never seen, before anything was forgotten: exact.
    assert_eq!(step(&mut checker, 0, launch(9)), vec![stream(9)]);
    for n in 0..3 {
        assert_eq!(step(&mut checker, 1 + 2 * n as usize, create(n)), vec![]);
    }
    // Stream 0 is created again after its destroy: its tombstone goes stale.
    assert_eq!(step(&mut checker, 10, destroy(0)), vec![]);
    assert_eq!(step(&mut checker, 11, create(0)), vec![]);
    assert_eq!(step(&mut checker, 12, destroy(1)), vec![]);
    // The stale tombstone leaves the ring: stream 0 is alive, nothing is forgotten.
    assert_eq!(step(&mut checker, 13, destroy(2)), vec![]);
    assert_eq!(checker.tracked(), 3);
    // A third remembered destroy pushes stream 1 out.
    assert_eq!(step(&mut checker, 14, destroy(0)), vec![stream(1)]);
    assert_eq!(checker.tracked(), 2);
    assert_eq!(step(&mut checker, 15, launch(1)), vec![stream(1)]);
    assert_eq!(step(&mut checker, 16, launch(2)), vec![]);
    assert_eq!(step(&mut checker, 17, launch(9)), vec![stream(9)]);
    let defects: Vec<_> = found
        .iter()
        .map(|f| match f {
            Finding::Defect(d) => (d.position, d.kind),
            other => panic!("{other:?}"),
        })
        .collect();
    let forgotten = |n| DefectKind::NeverCreatedOrForgotten {
        object: stream(n),
        remembered: 2,
    };
    assert_eq!(
        defects,
        vec![
            (0, never_created(stream(9))),
            (15, forgotten(1)),
            (
                16,
                DefectKind::UsedAfterDestroy {
                    object: stream(2),
                    destroyed_at: 13
                }
            ),
            (17, forgotten(9)),
        ]
    );
    assert_eq!(
        Defect {
            position: 15,
            kind: forgotten(1)
        }
        .to_string(),
        "op 15: stream 1 used but never created, or destroyed before the last 2 destroys \
         of its kind (all the checker remembers)"
    );
}

#[test]
fn a_checker_remembering_nothing_still_knows_the_living() {
    let ops = [
        create_event(E0, D0),
        record(E0, S0),
        TraceOp::DestroyEvent { event: E0 },
        TraceOp::DestroyEvent { event: E0 },
    ];
    let mut checker = Checker::remembering(0);
    let found = findings(&mut checker, &ops);
    assert_eq!(checker.tracked(), 0);
    assert_eq!(
        found,
        vec![
            Finding::Defect(Defect {
                position: 1,
                kind: never_created(stream(0))
            }),
            Finding::Defect(Defect {
                position: 3,
                kind: DefectKind::NeverCreatedOrForgotten {
                    object: event(0),
                    remembered: 0
                }
            }),
        ]
    );
}
