//! The single-threaded table: entries by range, each with its locks by owner, its external
//! flag and every device's address, and the two-phase lock and unlock around driver calls.

use alloc::collections::TryReserveError;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use super::driver::{PinDriver, Pinned, pin_new};
use super::index::{Placement, Position, RangeIndex, Slot};
use super::outcome::{EntryView, LockOutcome, LockStats, Locked, Unlocked};
use super::store::Store;
use crate::error::{ByteRange, Error, Result};
use crate::id::{DeviceId, LockCounts, LockOwner};

/// Per-entry state that the index does not hold.
#[derive(Clone, Copy, Debug)]
pub(super) struct EntryState {
    pub(super) locks: LockCounts,
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

/// The entry that one step of [`LockTable::release_all`] removes.
#[derive(Clone, Copy)]
pub(crate) struct ToRelease {
    slot: Slot,
    id: u32,
    pub(crate) entry: ByteRange,
    pub(crate) needs_unpin: bool,
}

/// The lock interval table of one backend: single-threaded form (see [`SharedLockTable`](super::SharedLockTable) for
/// many readers and serialised writers).
pub struct LockTable {
    index: RangeIndex,
    pub(super) entries: Vec<EntryState>,
    free_ids: Vec<u32>,
    device_count: usize,
    pub(super) stats: LockStats,
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
            index: RangeIndex::new(device_count),
            entries: Vec::new(),
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
        let store = self.index.store();
        let (range, device) = lookup_args(store, ptr, len, device)?;
        Ok(store.find(range, device))
    }

    /// The words lookups read, for the thread-safe form's readers.
    pub(crate) fn store(&self) -> &Arc<Store> {
        self.index.store()
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
        EntryView {
            range,
            locks: state.locks,
            external: state.external,
            device_ptrs: self.index.addresses(slot),
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
                self.reserve_entry(position)?;
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
                // Room was reserved where the requested range goes; the extent may go elsewhere.
                // Refusing it here leaves nothing to undo: nothing was pinned.
                Placement::Free(position) => {
                    self.index
                        .reserve_for(position)
                        .map_err(entry_out_of_memory)?;
                    position
                }
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
                (self.entries.len() - 1) as u32
            }
        };
        let locks = LockCounts::one(new.owner);
        self.entries[id as usize] = EntryState {
            locks,
            external: pinned.external,
        };
        self.index
            .insert_at(position, pinned.extent, id, device_ptrs);
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

    /// Makes sure one more entry can be recorded at `position` without allocating.
    fn reserve_entry(&mut self, position: Option<Position>) -> Result<()> {
        self.index
            .reserve_for(position)
            .map_err(entry_out_of_memory)?;
        if self.free_ids.is_empty() {
            self.entries.try_reserve(1).map_err(entry_out_of_memory)?;
            // `free_ids` is empty: room for every id, so that `release` never allocates.
            self.free_ids
                .try_reserve(self.entries.len() + 1)
                .map_err(entry_out_of_memory)?;
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

/// The error for a table out of memory for one more entry.
fn entry_out_of_memory(_: TryReserveError) -> Error {
    Error::HostOutOfMemory {
        what: "lock table entry",
    }
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

/// Validates a lookup's arguments against `store`: the range, and the device as an index.
#[inline]
pub(crate) fn lookup_args(
    store: &Store,
    ptr: usize,
    len: usize,
    device: DeviceId,
) -> Result<(ByteRange, usize)> {
    let range = query_range(ptr, len)?;
    let device_count = store.devices();
    if device.index() < device_count {
        Ok((range, device.index()))
    } else {
        Err(Error::UnknownDevice {
            device,
            device_count,
        })
    }
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
