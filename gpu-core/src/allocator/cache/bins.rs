//! Size-class bins of free blocks: a two-level bitmap over 1,664 classes (32 per power of two,
//! exact 256-byte classes below 8 KiB) with an intrusive list per class; best fit in O(1) bins.

use alloc::boxed::Box;

use super::block::{Block, NIL};
use crate::allocator::policy::GRANULE;

const SUB_CLASSES: usize = 32;
const LOG2_SUB_CLASSES: u32 = 5;
const LEVELS: usize = 52;
const CLASS_COUNT: usize = LEVELS * SUB_CLASSES;

/// The class a block of `size` bytes (a non-zero multiple of [`GRANULE`]) belongs to.
#[inline]
fn class_of(size: usize) -> (usize, usize) {
    let units = size / GRANULE;
    if units < SUB_CLASSES {
        return (0, units);
    }
    let top_bit = usize::BITS - 1 - units.leading_zeros();
    let level = (top_bit - (LOG2_SUB_CLASSES - 1)) as usize;
    let sub = (units >> (top_bit - LOG2_SUB_CLASSES)) & (SUB_CLASSES - 1);
    (level, sub)
}

/// The free blocks of one pool (small or large) of one lane, by size class.
pub(crate) struct Bins {
    level_map: u64,
    class_maps: [u32; LEVELS],
    heads: Box<[u32; CLASS_COUNT]>,
    len: usize,
}

impl Bins {
    /// Empty bins.
    pub(crate) fn new() -> Self {
        Self {
            level_map: 0,
            class_maps: [0; LEVELS],
            heads: Box::new([NIL; CLASS_COUNT]),
            len: 0,
        }
    }

    /// Number of blocks held.
    #[cfg(any(test, feature = "model"))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Puts block `index` at the front of its class's list.
    #[inline]
    pub(crate) fn insert(&mut self, blocks: &mut [Block], index: u32) {
        let (level, sub) = class_of(blocks[index as usize].size);
        let slot = level * SUB_CLASSES + sub;
        let head = self.heads[slot];
        {
            let block = &mut blocks[index as usize];
            block.bin_prev = NIL;
            block.bin_next = head;
        }
        if head != NIL {
            blocks[head as usize].bin_prev = index;
        }
        self.heads[slot] = index;
        self.class_maps[level] |= 1 << sub;
        self.level_map |= 1 << level;
        self.len += 1;
    }

    /// Takes block `index` out of its list.
    #[inline]
    pub(crate) fn remove(&mut self, blocks: &mut [Block], index: u32) {
        let (prev, next, size) = {
            let block = &blocks[index as usize];
            (block.bin_prev, block.bin_next, block.size)
        };
        if prev != NIL {
            blocks[prev as usize].bin_next = next;
        } else {
            let (level, sub) = class_of(size);
            let slot = level * SUB_CLASSES + sub;
            self.heads[slot] = next;
            if next == NIL {
                self.class_maps[level] &= !(1 << sub);
                if self.class_maps[level] == 0 {
                    self.level_map &= !(1 << level);
                }
            }
        }
        if next != NIL {
            blocks[next as usize].bin_prev = prev;
        }
        self.len -= 1;
    }

    /// The smallest block of at least `size` bytes and at most `max_size` bytes (the most
    /// recently freed one among equals), without taking it out.
    #[inline]
    pub(crate) fn best_fit(&self, blocks: &[Block], size: usize, max_size: usize) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let (level, sub) = class_of(size);
        let found = match self.smallest_in(blocks, level * SUB_CLASSES + sub, size) {
            Some(index) => Some(index),
            None => self
                .next_class_above(level, sub)
                .and_then(|slot| self.smallest_in(blocks, slot, 0)),
        };
        found.filter(|&index| blocks[index as usize].size <= max_size)
    }

    /// The smallest block of at least `size` bytes in class `slot`.
    #[inline]
    fn smallest_in(&self, blocks: &[Block], slot: usize, size: usize) -> Option<u32> {
        let mut best = NIL;
        let mut best_size = usize::MAX;
        let mut cursor = self.heads[slot];
        while cursor != NIL {
            let block = &blocks[cursor as usize];
            if block.size >= size && block.size < best_size {
                best = cursor;
                best_size = block.size;
                if block.size == size {
                    break;
                }
            }
            cursor = block.bin_next;
        }
        (best != NIL).then_some(best)
    }

    /// The first non-empty class above `(level, sub)`.
    #[inline]
    fn next_class_above(&self, level: usize, sub: usize) -> Option<usize> {
        let above_in_level = if sub + 1 < SUB_CLASSES {
            self.class_maps[level] & (u32::MAX << (sub + 1))
        } else {
            0
        };
        if above_in_level != 0 {
            return Some(level * SUB_CLASSES + above_in_level.trailing_zeros() as usize);
        }
        let levels_above = if level + 1 < 64 {
            self.level_map & (u64::MAX << (level + 1))
        } else {
            0
        };
        if levels_above == 0 {
            return None;
        }
        let next_level = levels_above.trailing_zeros() as usize;
        let next_sub = self.class_maps[next_level].trailing_zeros() as usize;
        Some(next_level * SUB_CLASSES + next_sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_monotonic_and_exact_below_eight_kib() {
        let mut previous = (0, 0);
        let mut size = GRANULE;
        // Up to an eighth of the address space, whatever the pointer width.
        while size < usize::MAX / 8 {
            let class = class_of(size);
            assert!(class >= previous, "class of {size} went down");
            if size < SUB_CLASSES * GRANULE {
                assert_eq!(class, (0, size / GRANULE));
            }
            previous = class;
            size += size / 7 / GRANULE * GRANULE + GRANULE;
        }
        assert!(class_of(usize::MAX / GRANULE * GRANULE).0 < LEVELS);
    }
}
