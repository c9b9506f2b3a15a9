//! When an event record's signal may be reused: the record signals that barrier packets wait
//! on, or that no event names any more. Pure bookkeeping over signal handles.
//!
//! Each record of an event completes a signal of its own, so a wait names exactly the record it
//! saw (as CUDA's events behave); a record's signal is superseded when the event is recorded
//! again or destroyed, and is free once its record has completed and every barrier packet that
//! waited for it has been processed (known when the waiting stream retires that barrier's
//! operation).

use std::collections::BTreeMap;

use crate::sys;

/// The record signals that are waited on or superseded.
#[derive(Debug, Default)]
pub(crate) struct RecordSignals {
    /// Barrier packets enqueued and not yet retired, per waited-on signal (by handle).
    waits: BTreeMap<u64, usize>,
    /// Signals no event names any more, kept until they may be reused.
    superseded: Vec<sys::hsa_signal_t>,
}

impl RecordSignals {
    /// A barrier packet waiting for `signal` was enqueued.
    pub(crate) fn add_wait(&mut self, signal: sys::hsa_signal_t) {
        *self.waits.entry(signal.handle).or_default() += 1;
    }

    /// A barrier packet waiting for `signal` was retired (or never enqueued after
    /// [`RecordSignals::add_wait`]). Returns `signal` when it is now free: superseded and
    /// waited for by nothing else (its record has completed, since the barrier did).
    pub(crate) fn end_wait(&mut self, signal: sys::hsa_signal_t) -> Option<sys::hsa_signal_t> {
        let count = self.waits.get_mut(&signal.handle)?;
        *count -= 1;
        if *count > 0 {
            return None;
        }
        self.waits.remove(&signal.handle);
        let at = self
            .superseded
            .iter()
            .position(|s| s.handle == signal.handle)?;
        Some(self.superseded.swap_remove(at))
    }

    /// No event names `signal` any more. Returns it when it is free at once: its record has
    /// completed (`done`) and nothing waits for it.
    pub(crate) fn supersede(
        &mut self,
        signal: sys::hsa_signal_t,
        done: bool,
    ) -> Option<sys::hsa_signal_t> {
        if done && !self.waits.contains_key(&signal.handle) {
            return Some(signal);
        }
        self.superseded.push(signal);
        None
    }

    /// The superseded signals nothing waits for whose records have completed (`done`),
    /// removed from the set.
    pub(crate) fn collect(
        &mut self,
        mut done: impl FnMut(sys::hsa_signal_t) -> bool,
    ) -> Vec<sys::hsa_signal_t> {
        let waits = &self.waits;
        let (free, kept) = self
            .superseded
            .iter()
            .partition(|s| !waits.contains_key(&s.handle) && done(**s));
        self.superseded = kept;
        free
    }

    /// Every superseded signal (for the backend's last clean-up).
    pub(crate) fn take_all(&mut self) -> Vec<sys::hsa_signal_t> {
        self.waits.clear();
        core::mem::take(&mut self.superseded)
    }

    /// Whether nothing is waited on or superseded.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.waits.is_empty() && self.superseded.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn signal(handle: u64) -> sys::hsa_signal_t {
        sys::hsa_signal_t { handle }
    }

    #[test]
    fn a_completed_unwaited_record_is_free_when_superseded() {
        let mut records = RecordSignals::default();
        assert_eq!(
            records.supersede(signal(1), true).map(|s| s.handle),
            Some(1)
        );
        assert!(records.is_empty());
    }

    #[test]
    fn a_pending_record_is_kept_until_it_completes() {
        let mut records = RecordSignals::default();
        assert!(records.supersede(signal(1), false).is_none());
        assert!(records.collect(|_| false).is_empty());
        let free: Vec<u64> = records.collect(|_| true).iter().map(|s| s.handle).collect();
        assert_eq!(free, [1]);
        assert!(records.is_empty());
    }

    #[test]
    fn a_waited_record_is_free_only_after_its_last_wait_retired() {
        let mut records = RecordSignals::default();
        records.add_wait(signal(1));
        records.add_wait(signal(1));
        // Superseded while two barriers still wait: even a completed record stays.
        assert!(records.supersede(signal(1), true).is_none());
        assert!(records.collect(|_| true).is_empty());
        assert!(records.end_wait(signal(1)).is_none());
        assert_eq!(records.end_wait(signal(1)).map(|s| s.handle), Some(1));
        assert!(records.is_empty());
    }

    #[test]
    fn waits_on_a_current_record_end_without_freeing_it() {
        let mut records = RecordSignals::default();
        records.add_wait(signal(2));
        assert!(
            records.end_wait(signal(2)).is_none(),
            "the event still names it"
        );
        assert!(records.is_empty());
        assert!(records.end_wait(signal(3)).is_none(), "never waited on");
    }

    #[test]
    fn the_last_clean_up_takes_every_superseded_signal() {
        let mut records = RecordSignals::default();
        records.add_wait(signal(4));
        records.supersede(signal(4), false);
        records.supersede(signal(5), false);
        let mut all: Vec<u64> = records.take_all().iter().map(|s| s.handle).collect();
        all.sort();
        assert_eq!(all, [4, 5]);
        assert!(records.is_empty());
    }
}
