//! The stream/event lifetime checker: reads any sequence of trace operations, one at a time,
//! and reports every defect and every object alive at a process's exit.
//!
//! The defects: leak, double destroy, use after destroy, wait before record, wrong device,
//! default stream destroyed.
//!
//! [`Checker`] and [`check`] are here; what a finding says is in `finding`, the per-object
//! tables in `state`, the rules each operation is checked by in `step`, and findings written
//! with a parsed trace's own names and lines in `report`.
//!
//! Memory is bounded by the objects alive, not by the trace's length: a destroyed object is
//! remembered only among the last [`Checker::REMEMBERED_DESTROYS`] destroys of its kind (a
//! ring of tombstones), so "used/destroyed after destroy" is exact for recent destroys, which
//! is where such bugs show (a pool hands a handle back, a join forgets it), and a use of an
//! object destroyed longer ago is still reported, as "never created, or destroyed too long
//! ago to remember". Remembering every destroy would make memory grow with the trace (one
//! entry per short-lived stream of every MLIR execution, per event of every iteration).

mod finding;
mod report;
mod state;
mod step;
#[cfg(test)]
mod tests;

use alloc::vec::Vec;

pub use finding::{Defect, DefectKind, Finding, NameFn, TraceObject};
pub(super) use report::{TraceNames, write_finding};
use state::{Life, Table};

use super::races::RaceChecker;
use super::trace::{ParsedTrace, TraceOp};
use crate::id::{EventId, StreamId};

/// Checks a trace one operation at a time ([`step`](Checker::step)), reporting findings as
/// it finds them; [`finish`](Checker::finish) adds the leaks.
#[derive(Debug)]
pub struct Checker {
    streams: Table,
    events: Table,
    remembered: usize,
    exited: bool,
    /// The objects the last step left untracked.
    forgotten: Vec<TraceObject>,
    /// The memory races, checked on the same operations.
    races: RaceChecker,
}

/// All defects of `ops`, in order of position (leaks, found at the end, last). Objects alive
/// at an [`TraceOp::Exit`] are not defects and not returned (use a [`Checker`] to see them).
pub fn check(ops: &[TraceOp]) -> Vec<Defect> {
    let mut checker = Checker::new();
    let mut defects = Vec::new();
    let mut keep = |finding| {
        if let Finding::Defect(defect) = finding {
            defects.push(defect);
        }
    };
    for (position, op) in ops.iter().enumerate() {
        checker.step(position, op, &mut keep);
    }
    checker.finish(&mut keep);
    defects
}

impl ParsedTrace {
    /// Checks the trace; see [`check`].
    pub fn check(&self) -> Vec<Defect> {
        check(&self.ops)
    }
}

impl Default for Checker {
    fn default() -> Self {
        Self::new()
    }
}

impl Checker {
    /// How many destroyed objects of each kind a checker made by [`new`](Checker::new)
    /// remembers (about 100 bytes each, with the name a text reader keeps for it).
    pub const REMEMBERED_DESTROYS: usize = 1 << 14;

    /// A checker that has seen nothing.
    pub fn new() -> Self {
        Self::remembering(Self::REMEMBERED_DESTROYS)
    }

    /// A checker that remembers the last `remembered` destroyed objects of each kind.
    pub fn remembering(remembered: usize) -> Self {
        Checker {
            streams: Table::default(),
            events: Table::default(),
            remembered,
            exited: false,
            forgotten: Vec::new(),
            races: RaceChecker::new(),
        }
    }

    /// How many things the race checker holds (see [`RaceChecker::held`]).
    pub fn races_held(&self) -> usize {
        self.races.held()
    }

    /// How many objects the checker tracks now: alive, and destroyed but remembered.
    pub fn tracked(&self) -> usize {
        self.streams.states.len() + self.events.states.len()
    }

    /// The objects the last [`step`](Checker::step) left untracked: used but unknown, or
    /// destroyed so long ago that they were forgotten. A layer that maps names to ids can
    /// release their names.
    pub fn forgotten(&self) -> &[TraceObject] {
        &self.forgotten
    }

    /// Reports every object still alive as leaked (unless the trace ended with
    /// [`TraceOp::Exit`], which reported them as alive at exit), in order of creation.
    pub fn finish(self, found: &mut impl FnMut(Finding)) {
        if self.exited {
            return;
        }
        for (object, created_at) in self.alive() {
            found(Finding::Defect(Defect {
                position: created_at,
                kind: DefectKind::Leaked { object },
            }));
        }
    }

    /// The created objects alive now (default streams excepted), in order of creation.
    fn alive(&self) -> Vec<(TraceObject, usize)> {
        let mut alive = Vec::new();
        for (table, object) in [
            (
                &self.streams,
                (|id| TraceObject::Stream(StreamId(id))) as fn(u32) -> _,
            ),
            (&self.events, |id| TraceObject::Event(EventId(id))),
        ] {
            alive.extend(
                table
                    .states
                    .iter()
                    .filter_map(|(id, state)| match state.life {
                        Life::Alive { created_at } => Some((object(id), created_at)),
                        Life::Default { .. } | Life::Destroyed { .. } => None,
                    }),
            );
        }
        alive.sort_unstable_by_key(|&(_, created_at)| created_at);
        alive
    }

    fn table(&mut self, object: TraceObject) -> (&mut Table, u32) {
        match object {
            TraceObject::Stream(s) => (&mut self.streams, s.0),
            TraceObject::Event(e) => (&mut self.events, e.0),
        }
    }
}
