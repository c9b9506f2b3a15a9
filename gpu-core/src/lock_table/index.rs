//! The ordered index behind the lock table: disjoint byte ranges kept sorted by start in
//! chunks of one cache line of starts, each range with its entry id and device addresses.
//!
//! A range is found by a bisection over the chunks' first starts, then a branch-free count
//! inside one chunk. The words lookups read live in the [`Store`], which readers may read
//! without the table's lock; what only writers need (each chunk's entry count and ids, the free
//! chunks) lives here.
//!
//! A flat sorted array searches fast but inserts in O(n) (a memmove of the whole array); a
//! B-tree chases a pointer per level. Two levels keep both costs small: an insert shifts at
//! most one chunk, and only a chunk split shifts the top arrays (n / 8 words, once per split).
//! Growth is reserved before the caller's driver call, so that recording an entry after a
//! successful pin can never fail.

use alloc::collections::TryReserveError;
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::store::{CHUNK, Chunk, DeviceAddresses, Located, Store, Write};
use crate::error::ByteRange;

/// A chunk that shrinks to this size is merged into a neighbour when both fit in half a chunk.
const MERGE_AT: usize = CHUNK / 4;

/// Where an entry sits: chunk rank in key order, and position inside that chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    rank: usize,
    pos: usize,
}

/// An entry found by [`RangeIndex::containing`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hit {
    /// Where the entry sits.
    pub(crate) slot: Slot,
    /// The entry's first byte.
    pub(crate) start: usize,
    /// The entry's last byte.
    pub(crate) last: usize,
    /// The entry's id.
    pub(crate) id: u32,
}

impl Hit {
    /// The entry's range.
    pub(crate) fn range(&self) -> ByteRange {
        ByteRange {
            start: self.start,
            len: self.last - self.start + 1,
        }
    }
}

/// Where a key belongs: the chunk of rank `rank`, after its first `pos` entries (those that
/// start at or below the key). The entry just below the key, if any, is `pos - 1` there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    rank: usize,
    pos: usize,
}

/// What the index holds where a range would go.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Placement {
    /// An entry contains the whole range.
    Inside(Hit),
    /// The range shares bytes with this entry (the lowest such) without lying inside it.
    Overlaps(Slot),
    /// No entry shares a byte with the range; it would be inserted here (`None`: empty index).
    Free(Option<Position>),
}

/// What only writers read of a chunk: how many entries it holds, and their ids.
#[derive(Clone, Copy)]
struct ChunkIds {
    len: usize,
    ids: [u32; CHUNK],
}

impl ChunkIds {
    const EMPTY: ChunkIds = ChunkIds {
        len: 0,
        ids: [0; CHUNK],
    };
}

/// Disjoint ranges sorted by start, each carrying a `u32` entry id and its device addresses.
pub(crate) struct RangeIndex {
    /// The words lookups read, shared with the thread-safe table's readers.
    store: Arc<Store>,
    /// What only writers read.
    chunks: Chunks,
}

/// The writers' part of the index: the chunks in key order by number, each chunk's entries
/// and ids, and the free chunks.
struct Chunks {
    /// `order[r]`: the number of the chunk of rank `r` (the store holds its lines' address).
    order: Vec<u32>,
    /// `ids[c]`: chunk `c`'s entry count and ids.
    ids: Vec<ChunkIds>,
    /// Numbers of chunks not in key order; its capacity always covers every chunk.
    free: Vec<u32>,
}

impl RangeIndex {
    /// An empty index whose entries keep an address for each of `devices` devices.
    pub(crate) fn new(devices: usize) -> Self {
        Self {
            store: Arc::new(Store::new(devices)),
            chunks: Chunks {
                order: Vec::new(),
                ids: Vec::new(),
                free: Vec::new(),
            },
        }
    }

    /// The words lookups read.
    #[inline]
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    fn chunk(&self, rank: usize) -> u32 {
        self.chunks.order[rank]
    }

    fn len(&self, rank: usize) -> usize {
        self.chunks.ids[self.chunk(rank) as usize].len
    }

    /// Where `key` belongs (tests; the table takes it from [`RangeIndex::place`]).
    #[cfg(test)]
    fn position(&self, key: usize) -> Option<Position> {
        self.search(key).map(|(position, _)| position)
    }

    /// Where `key` belongs, or `None` for an empty index: one bisection over the chunks' first
    /// starts, one inside a chunk; and the chunk it belongs in.
    #[inline]
    fn search(&self, key: usize) -> Option<(Position, Chunk<'_>)> {
        self.store
            .search(key)
            .map(|(Located { rank, pos }, chunk)| (Position { rank, pos }, chunk))
    }

    /// The entry just below a position in `chunk` (the position's chunk), as a hit.
    #[inline]
    fn below(&self, position: Position, chunk: Chunk<'_>) -> Option<Hit> {
        let pos = position.pos.checked_sub(1)?;
        let (start, last) = chunk.slot(pos);
        Some(Hit {
            slot: Slot {
                rank: position.rank,
                pos,
            },
            start,
            last,
            id: self.chunks.ids[self.chunk(position.rank) as usize].ids[pos],
        })
    }

    /// The entry that contains every byte of `range`, if any.
    #[inline]
    pub(crate) fn containing(&self, range: ByteRange) -> Option<Hit> {
        let (position, chunk) = self.search(range.start)?;
        self.below(position, chunk)
            .filter(|hit| hit.last >= range.last())
    }

    /// Whether `range` lies inside an entry, overlaps one, or is free (and where it would go).
    pub(crate) fn place(&self, range: ByteRange) -> Placement {
        let Some((position, chunk)) = self.search(range.start) else {
            return Placement::Free(None);
        };
        if let Some(hit) = self.below(position, chunk) {
            if hit.last >= range.last() {
                return Placement::Inside(hit);
            }
            if hit.last >= range.start {
                return Placement::Overlaps(hit.slot);
            }
        }
        let after = if position.pos < self.len(position.rank) {
            Some((position.rank, position.pos, chunk))
        } else {
            let next = position.rank + 1;
            (next < self.chunks.order.len()).then(|| (next, 0, self.store.chunk(self.chunk(next))))
        };
        match after {
            Some((rank, pos, chunk)) if chunk.slot(pos).0 <= range.last() => {
                Placement::Overlaps(Slot { rank, pos })
            }
            _ => Placement::Free(Some(position)),
        }
    }

    /// The entry right after `slot` in key order.
    pub(crate) fn next(&self, slot: Slot) -> Option<Slot> {
        if slot.pos + 1 < self.len(slot.rank) {
            Some(Slot {
                rank: slot.rank,
                pos: slot.pos + 1,
            })
        } else if slot.rank + 1 < self.chunks.order.len() {
            Some(Slot {
                rank: slot.rank + 1,
                pos: 0,
            })
        } else {
            None
        }
    }

    /// The first entry in key order.
    pub(crate) fn first(&self) -> Option<Slot> {
        (!self.chunks.order.is_empty()).then_some(Slot { rank: 0, pos: 0 })
    }

    /// The range and id stored at `slot`.
    pub(crate) fn get(&self, slot: Slot) -> (ByteRange, u32) {
        let chunk = self.chunk(slot.rank);
        let (start, last) = self.store.chunk(chunk).slot(slot.pos);
        // `last - start + 1` cannot overflow except for a range covering all of memory,
        // which `ByteRange` cannot express and the table never accepts.
        (
            ByteRange {
                start,
                len: last - start + 1,
            },
            self.chunks.ids[chunk as usize].ids[slot.pos],
        )
    }

    /// The device addresses of the entry at `slot`.
    pub(crate) fn addresses(&self, slot: Slot) -> DeviceAddresses<'_> {
        self.store.chunk(self.chunk(slot.rank)).addresses(slot.pos)
    }

    /// Makes sure an `insert_at(position, ..)` can run without allocating: room for one more
    /// chunk only where it may take one (an empty index, or a full chunk), so that ranges
    /// locked in address order reserve no chunk they never use.
    pub(crate) fn reserve_for(
        &mut self,
        position: Option<Position>,
    ) -> Result<(), TryReserveError> {
        if position.is_some_and(|position| self.len(position.rank) < CHUNK) {
            return Ok(());
        }
        let Chunks { order, ids, free } = &mut self.chunks;
        order.try_reserve(1)?;
        let chunks = if free.is_empty() {
            ids.try_reserve(1)?;
            // `free` is empty: room for every chunk, so that `remove` never allocates.
            free.try_reserve(ids.len() + 1)?;
            ids.len() + 1
        } else {
            ids.len()
        };
        self.store.reserve(order.len() + 1, chunks)
    }

    /// Inserts `range` (which overlaps no entry) with `id` and `device_ptrs` at `position`,
    /// which [`RangeIndex::place`] gave for it with no change to the index since. Needs a prior `reserve_for(position)`.
    ///
    /// A key that lands after every entry of a full chunk goes to the front of the next
    /// chunk if it has room, else into a chunk of its own, so that ranges locked in address
    /// order leave full chunks behind instead of half-full ones.
    pub(crate) fn insert_at(
        &mut self,
        position: Option<Position>,
        range: ByteRange,
        id: u32,
        device_ptrs: &[usize],
    ) {
        let write = self.store.write();
        self.chunks
            .insert(&write, position, (range, id, device_ptrs));
    }

    /// Removes the entry at `slot`. Never allocates.
    pub(crate) fn remove(&mut self, slot: Slot) {
        let write = self.store.write();
        self.chunks.remove(&write, slot);
    }

    /// Checks the structure's invariants (tests only).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let mut previous_last: Option<usize> = None;
        let ranks = self.chunks.order.len();
        assert_eq!(self.store.ranks(), ranks);
        let mut in_order = Vec::new();
        for rank in 0..ranks {
            let chunk = self.chunk(rank);
            in_order.push(chunk);
            let len = self.len(rank);
            assert!(len > 0, "empty chunk in order");
            let (first, is_chunk) = self.store.rank(rank, chunk);
            assert!(is_chunk, "the store's order differs");
            let lines = self.store.chunk(chunk);
            assert_eq!(lines.slot(0).0, first);
            for pos in 0..CHUNK {
                let (start, last) = lines.slot(pos);
                if pos >= len {
                    assert!(start > last, "a slot past the chunk's entries is not empty");
                    continue;
                }
                assert!(start <= last);
                if let Some(prev) = previous_last {
                    assert!(prev < start, "ranges overlap or are out of order");
                }
                previous_last = Some(last);
            }
        }
        in_order.sort_unstable();
        in_order.dedup();
        assert_eq!(in_order.len(), ranks, "a chunk holds two ranks");
        for &chunk in &self.chunks.free {
            let lines = self.store.chunk(chunk);
            assert!(
                (0..CHUNK).all(|pos| lines.slot(pos).0 > lines.slot(pos).1),
                "a free chunk holds an entry"
            );
        }
        assert_eq!(ranks + self.chunks.free.len(), self.chunks.ids.len());
    }
}

impl Chunks {
    fn len(&self, rank: usize) -> usize {
        self.ids[self.order[rank] as usize].len
    }

    /// Puts chunk `chunk`, whose first start is `first`, at rank `rank`.
    fn insert_rank(&mut self, write: &Write<'_>, rank: usize, first: usize, chunk: u32) {
        self.order.insert(rank, chunk);
        write.insert_rank(rank, first, write.store().chunk(chunk));
    }

    /// Takes rank `rank` out of the key order.
    fn remove_rank(&mut self, write: &Write<'_>, rank: usize) {
        self.order.remove(rank);
        write.remove_rank(rank);
    }

    /// Takes a chunk number from the free list, or a new one (within reserved capacity): either
    /// way a chunk whose slots are all empty.
    fn new_chunk(&mut self) -> u32 {
        let chunk = match self.free.pop() {
            Some(chunk) => chunk,
            None => {
                debug_assert!(self.ids.len() < self.ids.capacity());
                self.ids.push(ChunkIds::EMPTY);
                (self.ids.len() - 1) as u32
            }
        };
        self.ids[chunk as usize] = ChunkIds::EMPTY;
        chunk
    }

    /// See [`RangeIndex::insert_at`].
    fn insert(
        &mut self,
        write: &Write<'_>,
        position: Option<Position>,
        entry: (ByteRange, u32, &[usize]),
    ) {
        let Some(Position { mut rank, mut pos }) = position else {
            return self.insert_chunk(write, 0, entry);
        };
        let ranks = self.order.len();
        if self.len(rank) == CHUNK {
            let next = rank + 1;
            if pos == CHUNK && next < ranks && self.len(next) < CHUNK {
                (rank, pos) = (next, 0);
            } else if pos == CHUNK {
                return self.insert_chunk(write, next, entry);
            } else if pos == 0 {
                return self.insert_chunk(write, rank, entry);
            } else {
                self.split(write, rank);
                if pos >= CHUNK / 2 {
                    (rank, pos) = (next, pos - CHUNK / 2);
                }
            }
        }
        let (range, id, device_ptrs) = entry;
        let chunk = self.order[rank];
        let lines = write.store().chunk(chunk);
        let ids = &mut self.ids[chunk as usize];
        for i in (pos..ids.len).rev() {
            write.copy((lines, i), (lines, i + 1));
        }
        ids.ids.copy_within(pos..ids.len, pos + 1);
        ids.ids[pos] = id;
        ids.len += 1;
        write.set(lines, pos, range, device_ptrs);
        if pos == 0 {
            write.set_first(rank, range.start);
        }
    }

    /// A new chunk of rank `rank` holding one entry.
    fn insert_chunk(
        &mut self,
        write: &Write<'_>,
        rank: usize,
        (range, id, device_ptrs): (ByteRange, u32, &[usize]),
    ) {
        let chunk = self.new_chunk();
        write.set(write.store().chunk(chunk), 0, range, device_ptrs);
        let ids = &mut self.ids[chunk as usize];
        ids.ids[0] = id;
        ids.len = 1;
        self.insert_rank(write, rank, range.start, chunk);
    }

    /// Moves the entries `from..` of chunk `source` to the end of chunk `target`, leaving
    /// their slots in `source` empty.
    fn move_tail(&mut self, write: &Write<'_>, source: u32, from: usize, target: u32) {
        let (len, at) = (self.ids[source as usize].len, self.ids[target as usize].len);
        let (source_lines, target_lines) =
            (write.store().chunk(source), write.store().chunk(target));
        for (i, to) in (from..len).zip(at..) {
            write.copy((source_lines, i), (target_lines, to));
            write.clear(source_lines, i);
            self.ids[target as usize].ids[to] = self.ids[source as usize].ids[i];
        }
        self.ids[target as usize].len = at + (len - from);
        self.ids[source as usize].len = from;
    }

    /// Splits the full chunk of rank `rank` into two halves.
    fn split(&mut self, write: &Write<'_>, rank: usize) {
        let lower = self.order[rank];
        let upper = self.new_chunk();
        self.move_tail(write, lower, CHUNK / 2, upper);
        let first = write.store().chunk(upper).slot(0).0;
        self.insert_rank(write, rank + 1, first, upper);
    }

    /// See [`RangeIndex::remove`].
    fn remove(&mut self, write: &Write<'_>, slot: Slot) {
        let chunk = self.order[slot.rank];
        let lines = write.store().chunk(chunk);
        let ids = &mut self.ids[chunk as usize];
        let len = ids.len;
        for i in slot.pos + 1..len {
            write.copy((lines, i), (lines, i - 1));
        }
        write.clear(lines, len - 1);
        ids.ids.copy_within(slot.pos + 1..len, slot.pos);
        ids.len = len - 1;
        if len == 1 {
            self.remove_rank(write, slot.rank);
            self.free.push(chunk);
            return;
        }
        if slot.pos == 0 {
            write.set_first(slot.rank, lines.slot(0).0);
        }
        if len - 1 <= MERGE_AT {
            self.merge_small(write, slot.rank);
        }
    }

    /// Merges the small chunk of rank `rank` with a neighbour when both fit in half a chunk.
    fn merge_small(&mut self, write: &Write<'_>, rank: usize) {
        let len = self.len(rank);
        let fits = |other: usize| self.len(other) + len <= CHUNK / 2;
        let lower_rank = if rank + 1 < self.order.len() && fits(rank + 1) {
            rank
        } else if rank > 0 && fits(rank - 1) {
            rank - 1
        } else {
            return;
        };
        let (lower, upper) = (self.order[lower_rank], self.order[lower_rank + 1]);
        self.move_tail(write, upper, 0, lower);
        self.remove_rank(write, lower_rank + 1);
        self.free.push(upper);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    fn range(start: usize, len: usize) -> ByteRange {
        ByteRange::new(start, len).unwrap()
    }

    fn insert(index: &mut RangeIndex, r: ByteRange, id: u32) {
        let position = index.position(r.start);
        index.reserve_for(position).unwrap();
        index.insert_at(position, r, id, &[r.start]);
        index.check_invariants();
    }

    /// Inserts and removes many ranges in a scrambled order, checking every lookup against a
    /// BTreeMap after each step, so splits, merges and chunk reuse all happen.
    #[test]
    fn agrees_with_btreemap_through_splits_and_merges() {
        let mut index = RangeIndex::new(1);
        let mut reference = BTreeMap::new();
        let keys: Vec<usize> = (0..2000usize).map(|i| (i * 7919) % 2000).collect();
        for (id, &k) in keys.iter().enumerate() {
            insert(&mut index, range(k * 16, 8), id as u32);
            reference.insert(k * 16, id as u32);
        }
        assert!(index.store.ranks() > 2000 / CHUNK, "splits happened");
        for &k in keys.iter().step_by(3) {
            let hit = index.containing(range(k * 16 + 3, 2)).unwrap();
            assert_eq!(Some(&hit.id), reference.get(&(k * 16)));
            assert_eq!(hit.start, k * 16);
            index.remove(hit.slot);
            reference.remove(&(k * 16));
            index.check_invariants();
        }
        for probe in 0..2000 * 16 {
            let expected = reference
                .range(..=probe)
                .next_back()
                .filter(|(start, _)| probe < *start + 8)
                .map(|(_, id)| *id);
            let found = index.containing(range(probe, 1)).map(|hit| hit.id);
            assert_eq!(found, expected, "probe {probe}");
        }
        // Drain completely: every chunk goes back to the free list.
        while let Some(slot) = index.first() {
            index.remove(slot);
            index.check_invariants();
        }
        assert_eq!(index.store.ranks(), 0);
        assert_eq!(index.chunks.free.len(), index.chunks.ids.len());
    }

    #[test]
    fn ranges_locked_in_address_order_fill_whole_chunks() {
        let mut index = RangeIndex::new(1);
        for i in 0..10 * CHUNK {
            insert(&mut index, range(4096 + i * 16, 8), i as u32);
        }
        assert_eq!(
            index.store.ranks(),
            10,
            "ten full chunks, not twenty half-full ones"
        );
        for i in (0..4 * CHUNK).rev() {
            insert(&mut index, range(i * 16, 8), i as u32);
        }
        assert_eq!(
            index.store.ranks(),
            14,
            "keys locked in descending order fill chunks too"
        );
    }

    #[test]
    fn insert_before_all_chunks_updates_first() {
        let mut index = RangeIndex::new(1);
        for i in (1..200usize).rev() {
            insert(&mut index, range(i * 10, 5), i as u32);
        }
        insert(&mut index, range(0, 5), 0);
        assert_eq!(index.get(index.first().unwrap()).0, range(0, 5));
    }

    #[test]
    fn place_finds_an_entry_starting_inside_the_range() {
        let mut index = RangeIndex::new(1);
        insert(&mut index, range(100, 10), 1);
        let Placement::Overlaps(slot) = index.place(range(90, 20)) else {
            panic!()
        };
        assert_eq!(index.get(slot).0, range(100, 10));
        assert!(matches!(
            index.place(range(90, 10)),
            Placement::Free(Some(_))
        ));
        assert!(matches!(
            index.place(range(110, 10)),
            Placement::Free(Some(_))
        ));
        assert!(
            matches!(index.place(range(102, 3)), Placement::Inside(hit) if hit.range() == range(100, 10))
        );
    }
}
