//! One stress thread: the buffers it owns with what each must hold, its host arena and locks,
//! the random choices it makes, and how it ends an operation, failed or not.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_core::error::Result;
use gpu_core::id::DeviceId;
use gpu_core::seeded::SplitMix64;
use gpu_core::token::Token;
use gpu_rt::runtime::{Buffer, Runtime};

use super::config::StressConfig;
use super::probe::Probe;
use super::report::OpCounts;

/// Bytes of each thread's host arena (locked in ranges, uploaded from).
pub(super) const ARENA: usize = 256 << 10;
/// Failures each thread describes (later ones are only counted).
const FAILURES_KEPT: usize = 16;

/// A buffer a thread owns: what it must hold, and the token of the last work on it.
pub(super) struct Owned<'rt, B: Backend> {
    pub(super) buffer: Buffer<'rt, B>,
    pub(super) expect: Vec<u8>,
    pub(super) token: Option<Token>,
}

/// A range of the arena this thread locked, and how many times.
pub(super) struct ArenaLock {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) count: usize,
}

/// What one thread ends with.
pub(super) struct Done {
    pub(super) counts: OpCounts,
    pub(super) failures: Vec<String>,
    pub(super) failure_count: u64,
}

pub(super) struct Thread<'a, B: Backend> {
    pub(super) rt: &'a Runtime<B>,
    pub(super) probe: &'a dyn Probe,
    pub(super) config: &'a StressConfig,
    pub(super) rng: SplitMix64,
    pub(super) owned: Vec<Owned<'a, B>>,
    pub(super) arena: Vec<u8>,
    pub(super) locks: Vec<ArenaLock>,
    pub(super) counts: OpCounts,
    pub(super) failures: Vec<String>,
    pub(super) failure_count: u64,
}

impl<'a, B: Backend> Thread<'a, B> {
    pub(super) fn new(
        rt: &'a Runtime<B>,
        probe: &'a dyn Probe,
        config: &'a StressConfig,
        seed: u64,
    ) -> Self {
        let mut rng = SplitMix64::new(seed);
        let arena = (0..ARENA).map(|_| rng.next_u64() as u8).collect();
        Self {
            rt,
            probe,
            config,
            rng,
            owned: Vec::new(),
            arena,
            locks: Vec::new(),
            counts: OpCounts::default(),
            failures: Vec::new(),
            failure_count: 0,
        }
    }

    pub(super) fn run(mut self, started: Instant, stop: &AtomicBool) -> Done {
        while started.elapsed() < self.config.duration && !stop.load(Ordering::Acquire) {
            self.step();
        }
        self.release_all();
        Done {
            counts: self.counts,
            failures: self.failures,
            failure_count: self.failure_count,
        }
    }

    /// One operation, picked at random (allocation when the thread owns nothing).
    fn step(&mut self) {
        if self.owned.is_empty() {
            return self.alloc();
        }
        match self.rng.below(100) {
            0..=9 => self.alloc(),
            10..=16 => self.free(),
            17..=28 => self.fill(),
            29..=42 => self.copy(),
            43..=50 => self.upload(),
            51..=60 => self.launch(),
            61..=67 => self.fork_join(),
            68..=72 => self.wait(),
            73..=80 => self.lock(),
            81..=86 => self.unlock(),
            87 => self.trim(),
            _ => self.verify(),
        }
    }

    /// The value of `result`, or `None` after noting its error (an injected fault is counted;
    /// any other error is a failure).
    pub(super) fn ok<T>(&mut self, what: &str, result: Result<T>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) if self.probe.is_injected(&e) => {
                self.counts.faulted += 1;
                None
            }
            Err(e) => {
                self.fail(format!("{what}: unexpected error: {e}"));
                None
            }
        }
    }

    pub(super) fn fail(&mut self, why: String) {
        self.failure_count += 1;
        if self.failures.len() < FAILURES_KEPT {
            self.failures.push(why);
        }
    }

    /// Waits for tokens a failed call left unconsumed.
    pub(super) fn settle(&mut self, tokens: Vec<Token>) {
        for token in tokens {
            let waited = self.rt.wait(token);
            if self.ok("wait after a failure", waited).is_some() {
                self.counts.waits += 1;
            }
        }
    }

    /// Ends an operation on buffers `picked` whose tokens went into `after`: on success each
    /// gets a branch of `token`; on failure the tokens left in `after` are waited for, and a
    /// buffer whose token the failed call consumed (its last work is no longer ordered for
    /// this thread) or whose bytes it may have changed part-way is freed.
    pub(super) fn finish(
        &mut self,
        what: &str,
        picked: &[usize],
        after: Vec<Token>,
        result: Result<Token>,
    ) {
        let Some(token) = self.ok(what, result) else {
            let consumed = after.is_empty();
            self.settle(after);
            if consumed {
                self.drop_owned(picked);
            }
            return;
        };
        if picked.len() == 1 {
            self.owned[picked[0]].token = Some(token);
            return;
        }
        let forked = self.rt.fork(token, picked.len());
        match self.ok("fork after an operation", forked) {
            Some(branches) => {
                self.counts.forks += 1;
                for (&index, branch) in picked.iter().zip(branches) {
                    self.owned[index].token = Some(branch);
                }
            }
            None => self.drop_owned(picked),
        }
    }

    /// [`Thread::finish`] for an operation that may fail part-way: on failure the buffer's
    /// bytes are unknown, so it is freed.
    pub(super) fn finish_or_forget(
        &mut self,
        what: &str,
        index: usize,
        after: Vec<Token>,
        result: Result<Token>,
    ) {
        if result.is_ok() {
            return self.finish(what, &[index], after, result);
        }
        let _ = self.ok(what, result);
        self.settle(after);
        self.drop_owned(&[index]);
    }

    /// Frees the buffers at `indices` (their pending work orders the free).
    pub(super) fn drop_owned(&mut self, indices: &[usize]) {
        let mut sorted = indices.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        for index in sorted {
            let owned = self.owned.swap_remove(index);
            self.release(owned);
        }
    }

    pub(super) fn release(&mut self, owned: Owned<'a, B>) {
        let Owned { buffer, token, .. } = owned;
        let freed = if self.rng.chance(2) {
            self.rt.free(buffer)
        } else {
            drop(buffer);
            Ok(())
        };
        if self.ok("free", freed).is_some() {
            self.counts.frees += 1;
        }
        // The free is ordered after the work; waiting afterwards checks that is so.
        self.settle(token.into_iter().collect());
    }

    fn release_all(&mut self) {
        while let Some(owned) = self.owned.pop() {
            self.release(owned);
        }
        while let Some(lock) = self.locks.pop() {
            let ptr = self.arena.as_ptr() as usize + lock.start;
            for _ in 0..lock.count {
                // An injected fault on the last unlock leaves the entry: try until it goes.
                for _ in 0..8 {
                    let unlocked = self.rt.unlock_range(ptr);
                    if self.ok("unlock at the end", unlocked).is_some() {
                        self.counts.unlocks += 1;
                        break;
                    }
                }
            }
        }
    }

    pub(super) fn device(&mut self) -> DeviceId {
        DeviceId(self.rng.below(self.rt.device_count()) as u32)
    }

    /// The device that runs work on `owned` (its own for device memory, any for host kinds).
    pub(super) fn device_for(&mut self, index: usize) -> DeviceId {
        let buffer = &self.owned[index].buffer;
        if buffer.kind() == MemoryKind::Device {
            buffer.device()
        } else {
            self.device()
        }
    }

    /// A size: mostly small, some mid-size, a few up to `largest`.
    pub(super) fn size(&mut self) -> usize {
        let largest = self.config.largest;
        let bound = match self.rng.below(20) {
            0 => largest,
            1..=4 => (largest / 16).max(64),
            _ => 4096.min(largest),
        };
        64 + self.rng.below(bound - 63)
    }

    /// A random non-empty `[offset, offset + len)` inside `size` bytes, at most `most` long.
    pub(super) fn range(&mut self, size: usize, most: usize) -> (usize, usize) {
        let len = 1 + self.rng.below(size.min(most));
        (self.rng.below(size - len + 1), len)
    }

    pub(super) fn pick(&mut self) -> usize {
        self.rng.below(self.owned.len())
    }

    pub(super) fn take_token(&mut self, index: usize) -> Vec<Token> {
        self.owned[index].token.take().into_iter().collect()
    }
}
