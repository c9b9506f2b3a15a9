//! What the checker reports: the objects it names, the kinds of defect, and each finding's
//! message, written with the caller's own names for objects and positions.

use core::fmt;

use crate::id::{DeviceId, EventId, StreamId};
use crate::token::races::{Race, RaceNames};

/// A stream or an event named in a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceObject {
    /// A stream.
    Stream(StreamId),
    /// An event.
    Event(EventId),
}

/// What is wrong. Positions are those the caller gave [`Checker::step`](super::Checker::step)
/// (for [`check`](super::check): the indexes of the checked operations).
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
    /// An operation came after [`TraceOp::Exit`](crate::token::TraceOp::Exit); it is ignored. (The text format refuses
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
    /// An object alive when the process exited ([`TraceOp::Exit`](crate::token::TraceOp::Exit)): programs commonly keep
    /// pools of streams and events for their whole life, so this is not a defect by itself.
    AliveAtExit {
        /// The object.
        object: TraceObject,
        /// Where it was created.
        created_at: usize,
    },
    /// A memory race between two operations with footprints (see
    /// [`RaceChecker`](crate::token::RaceChecker)); reported at the later one.
    Race(Race),
}

impl Finding {
    /// The position the finding is reported at (for an object alive at exit: its creation).
    pub fn position(&self) -> usize {
        match *self {
            Finding::Defect(defect) => defect.position,
            Finding::AliveAtExit { created_at, .. } => created_at,
            Finding::Race(race) => race.later.position,
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
            // Sites and allocators by number: a trace's reader names them (`write_finding`).
            Finding::Race(race) => race.describe(
                f,
                &mut RaceNames {
                    stream: &mut |f, s| object(f, TraceObject::Stream(s)),
                    site: &mut |f, site| write!(f, "site {}", site.0),
                    allocator: &mut |f, a| write!(f, "allocator {}", a.0),
                    position,
                },
            ),
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
                first_destroyed_at: at,
            } => {
                let message = (" destroyed twice (first destroyed at ", ")");
                object_and_position(f, object, position, o, message, at)
            }
            DefectKind::UsedAfterDestroy {
                object: o,
                destroyed_at: at,
            } => {
                let message = (" used after it was destroyed at ", "");
                object_and_position(f, object, position, o, message, at)
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
                created_at: at,
            } => {
                let message = (
                    " created again while alive (created at ",
                    " and never destroyed)",
                );
                object_and_position(f, object, position, o, message, at)
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

/// Writes object `o`, then `message.0`, position `at` and `message.1`: a message naming an
/// object and an earlier position of it.
fn object_and_position(
    f: &mut fmt::Formatter<'_>,
    object: &mut NameFn<'_, TraceObject>,
    position: &mut NameFn<'_, usize>,
    o: TraceObject,
    message: (&str, &str),
    at: usize,
) -> fmt::Result {
    object(f, o)?;
    f.write_str(message.0)?;
    position(f, at)?;
    f.write_str(message.1)
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
