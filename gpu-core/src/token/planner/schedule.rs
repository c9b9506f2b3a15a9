//! Planning one call's validated dependencies onto one stream: which input stream the work
//! continues on, which waits the plan does not already imply, and the run itself.

use super::Planner;
use super::clock::Clock;
use super::state::{Hold, Point, dep_slot, pair_mut};
use super::steps::PlanStep;
use crate::id::{DeviceId, StreamId};
use crate::token::handle::{OpId, Token};

impl Planner {
    /// The most common plan, made without the general one's bookkeeping (what `schedule`
    /// would do for it, step for step, through the same `run_on` and `tail_token`): one
    /// dependency that owns a stream of `device`, so the operation runs next on that stream
    /// and nothing waits. `None` for any other case. `slot` is a validated live token's.
    #[inline]
    pub(super) fn continue_chain(
        &mut self,
        op: OpId,
        device: DeviceId,
        slot: u32,
    ) -> Option<Token> {
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
    pub(super) fn schedule(&mut self, op: Option<OpId>, device: Option<DeviceId>) -> Token {
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
                // The wait moves the target on: an event due at its tail is recorded first.
                self.record_due(target);
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
                        self.record_event(event);
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

    /// Runs `op` next on `stream` (of `device`), after recording an event due at its tail.
    #[inline(always)]
    fn run_on(&mut self, op: OpId, device: DeviceId, stream: StreamId) {
        self.record_due(stream);
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
}
