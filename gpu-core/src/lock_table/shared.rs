//! The thread-safe lock table: lookups that take no lock, writers serialised, and no table lock
//! held across a driver call (a pin takes tens of microseconds; lookups must not wait on it).
//!
//! Two locks: the writer lock owns the driver and serialises lock/unlock; the table lock
//! guards the entries and is held only for the table's own short phases. Because writers are
//! serialised, what a writer saw before its driver call is still true after it. The lock type
//! is any `lock_api::RawRwLock` (spin's by default), so no_std users can plug their own.
//! A lookup reads the index's store with no lock at all and keeps its answer if no writer
//! changed the store meanwhile (a seqlock: no atomic read-modify-write, so lookups neither
//! serialise on a lock word nor stall the core); after a few overlapping changes it reads
//! under the table lock instead, which waits for the writer's short phase to end.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use lock_api::{RawRwLock, RwLock, RwLockWriteGuard};

use super::driver::{PinDriver, pin_new};
use super::outcome::{LockStats, Locked, Unlocked};
use super::store::Store;
use super::table::{LockStart, LockTable, lookup_args};
use crate::error::Result;
use crate::id::{DeviceId, LockOwner};

/// What a writer holds while it works: the driver, and scratch for device addresses.
struct Writer<D> {
    driver: D,
    device_ptrs: Vec<usize>,
}

/// A [`LockTable`] shared by threads: lookups run concurrently; lock and unlock are
/// serialised among themselves, and driver calls run without blocking lookups.
pub struct SharedLockTable<D, R: RawRwLock = spin::RwLock<()>> {
    writer: RwLock<R, Writer<D>>,
    table: RwLock<R, LockTable>,
    /// The table's index as lookups read it, without the table lock.
    store: Arc<Store>,
}

/// Lock-free reads a lookup tries before it reads under the table lock: each fails only when a
/// writer's short phase overlapped it.
const OPTIMISTIC_READS: usize = 4;

impl<D: PinDriver, R: RawRwLock> SharedLockTable<D, R> {
    /// An empty shared table over `driver` for `device_count` devices (at least one).
    pub fn new(driver: D, device_count: usize) -> Result<Self> {
        let table = LockTable::new(device_count)?;
        Ok(Self {
            writer: RwLock::new(Writer {
                driver,
                device_ptrs: vec![0; device_count],
            }),
            store: Arc::clone(table.store()),
            table: RwLock::new(table),
        })
    }

    /// See [`LockTable::lock`] (a raw lock). The driver's pin runs with only the writer lock
    /// held.
    pub fn lock(&self, ptr: usize, len: usize) -> Result<Locked> {
        self.lock_as(ptr, len, LockOwner::Raw)
    }

    /// See [`LockTable::lock_as`]. The driver's pin runs with only the writer lock held.
    pub fn lock_as(&self, ptr: usize, len: usize, owner: LockOwner) -> Result<Locked> {
        let mut writer = self.writer.write();
        // Writers are serialised, so where the new range goes stays true across the pin.
        let new = match self.table.write().start_lock(ptr, len, owner)? {
            LockStart::Done(locked) => return Ok(locked),
            LockStart::NeedsDriver(new) => new,
        };
        let Writer {
            driver,
            device_ptrs,
        } = &mut *writer;
        let mut calls = LockStats::default();
        let pinned = pin_new(driver, &mut calls, new.range, device_ptrs);
        let mut table = self.table.write();
        table.record_driver_calls(&calls);
        table.finish_lock(new, pinned?, device_ptrs)
    }

    /// See [`LockTable::unlock`] (a raw lock). The driver's unpin runs with only the writer
    /// lock held; the entry stays visible to lookups until the unpin succeeded.
    pub fn unlock(&self, ptr: usize) -> Result<Unlocked> {
        self.unlock_inner(ptr, false, LockOwner::Raw)
    }

    /// See [`LockTable::unlock_exact`].
    pub fn unlock_exact(&self, ptr: usize) -> Result<Unlocked> {
        self.unlock_inner(ptr, true, LockOwner::Raw)
    }

    /// See [`LockTable::unlock_as`].
    pub fn unlock_as(&self, ptr: usize, owner: LockOwner) -> Result<Unlocked> {
        self.unlock_inner(ptr, false, owner)
    }

    fn unlock_inner(&self, ptr: usize, exact: bool, owner: LockOwner) -> Result<Unlocked> {
        let mut writer = self.writer.write();
        // Writers are serialised, so the entry and its locks stay as read across the unpin.
        let ((slot, id, entry), needs_unpin) = {
            let table = self.table.read();
            let found = table.entry_for_unlock(ptr, exact, owner)?;
            let needs_unpin = table.needs_unpin(found.1);
            (found, needs_unpin)
        };
        let mut table = self.unpin_then_lock(&mut writer.driver, needs_unpin, entry.start)?;
        Ok(table.release(slot, id, entry, owner))
    }

    /// Unpins `start` if `needs_unpin`, with only the writer lock held (its owner passes the
    /// driver), then takes the table lock and records the call: the table for the caller's
    /// bookkeeping, or the driver's error with the table unchanged.
    fn unpin_then_lock(
        &self,
        driver: &mut D,
        needs_unpin: bool,
        start: usize,
    ) -> Result<RwLockWriteGuard<'_, R, LockTable>> {
        let unpinned = needs_unpin.then(|| driver.unpin(start));
        let mut table = self.table.write();
        if let Some(result) = unpinned {
            table.record_driver_calls(&LockStats {
                driver_unpins: 1,
                ..LockStats::default()
            });
            result?;
        }
        Ok(table)
    }

    /// See [`LockTable::lookup`]. Takes no lock unless writers keep changing the table while
    /// it reads; then the shared read lock.
    #[inline]
    pub fn lookup(&self, ptr: usize, len: usize, device: DeviceId) -> Result<Option<usize>> {
        let (range, device_index) = lookup_args(&self.store, ptr, len, device)?;
        for _ in 0..OPTIMISTIC_READS {
            if let Some(found) = self
                .store
                .read_unchanged(|store| store.find(range, device_index))
            {
                return Ok(found);
            }
            core::hint::spin_loop();
        }
        self.table.read().lookup(ptr, len, device)
    }

    /// Calls `f` with a consistent read-only view of the table (entries, stats, finds).
    pub fn read<T>(&self, f: impl FnOnce(&LockTable) -> T) -> T {
        f(&self.table.read())
    }

    /// The table's counters.
    pub fn stats(&self) -> LockStats {
        self.table.read().stats()
    }

    /// See [`LockTable::release_all`]: unpins everything this table pinned, for shutdown.
    /// Each unpin runs with only the writer lock held; an entry stays visible to lookups
    /// until its unpin succeeded.
    pub fn release_all(&self) -> Result<usize> {
        let mut writer = self.writer.write();
        let mut unpinned = 0;
        loop {
            // The read guard must end here, before the table is locked for writing below.
            let first = self.table.read().first_to_release();
            let Some(first) = first else {
                return Ok(unpinned);
            };
            let mut table =
                self.unpin_then_lock(&mut writer.driver, first.needs_unpin, first.entry.start)?;
            unpinned += usize::from(first.needs_unpin);
            table.forget(first);
        }
    }
}
