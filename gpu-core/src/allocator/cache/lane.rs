//! Lanes of free blocks: the idle lane, and one per stream with its bins, its free stamps and
//! the fences recorded after them, and the block it parks.

use alloc::collections::VecDeque;

use super::bins::Bins;
use super::block::NIL;
use crate::id::{EventId, StreamId};

/// An event recorded on a lane's stream once `seq` frees had happened there.
pub(super) struct Fence {
    pub(super) event: EventId,
    pub(super) seq: u64,
}

pub(super) struct Lane {
    /// `None` for the idle lane.
    pub(super) stream: Option<StreamId>,
    pub(super) small: Bins,
    pub(super) large: Bins,
    /// Frees stamped so far.
    pub(super) free_seq: u64,
    /// Frees with a stamp up to this are known complete.
    pub(super) completed_seq: u64,
    /// Recorded, not yet known complete, oldest first.
    pub(super) fences: VecDeque<Fence>,
    /// The parked block, or `NIL`.
    pub(super) parked: u32,
    /// The lane's growable segment of each pool (small, large), or `NIL`.
    pub(super) growable: [u32; 2],
}

impl Lane {
    pub(super) fn new(stream: Option<StreamId>) -> Self {
        Self {
            stream,
            small: Bins::new(),
            large: Bins::new(),
            free_seq: 0,
            completed_seq: 0,
            fences: VecDeque::new(),
            parked: NIL,
            growable: [NIL; 2],
        }
    }

    #[inline]
    pub(super) fn bins(&self, large: bool) -> &Bins {
        if large { &self.large } else { &self.small }
    }

    #[inline]
    pub(super) fn bins_mut(&mut self, large: bool) -> &mut Bins {
        if large {
            &mut self.large
        } else {
            &mut self.small
        }
    }
}
