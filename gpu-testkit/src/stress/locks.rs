//! Locks of the host arena: overlapping and nested ranges, with nested, new and refused
//! locks predicted, and unlocks of what the thread locked.

use alloc::format;

use gpu_core::backend::Backend;
use gpu_core::error::Error;

use super::thread::{ARENA, ArenaLock, Thread};

impl<'a, B: Backend> Thread<'a, B> {
    /// Locks a random arena range, predicting from the thread's own entries whether it nests,
    /// is refused as overlapping, or pins anew (arenas of threads never overlap).
    pub(super) fn lock(&mut self) {
        let (start, len) = self.range(ARENA, 64 << 10);
        let inside = self
            .locks
            .iter()
            .position(|l| l.start <= start && start + len <= l.start + l.len);
        let overlaps = self
            .locks
            .iter()
            .any(|l| start < l.start + l.len && l.start < start + len);
        let ptr = self.arena.as_ptr() as usize + start;
        let locked = self.rt.lock_range(ptr, len);
        match (locked, inside, overlaps) {
            (Ok(_), Some(entry), _) => {
                self.locks[entry].count += 1;
                self.counts.nested_locks += 1;
            }
            (Ok(_), None, false) => {
                self.locks.push(ArenaLock {
                    start,
                    len,
                    count: 1,
                });
                self.counts.locks += 1;
            }
            (Err(Error::LockOverlap { .. }), None, true) => self.counts.refused_locks += 1,
            (Err(e), None, false) if self.probe.is_injected(&e) => self.counts.faulted += 1,
            (result, inside, overlaps) => self.fail(format!(
                "lock of arena [{start}, {}): expected {}, got {:?}",
                start + len,
                match (inside, overlaps) {
                    (Some(_), _) => "a nested lock",
                    (None, true) => "LockOverlap",
                    (None, false) => "a new pin",
                },
                result.map(drop)
            )),
        }
    }

    /// Unlocks one lock of a random entry through a random pointer inside it.
    pub(super) fn unlock(&mut self) {
        if self.locks.is_empty() {
            return self.lock();
        }
        let entry = self.rng.below(self.locks.len());
        let inner = self.rng.below(self.locks[entry].len);
        let ptr = self.arena.as_ptr() as usize + self.locks[entry].start + inner;
        let unlocked = self.rt.unlock_range(ptr);
        if self.ok("unlock", unlocked).is_some() {
            self.counts.unlocks += 1;
            self.locks[entry].count -= 1;
            if self.locks[entry].count == 0 {
                self.locks.swap_remove(entry);
            }
        }
    }
}
