//! What a plan is made of: the stream/event steps ([`PlanStep`]) the runtime carries out, and
//! the [`PendingWait`] a wait begun outside the planner's lock holds until it ends.

use crate::id::{DeviceId, EventId, StreamId};
use crate::token::handle::OpId;

/// One stream/event operation of a plan, for the runtime layer to carry out on a backend.
///
/// Pools only hand out ids: an acquire with `fresh: true` means the pool was empty and the
/// runtime creates the object; a release puts it back in the pool; a destroy (only from
/// [`Planner::drain_pools`](super::Planner::drain_pools)) ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanStep {
    /// Take a stream from `device`'s pool; `fresh` means the pool was empty: create it.
    AcquireStream {
        /// Device the stream belongs to.
        device: DeviceId,
        /// The stream handed out.
        stream: StreamId,
        /// Whether the runtime must create the stream.
        fresh: bool,
    },
    /// Give a stream back to `device`'s pool. Work on it may still be pending.
    ReleaseStream {
        /// Device the stream belongs to.
        device: DeviceId,
        /// The stream given back.
        stream: StreamId,
    },
    /// Destroy a pooled stream.
    DestroyStream {
        /// Device the stream belongs to.
        device: DeviceId,
        /// The stream destroyed.
        stream: StreamId,
    },
    /// Take an event from `device`'s pool; `fresh` means the pool was empty: create it.
    AcquireEvent {
        /// Device the event belongs to.
        device: DeviceId,
        /// The event handed out.
        event: EventId,
        /// Whether the runtime must create the event.
        fresh: bool,
    },
    /// Give an event back to `device`'s pool. Waits issued on it stay valid.
    ReleaseEvent {
        /// Device the event belongs to.
        device: DeviceId,
        /// The event given back.
        event: EventId,
    },
    /// Destroy a pooled event.
    DestroyEvent {
        /// Device the event belongs to.
        device: DeviceId,
        /// The event destroyed.
        event: EventId,
    },
    /// Record `event` on `stream` (both of one device).
    Record {
        /// The event recorded.
        event: EventId,
        /// The stream it is recorded on.
        stream: StreamId,
    },
    /// Make `stream` wait for the last record of `event` (the event may be another device's).
    Wait {
        /// The stream that waits.
        stream: StreamId,
        /// The event waited for.
        event: EventId,
    },
    /// Launch the caller's operation `op` on `stream` of `device`.
    Run {
        /// The caller's label of the operation.
        op: OpId,
        /// The device the operation runs on.
        device: DeviceId,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// Block the host until all work on `stream` has completed.
    SynchronizeStream {
        /// The stream waited for.
        stream: StreamId,
    },
    /// Block the host until the last record of `event` has completed.
    SynchronizeEvent {
        /// The event waited for.
        event: EventId,
    },
}

/// A wait begun with [`Planner::begin_wait`](super::Planner::begin_wait): the stream or fork event to synchronise, held out
/// of the pools until [`Planner::end_wait`](super::Planner::end_wait). Not `Copy`: it is ended exactly once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a begun wait holds its stream or event until it is ended"]
pub enum PendingWait {
    /// The token owned this stream: synchronise it.
    Stream(StreamId),
    /// The token was a fork branch: synchronise this event (one share of it is held).
    Event(EventId),
}
