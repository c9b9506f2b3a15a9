//! What the planner reports: the tokens of a program that ended without a wait
//! ([`ProgramReport`]), and the sizes of its own bookkeeping ([`PlannerFootprint`]).

use alloc::vec::Vec;

use crate::id::TokenId;
use crate::token::handle::OpId;

/// How a token ended without a synchronous wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwaitedKind {
    /// Handed to [`Planner::discard`](super::Planner::discard).
    Discarded,
    /// Still live when [`Planner::end_program`](super::Planner::end_program) ran.
    Outstanding,
}

/// A token that ended without anyone waiting on it: an asynchronous error it carries would
/// otherwise be lost, so the program's report names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwaitedToken {
    /// The token.
    pub token: TokenId,
    /// The last operation whose completion it stood for, if an operation produced it.
    pub producer: Option<OpId>,
    /// Whether it was discarded or still outstanding at the end.
    pub kind: UnwaitedKind,
}

/// How many unwaited tokens a [`ProgramReport`] names; the ones after them are only counted
/// (a long-running program that discards tokens would otherwise grow the list without bound).
pub const UNWAITED_NAMED: usize = 1024;

/// What [`Planner::end_program`](super::Planner::end_program) reports: every token that ended without a synchronous wait.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramReport {
    /// Discarded tokens (in discard order), then outstanding ones (in slot order): the first
    /// [`UNWAITED_NAMED`] of them.
    pub unwaited: Vec<UnwaitedToken>,
    /// Unwaited tokens after the first [`UNWAITED_NAMED`], counted but not named.
    pub unnamed: u64,
}

impl ProgramReport {
    /// Every token that ended without a synchronous wait, named or not.
    pub fn unwaited_count(&self) -> u64 {
        self.unwaited.len() as u64 + self.unnamed
    }
}

/// The sizes of a planner's bookkeeping, for soak tests that check nothing grows without bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlannerFootprint {
    /// Token slots (live and free).
    pub token_slots: usize,
    /// Live tokens.
    pub live_tokens: usize,
    /// Streams the planner has named.
    pub streams: usize,
    /// Events the planner has named.
    pub events: usize,
    /// Unwaited tokens held for the next report (at most [`UNWAITED_NAMED`]).
    pub unwaited_named: usize,
    /// Unwaited tokens counted beyond those.
    pub unwaited_unnamed: u64,
}
