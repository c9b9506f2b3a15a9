//! What the table's calls report: how a lock was satisfied ([`Locked`]), what an unlock left
//! ([`Unlocked`]), one entry as seen from outside ([`EntryView`]), and the counters.

use super::store::DeviceAddresses;
use crate::error::ByteRange;
use crate::id::LockCounts;

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

/// The result of a successful [`LockTable::lock`](super::LockTable::lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locked {
    /// The entry that now holds the lock (for a nested or external lock, larger than asked).
    pub entry: ByteRange,
    /// How the lock was satisfied.
    pub outcome: LockOutcome,
    /// The entry's locks after this lock, by owner.
    pub locks: LockCounts,
}

/// The result of a successful [`LockTable::unlock`](super::LockTable::unlock).
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

/// One entry as seen by [`LockTable::entries`](super::LockTable::entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryView<'a> {
    /// The pinned range.
    pub range: ByteRange,
    /// Outstanding locks on it, by owner.
    pub locks: LockCounts,
    /// Whether someone else pinned it (the table never unpins it).
    pub external: bool,
    /// The address each device uses for `range.start`, indexed by device.
    pub device_ptrs: DeviceAddresses<'a>,
}
