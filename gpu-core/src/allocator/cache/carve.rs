//! Carving blocks: best fit in a lane's bins, parking a lane's last free, splitting a block
//! for a request, and coalescing a freed block with its free neighbours.

use super::KindCache;
use super::block::{Block, IDLE, NIL, Served, State};
use crate::allocator::policy::{AllocatorConfig, Shape, should_split};
use crate::allocator::request::{AllocPath, BlockKey};

impl KindCache {
    /// The best fit among the requesting lane and the idle lane (the own lane wins ties).
    #[inline]
    pub(super) fn best_of_own_and_idle(&self, own_lane: u32, shape: &Shape) -> Option<u32> {
        let find = |lane: u32| {
            self.lanes[lane as usize].bins(shape.large).best_fit(
                &self.blocks,
                shape.search,
                shape.max_block,
            )
        };
        let own = find(own_lane);
        if own_lane == IDLE {
            return own;
        }
        match (own, find(IDLE)) {
            (Some(a), Some(b)) if self.blocks[b as usize].size < self.blocks[a as usize].size => {
                Some(b)
            }
            (None, idle) => idle,
            (own, _) => own,
        }
    }

    /// Takes a free block out of its bins and carves the request from it: an aligned start, the
    /// rounded size, and the rest back to the same lane when worth keeping apart.
    #[inline]
    pub(super) fn hand_out(
        &mut self,
        block: u32,
        shape: &Shape,
        config: &AllocatorConfig,
        path: AllocPath,
    ) -> Served {
        let (lane, large, addr) = {
            let b = &self.blocks[block as usize];
            (b.lane, b.large, b.addr)
        };
        self.lanes[lane as usize]
            .bins_mut(large)
            .remove(&mut self.blocks, block);
        let mut block = block;
        // The alignment is a power of two, and the block holds the aligned start.
        let aligned = (addr + (shape.alignment - 1)) & !(shape.alignment - 1);
        if aligned > addr {
            let upper = self.split(block, aligned - addr);
            self.lanes[lane as usize]
                .bins_mut(large)
                .insert(&mut self.blocks, block);
            block = upper;
        }
        if should_split(
            large,
            self.blocks[block as usize].size,
            shape.rounded,
            config,
        ) {
            let rest = self.split(block, shape.rounded);
            self.lanes[lane as usize]
                .bins_mut(large)
                .insert(&mut self.blocks, rest);
        }
        self.make_live(block, shape, path)
    }

    /// Hands a free block (in no bins) to the caller as it is.
    #[inline]
    pub(super) fn make_live(&mut self, block: u32, shape: &Shape, path: AllocPath) -> Served {
        let b = &mut self.blocks[block as usize];
        b.state = State::Live;
        b.generation = b.generation.wrapping_add(1);
        b.requested = shape.size;
        let (size, generation, addr) = (b.size, b.generation, b.addr);
        self.stats.note_allocated(size, shape.size);
        (BlockKey::new(block, generation), addr, path)
    }

    /// The lane's parked block, if it serves the request as it is: same pool, big enough,
    /// aligned, and nothing worth splitting off.
    #[inline]
    pub(super) fn parked_fit(
        &self,
        lane: u32,
        shape: &Shape,
        config: &AllocatorConfig,
    ) -> Option<u32> {
        let parked = self.lanes[lane as usize].parked;
        let b = self.blocks.get(parked as usize)?;
        let fits = b.large == shape.large
            && b.size >= shape.rounded
            && b.size <= shape.max_block
            && b.addr & (shape.alignment - 1) == 0
            && !should_split(b.large, b.size, shape.rounded, config);
        fits.then_some(parked)
    }

    /// Parks a freed block (in no bins) in `lane`, returning the block parked before to the
    /// bins.
    #[inline]
    pub(super) fn park(&mut self, slot: u32, lane: u32) {
        let seq = self.stamp(lane);
        let b = &mut self.blocks[slot as usize];
        b.state = State::Parked;
        b.lane = lane;
        b.seq = seq;
        let previous = core::mem::replace(&mut self.lanes[lane as usize].parked, slot);
        if previous != NIL {
            self.insert_free(previous, lane, self.blocks[previous as usize].seq);
        }
    }

    /// Returns every parked block to its lane's bins.
    pub(super) fn unpark_all(&mut self) {
        for lane in 0..self.lanes.len() as u32 {
            let parked = core::mem::replace(&mut self.lanes[lane as usize].parked, NIL);
            if parked != NIL {
                self.insert_free(parked, lane, self.blocks[parked as usize].seq);
            }
        }
    }

    /// Splits `block` at `offset`; the upper part becomes a new free block in the same lane
    /// (not in any bins yet). Returns the upper part.
    fn split(&mut self, block: u32, offset: usize) -> u32 {
        let (addr, size, next, segment, lane, large, seq) = {
            let b = &self.blocks[block as usize];
            (b.addr, b.size, b.next, b.segment, b.lane, b.large, b.seq)
        };
        let upper = self.new_block(addr + offset, size - offset, segment, lane, large);
        {
            let u = &mut self.blocks[upper as usize];
            u.prev = block;
            u.next = next;
            u.seq = seq;
        }
        if next != NIL {
            self.blocks[next as usize].prev = upper;
        }
        let b = &mut self.blocks[block as usize];
        b.size = offset;
        b.next = upper;
        upper
    }

    /// A free block slot, reusing an unused one (its generation carries on).
    pub(super) fn new_block(
        &mut self,
        addr: usize,
        size: usize,
        segment: u32,
        lane: u32,
        large: bool,
    ) -> u32 {
        let fresh = |generation| Block {
            addr,
            size,
            bin_prev: NIL,
            bin_next: NIL,
            prev: NIL,
            next: NIL,
            segment,
            lane,
            state: State::Free,
            large,
            generation,
            seq: 0,
            requested: 0,
            shared: false,
        };
        match self.unused_blocks.pop() {
            Some(slot) => {
                let generation = self.blocks[slot as usize].generation;
                self.blocks[slot as usize] = fresh(generation);
                slot
            }
            None => {
                self.blocks.push(fresh(0));
                (self.blocks.len() - 1) as u32
            }
        }
    }

    pub(super) fn drop_block(&mut self, slot: u32) {
        let b = &mut self.blocks[slot as usize];
        b.state = State::Unused;
        self.unused_blocks.push(slot);
    }

    /// Puts a block (in no bins) into `lane` as free, stamped with the lane's next free number,
    /// merged with free neighbours of the same lane or of the idle lane.
    pub(super) fn release_to_lane(&mut self, slot: u32, lane: u32) {
        let seq = self.stamp(lane);
        self.insert_free(slot, lane, seq);
    }

    /// The lane's next free number (0 for the idle lane, whose blocks need no ordering).
    #[inline]
    pub(super) fn stamp(&mut self, lane: u32) -> u64 {
        if lane == IDLE {
            0
        } else {
            let state = &mut self.lanes[lane as usize];
            state.free_seq += 1;
            state.free_seq
        }
    }

    /// Puts a block (in no bins) into `lane`'s bins as free with stamp `seq`, merged with free
    /// neighbours of the same lane or of the idle lane.
    pub(super) fn insert_free(&mut self, slot: u32, lane: u32, seq: u64) {
        let large = {
            let b = &mut self.blocks[slot as usize];
            b.state = State::Free;
            b.lane = lane;
            b.seq = seq;
            b.large
        };
        // Absorbing an idle neighbour may expose a block of this lane behind it: keep going.
        loop {
            let prev = self.blocks[slot as usize].prev;
            if prev == NIL || !self.mergeable(prev, lane) {
                break;
            }
            self.absorb(slot, prev, large);
        }
        loop {
            let next = self.blocks[slot as usize].next;
            if next == NIL || !self.mergeable(next, lane) {
                break;
            }
            self.absorb(slot, next, large);
        }
        self.lanes[lane as usize]
            .bins_mut(large)
            .insert(&mut self.blocks, slot);
    }

    #[inline]
    fn mergeable(&self, neighbour: u32, lane: u32) -> bool {
        let n = &self.blocks[neighbour as usize];
        n.state == State::Free && (n.lane == lane || n.lane == IDLE)
    }

    /// Merges the free `neighbour` (just below or above) into `slot`.
    fn absorb(&mut self, slot: u32, neighbour: u32, large: bool) {
        let (n_lane, n_addr, n_size, n_prev, n_next, n_seq) = {
            let n = &self.blocks[neighbour as usize];
            (n.lane, n.addr, n.size, n.prev, n.next, n.seq)
        };
        self.lanes[n_lane as usize]
            .bins_mut(large)
            .remove(&mut self.blocks, neighbour);
        let b = &mut self.blocks[slot as usize];
        b.size += n_size;
        if b.lane == n_lane {
            b.seq = b.seq.max(n_seq);
        }
        let segment = b.segment;
        if n_addr < b.addr {
            b.addr = n_addr;
            b.prev = n_prev;
            if n_prev == NIL {
                self.segments[segment as usize].first = slot;
            } else {
                self.blocks[n_prev as usize].next = slot;
            }
        } else {
            b.next = n_next;
            if n_next != NIL {
                self.blocks[n_next as usize].prev = slot;
            }
        }
        self.drop_block(neighbour);
    }
}
