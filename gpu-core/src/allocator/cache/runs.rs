//! Runs of adjacent free blocks across lanes: on a miss, the smallest run that would hold the
//! request, made one block by waiting on the host for the fences of the lanes it spans.
//!
//! Free blocks of different stream lanes never merge until their frees are known complete, so
//! a segment can hold enough free bytes for a request in pieces no lane can use alone. Before
//! the pool grows, the miss path looks for such a run; the host waits for the fence covering
//! each lane's part (the lanes' work up to their frees, never a device synchronisation), the
//! parts move to the idle lane and merge, and the request is served from the merged block.

use alloc::vec::Vec;

use super::KindCache;
use super::block::{IDLE, NIL, State};
use crate::allocator::driver::SegmentDriver;
use crate::allocator::policy::Shape;

/// A run of adjacent free blocks: its segment, its lowest block and its bytes.
#[derive(Clone, Copy)]
struct Run {
    segment: u32,
    first: u32,
    size: usize,
}

impl KindCache {
    /// Makes the smallest run of free blocks that holds the request one block in the idle lane
    /// or `own_lane`, waiting on the host for the frees of the other lanes it spans. Whether it
    /// did; `false` (nothing changed but fences found complete) when no run fits, when a lane's
    /// frees are covered by no fence, or when a wait fails.
    pub(super) fn merge_fitting_run<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        own_lane: u32,
        shape: &Shape,
    ) -> bool {
        let Some(run) = self.fitting_run(shape) else {
            return false;
        };
        // The fence each lane of the run needs: its newest free in the run.
        let mut needs: Vec<(u32, u64)> = Vec::new();
        let mut cursor = run.first;
        let mut covered = 0;
        while covered < run.size {
            let b = &self.blocks[cursor as usize];
            let known = b.lane == IDLE
                || b.lane == own_lane
                || b.seq <= self.lanes[b.lane as usize].completed_seq;
            if !known {
                match needs.iter_mut().find(|(lane, _)| *lane == b.lane) {
                    Some((_, seq)) => *seq = (*seq).max(b.seq),
                    None => needs.push((b.lane, b.seq)),
                }
            }
            covered += b.size;
            cursor = b.next;
        }
        for (lane, seq) in needs {
            let fences = &self.lanes[lane as usize].fences;
            let Some(position) = fences.iter().position(|fence| fence.seq >= seq) else {
                return false;
            };
            let event = fences[position].event;
            self.stats.driver_calls += 1;
            if driver.wait_event_on_host(self.device, event).is_err() {
                return false;
            }
            self.complete_fences(driver, lane, position);
        }
        self.move_completed_to_idle(own_lane);
        if own_lane != IDLE {
            self.absorb_idle_into_lane(run.segment, own_lane);
        }
        true
    }

    /// The smallest run of adjacent free blocks of the request's pool, whichever lanes hold
    /// them, that holds `shape.search` bytes and is no larger than `shape.max_block`.
    fn fitting_run(&self, shape: &Shape) -> Option<Run> {
        let mut best: Option<Run> = None;
        for (index, segment) in self.segments.iter().enumerate() {
            if !segment.held || self.blocks[segment.first as usize].large != shape.large {
                continue;
            }
            let mut run: Option<Run> = None;
            let mut cursor = segment.first;
            while cursor != NIL {
                let b = &self.blocks[cursor as usize];
                if b.state == State::Free {
                    let open = run.get_or_insert(Run {
                        segment: index as u32,
                        first: cursor,
                        size: 0,
                    });
                    open.size += b.size;
                }
                let closes = b.state != State::Free || b.next == NIL;
                if closes && let Some(done) = run.take() {
                    let fits = done.size >= shape.search && done.size <= shape.max_block;
                    if fits && best.is_none_or(|best| done.size < best.size) {
                        best = Some(done);
                    }
                }
                cursor = b.next;
            }
        }
        best
    }

    /// Merges the idle blocks of `segment` into their free neighbours of `lane`, so that a run
    /// of the lane's and now idle blocks becomes one block of the lane.
    fn absorb_idle_into_lane(&mut self, segment: u32, lane: u32) {
        let mut cursor = self.segments[segment as usize].first;
        while cursor != NIL {
            let b = &self.blocks[cursor as usize];
            let next = b.next;
            let idle_beside = |n: u32| {
                n != NIL && {
                    let n = &self.blocks[n as usize];
                    n.state == State::Free && n.lane == IDLE
                }
            };
            if b.state == State::Free
                && b.lane == lane
                && (idle_beside(b.prev) || idle_beside(next))
            {
                let (large, seq) = (b.large, b.seq);
                self.lanes[lane as usize]
                    .bins_mut(large)
                    .remove(&mut self.blocks, cursor);
                self.insert_free(cursor, lane, seq);
                // The merged block may have absorbed what came next: go on from its end.
                cursor = self.blocks[cursor as usize].next;
            } else {
                cursor = next;
            }
        }
    }
}
