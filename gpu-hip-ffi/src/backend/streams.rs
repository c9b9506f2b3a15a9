//! Streams: creating a non-blocking one, adopting the caller's, destroying and synchronising
//! them; each recorded among the live streams until destroyed or its device reset.

use gpu_core::{DeviceId, Result};

use super::{HipBackend, HipStream};
use crate::result;
use crate::sys;

impl HipBackend {
    /// Records a stream of `device` as live.
    pub(super) fn register_stream(&self, raw: sys::hipStream_t, device: DeviceId) -> HipStream {
        self.streams
            .register(device, |key| HipStream { raw, device, key })
    }

    /// `Backend::stream_create`: a non-blocking stream of `device`, recorded as live.
    pub(super) fn create_stream(&self, device: DeviceId) -> Result<HipStream> {
        let _scope = self.enter(device)?;
        let raw = result::stream::create(self.hip, sys::hipStreamNonBlocking)?;
        Ok(self.register_stream(raw, device))
    }

    /// `Backend::adopt_stream`: the caller's stream of `device`, recorded as live.
    ///
    /// # Safety
    /// As `Backend::adopt_stream`.
    pub(super) unsafe fn adopt_raw_stream(
        &self,
        device: DeviceId,
        raw: usize,
    ) -> Result<HipStream> {
        self.device(device)?;
        Ok(self.register_stream(raw as sys::hipStream_t, device))
    }

    /// `Backend::stream_destroy`: destroys a live stream once no other call uses it.
    pub(super) fn destroy_stream(&self, stream: HipStream) -> Result<()> {
        self.streams
            .destroy(stream.key, std::thread::yield_now, |stream| {
                let _scope = self.enter(stream.device)?;
                // SAFETY: a live stream of the device, just taken out of the live streams after
                // the last call using it returned, so nothing uses it again.
                unsafe { result::stream::destroy(self.hip, stream.raw) }
            })
    }

    /// `Backend::stream_synchronize`: waits for the work of a live stream.
    pub(super) fn synchronize_stream(&self, stream: HipStream) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let _scope = self.enter(stream.device)?;
        // SAFETY: a live stream of the device (held), which is current.
        unsafe { result::stream::synchronize(self.hip, stream.raw) }
    }
}
