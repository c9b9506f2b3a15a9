//! The lock of each device's memory: taken with one atomic read-modify-write and released with
//! a plain store, so an allocation hit pays for one atomic operation, not two.
//!
//! `std::sync::Mutex` releases with a swap (it must learn whether a waiter sleeps on the futex);
//! with two locks per alloc+free pair that was 10 of 56 ns on the allocation hit. Here waiters
//! never sleep on a futex, so the release needs no answer: they spin briefly, then yield, then
//! sleep in growing steps, which keeps a lock held across a slow driver call (a cache miss, the
//! out-of-memory ladder) cheap for them while a hit, held for tens of nanoseconds, is never slowed.

#[cfg(not(all(loom, test)))]
use core::sync::atomic::{AtomicBool, Ordering};
// The model check (tests/loom_backoff_lock.rs) compiles this file alone over loom's atomics.
#[cfg(all(loom, test))]
use crate::loom_shim::{AtomicBool, Ordering, back_off};
use lock_api::RawMutex;
use std::time::Duration;

/// A raw mutex for [`lock_api::Mutex`]: test-and-set with a backoff that ends in sleeping.
pub(crate) struct BackoffLock {
    locked: AtomicBool,
}

/// A value behind a [`BackoffLock`].
pub(crate) type BackoffMutex<T> = lock_api::Mutex<BackoffLock, T>;

/// The holder's access to a [`BackoffMutex`].
pub(crate) type BackoffGuard<'a, T> = lock_api::MutexGuard<'a, BackoffLock, T>;

// SAFETY: `lock` returns only after this thread swapped `locked` from false to true (acquire),
// so one holder at a time; `unlock` (called by that holder) stores false with release ordering,
// so the next holder sees every write made under the lock.
unsafe impl lock_api::RawMutex for BackoffLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        locked: AtomicBool::new(false),
    };

    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        if !self.try_lock() {
            self.lock_contended();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

impl BackoffLock {
    /// Waits for the holder, reading (not writing) the flag until it looks free.
    #[cold]
    fn lock_contended(&self) {
        let mut round = 0;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                back_off(round);
                round += 1;
            }
            if self.try_lock() {
                return;
            }
        }
    }
}

/// Rounds spent spinning (1, 2, 4 .. 64 pause instructions), then yielding to the scheduler.
const SPIN_ROUNDS: u32 = 7;
const YIELD_ROUNDS: u32 = 16;
/// The first and the longest sleep once yielding did not help: the holder is in a driver call.
const FIRST_SLEEP: Duration = Duration::from_micros(10);
const LONGEST_SLEEP: Duration = Duration::from_millis(1);

/// Waits a little longer each round: the cost of waiting grows with the time already waited.
#[cfg(not(all(loom, test)))]
fn back_off(round: u32) {
    if round < SPIN_ROUNDS {
        for _ in 0..1u32 << round {
            core::hint::spin_loop();
        }
    } else if round < SPIN_ROUNDS + YIELD_ROUNDS {
        std::thread::yield_now();
    } else {
        let doublings = (round - SPIN_ROUNDS - YIELD_ROUNDS).min(7);
        std::thread::sleep((FIRST_SLEEP * (1 << doublings)).min(LONGEST_SLEEP));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use std::sync::{Arc, Barrier};

    #[test]
    fn threads_never_hold_it_at_once() {
        const THREADS: usize = 4;
        const ROUNDS: usize = 20_000;
        // A non-atomic read-modify-write under the lock loses updates unless it excludes.
        let counter = Arc::new(BackoffMutex::new(0usize));
        let start = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (counter, start) = (Arc::clone(&counter), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    for _ in 0..ROUNDS {
                        let mut value = counter.lock();
                        let read = *value;
                        std::hint::black_box(&read);
                        *value = read + 1;
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        assert_eq!(*counter.lock(), THREADS * ROUNDS);
    }

    #[test]
    fn a_waiter_behind_a_long_hold_gets_the_lock_and_sees_its_writes() {
        let shared = Arc::new(BackoffMutex::new(Vec::new()));
        let held = shared.lock();
        let waiter = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let mut list = shared.lock();
                list.push("waiter");
                list.clone()
            })
        };
        // Long enough for the waiter to pass its spinning and yielding rounds into sleeping.
        std::thread::sleep(Duration::from_millis(20));
        let mut held = held;
        held.push("holder");
        drop(held);
        assert_eq!(waiter.join().unwrap(), ["holder", "waiter"]);
        assert!(shared.try_lock().is_some(), "released after the waiter");
    }
}
