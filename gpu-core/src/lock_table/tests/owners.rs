//! Lock owners: a guard's lock is released only by a guard, raw unlocks never unpin it;
//! release_all forgets every owner's locks; counts cannot overflow; entry ids are reused.

use alloc::string::ToString;

use super::*;
use crate::lock_table::model::CallKind;

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
