//! The miss path: completed frees first, then another stream's blocks, then a new segment,
//! with the out-of-memory ladder between (release free segments, synchronise), and trim.

use super::KindCache;
use super::Served;
use super::block::{IDLE, NIL, Segment, State};
use crate::allocator::driver::SegmentDriver;
use crate::allocator::policy::{AllocatorConfig, GRANULE, Shape};
use crate::allocator::request::{AllocPath, Order};
use crate::error::{Error, Result};
use crate::id::StreamId;

/// A request on the miss path, as a new segment serves it.
struct Miss<'a> {
    shape: &'a Shape,
    order: Order<'a>,
    own_lane: u32,
    stream_ordered: bool,
    config: &'a AllocatorConfig,
}

impl KindCache {
    /// The miss path: completed frees, other streams' blocks, a new segment, and the
    /// out-of-memory ladder.
    pub(super) fn allocate_slow<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        shape: &Shape,
        order: Order<'_>,
        own_lane: u32,
        stream_ordered: bool,
        config: &AllocatorConfig,
    ) -> Result<Served> {
        self.unpark_all();
        let miss = Miss {
            shape,
            order,
            own_lane,
            stream_ordered,
            config,
        };
        let mut dependencies_done = false;
        for rung in 0..=3 {
            let reclaimed = self.reclaim(driver, rung, &miss)?;
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
            if config.growable_segments
                && let Some(served) = self.grow_segment(
                    driver,
                    shape,
                    (order, own_lane),
                    config,
                    &mut dependencies_done,
                )?
            {
                return Ok(served);
            }
            if let Some(served) = self.new_segment(driver, &miss, &mut dependencies_done)? {
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
    pub(super) fn order_dependencies<D: SegmentDriver>(
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

    /// Gets a segment from the driver for a miss and serves the request from it. `Ok(None)`
    /// when the driver is out of memory.
    fn new_segment<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        miss: &Miss<'_>,
        dependencies_done: &mut bool,
    ) -> Result<Option<Served>> {
        let Miss {
            shape,
            order,
            own_lane,
            stream_ordered,
            config,
        } = *miss;
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
        let segment = self.segment_slot();
        let block = self.new_block(address, shape.segment, segment, lane, shape.large);
        self.segments[segment as usize] = Segment {
            addr: address,
            size: shape.segment,
            first: block,
            held: true,
            reserve: 0,
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

    /// One step of the miss path; whether it may have freed blocks. 0: return pending frees
    /// whose other-stream work completed. 1 (before the first driver call, when the cache holds
    /// enough bytes but no fitting block): also move frees known complete to the idle lane,
    /// where they merge across streams; if still nothing fits, merge the smallest run of free
    /// blocks that would, waiting on the host for its lanes' frees
    /// ([`AllocatorConfig::wait_before_growing`]); if still nothing fits, return wholly free
    /// segments to the driver ([`AllocatorConfig::release_before_growing`]). Then the
    /// out-of-memory ladder: 2, return wholly free segments to the driver; 3, synchronise the
    /// device and return everything cached.
    fn reclaim<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        rung: u32,
        miss: &Miss<'_>,
    ) -> Result<bool> {
        let Miss {
            shape,
            own_lane,
            config,
            ..
        } = *miss;
        match rung {
            0 => Ok(self.poll_pending(driver)),
            1 if self.stats.cached >= shape.rounded => {
                self.settle_completed(driver, own_lane);
                let fits = |cache: &Self| cache.best_of_own_and_idle(own_lane, shape).is_some();
                if config.wait_before_growing && !fits(self) {
                    self.merge_fitting_run(driver, own_lane, shape);
                }
                if config.release_before_growing && !fits(self) {
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

    /// Moves the free blocks of every lane but `keep` (`IDLE`: none kept) whose frees are known
    /// complete to the idle lane.
    pub(super) fn move_completed_to_idle(&mut self, keep: u32) {
        for slot in 0..self.blocks.len() as u32 {
            let b = &self.blocks[slot as usize];
            if b.state != State::Free
                || b.lane == IDLE
                || b.lane == keep
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
        self.move_completed_to_idle(IDLE);
    }

    /// Returns every wholly free segment to the driver, and every growable segment's free tail;
    /// the bytes released.
    fn release_free_segments<D: SegmentDriver>(&mut self, driver: &mut D) -> Result<usize> {
        self.release_loose_ranges(driver);
        let mut released = 0;
        for segment in 0..self.segments.len() {
            let Segment {
                addr,
                size,
                first,
                held,
                reserve,
            } = self.segments[segment];
            if !held {
                continue;
            }
            if reserve > 0 {
                // Block by block from the end: free blocks of different lanes stay apart.
                loop {
                    let unmapped = self.shrink_growable(driver, segment as u32)?;
                    released += unmapped;
                    if unmapped == 0 || !self.segments[segment].held {
                        break;
                    }
                }
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

    /// Reclaims completed frees and returns every wholly free segment to the driver.
    pub(crate) fn trim<D: SegmentDriver>(&mut self, driver: &mut D) -> Result<usize> {
        self.unpark_all();
        self.poll_pending(driver);
        self.settle_completed(driver, IDLE);
        self.release_free_segments(driver)
    }
}
