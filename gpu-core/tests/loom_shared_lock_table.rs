//! Model checks (loom) of [`SharedLockTable`]'s two-lock protocol: every interleaving of a few
//! threads that lock, unlock, look up and release, up to loom's preemption bound, with the
//! protocol's invariants asserted in each.
//!
//! - one writer at a time: driver calls never overlap (a second call would find the first's
//!   flag set, and loom reports the unordered access to the driver's books as a data race);
//! - no lost or doubled pin: the driver never pins a pinned range nor unpins an unpinned one,
//!   and a thread that holds a lock finds its range pinned and its lookups hitting;
//! - lookups see an entry only after its pin, and until its unpin succeeded;
//! - once all threads are done, the table's entries are exactly what the driver has pinned,
//!   and the table's counts of driver calls are the driver's;
//! - no deadlock: every thread finishes in every explored order (loom fails the model when
//!   every thread is blocked on a lock).
//!
//! Built only with `RUSTFLAGS="--cfg loom"`, in its own target directory (see `.ci/run`):
//! `LOOM_MAX_PREEMPTIONS=3 cargo test --target-dir target/loom -p gpu-core --features model
//! --test loom_shared_lock_table` (seconds; with a bound of 5, 200,000 orders of one model).
#![cfg(loom)]

use std::cell::Cell;
use std::sync::OnceLock;

use gpu_core::lock_table::{LockOutcome, LockStats, PinDriver, SharedLockTable};
use gpu_core::{ByteRange, DeviceId, DriverError, Error, Result};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

// ----- a reader-writer lock over loom's primitives -----

thread_local! {
    /// Whether the model is still setting up on its first thread: only then may a lock
    /// create its state (see [`LoomRwLock`]).
    static SETTING_UP: Cell<bool> = const { Cell::new(false) };
}

/// Who holds a [`LoomRwLock`].
#[derive(Default)]
struct Holders {
    readers: usize,
    writer: bool,
}

/// A reader-writer lock built on loom's mutex and condition variable: a waiter blocks (loom
/// reports a deadlock when every thread is blocked) instead of spinning, and every hand-over
/// goes through loom's mutex, so loom sees what the lock orders. `lock_api` wants a
/// `const INIT` and loom's primitives are not `const`, so the state is created on first use,
/// which the models make on their first thread before any other starts (asserted), so that
/// creating it orders nothing.
struct LoomRwLock {
    state: OnceLock<(Mutex<Holders>, Condvar)>,
}

impl LoomRwLock {
    fn state(&self) -> &(Mutex<Holders>, Condvar) {
        self.state.get_or_init(|| {
            assert!(
                SETTING_UP.with(Cell::get),
                "prime the table's locks before starting threads"
            );
            (Mutex::new(Holders::default()), Condvar::new())
        })
    }

    fn acquire(&self, can: impl Fn(&Holders) -> bool, take: impl FnOnce(&mut Holders)) {
        let (mutex, changed) = self.state();
        let mut holders = mutex.lock().unwrap();
        while !can(&holders) {
            holders = changed.wait(holders).unwrap();
        }
        take(&mut holders);
    }

    fn try_acquire(&self, can: impl Fn(&Holders) -> bool, take: impl FnOnce(&mut Holders)) -> bool {
        let mut holders = self.state().0.lock().unwrap();
        let free = can(&holders);
        if free {
            take(&mut holders);
        }
        free
    }

    fn release(&self, give: impl FnOnce(&mut Holders)) {
        let (mutex, changed) = self.state();
        give(&mut mutex.lock().unwrap());
        changed.notify_all();
    }
}

fn no_writer(holders: &Holders) -> bool {
    !holders.writer
}

fn nobody(holders: &Holders) -> bool {
    !holders.writer && holders.readers == 0
}

// SAFETY: `lock_exclusive` returns only once nobody holds the lock and `lock_shared` only once
// no writer does, each recording itself under loom's mutex; the unlocks remove it under the
// same mutex. So one writer or any readers at a time, and the mutex orders each holder after
// the previous writer.
unsafe impl lock_api::RawRwLock for LoomRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        state: OnceLock::new(),
    };

    type GuardMarker = lock_api::GuardSend;

    fn lock_shared(&self) {
        self.acquire(no_writer, |h| h.readers += 1);
    }

    fn try_lock_shared(&self) -> bool {
        self.try_acquire(no_writer, |h| h.readers += 1)
    }

    unsafe fn unlock_shared(&self) {
        self.release(|h| {
            assert!(!h.writer && h.readers > 0, "reader unlock without a reader");
            h.readers -= 1;
        });
    }

    fn lock_exclusive(&self) {
        self.acquire(nobody, |h| h.writer = true);
    }

    fn try_lock_exclusive(&self) -> bool {
        self.try_acquire(nobody, |h| h.writer = true)
    }

    unsafe fn unlock_exclusive(&self) {
        self.release(|h| {
            assert!(
                h.writer && h.readers == 0,
                "writer unlock without the writer"
            );
            h.writer = false;
        });
    }
}

// ----- a driver that checks how it is called -----

const LEN: usize = 0x1000;
/// The ranges the models lock, apart from each other.
const RANGES: [usize; 2] = [0x10_0000, 0x20_0000];
/// Memory pinned by someone else (the driver reports it; the table never pins or unpins it).
const EXTERNAL: ByteRange = ByteRange {
    start: 0x30_0000,
    len: 4 * LEN,
};
const DEVICES: usize = 2;

/// The address device `device` uses for host address `start`.
fn device_ptr(start: usize, device: usize) -> usize {
    0x7000_0000_0000 + device * 0x1_0000_0000 + start
}

fn range_index(start: usize) -> usize {
    RANGES
        .iter()
        .position(|&r| r == start)
        .unwrap_or_else(|| panic!("the driver was asked about {start:#x}, no range of the model"))
}

/// What only driver calls touch (and the model, once every thread is joined).
#[derive(Default)]
struct Books {
    pinned: Vec<ByteRange>,
    /// Pin calls, failed ones included (as the table counts them).
    pins: u64,
    unpins: u64,
    queries: u64,
}

/// The driver's state, shared with the model's threads so they can check it.
struct DriverState {
    /// Set while a driver call runs.
    in_call: AtomicBool,
    /// Per range: pinned now.
    pinned: [AtomicBool; 2],
    /// Per range: successful pins and unpins so far.
    pins: [AtomicUsize; 2],
    unpins: [AtomicUsize; 2],
    /// The next pin fails (once).
    fail_next_pin: AtomicBool,
    books: UnsafeCell<Books>,
}

impl DriverState {
    fn new() -> Self {
        Self {
            in_call: AtomicBool::new(false),
            pinned: [AtomicBool::new(false), AtomicBool::new(false)],
            pins: [AtomicUsize::new(0), AtomicUsize::new(0)],
            unpins: [AtomicUsize::new(0), AtomicUsize::new(0)],
            fail_next_pin: AtomicBool::new(false),
            books: UnsafeCell::new(Books::default()),
        }
    }

    /// Marks a driver call as running until the returned guard drops; a call that finds
    /// another running means two writers at once.
    fn enter(&self) -> CallGuard<'_> {
        assert!(
            !self.in_call.swap(true, Ordering::Relaxed),
            "two driver calls at once: writers are not serialised"
        );
        CallGuard(&self.in_call)
    }

    /// The driver's books, read by the model's first thread once every other is joined.
    fn books<T>(&self, f: impl FnOnce(&Books) -> T) -> T {
        self.books.with(|books| f(unsafe { &*books }))
    }
}

// SAFETY: the books are touched only by driver calls, which the writer lock serialises (loom
// reports it as a data race otherwise), and read by the first thread once the others joined.
unsafe impl Sync for DriverState {}

struct CallGuard<'a>(&'a AtomicBool);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

struct Driver(Arc<DriverState>);

impl PinDriver for Driver {
    fn pin(&mut self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        let state = &*self.0;
        let _call = state.enter();
        assert_eq!(range.len, LEN);
        let index = range_index(range.start);
        // SAFETY: only driver calls touch the books; loom checks that they are ordered.
        state
            .books
            .with_mut(|books| unsafe { &mut *books }.pins += 1);
        if state.fail_next_pin.swap(false, Ordering::Relaxed) {
            return Err(Error::Driver(DriverError {
                backend: "model",
                call: "pin",
                name: "INJECTED",
                code: 1,
            }));
        }
        assert!(
            !state.pinned[index].load(Ordering::Relaxed),
            "{:#x} pinned twice",
            range.start
        );
        // SAFETY: as above.
        state
            .books
            .with_mut(|books| unsafe { &mut *books }.pinned.push(range));
        for (device, ptr) in device_ptrs.iter_mut().enumerate() {
            *ptr = device_ptr(range.start, device);
        }
        state.pins[index].fetch_add(1, Ordering::Relaxed);
        state.pinned[index].store(true, Ordering::Relaxed);
        Ok(())
    }

    fn unpin(&mut self, start: usize) -> Result<()> {
        let state = &*self.0;
        let _call = state.enter();
        let index = range_index(start);
        assert!(
            state.pinned[index].load(Ordering::Relaxed),
            "{start:#x} unpinned while not pinned"
        );
        // SAFETY: as in `pin`.
        state.books.with_mut(|books| {
            let books = unsafe { &mut *books };
            let at = books.pinned.iter().position(|r| r.start == start).unwrap();
            books.pinned.swap_remove(at);
            books.unpins += 1;
        });
        state.pinned[index].store(false, Ordering::Relaxed);
        state.unpins[index].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn pinned_extent(
        &mut self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        let state = &*self.0;
        let _call = state.enter();
        // SAFETY: as in `pin`.
        state
            .books
            .with_mut(|books| unsafe { &mut *books }.queries += 1);
        if EXTERNAL.contains(&ByteRange { start: ptr, len: 1 }) {
            for (device, out) in device_ptrs.iter_mut().enumerate() {
                *out = device_ptr(EXTERNAL.start, device);
            }
            return Ok(Some(EXTERNAL));
        }
        Ok(None)
    }
}

// ----- the models -----

type Table = SharedLockTable<Driver, LoomRwLock>;

/// Runs `model` in every explored interleaving, on a fresh table and driver each time.
/// Fails if loom found a single ordering only (the threads never met).
fn check(model: impl Fn(Arc<Table>, Arc<DriverState>) + Sync + Send + 'static) {
    let explored = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&explored);
    loom::model(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let state = Arc::new(DriverState::new());
        let table = Arc::new(Table::new(Driver(Arc::clone(&state)), DEVICES).unwrap());
        // Creates both locks' atomics here, before any other thread starts.
        SETTING_UP.with(|s| s.set(true));
        assert_eq!(table.release_all(), Ok(0));
        SETTING_UP.with(|s| s.set(false));
        model(Arc::clone(&table), Arc::clone(&state));
        assert_quiet_and_agreeing(&table, &state);
    });
    let explored = explored.load(std::sync::atomic::Ordering::Relaxed);
    println!("{explored} interleavings explored");
    assert!(explored > 1, "the model's threads never raced");
}

/// A thread holding a lock on `start`: the driver has the range pinned, and lookups on every
/// device hit with the driver's addresses.
fn assert_held(table: &Table, state: &DriverState, start: usize) {
    assert!(
        state.pinned[range_index(start)].load(Ordering::Relaxed),
        "{start:#x} is locked but not pinned: a pin was lost"
    );
    for device in 0..DEVICES {
        assert_eq!(
            table.lookup(start + 8, 8, DeviceId(device as u32)),
            Ok(Some(device_ptr(start, device) + 8)),
            "lookup while locked"
        );
    }
}

/// With every thread joined: the table's entries are exactly the driver's pins (besides the
/// external memory), its counters match the driver's books, and no range stays pinned twice.
fn assert_quiet_and_agreeing(table: &Table, state: &DriverState) {
    let (mut entries, stats) = table.read(|t| {
        let entries: Vec<ByteRange> = t
            .entries()
            .filter(|e| !e.external)
            .map(|e| e.range)
            .collect();
        (entries, t.stats())
    });
    state.books(|books| {
        let mut pinned = books.pinned.clone();
        pinned.sort_by_key(|r| r.start);
        entries.sort_by_key(|r| r.start);
        assert_eq!(entries, pinned, "the table's entries are the driver's pins");
        assert_eq!(
            (stats.driver_pins, stats.driver_unpins, stats.driver_queries),
            (books.pins, books.unpins, books.queries),
            "the table counted the driver's calls"
        );
    });
    for (index, &start) in RANGES.iter().enumerate() {
        let pinned = entries.iter().any(|r| r.start == start);
        assert_eq!(state.pinned[index].load(Ordering::Relaxed), pinned);
    }
}

fn assert_empty(stats: LockStats) {
    assert_eq!(
        (stats.entries, stats.held.total(), stats.bytes_locked),
        (0, 0, 0),
        "every lock was released: {stats:?}"
    );
}

/// Two threads lock the same new range at once: one pins it, the other nests in it or pins
/// it again after the first unlocked, never both pinning it at once.
#[test]
fn two_lockers_of_a_new_range_pin_it_once() {
    check(|table, state| {
        let start = RANGES[0];
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (table, state) = (Arc::clone(&table), Arc::clone(&state));
                thread::spawn(move || {
                    let locked = table.lock(start, LEN).unwrap();
                    assert!(matches!(
                        locked.outcome,
                        LockOutcome::Pinned | LockOutcome::Nested
                    ));
                    assert_held(&table, &state, start);
                    let unlocked = table.unlock(start).unwrap();
                    assert!(unlocked.remaining.total() <= 1);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let stats = table.stats();
        assert_empty(stats);
        assert!(matches!(stats.driver_pins, 1 | 2));
        assert_eq!(stats.driver_pins, stats.driver_unpins);
        assert_eq!(stats.nested_locks, 2 - stats.driver_pins);
    });
}

/// The last unlock of an entry races a lock nested in it: either the lock nests (and the
/// unlock leaves the pin to it) or the unlock unpins first and the lock pins anew. The
/// classic lost pin, a nested count on an unpinned range, never happens.
#[test]
fn the_last_unlock_races_a_nested_lock() {
    check(|table, state| {
        let start = RANGES[0];
        table.lock(start, LEN).unwrap();
        let unlocker = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let unlocked = table.unlock(start).unwrap();
                assert!(unlocked.remaining.total() <= 1);
            })
        };
        let locker = {
            let (table, state) = (Arc::clone(&table), Arc::clone(&state));
            thread::spawn(move || {
                // Nests while the entry exists, and pins the range anew otherwise.
                table.lock(start, LEN).unwrap();
                assert_held(&table, &state, start);
                table.unlock(start + 16).unwrap();
            })
        };
        unlocker.join().unwrap();
        locker.join().unwrap();
        let stats = table.stats();
        assert_empty(stats);
        assert_eq!(stats.driver_pins, stats.driver_unpins);
        assert_eq!(stats.driver_pins, 2 - stats.nested_locks);
    });
}

/// A reader looks a range up while a writer locks and unlocks it: a hit comes only after the
/// pin and carries the driver's address; a miss after the lock returned comes only once the
/// unpin succeeded; after the unlock returned, lookups miss.
#[test]
fn lookups_see_an_entry_from_its_pin_to_its_unpin() {
    check(|table, state| {
        let start = RANGES[0];
        let index = range_index(start);
        let locked = Arc::new(AtomicBool::new(false));
        let unlocked = Arc::new(AtomicBool::new(false));
        let writer = {
            let (table, locked, unlocked) = (
                Arc::clone(&table),
                Arc::clone(&locked),
                Arc::clone(&unlocked),
            );
            thread::spawn(move || {
                table.lock(start, LEN).unwrap();
                locked.store(true, Ordering::Release);
                table.unlock(start).unwrap();
                unlocked.store(true, Ordering::Release);
            })
        };
        let reader = {
            let (table, state) = (Arc::clone(&table), Arc::clone(&state));
            thread::spawn(move || {
                let was_unlocked = unlocked.load(Ordering::Acquire);
                let was_locked = locked.load(Ordering::Acquire);
                let hit = table.read(|t| {
                    let hit = t.lookup(start, LEN, DeviceId(1)).unwrap();
                    match hit {
                        Some(ptr) => {
                            assert_eq!(ptr, device_ptr(start, 1));
                            assert_eq!(
                                state.pins[index].load(Ordering::Relaxed),
                                1,
                                "an entry is visible only after its pin"
                            );
                        }
                        None if was_locked => assert_eq!(
                            state.unpins[index].load(Ordering::Relaxed),
                            1,
                            "a locked entry stays visible until its unpin succeeded"
                        ),
                        None => {}
                    }
                    hit
                });
                if was_unlocked {
                    assert_eq!(hit, None, "a lookup after the unlock returned");
                }
            })
        };
        writer.join().unwrap();
        reader.join().unwrap();
        assert_empty(table.stats());
    });
}

/// A pin that fails while another thread locks the same range: exactly one lock fails, the
/// table is left as it was by the failure, and the other lock pins the range.
#[test]
fn a_failed_pin_leaves_nothing_for_the_next_writer() {
    check(|table, state| {
        let start = RANGES[1];
        state.fail_next_pin.store(true, Ordering::Relaxed);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (table, state) = (Arc::clone(&table), Arc::clone(&state));
                thread::spawn(move || {
                    let Ok(locked) = table.lock(start, LEN) else {
                        return;
                    };
                    assert_eq!(locked.outcome, LockOutcome::Pinned);
                    assert_held(&table, &state, start);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let stats = table.stats();
        assert_eq!((stats.entries, stats.held.total()), (1, 1), "{stats:?}");
        assert_eq!(stats.driver_pins, 2, "one failed pin, one that succeeded");
        assert_eq!(table.unlock(start).map(|u| u.remaining.total()), Ok(0));
    });
}

/// Shutdown's `release_all` races a lock of a new range and a lock of memory pinned by
/// someone else: each lock lands wholly before or after it; what stays is pinned, what went
/// is unpinned (never the external memory).
#[test]
fn release_all_races_locks() {
    check(|table, _state| {
        let start = RANGES[0];
        let pinner = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let locked = table.lock(start, LEN).unwrap();
                assert_eq!(locked.outcome, LockOutcome::Pinned);
            })
        };
        let external = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let locked = table.lock(EXTERNAL.start + LEN, LEN).unwrap();
                assert_eq!(locked.outcome, LockOutcome::External);
                assert_eq!(locked.entry, EXTERNAL);
            })
        };
        let released = table.release_all().unwrap();
        pinner.join().unwrap();
        external.join().unwrap();
        let stats = table.stats();
        assert_eq!(stats.driver_pins, 1);
        assert_eq!(stats.driver_unpins as usize, released);
        let still_locked = table.read(|t| t.find(start, LEN).unwrap().is_some());
        assert_eq!(
            still_locked,
            released == 0,
            "released exactly when it came after"
        );
    });
}
