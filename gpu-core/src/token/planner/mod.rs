//! The token planner: turns operations with token dependencies into stream/event steps, with
//! per-device pools, lazy fork waits and no wait that the plan already implies.
//!
//! [`Planner`], its limits and its calls that plan a whole operation (`run`, `join`) or a
//! program's end are here. The other calls and the planning itself are one concern a file:
//! `fork`, `wait` (waits, releases, discards), `pools`, `schedule` (one call's dependencies
//! onto a stream), `slots` (token validation and issue); the data are in `state` and `clock`;
//! what the planner hands out is in `steps` and `report`, and a plan seen as a trace in `view`.

mod clock;
mod fork;
mod pools;
mod report;
mod schedule;
mod slots;
mod state;
mod steps;
#[cfg(test)]
mod tests;
mod view;
mod wait;

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

pub use report::{PlannerFootprint, ProgramReport, UNWAITED_NAMED, UnwaitedKind, UnwaitedToken};
use state::{EventState, Scratch, StreamState, TokenSlot};
pub use steps::{PendingWait, PlanStep};
pub use view::{TraceView, plan_trace};

use super::handle::{OpId, Token};
use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, StreamId, TokenId};

static NEXT_PLANNER_ID: AtomicU32 = AtomicU32::new(1);

/// Most branches one fork may make ([`Planner::fork`], [`Planner::fork_detached`], the
/// runtime's and the C API's forks). A fork hands one token to each consumer that must wait
/// for the same point: a branch per stream, worker thread, device or pipeline stage. Even one
/// branch per multiprocessor of the largest GPU (144) on each device of an eight-GPU host is
/// about a thousand; 65,536 leaves ample room, while a fork's memory (a token slot and a handle,
/// about 48 bytes a branch: 3 MiB at the limit) stays bounded whatever count a caller passes.
/// Larger counts are [`Error::LimitExceeded`] before anything is allocated; fork a branch
/// again for more (live tokens are bounded by [`TokenId::SLOT_LIMIT`]).
pub const MAX_FORK_BRANCHES: usize = 1 << 16;

/// The typed error for a fork branch count outside `1..=`[`MAX_FORK_BRANCHES`]: zero is
/// [`Error::ZeroSize`], more [`Error::LimitExceeded`]. Layers that must keep the token usable
/// when the count is refused check it with this before handing the token over.
pub fn check_fork_count(count: usize) -> Result<()> {
    if count == 0 {
        Err(Error::ZeroSize {
            what: "fork branch count",
        })
    } else if count > MAX_FORK_BRANCHES {
        Err(Error::LimitExceeded {
            what: "fork branch count",
            required: count,
            limit: MAX_FORK_BRANCHES,
            detail: alloc::vec![String::from(
                "branches of one fork; fork a branch again for more"
            )],
        })
    } else {
        Ok(())
    }
}

/// Plans token programs onto streams and events of several devices.
///
/// Every call either succeeds or returns an error and leaves the planner exactly as it was.
/// Steps accumulate in [`steps`](Planner::steps) until drained.
#[derive(Debug)]
#[cfg_attr(any(test, feature = "model"), derive(Clone, PartialEq))]
pub struct Planner {
    id: u16,
    device_count: usize,
    tokens: Vec<TokenSlot>,
    free_slots: Vec<u32>,
    streams: Vec<StreamState>,
    events: Vec<EventState>,
    stream_pools: Vec<Vec<StreamId>>,
    event_pools: Vec<Vec<EventId>>,
    steps: Vec<PlanStep>,
    unwaited: Vec<UnwaitedToken>,
    unwaited_unnamed: u64,
    /// Per stream, the last position a host synchronisation has seen complete.
    completed: Vec<u64>,
    /// Counts emitted runs and waits.
    time: u64,
    scratch: Scratch,
}

impl Planner {
    /// A planner for `device_count` devices (numbered from 0), with empty pools and its own
    /// planner id, so tokens of another planner are recognised as foreign.
    pub fn new(device_count: usize) -> Self {
        Planner {
            // Ids repeat after 65,536 planners (the width a TokenId packs).
            id: NEXT_PLANNER_ID.fetch_add(1, Ordering::Relaxed) as u16,
            device_count,
            tokens: Vec::new(),
            free_slots: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            stream_pools: (0..device_count).map(|_| Vec::new()).collect(),
            event_pools: (0..device_count).map(|_| Vec::new()).collect(),
            steps: Vec::new(),
            unwaited: Vec::new(),
            unwaited_unnamed: 0,
            completed: Vec::new(),
            time: 0,
            scratch: Scratch::default(),
        }
    }

    /// How many devices the planner plans for.
    pub fn device_count(&self) -> usize {
        self.device_count
    }

    /// This planner's id, carried in every [`TokenId`] it issues.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The steps planned since the last [`drain_steps`](Planner::drain_steps).
    pub fn steps(&self) -> &[PlanStep] {
        &self.steps
    }

    /// Hands out the planned steps, keeping the buffer for the next calls.
    pub fn drain_steps(&mut self) -> alloc::vec::Drain<'_, PlanStep> {
        self.steps.drain(..)
    }

    /// Moves the planned steps to the end of `into`. When `into` is empty the two buffers are
    /// swapped (no step is copied, and the planner keeps `into`'s allocation for next time).
    pub fn take_steps(&mut self, into: &mut Vec<PlanStep>) {
        if into.is_empty() {
            core::mem::swap(&mut self.steps, into);
        } else {
            into.append(&mut self.steps);
        }
    }

    /// Takes the planned steps if they are one operation's run and nothing else (an operation
    /// after the previous token on its stream, the common case): its stream, with no step
    /// buffer handed over. Otherwise leaves the steps for [`Planner::take_steps`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_core::token::{OpId, Planner};
    /// use gpu_core::DeviceId;
    ///
    /// let mut planner = Planner::new(1);
    /// let first = planner.run(OpId(0), DeviceId(0), &mut vec![])?;
    /// assert_eq!(planner.take_lone_run(), None); // a stream was acquired first
    /// let mut steps = Vec::new();
    /// planner.take_steps(&mut steps);
    /// let second = planner.run(OpId(1), DeviceId(0), &mut vec![first])?;
    /// assert_eq!(planner.take_lone_run(), planner.stream_of(&second).ok());
    /// # Ok::<(), gpu_core::Error>(())
    /// ```
    #[inline]
    pub fn take_lone_run(&mut self) -> Option<StreamId> {
        match self.steps.as_slice() {
            [PlanStep::Run { stream, .. }] => {
                let stream = *stream;
                self.steps.clear();
                Some(stream)
            }
            _ => None,
        }
    }

    /// The stream of a live token's point: the stream it owns, or the stream a fork branch's
    /// event was recorded on.
    pub fn stream_of(&self, token: &Token) -> Result<StreamId> {
        let slot = self.validate(token.id())?;
        Ok(self.tokens[slot as usize].stream)
    }

    /// Plans operation `op` on `device` after all of `deps`, and returns its token.
    ///
    /// The operation runs on the stream of one dependency (of `device`) where it can, else on
    /// a stream from `device`'s pool; each other dependency costs one event wait unless the
    /// plan already implies it, and every input stream not kept goes back to its pool.
    /// On success `deps` is emptied (the tokens are consumed); on error it is left untouched.
    pub fn run(&mut self, op: OpId, device: DeviceId, deps: &mut Vec<Token>) -> Result<Token> {
        if device.index() >= self.device_count {
            return Err(Error::UnknownDevice {
                device,
                device_count: self.device_count,
            });
        }
        if let [only] = deps.as_slice() {
            let slot = self.validate(only.id())?;
            if let Some(token) = self.continue_chain(op, device, slot) {
                deps.clear();
                return Ok(token);
            }
            self.scratch
                .stage_one(self.tokens[slot as usize].time, slot);
        } else {
            self.validate_all(deps)?;
            if deps.is_empty() {
                self.check_room(1)?;
            }
        }
        let token = self.schedule(Some(op), Some(device));
        deps.clear();
        Ok(token)
    }

    /// Joins `deps` into one token, without an operation: the result lives on one input's
    /// stream, which waits for the others where the plan does not already imply them.
    /// On success `deps` is emptied; on error (also when it is empty) it is left untouched.
    pub fn join(&mut self, deps: &mut Vec<Token>) -> Result<Token> {
        if deps.is_empty() {
            return Err(Error::ZeroSize {
                what: "join input list",
            });
        }
        self.validate_all(deps)?;
        let token = self.schedule(None, None);
        deps.clear();
        Ok(token)
    }

    /// Ends the program: releases every stream and event still held by a live token (each
    /// exactly once), invalidates all tokens, and reports the tokens that ended without a
    /// synchronous wait. Pools keep their streams and events for the next program.
    pub fn end_program(&mut self) -> ProgramReport {
        for slot in 0..self.tokens.len() as u32 {
            if self.tokens[slot as usize].live {
                self.note_unwaited(slot, UnwaitedKind::Outstanding);
                self.release_hold(slot);
                self.free_slot(slot);
            }
        }
        ProgramReport {
            unwaited: core::mem::take(&mut self.unwaited),
            unnamed: core::mem::take(&mut self.unwaited_unnamed),
        }
    }

    fn note_unwaited(&mut self, slot: u32, kind: UnwaitedKind) {
        if self.unwaited.len() >= UNWAITED_NAMED {
            self.unwaited_unnamed += 1;
            return;
        }
        let state = &self.tokens[slot as usize];
        self.unwaited.push(UnwaitedToken {
            token: TokenId::new(self.id, slot, state.generation),
            producer: state.producer,
            kind,
        });
    }

    /// How many live tokens have their point on a stream of `device` (work there that some
    /// token may still wait for).
    pub fn live_tokens_on(&self, device: DeviceId) -> usize {
        self.tokens
            .iter()
            .filter(|token| token.live && self.streams[token.stream.index()].device == device)
            .count()
    }

    /// The sizes of the planner's bookkeeping now.
    pub fn footprint(&self) -> PlannerFootprint {
        PlannerFootprint {
            token_slots: self.tokens.len(),
            live_tokens: self.tokens.len() - self.free_slots.len(),
            streams: self.streams.len(),
            events: self.events.len(),
            unwaited_named: self.unwaited.len(),
            unwaited_unnamed: self.unwaited_unnamed,
        }
    }
}
