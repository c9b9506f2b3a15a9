//! The caching sub-allocator of one (device, memory kind): segments from the driver split into
//! blocks, free blocks kept per stream in size-class bins, reuse ordered across streams.
//!
//! [`KindCache`] and its calls (serve, free, mark used on, retire) are here; one concern a
//! file below: `block` and `lane` (the data), `bins` (size classes), `carve` (split, park and
//! coalesce), `streams` (fences and reuse across streams), `reclaim` (the miss path, the
//! out-of-memory ladder and trim), `runs` (free runs across lanes merged before growing),
//! `grow` (growable segments: mapped parts that grow and shrink at their end), `consistency`
//! (the models' self-check).
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

mod bins;
mod block;
mod carve;
#[cfg(any(test, feature = "model"))]
mod consistency;
mod grow;
mod lane;
mod reclaim;
mod runs;
mod streams;

use alloc::vec::Vec;

use super::driver::SegmentDriver;
use super::policy::{AllocatorConfig, Shape};
use super::request::{AllocPath, Order, Release};
use super::stats::AllocatorStats;
use crate::error::{Error, Result};
use crate::id::{DeviceId, MemoryKind, StreamId};
use block::{Block, IDLE, NIL, PendingFree, Segment, Served, State};
use lane::Lane;

/// The fewest pending frees a shared free polls at.
const PENDING_POLL_MIN: usize = 32;

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
    /// A shared free polls the pending frees once there are this many (twice as many as were
    /// left after the last poll, at least [`PENDING_POLL_MIN`]), so their events stay bounded
    /// by the frees still in flight even when no miss or trim comes to poll them.
    poll_at: usize,
    /// Growable segments' address ranges whose release the driver failed: retried by the next
    /// release of free segments (so nothing reserved is forgotten).
    loose_ranges: Vec<(usize, usize)>,
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
            poll_at: PENDING_POLL_MIN,
            loose_ranges: Vec::new(),
            other_uses: Vec::new(),
            stats: AllocatorStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> &AllocatorStats {
        &self.stats
    }

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
    /// pending, for an event recorded now on each of those streams (and polls the pending frees
    /// when they have doubled since the last poll).
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
        // Stamped now: a fence of the lane recorded after this free covers the stream's part.
        let seq = self.stamp(lane);
        let block = &mut self.blocks[slot as usize];
        block.state = State::Pending;
        block.lane = lane;
        block.seq = seq;
        self.stats.allocated -= size;
        self.stats.requested -= requested;
        self.stats.pending += size;
        self.pending.push(PendingFree {
            block: slot,
            events,
        });
        if self.pending.len() >= self.poll_at {
            self.poll_pending(driver);
            self.poll_at = (2 * self.pending.len()).max(PENDING_POLL_MIN);
        }
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
        self.move_completed_to_idle(IDLE);
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
}
