//! Reuse across streams: another stream's free taken once an event recorded after it has
//! completed (or after a wait on it), fences recorded lazily, and the counted event calls.

use super::KindCache;
use super::block::{Borrowed, IDLE};
use super::lane::Fence;
use crate::allocator::driver::SegmentDriver;
use crate::allocator::policy::Shape;
use crate::allocator::request::Order;
use crate::error::Result;
use crate::id::{EventId, StreamId};

impl KindCache {
    /// The best fit among the other streams' lanes, with its reuse ordered after its free: the
    /// free already completed, or (stream-ordered requests only) the requesting stream waits.
    pub(super) fn borrow_from_other_stream<D: SegmentDriver>(
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

    /// Returns pending blocks whose other-stream uses have completed to their lanes. Whether any
    /// came back. A failed query counts as "not yet".
    pub(super) fn poll_pending<D: SegmentDriver>(&mut self, driver: &mut D) -> bool {
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

    /// Returns a pending block to its lane with the stamp of its free (the idle lane's, 0,
    /// when its stream was retired meanwhile).
    pub(super) fn return_pending(&mut self, slot: u32) {
        let (size, lane, seq) = {
            let b = &self.blocks[slot as usize];
            (b.size, b.lane, if b.lane == IDLE { 0 } else { b.seq })
        };
        self.stats.pending -= size;
        self.stats.cached += size;
        self.insert_free(slot, lane, seq);
    }

    /// Records a fence on each stream lane but `keep` with frees no fence covers yet, asks each
    /// lane's fences, oldest first, which have completed, then moves the free blocks known
    /// complete to the idle lane (where they merge with their idle neighbours). A failed record
    /// or query only leaves those blocks where they are. The lane of the stream that missed is
    /// `keep`: its own frees already serve it, and moving them would make its choices depend on
    /// how far the GPU has run (a one-stream program then gets the same blocks whatever the
    /// timing, which the what-if replay relies on); `IDLE` keeps none.
    pub(super) fn settle_completed<D: SegmentDriver>(&mut self, driver: &mut D, keep: u32) {
        for lane in 1..self.lanes.len() as u32 {
            if lane == keep {
                continue;
            }
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
        self.move_completed_to_idle(keep);
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
    pub(super) fn complete_fences<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        lane: u32,
        position: usize,
    ) {
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
    pub(super) fn complete_lane<D: SegmentDriver>(&mut self, driver: &mut D, lane: u32) {
        let state = &mut self.lanes[lane as usize];
        state.completed_seq = state.free_seq;
        while let Some(fence) = self.lanes[lane as usize].fences.pop_front() {
            self.release_event(driver, fence.event);
        }
    }

    /// Makes a stream-ordered request's stream wait on the request's dependencies.
    #[inline]
    pub(super) fn wait_for_dependencies<D: SegmentDriver>(
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

    pub(super) fn record<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        stream: StreamId,
    ) -> Result<EventId> {
        self.stats.driver_calls += 1;
        driver.record_event(self.device, stream)
    }

    /// Whether `event` is known complete; a failed query counts as "not yet".
    fn query<D: SegmentDriver>(&mut self, driver: &mut D, event: EventId) -> bool {
        self.stats.driver_calls += 1;
        driver.event_completed(self.device, event).unwrap_or(false)
    }

    pub(super) fn release_event<D: SegmentDriver>(&mut self, driver: &mut D, event: EventId) {
        self.stats.driver_calls += 1;
        driver.release_event(self.device, event);
    }
}
