//! Happens-before between stream operations: a vector clock per stream (slot), the host's
//! clock, events' recorded clocks, and the edges of stream order, events, host synchronisations
//! and the legacy default stream.
//!
//! A slot's component counts its operations (its epochs); operation `e` of slot `i` happens
//! before whatever has a clock `c` with `c[i] >= e`. A destroyed stream's slot is given to a new
//! stream only once the host has waited for all its work (then every later operation is
//! ordered after all of it, so sharing the component loses nothing); until then it is kept.

use alloc::vec::Vec;

use hashbrown::HashMap;

use crate::id::{DeviceId, EventId, StreamId};
use crate::token::trace::StreamKind;

/// A vector clock: one component per slot (missing components are 0).
pub(super) type Clock = Vec<u32>;

/// `into` joined with `from`, component by component.
pub(super) fn join(into: &mut Clock, from: &[u32]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (mine, theirs) in into.iter_mut().zip(from) {
        *mine = (*mine).max(*theirs);
    }
}

/// Component `slot` of `clock`.
#[inline]
pub(super) fn component(clock: &[u32], slot: u32) -> u32 {
    clock.get(slot as usize).copied().unwrap_or(0)
}

/// The device of a stream used without being created or declared: no legacy stream's.
const NO_DEVICE: DeviceId = DeviceId(u32::MAX);

#[derive(Debug)]
struct Slot {
    clock: Clock,
    stream: StreamId,
    device: DeviceId,
    kind: StreamKind,
    alive: bool,
    /// The host clock's version last joined.
    host_seen: u64,
    /// For a blocking stream: the legacy stream's epoch last joined. For a legacy stream:
    /// each slot's epoch last joined (by slot).
    legacy_seen: u32,
    seen: Vec<u32>,
}

impl Slot {
    fn epoch(&self, me: u32) -> u32 {
        component(&self.clock, me)
    }
}

/// The clocks of every stream, event and the host.
#[derive(Debug, Default)]
pub(super) struct Clocks {
    slots: Vec<Slot>,
    by_stream: HashMap<u32, u32>,
    /// Slots of destroyed streams, not yet given to new ones.
    dead: Vec<u32>,
    host: Clock,
    host_version: u64,
    /// Each device's legacy default stream.
    legacy: HashMap<u32, u32>,
    events: HashMap<u32, Clock>,
}

impl Clocks {
    /// How many slots (streams alive, and destroyed ones the host has not waited for).
    pub(super) fn slots(&self) -> usize {
        self.slots.len() - self.dead.len()
    }

    /// How many recorded events are remembered.
    pub(super) fn events(&self) -> usize {
        self.events.len()
    }

    /// A stream comes to life (created, or a default stream declared).
    pub(super) fn create(&mut self, stream: StreamId, device: DeviceId, kind: StreamKind) {
        if let Some(&slot) = self.by_stream.get(&stream.0) {
            let slot = &mut self.slots[slot as usize];
            if slot.alive && slot.kind == kind && slot.device == device {
                return;
            }
        }
        self.new_slot(stream, device, kind);
    }

    fn new_slot(&mut self, stream: StreamId, device: DeviceId, kind: StreamKind) -> u32 {
        if let Some(&old) = self.by_stream.get(&stream.0) {
            self.destroy_slot(old);
        }
        let host = &self.host;
        let reusable = self.dead.iter().position(|&slot| {
            let old = &self.slots[slot as usize];
            component(host, slot) >= old.epoch(slot)
        });
        let fresh = Slot {
            clock: self.host.clone(),
            stream,
            device,
            kind,
            alive: true,
            host_seen: self.host_version,
            legacy_seen: 0,
            seen: Vec::new(),
        };
        let slot = match reusable {
            Some(at) => {
                let slot = self.dead.swap_remove(at);
                self.slots[slot as usize] = fresh;
                slot
            }
            None => {
                self.slots.push(fresh);
                (self.slots.len() - 1) as u32
            }
        };
        self.by_stream.insert(stream.0, slot);
        self.set_kind_of(slot, kind);
        slot
    }

    /// Sets how a stream synchronises with the legacy default stream.
    pub(super) fn set_kind(&mut self, stream: StreamId, kind: StreamKind) {
        let slot = self.slot(stream);
        self.set_kind_of(slot, kind);
    }

    fn set_kind_of(&mut self, slot: u32, kind: StreamKind) {
        let state = &mut self.slots[slot as usize];
        state.kind = kind;
        let device = state.device.0;
        if kind == StreamKind::Legacy {
            // The first legacy stream declared on a device stays its legacy stream (a default
            // stream declared before its `stream_kind per_thread` line does not replace it).
            self.legacy.entry(device).or_insert(slot);
        } else if self.legacy.get(&device) == Some(&slot) {
            self.legacy.remove(&device);
        }
    }

    /// A stream is destroyed.
    pub(super) fn destroy(&mut self, stream: StreamId) {
        if let Some(&slot) = self.by_stream.get(&stream.0) {
            self.destroy_slot(slot);
        }
    }

    fn destroy_slot(&mut self, slot: u32) {
        let state = &mut self.slots[slot as usize];
        if !state.alive {
            return;
        }
        state.alive = false;
        self.by_stream.remove(&state.stream.0);
        if self.legacy.get(&state.device.0) == Some(&slot) {
            self.legacy.remove(&state.device.0);
        }
        self.dead.push(slot);
    }

    /// The slot of a stream (one used but never created gets a non-blocking slot of its own).
    pub(super) fn slot(&mut self, stream: StreamId) -> u32 {
        match self.by_stream.get(&stream.0) {
            Some(&slot) => slot,
            None => self.new_slot(stream, NO_DEVICE, StreamKind::NonBlocking),
        }
    }

    /// The clock of a slot.
    pub(super) fn clock(&self, slot: u32) -> &[u32] {
        &self.slots[slot as usize].clock
    }

    /// Joins `from` into a slot's clock (an edge into its next operations).
    pub(super) fn join_into(&mut self, slot: u32, from: &[u32]) {
        join(&mut self.slots[slot as usize].clock, from);
    }

    /// A new operation is enqueued on `stream`: after what the host knows has finished, after
    /// the legacy default stream's earlier work (blocking streams) or every blocking stream's
    /// (the legacy stream); returns its slot and epoch.
    pub(super) fn enqueue(&mut self, stream: StreamId) -> (u32, u32) {
        let slot = self.slot(stream);
        let me = slot as usize;
        if self.slots[me].host_seen != self.host_version {
            let state = &mut self.slots[me];
            join(&mut state.clock, &self.host);
            state.host_seen = self.host_version;
        }
        let (kind, device) = (self.slots[me].kind, self.slots[me].device);
        if kind.blocking() {
            if let Some(&legacy) = self.legacy.get(&device.0) {
                let epoch = self.slots[legacy as usize].epoch(legacy);
                if epoch > self.slots[me].legacy_seen {
                    let from = core::mem::take(&mut self.slots[legacy as usize].clock);
                    join(&mut self.slots[me].clock, &from);
                    self.slots[legacy as usize].clock = from;
                    self.slots[me].legacy_seen = epoch;
                }
            }
        } else if kind == StreamKind::Legacy {
            let mut seen = core::mem::take(&mut self.slots[me].seen);
            let mut clock = core::mem::take(&mut self.slots[me].clock);
            for (other, state) in self.slots.iter().enumerate() {
                if other == me || !state.alive || !state.kind.blocking() || state.device != device {
                    continue;
                }
                let epoch = state.epoch(other as u32);
                if seen.len() <= other {
                    seen.resize(other + 1, 0);
                }
                if epoch > seen[other] {
                    join(&mut clock, &state.clock);
                    seen[other] = epoch;
                }
            }
            self.slots[me].seen = seen;
            self.slots[me].clock = clock;
        }
        let state = &mut self.slots[me];
        if state.clock.len() <= me {
            state.clock.resize(me + 1, 0);
        }
        state.clock[me] += 1;
        (slot, state.clock[me])
    }

    /// `event` is recorded on `stream` (an operation of it).
    pub(super) fn record(&mut self, event: EventId, stream: StreamId) {
        let (slot, _) = self.enqueue(stream);
        let clock = self.events.entry(event.0).or_default();
        clock.clear();
        clock.extend_from_slice(&self.slots[slot as usize].clock);
    }

    /// `stream` waits for `event`'s last record (nothing if never recorded).
    pub(super) fn wait(&mut self, stream: StreamId, event: EventId) {
        let (slot, _) = self.enqueue(stream);
        if let Some(clock) = self.events.get(&event.0) {
            join(&mut self.slots[slot as usize].clock, clock);
        }
    }

    /// An event is destroyed: its record is forgotten.
    pub(super) fn destroy_event(&mut self, event: EventId) {
        self.events.remove(&event.0);
    }

    /// The host waits for all work enqueued on `stream` so far.
    pub(super) fn synchronize_stream(&mut self, stream: StreamId) {
        if let Some(&slot) = self.by_stream.get(&stream.0) {
            join(&mut self.host, &self.slots[slot as usize].clock);
            self.host_version += 1;
        }
    }

    /// The host waits for `event`'s last record.
    pub(super) fn synchronize_event(&mut self, event: EventId) {
        if let Some(clock) = self.events.get(&event.0) {
            join(&mut self.host, clock);
            self.host_version += 1;
        }
    }

    /// The host waits for every stream of `device` (of every device: `None`).
    pub(super) fn synchronize_device(&mut self, device: Option<DeviceId>) {
        for state in &self.slots {
            if device.is_none_or(|device| device == state.device) {
                join(&mut self.host, &state.clock);
            }
        }
        self.host_version += 1;
    }
}
