//! Events: creating and destroying them, recording them on a stream, a stream waiting for one,
//! and asking or waiting for their completion; each recorded among the live events.

use gpu_core::backend::check_same_device;
use gpu_core::{DeviceId, Result};

use super::{HipBackend, HipEvent, HipStream};
use crate::result;
use crate::sys;

impl HipBackend {
    /// `Backend::event_create`: an event of `device` without timing, recorded as live.
    pub(super) fn create_event(&self, device: DeviceId) -> Result<HipEvent> {
        let _scope = self.enter(device)?;
        let raw = result::event::create(self.hip, sys::hipEventDisableTiming)?;
        Ok(self
            .events
            .register(device, |key| HipEvent { raw, device, key }))
    }

    /// `Backend::event_destroy`: destroys a live event once no other call uses it.
    pub(super) fn destroy_event(&self, event: HipEvent) -> Result<()> {
        self.events
            .destroy(event.key, std::thread::yield_now, |event| {
                let _scope = self.enter(event.device)?;
                // SAFETY: a live event of the device, just taken out of the live events after the
                // last call using it returned, so nothing uses it again.
                unsafe { result::event::destroy(self.hip, event.raw) }
            })
    }

    /// `Backend::event_record`: records a live event on a live stream of its device.
    pub(super) fn record_event(&self, event: HipEvent, stream: HipStream) -> Result<()> {
        check_same_device(stream.device, event.device)?;
        let (stream, event) = (self.streams.get(stream.key)?, self.events.get(event.key)?);
        let _scope = self.enter(stream.device)?;
        // SAFETY: a live event and a live stream of the device (both held), which is current.
        unsafe { result::event::record(self.hip, event.raw, stream.raw) }
    }

    /// `Backend::stream_wait_event`: makes a live stream wait for a live event.
    pub(super) fn wait_for_event(&self, stream: HipStream, event: HipEvent) -> Result<()> {
        let (stream, event) = (self.streams.get(stream.key)?, self.events.get(event.key)?);
        let _scope = self.enter(stream.device)?;
        // SAFETY: a live stream of the device, which is current, and a live event of any (both
        // held).
        unsafe { result::stream::wait_event(self.hip, stream.raw, event.raw, 0) }
    }

    /// `Backend::event_query`: whether a live event has completed.
    pub(super) fn event_done(&self, event: HipEvent) -> Result<bool> {
        let event = self.events.get(event.key)?;
        let _scope = self.enter(event.device)?;
        // SAFETY: a live event of the device (held).
        unsafe { result::event::query(self.hip, event.raw) }
    }

    /// `Backend::event_synchronize`: waits for a live event.
    pub(super) fn wait_event(&self, event: HipEvent) -> Result<()> {
        let event = self.events.get(event.key)?;
        let _scope = self.enter(event.device)?;
        // SAFETY: a live event of the device (held).
        unsafe { result::event::synchronize(self.hip, event.raw) }
    }
}
