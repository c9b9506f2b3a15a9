//! What a lookup reads: the index's ranges and each entry's device addresses, in atomic words
//! that stay where they are while a reader may hold them, and the sequence count that lets a
//! reader check, without taking any lock, that no writer changed them while it read.
//!
//! A seqlock: the one writer makes the count odd, changes words, and makes it even again; a
//! reader notes the count, reads, and keeps its answer only if the count was even and is
//! unchanged. Every word is an atomic (relaxed loads and stores are plain moves on x86 and
//! Arm), so a reader racing a writer reads stale or mixed words, never a data race; it checks
//! every index it derives from them, so such words cost it a retry, never a panic or a read
//! out of bounds. Nothing a reader may hold is freed before the store: the chunks' lines live
//! in segments that never move, and the top level's arrays grow by moving to larger copies,
//! each earlier copy kept (they are small: two words a chunk).
//!
//! Layout, for few cache lines per lookup: the top level holds each chunk's first start
//! (bisected) and the address of its lines; a chunk of 8 entries is one line of starts, one of
//! last bytes, and one line per device of device addresses, so a lookup for one device
//! touches three lines of its chunk, and the last two loads depend only on the first.

use alloc::boxed::Box;
use alloc::collections::TryReserveError;
use alloc::vec::Vec;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering, fence};

use crate::error::ByteRange;

/// Entries per chunk: one cache line of 64-bit starts.
pub(super) const CHUNK: usize = 8;

/// A slot holding no entry: a start above its last byte, which no entry has, so counting starts
/// at or below a key skips it whatever the key.
const EMPTY: (usize, usize) = (usize::MAX, 0);

/// One cache line of words (8 words are half a line where a word is 32 bits).
#[cfg_attr(target_pointer_width = "64", repr(align(64)))]
#[cfg_attr(not(target_pointer_width = "64"), repr(align(32)))]
#[derive(Default)]
pub(super) struct Line([AtomicUsize; CHUNK]);

/// A cell of a [`Grown`] array: zero by default, copied word by word.
pub(super) trait Cell: Default {
    /// Makes this cell hold what `other` (the writer's own word) holds.
    fn copy_from(&self, other: &Self);
}

impl Cell for AtomicUsize {
    fn copy_from(&self, other: &Self) {
        self.store(other.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

impl Cell for AtomicPtr<Line> {
    /// With release: a reader that loads the pointer with acquire sees its chunk's lines made.
    fn copy_from(&self, other: &Self) {
        self.store(other.load(Ordering::Relaxed), Ordering::Release);
    }
}

/// One copy of a [`Grown`] array, owned as a `Box<[T]>` would be, reached through a raw
/// pointer so that handing out its cells to readers asserts nothing about the box.
struct Owned<T>(NonNull<[T]>);

impl<T> Owned<T> {
    fn new(cells: Box<[T]>) -> Self {
        Self(NonNull::from(Box::leak(cells)))
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::leak` in `Owned::new` and is dropped only here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

// SAFETY: an `Owned` owns its array as a `Box<[T]>` does; sending it sends the array, whose
// cells (`Sync`) readers on other threads may hold through the `Grown` it belongs to.
unsafe impl<T: Send + Sync> Send for Owned<T> {}

/// An array of atomic cells that only grows, by moving to a larger copy; earlier copies stay
/// allocated until the array drops, since a reader may still be reading one.
pub(super) struct Grown<T> {
    /// The current copy's first cell.
    first: AtomicPtr<T>,
    /// Its length: stored after `first` when the array moves, so a reader that loads it first
    /// finds a copy at least this long.
    len: AtomicUsize,
    /// Every copy made, the current one last: the writer's alone (the lock is never contended).
    copies: spin::Mutex<Vec<Owned<T>>>,
}

impl<T: Cell> Grown<T> {
    const fn new() -> Self {
        Self {
            first: AtomicPtr::new(NonNull::dangling().as_ptr()),
            len: AtomicUsize::new(0),
            copies: spin::Mutex::new(Vec::new()),
        }
    }

    /// The current cells.
    #[inline]
    fn cells(&self) -> &[T] {
        let len = self.len.load(Ordering::Acquire);
        let first = self.first.load(Ordering::Acquire);
        // SAFETY: `first` begins a copy at least `len` cells long: a move stores the new copy's
        // pointer before its length (release), and this loads the length first (acquire), so
        // it finds that copy or a later, longer one; or the dangling start of no copy, with a
        // length of 0. Every copy lives until `self` drops, and `self` outlives the slice.
        unsafe { core::slice::from_raw_parts(first, len) }
    }

    /// Makes the array at least `len` cells long (its new cells zero): the writer's alone.
    #[inline]
    fn grow_to(&self, len: usize) -> Result<(), TryReserveError> {
        if self.len.load(Ordering::Relaxed) >= len {
            return Ok(());
        }
        self.grow(len)
    }

    /// Moves the array to a copy of at least `len` cells.
    #[cold]
    fn grow(&self, len: usize) -> Result<(), TryReserveError> {
        let current = self.cells();
        let len = len.max(current.len() * 2).max(CHUNK);
        let mut copies = self.copies.lock();
        copies.try_reserve(1)?;
        let mut cells = Vec::new();
        cells.try_reserve_exact(len)?;
        cells.resize_with(len, T::default);
        for (cell, old) in cells.iter().zip(current) {
            cell.copy_from(old);
        }
        let copy = Owned::new(cells.into_boxed_slice());
        self.first.store(copy.0.as_ptr().cast(), Ordering::Release);
        self.len.store(len, Ordering::Release);
        copies.push(copy);
        Ok(())
    }
}

/// Chunks per line group in the first segment of [`Segments`]; segment `k >= 1` holds
/// `FIRST_CHUNKS << (k - 1)` chunks, so the chunks held are a power of two times this.
const FIRST_CHUNKS: usize = 8;
/// Segments enough for every `u32` chunk number.
const SEGMENTS: usize = 33 - FIRST_CHUNKS.trailing_zeros() as usize;

/// The chunks' lines, in segments that never move once made (so that growing copies nothing
/// and leaves nothing behind), each chunk `stride` lines.
struct Segments {
    /// Segment `k`'s first line, or null before it is made.
    first: [AtomicPtr<Line>; SEGMENTS],
    /// Every segment made: the writer's alone (the lock is never contended).
    owned: spin::Mutex<Vec<Owned<Line>>>,
}

impl Segments {
    const fn new() -> Self {
        Self {
            first: [const { AtomicPtr::new(core::ptr::null_mut()) }; SEGMENTS],
            owned: spin::Mutex::new(Vec::new()),
        }
    }

    /// The segment holding chunk `chunk`, and the chunk's place in it.
    #[inline]
    fn segment_of(chunk: usize) -> (usize, usize) {
        let group = chunk / FIRST_CHUNKS;
        let segment = (usize::BITS - group.leading_zeros()) as usize;
        (segment, chunk - Self::chunks_before(segment))
    }

    /// Chunks held by the segments before segment `segment` (as many as that segment holds,
    /// from segment 1 on).
    fn chunks_before(segment: usize) -> usize {
        match segment {
            0 => 0,
            _ => FIRST_CHUNKS << (segment - 1),
        }
    }

    /// The `stride` lines of chunk `chunk`, if its segment was made.
    #[inline]
    fn chunk(&self, chunk: u32, stride: usize) -> Option<&[Line]> {
        let (segment, offset) = Self::segment_of(chunk as usize);
        let first = self.first.get(segment)?.load(Ordering::Acquire);
        if first.is_null() {
            return None;
        }
        let chunks = Self::chunks_before(segment).max(FIRST_CHUNKS);
        // SAFETY: a non-null `first` begins segment `segment`, made by `reserve` with `chunks`
        // chunks of `stride` lines (the store's stride never changes) and published with
        // release after its lines were initialised, which the acquire load above sees; it lives
        // until `self` drops, and `self` outlives the slice.
        let lines = unsafe { core::slice::from_raw_parts(first, chunks * stride) };
        lines.get(offset * stride..)?.get(..stride)
    }

    /// Makes segments until `chunks` chunks of `stride` lines have lines, every slot empty: the
    /// writer's alone.
    #[inline]
    fn reserve(&self, chunks: usize, stride: usize) -> Result<(), TryReserveError> {
        let Some(last) = chunks.checked_sub(1) else {
            return Ok(());
        };
        let made = |segment: usize| {
            self.first
                .get(segment)
                .is_some_and(|first| !first.load(Ordering::Relaxed).is_null())
        };
        if made(Self::segment_of(last).0) {
            return Ok(());
        }
        self.make(chunks, stride)
    }

    /// Makes the segments `reserve` lacks.
    #[cold]
    fn make(&self, chunks: usize, stride: usize) -> Result<(), TryReserveError> {
        let mut owned = self.owned.lock();
        while Self::chunks_before(owned.len()) < chunks && owned.len() < SEGMENTS {
            let segment = owned.len();
            let size = Self::chunks_before(segment).max(FIRST_CHUNKS) * stride;
            owned.try_reserve(1)?;
            let mut lines = Vec::new();
            lines.try_reserve_exact(size)?;
            lines.resize_with(size, Line::default);
            // Every slot empty: each chunk's starts at `usize::MAX`, its last bytes zero.
            for starts in lines.iter().step_by(stride) {
                for start in &starts.0 {
                    start.store(EMPTY.0, Ordering::Relaxed);
                }
            }
            let lines = Owned::new(lines.into_boxed_slice());
            self.first[segment].store(lines.0.as_ptr().cast(), Ordering::Release);
            owned.push(lines);
        }
        Ok(())
    }
}

/// Where a key belongs: the chunk of rank `rank`, after its first `pos` entries (those that
/// start at or below the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Located {
    pub(super) rank: usize,
    pub(super) pos: usize,
}

/// The index's words that lookups read (see the module's notes).
pub(crate) struct Store {
    /// Even while no writer is changing the words, odd while one is.
    seq: AtomicUsize,
    /// Devices each entry keeps an address for.
    devices: usize,
    /// Chunks in key order.
    ranks: AtomicUsize,
    /// `firsts[r]`: the first start of the chunk of rank `r`, ascending.
    firsts: Grown<AtomicUsize>,
    /// `order[r]`: the first line of the chunk of rank `r` (non-null values of any copy, stale
    /// ones included, point at some chunk's lines).
    order: Grown<AtomicPtr<Line>>,
    /// Chunk `c`'s lines: its starts, its last bytes, then one line of addresses per device.
    lines: Segments,
}

impl Store {
    /// An empty store for `devices` devices.
    pub(super) const fn new(devices: usize) -> Self {
        Self {
            seq: AtomicUsize::new(0),
            devices,
            ranks: AtomicUsize::new(0),
            firsts: Grown::new(),
            order: Grown::new(),
            lines: Segments::new(),
        }
    }

    /// Devices each entry keeps an address for.
    pub(crate) fn devices(&self) -> usize {
        self.devices
    }

    /// Lines per chunk: starts, last bytes, and a line per device.
    fn stride(&self) -> usize {
        2 + self.devices
    }

    /// Runs `read` on the store and keeps its answer only if no writer was changing the store
    /// meanwhile: `None` if one was (try again, or read under the table's lock).
    #[inline]
    pub(crate) fn read_unchanged<T>(&self, read: impl FnOnce(&Self) -> T) -> Option<T> {
        let before = self.seq.load(Ordering::Acquire);
        if before % 2 == 1 {
            return None;
        }
        let answer = read(self);
        // Orders the reads above before the count's second load: a word that a writer stored
        // after making the count odd makes this load see an odd or later count.
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == before).then_some(answer)
    }

    /// Where `key` belongs, and the chunk it belongs in: `None` for an empty index (or for
    /// words a writer is changing).
    #[inline]
    pub(super) fn search(&self, key: usize) -> Option<(Located, Chunk<'_>)> {
        let firsts = self.firsts.cells();
        let ranks = self.ranks.load(Ordering::Relaxed).min(firsts.len());
        if ranks == 0 {
            return None;
        }
        // The last rank whose first start is at or below the key (rank 0 if none is), by the
        // standard library's bisection, whose steps are conditional moves.
        let rank = firsts[..ranks]
            .partition_point(|first| first.load(Ordering::Relaxed) <= key)
            .saturating_sub(1);
        let first_line = self.order.cells().get(rank)?.load(Ordering::Acquire);
        if first_line.is_null() {
            return None;
        }
        // SAFETY: a non-null pointer in any copy of `order` is the first of a chunk's `stride`
        // lines (the stride never changes), in a segment that lives until `self` drops; the
        // writer stored it with release after the segment was made, and the acquire load
        // above sees that.
        let lines = unsafe { core::slice::from_raw_parts(first_line, self.stride()) };
        let [starts, lasts, ..] = lines else {
            return None;
        };
        let start = |slot: usize| starts.0[slot].load(Ordering::Relaxed);
        // How many starts are at or below the key: they ascend (empty slots, at `usize::MAX`,
        // come last), so a bisection of conditional moves in the one line finds it.
        let mut pos = 0;
        for half in [CHUNK / 2, CHUNK / 4, CHUNK / 8] {
            pos = core::hint::select_unpredictable(start(pos + half - 1) <= key, pos + half, pos);
        }
        pos += usize::from(start(pos) <= key);
        // Only the key `usize::MAX` counts empty slots. Back to its entry.
        while key == usize::MAX
            && pos > 0
            && start(pos - 1) > lasts.0[pos - 1].load(Ordering::Relaxed)
        {
            pos -= 1;
        }
        Some((Located { rank, pos }, Chunk(lines)))
    }

    /// The address device `device` (below [`Store::devices`]) uses for `range`, if every byte
    /// of it lies inside one entry.
    #[inline]
    pub(crate) fn find(&self, range: ByteRange, device: usize) -> Option<usize> {
        let (at, Chunk(lines)) = self.search(range.start)?;
        let slot = at.pos.checked_sub(1)?;
        let [starts, lasts, addresses @ ..] = lines else {
            return None;
        };
        if lasts.0[slot].load(Ordering::Relaxed) < range.last() {
            return None;
        }
        let start = starts.0[slot].load(Ordering::Relaxed);
        let address = addresses.get(device)?.0[slot].load(Ordering::Relaxed);
        Some(address.wrapping_add(range.start.wrapping_sub(start)))
    }

    /// Chunks in key order (the writer's view).
    pub(super) fn ranks(&self) -> usize {
        self.ranks.load(Ordering::Relaxed)
    }

    /// The first start of the chunk of rank `rank`, and whether rank `rank` is chunk `chunk`
    /// (the writer's view; the rank exists).
    #[cfg(test)]
    pub(super) fn rank(&self, rank: usize, chunk: u32) -> (usize, bool) {
        let first_line = self.order.cells()[rank].load(Ordering::Relaxed);
        (
            self.firsts.cells()[rank].load(Ordering::Relaxed),
            core::ptr::eq(first_line, self.chunk(chunk).0.as_ptr()),
        )
    }

    /// Chunk `chunk`, which the writer made (the writer's view, or a reader's under the
    /// table's lock).
    pub(super) fn chunk(&self, chunk: u32) -> Chunk<'_> {
        Chunk(
            self.lines
                .chunk(chunk, self.stride())
                .expect("the writer's chunks have lines"),
        )
    }

    /// Makes room for `ranks` chunks in key order and `chunks` chunks in all, so that the
    /// writes that follow cannot fail. Changes nothing a reader sees.
    pub(super) fn reserve(&self, ranks: usize, chunks: usize) -> Result<(), TryReserveError> {
        self.firsts.grow_to(ranks)?;
        self.order.grow_to(ranks)?;
        self.lines.reserve(chunks, self.stride())
    }

    /// Starts a change: readers that overlap it retry. The writer's alone.
    pub(super) fn write(&self) -> Write<'_> {
        let before = self.seq.load(Ordering::Relaxed);
        self.seq.store(before.wrapping_add(1), Ordering::Relaxed);
        // Orders the odd count before every word stored during the change.
        fence(Ordering::Release);
        Write {
            store: self,
            before,
        }
    }
}

/// One chunk's lines: its starts, its last bytes, then one line of addresses per device.
#[derive(Clone, Copy)]
pub(super) struct Chunk<'a>(&'a [Line]);

impl<'a> Chunk<'a> {
    /// The entry in slot `pos`: its start and last byte (a start above the last byte: none).
    pub(super) fn slot(self, pos: usize) -> (usize, usize) {
        (
            self.0[0].0[pos].load(Ordering::Relaxed),
            self.0[1].0[pos].load(Ordering::Relaxed),
        )
    }

    /// The addresses each device uses for the start of the entry in slot `pos`.
    pub(super) fn addresses(self, pos: usize) -> DeviceAddresses<'a> {
        DeviceAddresses {
            lines: &self.0[2..],
            slot: pos,
        }
    }
}

/// The address each device uses for one entry's start, by device index: read from the table,
/// which cannot change while this is borrowed.
#[derive(Clone, Copy)]
pub struct DeviceAddresses<'a> {
    /// The entry's chunk's address lines, one per device.
    lines: &'a [Line],
    /// The entry's slot in them.
    slot: usize,
}

impl DeviceAddresses<'_> {
    /// How many devices (the table's device count).
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether there are none (never, for a table's entry).
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The address device `device` uses, if the table has that device.
    pub fn get(&self, device: usize) -> Option<usize> {
        Some(self.lines.get(device)?.0[self.slot].load(Ordering::Relaxed))
    }

    /// Every device's address, in device order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.lines
            .iter()
            .map(|line| line.0[self.slot].load(Ordering::Relaxed))
    }

    /// Every device's address, in device order, in a vector.
    pub fn to_vec(&self) -> Vec<usize> {
        self.iter().collect()
    }
}

impl PartialEq for DeviceAddresses<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for DeviceAddresses<'_> {}

impl core::fmt::Debug for DeviceAddresses<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A change to a [`Store`] in progress: readers that overlap it retry. Its methods need room
/// reserved with [`Store::reserve`]; the change ends when this drops.
pub(super) struct Write<'a> {
    store: &'a Store,
    before: usize,
}

impl Write<'_> {
    /// The store being changed, for the writer's reads.
    pub(super) fn store(&self) -> &Store {
        self.store
    }

    /// Puts the entry `range` with device addresses `device_ptrs` in slot `pos` of `chunk`.
    pub(super) fn set(
        &self,
        chunk: Chunk<'_>,
        pos: usize,
        range: ByteRange,
        device_ptrs: &[usize],
    ) {
        let lines = chunk.0;
        lines[0].0[pos].store(range.start, Ordering::Relaxed);
        lines[1].0[pos].store(range.last(), Ordering::Relaxed);
        for (line, &address) in lines[2..].iter().zip(device_ptrs) {
            line.0[pos].store(address, Ordering::Relaxed);
        }
    }

    /// Copies slot `from.1` of chunk `from.0` into slot `to.1` of chunk `to.0`.
    pub(super) fn copy(&self, from: (Chunk<'_>, usize), to: (Chunk<'_>, usize)) {
        for (line, from_line) in to.0.0.iter().zip(from.0.0) {
            line.0[to.1].copy_from(&from_line.0[from.1]);
        }
    }

    /// Empties slot `pos` of `chunk`.
    pub(super) fn clear(&self, chunk: Chunk<'_>, pos: usize) {
        chunk.0[0].0[pos].store(EMPTY.0, Ordering::Relaxed);
        chunk.0[1].0[pos].store(EMPTY.1, Ordering::Relaxed);
    }

    /// Inserts chunk `chunk`, whose first start is `first`, at rank `rank`.
    pub(super) fn insert_rank(&self, rank: usize, first: usize, chunk: Chunk<'_>) {
        let ranks = self.store.ranks();
        let (firsts, order) = (self.store.firsts.cells(), self.store.order.cells());
        for r in (rank..ranks).rev() {
            firsts[r + 1].copy_from(&firsts[r]);
            order[r + 1].copy_from(&order[r]);
        }
        firsts[rank].store(first, Ordering::Relaxed);
        let first_line = chunk.0.as_ptr().cast_mut();
        // Release: see `Cell for AtomicPtr<Line>`.
        order[rank].store(first_line, Ordering::Release);
        self.store.ranks.store(ranks + 1, Ordering::Relaxed);
    }

    /// Removes rank `rank` from the key order.
    pub(super) fn remove_rank(&self, rank: usize) {
        let ranks = self.store.ranks();
        let (firsts, order) = (self.store.firsts.cells(), self.store.order.cells());
        for r in rank..ranks - 1 {
            firsts[r].copy_from(&firsts[r + 1]);
            order[r].copy_from(&order[r + 1]);
        }
        self.store.ranks.store(ranks - 1, Ordering::Relaxed);
    }

    /// Sets the first start of the chunk of rank `rank`.
    pub(super) fn set_first(&self, rank: usize, first: usize) {
        self.store.firsts.cells()[rank].store(first, Ordering::Relaxed);
    }
}

impl Drop for Write<'_> {
    fn drop(&mut self) {
        // Releases every word stored during the change to readers that see the even count.
        self.store
            .seq
            .store(self.before.wrapping_add(2), Ordering::Release);
    }
}
