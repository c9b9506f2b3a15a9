//! Growable segments: per lane and pool, a reserved address range mapped in granules at its
//! end, grown on a miss instead of a new segment, and its free end unmapped on a trim.
//!
//! A growable segment is a [`Segment`] whose `size` is the bytes mapped from its start; its
//! blocks cover them as any segment's do. Growing maps whole granules at the end and joins
//! them to the free block there when that block belongs to the growing lane (or to the idle
//! lane); trimming unmaps the granules wholly inside the free block at the end, so live and
//! pending blocks never move and never lose their memory.

use super::KindCache;
use super::block::{IDLE, NIL, Segment, Served, State};
use super::reclaim::Miss;
use crate::allocator::driver::SegmentDriver;
use crate::allocator::policy::{AllocatorConfig, Shape};
use crate::allocator::request::AllocPath;
use crate::error::Result;

/// What an attempt to grow gave.
pub(super) enum Grown {
    /// The request, served from the grown segment.
    Served(Served),
    /// The driver is out of memory for the granules.
    OutOfMemory,
    /// Growable segments do not apply (off, no virtual memory for the kind, or no address
    /// space left to reserve): get an ordinary segment.
    NotGrowable,
}

impl KindCache {
    /// The kind's virtual-memory granularity when growable segments are on and the driver has
    /// virtual memory for the kind (asked once).
    fn growth_granularity<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        config: &AllocatorConfig,
    ) -> Result<Option<usize>> {
        if !config.growable_segments {
            return Ok(None);
        }
        if self.granularity.is_none() {
            self.stats.driver_calls += 1;
            let granularity = driver.granularity(self.device, self.kind)?;
            // A granularity the blocks cannot be cut in is no virtual memory for us.
            let usable = granularity
                .filter(|g| g.is_power_of_two() && *g >= crate::allocator::policy::GRANULE);
            self.granularity = Some(usable);
        }
        Ok(self.granularity.flatten())
    }

    /// Serves a miss by growing the requesting lane's growable segment of the request's pool
    /// (or a new one when it has none or it is full), after ordering the request's
    /// dependencies. Nothing else changes when it fails or does not apply.
    pub(super) fn grow<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        miss: &Miss<'_>,
        dependencies_done: &mut bool,
    ) -> Result<Grown> {
        let Miss {
            shape,
            order,
            own_lane: lane,
            config,
            ..
        } = *miss;
        let Some(granularity) = self.growth_granularity(driver, config)? else {
            return Ok(Grown::NotGrowable);
        };
        // The new memory is usable by every stream at once: the stream only follows its
        // dependencies, as for a cached block.
        self.order_dependencies(driver, order, dependencies_done)?;
        let pool = usize::from(shape.large);
        let current = self.lanes[lane as usize].growable[pool];
        let (tail, joinable) = match current {
            NIL => (NIL, 0),
            segment => self.joinable_end(segment, lane),
        };
        if joinable >= shape.search {
            // Too big for the bins' oversize rule, but a growable segment's block is split.
            self.stats.hits += 1;
            return Ok(Grown::Served(self.hand_out(
                tail,
                shape,
                config,
                AllocPath::Cached,
            )));
        }
        let Some(grow) = (shape.search - joinable).checked_next_multiple_of(granularity) else {
            return Ok(Grown::NotGrowable);
        };
        let room = current != NIL && {
            let s = &self.segments[current as usize];
            s.size
                .checked_add(grow)
                .is_some_and(|end| end <= s.reservation)
        };
        if room {
            let end = {
                let s = &self.segments[current as usize];
                s.addr + s.size
            };
            self.stats.driver_calls += 1;
            if !driver.map(self.device, self.kind, end, grow)? {
                return Ok(Grown::OutOfMemory);
            }
            let last = self.last_block(current);
            let block = self.new_block(end, grow, current, lane, shape.large);
            self.blocks[block as usize].prev = last;
            self.blocks[last as usize].next = block;
            self.segments[current as usize].size += grow;
            return Ok(Grown::Served(
                self.serve_grown(block, grow, lane, shape, config),
            ));
        }
        let Some(grow) = shape.search.checked_next_multiple_of(granularity) else {
            return Ok(Grown::NotGrowable);
        };
        let Some(reservation) = config
            .growable_reservation
            .max(grow)
            .checked_next_multiple_of(granularity)
        else {
            return Ok(Grown::NotGrowable);
        };
        self.stats.driver_calls += 1;
        let Some(base) = driver.reserve(self.device, self.kind, reservation)? else {
            return Ok(Grown::NotGrowable);
        };
        self.stats.driver_calls += 1;
        let mapped = driver.map(self.device, self.kind, base, grow);
        if !matches!(mapped, Ok(true)) {
            self.stats.driver_calls += 1;
            if driver
                .release_reservation(self.device, self.kind, base, reservation)
                .is_err()
            {
                // Kept, to be released by the next trim.
                self.stats.reserved_address_space += reservation;
                self.orphans.push((base, reservation));
            }
            mapped?;
            return Ok(Grown::OutOfMemory);
        }
        let segment = self.new_segment_slot();
        let block = self.new_block(base, grow, segment, lane, shape.large);
        self.segments[segment as usize] = Segment {
            addr: base,
            size: grow,
            first: block,
            held: true,
            reservation,
            owner: lane,
        };
        self.lanes[lane as usize].growable[pool] = segment;
        self.stats.note_reservation(reservation);
        Ok(Grown::Served(
            self.serve_grown(block, grow, lane, shape, config),
        ))
    }

    /// Frees newly mapped `block` into `lane` (joining the free block before it) and serves
    /// the request from the joined block.
    fn serve_grown(
        &mut self,
        block: u32,
        grow: usize,
        lane: u32,
        shape: &Shape,
        config: &AllocatorConfig,
    ) -> Served {
        self.stats.note_mapped(grow);
        self.stats.misses += 1;
        self.release_to_lane(block, lane);
        self.hand_out(block, shape, config, AllocPath::Grown)
    }

    /// The last block of `segment` and, when it is free in `lane` or the idle lane (so new
    /// granules join it), its bytes; else 0.
    fn joinable_end(&self, segment: u32, lane: u32) -> (u32, usize) {
        let last = self.last_block(segment);
        let b = &self.blocks[last as usize];
        let joins = b.state == State::Free && (b.lane == lane || b.lane == IDLE);
        (last, if joins { b.size } else { 0 })
    }

    /// The block at the end of `segment`.
    fn last_block(&self, segment: u32) -> u32 {
        let mut cursor = self.segments[segment as usize].first;
        while self.blocks[cursor as usize].next != NIL {
            cursor = self.blocks[cursor as usize].next;
        }
        cursor
    }

    /// Unmaps the free granules at the end of every growable segment (after the work of the
    /// lanes that freed them) and releases the reservations left with nothing mapped. The
    /// bytes unmapped.
    pub(super) fn shrink_growable<D: SegmentDriver>(&mut self, driver: &mut D) -> Result<usize> {
        self.release_orphans(driver)?;
        let Some(granularity) = self.granularity.flatten() else {
            return Ok(0);
        };
        let mut released = 0;
        for segment in 0..self.segments.len() as u32 {
            // Free blocks of several lanes may end the segment: one after the other.
            while let Some(bytes) = self.shrink_end(driver, segment, granularity)? {
                released += bytes;
            }
        }
        Ok(released)
    }

    /// Unmaps the free granules of the last block of `segment`, if it is a held growable
    /// segment whose last block is free and holds whole granules; the bytes unmapped.
    fn shrink_end<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        segment: u32,
        granularity: usize,
    ) -> Result<Option<usize>> {
        let s = &self.segments[segment as usize];
        if !s.held || !s.growable() {
            return Ok(None);
        }
        let (addr, end) = (s.addr, s.addr + s.size);
        let last = self.last_block(segment);
        let b = &self.blocks[last as usize];
        let cut = b.addr.next_multiple_of(granularity);
        if b.state != State::Free || cut >= end {
            return Ok(None);
        }
        let (lane, large, block_addr, prev) = (b.lane, b.large, b.addr, b.prev);
        let after = self.lanes[lane as usize].stream;
        self.stats.driver_calls += 1;
        driver.unmap(self.device, self.kind, cut, end - cut, after)?;
        self.lanes[lane as usize]
            .bins_mut(large)
            .remove(&mut self.blocks, last);
        self.stats.note_unmapped(end - cut);
        if cut > block_addr {
            self.blocks[last as usize].size = cut - block_addr;
            self.lanes[lane as usize]
                .bins_mut(large)
                .insert(&mut self.blocks, last);
            self.segments[segment as usize].size = cut - addr;
            return Ok(Some(end - cut));
        }
        self.drop_block(last);
        if prev != NIL {
            self.blocks[prev as usize].next = NIL;
            self.segments[segment as usize].size = cut - addr;
            return Ok(Some(end - cut));
        }
        // Nothing mapped any more: the reservation goes too.
        let s = core::mem::replace(&mut self.segments[segment as usize], Segment::EMPTY);
        let pool = usize::from(large);
        if self.lanes[s.owner as usize].growable[pool] == segment {
            self.lanes[s.owner as usize].growable[pool] = NIL;
        }
        self.unused_segments.push(segment);
        self.stats.note_segment_dropped();
        self.orphans.push((s.addr, s.reservation));
        self.release_orphans(driver)?;
        Ok(Some(end - cut))
    }

    /// Releases the reservations of growable segments given up (kept when a release failed,
    /// to be tried again).
    fn release_orphans<D: SegmentDriver>(&mut self, driver: &mut D) -> Result<()> {
        while let Some(&(addr, size)) = self.orphans.last() {
            self.stats.driver_calls += 1;
            driver.release_reservation(self.device, self.kind, addr, size)?;
            self.orphans.pop();
            self.stats.reserved_address_space -= size;
        }
        Ok(())
    }
}
