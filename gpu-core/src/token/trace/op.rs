//! The stream/event calls a trace is made of: one [`TraceOp`] per driver call the checker
//! reads, whether parsed from text, translated from a plan or built in code.

use crate::id::{DeviceId, EventId, StreamId};

/// One stream/event call of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceOp {
    /// A stream was created on `device`.
    CreateStream {
        /// The stream.
        stream: StreamId,
        /// Its device.
        device: DeviceId,
    },
    /// A stream was destroyed.
    DestroyStream {
        /// The stream.
        stream: StreamId,
    },
    /// An event was created on `device`.
    CreateEvent {
        /// The event.
        event: EventId,
        /// Its device.
        device: DeviceId,
    },
    /// An event was destroyed.
    DestroyEvent {
        /// The event.
        event: EventId,
    },
    /// `event` was recorded on `stream`.
    Record {
        /// The event.
        event: EventId,
        /// The stream.
        stream: StreamId,
    },
    /// `stream` was made to wait for `event`.
    Wait {
        /// The stream.
        stream: StreamId,
        /// The event.
        event: EventId,
    },
    /// The host waited for all work on a stream.
    SynchronizeStream {
        /// The stream.
        stream: StreamId,
    },
    /// The host waited for an event.
    SynchronizeEvent {
        /// The event.
        event: EventId,
    },
    /// The host asked whether a stream is idle.
    QueryStream {
        /// The stream.
        stream: StreamId,
    },
    /// The host asked whether an event has completed.
    QueryEvent {
        /// The event.
        event: EventId,
    },
    /// An operation was enqueued on `stream`, with `device` current if known.
    Launch {
        /// The stream.
        stream: StreamId,
        /// The device current at the call, if the trace says.
        device: Option<DeviceId>,
    },
    /// A copy between two devices' memory was enqueued on `stream`: over the link between them
    /// (`direct`, peer access enabled) or staged through the host by the driver. For the
    /// checker, an operation on the stream like [`TraceOp::Launch`].
    PeerCopy {
        /// The stream.
        stream: StreamId,
        /// Whether the devices had peer access to each other.
        direct: bool,
    },
    /// A stream that exists without being created (a context's legacy default stream, a
    /// per-thread default stream) is declared, on `device`: never leaked, never destroyed;
    /// declaring it again is harmless.
    DefaultStream {
        /// The stream.
        stream: StreamId,
        /// Its device.
        device: DeviceId,
    },
    /// The process ended here: the streams and events alive are reported as alive at exit
    /// rather than leaked. Nothing may follow.
    Exit,
}
