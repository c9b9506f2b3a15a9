//! What a caller asks the allocator and gets back: the request ([`AllocRequest`], its
//! [`Order`]), the allocation and its handle, the path that served it, and a free's order.

use super::policy::MIN_ALIGNMENT;
use crate::id::{EventId, MemoryKind, StreamId};

/// When the memory must be usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order<'a> {
    /// At once, by the host and by any stream, with no ordering needed.
    Synchronous,
    /// By work enqueued on `stream` after the call, which must also be ordered after every event
    /// in `after` (the request's dependencies).
    Stream {
        /// The stream that will use the memory.
        stream: StreamId,
        /// Events the use must follow.
        after: &'a [EventId],
    },
}

/// One allocation request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocRequest<'a> {
    /// The kind of memory.
    pub kind: MemoryKind,
    /// Bytes wanted.
    pub size: usize,
    /// Required alignment of the address: a power of two.
    pub alignment: usize,
    /// When the memory must be usable.
    pub order: Order<'a>,
}

impl<'a> AllocRequest<'a> {
    /// A synchronous request for `size` bytes of `kind` at the default alignment
    /// ([`MIN_ALIGNMENT`]).
    pub const fn new(kind: MemoryKind, size: usize) -> Self {
        Self {
            kind,
            size,
            alignment: MIN_ALIGNMENT,
            order: Order::Synchronous,
        }
    }

    /// The same request with another alignment.
    pub const fn aligned(mut self, alignment: usize) -> Self {
        self.alignment = alignment;
        self
    }

    /// The same request, stream-ordered on `stream` after the events `after`.
    pub const fn on_stream(mut self, stream: StreamId, after: &'a [EventId]) -> Self {
        self.order = Order::Stream { stream, after };
        self
    }
}

/// Which path served a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocPath {
    /// A cached block freed on the same stream, or one no work can still be using.
    Cached,
    /// A cached block freed on another stream: its free was already complete (`waited ==
    /// false`), or the requesting stream was made to wait on one event.
    CachedFromStream {
        /// The stream the block was freed on.
        from: StreamId,
        /// Whether the requesting stream was made to wait.
        waited: bool,
    },
    /// A new segment from the driver's stream-ordered call.
    DriverStreamOrdered,
    /// A new segment from the driver's synchronous call, for a synchronous request.
    DriverSynchronous,
    /// A stream-ordered request for a kind without a stream-ordered form: the host waited for
    /// the request's dependencies, then the driver allocated synchronously.
    Fallback,
    /// A growable segment's mapped part grew to hold it
    /// ([`AllocatorConfig::growable_segments`](super::AllocatorConfig::growable_segments)).
    SegmentGrown,
}

/// A block's slot in its cache (low half) and its generation (high half), in one word that is
/// written and read whole. As two `u32`s, a block just served was stored in halves on the way
/// out of the cache and then loaded whole into the caller's handle: a load the store buffer
/// cannot forward, a stall of about 4 ns on every allocation hit (seen with perf).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BlockKey(u64);

impl BlockKey {
    pub(crate) const fn new(slot: u32, generation: u32) -> Self {
        Self(slot as u64 | (generation as u64) << 32)
    }

    pub(crate) const fn slot(self) -> u32 {
        self.0 as u32
    }

    pub(crate) const fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// A handle to one live allocation; give it back to
/// [`DeviceAllocator::free`](super::DeviceAllocator::free).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHandle {
    kind: MemoryKind,
    pub(super) key: BlockKey,
}

impl BlockHandle {
    pub(super) const fn new(kind: MemoryKind, key: BlockKey) -> Self {
        Self { kind, key }
    }

    /// The kind of memory the handle names.
    pub const fn kind(&self) -> MemoryKind {
        self.kind
    }
}

impl core::fmt::Debug for BlockHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BlockHandle")
            .field("kind", &self.kind)
            .field("slot", &self.key.slot())
            .field("generation", &self.key.generation())
            .finish()
    }
}

/// A served request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Give this back to free the memory.
    pub handle: BlockHandle,
    /// The address (device address for device and managed memory, host address otherwise).
    pub address: usize,
    /// Bytes usable at `address` (at least the request's size).
    pub size: usize,
    /// Which path served the request.
    pub path: AllocPath,
}

/// How freed memory is ordered against the work that used it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// No work can still use the memory (the caller waited for it).
    Idle,
    /// All work using the memory was enqueued on this stream (or ordered before its latest
    /// work), apart from streams named with
    /// [`DeviceAllocator::mark_used_on`](super::DeviceAllocator::mark_used_on).
    OnStream(StreamId),
}
