//! The rules each operation is checked by: creation, destruction, use, record and wait, each
//! against the object's remembered life, reporting what breaks them.

use super::Checker;
use super::finding::{Defect, DefectKind, Finding, TraceObject};
use super::state::{Life, ObjectState};
use crate::id::{DeviceId, EventId, StreamId};
use crate::token::trace::TraceOp;

impl Checker {
    /// Checks the next operation, at `position` (positions must increase from one call to
    /// the next: an operation's index, or its line), passing every finding to `found`.
    pub fn step(&mut self, position: usize, op: &TraceOp, found: &mut impl FnMut(Finding)) {
        self.forgotten.clear();
        let exited = self.exited;
        let mut step = Step {
            checker: self,
            position,
            found,
        };
        step.apply(op);
        if !exited {
            self.races
                .step(position, op, &mut |race| found(Finding::Race(race)));
            // A stream the checker no longer tracks may see its name given to another.
            for object in &self.forgotten {
                if let TraceObject::Stream(stream) = *object {
                    self.races.forget_stream(stream);
                }
            }
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
            TraceOp::SetStreamKind { stream, .. }
            | TraceOp::BlockAlloc { stream, .. }
            | TraceOp::BlockFree { stream, .. }
            | TraceOp::BlockUse { stream, .. }
            | TraceOp::Alloc {
                stream: Some(stream),
                ..
            }
            | TraceOp::Free {
                stream: Some(stream),
                ..
            } => {
                self.use_object(TraceObject::Stream(stream));
            }
            // The operation an access belongs to was the use; the others name no stream or
            // event.
            TraceOp::Access { .. }
            | TraceOp::Alloc { stream: None, .. }
            | TraceOp::Free { stream: None, .. }
            | TraceOp::SynchronizeDevice { .. } => {}
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
