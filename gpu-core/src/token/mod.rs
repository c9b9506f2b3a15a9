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

/// A caller's label for one operation, echoed in [`PlanStep::Run`] so the runtime knows which
/// work to launch on the chosen stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u32);

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op {}", self.0)
    }
}

/// The raw, copyable identity of a [`Token`], packed in 64 bits: the issuing planner's id
/// (16 bits), the token's slot in that planner's table (24 bits) and how many tokens the slot
/// held before (24 bits, wrapping).
///
/// Layers that carry tokens through raw ids (an FFI boundary, a serialised program) use this;
/// the planner detects every misuse of such ids (consumed, unknown, foreign) as a typed error.
/// Detection is exact within the packing's limits: planner ids repeat after 65,536 planners,
/// and a slot's count wraps after 16,777,216 uses of that one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenId(u64);

const FIELD_MASK: u64 = (1 << 24) - 1;

impl TokenId {
    /// How many token slots one planner has (live tokens at once).
    pub const SLOT_LIMIT: usize = 1 << 24;

    /// The id of slot `slot`'s token number `generation` of planner `planner`; `slot` and
    /// `generation` are taken modulo 2^24.
    pub const fn new(planner: u16, slot: u32, generation: u32) -> Self {
        TokenId(
            ((planner as u64) << 48)
                | ((slot as u64 & FIELD_MASK) << 24)
                | (generation as u64 & FIELD_MASK),
        )
    }

    /// The id packed in `raw` (as [`raw`](TokenId::raw) gave it).
    pub const fn from_raw(raw: u64) -> Self {
        TokenId(raw)
    }

    /// The packed 64-bit form.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The id of the planner that issued the token.
    pub const fn planner(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// The token's slot in its planner's table.
    pub const fn slot(self) -> u32 {
        ((self.0 >> 24) & FIELD_MASK) as u32
    }

    /// How many tokens the slot held before this one (modulo 2^24).
    pub const fn generation(self) -> u32 {
        (self.0 & FIELD_MASK) as u32
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "token {}.{} of planner {}",
            self.slot(),
            self.generation(),
            self.planner()
        )
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
