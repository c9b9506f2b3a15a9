//! The token planner: turns operations with token dependencies into stream/event steps, with
//! per-device pools, lazy fork waits and no wait that the plan already implies.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use super::{OpId, Token};
use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, StreamId, TokenId};

/// One stream/event operation of a plan, for the runtime layer to carry out on a backend.
///
/// Pools only hand out ids: an acquire with `fresh: true` means the pool was empty and the
/// runtime creates the object; a release puts it back in the pool; a destroy (only from
/// [`Planner::drain_pools`]) ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanStep {
    /// Take a stream from `device`'s pool; `fresh` means the pool was empty: create it.
    AcquireStream {
        /// Device the stream belongs to.
        device: DeviceId,
        /// The stream handed out.
        stream: StreamId,
        /// Whether the runtime must create the stream.
        fresh: bool,
    },
    /// Give a stream back to `device`'s pool. Work on it may still be pending.
    ReleaseStream {
        /// Device the stream belongs to.
        device: DeviceId,
        /// The stream given back.
        stream: StreamId,
    },
    /// Destroy a pooled stream.
    DestroyStream {
        /// Device the stream belongs to.
        device: DeviceId,
        /// The stream destroyed.
        stream: StreamId,
    },
    /// Take an event from `device`'s pool; `fresh` means the pool was empty: create it.
    AcquireEvent {
        /// Device the event belongs to.
        device: DeviceId,
        /// The event handed out.
        event: EventId,
        /// Whether the runtime must create the event.
        fresh: bool,
    },
    /// Give an event back to `device`'s pool. Waits issued on it stay valid.
    ReleaseEvent {
        /// Device the event belongs to.
        device: DeviceId,
        /// The event given back.
        event: EventId,
    },
    /// Destroy a pooled event.
    DestroyEvent {
        /// Device the event belongs to.
        device: DeviceId,
        /// The event destroyed.
        event: EventId,
    },
    /// Record `event` on `stream` (both of one device).
    Record {
        /// The event recorded.
        event: EventId,
        /// The stream it is recorded on.
        stream: StreamId,
    },
    /// Make `stream` wait for the last record of `event` (the event may be another device's).
    Wait {
        /// The stream that waits.
        stream: StreamId,
        /// The event waited for.
        event: EventId,
    },
    /// Launch the caller's operation `op` on `stream` of `device`.
    Run {
        /// The caller's label of the operation.
        op: OpId,
        /// The device the operation runs on.
        device: DeviceId,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// Block the host until all work on `stream` has completed.
    SynchronizeStream {
        /// The stream waited for.
        stream: StreamId,
    },
    /// Block the host until the last record of `event` has completed.
    SynchronizeEvent {
        /// The event waited for.
        event: EventId,
    },
}

/// How a token ended without a synchronous wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwaitedKind {
    /// Handed to [`Planner::discard`].
    Discarded,
    /// Still live when [`Planner::end_program`] ran.
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

/// What [`Planner::end_program`] reports: every token that ended without a synchronous wait.
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

/// A wait begun with [`Planner::begin_wait`]: the stream or fork event to synchronise, held out
/// of the pools until [`Planner::end_wait`]. Not `Copy`: it is ended exactly once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a begun wait holds its stream or event until it is ended"]
pub enum PendingWait {
    /// The token owned this stream: synchronise it.
    Stream(StreamId),
    /// The token was a fork branch: synchronise this event (one share of it is held).
    Event(EventId),
}

/// What a live token holds: its stream's tail, or a share of a fork event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// The token owns the stream; the stream's tail is the token's point.
    Stream,
    /// A fork branch: the point is where `EventId` was recorded; the wait is issued lazily.
    ForkEvent(EventId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TokenSlot {
    generation: u32,
    live: bool,
    hold: Hold,
    /// The token's point: `position` on `stream` (counted in runs and waits), emitted at
    /// planner time `time` (a linear extension of happens-before).
    stream: StreamId,
    position: u64,
    time: u64,
    producer: Option<OpId>,
}

/// What a token stands for and holds: the point on its stream, and its stream or fork share.
#[derive(Clone, Copy, Debug)]
struct Point {
    hold: Hold,
    stream: StreamId,
    position: u64,
    time: u64,
    producer: Option<OpId>,
}

/// Sorts scratch dependency entries latest point first, then in the caller's order: a list
/// given oldest first with no two points equal (a fan-in) by reversing it, else by insertion
/// for the usual few and by the library sort for many.
fn sort_latest_first(deps: &mut [(u64, u64)]) {
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
fn dep_slot(dep: (u64, u64)) -> u32 {
    dep.1 as u32
}

/// Per-call buffers, reused so that planning does not allocate once warm. They carry nothing
/// from one call to the next, so two planners compare equal whatever their buffers hold.
#[derive(Clone, Debug, Default)]
struct Scratch {
    /// Call number, and per token slot the last call that saw it (finds a token given twice).
    call: u64,
    seen: Vec<u64>,
    /// Validated dependencies as (time, index in the caller's list << 32 | slot), latest
    /// first, then in the caller's order. Two 8-byte words, each written and read whole (a
    /// read spanning two narrower writes just before stalls the pipeline).
    deps: Vec<(u64, u64)>,
}

impl Scratch {
    /// Makes one validated token, at planner time `time`, the whole dependency list (what
    /// `validate_all` gives for a list of one, without its duplicate check and sort).
    #[inline]
    fn stage_one(&mut self, time: u64, slot: u32) {
        self.deps.clear();
        self.deps.push((time, u64::from(slot)));
    }
}

impl PartialEq for Scratch {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// How many raised entries a [`Clock`] lists above its base point before it gives the base up.
const RAISED_CAPACITY: usize = 8;

/// The vector clock of a point (a stream's tail, or a fork event's record): `entries[s]` is
/// the last position of stream `s` ordered before (or at) the point.
///
/// Where it knows, the clock also says how it was built: as the clock of an earlier `base`
/// point, raised only at the streams in `raised` and at its owner's own entry (the owner is
/// the stream the point is on). A stream already ordered after `base` merges such a clock
/// by those few entries instead of all of them: in a fan-in of n branches that each waited
/// for one fork event, each merge costs a few entries, not one per stream in use.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Clock {
    entries: Vec<u64>,
    /// A point (stream, position) whose clock this one equals apart from `raised` and the
    /// owner's entry; `None` when unknown.
    base: Option<(StreamId, u64)>,
    raised: [StreamId; RAISED_CAPACITY],
    raised_len: u8,
}

impl Clock {
    /// The clock of a stream's first point (nothing before it).
    fn new(streams: usize) -> Self {
        Clock {
            entries: alloc::vec![0; streams],
            base: None,
            raised: [StreamId(0); RAISED_CAPACITY],
            raised_len: 0,
        }
    }

    #[inline]
    fn known(&self, stream: StreamId) -> u64 {
        self.entries.get(stream.index()).copied().unwrap_or(0)
    }

    /// Becomes a copy of `from` (a fork event taking its stream's clock).
    fn copy_from(&mut self, from: &Clock) {
        self.entries.clear();
        self.entries.extend_from_slice(&from.entries);
        self.base = from.base;
        self.raised = from.raised;
        self.raised_len = from.raised_len;
    }

    /// Raises this clock, the one of `owner`'s tail, to also cover the point `from` of stream
    /// `from_owner` (a wait of `owner` on that point).
    fn merge(&mut self, owner: StreamId, from: &Clock, from_owner: StreamId) {
        if from.known(owner) >= self.known(owner) {
            // The point already follows the tail, so its clock covers this one: take it whole
            // (entries past `from`'s length are zero here, since `from` covers them).
            if self.entries.len() < from.entries.len() {
                self.entries.resize(from.entries.len(), 0);
            }
            self.entries[..from.entries.len()].copy_from_slice(&from.entries);
            self.base = Some((from_owner, from.known(from_owner)));
            self.raised_len = 0;
            return;
        }
        if let Some((stream, position)) = from.base
            && self.known(stream) >= position
        {
            // The tail already follows `from`'s base: only its raised entries can be new.
            let raised = &from.raised[..from.raised_len as usize];
            for &stream in raised.iter().chain(core::iter::once(&from_owner)) {
                self.raise(stream, from.known(stream));
            }
            return;
        }
        if self.entries.len() < from.entries.len() {
            self.entries.resize(from.entries.len(), 0);
        }
        for (mine, theirs) in self.entries.iter_mut().zip(&from.entries) {
            *mine = (*mine).max(*theirs);
        }
        self.base = None;
    }

    /// Raises one entry, noting it above the base (or giving the base up when full).
    fn raise(&mut self, stream: StreamId, position: u64) {
        if self.known(stream) >= position {
            return;
        }
        if self.entries.len() <= stream.index() {
            self.entries.resize(stream.index() + 1, 0);
        }
        self.entries[stream.index()] = position;
        if self.base.is_some() {
            if (self.raised_len as usize) < RAISED_CAPACITY {
                self.raised[self.raised_len as usize] = stream;
                self.raised_len += 1;
            } else {
                self.base = None;
            }
        }
    }
}

/// A stream and the clock of its tail.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StreamState {
    device: DeviceId,
    /// Planner time of the last run or wait on the stream.
    tail_time: u64,
    clock: Clock,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct EventState {
    device: DeviceId,
    /// Fork branches still holding the event.
    shares: u32,
    /// For a fork event (the only kind a token refers to): the recording stream's clock at
    /// the record. Events recorded for a single wait go back to the pool right after it.
    clock: Clock,
}

/// The slot of a live token of planner `planner`, or why the id names none.
fn validate_in(planner: u16, tokens: &[TokenSlot], id: TokenId) -> Result<u32> {
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
fn pair_mut(streams: &mut [StreamState], a: usize, b: usize) -> (&mut StreamState, &StreamState) {
    if a < b {
        let (low, high) = streams.split_at_mut(b);
        (&mut low[a], &high[0])
    } else {
        let (low, high) = streams.split_at_mut(a);
        (&mut high[0], &low[b])
    }
}

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

/// Generations count modulo 2^24 (the width [`TokenId`] packs).
const GENERATION_MASK: u32 = (1 << 24) - 1;

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

    /// The most common plan, made without the general one's bookkeeping (what `schedule`
    /// would do for it, step for step, through the same `run_on` and `tail_token`): one
    /// dependency that owns a stream of `device`, so the operation runs next on that stream
    /// and nothing waits. `None` for any other case. `slot` is a validated live token's.
    #[inline]
    fn continue_chain(&mut self, op: OpId, device: DeviceId, slot: u32) -> Option<Token> {
        let stream = self.tokens[slot as usize].stream;
        if self.tokens[slot as usize].hold != Hold::Stream
            || self.streams[stream.index()].device != device
        {
            return None;
        }
        self.free_slot(slot);
        self.run_on(op, device, stream);
        Some(self.tail_token(stream, Some(op)))
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

    /// Forks `token` into `count` tokens, appended to `branches`. The first branch keeps the
    /// stream; the others share one event recorded now, and each waits on it only when it is
    /// first used. Forking a fork branch shares that branch's event. A count of zero or above
    /// [`MAX_FORK_BRANCHES`] is refused ([`check_fork_count`]); on any error nothing changes
    /// and the token stays live.
    pub fn fork(&mut self, token: Token, count: usize, branches: &mut Vec<Token>) -> Result<()> {
        check_fork_count(count)?;
        self.fork_into(token, count, branches)
    }

    /// [`Planner::fork`] for a count already known to lie in `1..=MAX_FORK_BRANCHES + 1`.
    fn fork_into(&mut self, token: Token, count: usize, branches: &mut Vec<Token>) -> Result<()> {
        let slot = self.validate(token.id())?;
        if count == 1 {
            branches.push(token);
            return Ok(());
        }
        let source = self.point_of(slot);
        let held = match source.hold {
            Hold::ForkEvent(event) => self.events[event.index()].shares,
            Hold::Stream => 0,
        };
        let shares = u32::try_from(count - 1)
            .ok()
            .and_then(|extra| extra.checked_add(held))
            .ok_or_else(|| Error::LimitExceeded {
                what: "fork branches sharing one event",
                required: count.saturating_add(held as usize),
                limit: u32::MAX as usize,
                detail: Vec::new(),
            })?;
        // The source's slot is freed first, so one branch reuses it.
        self.check_room(count - 1)?;
        let out_of_memory = |_| Error::HostOutOfMemory {
            what: "fork branch tokens",
        };
        branches.try_reserve(count).map_err(out_of_memory)?;
        self.tokens.try_reserve(count).map_err(out_of_memory)?;
        let event = match source.hold {
            Hold::ForkEvent(event) => event,
            Hold::Stream => {
                let event = self.record_on(source.stream);
                let (streams, events) = (&self.streams, &mut self.events);
                events[event.index()]
                    .clock
                    .copy_from(&streams[source.stream.index()].clock);
                event
            }
        };
        // The first branch takes over what the source held; each other one gets a share.
        self.events[event.index()].shares = shares;
        self.free_slot(slot);
        branches.push(self.new_token(source));
        for _ in 1..count {
            branches.push(self.new_token(Point {
                hold: Hold::ForkEvent(event),
                ..source
            }));
        }
        Ok(())
    }

    /// Blocks the host on `token` (a stream or event synchronisation) and releases what it
    /// held.
    pub fn wait(&mut self, token: Token) -> Result<()> {
        let pending = self.begin_wait(token)?;
        self.steps.push(match pending {
            PendingWait::Stream(stream) => PlanStep::SynchronizeStream { stream },
            PendingWait::Event(event) => PlanStep::SynchronizeEvent { event },
        });
        self.end_wait(pending);
        Ok(())
    }

    /// The first half of [`Planner::wait`], for a caller that blocks outside the lock guarding
    /// the planner: consumes `token` and returns what to synchronise, which stays out of the
    /// pools (no other operation gets the stream, no fork re-records the event) until
    /// [`Planner::end_wait`]. Plans no step.
    ///
    /// # Errors
    /// [`Error::TokenForeign`], [`Error::TokenConsumed`] or [`Error::TokenUnknown`] for a
    /// token this planner does not hold live; nothing changes then.
    pub fn begin_wait(&mut self, token: Token) -> Result<PendingWait> {
        let slot = self.validate(token.id())?;
        let pending = self.held_by(slot);
        self.free_slot(slot);
        Ok(pending)
    }

    /// Ends a wait begun with [`Planner::begin_wait`]: what it held goes back to the pools.
    #[inline(always)]
    pub fn end_wait(&mut self, pending: PendingWait) {
        match pending {
            PendingWait::Stream(stream) => self.release_stream(stream),
            PendingWait::Event(event) => self.release_event_share(event),
        }
    }

    /// Forks `token` into `count` branches that each hold a share of one event recorded now,
    /// and gives the stream back to its pool at once: unlike [`Planner::fork`], no branch keeps
    /// the stream. For layers whose handles may be abandoned without a word (MLIR's lowering
    /// never destroys the input streams of a join): a branch held by such a handle keeps an
    /// event from its pool, never a stream. Counts are limited as for [`Planner::fork`]; on
    /// error nothing changes.
    pub fn fork_detached(
        &mut self,
        token: Token,
        count: usize,
        branches: &mut Vec<Token>,
    ) -> Result<()> {
        check_fork_count(count)?;
        let first = branches.len();
        self.fork_into(token, count + 1, branches)?;
        let owner = branches.remove(first);
        self.release(owner)
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

    /// What a live token would have the host synchronise, without consuming it (for the
    /// runtime's `wait_if_done`: it asks the driver whether that is done, and only then waits).
    ///
    /// # Errors
    /// As [`Planner::begin_wait`].
    pub fn pending_of(&self, token: &Token) -> Result<PendingWait> {
        Ok(self.held_by(self.validate(token.id())?))
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

    /// A stream id of `device` for a stream the planner never plans on (one the runtime adopts
    /// from another program): it is in no pool, no step names it, and no id the planner hands
    /// out later equals it, so the runtime and the allocator can key such streams by the same
    /// ids as the planner's. Fails only for a device the planner does not have.
    pub fn reserve_stream(&mut self, device: DeviceId) -> Result<StreamId> {
        if device.index() >= self.device_count {
            return Err(Error::UnknownDevice {
                device,
                device_count: self.device_count,
            });
        }
        Ok(self.new_stream(device))
    }

    /// Destroys every pooled stream and event (streams and events held by live tokens stay).
    /// Destroyed ids are never handed out again.
    pub fn drain_pools(&mut self) {
        for device in 0..self.device_count {
            while let Some(stream) = self.stream_pools[device].pop() {
                self.steps.push(PlanStep::DestroyStream {
                    device: DeviceId(device as u32),
                    stream,
                });
            }
            while let Some(event) = self.event_pools[device].pop() {
                self.steps.push(PlanStep::DestroyEvent {
                    device: DeviceId(device as u32),
                    event,
                });
            }
        }
    }

    // ----- validation (no state change) -----

    /// Whether `more` tokens can be live on top of the live ones.
    fn check_room(&self, more: usize) -> Result<()> {
        let room = self.free_slots.len() + (TokenId::SLOT_LIMIT - self.tokens.len());
        if more > room {
            return Err(Error::LimitExceeded {
                what: "live tokens of one planner",
                // `more` can be near `usize::MAX` (a huge fork count on a 32-bit target).
                required: (self.tokens.len() - self.free_slots.len()).saturating_add(more),
                limit: TokenId::SLOT_LIMIT,
                detail: Vec::new(),
            });
        }
        Ok(())
    }

    fn validate(&self, id: TokenId) -> Result<u32> {
        validate_in(self.id, &self.tokens, id)
    }

    /// Validates every dependency (and that none is given twice) into the scratch list,
    /// latest point first.
    fn validate_all(&mut self, deps: &[Token]) -> Result<()> {
        let (planner, tokens, scratch) = (self.id, &self.tokens, &mut self.scratch);
        scratch.call += 1;
        scratch.deps.clear();
        if scratch.seen.len() < tokens.len() {
            scratch.seen.resize(tokens.len(), 0);
        }
        for (index, token) in deps.iter().enumerate() {
            let slot = validate_in(planner, tokens, token.id())?;
            let seen = &mut scratch.seen[slot as usize];
            if *seen == scratch.call {
                return Err(Error::TokenConsumed { token: token.id() });
            }
            *seen = scratch.call;
            scratch.deps.push((
                tokens[slot as usize].time,
                ((index as u64) << 32) | slot as u64,
            ));
        }
        sort_latest_first(&mut scratch.deps);
        Ok(())
    }

    // ----- planning (infallible once validated) -----

    fn clock_of(&self, slot: u32) -> &Clock {
        let state = &self.tokens[slot as usize];
        match state.hold {
            Hold::Stream => &self.streams[state.stream.index()].clock,
            Hold::ForkEvent(event) => &self.events[event.index()].clock,
        }
    }

    /// Whether the point of token slot `a` happens before (or is) the point of slot `b`.
    fn point_before(&self, a: u32, b: u32) -> bool {
        let point = &self.tokens[a as usize];
        self.clock_of(b).known(point.stream) >= point.position
    }

    /// Plans the validated dependencies (and the operation, if any) onto one stream.
    ///
    /// Dependencies are visited latest point first (planner time is a linear extension of
    /// happens-before), so by the time an earlier point is visited, every later point it
    /// precedes has been waited for or found implied, and a wait is issued exactly for the
    /// dependencies that neither the stream nor any later dependency already implies.
    fn schedule(&mut self, op: Option<OpId>, device: Option<DeviceId>) -> Token {
        let deps = core::mem::take(&mut self.scratch.deps);
        let kept = self.pick_kept(&deps, device);
        let target = match kept {
            Some(slot) => self.tokens[slot as usize].stream,
            None => {
                // A join always has a first dependency; an operation always names a device.
                let device = device.unwrap_or_else(|| {
                    let first = self.tokens[dep_slot(deps[0]) as usize].stream;
                    self.streams[first.index()].device
                });
                self.acquire_stream(device)
            }
        };
        let mut producer = None;
        for &dep in &deps {
            let slot = dep_slot(dep);
            let state = self.point_of(slot);
            producer = producer.or(state.producer);
            let implied = Some(slot) == kept
                || self.streams[target.index()].clock.known(state.stream) >= state.position;
            if !implied {
                // Merge the point's clock: its stream's (still at the point, since the token
                // owns the stream) or its fork event's.
                match state.hold {
                    Hold::Stream => {
                        let (into, from) =
                            pair_mut(&mut self.streams, target.index(), state.stream.index());
                        into.clock.merge(target, &from.clock, state.stream);
                        self.wait_for_tail(target, state.stream);
                    }
                    Hold::ForkEvent(event) => {
                        let from = &self.events[event.index()].clock;
                        self.streams[target.index()]
                            .clock
                            .merge(target, from, state.stream);
                        self.steps.push(PlanStep::Wait {
                            stream: target,
                            event,
                        });
                    }
                }
                self.advance(target);
            }
            if Some(slot) != kept {
                self.release_hold(slot);
            }
            self.free_slot(slot);
        }
        if let Some(op) = op {
            self.run_on(op, self.streams[target.index()].device, target);
            producer = Some(op);
        }
        self.scratch.deps = deps;
        self.tail_token(target, producer)
    }

    /// Runs `op` next on `stream` (of `device`).
    #[inline(always)]
    fn run_on(&mut self, op: OpId, device: DeviceId, stream: StreamId) {
        self.steps.push(PlanStep::Run { op, device, stream });
        self.advance(stream);
    }

    /// A new token owning `stream`, at its tail.
    #[inline(always)]
    fn tail_token(&mut self, stream: StreamId, producer: Option<OpId>) -> Token {
        let state = &self.streams[stream.index()];
        let point = Point {
            hold: Hold::Stream,
            stream,
            position: state.clock.entries[stream.index()],
            time: state.tail_time,
            producer,
        };
        self.new_token(point)
    }

    /// One more run or wait on `stream`.
    fn advance(&mut self, stream: StreamId) {
        self.time += 1;
        let state = &mut self.streams[stream.index()];
        state.clock.entries[stream.index()] += 1;
        state.tail_time = self.time;
    }

    /// The dependency whose stream the work continues on: the latest one that owns a stream
    /// (of `device`, if given) and that no later dependency follows; else the latest owner.
    fn pick_kept(&self, deps: &[(u64, u64)], device: Option<DeviceId>) -> Option<u32> {
        let mut fallback = None;
        for (rank, &dep) in deps.iter().enumerate() {
            let (time, slot) = (dep.0, dep_slot(dep));
            let state = &self.tokens[slot as usize];
            let on_device = device.is_none_or(|d| self.streams[state.stream.index()].device == d);
            if state.hold != Hold::Stream || !on_device {
                continue;
            }
            let followed = deps[..rank]
                .iter()
                .any(|&other| other.0 > time && self.point_before(slot, dep_slot(other)));
            if !followed {
                return Some(slot);
            }
            fallback = fallback.or(Some(slot));
        }
        fallback
    }

    fn acquire_stream(&mut self, device: DeviceId) -> StreamId {
        let (stream, fresh) = match self.stream_pools[device.index()].pop() {
            Some(stream) => (stream, false),
            None => (self.new_stream(device), true),
        };
        self.steps.push(PlanStep::AcquireStream {
            device,
            stream,
            fresh,
        });
        stream
    }

    /// A stream id never handed out before, on `device`.
    fn new_stream(&mut self, device: DeviceId) -> StreamId {
        let stream = StreamId(self.streams.len() as u32);
        let clock = Clock::new(stream.index() + 1);
        self.streams.push(StreamState {
            device,
            tail_time: 0,
            clock,
        });
        stream
    }

    // This helper and the next ones run for each dependency while planning; inlined, they
    // cost no call frame each.
    #[inline(always)]
    fn release_stream(&mut self, stream: StreamId) {
        let state = &mut self.streams[stream.index()];
        self.stream_pools[state.device.index()].push(stream);
        self.steps.push(PlanStep::ReleaseStream {
            device: state.device,
            stream,
        });
    }

    /// The event at the top of `device`'s pool, created into the pool when it is empty;
    /// whether it was created. It stays in the pool: the caller pops it to keep it.
    #[inline(always)]
    fn pooled_event(&mut self, device: DeviceId) -> (EventId, bool) {
        if let Some(&event) = self.event_pools[device.index()].last() {
            return (event, false);
        }
        let event = EventId(self.events.len() as u32);
        self.events.push(EventState {
            device,
            shares: 0,
            clock: Clock::new(0),
        });
        self.event_pools[device.index()].push(event);
        (event, true)
    }

    /// Makes `stream` wait for the tail of `source` through an event of `source`'s device
    /// pool that goes straight back to it: acquire, record, wait and release in one batch.
    #[inline(always)]
    fn wait_for_tail(&mut self, stream: StreamId, source: StreamId) {
        let device = self.streams[source.index()].device;
        let (event, fresh) = self.pooled_event(device);
        self.steps.extend_from_slice(&[
            PlanStep::AcquireEvent {
                device,
                event,
                fresh,
            },
            PlanStep::Record {
                event,
                stream: source,
            },
            PlanStep::Wait { stream, event },
            PlanStep::ReleaseEvent { device, event },
        ]);
    }

    /// Records an event from the stream's device pool at `stream`'s tail, with no shares and
    /// no clock (a fork sets the clock).
    fn record_on(&mut self, stream: StreamId) -> EventId {
        let device = self.streams[stream.index()].device;
        let (event, fresh) = self.pooled_event(device);
        self.event_pools[device.index()].pop();
        self.steps.push(PlanStep::AcquireEvent {
            device,
            event,
            fresh,
        });
        self.steps.push(PlanStep::Record { event, stream });
        event
    }

    #[inline(always)]
    fn release_event(&mut self, event: EventId) {
        let state = &mut self.events[event.index()];
        self.event_pools[state.device.index()].push(event);
        self.steps.push(PlanStep::ReleaseEvent {
            device: state.device,
            event,
        });
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
    fn release_hold(&mut self, slot: u32) {
        self.end_wait(self.held_by(slot));
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

    /// A live token at `point`.
    #[inline]
    fn new_token(&mut self, point: Point) -> Token {
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.tokens.push(TokenSlot {
                    generation: 0,
                    live: false,
                    hold: point.hold,
                    stream: point.stream,
                    position: point.position,
                    time: point.time,
                    producer: point.producer,
                });
                (self.tokens.len() - 1) as u32
            }
        };
        // Field by field, as `point_of` reads them back (often at once).
        let state = &mut self.tokens[slot as usize];
        state.live = true;
        state.hold = point.hold;
        state.stream = point.stream;
        state.position = point.position;
        state.time = point.time;
        state.producer = point.producer;
        Token(TokenId::new(self.id, slot, state.generation))
    }

    /// A live token's point, read field by field (see `new_token`).
    #[inline]
    fn point_of(&self, slot: u32) -> Point {
        let state = &self.tokens[slot as usize];
        Point {
            hold: state.hold,
            stream: state.stream,
            position: state.position,
            time: state.time,
            producer: state.producer,
        }
    }

    fn free_slot(&mut self, slot: u32) {
        let state = &mut self.tokens[slot as usize];
        state.live = false;
        state.generation = state.generation.wrapping_add(1) & GENERATION_MASK;
        self.free_slots.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::*;
    use crate::token::{TraceView, check, plan_trace};

    const D0: DeviceId = DeviceId(0);
    const D1: DeviceId = DeviceId(1);

    fn start(planner: &mut Planner, op: u32, device: DeviceId) -> Token {
        planner.run(OpId(op), device, &mut Vec::new()).unwrap()
    }

    fn then(planner: &mut Planner, op: u32, device: DeviceId, deps: Vec<Token>) -> Token {
        let mut deps = deps;
        planner.run(OpId(op), device, &mut deps).unwrap()
    }

    /// The steps planned since the last call, also appended to the whole `plan`.
    fn take(planner: &mut Planner, plan: &mut Vec<PlanStep>) -> Vec<PlanStep> {
        let steps: Vec<PlanStep> = planner.drain_steps().collect();
        plan.extend_from_slice(&steps);
        steps
    }

    fn waits(steps: &[PlanStep]) -> usize {
        steps
            .iter()
            .filter(|s| matches!(s, PlanStep::Wait { .. }))
            .count()
    }

    fn records(steps: &[PlanStep]) -> usize {
        steps
            .iter()
            .filter(|s| matches!(s, PlanStep::Record { .. }))
            .count()
    }

    fn fork(planner: &mut Planner, token: Token, count: usize) -> Vec<Token> {
        let mut branches = Vec::new();
        planner.fork(token, count, &mut branches).unwrap();
        branches
    }

    /// Ends the program, drains the pools, and checks the whole plan in both views.
    fn finish_clean(planner: &mut Planner, plan: &mut Vec<PlanStep>) -> ProgramReport {
        let report = planner.end_program();
        planner.drain_pools();
        plan.extend(planner.drain_steps());
        for view in [TraceView::Logical, TraceView::Driver] {
            assert_eq!(check(&plan_trace(plan, view)), vec![], "{view:?}");
        }
        report
    }

    #[test]
    fn a_begun_wait_keeps_its_stream_and_event_out_of_the_pools_until_it_ends() {
        let recorded = |steps: &[PlanStep]| {
            steps.iter().find_map(|step| match *step {
                PlanStep::Record { event, .. } => Some(event),
                _ => None,
            })
        };
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        // A stream: not handed to the next operation while the wait is open.
        let a = start(&mut p, 0, D0);
        let held = p.stream_of(&a).unwrap();
        let pending = p.begin_wait(a).unwrap();
        assert_eq!(pending, PendingWait::Stream(held));
        let b = start(&mut p, 1, D0);
        assert_ne!(p.stream_of(&b).unwrap(), held);
        p.end_wait(pending);
        let c = start(&mut p, 2, D0);
        assert_eq!(
            p.stream_of(&c).unwrap(),
            held,
            "back in the pool once the wait ended"
        );
        // A fork event: not recorded again by another fork while a wait on its branch is open.
        let [keep, branch] = <[Token; 2]>::try_from(fork(&mut p, c, 2)).unwrap();
        let event = recorded(&take(&mut p, &mut plan)).unwrap();
        let pending = p.begin_wait(branch).unwrap();
        assert_eq!(pending, PendingWait::Event(event));
        let [keep_b, branch_b] = <[Token; 2]>::try_from(fork(&mut p, b, 2)).unwrap();
        let recorded_again = recorded(&take(&mut p, &mut plan));
        assert!(recorded_again.is_some(), "the second fork records an event");
        assert_ne!(recorded_again, Some(event));
        p.end_wait(pending);
        assert!(
            take(&mut p, &mut plan).contains(&PlanStep::ReleaseEvent { device: D0, event }),
            "the last share ended with the wait"
        );
        for token in [keep, keep_b, branch_b] {
            p.wait(token).unwrap();
        }
        let report = finish_clean(&mut p, &mut plan);
        assert_eq!(report.unwaited, vec![]);
    }

    #[test]
    fn a_reserved_stream_is_never_planned_on_and_its_id_never_handed_out() {
        let mut p = Planner::new(2);
        let reserved = p.reserve_stream(D0).unwrap();
        assert_eq!(p.steps(), &[], "reserving plans nothing");
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let b = then(&mut p, 1, D0, vec![a]);
        p.wait(b).unwrap();
        p.drain_pools();
        let steps = take(&mut p, &mut plan);
        let named: Vec<StreamId> = steps
            .iter()
            .filter_map(|step| match *step {
                PlanStep::AcquireStream { stream, .. }
                | PlanStep::ReleaseStream { stream, .. }
                | PlanStep::DestroyStream { stream, .. }
                | PlanStep::Run { stream, .. }
                | PlanStep::SynchronizeStream { stream } => Some(stream),
                _ => None,
            })
            .collect();
        assert!(!named.is_empty());
        assert!(!named.contains(&reserved), "{steps:?}");
        assert_eq!(
            p.reserve_stream(DeviceId(2)),
            Err(Error::UnknownDevice {
                device: DeviceId(2),
                device_count: 2
            })
        );
    }

    #[test]
    fn a_chain_stays_on_one_stream_without_events() {
        let mut p = Planner::new(1);
        let a = start(&mut p, 0, D0);
        let b = then(&mut p, 1, D0, vec![a]);
        let c = then(&mut p, 2, D0, vec![b]);
        p.wait(c).unwrap();
        let s = StreamId(0);
        assert_eq!(
            p.steps(),
            &[
                PlanStep::AcquireStream {
                    device: D0,
                    stream: s,
                    fresh: true
                },
                PlanStep::Run {
                    op: OpId(0),
                    device: D0,
                    stream: s
                },
                PlanStep::Run {
                    op: OpId(1),
                    device: D0,
                    stream: s
                },
                PlanStep::Run {
                    op: OpId(2),
                    device: D0,
                    stream: s
                },
                PlanStep::SynchronizeStream { stream: s },
                PlanStep::ReleaseStream {
                    device: D0,
                    stream: s
                },
            ]
        );
    }

    #[test]
    fn two_dependencies_cost_one_wait_and_release_the_other_stream() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let b = start(&mut p, 1, D0);
        take(&mut p, &mut plan);
        let c = then(&mut p, 2, D0, vec![a, b]);
        let steps = take(&mut p, &mut plan);
        assert_eq!(waits(&steps), 1);
        assert_eq!(records(&steps), 1);
        // The latest dependency's stream is kept; the other goes back to the pool (the join
        // that leaks its input streams is the defect this rules out).
        assert!(steps.contains(&PlanStep::ReleaseStream {
            device: D0,
            stream: StreamId(0)
        }));
        assert_eq!(p.stream_of(&c).unwrap(), StreamId(1));
        p.wait(c).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    #[test]
    fn a_dependency_already_waited_for_costs_nothing() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let [a_keep, a_branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
        let b = then(&mut p, 1, D0, vec![a_branch]);
        take(&mut p, &mut plan);
        let c = then(&mut p, 2, D0, vec![b, a_keep]);
        let steps = take(&mut p, &mut plan);
        assert_eq!(waits(&steps), 0, "{steps:?}");
        assert_eq!(records(&steps), 0);
        p.wait(c).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    #[test]
    fn a_dependency_implied_by_another_dependency_costs_nothing() {
        let mut p = Planner::new(2);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let [a_keep, a_branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
        let b = then(&mut p, 1, D0, vec![a_branch]);
        take(&mut p, &mut plan);
        // On device 1 neither stream can be kept; b's stream already waited for a's point.
        let c = then(&mut p, 2, D1, vec![a_keep, b]);
        let steps = take(&mut p, &mut plan);
        assert_eq!(waits(&steps), 1, "{steps:?}");
        p.wait(c).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    #[test]
    fn a_fan_in_wider_than_a_clock_lists_still_implies_every_branch() {
        // Ten branches of one fork joined on one stream raise its clock at more streams than
        // a clock lists above its base; a later merge of that clock must still carry all ten.
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let mut branches = fork(&mut p, a, 12).into_iter();
        let keep = branches.next().unwrap();
        let last = then(&mut p, 1, D0, vec![branches.next().unwrap()]);
        let first = then(&mut p, 2, D0, vec![branches.next().unwrap()]);
        let [first_joined, first_later] = <[Token; 2]>::try_from(fork(&mut p, first, 2)).unwrap();
        let mut ran = vec![first_joined];
        for (i, branch) in branches.enumerate() {
            ran.push(then(&mut p, 10 + i as u32, D0, vec![branch]));
        }
        assert_eq!(ran.len(), 10);
        let joined = then(&mut p, 30, D0, ran);
        // A branch running on past the join, so the next operation continues on its stream.
        let last = then(&mut p, 31, D0, vec![last]);
        let both = then(&mut p, 32, D0, vec![joined, last]);
        take(&mut p, &mut plan);
        // The first branch's point came through the join: no wait.
        let after = then(&mut p, 33, D0, vec![both, first_later]);
        assert_eq!(waits(&take(&mut p, &mut plan)), 0);
        p.wait(after).unwrap();
        p.wait(keep).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    #[test]
    fn fork_records_once_and_waits_lazily_per_branch() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        take(&mut p, &mut plan);
        let branches = fork(&mut p, a, 3);
        let at_fork = take(&mut p, &mut plan);
        assert_eq!(records(&at_fork), 1);
        assert_eq!(waits(&at_fork), 0);
        let mut rest = branches.into_iter();
        let keep = rest.next().unwrap();
        let b1 = rest.next().unwrap();
        let b2 = rest.next().unwrap();
        let k = then(&mut p, 1, D0, vec![keep]);
        assert_eq!(waits(&take(&mut p, &mut plan)), 0);
        let x = then(&mut p, 2, D0, vec![b1]);
        let first_use = take(&mut p, &mut plan);
        assert_eq!(waits(&first_use), 1);
        assert!(
            !first_use
                .iter()
                .any(|s| matches!(s, PlanStep::ReleaseEvent { .. })),
            "the event is still shared by one branch"
        );
        p.discard(b2).unwrap();
        let last = take(&mut p, &mut plan);
        assert!(matches!(last[..], [PlanStep::ReleaseEvent { .. }]));
        p.wait(k).unwrap();
        p.wait(x).unwrap();
        let report = finish_clean(&mut p, &mut plan);
        assert_eq!(report.unwaited.len(), 1);
        assert_eq!(report.unwaited[0].kind, UnwaitedKind::Discarded);
    }

    #[test]
    fn the_unwaited_report_names_a_bounded_number_and_counts_the_rest() {
        let mut p = Planner::new(1);
        let extra = 5;
        for op in 0..(UNWAITED_NAMED + extra) as u32 {
            let t = start(&mut p, op, D0);
            p.discard(t).unwrap();
            p.drain_steps();
        }
        let footprint = p.footprint();
        assert_eq!(footprint.unwaited_named, UNWAITED_NAMED);
        assert_eq!(footprint.unwaited_unnamed, extra as u64);
        assert_eq!(footprint.live_tokens, 0);
        let report = p.end_program();
        assert_eq!(report.unwaited.len(), UNWAITED_NAMED);
        assert_eq!(report.unnamed, extra as u64);
        assert_eq!(report.unwaited_count(), (UNWAITED_NAMED + extra) as u64);
        assert_eq!(report.unwaited[0].producer, Some(OpId(0)));
        // The next program's report starts from nothing.
        assert_eq!(p.end_program(), ProgramReport::default());
    }

    #[test]
    fn a_detached_fork_gives_the_stream_back_and_its_releases_go_unreported() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let stream = p.stream_of(&a).unwrap();
        take(&mut p, &mut plan);
        let mut branches = Vec::new();
        p.fork_detached(a, 2, &mut branches).unwrap();
        let at_fork = take(&mut p, &mut plan);
        assert_eq!(records(&at_fork), 1);
        assert!(
            at_fork
                .iter()
                .any(|s| matches!(s, PlanStep::ReleaseStream { stream: s, .. } if *s == stream)),
            "{at_fork:?}"
        );
        let [b1, b2] = <[Token; 2]>::try_from(branches).unwrap();
        // The stream is free: new work after a branch runs on it, and its order implies the
        // fork event, so nothing waits.
        let next = then(&mut p, 1, D0, vec![b1]);
        assert_eq!(p.stream_of(&next).unwrap(), stream);
        assert_eq!(waits(&take(&mut p, &mut plan)), 0);
        p.release(b2).unwrap();
        assert!(matches!(p.release(Token::from_id(next.id())), Ok(())));
        assert!(matches!(p.wait(next), Err(Error::TokenConsumed { .. })));
        let mut none = Vec::new();
        let c = start(&mut p, 2, D0);
        assert!(matches!(
            p.fork_detached(c, 0, &mut none),
            Err(Error::ZeroSize { .. })
        ));
        assert_eq!(
            finish_clean(&mut p, &mut plan).unwaited.len(),
            1,
            "only `c`"
        );
    }

    #[test]
    fn forking_a_branch_shares_its_event() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let [keep, branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
        take(&mut p, &mut plan);
        let again = fork(&mut p, branch, 3);
        assert!(p.steps().is_empty(), "{:?}", p.steps());
        for (i, token) in again.into_iter().enumerate() {
            let t = then(&mut p, 10 + i as u32, D0, vec![token]);
            p.wait(t).unwrap();
        }
        p.wait(keep).unwrap();
        assert_eq!(finish_clean(&mut p, &mut plan).unwaited, vec![]);
    }

    #[test]
    fn a_writer_after_two_readers_waits_for_both() {
        // cudarc keeps one read event per buffer, so a writer after two readers on different
        // streams waits only for the last one; tokens keep both.
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let [keep, r1, r2] = <[Token; 3]>::try_from(fork(&mut p, a, 3)).unwrap();
        let read1 = then(&mut p, 1, D0, vec![r1]);
        let read2 = then(&mut p, 2, D0, vec![r2]);
        let s1 = p.stream_of(&read1).unwrap();
        let s2 = p.stream_of(&read2).unwrap();
        assert_ne!(s1, s2);
        take(&mut p, &mut plan);
        let w = then(&mut p, 3, D0, vec![read1, read2, keep]);
        let steps = take(&mut p, &mut plan);
        // Kept on the last reader's stream, one wait for the other reader; the fork point is
        // implied (both readers waited for it).
        assert_eq!(waits(&steps), 1, "{steps:?}");
        let ran_on = steps.iter().find_map(|s| match s {
            PlanStep::Run { stream, .. } => Some(*stream),
            _ => None,
        });
        assert_eq!(ran_on, Some(s2));
        let waited = steps.iter().find_map(|s| match s {
            PlanStep::Wait { event, .. } => Some(*event),
            _ => None,
        });
        let recorded_on_first_reader = steps.iter().any(|s| {
            matches!(s, PlanStep::Record { event, stream } if Some(*event) == waited && *stream == s1)
        });
        assert!(recorded_on_first_reader, "{steps:?}");
        p.wait(w).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    #[test]
    fn a_cross_device_dependency_waits_on_an_event_of_the_producing_device() {
        let mut p = Planner::new(2);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        take(&mut p, &mut plan);
        let b = then(&mut p, 1, D1, vec![a]);
        let steps = take(&mut p, &mut plan);
        let (s0, s1, e) = (StreamId(0), StreamId(1), EventId(0));
        assert_eq!(
            steps,
            vec![
                PlanStep::AcquireStream {
                    device: D1,
                    stream: s1,
                    fresh: true
                },
                PlanStep::AcquireEvent {
                    device: D0,
                    event: e,
                    fresh: true
                },
                PlanStep::Record {
                    event: e,
                    stream: s0
                },
                PlanStep::Wait {
                    stream: s1,
                    event: e
                },
                PlanStep::ReleaseEvent {
                    device: D0,
                    event: e
                },
                PlanStep::ReleaseStream {
                    device: D0,
                    stream: s0
                },
                PlanStep::Run {
                    op: OpId(1),
                    device: D1,
                    stream: s1
                },
            ]
        );
        p.wait(b).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    #[test]
    fn a_synchronous_wait_on_a_branch_synchronises_its_event() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let [keep, branch] = <[Token; 2]>::try_from(fork(&mut p, a, 2)).unwrap();
        take(&mut p, &mut plan);
        p.wait(branch).unwrap();
        let steps = take(&mut p, &mut plan);
        assert!(matches!(
            steps[..],
            [
                PlanStep::SynchronizeEvent { event: e1 },
                PlanStep::ReleaseEvent { event: e2, .. }
            ] if e1 == e2
        ));
        p.wait(keep).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    #[test]
    fn unused_tokens_are_released_once_and_reported_at_the_end() {
        let mut p = Planner::new(2);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        let b = start(&mut p, 1, D1);
        let branches = fork(&mut p, a, 2);
        let a_id = branches[0].id();
        core::mem::drop(branches);
        let report = finish_clean(&mut p, &mut plan);
        assert_eq!(report.unwaited.len(), 3);
        assert!(
            report
                .unwaited
                .iter()
                .all(|u| u.kind == UnwaitedKind::Outstanding)
        );
        assert!(report.unwaited.iter().any(|u| u.token == a_id));
        assert!(
            report
                .unwaited
                .iter()
                .any(|u| u.token == b.id() && u.producer == Some(OpId(1)))
        );
        // Every token is void after the end.
        assert_eq!(
            p.wait(b),
            Err(Error::TokenConsumed {
                token: b_id(&report)
            })
        );
    }

    fn b_id(report: &ProgramReport) -> TokenId {
        report
            .unwaited
            .iter()
            .find(|u| u.producer == Some(OpId(1)))
            .unwrap()
            .token
    }

    #[test]
    fn misuse_is_a_typed_error_and_changes_nothing() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let mut other = Planner::new(1);
        let a = start(&mut p, 0, D0);
        let b = start(&mut p, 1, D0);
        let a_id = a.id();
        let c = then(&mut p, 2, D0, vec![a]);
        let before = p.clone();
        let foreign = start(&mut other, 0, D0);
        let foreign_id = foreign.id();
        let unknown = TokenId::new(p.id(), 99, 0);
        let cases: Vec<(Vec<Token>, Error)> = vec![
            (
                vec![Token::from_id(b.id()), Token::from_id(a_id)],
                Error::TokenConsumed { token: a_id },
            ),
            (
                vec![Token::from_id(b.id()), foreign],
                Error::TokenForeign {
                    token: foreign_id,
                    planner: p.id(),
                },
            ),
            (
                vec![Token::from_id(unknown)],
                Error::TokenUnknown { token: unknown },
            ),
            (
                vec![Token::from_id(c.id()), Token::from_id(c.id())],
                Error::TokenConsumed { token: c.id() },
            ),
        ];
        for (mut deps, error) in cases {
            let given = deps.len();
            assert_eq!(p.run(OpId(9), D0, &mut deps), Err(error.clone()));
            assert_eq!(p.join(&mut deps), Err(error));
            assert_eq!(deps.len(), given, "a failed call keeps its dependencies");
            assert!(p == before);
        }
        let mut none = Vec::new();
        assert!(matches!(p.join(&mut none), Err(Error::ZeroSize { .. })));
        let mut keep = vec![Token::from_id(b.id())];
        assert_eq!(
            p.run(OpId(9), DeviceId(1), &mut keep),
            Err(Error::UnknownDevice {
                device: DeviceId(1),
                device_count: 1
            })
        );
        assert_eq!(keep.len(), 1);
        assert!(matches!(
            p.fork(Token::from_id(b.id()), 0, &mut Vec::new()),
            Err(Error::ZeroSize { .. })
        ));
        assert!(matches!(
            p.fork(Token::from_id(b.id()), usize::MAX, &mut Vec::new()),
            Err(Error::LimitExceeded { .. })
        ));
        assert_eq!(
            p.wait(Token::from_id(a_id)),
            Err(Error::TokenConsumed { token: a_id })
        );
        assert_eq!(
            p.discard(Token::from_id(unknown)),
            Err(Error::TokenUnknown { token: unknown })
        );
        assert!(p == before);
        // The tokens are still good.
        let d = then(&mut p, 3, D0, keep);
        p.wait(d).unwrap();
        p.wait(c).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    /// Fork counts above the stated limit, up to `usize::MAX`, are refused before anything is
    /// allocated (`Vec::with_capacity(1 << 40)` aborted the process), changing nothing: the
    /// token stays live and forks within the limit.
    #[test]
    fn a_fork_above_the_branch_limit_is_refused_and_changes_nothing() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let token = start(&mut p, 0, D0);
        let id = token.id();
        let before = p.clone();
        // 2^40 where usize holds it (the i686 run of this suite has 32 bits).
        let huge = usize::try_from(1u64 << 40).unwrap_or(usize::MAX);
        for count in [MAX_FORK_BRANCHES + 1, u32::MAX as usize, huge, usize::MAX] {
            let refused = Error::LimitExceeded {
                what: "fork branch count",
                required: count,
                limit: MAX_FORK_BRANCHES,
                detail: alloc::vec![String::from(
                    "branches of one fork; fork a branch again for more"
                )],
            };
            let mut branches = Vec::new();
            assert_eq!(
                p.fork(Token::from_id(id), count, &mut branches),
                Err(refused.clone())
            );
            assert_eq!(
                p.fork_detached(Token::from_id(id), count, &mut branches),
                Err(refused)
            );
            assert!(branches.is_empty() && branches.capacity() == 0);
            assert!(p == before);
        }
        let branches = fork(&mut p, Token::from_id(id), MAX_FORK_BRANCHES);
        assert_eq!(branches.len(), MAX_FORK_BRANCHES);
        for branch in branches {
            p.wait(branch).unwrap();
        }
        finish_clean(&mut p, &mut plan);
    }

    /// The live-token limit names the tokens a request would need, capped at `usize::MAX`: on
    /// a 32-bit target "live + count" overflowed (a panic in debug builds, a wrong number in
    /// release).
    #[test]
    fn the_live_token_limit_names_the_tokens_needed_without_overflow() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let kept = start(&mut p, 0, D0);
        assert_eq!(
            p.check_room(usize::MAX),
            Err(Error::LimitExceeded {
                what: "live tokens of one planner",
                required: usize::MAX,
                limit: TokenId::SLOT_LIMIT,
                detail: Vec::new(),
            })
        );
        assert_eq!(p.check_room(TokenId::SLOT_LIMIT - 1), Ok(()));
        p.wait(kept).unwrap();
        finish_clean(&mut p, &mut plan);
    }

    #[test]
    fn warm_pools_hand_out_the_same_streams_and_events() {
        let program = |p: &mut Planner| {
            let a = start(p, 0, D0);
            let [x, y] = <[Token; 2]>::try_from(fork(p, a, 2)).unwrap();
            let y = then(p, 1, D0, vec![y]);
            let z = then(p, 2, D0, vec![x, y]);
            p.wait(z).unwrap();
            p.end_program()
        };
        let mut p = Planner::new(1);
        program(&mut p);
        let first: Vec<_> = p.drain_steps().collect();
        assert!(first.iter().any(|s| matches!(
            s,
            PlanStep::AcquireStream { fresh: true, .. }
                | PlanStep::AcquireEvent { fresh: true, .. }
        )));
        program(&mut p);
        let second: Vec<_> = p.drain_steps().collect();
        assert!(!second.iter().any(|s| matches!(
            s,
            PlanStep::AcquireStream { fresh: true, .. }
                | PlanStep::AcquireEvent { fresh: true, .. }
        )));
        assert!(
            second
                .iter()
                .any(|s| matches!(s, PlanStep::AcquireStream { .. }))
        );
    }

    #[test]
    fn drained_ids_are_never_handed_out_again() {
        let mut p = Planner::new(1);
        let mut plan = Vec::new();
        let a = start(&mut p, 0, D0);
        p.wait(a).unwrap();
        p.drain_pools();
        let drained = take(&mut p, &mut plan);
        assert!(drained.contains(&PlanStep::DestroyStream {
            device: D0,
            stream: StreamId(0)
        }));
        let b = start(&mut p, 1, D0);
        assert_eq!(p.stream_of(&b).unwrap(), StreamId(1));
        p.wait(b).unwrap();
        finish_clean(&mut p, &mut plan);
    }
}
