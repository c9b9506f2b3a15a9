//! What the backend can do (capabilities), the allocator's tunables, and the checks and size
//! arithmetic that turn a request into a block shape before any driver call.

use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::id::MemoryKind;

/// Block sizes are multiples of this; the size classes of the cache's bins count in these
/// units.
pub(crate) const GRANULE: usize = 256;
/// Request sizes are rounded up to a multiple of this many bytes.
pub const ROUNDING: usize = 512;
/// The alignment every block has without carving: the driver's own guarantee (256 bytes for
/// CUDA device memory). Larger alignments are carved out of bigger blocks.
pub const MIN_ALIGNMENT: usize = GRANULE;
/// Requests up to this size come from the small pool.
pub const SMALL_REQUEST_LIMIT: usize = 1 << 20;
/// Size of a small-pool segment.
pub const SMALL_SEGMENT: usize = 2 << 20;
/// Size of a segment for mid-size requests (above [`SMALL_REQUEST_LIMIT`], below 10 MiB;
/// larger requests get a segment of their own, rounded up to 2 MiB).
pub const LARGE_SEGMENT: usize = 20 << 20;
/// Requests from this size on get a segment of their own, rounded to [`LARGE_ROUNDING`].
const LARGE_REQUEST: usize = 10 << 20;
/// Rounding of dedicated segments.
const LARGE_ROUNDING: usize = 2 << 20;
/// Address space a growable segment reserves (at least its first request, rounded up to the
/// granularity): 1/64 of a 64-bit address space's practical reach, a quarter of a 32-bit one.
pub(crate) const GROWABLE_RESERVE: usize = if usize::BITS >= 64 { 1 << 36 } else { 1 << 30 };
/// Default [`AllocatorConfig::max_split_size`]: on the committed mixed trace it brings the
/// fragmentation figure from 1.49 (no limit) to 1.20, for about twice as many segment calls.
const DEFAULT_MAX_SPLIT: usize = 64 << 20;
/// How much bigger than the request an oversize block may be and still serve it.
const OVERSIZE_SLACK: usize = 20 << 20;

/// What the driver offers for one memory kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindSupport {
    /// The device has this kind at all.
    pub available: bool,
    /// The driver has a stream-ordered, pool-backed allocation of this kind (CUDA 11.2+ for
    /// device memory, 12.6+ for pinned host, 13.0+ for managed).
    pub stream_ordered: bool,
    /// The largest single request accepted, in bytes.
    pub max_size: usize,
}

impl KindSupport {
    /// Not offered.
    pub const NONE: Self = Self {
        available: false,
        stream_ordered: false,
        max_size: 0,
    };
    /// Offered synchronously only, up to `usize::MAX` bytes.
    pub const SYNCHRONOUS: Self = Self {
        available: true,
        stream_ordered: false,
        max_size: usize::MAX,
    };
    /// Offered synchronously and stream-ordered, up to `usize::MAX` bytes.
    pub const STREAM_ORDERED: Self = Self {
        available: true,
        stream_ordered: true,
        max_size: usize::MAX,
    };

    /// [`KindSupport::SYNCHRONOUS`] if `available`, else [`KindSupport::NONE`] (a kind a
    /// driver offers without a stream-ordered form, where the device says whether it can).
    pub const fn synchronous_if(available: bool) -> Self {
        if available {
            Self::SYNCHRONOUS
        } else {
            Self::NONE
        }
    }
}

/// What the backend reports for one device; the policy decides from it, not from the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorCapabilities {
    /// Device-only memory.
    pub device: KindSupport,
    /// Managed (unified) memory.
    pub managed: KindSupport,
    /// Page-locked host memory.
    pub host_pinned: KindSupport,
    /// Whether the caller's host memory can be registered (pinned in place).
    pub host_register: bool,
}

impl AllocatorCapabilities {
    /// What the driver offers for `kind`.
    pub const fn support(&self, kind: MemoryKind) -> KindSupport {
        match kind {
            MemoryKind::Device => self.device,
            MemoryKind::Managed => self.managed,
            MemoryKind::HostPinned => self.host_pinned,
        }
    }
}

/// Tunables of the caching sub-allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorConfig {
    /// Blocks at least this large are never split, and requests smaller than this never use
    /// them (PyTorch's `max_split_size`); `usize::MAX` turns the rule off. Default 64 MiB.
    pub max_split_size: usize,
    /// Streams are numbered below this (each stream the allocator sees gets its own free
    /// lists, indexed by the stream's number).
    pub max_streams: usize,
    /// On a miss while the cache holds at least the requested bytes (but no fitting block),
    /// return wholly free segments to the driver before asking it for a new one, so that
    /// reserved memory does not grow with fragmentation. Costs driver frees on such misses
    /// (a synchronous free waits for the device); `false` leaves that to the out-of-memory
    /// ladder.
    pub release_before_growing: bool,
    /// On such a miss, when free blocks freed on other streams (and not yet known complete)
    /// lie next to each other or to idle ones and together would hold the request, wait on the
    /// host for those streams' work up to their frees (one event each, never a device
    /// synchronisation), merge them, and serve the request from the merged block instead of
    /// growing. With it, the pool grows only when no run of adjacent free blocks, whichever
    /// stream freed them, holds the request (the bound in docs/allocator.md); `false` grows
    /// instead of waiting, and reserved memory can creep in programs with many streams.
    pub wait_before_growing: bool,
    /// Serve both pools (small and large requests) from growable segments where the driver
    /// has virtual memory management ([`SegmentDriver::map_granularity`]): one reserved
    /// address range per stream and pool whose mapped part grows by granularity-sized pieces
    /// at its end, so that a request the free tail cannot hold extends it instead of
    /// taking a new segment (a full range stays as it is and the stream starts another), and
    /// whose free tail is unmapped (returned to the driver) where whole segments would be
    /// freed. Every block of a growable segment may be split
    /// (`max_split_size` is not applied). Off by default; without virtual memory, ordinary
    /// segments.
    ///
    /// [`SegmentDriver::map_granularity`]: super::SegmentDriver::map_granularity
    pub growable_segments: bool,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        Self {
            max_split_size: DEFAULT_MAX_SPLIT,
            max_streams: 1024,
            release_before_growing: true,
            wait_before_growing: true,
            growable_segments: false,
        }
    }
}

impl AllocatorConfig {
    /// The large pool's split limit: `max_split_size`, or none with growable segments.
    #[inline]
    pub(crate) const fn split_limit(&self) -> usize {
        if self.growable_segments {
            usize::MAX
        } else {
            self.max_split_size
        }
    }

    /// Sets the tunable named `key` from its text form: `max_split_size` (a byte count above
    /// zero, or `none`), `release_before_growing`, `wait_before_growing` and
    /// `growable_segments` (`0` or `1`), `max_streams` (a count above zero). An unknown key or a bad value is an error naming
    /// what was expected, and changes nothing.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = |expected: &'static str| Error::TraceSyntax {
            line: 0,
            expected,
            found: alloc::format!("{key}={value}"),
        };
        let flag = |expected| match value {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(bad(expected)),
        };
        let count = |expected| match value.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(bad(expected)),
        };
        match key {
            "max_split_size" if value == "none" => self.max_split_size = usize::MAX,
            "max_split_size" => {
                self.max_split_size = count("`max_split_size`: a byte count above zero or `none`")?
            }
            "release_before_growing" => {
                self.release_before_growing = flag("`release_before_growing`: `0` or `1`")?
            }
            "wait_before_growing" => {
                self.wait_before_growing = flag("`wait_before_growing`: `0` or `1`")?
            }
            "growable_segments" => {
                self.growable_segments = flag("`growable_segments`: `0` or `1`")?
            }
            "max_streams" => self.max_streams = count("`max_streams`: a count above zero")?,
            _ => {
                return Err(bad(
                    "max_split_size, release_before_growing, wait_before_growing, \
                     growable_segments or max_streams",
                ));
            }
        }
        Ok(())
    }
}

/// The block a request needs, worked out before any driver call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Bytes the caller asked for.
    pub(crate) size: usize,
    /// The size rounded to [`ROUNDING`]: the block handed out.
    pub(crate) rounded: usize,
    /// Required address alignment (at least [`MIN_ALIGNMENT`]).
    pub(crate) alignment: usize,
    /// Bytes to look for so that an aligned `rounded` block can be carved out.
    pub(crate) search: usize,
    /// Whether the large pool serves it.
    pub(crate) large: bool,
    /// The largest free block that may serve it (the oversize rule).
    pub(crate) max_block: usize,
    /// Size of a new segment for it.
    pub(crate) segment: usize,
}

/// The segment a search for `bytes` is carved from, or `None` when its size overflows.
#[inline]
fn segment_size(bytes: usize) -> Option<usize> {
    if bytes <= SMALL_REQUEST_LIMIT {
        Some(SMALL_SEGMENT)
    } else if bytes < LARGE_REQUEST {
        Some(LARGE_SEGMENT)
    } else {
        bytes.checked_next_multiple_of(LARGE_ROUNDING)
    }
}

fn too_large(size: usize, limit: usize) -> Error {
    Error::LimitExceeded {
        what: "allocation size",
        required: size,
        limit,
        detail: Vec::new(),
    }
}

/// Checks a request's size and alignment and works out its block shape.
#[inline]
pub(crate) fn shape(
    size: usize,
    alignment: usize,
    max_size: usize,
    config: &AllocatorConfig,
) -> Result<Shape> {
    if size == 0 {
        return Err(Error::ZeroSize {
            what: "allocation size",
        });
    }
    if size > max_size {
        return Err(too_large(size, max_size));
    }
    let rounded = size
        .checked_next_multiple_of(ROUNDING)
        .ok_or_else(|| too_large(size, usize::MAX - ROUNDING + 1))?;
    let own_segment =
        segment_size(rounded).ok_or_else(|| too_large(size, usize::MAX - LARGE_ROUNDING + 1))?;
    if !alignment.is_power_of_two() || alignment > own_segment {
        return Err(Error::InvalidAlignment {
            alignment,
            limit: own_segment,
        });
    }
    let alignment = alignment.max(MIN_ALIGNMENT);
    let search = rounded
        .checked_add(alignment - MIN_ALIGNMENT)
        .ok_or_else(|| too_large(size, usize::MAX - alignment))?;
    let segment = segment_size(search).ok_or_else(|| too_large(size, usize::MAX - alignment))?;
    let large = search > SMALL_REQUEST_LIMIT;
    let split_limit = config.split_limit();
    let max_block = if !large {
        usize::MAX
    } else if search < split_limit {
        split_limit - 1
    } else {
        search.saturating_add(OVERSIZE_SLACK)
    };
    Ok(Shape {
        size,
        rounded,
        alignment,
        search,
        large,
        max_block,
        segment,
    })
}

/// Whether a block of `block_size` bytes in the given pool, serving `used` bytes, is split: in
/// the small pool, and with growable segments in both, whenever the rest is a whole rounding
/// unit; in the large pool of ordinary segments only when more than a small request's worth is
/// left, and only below the split limit (as PyTorch's allocator decides, with and without its
/// expandable segments: a growable segment's tail is worth keeping however small).
#[inline]
pub(crate) fn should_split(
    large: bool,
    block_size: usize,
    used: usize,
    config: &AllocatorConfig,
) -> bool {
    let rest = block_size - used;
    if large && !config.growable_segments {
        rest > SMALL_REQUEST_LIMIT && block_size < config.split_limit()
    } else {
        rest >= ROUNDING
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_of(size: usize, alignment: usize) -> Result<Shape> {
        shape(size, alignment, usize::MAX, &AllocatorConfig::default())
    }

    #[test]
    fn a_growable_segments_large_block_is_split_for_any_whole_unit_left() {
        let ordinary = AllocatorConfig::default();
        let growable = AllocatorConfig {
            growable_segments: true,
            ..ordinary
        };
        let (block, used) = (10 << 20, (10 << 20) - (600 << 10));
        // 600 KiB left: kept with the block in an ordinary segment, split off in a growable one.
        assert!(!should_split(true, block, used, &ordinary));
        assert!(should_split(true, block, used, &growable));
        // Less than a rounding unit left: never split.
        assert!(!should_split(true, block, block - 256, &growable));
        // The small pool splits alike in both.
        assert!(should_split(false, 1 << 20, (1 << 20) - 512, &ordinary));
        assert!(should_split(false, 1 << 20, (1 << 20) - 512, &growable));
    }

    #[test]
    fn sizes_round_to_512_and_pick_the_pool_and_segment() {
        let small = shape_of(1, 1).unwrap();
        assert_eq!(
            (small.rounded, small.large, small.segment),
            (512, false, SMALL_SEGMENT)
        );
        let mid = shape_of(SMALL_REQUEST_LIMIT + 1, 1).unwrap();
        assert_eq!((mid.large, mid.segment), (true, LARGE_SEGMENT));
        let big = shape_of(LARGE_REQUEST + 1, 1).unwrap();
        assert_eq!(big.segment, LARGE_REQUEST + LARGE_ROUNDING);
    }

    #[test]
    fn impossible_requests_are_typed_errors() {
        assert!(matches!(shape_of(0, 1), Err(Error::ZeroSize { .. })));
        assert!(matches!(
            shape_of(64, 3),
            Err(Error::InvalidAlignment { alignment: 3, .. })
        ));
        assert!(matches!(
            shape_of(64, 0),
            Err(Error::InvalidAlignment { .. })
        ));
        assert_eq!(
            shape_of(64, 4 << 20),
            Err(Error::InvalidAlignment {
                alignment: 4 << 20,
                limit: SMALL_SEGMENT
            })
        );
        assert!(matches!(
            shape_of(usize::MAX - 10, 1),
            Err(Error::LimitExceeded { .. })
        ));
        assert!(matches!(
            shape(4096, 1, 1024, &AllocatorConfig::default()),
            Err(Error::LimitExceeded { limit: 1024, .. })
        ));
    }

    #[test]
    fn large_alignments_search_for_room_to_carve() {
        let aligned = shape_of(512, 1 << 20).unwrap();
        assert_eq!(aligned.search, 512 + (1 << 20) - MIN_ALIGNMENT);
        assert!(aligned.large);
        assert_eq!(aligned.segment, LARGE_SEGMENT);
    }

    #[test]
    fn oversize_rule_bounds_the_blocks_a_request_may_take() {
        let config = AllocatorConfig {
            max_split_size: 64 << 20,
            ..AllocatorConfig::default()
        };
        let below = shape(30 << 20, 1, usize::MAX, &config).unwrap();
        assert_eq!(below.max_block, (64 << 20) - 1);
        let above = shape(100 << 20, 1, usize::MAX, &config).unwrap();
        assert_eq!(above.max_block, (100 << 20) + OVERSIZE_SLACK);
        assert!(!should_split(true, 128 << 20, 100 << 20, &config));
        assert!(should_split(true, 40 << 20, 30 << 20, &config));
        assert!(!should_split(false, 1024, 768, &config));
        assert!(should_split(false, 1024, 512, &config));
    }
}
