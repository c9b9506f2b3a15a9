//! The handles of a token program: the caller's label for an operation ([`OpId`]) and the
//! linear token ([`Token`]) the planner hands out and every call consumes.

use core::fmt;

use crate::id::TokenId;

/// A caller's label for one operation, echoed in [`PlanStep::Run`](super::PlanStep::Run) so
/// the runtime knows which work to launch on the chosen stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u32);

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op {}", self.0)
    }
}

/// "The work that produced me has completed": a linear handle, consumed exactly once by a
/// [`Planner`](super::Planner) call (an operation, a join, a fork, a synchronous wait or a
/// discard).
///
/// Neither `Copy` nor `Clone`: using a token twice needs an explicit
/// [`Planner::fork`](super::Planner::fork).
/// Eight bytes, like its [`TokenId`].
/// Dropping a token without handing it back to the planner does not release anything; the
/// planner reports it as outstanding at
/// [`Planner::end_program`](super::Planner::end_program).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a token must be consumed by the planner (run, join, fork, wait or discard)"]
pub struct Token(pub(super) TokenId);

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
