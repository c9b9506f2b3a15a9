//! The memory side of a trace: device address ranges, how an operation touches them, what kind
//! of call touched them, how a stream synchronises with the legacy default stream, and the ids
//! of call sites and sub-allocators.

use core::fmt;

/// A call site (a function name or a return address, as the trace writes it), numbered in
/// order of first mention; a trace keeps the names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SiteId(pub u32);

/// A sub-allocator (a caching allocator handing out blocks of bigger segments: PyTorch's, RMM's,
/// ours), numbered in order of first mention; a trace keeps the names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AllocatorId(pub u32);

/// Bytes `start .. start + len` of device memory. `start + len` never overflows: the parser
/// refuses such a range, and [`AddressRange::new`] clips it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddressRange {
    /// The first byte.
    pub start: u64,
    /// How many bytes.
    pub len: u64,
}

impl AddressRange {
    /// `len` bytes from `start`, clipped to the end of the address space.
    pub const fn new(start: u64, len: u64) -> Self {
        let len = if len > u64::MAX - start {
            u64::MAX - start
        } else {
            len
        };
        AddressRange { start, len }
    }

    /// One past the last byte.
    pub const fn end(&self) -> u64 {
        self.start.saturating_add(self.len)
    }

    /// The bytes both ranges hold, if any.
    pub fn overlap(&self, other: &AddressRange) -> Option<AddressRange> {
        let start = self.start.max(other.start);
        let end = self.end().min(other.end());
        (start < end).then(|| AddressRange::new(start, end - start))
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}+{}", self.start, self.len)
    }
}

/// How an operation touches a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessMode {
    /// Reads it (`r:`).
    Read,
    /// Writes it (`w:`).
    Write,
    /// Reads and writes it (`rw:`), what a kernel's pointer parameter counts as unless narrowed.
    ReadWrite,
}

impl AccessMode {
    /// Whether the access writes.
    pub const fn writes(self) -> bool {
        !matches!(self, AccessMode::Read)
    }

    /// The prefix the text format writes before the range (`r`, `w`, `rw`).
    pub const fn prefix(self) -> &'static str {
        match self {
            AccessMode::Read => "r",
            AccessMode::Write => "w",
            AccessMode::ReadWrite => "rw",
        }
    }
}

/// The kind of stream operation a footprint belongs to: the line it was written on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallKind {
    /// A kernel (or any other operation written as `launch`).
    Launch,
    /// A copy (`cuMemcpy*Async`): reads its source, writes its destination.
    Copy,
    /// A fill (`cuMemsetD*Async`): writes its range.
    Fill,
    /// A copy between two devices (`peer_copy`).
    PeerCopy,
}

impl CallKind {
    /// The line's call name.
    pub const fn name(self) -> &'static str {
        match self {
            CallKind::Launch => "launch",
            CallKind::Copy => "copy",
            CallKind::Fill => "fill",
            CallKind::PeerCopy => "peer_copy",
        }
    }
}

/// How a stream synchronises with its device's legacy default stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// A created stream without `CU_STREAM_NON_BLOCKING` (what `stream_create` means unless a
    /// `stream_kind` line says otherwise): each of its operations waits for the legacy default
    /// stream's earlier work, and the legacy default stream's later work waits for it.
    Blocking,
    /// A created stream with `CU_STREAM_NON_BLOCKING`: no implicit synchronisation.
    NonBlocking,
    /// A context's legacy default stream (what `stream_default` means unless a `stream_kind`
    /// line says otherwise): synchronises with every blocking stream of its device.
    Legacy,
    /// A per-thread default stream: blocking, like [`StreamKind::Blocking`].
    PerThread,
}

impl StreamKind {
    /// The word the text format writes.
    pub const fn word(self) -> &'static str {
        match self {
            StreamKind::Blocking => "blocking",
            StreamKind::NonBlocking => "nonblocking",
            StreamKind::Legacy => "legacy",
            StreamKind::PerThread => "per_thread",
        }
    }

    /// Whether operations of a stream of this kind synchronise with the legacy default stream.
    pub const fn blocking(self) -> bool {
        matches!(self, StreamKind::Blocking | StreamKind::PerThread)
    }
}
