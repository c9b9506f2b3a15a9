//! One test per rule and per error case of docs/lock-table.md, and the helpers every group of
//! tests uses.
//!
//! The groups, by concern: ranges, nesting and lookups; driver failures and memory pinned
//! elsewhere; lock owners and release_all; the shared (thread-safe) form.

mod driver;
mod owners;
mod ranges;
mod shared;

use alloc::vec::Vec;

use super::model::FakeDriver;
use super::*;
use crate::error::{ByteRange, Error, Result};
use crate::id::DeviceId;

const PAGE: usize = 4096;
const BASE: usize = 0x10_0000;

fn range(start: usize, len: usize) -> ByteRange {
    ByteRange::new(start, len).unwrap()
}

fn table() -> (LockTable, FakeDriver) {
    (LockTable::new(2).unwrap(), FakeDriver::new())
}

/// `raw` raw locks and `guards` guard locks.
fn locks(raw: usize, guards: usize) -> LockCounts {
    LockCounts { raw, guards }
}

/// Everything observable about a table: its entries (range, locks, external, device
/// addresses) and its stats.
type Snapshot = (Vec<(ByteRange, LockCounts, bool, Vec<usize>)>, LockStats);

/// A snapshot, to prove that a failed call changed nothing.
fn snapshot(table: &LockTable) -> Snapshot {
    let entries = table
        .entries()
        .map(|e| (e.range, e.locks, e.external, e.device_ptrs.to_vec()))
        .collect();
    (entries, table.stats())
}

/// What a refused call must leave as it was: the table (entries and stats) and the driver
/// (its pins and its call counters, since a refused call reaches no driver).
struct Before {
    table: Snapshot,
    pins: Vec<ByteRange>,
    calls: [u64; 3],
}

fn before_refusal(table: &LockTable, driver: &FakeDriver) -> Before {
    Before {
        table: snapshot(table),
        pins: driver.pinned.clone(),
        calls: driver.calls,
    }
}

/// Asserts `result` is `expected`, that table and driver are as `before`, and that no driver
/// call was made.
fn assert_refused<T: core::fmt::Debug>(
    table: &LockTable,
    driver: &FakeDriver,
    before: &Before,
    result: Result<T>,
    expected: Error,
) {
    assert_eq!(result.unwrap_err(), expected);
    let (entries, stats) = snapshot(table);
    assert_eq!(entries, before.table.0, "entries changed");
    assert_eq!(stats, before.table.1, "stats changed");
    assert_eq!(driver.pinned, before.pins, "driver pins changed");
    assert_eq!(
        driver.calls, before.calls,
        "a refused call reached the driver"
    );
}
