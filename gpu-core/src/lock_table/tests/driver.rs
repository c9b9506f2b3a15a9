//! The driver's side: a failed driver call changes nothing, and memory pinned by someone else
//! is recorded as external, never unpinned, and refused where it covers too little.

use super::*;
use crate::lock_table::model::{CallKind, fake_device_address};

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
