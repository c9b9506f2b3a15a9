//! The shared (thread-safe) form: the same rules, a guard's lock kept from raw unlocks, and
//! failures changing nothing.
//!
//! Also: lookups never wait on a writer's driver call, and concurrent lockers and readers keep
//! the table consistent.

use super::*;
use crate::lock_table::model::{CallKind, fake_device_address};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::vec::Vec;

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

/// Lookups take no lock: while writers lock and unlock ranges around them (splitting and
/// merging chunks, growing the index's arrays from empty), every answer is one the table held
/// at some moment: a page locked throughout is always found at its device address, a page
/// never locked never is, and a page that comes and goes is found at its address or missed.
#[test]
fn lock_free_lookups_never_see_a_torn_table() {
    // Miri runs this (the store's atomics on real threads, checked for data races and for
    // reads of freed memory): fewer rounds.
    const ROUNDS: usize = if cfg!(miri) { 12 } else { 2000 };
    const WRITERS: usize = 2;
    let t: Arc<SharedLockTable<FakeDriver>> =
        Arc::new(SharedLockTable::new(FakeDriver::new(), 2).unwrap());
    // Pages 0, 4, 8, ..: locked throughout; 2, 6, ..: never; odd pages come and go.
    let page = |index: usize| BASE + index * PAGE;
    // 64 steady pages make more than 8 chunks: the top arrays outgrow their first copy.
    let steady: Vec<usize> = (0..64).map(|i| page(4 * i)).collect();
    let (steady_locked, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    // Churn in address order and against it, so chunks fill, split and merge.
                    let odd = |k: usize| page(2 * ((w + k * WRITERS) % 128) + 1);
                    let pages: Vec<usize> = (0..8).map(|k| odd(k + round)).collect();
                    for &p in &pages {
                        t.lock(p, PAGE).unwrap();
                    }
                    for &p in pages.iter().rev() {
                        t.unlock(p).unwrap();
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (t, steady_locked) = (Arc::clone(&t), Arc::clone(&steady_locked));
            let done = Arc::clone(&done);
            thread::spawn(move || {
                let mut lookups = 0usize;
                while !done.load(Ordering::Relaxed) || lookups < 64 {
                    let index = (lookups * 7 + r) % 258;
                    let (ptr, device) = (page(index) + 8, DeviceId((lookups % 2) as u32));
                    let steady = index.is_multiple_of(4)
                        && index < 256
                        && steady_locked.load(Ordering::Acquire);
                    let found = t.lookup(ptr, 16, device).unwrap();
                    let expected = fake_device_address(ptr, device.index());
                    match index % 4 {
                        0 if steady => assert_eq!(found, Some(expected), "steady page"),
                        2 => assert_eq!(found, None, "never locked"),
                        _ => assert!(found.is_none() || found == Some(expected), "churned"),
                    }
                    lookups += 1;
                }
                lookups
            })
        })
        .collect();
    // The steady pages, locked once the churn has begun (so the arrays grow under readers);
    // readers expect them from when all are locked.
    for &p in &steady {
        t.lock(p, PAGE).unwrap();
    }
    steady_locked.store(true, Ordering::Release);
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() >= 64);
    }
    t.read(|table| {
        let starts: Vec<usize> = table.entries().map(|e| e.range.start).collect();
        assert_eq!(starts, steady, "only the steady pages are left");
    });
}

/// A lookup that keeps overlapping a writer's change reads under the table's lock instead,
/// and answers as the table does.
#[test]
fn a_lookup_overlapping_changes_reads_under_the_lock() {
    let t: SharedLockTable<FakeDriver> = SharedLockTable::new(FakeDriver::new(), 1).unwrap();
    t.lock(BASE, PAGE).unwrap();
    let store = t.read(|table| Arc::clone(table.store()));
    let change = store.write(); // a change in progress: every lock-free read fails
    assert_eq!(store.read_unchanged(|store| store.devices()), None);
    assert_eq!(
        t.lookup(BASE + 8, 8, DeviceId(0)).unwrap(),
        Some(fake_device_address(BASE + 8, 0))
    );
    assert_eq!(t.lookup(BASE + PAGE, 8, DeviceId(0)).unwrap(), None);
    drop(change);
    assert_eq!(store.read_unchanged(|store| store.devices()), Some(1));
}
