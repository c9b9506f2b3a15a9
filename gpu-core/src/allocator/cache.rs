//! The caching sub-allocator of one (device, memory kind): segments from the driver split into
//! blocks, free blocks kept per stream in size-class bins, reuse ordered across streams.
//!
//! Free blocks live in *lanes*: lane 0 ("idle") holds blocks no work can still be using; every
//! other lane belongs to one stream and holds blocks freed on it, stamped with a per-lane
//! sequence number. Another stream may take such a block once an event recorded on the lane's
//! stream after that free has completed, or after waiting on that event. Events are recorded
//! lazily, only when another stream wants a block, so a free costs no driver call.
//!
//! The hot path: each lane *parks* its most recently freed block, unmerged and out of the bins,
//! and hands it straight back to the next request on that lane that it fits without a split.
//! Any slower path first returns parked blocks to the bins (merging them), so parking changes
//! which block serves a same-size request, never what is safe.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, MemoryKind, StreamId};

use super::bins::{Bins, GRANULE};
use super::policy::{AllocatorConfig, Shape, should_split};
use super::stats::AllocatorStats;
use super::{AllocPath, Order, Release, SegmentDriver};

/// "No block" in every block link.
pub(crate) const NIL: u32 = u32::MAX;
/// The lane of blocks no work can still be using.
const IDLE: u32 = 0;

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
    prev: u32,
    /// The block just above in the segment.
    next: u32,
    segment: u32,
    /// Free blocks: the lane holding it. Pending blocks: the lane it goes to.
    lane: u32,
    state: State,
    /// Whether its segment belongs to the large pool.
    large: bool,
    /// Bumped each time the slot is handed out, so stale handles are caught.
    generation: u32,
    /// Free blocks in a stream lane: the lane's free count when it was freed.
    seq: u64,
    /// Live blocks: bytes the caller asked for.
    requested: usize,
    /// Live blocks: whether [`KindCache::other_uses`] names streams for it.
    shared: bool,
}

struct Segment {
    addr: usize,
    size: usize,
    /// The lowest block.
    first: u32,
    held: bool,
}

/// An event recorded on a lane's stream once `seq` frees had happened there.
struct Fence {
    event: EventId,
    seq: u64,
}

struct Lane {
    /// `None` for the idle lane.
    stream: Option<StreamId>,
    small: Bins,
    large: Bins,
    /// Frees stamped so far.
    free_seq: u64,
    /// Frees with a stamp up to this are known complete.
    completed_seq: u64,
    /// Recorded, not yet known complete, oldest first.
    fences: VecDeque<Fence>,
    /// The parked block, or `NIL`.
    parked: u32,
}

impl Lane {
    fn new(stream: Option<StreamId>) -> Self {
        Self {
            stream,
            small: Bins::new(),
            large: Bins::new(),
            free_seq: 0,
            completed_seq: 0,
            fences: VecDeque::new(),
            parked: NIL,
        }
    }

    #[inline]
    fn bins(&self, large: bool) -> &Bins {
        if large { &self.large } else { &self.small }
    }

    #[inline]
    fn bins_mut(&mut self, large: bool) -> &mut Bins {
        if large {
            &mut self.large
        } else {
            &mut self.small
        }
    }
}

/// A block freed while other streams may still use it.
struct PendingFree {
    block: u32,
    events: Vec<EventId>,
}

/// A candidate from another stream's lane and how its reuse was ordered.
struct Borrowed {
    block: u32,
    from: StreamId,
    waited: bool,
}

/// What [`KindCache::allocate`] hands back: slot, generation, address, path.
pub(crate) type Served = (u32, u32, usize, AllocPath);

/// The cache of one memory kind on one device.
pub(crate) struct KindCache {
    device: DeviceId,
    kind: MemoryKind,
    blocks: Vec<Block>,
    unused_blocks: Vec<u32>,
    segments: Vec<Segment>,
    unused_segments: Vec<u32>,
    /// Stream number -> lane, `NIL` where the stream has none yet.
    lane_of_stream: Vec<u32>,
    lanes: Vec<Lane>,
    pending: Vec<PendingFree>,
    /// (live block, another stream whose work uses it); rare, so kept out of the blocks.
    other_uses: Vec<(u32, StreamId)>,
    stats: AllocatorStats,
}

impl KindCache {
    pub(crate) fn new(device: DeviceId, kind: MemoryKind) -> Self {
        let lanes = alloc::vec![Lane::new(None)];
        Self {
            device,
            kind,
            blocks: Vec::new(),
            unused_blocks: Vec::new(),
            segments: Vec::new(),
            unused_segments: Vec::new(),
            lane_of_stream: Vec::new(),
            lanes,
            pending: Vec::new(),
            other_uses: Vec::new(),
            stats: AllocatorStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> &AllocatorStats {
        &self.stats
    }

    // ----- requests -----

    /// Serves one request of this kind.
    #[inline]
    pub(crate) fn allocate<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        shape: &Shape,
        order: Order<'_>,
        stream_ordered: bool,
        config: &AllocatorConfig,
    ) -> Result<Served> {
        let own_lane = match order {
            Order::Synchronous => IDLE,
            Order::Stream { stream, .. } => self.lane_index(stream, config)?,
        };
        let parked = match self.parked_fit(own_lane, shape, config) {
            Some(block) => Some((own_lane, block)),
            None => self
                .parked_fit(IDLE, shape, config)
                .map(|block| (IDLE, block)),
        };
        if let Some((lane, block)) = parked {
            self.wait_for_dependencies(driver, order)?;
            self.lanes[lane as usize].parked = NIL;
            self.stats.hits += 1;
            return Ok(self.make_live(block, shape, AllocPath::Cached));
        }
        if let Some(block) = self.best_of_own_and_idle(own_lane, shape) {
            self.wait_for_dependencies(driver, order)?;
            self.stats.hits += 1;
            return Ok(self.hand_out(block, shape, config, AllocPath::Cached));
        }
        self.allocate_slow(driver, shape, order, own_lane, stream_ordered, config)
    }

    /// The miss path: completed frees, other streams' blocks, a new segment, and the
    /// out-of-memory ladder.
    fn allocate_slow<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        shape: &Shape,
        order: Order<'_>,
        own_lane: u32,
        stream_ordered: bool,
        config: &AllocatorConfig,
    ) -> Result<Served> {
        self.unpark_all();
        let mut dependencies_done = false;
        for rung in 0..=3 {
            let reclaimed = self.reclaim(driver, rung, shape, config)?;
            if reclaimed && let Some(block) = self.best_of_own_and_idle(own_lane, shape) {
                self.order_dependencies(driver, order, &mut dependencies_done)?;
                self.stats.hits += 1;
                return Ok(self.hand_out(block, shape, config, AllocPath::Cached));
            }
            if rung <= 1
                && let Some(borrowed) =
                    self.borrow_from_other_stream(driver, shape, order, own_lane)?
            {
                self.order_dependencies(driver, order, &mut dependencies_done)?;
                self.stats.cross_stream_hits += 1;
                let path = AllocPath::CachedFromStream {
                    from: borrowed.from,
                    waited: borrowed.waited,
                };
                return Ok(self.hand_out(borrowed.block, shape, config, path));
            }
            if rung == 0 {
                continue;
            }
            if rung > 1 {
                self.stats.oom_retries += 1;
            }
            if let Some(served) = self.new_segment(
                driver,
                shape,
                order,
                own_lane,
                stream_ordered,
                &mut dependencies_done,
                config,
            )? {
                return Ok(served);
            }
        }
        self.stats.oom_errors += 1;
        Err(Error::OutOfMemory {
            device: self.device,
            kind: self.kind,
            requested: shape.size,
            reserved: self.stats.reserved,
            allocated: self.stats.allocated,
            largest_free: self.largest_free(),
        })
    }

    /// Makes the requesting stream wait on the request's dependencies, once.
    fn order_dependencies<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        order: Order<'_>,
        done: &mut bool,
    ) -> Result<()> {
        if !*done {
            self.wait_for_dependencies(driver, order)?;
            *done = true;
        }
        Ok(())
    }

    /// Frees a live block.
    #[inline]
    pub(crate) fn free<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        slot: u32,
        generation: u32,
        release: Release,
        config: &AllocatorConfig,
    ) -> Result<()> {
        self.check_live(slot, generation)?;
        let (lane, stream) = match release {
            Release::Idle => (IDLE, None),
            Release::OnStream(stream) => (self.lane_index(stream, config)?, Some(stream)),
        };
        match stream {
            Some(stream) if self.blocks[slot as usize].shared => {
                self.free_shared(driver, slot, lane, stream)
            }
            _ => {
                self.release_now(slot, lane);
                Ok(())
            }
        }
    }

    /// Parks a live block freed in `lane`, which no other stream's work can still be using.
    #[inline]
    fn release_now(&mut self, slot: u32, lane: u32) {
        self.forget_uses(slot);
        let block = &self.blocks[slot as usize];
        let (size, requested) = (block.size, block.requested);
        self.stats.allocated -= size;
        self.stats.requested -= requested;
        self.stats.cached += size;
        self.park(slot, lane);
    }

    /// Frees a live block on `stream` that was marked as used on other streams too: it waits,
    /// pending, for an event recorded now on each of those streams.
    #[inline(never)]
    fn free_shared<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        slot: u32,
        lane: u32,
        stream: StreamId,
    ) -> Result<()> {
        let others: Vec<StreamId> = self
            .other_uses
            .iter()
            .filter(|&&(b, s)| b == slot && s != stream)
            .map(|&(_, s)| s)
            .collect();
        if others.is_empty() {
            self.release_now(slot, lane);
            return Ok(());
        }
        let (size, requested) = {
            let block = &self.blocks[slot as usize];
            (block.size, block.requested)
        };
        let mut events = Vec::with_capacity(others.len());
        for other in others {
            match self.record(driver, other) {
                Ok(event) => events.push(event),
                Err(error) => {
                    for event in events {
                        self.release_event(driver, event);
                    }
                    return Err(error);
                }
            }
        }
        self.forget_uses(slot);
        let block = &mut self.blocks[slot as usize];
        block.state = State::Pending;
        block.lane = lane;
        self.stats.allocated -= size;
        self.stats.requested -= requested;
        self.stats.pending += size;
        self.pending.push(PendingFree {
            block: slot,
            events,
        });
        Ok(())
    }

    /// Records that a live block is also used by `stream`.
    pub(crate) fn mark_used_on(
        &mut self,
        slot: u32,
        generation: u32,
        stream: StreamId,
    ) -> Result<()> {
        self.check_live(slot, generation)?;
        if !self.other_uses.contains(&(slot, stream)) {
            self.other_uses.push((slot, stream));
        }
        self.blocks[slot as usize].shared = true;
        Ok(())
    }

    /// Drops the other-stream uses recorded for `slot`.
    #[inline]
    fn forget_uses(&mut self, slot: u32) {
        let block = &mut self.blocks[slot as usize];
        if block.shared {
            block.shared = false;
            self.other_uses.retain(|&(b, _)| b != slot);
        }
    }

    /// Forgets a stream whose work has all completed (the caller synchronised it) before it is
    /// destroyed: its free blocks join the idle lane, its events are released, and blocks
    /// still waiting for other streams return to the idle lane. Its number may be reused.
    pub(crate) fn retire_stream<D: SegmentDriver>(&mut self, driver: &mut D, stream: StreamId) {
        let Some(&lane) = self.lane_of_stream.get(stream.index()) else {
            return;
        };
        if lane == NIL {
            return;
        }
        self.unpark_all();
        self.complete_lane(driver, lane);
        for entry in &self.pending {
            let block = &mut self.blocks[entry.block as usize];
            if block.lane == lane {
                block.lane = IDLE;
            }
        }
        self.move_completed_to_idle();
    }

    /// Reclaims completed frees and returns every wholly free segment to the driver.
    pub(crate) fn trim<D: SegmentDriver>(&mut self, driver: &mut D) -> Result<usize> {
        self.unpark_all();
        self.poll_pending(driver);
        self.settle_completed(driver);
        self.release_free_segments(driver)
    }

    #[inline]
    fn check_live(&self, slot: u32, generation: u32) -> Result<()> {
        match self.blocks.get(slot as usize) {
            Some(block) if block.state == State::Live && block.generation == generation => Ok(()),
            _ => Err(Error::UnknownAllocation {
                kind: self.kind,
                slot,
            }),
        }
    }

    /// The lane of `stream`, created on first use.
    #[inline]
    fn lane_index(&mut self, stream: StreamId, config: &AllocatorConfig) -> Result<u32> {
        match self.lane_of_stream.get(stream.index()) {
            Some(&lane) if lane != NIL => Ok(lane),
            _ => self.new_lane(stream, config),
        }
    }

    /// Creates the lane of `stream`, which has none yet.
    #[inline(never)]
    fn new_lane(&mut self, stream: StreamId, config: &AllocatorConfig) -> Result<u32> {
        let number = stream.index();
        if number >= config.max_streams {
            return Err(Error::LimitExceeded {
                what: "stream number (raise AllocatorConfig::max_streams)",
                required: number + 1,
                limit: config.max_streams,
                detail: Vec::new(),
            });
        }
        if self.lane_of_stream.len() <= number {
            self.lane_of_stream.resize(number + 1, NIL);
        }
        let lane = self.lanes.len() as u32;
        self.lanes.push(Lane::new(Some(stream)));
        self.lane_of_stream[number] = lane;
        Ok(lane)
    }

    // ----- finding and carving blocks -----

    /// The best fit among the requesting lane and the idle lane (the own lane wins ties).
    #[inline]
    fn best_of_own_and_idle(&self, own_lane: u32, shape: &Shape) -> Option<u32> {
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

    /// The best fit among the other streams' lanes, with its reuse ordered after its free: the
    /// free already completed, or (stream-ordered requests only) the requesting stream waits.
    fn borrow_from_other_stream<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        shape: &Shape,
        order: Order<'_>,
        own_lane: u32,
    ) -> Result<Option<Borrowed>> {
        let mut best: Option<(u32, u32)> = None;
        for lane in 1..self.lanes.len() as u32 {
            if lane == own_lane {
                continue;
            }
            let found = self.lanes[lane as usize].bins(shape.large).best_fit(
                &self.blocks,
                shape.search,
                shape.max_block,
            );
            if let Some(block) = found
                && best.is_none_or(|(b, _)| {
                    self.blocks[block as usize].size < self.blocks[b as usize].size
                })
            {
                best = Some((block, lane));
            }
        }
        let Some((block, lane)) = best else {
            return Ok(None);
        };
        let Some(from) = self.lanes[lane as usize].stream else {
            return Ok(None);
        };
        let seq = self.blocks[block as usize].seq;
        let requester = match order {
            Order::Synchronous => None,
            Order::Stream { stream, .. } => Some(stream),
        };
        let waited = self.order_after_free(driver, lane, from, seq, requester)?;
        Ok(waited.map(|waited| Borrowed {
            block,
            from,
            waited,
        }))
    }

    /// Orders a use after the free stamped `seq` in `lane` (the lane of `lane_stream`):
    /// `Some(false)` when that free is known complete, `Some(true)` after making `requester`
    /// wait on a covering event, `None` when it cannot be ordered (a synchronous request and a
    /// free not yet complete).
    fn order_after_free<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        lane: u32,
        lane_stream: StreamId,
        seq: u64,
        requester: Option<StreamId>,
    ) -> Result<Option<bool>> {
        let state = &self.lanes[lane as usize];
        if seq <= state.completed_seq {
            return Ok(Some(false));
        }
        let covering = state.fences.iter().position(|fence| fence.seq >= seq);
        if let Some(position) = covering {
            let event = self.lanes[lane as usize].fences[position].event;
            if self.query(driver, event) {
                self.complete_fences(driver, lane, position);
                return Ok(Some(false));
            }
        }
        let Some(requester) = requester else {
            return Ok(None);
        };
        let event = match covering {
            Some(position) => self.lanes[lane as usize].fences[position].event,
            None => {
                self.prune_fences(driver, lane);
                let event = self.record(driver, lane_stream)?;
                let state = &mut self.lanes[lane as usize];
                let seq = state.free_seq;
                state.fences.push_back(Fence { event, seq });
                event
            }
        };
        self.wait(driver, requester, event)?;
        Ok(Some(true))
    }

    /// Takes a free block out of its bins and carves the request from it: an aligned start, the
    /// rounded size, and the rest back to the same lane when worth keeping apart.
    #[inline]
    fn hand_out(
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
    fn make_live(&mut self, block: u32, shape: &Shape, path: AllocPath) -> Served {
        let b = &mut self.blocks[block as usize];
        b.state = State::Live;
        b.generation = b.generation.wrapping_add(1);
        b.requested = shape.size;
        let (size, generation, addr) = (b.size, b.generation, b.addr);
        self.stats.note_allocated(size, shape.size);
        (block, generation, addr, path)
    }

    /// The lane's parked block, if it serves the request as it is: same pool, big enough,
    /// aligned, and nothing worth splitting off.
    #[inline]
    fn parked_fit(&self, lane: u32, shape: &Shape, config: &AllocatorConfig) -> Option<u32> {
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
    fn park(&mut self, slot: u32, lane: u32) {
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
    fn unpark_all(&mut self) {
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
    fn new_block(&mut self, addr: usize, size: usize, segment: u32, lane: u32, large: bool) -> u32 {
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

    fn drop_block(&mut self, slot: u32) {
        let b = &mut self.blocks[slot as usize];
        b.state = State::Unused;
        self.unused_blocks.push(slot);
    }

    /// Puts a block (in no bins) into `lane` as free, stamped with the lane's next free number,
    /// merged with free neighbours of the same lane or of the idle lane.
    fn release_to_lane(&mut self, slot: u32, lane: u32) {
        let seq = self.stamp(lane);
        self.insert_free(slot, lane, seq);
    }

    /// The lane's next free number (0 for the idle lane, whose blocks need no ordering).
    #[inline]
    fn stamp(&mut self, lane: u32) -> u64 {
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
    fn insert_free(&mut self, slot: u32, lane: u32, seq: u64) {
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

    /// Gets a segment from the driver for a miss and serves the request from it. `Ok(None)`
    /// when the driver is out of memory.
    #[allow(clippy::too_many_arguments)]
    fn new_segment<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        shape: &Shape,
        order: Order<'_>,
        own_lane: u32,
        stream_ordered: bool,
        dependencies_done: &mut bool,
        config: &AllocatorConfig,
    ) -> Result<Option<Served>> {
        let (address, lane, path) = match order {
            Order::Synchronous => (
                self.driver_allocate(driver, shape.segment, None)?,
                IDLE,
                AllocPath::DriverSynchronous,
            ),
            Order::Stream { stream, .. } if stream_ordered => {
                self.order_dependencies(driver, order, dependencies_done)?;
                let address = self.driver_allocate(driver, shape.segment, Some(stream))?;
                (address, own_lane, AllocPath::DriverStreamOrdered)
            }
            Order::Stream { after, .. } => {
                if !*dependencies_done {
                    for &event in after {
                        self.stats.driver_calls += 1;
                        driver.wait_event_on_host(self.device, event)?;
                    }
                    *dependencies_done = true;
                }
                (
                    self.driver_allocate(driver, shape.segment, None)?,
                    IDLE,
                    AllocPath::Fallback,
                )
            }
        };
        let Some(address) = address else {
            return Ok(None);
        };
        if !address.is_multiple_of(GRANULE) {
            let after = self.lanes[lane as usize].stream;
            self.stats.driver_calls += 1;
            driver.free(self.device, self.kind, address, shape.segment, after)?;
            return Err(Error::MisalignedSegment {
                address,
                required: GRANULE,
            });
        }
        let segment = match self.unused_segments.pop() {
            Some(slot) => slot,
            None => {
                self.segments.push(Segment {
                    addr: 0,
                    size: 0,
                    first: NIL,
                    held: false,
                });
                (self.segments.len() - 1) as u32
            }
        };
        let block = self.new_block(address, shape.segment, segment, lane, shape.large);
        self.segments[segment as usize] = Segment {
            addr: address,
            size: shape.segment,
            first: block,
            held: true,
        };
        self.stats.note_reserved(shape.segment);
        self.stats.misses += 1;
        if path == AllocPath::Fallback {
            self.stats.fallbacks += 1;
        }
        // Stamped like a free, so another stream orders after the stream-ordered allocation.
        self.release_to_lane(block, lane);
        Ok(Some(self.hand_out(block, shape, config, path)))
    }

    // ----- reclaiming -----

    /// One step of the miss path; whether it may have freed blocks. 0: return pending frees
    /// whose other-stream work completed. 1 (before the first driver call, when the cache holds
    /// enough bytes but no fitting block): also move frees known complete to the idle lane,
    /// where they merge across streams, and if still nothing fits, return wholly free segments
    /// to the driver ([`AllocatorConfig::release_before_growing`]). Then the out-of-memory
    /// ladder: 2, return wholly free segments to the driver; 3, synchronise the device and
    /// return everything cached.
    fn reclaim<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        rung: u32,
        shape: &Shape,
        config: &AllocatorConfig,
    ) -> Result<bool> {
        match rung {
            0 => Ok(self.poll_pending(driver)),
            1 if self.stats.cached >= shape.rounded => {
                self.settle_completed(driver);
                if config.release_before_growing && self.best_of_own_and_idle(IDLE, shape).is_none()
                {
                    self.release_free_segments(driver)?;
                }
                Ok(true)
            }
            1 => Ok(false),
            2 => Ok(self.release_free_segments(driver)? > 0),
            _ => {
                self.stats.driver_calls += 1;
                driver.synchronize(self.device)?;
                self.complete_everything(driver);
                self.release_free_segments(driver)?;
                Ok(true)
            }
        }
    }

    /// Returns pending blocks whose other-stream uses have completed to their lanes. Whether any
    /// came back. A failed query counts as "not yet".
    fn poll_pending<D: SegmentDriver>(&mut self, driver: &mut D) -> bool {
        let mut any = false;
        let mut index = 0;
        while index < self.pending.len() {
            let events = core::mem::take(&mut self.pending[index].events);
            let done = events.iter().all(|&event| self.query(driver, event));
            if done {
                for &event in &events {
                    self.release_event(driver, event);
                }
                let entry = self.pending.swap_remove(index);
                self.return_pending(entry.block);
                any = true;
            } else {
                self.pending[index].events = events;
                index += 1;
            }
        }
        any
    }

    fn return_pending(&mut self, slot: u32) {
        let (size, lane) = {
            let b = &self.blocks[slot as usize];
            (b.size, b.lane)
        };
        self.stats.pending -= size;
        self.stats.cached += size;
        self.release_to_lane(slot, lane);
    }

    /// Records a fence on each stream lane with frees no fence covers yet, asks each lane's
    /// fences, oldest first, which have completed, then moves the free blocks known complete to
    /// the idle lane (where they merge with their idle neighbours). A failed record or query
    /// only leaves those blocks where they are.
    fn settle_completed<D: SegmentDriver>(&mut self, driver: &mut D) {
        for lane in 1..self.lanes.len() as u32 {
            let state = &self.lanes[lane as usize];
            let covered = state
                .fences
                .back()
                .map_or(state.completed_seq, |fence| fence.seq);
            if let (true, Some(stream)) = (covered < state.free_seq, state.stream)
                && let Ok(event) = self.record(driver, stream)
            {
                let state = &mut self.lanes[lane as usize];
                let seq = state.free_seq;
                state.fences.push_back(Fence { event, seq });
            }
            self.prune_fences(driver, lane);
        }
        self.move_completed_to_idle();
    }

    /// Releases `lane`'s oldest fences while they report complete (so fences do not pile up
    /// while the lane is borrowed from).
    fn prune_fences<D: SegmentDriver>(&mut self, driver: &mut D, lane: u32) {
        while let Some(event) = self.lanes[lane as usize]
            .fences
            .front()
            .map(|fence| fence.event)
        {
            if !self.query(driver, event) {
                break;
            }
            self.complete_fences(driver, lane, 0);
        }
    }

    /// Marks fences up to `position` of `lane` complete and releases their events.
    fn complete_fences<D: SegmentDriver>(&mut self, driver: &mut D, lane: u32, position: usize) {
        let state = &mut self.lanes[lane as usize];
        state.completed_seq = state.fences[position].seq;
        for _ in 0..=position {
            if let Some(fence) = self.lanes[lane as usize].fences.pop_front() {
                self.release_event(driver, fence.event);
            }
        }
    }

    /// Marks every free of `lane` complete (all its stream's work has finished) and releases
    /// its fences' events.
    fn complete_lane<D: SegmentDriver>(&mut self, driver: &mut D, lane: u32) {
        let state = &mut self.lanes[lane as usize];
        state.completed_seq = state.free_seq;
        while let Some(fence) = self.lanes[lane as usize].fences.pop_front() {
            self.release_event(driver, fence.event);
        }
    }

    fn move_completed_to_idle(&mut self) {
        for slot in 0..self.blocks.len() as u32 {
            let b = &self.blocks[slot as usize];
            if b.state != State::Free
                || b.lane == IDLE
                || b.seq > self.lanes[b.lane as usize].completed_seq
            {
                continue;
            }
            let (lane, large) = (b.lane, b.large);
            self.lanes[lane as usize]
                .bins_mut(large)
                .remove(&mut self.blocks, slot);
            self.release_to_lane(slot, IDLE);
        }
    }

    /// After a device synchronisation: every fence and pending free is complete.
    pub(crate) fn complete_everything<D: SegmentDriver>(&mut self, driver: &mut D) {
        for entry in core::mem::take(&mut self.pending) {
            for event in entry.events {
                self.release_event(driver, event);
            }
            self.return_pending(entry.block);
        }
        for lane in 1..self.lanes.len() as u32 {
            self.complete_lane(driver, lane);
        }
        self.move_completed_to_idle();
    }

    /// Returns every wholly free segment to the driver; the bytes released.
    fn release_free_segments<D: SegmentDriver>(&mut self, driver: &mut D) -> Result<usize> {
        let mut released = 0;
        for segment in 0..self.segments.len() {
            let Segment {
                addr,
                size,
                first,
                held,
            } = self.segments[segment];
            if !held {
                continue;
            }
            let b = &self.blocks[first as usize];
            if b.state != State::Free || b.prev != NIL || b.next != NIL {
                continue;
            }
            let (lane, large) = (b.lane, b.large);
            let after = self.lanes[lane as usize].stream;
            self.stats.driver_calls += 1;
            driver.free(self.device, self.kind, addr, size, after)?;
            self.lanes[lane as usize]
                .bins_mut(large)
                .remove(&mut self.blocks, first);
            self.drop_block(first);
            self.segments[segment].held = false;
            self.unused_segments.push(segment as u32);
            self.stats.note_released(size);
            released += size;
        }
        Ok(released)
    }

    fn largest_free(&self) -> usize {
        self.blocks
            .iter()
            .filter(|b| b.state == State::Free)
            .map(|b| b.size)
            .max()
            .unwrap_or(0)
    }

    // ----- counted driver calls -----

    fn driver_allocate<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        size: usize,
        stream: Option<StreamId>,
    ) -> Result<Option<usize>> {
        self.stats.driver_calls += 1;
        match stream {
            Some(stream) => driver.allocate_on_stream(self.device, self.kind, size, stream),
            None => driver.allocate(self.device, self.kind, size),
        }
    }

    /// Makes a stream-ordered request's stream wait on the request's dependencies.
    #[inline]
    fn wait_for_dependencies<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        order: Order<'_>,
    ) -> Result<()> {
        if let Order::Stream { stream, after } = order {
            for &event in after {
                self.wait(driver, stream, event)?;
            }
        }
        Ok(())
    }

    fn wait<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        stream: StreamId,
        event: EventId,
    ) -> Result<()> {
        self.stats.driver_calls += 1;
        driver.wait_event(self.device, stream, event)
    }

    fn record<D: SegmentDriver>(&mut self, driver: &mut D, stream: StreamId) -> Result<EventId> {
        self.stats.driver_calls += 1;
        driver.record_event(self.device, stream)
    }

    /// Whether `event` is known complete; a failed query counts as "not yet".
    fn query<D: SegmentDriver>(&mut self, driver: &mut D, event: EventId) -> bool {
        self.stats.driver_calls += 1;
        driver.event_completed(self.device, event).unwrap_or(false)
    }

    fn release_event<D: SegmentDriver>(&mut self, driver: &mut D, event: EventId) {
        self.stats.driver_calls += 1;
        driver.release_event(self.device, event);
    }

    // ----- self-check for the models -----

    /// Checks every structural invariant and that the statistics match the blocks; the first
    /// broken one, described.
    #[cfg(any(test, feature = "model"))]
    pub(crate) fn check_consistency(&self) -> core::result::Result<(), alloc::string::String> {
        use alloc::format;
        let (mut reserved, mut segments) = (0, 0);
        let (mut allocated, mut requested, mut cached, mut pending) = (0, 0, 0, 0);
        let mut free_per_bins = alloc::vec![[0usize; 2]; self.lanes.len()];
        for (index, segment) in self.segments.iter().enumerate().filter(|(_, s)| s.held) {
            reserved += segment.size;
            segments += 1;
            let (mut cursor, mut expected_addr, mut previous) = (segment.first, segment.addr, NIL);
            while cursor != NIL {
                let b = &self.blocks[cursor as usize];
                if b.addr != expected_addr || b.prev != previous || b.segment as usize != index {
                    return Err(format!("segment {index}: block {cursor} is out of place"));
                }
                if !b.addr.is_multiple_of(GRANULE) || b.size == 0 || !b.size.is_multiple_of(GRANULE)
                {
                    return Err(format!("block {cursor} has a bad address or size"));
                }
                match b.state {
                    State::Free => {
                        cached += b.size;
                        free_per_bins[b.lane as usize][b.large as usize] += 1;
                        let next = b.next;
                        if next != NIL
                            && self.blocks[next as usize].state == State::Free
                            && self.blocks[next as usize].lane == b.lane
                        {
                            return Err(format!(
                                "free neighbours {cursor} and {next} of one lane were not merged"
                            ));
                        }
                        if b.lane != IDLE && b.seq > self.lanes[b.lane as usize].free_seq {
                            return Err(format!(
                                "block {cursor} is stamped after its lane's last free"
                            ));
                        }
                    }
                    State::Parked => {
                        cached += b.size;
                        if self.lanes[b.lane as usize].parked != cursor {
                            return Err(format!(
                                "block {cursor} is parked but its lane does not say so"
                            ));
                        }
                    }
                    State::Live => {
                        allocated += b.size;
                        requested += b.requested;
                    }
                    State::Pending => pending += b.size,
                    State::Unused => {
                        return Err(format!("unused slot {cursor} is linked in a segment"));
                    }
                }
                expected_addr = b.addr + b.size;
                previous = cursor;
                cursor = b.next;
            }
            if expected_addr != segment.addr + segment.size {
                return Err(format!("segment {index}: blocks do not cover it"));
            }
        }
        for lane in &self.lanes {
            let parked = self.blocks.get(lane.parked as usize).map(|b| b.state);
            if lane.parked != NIL && parked != Some(State::Parked) {
                return Err(format!(
                    "lane of {:?} names a parked block that is not",
                    lane.stream
                ));
            }
        }
        for (lane, counts) in self.lanes.iter().zip(&free_per_bins) {
            if lane.small.len() != counts[0] || lane.large.len() != counts[1] {
                return Err(format!(
                    "lane of {:?}: bins hold other blocks than the free ones",
                    lane.stream
                ));
            }
        }
        if self.pending.len()
            != self
                .blocks
                .iter()
                .filter(|b| b.state == State::Pending)
                .count()
        {
            return Err("pending list disagrees with the blocks".into());
        }
        let s = &self.stats;
        let counted = (reserved, segments, allocated, requested, cached, pending);
        let recorded = (
            s.reserved,
            s.segments,
            s.allocated,
            s.requested,
            s.cached,
            s.pending,
        );
        if counted != recorded {
            return Err(format!(
                "stats {recorded:?} but blocks say {counted:?} (reserved, segments, allocated, requested, cached, pending)"
            ));
        }
        Ok(())
    }
}
