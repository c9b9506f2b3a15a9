//! The lock interval table: which host byte ranges are page-locked for DMA, with nested locks
//! counted in software and each entry's device-accessible address cached per device.
//!
//! One table serves a whole backend (CUDA registration is process-wide), in front of
//! cuMemHostRegister / hipHostRegister / hsa_amd_memory_lock. The table decides; the driver,
//! behind [`PinDriver`], only pins, unpins and answers "who pinned this?".
//!
//! Rules (docs/lock-table.md), all enforced before any driver call:
//! - entries never overlap; adjacent entries stay separate;
//! - locking a range inside an entry counts one more lock on it, with no driver call;
//! - each lock has an owner ([`LockOwner`]): a raw lock, or one a guard holds (the runtime's
//!   `LockedHost`, C's `gpurt_host_register`); an unlock releases only a lock of its own kind,
//!   so a raw unlock never removes a pin a guard relies on, and each entry counts its locks
//!   by owner ([`LockCounts`]);
//! - a range overlapping an entry without lying inside it is an error naming that entry;
//! - unlock takes any pointer inside an entry (or only its start, with [`LockTable::unlock_exact`]);
//!   the last unlock unpins with the entry's exact start;
//! - memory pinned by someone else is recorded as `external`, counted, and never unpinned here;
//! - queries take `(ptr, len)` and hit only when every byte lies inside one entry;
//! - every failed call leaves the table exactly as it was, and no path leaks a pin.
//!
//! [`LockTable::lock`], [`LockTable::unlock`] and [`LockTable::unlock_exact`] take and release
//! raw locks; [`LockTable::lock_as`] and [`LockTable::unlock_as`] name the owner.

mod index;
#[cfg(feature = "model")]
pub mod model;
mod shared;

use alloc::vec;
use alloc::vec::Vec;

use crate::error::{ByteRange, Error, Result};
use crate::id::DeviceId;
use index::{Placement, Position, RangeIndex, Slot};

pub use crate::id::{LockCounts, LockOwner};
pub use shared::SharedLockTable;

/// What the lock table needs from a driver. Implemented by each backend (and by test fakes).
///
/// Every method either succeeds completely or changes nothing in the driver.
pub trait PinDriver {
    /// Pins `range` for every device of the backend (CUDA: cuMemHostRegister with PORTABLE;
    /// HSA: hsa_amd_memory_lock to all GPU agents) and writes into `device_ptrs[d]` the
    /// address device `d` uses for `range.start`. On error nothing stays pinned.
    fn pin(&mut self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()>;

    /// Unpins the range that a successful [`PinDriver::pin`] started at `start`.
    fn unpin(&mut self, start: usize) -> Result<()>;

    /// If `ptr` lies in host memory pinned by someone other than this table, returns the
    /// extent of that pinned allocation and writes into `device_ptrs[d]` the address device
    /// `d` uses for the extent's start (CUDA: cuPointerGetAttribute RANGE_START_ADDR and
    /// RANGE_SIZE; HSA: hsa_amd_pointer_info). Returns `None` for unpinned memory.
    fn pinned_extent(&mut self, ptr: usize, device_ptrs: &mut [usize])
    -> Result<Option<ByteRange>>;
}

/// How a successful lock was satisfied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockOutcome {
    /// The driver pinned a new entry.
    Pinned,
    /// The range lay inside an entry, whose count went up; no driver call.
    Nested,
    /// The memory was already pinned by someone else; a new external entry records it.
    External,
}

/// The result of a successful [`LockTable::lock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locked {
    /// The entry that now holds the lock (for a nested or external lock, larger than asked).
    pub entry: ByteRange,
    /// How the lock was satisfied.
    pub outcome: LockOutcome,
    /// The entry's locks after this lock, by owner.
    pub locks: LockCounts,
}

/// The result of a successful [`LockTable::unlock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unlocked {
    /// The entry the pointer named.
    pub entry: ByteRange,
    /// Locks left on the entry, by owner; with none the entry is gone (and, unless external,
    /// unpinned).
    pub remaining: LockCounts,
    /// Whether the entry had been pinned by someone else.
    pub external: bool,
}

/// Counters of a lock table. Plain numbers, cheap to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Entries in the table.
    pub entries: usize,
    /// Of those, entries pinned by someone else.
    pub external_entries: usize,
    /// Bytes covered by all entries.
    pub bytes_locked: usize,
    /// Locks outstanding on all entries, by owner.
    pub held: LockCounts,
    /// Successful locks that needed no driver call (nested in an entry).
    pub nested_locks: u64,
    /// Driver pin calls made (successful or not).
    pub driver_pins: u64,
    /// Driver unpin calls made (successful or not).
    pub driver_unpins: u64,
    /// Driver "who pinned this" queries made (successful or not).
    pub driver_queries: u64,
}

/// One entry as seen by [`LockTable::entries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryView<'a> {
    /// The pinned range.
    pub range: ByteRange,
    /// Outstanding locks on it, by owner.
    pub locks: LockCounts,
    /// Whether someone else pinned it (the table never unpins it).
    pub external: bool,
    /// The address each device uses for `range.start`, indexed by device.
    pub device_ptrs: &'a [usize],
}

/// Per-entry state that the index does not hold.
#[derive(Clone, Copy, Debug)]
struct EntryState {
    locks: LockCounts,
    external: bool,
}

/// The first phase of a lock: done already, or a new range that needs the driver.
pub(crate) enum LockStart {
    Done(Locked),
    NeedsDriver(NewRange),
}

/// A range no entry touches, and where the index will put it.
#[derive(Clone, Copy)]
pub(crate) struct NewRange {
    pub(crate) range: ByteRange,
    position: Option<Position>,
    owner: LockOwner,
}

/// What the driver said about a new range (phase two of a lock).
pub(crate) struct Pinned {
    extent: ByteRange,
    external: bool,
}

/// The entry that one step of [`LockTable::release_all`] removes.
#[derive(Clone, Copy)]
pub(crate) struct ToRelease {
    slot: Slot,
    id: u32,
    pub(crate) entry: ByteRange,
    pub(crate) needs_unpin: bool,
}

/// The lock interval table of one backend: single-threaded form (see [`SharedLockTable`] for
/// many readers and serialised writers).
pub struct LockTable {
    index: RangeIndex,
    entries: Vec<EntryState>,
    /// `device_ptrs[id * device_count + d]`: device `d`'s address for entry `id`'s start.
    device_ptrs: Vec<usize>,
    free_ids: Vec<u32>,
    device_count: usize,
    stats: LockStats,
    /// Scratch for the driver to write device addresses into before an entry exists.
    scratch: Vec<usize>,
}

impl LockTable {
    /// An empty table for a backend with `device_count` devices (at least one).
    pub fn new(device_count: usize) -> Result<Self> {
        if device_count == 0 {
            return Err(Error::ZeroSize {
                what: "lock table device count",
            });
        }
        Ok(Self {
            index: RangeIndex::new(),
            entries: Vec::new(),
            device_ptrs: Vec::new(),
            free_ids: Vec::new(),
            device_count,
            stats: LockStats::default(),
            scratch: vec![0; device_count],
        })
    }

    /// Number of devices each entry keeps an address for.
    pub fn device_count(&self) -> usize {
        self.device_count
    }

    /// Takes a raw lock on `[ptr, ptr + len)` for every device: counts a nested lock, records
    /// memory pinned elsewhere, or pins through `driver`. Errors leave the table unchanged.
    pub fn lock<D: PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        ptr: usize,
        len: usize,
    ) -> Result<Locked> {
        self.lock_as(driver, ptr, len, LockOwner::Raw)
    }

    /// Like [`LockTable::lock`], for `owner`: a [`LockOwner::Guard`] lock is released only by
    /// [`LockTable::unlock_as`] with that owner.
    pub fn lock_as<D: PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        ptr: usize,
        len: usize,
        owner: LockOwner,
    ) -> Result<Locked> {
        match self.start_lock(ptr, len, owner)? {
            LockStart::Done(locked) => Ok(locked),
            LockStart::NeedsDriver(new) => {
                let mut scratch = core::mem::take(&mut self.scratch);
                let pinned = pin_new(driver, &mut self.stats, new.range, &mut scratch);
                let result = pinned.and_then(|pinned| self.finish_lock(new, pinned, &scratch));
                self.scratch = scratch;
                result
            }
        }
    }

    /// Releases one raw lock on the entry containing `ptr`; the last lock unpins the entry
    /// with its exact start (never for external entries). An entry without a raw lock (only
    /// guards hold it) is [`Error::PinOwned`]. Errors leave the table unchanged.
    pub fn unlock<D: PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        ptr: usize,
    ) -> Result<Unlocked> {
        self.unlock_inner(driver, ptr, false, LockOwner::Raw)
    }

    /// Like [`LockTable::unlock`], but `ptr` must be the exact start of an entry, as the
    /// drivers themselves require.
    pub fn unlock_exact<D: PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        ptr: usize,
    ) -> Result<Unlocked> {
        self.unlock_inner(driver, ptr, true, LockOwner::Raw)
    }

    /// Like [`LockTable::unlock`], releasing one of `owner`'s locks: [`Error::PinOwned`] when
    /// the entry holds none.
    pub fn unlock_as<D: PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        ptr: usize,
        owner: LockOwner,
    ) -> Result<Unlocked> {
        self.unlock_inner(driver, ptr, false, owner)
    }

    fn unlock_inner<D: PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        ptr: usize,
        exact: bool,
        owner: LockOwner,
    ) -> Result<Unlocked> {
        let (slot, id, entry) = self.entry_for_unlock(ptr, exact, owner)?;
        if self.needs_unpin(id) {
            self.stats.driver_unpins += 1;
            driver.unpin(entry.start)?;
        }
        Ok(self.release(slot, id, entry, owner))
    }

    /// Unpins every entry this table pinned, whatever its count, and forgets external ones:
    /// the shutdown path, so that no pin outlives the table. Returns how many entries were
    /// unpinned. On a driver error the entries not yet unpinned stay, consistent, and the call
    /// may be repeated.
    pub fn release_all<D: PinDriver + ?Sized>(&mut self, driver: &mut D) -> Result<usize> {
        let mut unpinned = 0;
        while let Some(first) = self.first_to_release() {
            if first.needs_unpin {
                self.stats.driver_unpins += 1;
                driver.unpin(first.entry.start)?;
                unpinned += 1;
            }
            self.forget(first);
        }
        Ok(unpinned)
    }

    /// The address `device` uses for `[ptr, ptr + len)`, if every byte lies inside one entry;
    /// `None` on a miss. Errors only for an empty or overflowing range or an unknown device.
    #[inline]
    pub fn lookup(&self, ptr: usize, len: usize, device: DeviceId) -> Result<Option<usize>> {
        let range = query_range(ptr, len)?;
        let device_index = self.device_index(device)?;
        Ok(self.index.containing(range).map(|hit| {
            self.device_ptrs[hit.id as usize * self.device_count + device_index]
                .wrapping_add(ptr - hit.start)
        }))
    }

    /// The entry that holds every byte of `[ptr, ptr + len)`, if any.
    pub fn find(&self, ptr: usize, len: usize) -> Result<Option<EntryView<'_>>> {
        let range = query_range(ptr, len)?;
        Ok(self.index.containing(range).map(|hit| self.view(hit.slot)))
    }

    /// All entries in address order.
    pub fn entries(&self) -> impl Iterator<Item = EntryView<'_>> + '_ {
        core::iter::successors(self.index.first(), |&slot| self.index.next(slot))
            .map(|slot| self.view(slot))
    }

    /// The table's counters.
    pub fn stats(&self) -> LockStats {
        self.stats
    }

    fn view(&self, slot: Slot) -> EntryView<'_> {
        let (range, id) = self.index.get(slot);
        let state = self.entries[id as usize];
        let base = id as usize * self.device_count;
        EntryView {
            range,
            locks: state.locks,
            external: state.external,
            device_ptrs: &self.device_ptrs[base..base + self.device_count],
        }
    }

    fn device_index(&self, device: DeviceId) -> Result<usize> {
        let index = device.index();
        if index < self.device_count {
            Ok(index)
        } else {
            Err(Error::UnknownDevice {
                device,
                device_count: self.device_count,
            })
        }
    }

    /// Phase one of a lock: validates, counts a nested lock, or rejects an overlap; for a new
    /// range reserves room so that [`LockTable::finish_lock`] cannot fail for lack of memory.
    pub(crate) fn start_lock(
        &mut self,
        ptr: usize,
        len: usize,
        owner: LockOwner,
    ) -> Result<LockStart> {
        let range = lock_range(ptr, len)?;
        // Every entry's locks are part of the table's, so once the table's total has room
        // for one more, no count can overflow (writers are serialised until `finish_lock`).
        if self.stats.held.total() == usize::MAX {
            return Err(Error::LimitExceeded {
                what: "locks outstanding in one lock table",
                required: usize::MAX,
                limit: usize::MAX,
                detail: Vec::new(),
            });
        }
        let hit = match self.index.place(range) {
            Placement::Inside(hit) => hit,
            Placement::Overlaps(slot) => return Err(self.overlap_error(range, slot)),
            Placement::Free(position) => {
                self.reserve_entry()?;
                return Ok(LockStart::NeedsDriver(NewRange {
                    range,
                    position,
                    owner,
                }));
            }
        };
        let state = &mut self.entries[hit.id as usize];
        *state.locks.of_mut(owner) += 1;
        *self.stats.held.of_mut(owner) += 1;
        self.stats.nested_locks += 1;
        Ok(LockStart::Done(Locked {
            entry: hit.range(),
            outcome: LockOutcome::Nested,
            locks: state.locks,
        }))
    }

    /// Phase three of a lock: records what the driver pinned or reported. Cannot fail for a
    /// range the driver pinned (room was reserved in phase one, and writers are serialised);
    /// an external extent that collides with an entry is refused without any driver call to
    /// undo.
    pub(crate) fn finish_lock(
        &mut self,
        new: NewRange,
        pinned: Pinned,
        device_ptrs: &[usize],
    ) -> Result<Locked> {
        let requested = new.range;
        let position = if pinned.external {
            if !pinned.extent.contains(&requested) {
                return Err(Error::ExternalPinTooSmall {
                    requested,
                    pinned: pinned.extent,
                });
            }
            match self.index.place(pinned.extent) {
                Placement::Free(position) => position,
                Placement::Inside(hit) => return Err(self.overlap_error(requested, hit.slot)),
                Placement::Overlaps(slot) => return Err(self.overlap_error(requested, slot)),
            }
        } else {
            new.position
        };
        let id = match self.free_ids.pop() {
            Some(id) => id,
            None => {
                self.entries.push(EntryState {
                    locks: LockCounts::default(),
                    external: false,
                });
                self.device_ptrs
                    .resize(self.entries.len() * self.device_count, 0);
                (self.entries.len() - 1) as u32
            }
        };
        let locks = LockCounts::one(new.owner);
        self.entries[id as usize] = EntryState {
            locks,
            external: pinned.external,
        };
        let base = id as usize * self.device_count;
        self.device_ptrs[base..base + self.device_count].copy_from_slice(device_ptrs);
        self.index.insert_at(position, pinned.extent, id);
        self.stats.entries += 1;
        self.stats.bytes_locked += pinned.extent.len;
        self.stats.external_entries += usize::from(pinned.external);
        *self.stats.held.of_mut(new.owner) += 1;
        let outcome = if pinned.external {
            LockOutcome::External
        } else {
            LockOutcome::Pinned
        };
        Ok(Locked {
            entry: pinned.extent,
            outcome,
            locks,
        })
    }

    /// The error for `requested` colliding with the entry at `slot`.
    fn overlap_error(&self, requested: ByteRange, slot: Slot) -> Error {
        let (conflicting, id) = self.index.get(slot);
        Error::LockOverlap {
            requested,
            conflicting,
            external: self.entries[id as usize].external,
        }
    }

    /// Makes sure one more entry can be recorded without allocating.
    fn reserve_entry(&mut self) -> Result<()> {
        let out_of_memory = |_| Error::HostOutOfMemory {
            what: "lock table entry",
        };
        self.index.reserve_one().map_err(out_of_memory)?;
        if self.free_ids.is_empty() {
            self.entries.try_reserve(1).map_err(out_of_memory)?;
            self.device_ptrs
                .try_reserve(self.device_count)
                .map_err(out_of_memory)?;
            // `free_ids` is empty: room for every id, so that `release` never allocates.
            self.free_ids
                .try_reserve(self.entries.len() + 1)
                .map_err(out_of_memory)?;
        }
        Ok(())
    }

    /// Phase one of an unlock: the entry `ptr` names, checking the exact-start rule and that
    /// the entry holds a lock of `owner`.
    pub(crate) fn entry_for_unlock(
        &self,
        ptr: usize,
        exact: bool,
        owner: LockOwner,
    ) -> Result<(Slot, u32, ByteRange)> {
        let probe = ByteRange { start: ptr, len: 1 };
        let Some(hit) = self.index.containing(probe) else {
            return Err(Error::NotLocked { ptr });
        };
        let entry = hit.range();
        if exact && entry.start != ptr {
            return Err(Error::NotEntryStart { ptr, entry });
        }
        let held = self.entries[hit.id as usize].locks;
        if held.of(owner) == 0 {
            return Err(Error::PinOwned {
                ptr,
                entry,
                releaser: owner,
                held,
            });
        }
        Ok((hit.slot, hit.id, entry))
    }

    /// Whether the last unlock of the entry `id` must call the driver.
    pub(crate) fn needs_unpin(&self, id: u32) -> bool {
        let state = self.entries[id as usize];
        state.locks.total() == 1 && !state.external
    }

    /// Phase two of an unlock, after any driver unpin succeeded: one lock of `owner` less (the
    /// entry holds one: phase one checked), and the entry removed with its last lock. Never
    /// allocates, never fails.
    pub(crate) fn release(
        &mut self,
        slot: Slot,
        id: u32,
        entry: ByteRange,
        owner: LockOwner,
    ) -> Unlocked {
        let state = &mut self.entries[id as usize];
        *state.locks.of_mut(owner) -= 1;
        *self.stats.held.of_mut(owner) -= 1;
        let (remaining, external) = (state.locks, state.external);
        if remaining.total() == 0 {
            self.remove(slot, id, entry);
        }
        Unlocked {
            entry,
            remaining,
            external,
        }
    }

    /// Removes the entry `id` at `slot`, whose locks have been taken off the stats already.
    fn remove(&mut self, slot: Slot, id: u32, entry: ByteRange) {
        let external = self.entries[id as usize].external;
        self.index.remove(slot);
        self.free_ids.push(id);
        self.stats.entries -= 1;
        self.stats.bytes_locked -= entry.len;
        self.stats.external_entries -= usize::from(external);
    }

    /// Phase one of each step of [`LockTable::release_all`]: the first entry, if any, and
    /// whether it must be unpinned (it was pinned by this table) before it is forgotten.
    pub(crate) fn first_to_release(&self) -> Option<ToRelease> {
        let slot = self.index.first()?;
        let (entry, id) = self.index.get(slot);
        Some(ToRelease {
            slot,
            id,
            entry,
            needs_unpin: !self.entries[id as usize].external,
        })
    }

    /// Phase two of each step of [`LockTable::release_all`], after any driver unpin
    /// succeeded: the entry removed whatever its count. Never allocates, never fails.
    pub(crate) fn forget(&mut self, first: ToRelease) {
        let locks = core::mem::take(&mut self.entries[first.id as usize].locks);
        self.stats.held.raw -= locks.raw;
        self.stats.held.guards -= locks.guards;
        self.remove(first.slot, first.id, first.entry);
    }

    /// Adds the driver calls that the shared form made outside the table's lock.
    pub(crate) fn record_driver_calls(&mut self, calls: &LockStats) {
        self.stats.driver_pins += calls.driver_pins;
        self.stats.driver_unpins += calls.driver_unpins;
        self.stats.driver_queries += calls.driver_queries;
    }
}

/// Phase two of a lock of a new range: asks the driver whether someone else pinned it, and
/// pins it otherwise. Runs without any table lock held; `device_ptrs` receives the addresses.
pub(crate) fn pin_new<D: PinDriver + ?Sized>(
    driver: &mut D,
    counts: &mut LockStats,
    range: ByteRange,
    device_ptrs: &mut [usize],
) -> Result<Pinned> {
    counts.driver_queries += 1;
    if let Some(extent) = driver.pinned_extent(range.start, device_ptrs)? {
        return Ok(Pinned {
            extent,
            external: true,
        });
    }
    counts.driver_pins += 1;
    driver.pin(range, device_ptrs)?;
    Ok(Pinned {
        extent: range,
        external: false,
    })
}

/// Validates a range to lock: not empty, not null, not past the top of the address space.
fn lock_range(ptr: usize, len: usize) -> Result<ByteRange> {
    if ptr == 0 {
        return Err(Error::NullPointer {
            what: "start of the range to lock",
        });
    }
    query_range(ptr, len)
}

/// Validates a range to look up: not empty, not past the top of the address space.
#[inline]
fn query_range(ptr: usize, len: usize) -> Result<ByteRange> {
    // The error is built only on failure: a value built eagerly (`ok_or`) and dropped cost
    // a hot lookup about 30 instructions of drop glue (measured with cachegrind).
    match ByteRange::new(ptr, len) {
        Some(range) => Ok(range),
        None if len == 0 => Err(Error::ZeroSize {
            what: "range length",
        }),
        None => Err(Error::AddressOverflow { ptr, len }),
    }
}

#[cfg(test)]
mod tests;
