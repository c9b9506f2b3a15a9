//! The cache's records: blocks (pieces of a segment, linked by address and in bins), the
//! segments they come from, and frees waiting on other streams' work.

use alloc::vec::Vec;

use crate::allocator::request::{AllocPath, BlockKey};
use crate::id::{EventId, StreamId};

/// "No block" in every block link.
pub(crate) const NIL: u32 = u32::MAX;
/// The lane of blocks no work can still be using.
pub(super) const IDLE: u32 = 0;

/// What a block slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// The slot is on the unused list.
    Unused,
    /// A free block in a lane's bins.
    Free,
    /// A free block parked by its lane (in no bins, not merged).
    Parked,
    /// Handed out to a caller.
    Live,
    /// Freed, waiting for work on other streams that used it.
    Pending,
}

/// A contiguous piece of a segment.
pub(crate) struct Block {
    /// First byte.
    pub(crate) addr: usize,
    /// Bytes (a multiple of the bins' granule).
    pub(crate) size: usize,
    /// Previous block in the same size class (free blocks only).
    pub(crate) bin_prev: u32,
    /// Next block in the same size class (free blocks only).
    pub(crate) bin_next: u32,
    /// The block just below in the segment.
    pub(super) prev: u32,
    /// The block just above in the segment.
    pub(super) next: u32,
    pub(super) segment: u32,
    /// Free blocks: the lane holding it. Pending blocks: the lane it goes to.
    pub(super) lane: u32,
    pub(super) state: State,
    /// Whether its segment belongs to the large pool.
    pub(super) large: bool,
    /// Bumped each time the slot is handed out, so stale handles are caught.
    pub(super) generation: u32,
    /// Free blocks in a stream lane: the lane's free count when it was freed.
    pub(super) seq: u64,
    /// Live blocks: bytes the caller asked for.
    pub(super) requested: usize,
    /// Live blocks: whether `KindCache::other_uses` names streams for it.
    pub(super) shared: bool,
}

pub(super) struct Segment {
    pub(super) addr: usize,
    /// Bytes held: the whole segment, or a growable segment's mapped part.
    pub(super) size: usize,
    /// The lowest block.
    pub(super) first: u32,
    pub(super) held: bool,
    /// A growable segment's reserved address space (0: an ordinary segment).
    pub(super) reserve: usize,
}

/// A block freed while other streams may still use it.
pub(super) struct PendingFree {
    pub(super) block: u32,
    pub(super) events: Vec<EventId>,
}

/// A candidate from another stream's lane and how its reuse was ordered.
pub(super) struct Borrowed {
    pub(super) block: u32,
    pub(super) from: StreamId,
    pub(super) waited: bool,
}

/// What [`KindCache::allocate`](super::KindCache::allocate) hands back: the block's slot and
/// generation, its address, and the path that served it.
pub(crate) type Served = (BlockKey, usize, AllocPath);
