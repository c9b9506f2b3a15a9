//! Model check (loom) of the runtime's own lock, `runtime/lock.rs`'s `BackoffLock` (the lock of
//! each device's memory): the file itself, compiled here over loom's atomics, in every
//! interleaving of a few threads up to loom's preemption bound, and in every order of memory
//! effects its acquire and release orderings allow.
//!
//! - mutual exclusion: two holders at once would touch the guarded value without the lock
//!   ordering them, which loom reports as a data race (and the count would come out short);
//! - the release publishes: each holder sees every write of the previous one (the same data
//!   race check: a weaker ordering fails it);
//! - `try_lock` never succeeds while the lock is held;
//! - progress: every waiter gets the lock in every explored order (a waiter that never did
//!   would exceed loom's branch limit and fail the model).
//!
//! Under the model every round of `back_off` is one yield to loom's scheduler (loom needs spin
//! loops to yield; how long a real waiter spins or sleeps changes no ordering).
//!
//! Built only with `RUSTFLAGS="--cfg loom"`, in its own target directory (see `.ci/run`):
//! `LOOM_MAX_PREEMPTIONS=3 cargo test --target-dir target/loom -p gpu-rt --test loom_backoff_lock`.
#![cfg(loom)]

use std::sync::OnceLock;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

// Items the runtime uses and the model does not (the backoff's timings, the guard type).
#[allow(dead_code, unused_imports)]
#[path = "../src/runtime/lock.rs"]
mod lock;

use lock::{BackoffLock, BackoffMutex};

/// What `lock.rs` takes from here under `cfg(all(loom, test))` instead of core's atomics.
mod loom_shim {
    use std::cell::Cell;

    use super::OnceLock;
    pub(crate) use loom::sync::atomic::Ordering;

    thread_local! {
        /// Whether the model is still setting up on its first thread: only then may a lock
        /// create its atomic.
        pub(crate) static SETTING_UP: Cell<bool> = const { Cell::new(false) };
    }

    /// loom's `AtomicBool` behind a `const fn new`, as `BackoffLock::INIT` needs (loom's own
    /// atomics are not `const`). The loom atomic is created on first use, which the models
    /// make on their first thread before any other starts (asserted), so that creating it
    /// orders nothing; every operation after that is loom's, with the caller's ordering.
    pub(crate) struct AtomicBool {
        initial: bool,
        atomic: OnceLock<loom::sync::atomic::AtomicBool>,
    }

    impl AtomicBool {
        pub(crate) const fn new(initial: bool) -> Self {
            Self {
                initial,
                atomic: OnceLock::new(),
            }
        }

        fn atomic(&self) -> &loom::sync::atomic::AtomicBool {
            self.atomic.get_or_init(|| {
                assert!(
                    SETTING_UP.with(Cell::get),
                    "prime the lock before starting threads"
                );
                loom::sync::atomic::AtomicBool::new(self.initial)
            })
        }

        pub(crate) fn load(&self, order: Ordering) -> bool {
            self.atomic().load(order)
        }

        pub(crate) fn store(&self, value: bool, order: Ordering) {
            self.atomic().store(value, order);
        }

        pub(crate) fn compare_exchange(
            &self,
            current: bool,
            new: bool,
            success: Ordering,
            failure: Ordering,
        ) -> Result<bool, bool> {
            self.atomic()
                .compare_exchange(current, new, success, failure)
        }
    }

    /// One round of waiting: a yield to loom's scheduler, so that the holder runs.
    pub(crate) fn back_off(_round: u32) {
        loom::thread::yield_now();
    }
}

/// A lock as the runtime makes it (`lock_api::Mutex::new`, so `BackoffLock::INIT`), guarding a
/// loom cell whose accesses loom checks for data races.
type Counter = BackoffMutex<UnsafeCell<usize>>;

/// Runs `model` in every explored interleaving on a fresh lock; fails if loom found a single
/// ordering only (the threads never met).
fn check(model: impl Fn(Arc<Counter>) + Sync + Send + 'static) {
    let explored = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&explored);
    loom::model(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let counter = Arc::new(Counter::new(UnsafeCell::new(0)));
        // Creates the lock's atomic here, before any other thread starts.
        loom_shim::SETTING_UP.with(|s| s.set(true));
        drop(counter.lock());
        loom_shim::SETTING_UP.with(|s| s.set(false));
        model(counter);
    });
    let explored = explored.load(std::sync::atomic::Ordering::Relaxed);
    println!("{explored} interleavings explored");
    assert!(explored > 1, "the model's threads never raced");
}

/// A non-atomic read-modify-write under the lock.
fn increment(counter: &Counter) {
    let guard = counter.lock();
    // SAFETY: the lock excludes other holders; loom reports it otherwise.
    guard.with_mut(|value| unsafe { *value += 1 });
}

fn value(counter: &Counter) -> usize {
    let guard = counter.lock();
    // SAFETY: as in `increment`.
    guard.with(|value| unsafe { *value })
}

/// Two threads take the lock twice each: no two holders at once, each sees the last one's
/// write, and no increment is lost. Taking it twice lets a waiter that saw the lock free lose
/// it again to the other thread and go back to waiting.
///
/// Two threads, not more: with two waiters loom also explores the unfair schedules in which
/// they take turns yielding to each other forever while the holder never runs, and such a
/// model never ends (for any spin lock); the lock's single compare-exchange decides between
/// any number of waiters the way it decides between two.
#[test]
fn holders_exclude_each_other_and_see_each_others_writes() {
    check(|counter| {
        let other = {
            let counter = Arc::clone(&counter);
            thread::spawn(move || {
                increment(&counter);
                increment(&counter);
            })
        };
        increment(&counter);
        increment(&counter);
        other.join().unwrap();
        assert_eq!(value(&counter), 4);
    });
}

/// `try_lock` succeeds only while nobody holds the lock, and a successful one is a holder
/// like any other (ordered after the previous holder, before the next).
#[test]
fn try_lock_never_succeeds_while_the_lock_is_held() {
    check(|counter| {
        let trier = {
            let counter = Arc::clone(&counter);
            thread::spawn(move || {
                if let Some(guard) = counter.try_lock() {
                    // SAFETY: as in `increment`.
                    guard.with_mut(|value| unsafe { *value += 10 });
                }
            })
        };
        increment(&counter);
        trier.join().unwrap();
        assert!(matches!(value(&counter), 1 | 11));
    });
}

/// The raw lock as the runtime's `lock_api` calls it: lock, unlock, lock again on another
/// thread; a waiter behind a holder gets the lock once it is released.
#[test]
fn a_waiter_gets_the_lock_after_the_holder_releases_it() {
    loom::model(|| {
        let flag = Arc::new(UnsafeCell::new(false));
        let raw = Arc::new(<BackoffLock as lock_api::RawMutex>::INIT);
        loom_shim::SETTING_UP.with(|s| s.set(true));
        lock_api::RawMutex::lock(&*raw);
        loom_shim::SETTING_UP.with(|s| s.set(false));
        let waiter = {
            let (raw, flag) = (Arc::clone(&raw), Arc::clone(&flag));
            thread::spawn(move || {
                lock_api::RawMutex::lock(&*raw);
                // SAFETY: the holder wrote it before its unlock, which this lock follows.
                assert!(
                    flag.with(|f| unsafe { *f }),
                    "the waiter saw the holder's write"
                );
                // SAFETY: this thread holds the lock.
                unsafe { lock_api::RawMutex::unlock(&*raw) };
            })
        };
        // SAFETY: this thread holds the lock.
        flag.with_mut(|f| unsafe { *f = true });
        unsafe { lock_api::RawMutex::unlock(&*raw) };
        waiter.join().unwrap();
        assert!(
            lock_api::RawMutex::try_lock(&*raw),
            "free once both are done"
        );
    });
}
