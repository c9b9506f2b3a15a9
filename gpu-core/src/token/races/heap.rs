//! What the race checker knows of device memory's lives: the driver's allocations, the live
//! blocks of sub-allocators (with the streams they were marked used on), and the ranges freed
//! since (with what a reuse must wait for), the last [`Heap::REMEMBERED_FREES`] of them.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use super::clock::Clock;
use super::report::RaceOp;
use crate::token::trace::AddressRange;

/// A live block of a sub-allocator.
#[derive(Debug)]
pub(super) struct Block {
    pub(super) end: u64,
    /// The slots of the other streams it was marked used on.
    pub(super) used: Vec<u32>,
}

/// A freed range.
#[derive(Clone, Debug)]
pub(super) struct Freed {
    pub(super) end: u64,
    /// The free.
    pub(super) op: RaceOp,
    /// What a reuse of it is ordered after (the driver's stream-ordered free; the streams a
    /// block was marked used on), if anything.
    pub(super) pending: Option<Clock>,
}

/// Allocations, blocks and freed ranges by their first byte.
#[derive(Debug, Default)]
pub(super) struct Heap {
    /// Driver allocations: their end.
    pub(super) allocations: BTreeMap<u64, u64>,
    pub(super) blocks: BTreeMap<u64, Block>,
    /// Disjoint.
    freed: BTreeMap<u64, Freed>,
    /// Frees in order: (first byte, position of the free).
    order: VecDeque<(u64, usize)>,
}

impl Heap {
    /// How many freed ranges are remembered for "use after free".
    pub(super) const REMEMBERED_FREES: usize = 1 << 14;

    /// How many allocations, blocks and freed ranges are held.
    pub(super) fn held(&self) -> usize {
        self.allocations.len() + self.blocks.len() + self.freed.len()
    }

    /// The freed ranges overlapping `range`, with the bytes they share.
    pub(super) fn freed_in(
        &self,
        range: AddressRange,
    ) -> impl Iterator<Item = (&Freed, AddressRange)> + '_ {
        let (start, end) = (range.start, range.end());
        let first = self
            .freed
            .range(..start)
            .next_back()
            .filter(|(_, freed)| freed.end > start);
        first
            .into_iter()
            .chain(self.freed.range(start..end))
            .filter_map(move |(&at, freed)| {
                AddressRange::new(at, freed.end - at)
                    .overlap(&range)
                    .map(|overlap| (freed, overlap))
            })
    }

    /// Takes `range` out of the freed ranges (it is allocated again): returns the freed
    /// ranges it overlapped, and keeps their parts outside it.
    pub(super) fn unfree(&mut self, range: AddressRange) -> Vec<Freed> {
        let (start, end) = (range.start, range.end());
        let mut starts: Vec<u64> = Vec::new();
        if let Some((&at, freed)) = self.freed.range(..start).next_back()
            && freed.end > start
        {
            starts.push(at);
        }
        starts.extend(self.freed.range(start..end).map(|(&at, _)| at));
        let mut taken = Vec::with_capacity(starts.len());
        for at in starts {
            let Some(freed) = self.freed.remove(&at) else {
                continue;
            };
            if at < start {
                let mut head = freed.clone();
                head.end = start;
                self.freed.insert(at, head);
            }
            if freed.end > end {
                let mut tail = freed.clone();
                tail.end = freed.end;
                self.freed.insert(end, tail);
            }
            taken.push(freed);
        }
        taken
    }

    /// Remembers `range` as freed by `op` (forgetting the oldest free beyond
    /// [`Heap::REMEMBERED_FREES`]).
    pub(super) fn free(&mut self, range: AddressRange, op: RaceOp, pending: Option<Clock>) {
        self.unfree(range);
        let end = range.end();
        self.freed.insert(range.start, Freed { end, op, pending });
        self.order.push_back((range.start, op.position));
        if self.order.len() > Self::REMEMBERED_FREES
            && let Some((at, position)) = self.order.pop_front()
            && self
                .freed
                .get(&at)
                .is_some_and(|freed| freed.op.position == position)
        {
            self.freed.remove(&at);
        }
    }

    /// Drops the blocks inside `range` (their segment was freed).
    pub(super) fn drop_blocks(&mut self, range: AddressRange) {
        let inside: Vec<u64> = self
            .blocks
            .range(range.start..range.end())
            .map(|(&at, _)| at)
            .collect();
        for at in inside {
            self.blocks.remove(&at);
        }
    }
}
