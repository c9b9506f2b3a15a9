//! Ending tokens: host waits (in one call, or begun and ended around a blocking call), what
//! they have seen complete, releases and discards, and giving back what a token held.

use super::Planner;
use super::clock::Clock;
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
        self.end_wait(pending, true);
        Ok(())
    }

    /// The first half of [`Planner::wait`], for a caller that blocks outside the lock guarding
    /// the planner: consumes `token` and returns what to synchronise, which stays out of the
    /// pools (no other operation gets the stream, no fork re-records the event) until
    /// [`Planner::end_wait`]. Plans at most one step, the record of a fork branch's event that
    /// nothing needed before: carry it out before blocking.
    ///
    /// # Errors
    /// [`Error::TokenForeign`](crate::Error::TokenForeign),
    /// [`Error::TokenConsumed`](crate::Error::TokenConsumed) or
    /// [`Error::TokenUnknown`](crate::Error::TokenUnknown) for a token this planner does not
    /// hold live; nothing changes then.
    pub fn begin_wait(&mut self, token: Token) -> Result<PendingWait> {
        let slot = self.validate(token.id())?;
        let pending = self.held_by(slot);
        if let PendingWait::Event(event) = pending {
            self.record_event(event);
        }
        self.free_slot(slot);
        Ok(pending)
    }

    /// Ends a wait begun with [`Planner::begin_wait`]: what it held goes back to the pools.
    /// `synchronised`: whether the host's synchronisation succeeded; the planner then counts
    /// its point, and every point before it, as complete ([`Planner::completed`]).
    #[inline(always)]
    pub fn end_wait(&mut self, pending: PendingWait, synchronised: bool) {
        if synchronised {
            let clock = match pending {
                PendingWait::Stream(stream) => &self.streams[stream.index()].clock,
                PendingWait::Event(event) => &self.events[event.index()].clock,
            };
            seen_complete(&mut self.completed, clock);
        }
        self.give_back(pending);
    }

    /// Gives back what a token held: its stream, or its share of a fork event.
    #[inline(always)]
    fn give_back(&mut self, held: PendingWait) {
        match held {
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

    /// What a live token's work can be waited for or asked about on, without consuming it
    /// (for the runtime's `wait_if_done`, which asks the driver whether a recorded event is
    /// done): its stream, or its fork event; for a fork branch whose event is not recorded
    /// yet, the fork's stream, whose tail is still the branch's point.
    ///
    /// # Errors
    /// As [`Planner::begin_wait`].
    pub fn pending_of(&self, token: &Token) -> Result<PendingWait> {
        let pending = self.held_by(self.validate(token.id())?);
        Ok(match pending {
            PendingWait::Event(event) => match self.events[event.index()].due_on {
                Some(stream) => PendingWait::Stream(stream),
                None => pending,
            },
            PendingWait::Stream(_) => pending,
        })
    }

    /// Whether a host synchronisation that succeeded ([`Planner::end_wait`]) already covered
    /// `token`'s point: its work has completed, and had it failed, that synchronisation would
    /// have reported it. Such a token can be released without asking the driver anything.
    ///
    /// # Errors
    /// As [`Planner::begin_wait`].
    pub fn completed(&self, token: &Token) -> Result<bool> {
        let state = &self.tokens[self.validate(token.id())? as usize];
        Ok(self
            .completed
            .get(state.stream.index())
            .is_some_and(|&seen| seen >= state.position))
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
        self.give_back(self.held_by(slot));
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

/// Raises `completed` (per stream, the last position the host has seen complete) to cover a
/// synchronised point's clock.
fn seen_complete(completed: &mut alloc::vec::Vec<u64>, clock: &Clock) {
    if completed.len() < clock.entries.len() {
        completed.resize(clock.entries.len(), 0);
    }
    for (seen, &position) in completed.iter_mut().zip(&clock.entries) {
        *seen = (*seen).max(position);
    }
}
