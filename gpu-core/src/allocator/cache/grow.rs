//! Growable segments: one reserved address range per lane and pool whose mapped part grows at
//! its end for a miss, and whose free tail is unmapped where whole segments would be returned.
//!
//! A growable segment's blocks cover its mapped part, as an ordinary segment's cover it whole,
//! so carving, merging and runs treat both alike; only growing and shrinking are here.

use super::KindCache;
use super::block::{IDLE, NIL, Segment, Served, State};
use crate::allocator::driver::SegmentDriver;
use crate::allocator::policy::{AllocatorConfig, GRANULE, GROWABLE_RESERVE, Shape};
use crate::allocator::request::{AllocPath, Order};
use crate::error::Result;

impl KindCache {
    /// A segment slot for a new segment (reusing an unused one).
    pub(super) fn segment_slot(&mut self) -> u32 {
        self.unused_segments.pop().unwrap_or_else(|| {
            self.segments.push(Segment {
                addr: 0,
                size: 0,
                first: NIL,
                held: false,
                reserve: 0,
            });
            (self.segments.len() - 1) as u32
        })
    }

    /// The mapped part of each held growable segment: its start and size (what peers were
    /// granted access to, and must be granted again where a reset took that away).
    pub(crate) fn mapped_ranges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.segments
            .iter()
            .filter(|s| s.held && s.reserve > 0 && s.size > 0)
            .map(|s| (s.addr, s.size))
    }

    /// The highest block of `segment`.
    fn last_block(&self, segment: u32) -> u32 {
        let mut cursor = self.segments[segment as usize].first;
        while self.blocks[cursor as usize].next != NIL {
            cursor = self.blocks[cursor as usize].next;
        }
        cursor
    }

    /// The driver's mapping granularity for this kind, if it has virtual memory.
    fn granularity<D: SegmentDriver>(&self, driver: &mut D) -> Option<usize> {
        driver
            .map_granularity(self.device, self.kind)
            .filter(|g| g.is_power_of_two() && *g >= GRANULE)
    }

    /// Serves a miss by growing the requesting lane's growable segment of the request's pool
    /// (made on its first miss, and again when the last one is full) by what its free tail
    /// lacks, rounded up to the granularity. `Ok(None)` when the driver has no virtual memory,
    /// no address space is left, or the device is out of memory: the miss goes on as without
    /// growable segments.
    pub(super) fn grow_segment<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        shape: &Shape,
        (order, own_lane): (Order<'_>, u32),
        config: &AllocatorConfig,
        dependencies_done: &mut bool,
    ) -> Result<Option<Served>> {
        let Some(granularity) = self.granularity(driver) else {
            return Ok(None);
        };
        let lane = match order {
            Order::Synchronous => IDLE,
            Order::Stream { .. } => own_lane,
        };
        let pool = usize::from(shape.large);
        let mut segment = self.lanes[lane as usize].growable[pool];
        let (mut tail, mut tail_free) = (NIL, 0);
        if segment != NIL {
            tail = self.last_block(segment);
            let b = &self.blocks[tail as usize];
            if b.state == State::Free && (b.lane == lane || b.lane == IDLE) {
                tail_free = b.size;
            }
        }
        let lacking = |tail_free: usize| {
            shape
                .search
                .checked_sub(tail_free)
                .filter(|&lacking| lacking > 0)
                .and_then(|lacking| lacking.checked_next_multiple_of(granularity))
        };
        let Some(mut extra) = lacking(tail_free) else {
            return Ok(None);
        };
        if segment != NIL && {
            let s = &self.segments[segment as usize];
            extra > s.reserve - s.size
        } {
            // The range is full: it stays as it is, and the lane starts another.
            segment = NIL;
            let Some(whole) = lacking(0) else {
                return Ok(None);
            };
            extra = whole;
        }
        let block = if segment == NIL {
            match self.new_growable(driver, (lane, shape.large), extra, granularity)? {
                Some(block) => block,
                None => return Ok(None),
            }
        } else {
            let Segment {
                addr,
                size,
                reserve,
                ..
            } = self.segments[segment as usize];
            if extra > reserve - size {
                return Ok(None);
            }
            self.stats.driver_calls += 1;
            if !driver.map(self.device, self.kind, addr + size, extra)? {
                return Ok(None);
            }
            let block = self.new_block(addr + size, extra, segment, lane, shape.large);
            self.blocks[block as usize].prev = tail;
            self.blocks[tail as usize].next = block;
            self.segments[segment as usize].size += extra;
            block
        };
        self.stats.note_mapped(extra);
        self.stats.misses += 1;
        self.release_to_lane(block, lane);
        self.order_dependencies(driver, order, dependencies_done)?;
        Ok(self
            .best_of_own_and_idle(own_lane, shape)
            .map(|block| self.hand_out(block, shape, config, AllocPath::SegmentGrown)))
    }

    /// Reserves a growable segment for `lane`'s pool (`large`) and maps its first `extra`
    /// bytes: its one block (in no bins), or `None` when no address space or memory is left
    /// (nothing kept).
    fn new_growable<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        (lane, large): (u32, bool),
        extra: usize,
        granularity: usize,
    ) -> Result<Option<u32>> {
        let Some(wanted) = GROWABLE_RESERVE
            .max(extra)
            .checked_next_multiple_of(granularity)
        else {
            return Ok(None);
        };
        self.stats.driver_calls += 1;
        let reserved = driver.reserve_range(self.device, self.kind, wanted, extra)?;
        let Some((base, reserve)) = reserved.filter(|&(base, size)| {
            size >= extra && base.is_multiple_of(granularity) && size.is_multiple_of(granularity)
        }) else {
            return Ok(None);
        };
        self.stats.driver_calls += 1;
        let mapped = driver.map(self.device, self.kind, base, extra);
        if !matches!(mapped, Ok(true)) {
            self.stats.address_space += reserve;
            self.loose_ranges.push((base, reserve));
            self.release_loose_ranges(driver);
            return mapped.map(|_| None);
        }
        let slot = self.segment_slot();
        let block = self.new_block(base, extra, slot, lane, large);
        self.segments[slot as usize] = Segment {
            addr: base,
            size: extra,
            first: block,
            held: true,
            reserve,
        };
        self.lanes[lane as usize].growable[usize::from(large)] = slot;
        self.stats.address_space += reserve;
        self.stats.segments += 1;
        Ok(Some(block))
    }

    /// Unmaps the free tail of growable `segment` from the first granularity boundary in it;
    /// releases the range once nothing of it is mapped. The bytes returned.
    pub(super) fn shrink_growable<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        segment: u32,
    ) -> Result<usize> {
        let Some(granularity) = self.granularity(driver) else {
            return Ok(0);
        };
        let Segment {
            addr,
            size,
            reserve,
            ..
        } = self.segments[segment as usize];
        let tail = self.last_block(segment);
        let (offset, lane, large, prev) = {
            let b = &self.blocks[tail as usize];
            if b.state != State::Free {
                return Ok(0);
            }
            (b.addr - addr, b.lane, b.large, b.prev)
        };
        let keep = offset.next_multiple_of(granularity);
        if keep >= size {
            return Ok(0);
        }
        let bytes = size - keep;
        let after = self.lanes[lane as usize].stream;
        self.stats.driver_calls += 1;
        driver.unmap(self.device, self.kind, addr + keep, bytes, after)?;
        self.lanes[lane as usize]
            .bins_mut(large)
            .remove(&mut self.blocks, tail);
        if keep == offset {
            if prev != NIL {
                self.blocks[prev as usize].next = NIL;
            }
            self.drop_block(tail);
        } else {
            self.blocks[tail as usize].size = keep - offset;
            self.lanes[lane as usize]
                .bins_mut(large)
                .insert(&mut self.blocks, tail);
        }
        self.segments[segment as usize].size = keep;
        self.stats.note_unmapped(bytes);
        if keep == 0 {
            self.segments[segment as usize].held = false;
            self.unused_segments.push(segment);
            self.stats.segments -= 1;
            for lane in &mut self.lanes {
                for growable in &mut lane.growable {
                    if *growable == segment {
                        *growable = NIL;
                    }
                }
            }
            self.loose_ranges.push((addr, reserve));
            self.release_loose_ranges(driver);
        }
        Ok(bytes)
    }

    /// Releases the address ranges of growable segments that are gone; a range the driver
    /// fails to release stays for the next try.
    pub(super) fn release_loose_ranges<D: SegmentDriver>(&mut self, driver: &mut D) {
        let mut index = 0;
        while let Some(&(address, reserve)) = self.loose_ranges.get(index) {
            self.stats.driver_calls += 1;
            match driver.release_range(self.device, self.kind, address, reserve) {
                Ok(()) => {
                    self.loose_ranges.swap_remove(index);
                    self.stats.address_space -= reserve;
                }
                Err(_) => index += 1,
            }
        }
    }
}
