//! Events: each record completes a signal of its own after the stream's earlier work, a wait is
//! a barrier packet on the record's signal, and a record superseded gives its signal back.

use gpu_core::backend::check_same_device;
use gpu_core::{DeviceId, Result};

use super::signals::barrier_packets;
use super::stream::Producer;
use super::{EventState, HsaBackend, HsaEvent, HsaStream, lock};

impl HsaBackend {
    /// [`Backend::event_create`](gpu_core::backend::Backend::event_create): an event with no
    /// record.
    pub(super) fn create_event(&self, device: DeviceId) -> Result<HsaEvent> {
        self.device(device)?;
        let mut tables = lock(&self.tables);
        let serial = tables.serial();
        tables.events.insert(serial, EventState::default());
        Ok(HsaEvent { serial, device })
    }

    /// [`Backend::event_destroy`](gpu_core::backend::Backend::event_destroy): forgets the event
    /// and supersedes its last record's signal.
    pub(super) fn destroy_event(&self, event: HsaEvent) -> Result<()> {
        self.event_current(event)?;
        let removed = lock(&self.tables).events.remove(&event.serial);
        self.supersede(removed.and_then(|state| state.current))
    }

    /// [`Backend::event_record`](gpu_core::backend::Backend::event_record): a barrier-AND
    /// packet completing a fresh signal after the stream's pending work, if any.
    pub(super) fn record_event(&self, event: HsaEvent, stream: HsaStream) -> Result<()> {
        check_same_device(stream.device, event.device)?;
        self.event_current(event)?;
        let state = self.stream_state(stream)?;
        let mut state = lock(&state);
        self.reclaim(&mut state)?;
        let current = if state.chain.is_empty() {
            None
        } else {
            if !state.dependencies(true).is_empty() {
                self.enqueue_barrier(&mut state, None)?;
            }
            let producer = Producer::new(self.hsa)?;
            let signal = self.fresh_signal()?;
            // SAFETY: a live queue; the signal is kept until its record has completed and no
            // queue waits for it.
            unsafe { producer.submit(state.queue, &barrier_packets(&[], Some(signal))) };
            state.record_after_chain = true;
            Some(signal)
        };
        // Swapped in one step, so that records and destroys of the event on other threads
        // each supersede a signal exactly once (a record of an event destroyed meanwhile
        // supersedes its own signal).
        let previous = match lock(&self.tables).events.get_mut(&event.serial) {
            Some(recorded) => core::mem::replace(&mut recorded.current, current),
            None => current,
        };
        self.supersede(previous)
    }

    /// [`Backend::stream_wait_event`](gpu_core::backend::Backend::stream_wait_event): a barrier
    /// packet on the stream waiting for the event's last record, unless that has completed.
    pub(super) fn wait_for_event(&self, stream: HsaStream, event: HsaEvent) -> Result<()> {
        let current = self.event_current(event)?;
        let state = self.stream_state(stream)?;
        let Some(record) = current else { return Ok(()) };
        if self.signal_done(record)? {
            return Ok(());
        }
        lock(&self.tables).records.add_wait(record);
        self.enqueue_barrier(&mut lock(&state), Some(record))
    }

    /// Whether the event's last record has completed (true without one).
    pub(super) fn event_done(&self, event: HsaEvent) -> Result<bool> {
        match self.event_current(event)? {
            Some(record) => self.signal_done(record),
            None => Ok(true),
        }
    }

    /// Blocks until the event's last record has completed.
    pub(super) fn wait_event(&self, event: HsaEvent) -> Result<()> {
        match self.event_current(event)? {
            Some(record) => self.wait_signal(record),
            None => Ok(()),
        }
    }
}
