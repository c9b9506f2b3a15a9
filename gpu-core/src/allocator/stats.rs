//! Counters of one (device, memory kind) cache: bytes held and handed out, and how requests
//! were served. Plain fields, cheap to read and to print.

/// Statistics of one memory kind on one device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes held from the driver (all segments; for growable segments, their mapped bytes).
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
    /// Segments currently held (growable ones included).
    pub segments: usize,
    /// Bytes mapped in growable segments (a part of `reserved`).
    pub mapped: usize,
    /// Bytes of address space reserved for growable segments, mapped or not.
    pub reserved_address_space: usize,
    /// Driver calls of every kind (segment allocations and frees, event operations, waits,
    /// synchronisations).
    pub driver_calls: u64,
    /// Segments obtained from the driver (growable segments' reservations included).
    pub segment_allocations: u64,
    /// Segments returned to the driver (growable segments' reservations included).
    pub segment_frees: u64,
    /// Map calls that grew a growable segment.
    pub segment_grows: u64,
    /// Unmap calls that returned the free end of a growable segment.
    pub segment_shrinks: u64,
    /// Requests served from the cache (same stream, or a block no work can be using).
    pub hits: u64,
    /// Requests served from the cache with a block freed on another stream.
    pub cross_stream_hits: u64,
    /// Requests that needed a new segment or a segment to grow.
    pub misses: u64,
    /// Stream-ordered requests served by the wait-then-synchronous fallback.
    pub fallbacks: u64,
    /// Retries after a reclaim step of the out-of-memory ladder.
    pub oom_retries: u64,
    /// Requests that failed with out of memory after the whole ladder.
    pub oom_errors: u64,
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

    /// A growable segment's reservation of `bytes` of address space made.
    pub(crate) fn note_reservation(&mut self, bytes: usize) {
        self.reserved_address_space += bytes;
        self.segments += 1;
        self.segment_allocations += 1;
    }

    /// A growable segment (its reservation still counted until released) given up.
    pub(crate) fn note_segment_dropped(&mut self) {
        self.segments -= 1;
        self.segment_frees += 1;
    }

    /// `bytes` newly mapped in a growable segment, free.
    pub(crate) fn note_mapped(&mut self, bytes: usize) {
        self.mapped += bytes;
        self.reserved += bytes;
        self.cached += bytes;
        self.segment_grows += 1;
        if self.reserved > self.peak_reserved {
            self.peak_reserved = self.reserved;
        }
    }

    /// `bytes` of free memory unmapped from a growable segment.
    pub(crate) fn note_unmapped(&mut self, bytes: usize) {
        self.mapped -= bytes;
        self.reserved -= bytes;
        self.cached -= bytes;
        self.segment_shrinks += 1;
    }

    #[inline]
    pub(crate) fn note_released(&mut self, bytes: usize) {
        self.reserved -= bytes;
        self.cached -= bytes;
        self.segments -= 1;
        self.segment_frees += 1;
    }
}
