//! Ranges: new ranges pin once, nested locks count in software, bad and overlapping ranges
//! are refused before the driver runs, lookups hit only inside one entry, and unlocks.

use super::*;
use crate::lock_table::model::{CallKind, fake_device_address};

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
