//! Async tokens: the planner that maps token programs onto streams and events, and the
//! checker that finds lifetime defects in any trace of stream/event calls (docs/tokens.md).
//!
//! - [`Planner`] takes operations with token dependencies and emits [`PlanStep`]s: which
//!   stream each operation runs on, the events recorded, the waits inserted, and the streams
//!   and events taken from and given back to per-device pools.
//! - [`check`] / [`Checker`] take a sequence of [`TraceOp`]s (from a plan via [`plan_trace`],
//!   or parsed from text with [`parse_trace`]) and report every [`Defect`];
//!   [`StreamingChecker`] checks text line by line, with memory bounded by the objects alive.
//!
//! One concern a module, each importing only from those before it: `handle` (op ids and
//! tokens), `trace` (the operations and their text format), `planner` (plans, and a plan seen
//! as a trace), `checker` (rules and findings), `streaming` (text checked line by line).

mod checker;
mod handle;
#[cfg(feature = "model")]
pub mod model;
mod planner;
mod races;
mod streaming;
#[cfg(feature = "model")]
pub mod synthetic;
mod trace;

pub use checker::{Checker, Defect, DefectKind, Finding, NameFn, TraceObject, check};
pub use handle::{OpId, Token};
pub use planner::{
    MAX_FORK_BRANCHES, PendingWait, PlanStep, Planner, PlannerFootprint, ProgramReport, TraceView,
    UNWAITED_NAMED, UnwaitedKind, UnwaitedToken, check_fork_count, plan_trace,
};
pub use races::{Namer, Race, RaceCall, RaceChecker, RaceKind, RaceNames, RaceOp, check_races};
pub use streaming::{Report, StreamingChecker};
pub use trace::{
    AccessMode, AddressRange, AllocatorId, CallKind, ParsedTrace, SiteId, StreamKind, TraceOp,
    parse_trace, write_trace,
};

pub use crate::id::TokenId;
