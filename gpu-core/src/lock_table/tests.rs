//! One test per rule and per error case of docs/lock-table.md.

use super::model::{CallKind, FakeDriver, fake_device_address};
use super::*;
use alloc::string::ToString;

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

#[test]
fn zero_devices_is_an_error() {
    assert_eq!(
        LockTable::new(0).err(),
        Some(Error::ZeroSize {
            what: "lock table device count"
        })
    );
}

#[test]
fn new_range_pins_once_and_caches_each_device_address() {
    let (mut t, mut d) = table();
    let locked = t.lock(&mut d, BASE, PAGE).unwrap();
    assert_eq!(
        locked,
        Locked {
            entry: range(BASE, PAGE),
            outcome: LockOutcome::Pinned,
            locks: locks(1, 0)
        }
    );
    assert_eq!(d.pinned, [range(BASE, PAGE)]);
    assert_eq!(d.calls, [1, 0, 1]);
    for device in 0..2 {
        assert_eq!(
            t.lookup(BASE + 100, 8, DeviceId(device)).unwrap(),
            Some(fake_device_address(BASE, device as usize) + 100)
        );
    }
    assert_eq!(
        t.lookup(BASE, 1, DeviceId(2)),
        Err(Error::UnknownDevice {
            device: DeviceId(2),
            device_count: 2
        })
    );
}

#[test]
fn nested_locks_count_in_software_with_one_driver_pin_and_one_unpin() {
    let (mut t, mut d) = table();
    let first = t.lock(&mut d, BASE, 4 * PAGE).unwrap();
    let again = t.lock(&mut d, BASE, 4 * PAGE).unwrap();
    let inner = t.lock(&mut d, BASE + PAGE, 16).unwrap();
    assert_eq!(again.outcome, LockOutcome::Nested);
    assert_eq!(
        inner,
        Locked {
            entry: first.entry,
            outcome: LockOutcome::Nested,
            locks: locks(3, 0)
        }
    );
    // Map through the original pointer and through the sub-range's pointer.
    let device_base = fake_device_address(BASE, 0);
    assert_eq!(
        t.lookup(BASE, 4 * PAGE, DeviceId(0)).unwrap(),
        Some(device_base)
    );
    assert_eq!(
        t.lookup(BASE + PAGE, 16, DeviceId(0)).unwrap(),
        Some(device_base + PAGE)
    );
    assert_eq!(t.stats().nested_locks, 2);
    // Unlock through the sub-range pointer too: counts are per entry, not per caller.
    assert_eq!(
        t.unlock(&mut d, BASE + PAGE).unwrap().remaining,
        locks(2, 0)
    );
    assert_eq!(t.unlock(&mut d, BASE).unwrap().remaining, locks(1, 0));
    assert!(d.pinned.len() == 1, "still pinned while a lock remains");
    let last = t.unlock(&mut d, BASE + 5).unwrap();
    assert_eq!(
        last,
        Unlocked {
            entry: first.entry,
            remaining: locks(0, 0),
            external: false
        }
    );
    assert_eq!(d.calls[CallKind::Pin as usize], 1);
    assert_eq!(d.calls[CallKind::Unpin as usize], 1);
    assert!(d.pinned.is_empty());
    assert_eq!(t.stats().entries, 0);
}

#[test]
fn bad_ranges_are_refused_before_any_driver_call() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    let before = before_refusal(&t, &d);
    let calls = d.calls;
    let r = t.lock(&mut d, BASE, 0);
    assert_refused(
        &t,
        &d,
        &before,
        r,
        Error::ZeroSize {
            what: "range length",
        },
    );
    let r = t.lock(&mut d, 0, PAGE);
    let null = Error::NullPointer {
        what: "start of the range to lock",
    };
    assert_refused(&t, &d, &before, r, null);
    let r = t.lock(&mut d, usize::MAX - 3, 5);
    let overflow = Error::AddressOverflow {
        ptr: usize::MAX - 3,
        len: 5,
    };
    assert_refused(&t, &d, &before, r, overflow);
    assert_eq!(d.calls, calls, "no driver call for a bad argument");
    assert_eq!(t.stats(), before.table.1);
}

#[test]
fn range_running_past_an_entry_end_is_refused_and_the_entry_still_unlocks() {
    let (mut t, mut d) = table();
    let element = 8;
    t.lock(&mut d, BASE, 64 * element).unwrap();
    let before = before_refusal(&t, &d);
    let r = t.lock(&mut d, BASE + 2 * element, 64 * element);
    let overlap = Error::LockOverlap {
        requested: range(BASE + 2 * element, 64 * element),
        conflicting: range(BASE, 64 * element),
        external: false,
    };
    assert_refused(&t, &d, &before, r, overlap);
    assert_eq!(d.calls, [1, 0, 1], "refused before the driver was asked");
    assert_eq!(t.unlock(&mut d, BASE).unwrap().remaining, locks(0, 0));
    assert!(d.pinned.is_empty());
}

#[test]
fn range_swallowing_an_entry_whole_is_refused() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE + PAGE, PAGE).unwrap();
    let before = before_refusal(&t, &d);
    let r = t.lock(&mut d, BASE, 4 * PAGE);
    let overlap = Error::LockOverlap {
        requested: range(BASE, 4 * PAGE),
        conflicting: range(BASE + PAGE, PAGE),
        external: false,
    };
    assert_refused(&t, &d, &before, r, overlap);
}

#[test]
fn entry_starting_inside_the_new_range_is_found_before_the_driver_runs() {
    // libomptarget checks only the start pointer and would pin here, then fail to insert.
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE + 100, PAGE).unwrap();
    let before = before_refusal(&t, &d);
    let calls = d.calls;
    let r = t.lock(&mut d, BASE, 200);
    let overlap = Error::LockOverlap {
        requested: range(BASE, 200),
        conflicting: range(BASE + 100, PAGE),
        external: false,
    };
    assert_refused(&t, &d, &before, r, overlap);
    assert_eq!(d.calls, calls);
}

#[test]
fn range_starting_before_and_ending_inside_an_entry_is_refused() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE + PAGE, PAGE).unwrap();
    let err = t.lock(&mut d, BASE, PAGE + 1).unwrap_err();
    assert!(
        matches!(err, Error::LockOverlap { conflicting, .. } if conflicting == range(BASE + PAGE, PAGE))
    );
}

#[test]
fn adjacent_entries_stay_separate_and_a_boundary_lookup_finds_the_second() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    let second = t.lock(&mut d, BASE + PAGE, PAGE).unwrap();
    assert_eq!(second.outcome, LockOutcome::Pinned);
    assert_eq!(t.stats().entries, 2);
    let at_boundary = t.find(BASE + PAGE, 1).unwrap().unwrap();
    assert_eq!(at_boundary.range, range(BASE + PAGE, PAGE));
    assert_eq!(
        t.lookup(BASE + PAGE, 1, DeviceId(1)).unwrap(),
        Some(fake_device_address(BASE + PAGE, 1))
    );
    // A transfer spanning both entries is not inside one entry: no fast path.
    assert_eq!(t.lookup(BASE + PAGE - 1, 2, DeviceId(0)).unwrap(), None);
    // Unlocking one leaves the other.
    t.unlock(&mut d, BASE).unwrap();
    assert_eq!(
        t.find(BASE + PAGE, PAGE).unwrap().map(|e| e.range),
        Some(second.entry)
    );
}

#[test]
fn queries_take_a_length_and_hit_only_inside_one_entry() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    let hit = |t: &LockTable, p, l| t.lookup(p, l, DeviceId(0)).unwrap().is_some();
    assert!(hit(&t, BASE + PAGE - 1, 1), "last byte hits");
    assert!(!hit(&t, BASE + PAGE, 1), "end misses");
    assert!(
        !hit(&t, BASE + PAGE - 8, 16),
        "a transfer running past the end misses"
    );
    assert!(!hit(&t, BASE - 1, 1), "the byte before misses");
    assert!(!hit(&t, 0, 1), "null misses");
    assert!(!hit(&t, usize::MAX, 1), "the top byte misses");
    assert_eq!(
        t.lookup(BASE, 0, DeviceId(0)),
        Err(Error::ZeroSize {
            what: "range length"
        })
    );
    assert_eq!(
        t.lookup(usize::MAX, 2, DeviceId(0)),
        Err(Error::AddressOverflow {
            ptr: usize::MAX,
            len: 2
        })
    );
}

#[test]
fn ranges_at_the_top_of_the_address_space_work() {
    let (mut t, mut d) = table();
    // [MAX - 15, MAX): the spec's range, ending just below the top byte.
    let below_top = t.lock(&mut d, usize::MAX - 15, 15).unwrap();
    assert_eq!(below_top.entry.last(), usize::MAX - 1);
    assert_eq!(t.lookup(usize::MAX, 1, DeviceId(0)).unwrap(), None);
    // The very last byte, adjacent to it.
    let top = t.lock(&mut d, usize::MAX, 1).unwrap();
    assert_eq!(top.outcome, LockOutcome::Pinned);
    assert!(t.lookup(usize::MAX, 1, DeviceId(0)).unwrap().is_some());
    assert!(
        t.lookup(usize::MAX - 1, 2, DeviceId(0)).unwrap().is_none(),
        "spans two entries"
    );
    assert_eq!(
        t.lock(&mut d, usize::MAX - 3, 2).unwrap().outcome,
        LockOutcome::Nested
    );
    let err = t.lock(&mut d, usize::MAX - 20, 21).unwrap_err();
    assert!(matches!(err, Error::LockOverlap { .. }));
    t.unlock(&mut d, usize::MAX).unwrap();
    t.unlock(&mut d, usize::MAX - 1).unwrap();
    t.unlock(&mut d, usize::MAX - 15).unwrap();
    assert!(d.pinned.is_empty());
    // A range ending at the very top, 16 bytes.
    assert_eq!(
        t.lock(&mut d, usize::MAX - 15, 16).unwrap().entry.last(),
        usize::MAX
    );
}

#[test]
fn unlock_accepts_interior_pointers_and_rejects_unknown_ones() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    let before = before_refusal(&t, &d);
    let r = t.unlock(&mut d, BASE + PAGE);
    assert_refused(&t, &d, &before, r, Error::NotLocked { ptr: BASE + PAGE });
    let r = t.unlock(&mut d, 0);
    assert_refused(&t, &d, &before, r, Error::NotLocked { ptr: 0 });
    let r = t.unlock_exact(&mut d, BASE + 1);
    let not_start = Error::NotEntryStart {
        ptr: BASE + 1,
        entry: range(BASE, PAGE),
    };
    assert_refused(&t, &d, &before, r, not_start);
    assert_eq!(d.calls[CallKind::Unpin as usize], 0);
    assert_eq!(
        t.unlock(&mut d, BASE + PAGE - 1).unwrap().remaining,
        locks(0, 0)
    );
    // A second unlock of the same memory (double release) is refused.
    assert_eq!(t.unlock(&mut d, BASE), Err(Error::NotLocked { ptr: BASE }));
    assert_eq!(
        t.unlock_exact(&mut d, BASE),
        Err(Error::NotLocked { ptr: BASE })
    );
}

#[test]
fn unlock_exact_releases_by_start() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    assert_eq!(t.unlock_exact(&mut d, BASE).unwrap().remaining, locks(0, 0));
    assert!(d.pinned.is_empty());
}

#[test]
fn driver_failures_leave_table_and_driver_unchanged() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    let before = snapshot(&t);
    let pins = d.pinned.clone();
    for kind in [CallKind::Query, CallKind::Pin] {
        d.fail_next(kind);
        let err = t.lock(&mut d, BASE + 2 * PAGE, PAGE).unwrap_err();
        assert!(matches!(err, Error::Driver(_)), "{err}");
        assert_eq!(snapshot(&t).0, before.0);
        assert_eq!(d.pinned, pins, "no pin leaked");
    }
    // Unpin failure: the entry stays locked (count 1), and a retry succeeds.
    d.fail_next(CallKind::Unpin);
    assert!(matches!(t.unlock(&mut d, BASE), Err(Error::Driver(_))));
    assert_eq!(snapshot(&t).0, before.0);
    assert_eq!(t.unlock(&mut d, BASE).unwrap().remaining, locks(0, 0));
    assert!(d.pinned.is_empty());
    let stats = t.stats();
    assert_eq!(
        (stats.driver_pins, stats.driver_unpins, stats.driver_queries),
        (2, 2, 3)
    );
}

#[test]
fn memory_pinned_elsewhere_is_recorded_as_external_and_never_unpinned() {
    let (mut t, mut d) = table();
    let foreign = range(BASE, 8 * PAGE);
    assert!(d.pin_elsewhere(foreign));
    let locked = t.lock(&mut d, BASE + PAGE, PAGE).unwrap();
    assert_eq!(
        locked,
        Locked {
            entry: foreign,
            outcome: LockOutcome::External,
            locks: locks(1, 0)
        }
    );
    assert_eq!(
        d.calls[CallKind::Pin as usize],
        0,
        "no registration attempted"
    );
    assert_eq!(
        t.lookup(BASE + 2 * PAGE, 8, DeviceId(1)).unwrap(),
        Some(fake_device_address(BASE, 1) + 2 * PAGE)
    );
    assert_eq!(
        t.lock(&mut d, BASE, PAGE).unwrap().outcome,
        LockOutcome::Nested
    );
    assert_eq!(t.stats().external_entries, 1);
    t.unlock(&mut d, BASE).unwrap();
    let last = t.unlock(&mut d, BASE).unwrap();
    assert_eq!(
        last,
        Unlocked {
            entry: foreign,
            remaining: locks(0, 0),
            external: true
        }
    );
    assert_eq!(
        d.calls[CallKind::Unpin as usize],
        0,
        "never unpinned by the table"
    );
    assert_eq!(d.pinned_elsewhere, [foreign]);
}

#[test]
fn external_pin_covering_only_part_of_the_range_is_refused() {
    let (mut t, mut d) = table();
    assert!(d.pin_elsewhere(range(BASE, PAGE)));
    let err = t.lock(&mut d, BASE + PAGE / 2, PAGE).unwrap_err();
    assert_eq!(
        err,
        Error::ExternalPinTooSmall {
            requested: range(BASE + PAGE / 2, PAGE),
            pinned: range(BASE, PAGE)
        }
    );
    assert_eq!(t.stats().entries, 0);
}

#[test]
fn external_extent_colliding_with_an_entry_is_refused() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    // Someone else pinned memory right after ours; its reported extent is fine...
    assert!(d.pin_elsewhere(range(BASE + PAGE, PAGE)));
    assert_eq!(
        t.lock(&mut d, BASE + PAGE, 8).unwrap().outcome,
        LockOutcome::External
    );
    // ...but a driver reporting an extent that overlaps our own entry is refused.
    struct Liar(FakeDriver);
    impl PinDriver for Liar {
        fn pin(&mut self, r: ByteRange, p: &mut [usize]) -> Result<()> {
            self.0.pin(r, p)
        }
        fn unpin(&mut self, s: usize) -> Result<()> {
            self.0.unpin(s)
        }
        fn pinned_extent(&mut self, _: usize, _: &mut [usize]) -> Result<Option<ByteRange>> {
            Ok(Some(range(BASE, 8 * PAGE)))
        }
    }
    let mut liar = Liar(d);
    let before = snapshot(&t);
    let err = t.lock(&mut liar, BASE + 4 * PAGE, 8).unwrap_err();
    assert_eq!(
        err,
        Error::LockOverlap {
            requested: range(BASE + 4 * PAGE, 8),
            conflicting: range(BASE, PAGE),
            external: false
        }
    );
    assert_eq!(snapshot(&t).0, before.0);
}

#[test]
fn a_guards_lock_is_released_only_by_a_guard_and_raw_unlocks_never_unpin_it() {
    let (mut t, mut d) = table();
    let guarded = t.lock_as(&mut d, BASE, 4 * PAGE, LockOwner::Guard).unwrap();
    assert_eq!(
        guarded,
        Locked {
            entry: range(BASE, 4 * PAGE),
            outcome: LockOutcome::Pinned,
            locks: locks(0, 1)
        }
    );
    // A raw unlock, by any pointer or by the start, is refused and changes nothing.
    let before = before_refusal(&t, &d);
    let owned = |ptr| Error::PinOwned {
        ptr,
        entry: guarded.entry,
        releaser: LockOwner::Raw,
        held: locks(0, 1),
    };
    let r = t.unlock(&mut d, BASE + 5);
    assert_refused(&t, &d, &before, r, owned(BASE + 5));
    let r = t.unlock_exact(&mut d, BASE);
    assert_refused(&t, &d, &before, r, owned(BASE));
    assert!(t.lookup(BASE, 4 * PAGE, DeviceId(0)).unwrap().is_some());
    let message = owned(BASE).to_string();
    assert!(
        message.contains("cannot release a raw lock") && message.contains("0 raw lock(s)"),
        "{message}"
    );

    // A raw lock nested inside it is the raw unlock's to release, once; the counts say who
    // holds what, per entry and for the table.
    let nested = t.lock(&mut d, BASE + PAGE, 16).unwrap();
    assert_eq!(
        (nested.outcome, nested.locks),
        (LockOutcome::Nested, locks(1, 1))
    );
    assert_eq!(t.find(BASE + PAGE, 16).unwrap().unwrap().locks, locks(1, 1));
    assert_eq!(t.stats().held, locks(1, 1));
    assert_eq!(
        t.unlock(&mut d, BASE + 7).unwrap().remaining,
        locks(0, 1),
        "the raw lock went, the guard's stays"
    );
    let before = before_refusal(&t, &d);
    let r = t.unlock(&mut d, BASE + PAGE);
    assert_refused(&t, &d, &before, r, owned(BASE + PAGE));

    // Guards nest too, and the last guard's release unpins.
    let inner = t.lock_as(&mut d, BASE + 8, 8, LockOwner::Guard).unwrap();
    assert_eq!(inner.locks, locks(0, 2));
    let unlock_guard = |t: &mut LockTable, d: &mut FakeDriver| {
        t.unlock_as(d, BASE + 8, LockOwner::Guard)
            .unwrap()
            .remaining
    };
    assert_eq!(unlock_guard(&mut t, &mut d), locks(0, 1));
    assert_eq!(d.calls[CallKind::Unpin as usize], 0);
    assert_eq!(unlock_guard(&mut t, &mut d), locks(0, 0));
    assert_eq!(d.calls[CallKind::Unpin as usize], 1);
    assert!(d.pinned.is_empty());
    assert_eq!(t.stats().held, locks(0, 0));
    assert_eq!(t.stats().entries, 0);
}

#[test]
fn a_guard_unlock_of_an_entry_without_a_guard_lock_is_refused() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    t.lock(&mut d, BASE, 8).unwrap();
    let before = before_refusal(&t, &d);
    let r = t.unlock_as(&mut d, BASE + 1, LockOwner::Guard);
    let owned = Error::PinOwned {
        ptr: BASE + 1,
        entry: range(BASE, PAGE),
        releaser: LockOwner::Guard,
        held: locks(2, 0),
    };
    assert_refused(&t, &d, &before, r, owned);
    let r = t.unlock_as(&mut d, BASE + PAGE, LockOwner::Guard);
    assert_refused(&t, &d, &before, r, Error::NotLocked { ptr: BASE + PAGE });
}

#[test]
fn a_guard_on_memory_pinned_elsewhere_keeps_it_from_raw_unlocks_and_never_unpins_it() {
    let (mut t, mut d) = table();
    let foreign = range(BASE, 8 * PAGE);
    assert!(d.pin_elsewhere(foreign));
    let locked = t
        .lock_as(&mut d, BASE + PAGE, PAGE, LockOwner::Guard)
        .unwrap();
    assert_eq!(locked.outcome, LockOutcome::External);
    assert!(matches!(
        t.unlock(&mut d, BASE),
        Err(Error::PinOwned { held, .. }) if held == locks(0, 1)
    ));
    let last = t.unlock_as(&mut d, BASE + PAGE, LockOwner::Guard).unwrap();
    assert_eq!((last.remaining, last.external), (locks(0, 0), true));
    assert_eq!(d.calls[CallKind::Unpin as usize], 0);
    assert_eq!((t.stats().entries, t.stats().held), (0, locks(0, 0)));
}

#[test]
fn release_all_forgets_the_locks_of_every_owner() {
    let (mut t, mut d) = table();
    t.lock_as(&mut d, BASE, PAGE, LockOwner::Guard).unwrap();
    t.lock(&mut d, BASE, 8).unwrap();
    t.lock(&mut d, BASE + 2 * PAGE, PAGE).unwrap();
    assert_eq!(t.stats().held, locks(2, 1));
    assert_eq!(t.release_all(&mut d).unwrap(), 2);
    assert_eq!((t.stats().entries, t.stats().held), (0, locks(0, 0)));
    assert!(d.pinned.is_empty());
}

#[test]
fn lock_count_overflow_is_refused() {
    let (mut t, mut d) = table();
    t.lock(&mut d, BASE, PAGE).unwrap();
    // As if `usize::MAX` locks were held: one raw lock here, the rest by guards.
    t.entries[0].locks = locks(1, usize::MAX - 1);
    t.stats.held = t.entries[0].locks;
    let before = before_refusal(&t, &d);
    for owner in [LockOwner::Raw, LockOwner::Guard] {
        let nested = t.lock_as(&mut d, BASE, 1, owner);
        let limit = Error::LimitExceeded {
            what: "locks outstanding in one lock table",
            required: usize::MAX,
            limit: usize::MAX,
            detail: Vec::new(),
        };
        assert_refused(&t, &d, &before, nested, limit.clone());
        let new = t.lock_as(&mut d, BASE + 2 * PAGE, PAGE, owner);
        assert_refused(&t, &d, &before, new, limit);
    }
}

#[test]
fn release_all_unpins_owned_entries_and_forgets_external_ones() {
    let (mut t, mut d) = table();
    assert!(d.pin_elsewhere(range(BASE, PAGE)));
    t.lock(&mut d, BASE, 8).unwrap();
    t.lock(&mut d, BASE + PAGE, PAGE).unwrap();
    t.lock(&mut d, BASE + PAGE, PAGE).unwrap();
    t.lock(&mut d, BASE + 4 * PAGE, PAGE).unwrap();
    d.fail_next(CallKind::Unpin);
    assert!(t.release_all(&mut d).is_err());
    assert_eq!(t.stats().entries, 2, "entries not yet unpinned stay");
    assert_eq!(t.release_all(&mut d).unwrap(), 2);
    assert!(d.pinned.is_empty());
    assert_eq!(t.stats().entries, 0);
    assert_eq!(d.pinned_elsewhere.len(), 1);
}

#[test]
fn freed_entry_ids_are_reused() {
    let (mut t, mut d) = table();
    for round in 0..3 {
        for i in 0..100 {
            t.lock(&mut d, BASE + i * PAGE, PAGE).unwrap();
        }
        for i in (0..100).rev() {
            t.unlock(&mut d, BASE + i * PAGE).unwrap();
        }
        assert_eq!(t.entries.len(), 100, "round {round}: ids reused, no growth");
    }
}

mod shared_form {
    use super::*;
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::thread;

    #[test]
    fn shared_table_follows_the_same_rules() {
        let t: SharedLockTable<FakeDriver> = SharedLockTable::new(FakeDriver::new(), 1).unwrap();
        assert_eq!(t.lock(BASE, PAGE).unwrap().outcome, LockOutcome::Pinned);
        assert_eq!(t.lock(BASE + 8, 8).unwrap().outcome, LockOutcome::Nested);
        assert!(matches!(
            t.lock(BASE + 8, PAGE),
            Err(Error::LockOverlap { .. })
        ));
        assert_eq!(
            t.lookup(BASE + 8, 8, DeviceId(0)).unwrap(),
            Some(fake_device_address(BASE + 8, 0))
        );
        assert_eq!(
            t.unlock_exact(BASE + 8),
            Err(Error::NotEntryStart {
                ptr: BASE + 8,
                entry: range(BASE, PAGE)
            })
        );
        assert_eq!(t.unlock(BASE + 8).unwrap().remaining, locks(1, 0));
        assert_eq!(t.unlock_exact(BASE).unwrap().remaining, locks(0, 0));
        let stats = t.stats();
        assert_eq!(
            (stats.driver_pins, stats.driver_unpins, stats.driver_queries),
            (1, 1, 1)
        );
        t.read(|table| assert_eq!(table.entries().count(), 0));
    }

    #[test]
    fn shared_table_keeps_a_guards_lock_from_raw_unlocks() {
        let t: SharedLockTable<FakeDriver> = SharedLockTable::new(FakeDriver::new(), 1).unwrap();
        t.lock_as(BASE, PAGE, LockOwner::Guard).unwrap();
        assert_eq!(t.lock(BASE + 8, 8).unwrap().locks, locks(1, 1));
        assert_eq!(t.unlock(BASE).unwrap().remaining, locks(0, 1));
        let before = t.read(snapshot);
        assert!(matches!(
            t.unlock(BASE),
            Err(Error::PinOwned {
                releaser: LockOwner::Raw,
                ..
            })
        ));
        assert!(matches!(t.unlock_exact(BASE), Err(Error::PinOwned { .. })));
        assert_eq!(t.read(snapshot), before, "refused unlocks changed nothing");
        assert!(t.lookup(BASE, PAGE, DeviceId(0)).unwrap().is_some());
        let last = t.unlock_as(BASE + 1, LockOwner::Guard).unwrap();
        assert_eq!(last.remaining, locks(0, 0));
        assert_eq!((t.stats().entries, t.stats().driver_unpins), (0, 1));
    }

    #[test]
    fn shared_table_driver_failures_change_nothing() {
        let mut driver = FakeDriver::new();
        driver.fail_next(CallKind::Pin);
        let t: SharedLockTable<FakeDriver> = SharedLockTable::new(driver, 1).unwrap();
        assert!(matches!(t.lock(BASE, PAGE), Err(Error::Driver(_))));
        assert_eq!(t.stats().entries, 0);
        t.lock(BASE, PAGE).unwrap();
        assert_eq!(t.release_all().unwrap(), 1);
        assert_eq!(t.stats().driver_pins, 2);
    }

    /// A driver whose pin and unpin block until the test releases them.
    struct GatedDriver {
        inner: FakeDriver,
        entered: mpsc::Sender<()>,
        release: Arc<Mutex<mpsc::Receiver<()>>>,
    }

    impl GatedDriver {
        fn gate(&self) {
            self.entered.send(()).unwrap();
            self.release.lock().unwrap().recv().unwrap();
        }
    }

    impl PinDriver for GatedDriver {
        fn pin(&mut self, r: ByteRange, p: &mut [usize]) -> Result<()> {
            self.gate();
            self.inner.pin(r, p)
        }
        fn unpin(&mut self, s: usize) -> Result<()> {
            self.gate();
            self.inner.unpin(s)
        }
        fn pinned_extent(&mut self, p: usize, d: &mut [usize]) -> Result<Option<ByteRange>> {
            self.inner.pinned_extent(p, d)
        }
    }

    #[test]
    fn lookups_proceed_while_a_writer_waits_on_the_driver() {
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let driver = GatedDriver {
            inner: FakeDriver::new(),
            entered: entered_tx,
            release: Arc::new(Mutex::new(release_rx)),
        };
        let t: Arc<SharedLockTable<GatedDriver>> =
            Arc::new(SharedLockTable::new(driver, 1).unwrap());
        release_tx.send(()).unwrap();
        t.lock(BASE, PAGE).unwrap();
        entered_rx.recv().unwrap();

        let writer = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.lock(BASE + 2 * PAGE, PAGE))
        };
        entered_rx.recv().unwrap(); // the writer is inside the driver's pin now
        // Readers are not blocked by the pending driver call.
        let reader = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.lookup(BASE + 1, 1, DeviceId(0)).unwrap())
        };
        assert!(reader.join().unwrap().is_some());
        assert_eq!(
            t.stats().entries,
            1,
            "the new entry is not visible before the pin returns"
        );
        release_tx.send(()).unwrap();
        assert_eq!(writer.join().unwrap().unwrap().outcome, LockOutcome::Pinned);
        assert_eq!(t.stats().entries, 2);
    }

    #[test]
    fn lookups_proceed_while_release_all_waits_on_the_driver() {
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let driver = GatedDriver {
            inner: FakeDriver::new(),
            entered: entered_tx,
            release: Arc::new(Mutex::new(release_rx)),
        };
        let t: Arc<SharedLockTable<GatedDriver>> =
            Arc::new(SharedLockTable::new(driver, 1).unwrap());
        for ptr in [BASE, BASE + 2 * PAGE] {
            release_tx.send(()).unwrap();
            t.lock(ptr, PAGE).unwrap();
            entered_rx.recv().unwrap();
        }

        let releaser = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.release_all())
        };
        entered_rx.recv().unwrap(); // the releaser is inside the first entry's unpin now
        let reader = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.lookup(BASE + 2 * PAGE + 1, 1, DeviceId(0)).unwrap())
        };
        assert!(
            reader.join().unwrap().is_some(),
            "the entry not yet unpinned is still found"
        );
        assert_eq!(
            t.stats().entries,
            2,
            "nothing removed before its unpin returns"
        );
        release_tx.send(()).unwrap();
        entered_rx.recv().unwrap(); // the second entry's unpin
        release_tx.send(()).unwrap();
        assert_eq!(releaser.join().unwrap(), Ok(2));
        assert_eq!(t.stats().entries, 0);
        assert_eq!(t.stats().driver_unpins, 2);
    }

    #[test]
    fn shared_release_all_keeps_the_entries_a_failed_unpin_left() {
        let mut driver = FakeDriver::new();
        driver.fail_next(CallKind::Unpin);
        let t: SharedLockTable<FakeDriver> = SharedLockTable::new(driver, 1).unwrap();
        t.lock(BASE, PAGE).unwrap();
        t.lock(BASE + 2 * PAGE, PAGE).unwrap();
        t.lock(BASE + 2 * PAGE, 8).unwrap();
        assert!(matches!(t.release_all(), Err(Error::Driver(_))));
        assert_eq!(t.stats().entries, 2, "the failed unpin removed nothing");
        assert_eq!(t.stats().driver_unpins, 1);
        assert_eq!(t.release_all(), Ok(2));
        assert_eq!(t.stats().entries, 0);
    }

    #[test]
    fn concurrent_lockers_and_readers_keep_the_table_consistent() {
        // Miri runs this (the spin locks on real threads, checked for data races): fewer rounds.
        const ROUNDS: usize = if cfg!(miri) { 20 } else { 200 };
        let t: Arc<SharedLockTable<FakeDriver>> =
            Arc::new(SharedLockTable::new(FakeDriver::new(), 1).unwrap());
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let t = Arc::clone(&t);
                thread::spawn(move || {
                    for round in 0..ROUNDS {
                        let ptr = BASE + (1 + w * 1000 + round % 10) * PAGE;
                        t.lock(ptr, PAGE).unwrap();
                        assert!(t.lookup(ptr + 1, 8, DeviceId(0)).unwrap().is_some());
                        t.lock(BASE, 8).ok(); // contended nested/new lock on a shared page
                        t.unlock(ptr).unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let shared = t.read(|table| table.find(BASE, 8).unwrap().map(|e| e.locks));
        assert_eq!(
            shared,
            Some(locks(4 * ROUNDS, 0)),
            "every nested lock on the shared page was counted"
        );
        assert_eq!(t.stats().entries, 1);
    }
}
