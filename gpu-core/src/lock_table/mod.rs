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
//!
//! One concern a file, this one only re-exporting: `table` (the single-threaded table),
//! `outcome` (what its calls report), `driver` (what it asks of a driver), `index` (entries
//! by range), `store` (the index's words that lookups read, without a lock in the shared
//! form), `shared` (the thread-safe form), `model` (the reference model).

mod driver;
mod index;
#[cfg(feature = "model")]
pub mod model;
mod outcome;
mod shared;
mod store;
mod table;
#[cfg(test)]
mod tests;

pub use crate::id::{LockCounts, LockOwner};
pub use driver::PinDriver;
pub use outcome::{EntryView, LockOutcome, LockStats, Locked, Unlocked};
pub use shared::SharedLockTable;
pub use store::DeviceAddresses;
pub use table::LockTable;
