//! The stream/event lifetime checker: reads any sequence of trace operations, one at a time,
//! and reports every defect (leak, double destroy, use after destroy, wait before record,
//! wrong device, default stream destroyed) and every object alive at a process's exit.
//!
//! Memory is bounded by the objects alive, not by the trace's length: a destroyed object is
//! remembered only among the last [`Checker::REMEMBERED_DESTROYS`] destroys of its kind (a
//! ring of tombstones), so "used/destroyed after destroy" is exact for recent destroys, which
//! is where such bugs show (a pool hands a handle back, a join forgets it), and a use of an
//! object destroyed longer ago is still reported, as "never created, or destroyed too long
//! ago to remember". Remembering every destroy would make memory grow with the trace (one
//! entry per short-lived stream of every MLIR execution, per event of every iteration).

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;

use hashbrown::HashMap;

use super::trace::TraceOp;
use crate::id::{DeviceId, EventId, StreamId};

/// A stream or an event named in a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceObject {
    /// A stream.
    Stream(StreamId),
    /// An event.
    Event(EventId),
}

/// What is wrong. Positions are those the caller gave [`Checker::step`] (for [`check`]: the
/// indexes of the checked operations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefectKind {
    /// The object was still alive at the end of a trace without `exit`; the defect's position
    /// is where it was created.
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
    /// The object was used (or destroyed) while not alive, and the checker has forgotten
    /// destroyed objects of its kind: it was never created, or it was destroyed before the
    /// last `remembered` destroys of its kind.
    NeverCreatedOrForgotten {
        /// The object.
        object: TraceObject,
        /// How many destroys of each kind the checker remembers.
        remembered: usize,
    },
    /// The object was created again while alive (the earlier one was never destroyed).
    CreatedWhileAlive {
        /// The object.
        object: TraceObject,
        /// Where it was created (or declared, for a default stream) before.
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
    /// A default stream (declared, never created) was destroyed; it stays alive.
    DefaultStreamDestroyed {
        /// The stream.
        stream: StreamId,
    },
    /// An operation came after [`TraceOp::Exit`]; it is ignored. (The text format refuses
    /// such a line; this is for operations built in code.)
    CallAfterExit,
}

/// One defect: where and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defect {
    /// Position of the operation that shows the defect (for a leak: the creation).
    pub position: usize,
    /// What is wrong.
    pub kind: DefectKind,
}

/// What the checker reports as it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finding {
    /// A defect.
    Defect(Defect),
    /// An object alive when the process exited ([`TraceOp::Exit`]): programs commonly keep
    /// pools of streams and events for their whole life, so this is not a defect by itself.
    AliveAtExit {
        /// The object.
        object: TraceObject,
        /// Where it was created.
        created_at: usize,
    },
}

impl Finding {
    /// The position the finding is reported at (for an object alive at exit: its creation).
    pub fn position(&self) -> usize {
        match *self {
            Finding::Defect(defect) => defect.position,
            Finding::AliveAtExit { created_at, .. } => created_at,
        }
    }

    /// Writes the message without its position, naming objects and positions with the given
    /// functions (so a parsed trace can use its own names and line numbers).
    pub fn describe(
        &self,
        f: &mut fmt::Formatter<'_>,
        object: &mut NameFn<'_, TraceObject>,
        position: &mut NameFn<'_, usize>,
    ) -> fmt::Result {
        match self {
            Finding::Defect(defect) => defect.kind.describe(f, object, position),
            Finding::AliveAtExit { object: o, .. } => {
                object(f, *o)?;
                f.write_str(" created here is alive at exit")
            }
        }
    }
}

/// A function that writes an object or a position into a message.
pub type NameFn<'a, T> = dyn FnMut(&mut fmt::Formatter<'_>, T) -> fmt::Result + 'a;

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
            DefectKind::NeverCreatedOrForgotten {
                object: o,
                remembered,
            } => {
                object(f, o)?;
                write!(
                    f,
                    " used but never created, or destroyed before the last {remembered} \
                     destroys of its kind (all the checker remembers)"
                )
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
            DefectKind::DefaultStreamDestroyed { stream } => {
                object(f, TraceObject::Stream(stream))?;
                f.write_str(
                    " is a default stream: it cannot be destroyed (default stream destroyed)",
                )
            }
            DefectKind::CallAfterExit => f.write_str("a call after exit (ignored)"),
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
    Alive {
        created_at: usize,
    },
    /// A default stream: alive from its declaration on, never leaked, never destroyed.
    Default {
        declared_at: usize,
    },
    Destroyed {
        destroyed_at: usize,
    },
}

#[derive(Clone, Copy, Debug)]
struct ObjectState {
    device: DeviceId,
    life: Life,
    /// Events only: recorded since the last creation.
    recorded: bool,
}

/// Object states by id: in a vector for ids below [`States::DENSE`] (the ids a text reader
/// hands out, reused as names are released, stay there: a lookup is an index), in a map above.
#[derive(Debug, Default)]
struct States {
    /// Grows to the highest id below `DENSE` seen (at most 2 MiB).
    dense: Vec<Option<ObjectState>>,
    sparse: HashMap<u32, ObjectState>,
    dense_len: usize,
}

impl States {
    const DENSE: u32 = 1 << 16;

    fn get(&self, id: u32) -> Option<&ObjectState> {
        if id < Self::DENSE {
            self.dense.get(id as usize)?.as_ref()
        } else {
            self.sparse.get(&id)
        }
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut ObjectState> {
        if id < Self::DENSE {
            self.dense.get_mut(id as usize)?.as_mut()
        } else {
            self.sparse.get_mut(&id)
        }
    }

    fn insert(&mut self, id: u32, state: ObjectState) {
        if id < Self::DENSE {
            let index = id as usize;
            if self.dense.len() <= index {
                self.dense.resize(index + 1, None);
            }
            if self.dense[index].replace(state).is_none() {
                self.dense_len += 1;
            }
        } else {
            self.sparse.insert(id, state);
        }
    }

    fn remove(&mut self, id: u32) {
        if id < Self::DENSE {
            if let Some(slot) = self.dense.get_mut(id as usize)
                && slot.take().is_some()
            {
                self.dense_len -= 1;
            }
        } else {
            self.sparse.remove(&id);
        }
    }

    fn len(&self) -> usize {
        self.dense_len + self.sparse.len()
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &ObjectState)> {
        let dense = (0..)
            .zip(&self.dense)
            .filter_map(|(id, state)| Some((id, state.as_ref()?)));
        dense.chain(self.sparse.iter().map(|(&id, state)| (id, state)))
    }
}

/// The objects of one kind the checker tracks: those alive, and the most recently destroyed.
#[derive(Debug, Default)]
struct Table {
    states: States,
    /// Destroys in order, oldest first: (id, position). An entry whose object was created
    /// (and maybe destroyed) again since is stale and skipped when it leaves the ring.
    tombstones: VecDeque<(u32, usize)>,
    /// Whether a destroyed object was ever forgotten (a use of an unknown id is then not
    /// necessarily of one never created).
    forgot_any: bool,
}

/// Checks a trace one operation at a time ([`step`](Checker::step)), reporting findings as
/// it finds them; [`finish`](Checker::finish) adds the leaks.
#[derive(Debug)]
pub struct Checker {
    streams: Table,
    events: Table,
    remembered: usize,
    exited: bool,
    /// The objects the last step left untracked.
    forgotten: Vec<TraceObject>,
}

/// All defects of `ops`, in order of position (leaks, found at the end, last). Objects alive
/// at an [`TraceOp::Exit`] are not defects and not returned (use a [`Checker`] to see them).
pub fn check(ops: &[TraceOp]) -> Vec<Defect> {
    let mut checker = Checker::new();
    let mut defects = Vec::new();
    let mut keep = |finding| {
        if let Finding::Defect(defect) = finding {
            defects.push(defect);
        }
    };
    for (position, op) in ops.iter().enumerate() {
        checker.step(position, op, &mut keep);
    }
    checker.finish(&mut keep);
    defects
}

impl Default for Checker {
    fn default() -> Self {
        Self::new()
    }
}

impl Checker {
    /// How many destroyed objects of each kind a checker made by [`new`](Checker::new)
    /// remembers (about 100 bytes each, with the name a text reader keeps for it).
    pub const REMEMBERED_DESTROYS: usize = 1 << 14;

    /// A checker that has seen nothing.
    pub fn new() -> Self {
        Self::remembering(Self::REMEMBERED_DESTROYS)
    }

    /// A checker that remembers the last `remembered` destroyed objects of each kind.
    pub fn remembering(remembered: usize) -> Self {
        Checker {
            streams: Table::default(),
            events: Table::default(),
            remembered,
            exited: false,
            forgotten: Vec::new(),
        }
    }

    /// How many objects the checker tracks now: alive, and destroyed but remembered.
    pub fn tracked(&self) -> usize {
        self.streams.states.len() + self.events.states.len()
    }

    /// The objects the last [`step`](Checker::step) left untracked: used but unknown, or
    /// destroyed so long ago that they were forgotten. A layer that maps names to ids can
    /// release their names.
    pub fn forgotten(&self) -> &[TraceObject] {
        &self.forgotten
    }

    /// Checks the next operation, at `position` (positions must increase from one call to
    /// the next: an operation's index, or its line), passing every finding to `found`.
    pub fn step(&mut self, position: usize, op: &TraceOp, found: &mut impl FnMut(Finding)) {
        self.forgotten.clear();
        let mut step = Step {
            checker: self,
            position,
            found,
        };
        step.apply(op);
    }

    /// Reports every object still alive as leaked (unless the trace ended with
    /// [`TraceOp::Exit`], which reported them as alive at exit), in order of creation.
    pub fn finish(self, found: &mut impl FnMut(Finding)) {
        if self.exited {
            return;
        }
        for (object, created_at) in self.alive() {
            found(Finding::Defect(Defect {
                position: created_at,
                kind: DefectKind::Leaked { object },
            }));
        }
    }

    /// The created objects alive now (default streams excepted), in order of creation.
    fn alive(&self) -> Vec<(TraceObject, usize)> {
        let mut alive = Vec::new();
        for (table, object) in [
            (
                &self.streams,
                (|id| TraceObject::Stream(StreamId(id))) as fn(u32) -> _,
            ),
            (&self.events, |id| TraceObject::Event(EventId(id))),
        ] {
            alive.extend(
                table
                    .states
                    .iter()
                    .filter_map(|(id, state)| match state.life {
                        Life::Alive { created_at } => Some((object(id), created_at)),
                        Life::Default { .. } | Life::Destroyed { .. } => None,
                    }),
            );
        }
        alive.sort_unstable_by_key(|&(_, created_at)| created_at);
        alive
    }

    fn table(&mut self, object: TraceObject) -> (&mut Table, u32) {
        match object {
            TraceObject::Stream(s) => (&mut self.streams, s.0),
            TraceObject::Event(e) => (&mut self.events, e.0),
        }
    }
}

/// One operation being checked.
struct Step<'c, F> {
    checker: &'c mut Checker,
    position: usize,
    found: &'c mut F,
}

impl<F: FnMut(Finding)> Step<'_, F> {
    fn apply(&mut self, op: &TraceOp) {
        if self.checker.exited {
            self.report(DefectKind::CallAfterExit);
            return;
        }
        match *op {
            TraceOp::CreateStream { stream, device } => {
                self.create(TraceObject::Stream(stream), device, false)
            }
            TraceOp::DefaultStream { stream, device } => {
                self.create(TraceObject::Stream(stream), device, true)
            }
            TraceOp::CreateEvent { event, device } => {
                self.create(TraceObject::Event(event), device, false)
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
                if event_state.is_some()
                    && let Some(state) = self.checker.events.states.get_mut(event.0)
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
            TraceOp::SynchronizeStream { stream }
            | TraceOp::QueryStream { stream }
            | TraceOp::PeerCopy { stream, .. } => {
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
            TraceOp::Exit => {
                for (object, created_at) in self.checker.alive() {
                    (self.found)(Finding::AliveAtExit { object, created_at });
                }
                self.checker.exited = true;
            }
        }
    }

    fn report(&mut self, kind: DefectKind) {
        (self.found)(Finding::Defect(Defect {
            position: self.position,
            kind,
        }));
    }

    fn create(&mut self, object: TraceObject, device: DeviceId, default: bool) {
        let position = self.position;
        let (table, id) = self.checker.table(object);
        let earlier = match table.states.get(id).map(|state| state.life) {
            Some(Life::Alive { created_at }) => created_at,
            // Declaring a default stream again is harmless.
            Some(Life::Default { .. }) if default => return,
            Some(Life::Default { declared_at }) => declared_at,
            None | Some(Life::Destroyed { .. }) => {
                let life = if default {
                    Life::Default {
                        declared_at: position,
                    }
                } else {
                    Life::Alive {
                        created_at: position,
                    }
                };
                let state = ObjectState {
                    device,
                    life,
                    recorded: false,
                };
                table.states.insert(id, state);
                return;
            }
        };
        // Keep the first creation: its leak is the one reported at the end.
        self.report(DefectKind::CreatedWhileAlive {
            object,
            created_at: earlier,
        });
    }

    fn destroy(&mut self, object: TraceObject) {
        let (position, remembered) = (self.position, self.checker.remembered);
        let (table, id) = self.checker.table(object);
        let kind = match table.states.get_mut(id) {
            None => return self.report_unknown(object),
            Some(state) => match state.life {
                Life::Alive { .. } => {
                    state.life = Life::Destroyed {
                        destroyed_at: position,
                    };
                    table.tombstones.push_back((id, position));
                    if table.tombstones.len() > remembered {
                        self.forget_oldest(object);
                    }
                    return;
                }
                Life::Default { .. } => match object {
                    TraceObject::Stream(stream) => DefectKind::DefaultStreamDestroyed { stream },
                    // Only streams are declared as defaults.
                    TraceObject::Event(_) => return,
                },
                Life::Destroyed { destroyed_at } => DefectKind::DestroyedTwice {
                    object,
                    first_destroyed_at: destroyed_at,
                },
            },
        };
        self.report(kind);
    }

    /// Drops the oldest tombstone of `object`'s kind, and the object's state if the object
    /// was not created again since.
    fn forget_oldest(&mut self, object: TraceObject) {
        let (table, _) = self.checker.table(object);
        let Some((id, at)) = table.tombstones.pop_front() else {
            return;
        };
        let current = table.states.get(id).map(|state| state.life);
        if let Some(Life::Destroyed { destroyed_at }) = current
            && destroyed_at == at
        {
            table.states.remove(id);
            table.forgot_any = true;
            let forgotten = match object {
                TraceObject::Stream(_) => TraceObject::Stream(StreamId(id)),
                TraceObject::Event(_) => TraceObject::Event(EventId(id)),
            };
            self.checker.forgotten.push(forgotten);
        }
    }

    /// Reports a use (or destroy) of an object the checker does not track.
    fn report_unknown(&mut self, object: TraceObject) {
        let remembered = self.checker.remembered;
        let (table, _) = self.checker.table(object);
        let kind = if table.forgot_any {
            DefectKind::NeverCreatedOrForgotten { object, remembered }
        } else {
            DefectKind::NeverCreated { object }
        };
        self.checker.forgotten.push(object);
        self.report(kind);
    }

    /// The object's state if it is alive (or a default stream); reports it otherwise.
    fn use_object(&mut self, object: TraceObject) -> Option<ObjectState> {
        let (table, id) = self.checker.table(object);
        let kind = match table.states.get(id) {
            None => {
                self.report_unknown(object);
                return None;
            }
            Some(state) => match state.life {
                Life::Alive { .. } | Life::Default { .. } => return Some(*state),
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

    fn findings(checker: &mut Checker, ops: &[TraceOp]) -> Vec<Finding> {
        let mut found = Vec::new();
        for (position, op) in ops.iter().enumerate() {
            checker.step(position, op, &mut |f| found.push(f));
        }
        found
    }

    fn stream(n: u32) -> TraceObject {
        TraceObject::Stream(StreamId(n))
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
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
            TraceOp::CreateStream {
                stream: S0,
                device: D0,
            },
            TraceOp::CreateEvent {
                event: EventId(1),
                device: D0,
            },
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
                    object: TraceObject::Event(E0),
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
            vec![
                (
                    1,
                    DefectKind::Leaked {
                        object: TraceObject::Event(E0)
                    }
                ),
                (2, DefectKind::Leaked { object: stream(0) }),
            ]
        );
    }

    #[test]
    fn calls_after_exit_are_reported_and_change_nothing() {
        let ops = [
            TraceOp::CreateStream {
                stream: S0,
                device: D0,
            },
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
        let create = |n| TraceOp::CreateStream {
            stream: StreamId(n),
            device: D0,
        };
        let destroy = |n| TraceOp::DestroyStream {
            stream: StreamId(n),
        };
        let launch = |n| TraceOp::Launch {
            stream: StreamId(n),
            device: None,
        };
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
                (0, DefectKind::NeverCreated { object: stream(9) }),
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
            TraceOp::CreateEvent {
                event: E0,
                device: D0,
            },
            TraceOp::Record {
                event: E0,
                stream: S0,
            },
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
                    kind: DefectKind::NeverCreated { object: stream(0) }
                }),
                Finding::Defect(Defect {
                    position: 3,
                    kind: DefectKind::NeverCreatedOrForgotten {
                        object: TraceObject::Event(E0),
                        remembered: 0
                    }
                }),
            ]
        );
    }
}
