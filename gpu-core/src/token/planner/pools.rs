//! Per-device pools of streams and events: acquiring (created when the pool is empty),
//! giving back, single-use wait events, streams reserved for adoption, and draining.

use super::Planner;
use super::clock::Clock;
use super::state::{EventState, StreamState};
use super::steps::PlanStep;
use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, StreamId};

impl Planner {
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

    pub(super) fn acquire_stream(&mut self, device: DeviceId) -> StreamId {
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
            due: None,
        });
        stream
    }

    // This helper and the next ones (and the `#[inline(always)]` helpers of `wait` that give
    // back what a token held) run for each dependency while planning; inlined, they cost no
    // call frame each.

    /// Gives `stream` back to its pool, recording first an event still due at its tail: a
    /// pooled stream is used by no step until it is acquired again.
    #[inline(always)]
    pub(super) fn release_stream(&mut self, stream: StreamId) {
        self.record_due(stream);
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
            due_on: None,
        });
        self.event_pools[device.index()].push(event);
        (event, true)
    }

    /// Makes `stream` wait for the tail of `source` through an event of `source`'s device
    /// pool that goes straight back to it: acquire, record, wait and release in one batch.
    #[inline(always)]
    pub(super) fn wait_for_tail(&mut self, stream: StreamId, source: StreamId) {
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

    /// Takes an event from the stream's device pool for a fork at `stream`'s tail, with no
    /// shares, the stream's clock, and its record deferred: it is due before the stream moves
    /// on or goes back to its pool ([`Planner::record_due`]), or sooner when a wait needs it
    /// ([`Planner::record_event`]).
    pub(super) fn defer_record(&mut self, stream: StreamId) -> EventId {
        let device = self.streams[stream.index()].device;
        let (event, fresh) = self.pooled_event(device);
        self.event_pools[device.index()].pop();
        self.steps.push(PlanStep::AcquireEvent {
            device,
            event,
            fresh,
        });
        let (streams, events) = (&mut self.streams, &mut self.events);
        let (source, state) = (&mut streams[stream.index()], &mut events[event.index()]);
        state.clock.copy_from(&source.clock);
        state.due_on = Some(stream);
        source.due = Some(event);
        event
    }

    /// Records the event due at `stream`'s tail, if any: called before a run or wait moves
    /// the stream past the point the event stands for, and before the stream is pooled.
    #[inline(always)]
    pub(super) fn record_due(&mut self, stream: StreamId) {
        if let Some(event) = self.streams[stream.index()].due.take() {
            self.events[event.index()].due_on = None;
            self.steps.push(PlanStep::Record { event, stream });
        }
    }

    /// Records `event` now if its record is still deferred (a wait on it comes next).
    #[inline(always)]
    pub(super) fn record_event(&mut self, event: EventId) {
        if let Some(stream) = self.events[event.index()].due_on {
            self.record_due(stream);
        }
    }

    /// Gives `event` back to its pool; a record still due is dropped (no branch needs it).
    #[inline(always)]
    pub(super) fn release_event(&mut self, event: EventId) {
        let state = &mut self.events[event.index()];
        if let Some(stream) = state.due_on.take() {
            self.streams[stream.index()].due = None;
        }
        self.event_pools[state.device.index()].push(event);
        self.steps.push(PlanStep::ReleaseEvent {
            device: state.device,
            event,
        });
    }
}
