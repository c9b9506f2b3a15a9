//! The models' self-check: every structural invariant of blocks, segments, lanes and bins,
//! and statistics that match the blocks, or the first broken one, described.

use super::KindCache;
use super::block::{IDLE, NIL, State};
use crate::allocator::policy::GRANULE;

impl KindCache {
    /// Checks every structural invariant and that the statistics match the blocks; the first
    /// broken one, described.
    #[cfg(any(test, feature = "model"))]
    pub(crate) fn check_consistency(&self) -> core::result::Result<(), alloc::string::String> {
        use alloc::format;
        let (mut reserved, mut segments, mut mapped) = (0, 0, 0);
        let (mut allocated, mut requested, mut cached, mut pending) = (0, 0, 0, 0);
        let mut free_per_bins = alloc::vec![[0usize; 2]; self.lanes.len()];
        for (lane, state) in self.lanes.iter().enumerate() {
            for (pool, &segment) in state.growable.iter().enumerate() {
                let growable = self.segments.get(segment as usize).filter(|s| {
                    s.held && s.reserve > 0 && self.blocks[s.first as usize].large == (pool == 1)
                });
                if segment != NIL && growable.is_none() {
                    return Err(format!(
                        "lane {lane} names a growable segment of its pool {pool} it does not hold"
                    ));
                }
            }
        }
        for (index, segment) in self.segments.iter().enumerate().filter(|(_, s)| s.held) {
            reserved += segment.size;
            segments += 1;
            if segment.reserve > 0 {
                mapped += segment.size;
            }
            if segment.reserve > 0 && segment.size > segment.reserve {
                return Err(format!("growable segment {index} maps beyond its range"));
            }
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
        if mapped != self.stats.mapped {
            return Err(format!(
                "stats say {} bytes mapped but the growable segments map {mapped}",
                self.stats.mapped
            ));
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
