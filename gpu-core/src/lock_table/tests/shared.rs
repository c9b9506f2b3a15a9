//! The shared (thread-safe) form: the same rules, a guard's lock kept from raw unlocks, and
//! failures changing nothing.
//!
//! Also: lookups never wait on a writer's driver call, and concurrent lockers and readers keep
//! the table consistent.

use super::*;
use crate::lock_table::model::{CallKind, fake_device_address};
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

/// A shared table over a gated driver with a page locked at each of `starts` (each pin let
/// through), and the test's ends of the gate: told on the first when a driver call is inside,
/// which goes on when the second sends.
fn gated_table(
    starts: &[usize],
) -> (
    Arc<SharedLockTable<GatedDriver>>,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
) {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let driver = GatedDriver {
        inner: FakeDriver::new(),
        entered: entered_tx,
        release: Arc::new(Mutex::new(release_rx)),
    };
    let t: Arc<SharedLockTable<GatedDriver>> = Arc::new(SharedLockTable::new(driver, 1).unwrap());
    for &ptr in starts {
        release_tx.send(()).unwrap();
        t.lock(ptr, PAGE).unwrap();
        entered_rx.recv().unwrap();
    }
    (t, entered_rx, release_tx)
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
    let (t, entered_rx, release_tx) = gated_table(&[BASE]);

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
    let (t, entered_rx, release_tx) = gated_table(&[BASE, BASE + 2 * PAGE]);

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
