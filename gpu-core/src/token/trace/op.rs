//! The calls a trace is made of: one [`TraceOp`] per stream, event or memory call the checkers
//! read (a line with a footprint is its stream operation then one `Access` per range), whether
//! parsed from text, translated from a plan or built in code.

use super::memory::{AccessMode, AddressRange, AllocatorId, CallKind, SiteId, StreamKind};
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
    /// How `stream` synchronises with its device's legacy default stream (`stream_kind`):
    /// without this, a created stream is [`StreamKind::Blocking`] and a default stream
    /// [`StreamKind::Legacy`]. For the lifetime checker, a use of the stream.
    SetStreamKind {
        /// The stream.
        stream: StreamId,
        /// Its kind.
        kind: StreamKind,
    },
    /// The stream operation just before it on `stream` (a [`TraceOp::Launch`] or
    /// [`TraceOp::PeerCopy`], from the same line in text) touches `range`: one op per range of
    /// its footprint. The lifetime checker ignores it (the operation itself was the use).
    Access {
        /// The stream.
        stream: StreamId,
        /// The kind of operation.
        call: CallKind,
        /// The bytes.
        range: AddressRange,
        /// Read, write or both.
        mode: AccessMode,
        /// Where the program made the call, if the trace says.
        site: Option<SiteId>,
    },
    /// Device memory was allocated: by `cuMemAlloc` (no stream) or stream-ordered by
    /// `cuMemAllocAsync` on `stream` (a use of the stream).
    Alloc {
        /// The bytes.
        range: AddressRange,
        /// The stream of a stream-ordered allocation.
        stream: Option<StreamId>,
        /// Where the program made the call, if the trace says.
        site: Option<SiteId>,
    },
    /// The allocation starting at `address` was freed: by `cuMemFree` (no stream; it waits for
    /// the device first) or stream-ordered by `cuMemFreeAsync` on `stream` (a use of it).
    Free {
        /// The allocation's first byte.
        address: u64,
        /// The stream of a stream-ordered free.
        stream: Option<StreamId>,
        /// Where the program made the call, if the trace says.
        site: Option<SiteId>,
    },
    /// A sub-allocator handed out a block (inside one of its segments) for use on `stream`.
    BlockAlloc {
        /// The allocator.
        allocator: AllocatorId,
        /// The block's bytes.
        range: AddressRange,
        /// The stream the block belongs to.
        stream: StreamId,
        /// Where the program made the call, if the trace says.
        site: Option<SiteId>,
    },
    /// A sub-allocator took back the block starting at `address` into the pool of `stream`
    /// (the stream it was allocated on, unless the program says another): it may hand it out
    /// again on that stream at once, and on another once every stream the block was marked
    /// used on ([`TraceOp::BlockUse`]) has finished the work enqueued before the free.
    BlockFree {
        /// The allocator.
        allocator: AllocatorId,
        /// The block's first byte.
        address: u64,
        /// The stream whose pool takes the block.
        stream: StreamId,
        /// Where the program made the call, if the trace says.
        site: Option<SiteId>,
    },
    /// The block starting at `address` is used on `stream` as well as its own (PyTorch's
    /// `record_stream`, our `mark_used_on_foreign_stream`): its reuse waits for that stream's
    /// work enqueued before its free.
    BlockUse {
        /// The allocator.
        allocator: AllocatorId,
        /// The block's first byte.
        address: u64,
        /// The other stream.
        stream: StreamId,
        /// Where the program made the call, if the trace says.
        site: Option<SiteId>,
    },
    /// The host waited for all work on `device` (`cuCtxSynchronize`,
    /// `cudaDeviceSynchronize`).
    SynchronizeDevice {
        /// The device.
        device: DeviceId,
    },
}

impl TraceOp {
    /// The stream an operation names for the lifetime checker (as a use), if any, among
    /// the memory operations ([`TraceOp::SetStreamKind`], [`TraceOp::Alloc`],
    /// [`TraceOp::Free`], the block operations); `None` for the others.
    pub fn memory_stream(&self) -> Option<StreamId> {
        match *self {
            TraceOp::SetStreamKind { stream, .. }
            | TraceOp::BlockAlloc { stream, .. }
            | TraceOp::BlockFree { stream, .. }
            | TraceOp::BlockUse { stream, .. } => Some(stream),
            TraceOp::Alloc { stream, .. } | TraceOp::Free { stream, .. } => stream,
            _ => None,
        }
    }
}
