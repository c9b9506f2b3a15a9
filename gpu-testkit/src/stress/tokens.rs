//! Tokens: fork one buffer's token and join the branches again, and wait for a buffer's
//! last work.

use alloc::vec::Vec;

use gpu_core::backend::Backend;

use super::thread::Thread;

impl<'a, B: Backend> Thread<'a, B> {
    /// Forks a buffer's token into 2..=4 branches, waits for some, joins the rest back.
    pub(super) fn fork_join(&mut self) {
        let index = self.pick();
        let Some(token) = self.owned[index].token.take() else {
            return self.fill();
        };
        let count = 2 + self.rng.below(3);
        let Some(branches) = self.ok("fork", self.rt.fork(token, count)) else {
            return self.drop_owned(&[index]);
        };
        self.counts.forks += 1;
        let mut keep = Vec::new();
        for branch in branches {
            if keep.is_empty() || self.rng.chance(2) {
                keep.push(branch);
            } else {
                let waited = self.rt.wait(branch);
                if self.ok("wait on a branch", waited).is_some() {
                    self.counts.waits += 1;
                }
            }
        }
        let joined = self.rt.join(&mut keep);
        if joined.is_ok() {
            self.counts.joins += 1;
        }
        self.finish("join", &[index], keep, joined);
    }

    pub(super) fn wait(&mut self) {
        let index = self.pick();
        let Some(token) = self.owned[index].token.take() else {
            return self.verify();
        };
        let waited = self.rt.wait(token);
        if self.ok("wait", waited).is_some() {
            self.counts.waits += 1;
        } else {
            // A failed wait still consumed the token; the data's order is no longer known.
            self.drop_owned(&[index]);
        }
    }
}
