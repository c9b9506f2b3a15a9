//! The planner's tables: token slots and the points they stand for, stream and event states,
//! and the per-call scratch list of validated dependencies.

use alloc::vec::Vec;

use super::clock::Clock;
use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, StreamId, TokenId};
use crate::token::handle::OpId;

/// What a live token holds: its stream's tail, or a share of a fork event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hold {
    /// The token owns the stream; the stream's tail is the token's point.
    Stream,
    /// A fork branch: the point is where `EventId` was recorded; the wait is issued lazily.
    ForkEvent(EventId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TokenSlot {
    pub(super) generation: u32,
    pub(super) live: bool,
    pub(super) hold: Hold,
    /// The token's point: `position` on `stream` (counted in runs and waits), emitted at
    /// planner time `time` (a linear extension of happens-before).
    pub(super) stream: StreamId,
    pub(super) position: u64,
    pub(super) time: u64,
    pub(super) producer: Option<OpId>,
}

/// What a token stands for and holds: the point on its stream, and its stream or fork share.
#[derive(Clone, Copy, Debug)]
pub(super) struct Point {
    pub(super) hold: Hold,
    pub(super) stream: StreamId,
    pub(super) position: u64,
    pub(super) time: u64,
    pub(super) producer: Option<OpId>,
}

/// A stream and the clock of its tail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StreamState {
    pub(super) device: DeviceId,
    /// Planner time of the last run or wait on the stream.
    pub(super) tail_time: u64,
    pub(super) clock: Clock,
    /// A fork event whose record is deferred: its point is this stream's tail, and it is
    /// recorded before the stream moves on (or sooner, when a wait needs it).
    pub(super) due: Option<EventId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EventState {
    pub(super) device: DeviceId,
    /// Fork branches still holding the event.
    pub(super) shares: u32,
    /// For a fork event (the only kind a token refers to): the recording stream's clock at
    /// the fork's point. Events recorded for a single wait go back to the pool right after it.
    pub(super) clock: Clock,
    /// The stream whose tail the event is still to be recorded at (the fork's point, which
    /// the stream has not moved past); `None` once recorded, and for pooled events.
    pub(super) due_on: Option<StreamId>,
}

/// Per-call buffers, reused so that planning does not allocate once warm. They carry nothing
/// from one call to the next, so two planners compare equal whatever their buffers hold.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    /// Call number, and per token slot the last call that saw it (finds a token given twice).
    pub(super) call: u64,
    pub(super) seen: Vec<u64>,
    /// Validated dependencies as (time, index in the caller's list << 32 | slot), latest
    /// first, then in the caller's order. Two 8-byte words, each written and read whole (a
    /// read spanning two narrower writes just before stalls the pipeline).
    pub(super) deps: Vec<(u64, u64)>,
}

impl Scratch {
    /// Makes one validated token, at planner time `time`, the whole dependency list (what
    /// `validate_all` gives for a list of one, without its duplicate check and sort).
    #[inline]
    pub(super) fn stage_one(&mut self, time: u64, slot: u32) {
        self.deps.clear();
        self.deps.push((time, u64::from(slot)));
    }
}

impl PartialEq for Scratch {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Sorts scratch dependency entries latest point first, then in the caller's order: a list
/// given oldest first with no two points equal (a fan-in) by reversing it, else by insertion
/// for the usual few and by the library sort for many.
pub(super) fn sort_latest_first(deps: &mut [(u64, u64)]) {
    if deps.windows(2).all(|pair| pair[0].0 < pair[1].0) {
        deps.reverse();
        return;
    }
    let before = |a: &(u64, u64), b: &(u64, u64)| a.0 > b.0 || (a.0 == b.0 && a.1 < b.1);
    if deps.len() > 8 {
        deps.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        return;
    }
    for i in 1..deps.len() {
        let entry = deps[i];
        let mut j = i;
        while j > 0 && before(&entry, &deps[j - 1]) {
            deps[j] = deps[j - 1];
            j -= 1;
        }
        deps[j] = entry;
    }
}

/// The slot of a scratch dependency entry.
#[inline]
pub(super) fn dep_slot(dep: (u64, u64)) -> u32 {
    dep.1 as u32
}

/// The slot of a live token of planner `planner`, or why the id names none.
pub(super) fn validate_in(planner: u16, tokens: &[TokenSlot], id: TokenId) -> Result<u32> {
    if id.planner() != planner {
        return Err(Error::TokenForeign { token: id, planner });
    }
    match tokens.get(id.slot() as usize) {
        Some(slot) if slot.live && slot.generation == id.generation() => Ok(id.slot()),
        Some(slot) if id.generation() < slot.generation => Err(Error::TokenConsumed { token: id }),
        _ => Err(Error::TokenUnknown { token: id }),
    }
}

/// Two different streams' states, the first one mutable.
pub(super) fn pair_mut(
    streams: &mut [StreamState],
    a: usize,
    b: usize,
) -> (&mut StreamState, &StreamState) {
    if a < b {
        let (low, high) = streams.split_at_mut(b);
        (&mut low[a], &high[0])
    } else {
        let (low, high) = streams.split_at_mut(a);
        (&mut high[0], &low[b])
    }
}
