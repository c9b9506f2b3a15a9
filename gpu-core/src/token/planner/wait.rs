//! Ending tokens: host waits (in one call, or begun and ended around a blocking call),
//! releases and discards, and giving back the stream or fork-event share a token held.

use super::Planner;
use super::report::UnwaitedKind;
use super::state::Hold;
use super::steps::{PendingWait, PlanStep};
use crate::error::Result;
use crate::id::EventId;
use crate::token::handle::Token;

impl Planner {
    /// Blocks the host on `token` (a stream or event synchronisation) and releases what it
    /// held.
    pub fn wait(&mut self, token: Token) -> Result<()> {
        let pending = self.begin_wait(token)?;
        self.steps.push(match pending {
            PendingWait::Stream(stream) => PlanStep::SynchronizeStream { stream },
            PendingWait::Event(event) => PlanStep::SynchronizeEvent { event },
        });
        self.end_wait(pending);
        Ok(())
    }

    /// The first half of [`Planner::wait`], for a caller that blocks outside the lock guarding
    /// the planner: consumes `token` and returns what to synchronise, which stays out of the
    /// pools (no other operation gets the stream, no fork re-records the event) until
    /// [`Planner::end_wait`]. Plans no step.
    ///
    /// # Errors
    /// [`Error::TokenForeign`](crate::Error::TokenForeign),
    /// [`Error::TokenConsumed`](crate::Error::TokenConsumed) or
    /// [`Error::TokenUnknown`](crate::Error::TokenUnknown) for a token this planner does not
    /// hold live; nothing changes then.
    pub fn begin_wait(&mut self, token: Token) -> Result<PendingWait> {
        let slot = self.validate(token.id())?;
        let pending = self.held_by(slot);
        self.free_slot(slot);
        Ok(pending)
    }

    /// Ends a wait begun with [`Planner::begin_wait`]: what it held goes back to the pools.
    #[inline(always)]
    pub fn end_wait(&mut self, pending: PendingWait) {
        match pending {
            PendingWait::Stream(stream) => self.release_stream(stream),
            PendingWait::Event(event) => self.release_event_share(event),
        }
    }

    /// Ends `token` without waiting and without noting it in the program's report: for a
    /// token whose work is observed through another token (a fork branch of the same point)
    /// or that its holder gave up on purpose (an MLIR event destroyed). What it held goes back
    /// to the pools.
    pub fn release(&mut self, token: Token) -> Result<()> {
        let slot = self.validate(token.id())?;
        self.release_hold(slot);
        self.free_slot(slot);
        Ok(())
    }

    /// What a live token would have the host synchronise, without consuming it (for the
    /// runtime's `wait_if_done`: it asks the driver whether that is done, and only then waits).
    ///
    /// # Errors
    /// As [`Planner::begin_wait`].
    pub fn pending_of(&self, token: &Token) -> Result<PendingWait> {
        Ok(self.held_by(self.validate(token.id())?))
    }

    /// Ends `token` without waiting: releases what it held and notes it in the program's
    /// report, since an asynchronous error it carries is no longer observed by anyone.
    pub fn discard(&mut self, token: Token) -> Result<()> {
        let slot = self.validate(token.id())?;
        self.note_unwaited(slot, UnwaitedKind::Discarded);
        self.release_hold(slot);
        self.free_slot(slot);
        Ok(())
    }

    /// What a live token holds: its stream, or its share of a fork event.
    #[inline(always)]
    fn held_by(&self, slot: u32) -> PendingWait {
        let state = &self.tokens[slot as usize];
        match state.hold {
            Hold::Stream => PendingWait::Stream(state.stream),
            Hold::ForkEvent(event) => PendingWait::Event(event),
        }
    }

    /// Gives back what a token holds (as the end of a wait on it does).
    #[inline(always)]
    pub(super) fn release_hold(&mut self, slot: u32) {
        self.end_wait(self.held_by(slot));
    }

    /// Gives back one share of a fork event; the last one returns the event to its pool.
    #[inline(always)]
    fn release_event_share(&mut self, event: EventId) {
        let shares = &mut self.events[event.index()].shares;
        *shares -= 1;
        if *shares == 0 {
            self.release_event(event);
        }
    }
}
