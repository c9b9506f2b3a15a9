//! Async tokens: the planner that maps token programs onto streams and events, and the
//! checker that finds lifetime defects in any trace of stream/event calls (docs/tokens.md).
//!
//! - [`Planner`] takes operations with token dependencies and emits [`PlanStep`]s: which
//!   stream each operation runs on, the events recorded, the waits inserted, and the streams
//!   and events taken from and given back to per-device pools.
//! - [`check`] / [`Checker`] take a sequence of [`TraceOp`]s (from a plan via [`plan_trace`],
//!   or parsed from text with [`parse_trace`]) and report every [`Defect`];
//!   [`StreamingChecker`] checks text line by line, with memory bounded by the objects alive.

mod checker;
#[cfg(feature = "model")]
pub mod model;
mod planner;
mod streaming;
#[cfg(feature = "model")]
pub mod synthetic;
mod trace;

use core::fmt;

pub use checker::{Checker, Defect, DefectKind, Finding, NameFn, TraceObject, check};
pub use planner::{
    MAX_FORK_BRANCHES, PendingWait, PlanStep, Planner, PlannerFootprint, ProgramReport,
    UNWAITED_NAMED, UnwaitedKind, UnwaitedToken, check_fork_count,
};
pub use streaming::{Report, StreamingChecker};
pub use trace::{ParsedTrace, TraceOp, TraceView, parse_trace, plan_trace, write_trace};

pub use crate::id::TokenId;

/// A caller's label for one operation, echoed in [`PlanStep::Run`] so the runtime knows which
/// work to launch on the chosen stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u32);

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op {}", self.0)
    }
}

/// "The work that produced me has completed": a linear handle, consumed exactly once by a
/// [`Planner`] call (an operation, a join, a fork, a synchronous wait or a discard).
///
/// Neither `Copy` nor `Clone`: using a token twice needs an explicit [`Planner::fork`].
/// Eight bytes, like its [`TokenId`].
/// Dropping a token without handing it back to the planner does not release anything; the
/// planner reports it as outstanding at [`Planner::end_program`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a token must be consumed by the planner (run, join, fork, wait or discard)"]
pub struct Token(TokenId);

impl Token {
    /// The token's raw identity.
    #[inline]
    pub fn id(&self) -> TokenId {
        self.0
    }

    /// Turns the token into its raw identity, for layers that carry tokens as plain ids.
    #[inline]
    pub fn into_id(self) -> TokenId {
        self.0
    }

    /// Rebuilds a token from a raw identity. Nothing is checked here; the planner checks the
    /// id when the token is used and reports a consumed, unknown or foreign id as an error.
    #[inline]
    pub fn from_id(id: TokenId) -> Self {
        Token(id)
    }
}
