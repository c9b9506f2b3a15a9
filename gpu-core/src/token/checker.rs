//! The stream/event lifetime checker: reads any sequence of trace operations and reports
//! every defect (leak, double destroy, use after destroy, wait before record, wrong device).

use alloc::vec::Vec;
use core::fmt;

use hashbrown::HashMap;

use super::trace::TraceOp;
use crate::id::{DeviceId, EventId, StreamId};

/// A stream or an event named in a defect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceObject {
    /// A stream.
    Stream(StreamId),
    /// An event.
    Event(EventId),
}

/// What is wrong. Positions are indexes into the checked operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefectKind {
    /// The object was still alive at the end of the trace; the defect's position is where it
    /// was created.
    Leaked {
        /// The object.
        object: TraceObject,
    },
    /// The object was destroyed again.
    DestroyedTwice {
        /// The object.
        object: TraceObject,
        /// Where it was destroyed first.
        first_destroyed_at: usize,
    },
    /// The object was used (or destroyed) after it was destroyed.
    UsedAfterDestroy {
        /// The object.
        object: TraceObject,
        /// Where it was destroyed.
        destroyed_at: usize,
    },
    /// The object was used (or destroyed) but never created.
    NeverCreated {
        /// The object.
        object: TraceObject,
    },
    /// The object was created again while alive (the earlier one was never destroyed).
    CreatedWhileAlive {
        /// The object.
        object: TraceObject,
        /// Where it was created before.
        created_at: usize,
    },
    /// A stream (or the host) waited on an event that was never recorded since it was
    /// created: the wait does nothing, so the dependency it stands for is lost.
    WaitBeforeRecord {
        /// The event.
        event: EventId,
    },
    /// An event was recorded on a stream of another device.
    RecordOnOtherDevice {
        /// The event.
        event: EventId,
        /// The event's device.
        event_device: DeviceId,
        /// The stream.
        stream: StreamId,
        /// The stream's device.
        stream_device: DeviceId,
    },
    /// Work was launched on a stream while another device was current.
    StreamOnOtherDevice {
        /// The stream.
        stream: StreamId,
        /// The stream's device.
        stream_device: DeviceId,
        /// The device current at the call.
        device: DeviceId,
    },
}

/// One defect: where and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defect {
    /// Index of the operation that shows the defect (for a leak: the creation).
    pub position: usize,
    /// What is wrong.
    pub kind: DefectKind,
}

type NameFn<'a, T> = dyn FnMut(&mut fmt::Formatter<'_>, T) -> fmt::Result + 'a;

impl DefectKind {
    /// Writes the message, naming objects and positions with the given functions (so a
    /// parsed trace can use its own names and line numbers).
    pub fn describe(
        &self,
        f: &mut fmt::Formatter<'_>,
        object: &mut NameFn<'_, TraceObject>,
        position: &mut NameFn<'_, usize>,
    ) -> fmt::Result {
        match *self {
            DefectKind::Leaked { object: o } => {
                object(f, o)?;
                f.write_str(" created here is never destroyed (leak)")
            }
            DefectKind::DestroyedTwice {
                object: o,
                first_destroyed_at,
            } => {
                object(f, o)?;
                f.write_str(" destroyed twice (first destroyed at ")?;
                position(f, first_destroyed_at)?;
                f.write_str(")")
            }
            DefectKind::UsedAfterDestroy {
                object: o,
                destroyed_at,
            } => {
                object(f, o)?;
                f.write_str(" used after it was destroyed at ")?;
                position(f, destroyed_at)
            }
            DefectKind::NeverCreated { object: o } => {
                object(f, o)?;
                f.write_str(" used but never created")
            }
            DefectKind::CreatedWhileAlive {
                object: o,
                created_at,
            } => {
                object(f, o)?;
                f.write_str(" created again while alive (created at ")?;
                position(f, created_at)?;
                f.write_str(" and never destroyed)")
            }
            DefectKind::WaitBeforeRecord { event } => {
                object(f, TraceObject::Event(event))?;
                f.write_str(" waited on but never recorded: the wait does nothing")
            }
            DefectKind::RecordOnOtherDevice {
                event,
                event_device,
                stream,
                stream_device,
            } => {
                object(f, TraceObject::Event(event))?;
                write!(f, " of {event_device} recorded on ")?;
                object(f, TraceObject::Stream(stream))?;
                write!(
                    f,
                    " of {stream_device}; record an event of the stream's device"
                )
            }
            DefectKind::StreamOnOtherDevice {
                stream,
                stream_device,
                device,
            } => {
                write!(f, "work launched with {device} current on ")?;
                object(f, TraceObject::Stream(stream))?;
                write!(f, " of {stream_device}")
            }
        }
    }
}

impl fmt::Display for Defect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op {}: ", self.position)?;
        self.kind.describe(
            f,
            &mut |f, object| match object {
                TraceObject::Stream(s) => write!(f, "{s}"),
                TraceObject::Event(e) => write!(f, "{e}"),
            },
            &mut |f, position| write!(f, "op {position}"),
        )
    }
}

#[derive(Clone, Copy, Debug)]
enum Life {
    Alive { created_at: usize },
    Destroyed { destroyed_at: usize },
}

#[derive(Clone, Copy, Debug)]
struct ObjectState {
    device: DeviceId,
    life: Life,
    /// Events only: recorded since the last creation.
    recorded: bool,
}

/// Checks a trace one operation at a time; [`finish`](Checker::finish) adds the leaks.
#[derive(Debug, Default)]
pub struct Checker {
    streams: HashMap<u32, ObjectState>,
    events: HashMap<u32, ObjectState>,
    position: usize,
    defects: Vec<Defect>,
}

/// All defects of `ops`, in order of position (leaks, found at the end, last).
pub fn check(ops: &[TraceOp]) -> Vec<Defect> {
    let mut checker = Checker::new();
    for op in ops {
        checker.step(op);
    }
    checker.finish()
}

impl Checker {
    /// A checker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks the next operation.
    pub fn step(&mut self, op: &TraceOp) {
        match *op {
            TraceOp::CreateStream { stream, device } => {
                self.create(TraceObject::Stream(stream), device)
            }
            TraceOp::CreateEvent { event, device } => {
                self.create(TraceObject::Event(event), device)
            }
            TraceOp::DestroyStream { stream } => self.destroy(TraceObject::Stream(stream)),
            TraceOp::DestroyEvent { event } => self.destroy(TraceObject::Event(event)),
            TraceOp::Record { event, stream } => {
                let event_state = self.use_object(TraceObject::Event(event));
                let stream_state = self.use_object(TraceObject::Stream(stream));
                if let (Some(e), Some(s)) = (event_state, stream_state)
                    && e.device != s.device
                {
                    self.report(DefectKind::RecordOnOtherDevice {
                        event,
                        event_device: e.device,
                        stream,
                        stream_device: s.device,
                    });
                }
                if let Some(state) = self.events.get_mut(&event.0)
                    && matches!(state.life, Life::Alive { .. })
                {
                    state.recorded = true;
                }
            }
            TraceOp::Wait { stream, event } => {
                self.use_object(TraceObject::Stream(stream));
                self.wait_on(event);
            }
            TraceOp::SynchronizeEvent { event } => self.wait_on(event),
            TraceOp::QueryEvent { event } => {
                self.use_object(TraceObject::Event(event));
            }
            TraceOp::SynchronizeStream { stream } | TraceOp::QueryStream { stream } => {
                self.use_object(TraceObject::Stream(stream));
            }
            TraceOp::Launch { stream, device } => {
                let state = self.use_object(TraceObject::Stream(stream));
                if let (Some(s), Some(device)) = (state, device)
                    && s.device != device
                {
                    self.report(DefectKind::StreamOnOtherDevice {
                        stream,
                        stream_device: s.device,
                        device,
                    });
                }
            }
        }
        self.position += 1;
    }

    /// Reports every object still alive as leaked and returns all defects.
    pub fn finish(mut self) -> Vec<Defect> {
        let mut leaks: Vec<Defect> = self
            .streams
            .iter()
            .map(|(&id, state)| (TraceObject::Stream(StreamId(id)), state))
            .chain(
                self.events
                    .iter()
                    .map(|(&id, state)| (TraceObject::Event(EventId(id)), state)),
            )
            .filter_map(|(object, state)| match state.life {
                Life::Alive { created_at } => Some(Defect {
                    position: created_at,
                    kind: DefectKind::Leaked { object },
                }),
                Life::Destroyed { .. } => None,
            })
            .collect();
        leaks.sort_unstable_by_key(|d| d.position);
        self.defects.extend(leaks);
        self.defects
    }

    fn report(&mut self, kind: DefectKind) {
        self.defects.push(Defect {
            position: self.position,
            kind,
        });
    }

    fn table(&mut self, object: TraceObject) -> (&mut HashMap<u32, ObjectState>, u32) {
        match object {
            TraceObject::Stream(s) => (&mut self.streams, s.0),
            TraceObject::Event(e) => (&mut self.events, e.0),
        }
    }

    fn create(&mut self, object: TraceObject, device: DeviceId) {
        let position = self.position;
        let (table, id) = self.table(object);
        let fresh = ObjectState {
            device,
            life: Life::Alive {
                created_at: position,
            },
            recorded: false,
        };
        match table.get(&id) {
            // Keep the first creation: its leak is the one reported at the end.
            Some(ObjectState {
                life: Life::Alive { created_at },
                ..
            }) => {
                let created_at = *created_at;
                self.report(DefectKind::CreatedWhileAlive { object, created_at });
            }
            _ => {
                table.insert(id, fresh);
            }
        }
    }

    fn destroy(&mut self, object: TraceObject) {
        let position = self.position;
        let (table, id) = self.table(object);
        let kind = match table.get_mut(&id) {
            None => DefectKind::NeverCreated { object },
            Some(state) => match state.life {
                Life::Alive { .. } => {
                    state.life = Life::Destroyed {
                        destroyed_at: position,
                    };
                    return;
                }
                Life::Destroyed { destroyed_at } => DefectKind::DestroyedTwice {
                    object,
                    first_destroyed_at: destroyed_at,
                },
            },
        };
        self.report(kind);
    }

    /// The object's state if it is alive; reports it otherwise.
    fn use_object(&mut self, object: TraceObject) -> Option<ObjectState> {
        let (table, id) = self.table(object);
        let kind = match table.get(&id) {
            None => DefectKind::NeverCreated { object },
            Some(state) => match state.life {
                Life::Alive { .. } => return Some(*state),
                Life::Destroyed { destroyed_at } => DefectKind::UsedAfterDestroy {
                    object,
                    destroyed_at,
                },
            },
        };
        self.report(kind);
        None
    }

    fn wait_on(&mut self, event: EventId) {
        if let Some(state) = self.use_object(TraceObject::Event(event))
            && !state.recorded
        {
            self.report(DefectKind::WaitBeforeRecord { event });
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec;

    use super::*;
    use crate::token::parse_trace;

    const S0: StreamId = StreamId(0);
    const S1: StreamId = StreamId(1);
    const E0: EventId = EventId(0);
    const D0: DeviceId = DeviceId(0);
    const D1: DeviceId = DeviceId(1);

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
            TraceOp::CreateStream {
                stream: S0,
                device: D0,
            },
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
            TraceOp::Launch {
                stream: S0,
                device: Some(D0),
            },
            TraceOp::Record {
                event: E0,
                stream: S0,
            },
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
        let ops = [
            TraceOp::CreateStream {
                stream: S0,
                device: D0,
            },
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
        ];
        assert_eq!(
            kinds(&ops),
            vec![
                (
                    0,
                    DefectKind::Leaked {
                        object: TraceObject::Stream(S0)
                    }
                ),
                (
                    1,
                    DefectKind::Leaked {
                        object: TraceObject::Event(E0)
                    }
                ),
            ]
        );
    }

    #[test]
    fn a_second_destroy_is_reported_with_the_first() {
        let ops = [
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
            TraceOp::DestroyEvent { event: E0 },
            TraceOp::DestroyEvent { event: E0 },
        ];
        assert_eq!(
            kinds(&ops),
            vec![(
                2,
                DefectKind::DestroyedTwice {
                    object: TraceObject::Event(E0),
                    first_destroyed_at: 1
                }
            )]
        );
    }

    #[test]
    fn every_use_after_destroy_is_reported() {
        let ops = [
            TraceOp::CreateStream {
                stream: S0,
                device: D0,
            },
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
            TraceOp::DestroyStream { stream: S0 },
            TraceOp::Launch {
                stream: S0,
                device: None,
            },
            TraceOp::Record {
                event: E0,
                stream: S0,
            },
            TraceOp::DestroyEvent { event: E0 },
            TraceOp::QueryEvent { event: E0 },
        ];
        let stream_gone = DefectKind::UsedAfterDestroy {
            object: TraceObject::Stream(S0),
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
                        object: TraceObject::Event(E0),
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
            TraceOp::CreateStream {
                stream: S0,
                device: D0,
            },
            TraceOp::CreateStream {
                stream: S0,
                device: D1,
            },
            TraceOp::DestroyStream { stream: S0 },
        ];
        assert_eq!(
            kinds(&ops),
            vec![
                (
                    0,
                    DefectKind::NeverCreated {
                        object: TraceObject::Stream(S1)
                    }
                ),
                (
                    1,
                    DefectKind::NeverCreated {
                        object: TraceObject::Event(E0)
                    }
                ),
                (
                    3,
                    DefectKind::CreatedWhileAlive {
                        object: TraceObject::Stream(S0),
                        created_at: 2
                    }
                ),
            ]
        );
    }

    #[test]
    fn waiting_on_an_event_never_recorded_is_reported() {
        let ops = [
            TraceOp::CreateStream {
                stream: S0,
                device: D0,
            },
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
            TraceOp::Wait {
                stream: S0,
                event: E0,
            },
            TraceOp::SynchronizeEvent { event: E0 },
            // A query of an unrecorded event is legal (it reports completion).
            TraceOp::QueryEvent { event: E0 },
            TraceOp::Record {
                event: E0,
                stream: S0,
            },
            TraceOp::Wait {
                stream: S0,
                event: E0,
            },
            // Re-created: unrecorded again.
            TraceOp::DestroyEvent { event: E0 },
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
            TraceOp::Wait {
                stream: S0,
                event: E0,
            },
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
            TraceOp::CreateStream {
                stream: S0,
                device: D0,
            },
            TraceOp::CreateStream {
                stream: S1,
                device: D1,
            },
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
            TraceOp::Record {
                event: E0,
                stream: S1,
            },
            TraceOp::Launch {
                stream: S1,
                device: Some(D0),
            },
            // Legal: a stream waits on another device's event.
            TraceOp::Record {
                event: E0,
                stream: S0,
            },
            TraceOp::Wait {
                stream: S1,
                event: E0,
            },
            TraceOp::Launch {
                stream: S1,
                device: Some(D1),
            },
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
        let leak = |s| DefectKind::Leaked {
            object: TraceObject::Stream(StreamId(s)),
        };
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
        let s = TraceObject::Stream(StreamId(0));
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
        assert_eq!(
            text_kinds(trace),
            vec![(
                2,
                DefectKind::Leaked {
                    object: TraceObject::Stream(StreamId(0))
                }
            )]
        );
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
}
