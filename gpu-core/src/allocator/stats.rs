//! Counters of one (device, memory kind) cache: bytes held and handed out, and how requests
//! were served. Plain fields, cheap to read and to print.

/// Statistics of one memory kind on one device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes held from the driver (all segments).
    pub reserved: usize,
    /// Highest `reserved` seen.
    pub peak_reserved: usize,
    /// Bytes of the blocks handed out and not yet freed (sizes after rounding and carving).
    pub allocated: usize,
    /// Highest `allocated` seen.
    pub peak_allocated: usize,
    /// Bytes callers asked for, of the live allocations.
    pub requested: usize,
    /// Highest `requested` seen.
    pub peak_requested: usize,
    /// Bytes in free cached blocks, ready for reuse.
    pub cached: usize,
    /// Bytes freed but waiting for work on other streams to finish.
    pub pending: usize,
    /// Segments currently held.
    pub segments: usize,
    /// Driver calls of every kind (segment allocations and frees, event operations, waits,
    /// synchronisations).
    pub driver_calls: u64,
    /// Segments obtained from the driver.
    pub segment_allocations: u64,
    /// Segments returned to the driver.
    pub segment_frees: u64,
    /// Requests served from the cache (same stream, or a block no work can be using).
    pub hits: u64,
    /// Requests served from the cache with a block freed on another stream.
    pub cross_stream_hits: u64,
    /// Requests that needed a new segment.
    pub misses: u64,
    /// Stream-ordered requests served by the wait-then-synchronous fallback.
    pub fallbacks: u64,
    /// Retries after a reclaim step of the out-of-memory ladder.
    pub oom_retries: u64,
    /// Requests that failed with out of memory after the whole ladder.
    pub oom_errors: u64,
    /// Address space reserved for growable segments (their mapped part counts in `reserved`).
    pub address_space: usize,
    /// Bytes of physical memory mapped into growable segments now (part of `reserved`).
    pub mapped: usize,
    /// Pieces of physical memory mapped into growable segments (each a driver allocation).
    pub maps: u64,
    /// Pieces unmapped from growable segments' free tails.
    pub unmaps: u64,
}

impl AllocatorStats {
    /// Bytes held from the driver per byte at the highest demand: `peak_reserved /
    /// peak_requested` (1.0 is perfect; `0.0` before the first request).
    pub fn fragmentation(&self) -> f64 {
        if self.peak_requested == 0 {
            0.0
        } else {
            self.peak_reserved as f64 / self.peak_requested as f64
        }
    }

    /// A cached block of `block` bytes handed out for `requested` bytes.
    #[inline]
    pub(crate) fn note_allocated(&mut self, block: usize, requested: usize) {
        self.cached -= block;
        self.note_live(block, requested);
    }

    /// `block` bytes more handed out, for `requested` bytes, with the peaks following.
    #[inline]
    pub(crate) fn note_live(&mut self, block: usize, requested: usize) {
        self.allocated += block;
        self.requested += requested;
        if self.allocated > self.peak_allocated {
            self.peak_allocated = self.allocated;
        }
        if self.requested > self.peak_requested {
            self.peak_requested = self.requested;
        }
    }

    #[inline]
    pub(crate) fn note_reserved(&mut self, bytes: usize) {
        self.reserved += bytes;
        self.cached += bytes;
        self.segments += 1;
        self.segment_allocations += 1;
        if self.reserved > self.peak_reserved {
            self.peak_reserved = self.reserved;
        }
    }

    /// `bytes` more mapped into a growable segment (free, cached).
    pub(crate) fn note_mapped(&mut self, bytes: usize) {
        self.reserved += bytes;
        self.cached += bytes;
        self.mapped += bytes;
        self.maps += 1;
        if self.reserved > self.peak_reserved {
            self.peak_reserved = self.reserved;
        }
    }

    /// `bytes` of a growable segment's free tail unmapped.
    pub(crate) fn note_unmapped(&mut self, bytes: usize) {
        self.reserved -= bytes;
        self.cached -= bytes;
        self.mapped -= bytes;
        self.unmaps += 1;
    }

    #[inline]
    pub(crate) fn note_released(&mut self, bytes: usize) {
        self.reserved -= bytes;
        self.cached -= bytes;
        self.segments -= 1;
        self.segment_frees += 1;
    }
}
