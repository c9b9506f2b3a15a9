//! Host-registered memory: the caller's own host range, pinned through the lock interval table
//! and never cached; unpinned only once the work of every stream that used it has completed.
//! A registration owns its lock ([`LockOwner::Guard`]): raw unlocks of the table never release it.

use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, StreamId};
use crate::lock_table::{LockOutcome, LockOwner, LockTable, PinDriver};

use super::stats::AllocatorStats;
use super::{MemoryKind, Release, SegmentDriver};

/// What a handle slot holds.
#[derive(Debug, PartialEq, Eq)]
enum State {
    Unused,
    Live,
    /// Freed; unlocked once these events (one per stream that used it) have completed.
    Unlocking(Vec<EventId>),
}

struct Registration {
    ptr: usize,
    len: usize,
    generation: u32,
    state: State,
    /// Streams whose work uses it.
    streams: Vec<StreamId>,
}

/// The host-registered allocations of one device's allocator.
#[derive(Default)]
pub(crate) struct RegisteredMemory {
    slots: Vec<Registration>,
    unused: Vec<u32>,
    stats: AllocatorStats,
}

impl RegisteredMemory {
    pub(crate) fn stats(&self) -> &AllocatorStats {
        &self.stats
    }

    /// Locks `[ptr, ptr + len)` in `table`; returns the handle's slot and generation.
    pub(crate) fn register<D: PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        table: &mut LockTable,
        ptr: usize,
        len: usize,
    ) -> Result<(u32, u32)> {
        if self.unused.is_empty() {
            self.slots
                .try_reserve(1)
                .map_err(|_| Error::HostOutOfMemory {
                    what: "host-registered allocation handles",
                })?;
        }
        // The registration owns its lock: raw unlocks of the table cannot release it.
        let locked = table.lock_as(driver, ptr, len, LockOwner::Guard)?;
        if locked.outcome == LockOutcome::Pinned {
            self.stats.misses += 1;
        } else {
            self.stats.hits += 1;
        }
        self.stats.note_live(len, len);
        let fresh = |generation| Registration {
            ptr,
            len,
            generation,
            state: State::Live,
            streams: Vec::new(),
        };
        let slot = match self.unused.pop() {
            Some(slot) => {
                let generation = self.slots[slot as usize].generation.wrapping_add(1);
                self.slots[slot as usize] = fresh(generation);
                slot
            }
            None => {
                self.slots.push(fresh(0));
                (self.slots.len() - 1) as u32
            }
        };
        Ok((slot, self.slots[slot as usize].generation))
    }

    fn live(&mut self, slot: u32, generation: u32) -> Result<&mut Registration> {
        match self.slots.get_mut(slot as usize) {
            Some(r) if r.state == State::Live && r.generation == generation => Ok(r),
            _ => Err(Error::UnknownAllocation {
                kind: MemoryKind::HostRegistered,
                slot,
            }),
        }
    }

    /// Records that work on `stream` uses the registration.
    pub(crate) fn mark_used_on(
        &mut self,
        slot: u32,
        generation: u32,
        stream: StreamId,
    ) -> Result<()> {
        let registration = self.live(slot, generation)?;
        if !registration.streams.contains(&stream) {
            registration.streams.push(stream);
        }
        Ok(())
    }

    /// Frees a registration: unlocked at once when no work can use it, else once an event
    /// recorded now on each stream that used it has completed (see [`Self::poll`]).
    pub(crate) fn free<D: SegmentDriver + PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        table: &mut LockTable,
        device: DeviceId,
        handle: (u32, u32),
        release: Release,
    ) -> Result<()> {
        let (slot, generation) = handle;
        let registration = self.live(slot, generation)?;
        let mut streams = match release {
            Release::Idle => Vec::new(),
            Release::OnStream(stream) => {
                let mut streams = registration.streams.clone();
                streams.push(stream);
                streams
            }
        };
        streams.sort_unstable();
        streams.dedup();
        let mut events = Vec::with_capacity(streams.len());
        for stream in streams {
            self.stats.driver_calls += 1;
            match driver.record_event(device, stream) {
                Ok(event) => events.push(event),
                Err(error) => {
                    self.release_events(driver, device, events);
                    return Err(error);
                }
            }
        }
        if events.is_empty() {
            let ptr = self.slots[slot as usize].ptr;
            table.unlock_as(driver, ptr, LockOwner::Guard)?;
            self.finish(slot, false);
        } else {
            let len = self.slots[slot as usize].len;
            self.slots[slot as usize].state = State::Unlocking(events);
            self.stats.allocated -= len;
            self.stats.requested -= len;
            self.stats.pending += len;
        }
        Ok(())
    }

    /// Unlocks the freed registrations whose streams' work has completed. A failed query counts
    /// as "not yet"; a failed unlock keeps the registration for the next poll and is returned.
    pub(crate) fn poll<D: SegmentDriver + PinDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        table: &mut LockTable,
        device: DeviceId,
    ) -> Result<()> {
        for slot in 0..self.slots.len() {
            let State::Unlocking(events) = &self.slots[slot].state else {
                continue;
            };
            let driver_calls = &mut self.stats.driver_calls;
            let completed = events.iter().all(|&event| {
                *driver_calls += 1;
                driver.event_completed(device, event).unwrap_or(false)
            });
            if !completed {
                continue;
            }
            table.unlock_as(driver, self.slots[slot].ptr, LockOwner::Guard)?;
            if let State::Unlocking(events) =
                core::mem::replace(&mut self.slots[slot].state, State::Unused)
            {
                self.release_events(driver, device, events);
            }
            self.finish(slot as u32, true);
        }
        Ok(())
    }

    fn release_events<D: SegmentDriver + ?Sized>(
        &mut self,
        driver: &mut D,
        device: DeviceId,
        events: Vec<EventId>,
    ) {
        for event in events {
            self.stats.driver_calls += 1;
            driver.release_event(device, event);
        }
    }

    /// The slot's lock is gone: count it and recycle the slot.
    fn finish(&mut self, slot: u32, was_pending: bool) {
        let registration = &mut self.slots[slot as usize];
        let len = registration.len;
        registration.state = State::Unused;
        registration.streams = Vec::new();
        if was_pending {
            self.stats.pending -= len;
        } else {
            self.stats.allocated -= len;
            self.stats.requested -= len;
        }
        self.unused.push(slot);
    }
}
