//! The shadow of device memory: for each run of bytes, the last write and the reads since it
//! (one per stream), each stamped with its stream's slot, epoch and operation, and the checks
//! of a new access, a free or a reuse against them.
//!
//! Runs are split where accesses begin and end, and dropped when their memory is freed or
//! handed out again, so the shadow holds the runs of the memory accessed and still allocated.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::clock::component;
use super::report::{RaceKind, RaceOp};
use crate::token::trace::{AccessMode, AddressRange};

/// An access as the shadow remembers it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stamp {
    pub(super) slot: u32,
    pub(super) epoch: u32,
    pub(super) op: RaceOp,
}

impl Stamp {
    /// Whether the access happens before an operation of `slot` with `clock`.
    fn before(&self, slot: u32, clock: &[u32]) -> bool {
        self.slot == slot || self.epoch <= component(clock, self.slot)
    }
}

/// An earlier operation an operation is not ordered with, over `range`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Conflict {
    pub(super) kind: RaceKind,
    pub(super) earlier: RaceOp,
    pub(super) range: AddressRange,
}

/// Adds a conflict, merged with the last one if it continues it (same operation, same kind).
fn add(conflicts: &mut Vec<Conflict>, kind: RaceKind, earlier: RaceOp, start: u64, end: u64) {
    if let Some(last) = conflicts
        .iter_mut()
        .find(|c| c.kind == kind && c.earlier.position == earlier.position)
    {
        let from = last.range.start.min(start);
        let to = last.range.end().max(end);
        last.range = AddressRange::new(from, to - from);
        return;
    }
    conflicts.push(Conflict {
        kind,
        earlier,
        range: AddressRange::new(start, end - start),
    });
}

#[derive(Clone, Debug, Default)]
struct Run {
    end: u64,
    write: Option<Stamp>,
    reads: Vec<Stamp>,
}

/// Runs of bytes by their first byte, disjoint.
#[derive(Debug, Default)]
pub(super) struct Shadow {
    runs: BTreeMap<u64, Run>,
}

impl Shadow {
    /// How many runs are held.
    pub(super) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Makes `at` the start of a run if a run holds it.
    fn split(&mut self, at: u64) {
        let Some((_, run)) = self.runs.range_mut(..at).next_back() else {
            return;
        };
        if run.end <= at {
            return;
        }
        let tail = run.clone();
        run.end = at;
        self.runs.insert(at, tail);
    }

    /// Checks an access of `range` by `stamp` (an operation of a stream with `clock`) against
    /// the earlier ones, adding each unordered conflicting one to `conflicts`, and remembers
    /// it.
    pub(super) fn access(
        &mut self,
        range: AddressRange,
        mode: AccessMode,
        stamp: Stamp,
        clock: &[u32],
        conflicts: &mut Vec<Conflict>,
    ) {
        let (start, end) = (range.start, range.end());
        if start >= end {
            return;
        }
        self.split(start);
        self.split(end);
        let mut gaps: Vec<(u64, u64)> = Vec::new();
        let mut cursor = start;
        for (&at, run) in self.runs.range_mut(start..end) {
            if at > cursor {
                gaps.push((cursor, at));
            }
            cursor = run.end;
            if let Some(write) = run.write
                && !write.before(stamp.slot, clock)
            {
                let kind = if mode.writes() {
                    RaceKind::WriteWrite
                } else {
                    RaceKind::WriteRead
                };
                add(conflicts, kind, write.op, at, run.end);
            }
            if mode.writes() {
                for read in &run.reads {
                    if !read.before(stamp.slot, clock) {
                        add(conflicts, RaceKind::ReadWrite, read.op, at, run.end);
                    }
                }
                run.write = Some(stamp);
                run.reads.clear();
            } else if let Some(read) = run.reads.iter_mut().find(|r| r.slot == stamp.slot) {
                *read = stamp;
            } else {
                run.reads.push(stamp);
            }
        }
        if cursor < end {
            gaps.push((cursor, end));
        }
        for (from, to) in gaps {
            let run = if mode.writes() {
                Run {
                    end: to,
                    write: Some(stamp),
                    reads: Vec::new(),
                }
            } else {
                Run {
                    end: to,
                    write: None,
                    reads: alloc::vec![stamp],
                }
            };
            self.runs.insert(from, run);
        }
    }

    /// Adds to `conflicts` (as `kind`) every access of `range` not ordered before an
    /// operation of `slot` with `clock`.
    pub(super) fn unordered_before(
        &self,
        range: AddressRange,
        slot: u32,
        clock: &[u32],
        kind: RaceKind,
        conflicts: &mut Vec<Conflict>,
    ) {
        let (start, end) = (range.start, range.end());
        let first = self
            .runs
            .range(..start)
            .next_back()
            .filter(|(_, run)| run.end > start);
        for (&at, run) in first.into_iter().chain(self.runs.range(start..end)) {
            let (from, to) = (at.max(start), run.end.min(end));
            for stamp in run.write.iter().chain(&run.reads) {
                if !stamp.before(slot, clock) {
                    add(conflicts, kind, stamp.op, from, to);
                }
            }
        }
    }

    /// Forgets the accesses of `range` (its memory was freed or handed out again).
    pub(super) fn clear(&mut self, range: AddressRange) {
        let (start, end) = (range.start, range.end());
        if start >= end {
            return;
        }
        self.split(start);
        self.split(end);
        let inside: Vec<u64> = self.runs.range(start..end).map(|(&at, _)| at).collect();
        for at in inside {
            self.runs.remove(&at);
        }
    }
}
