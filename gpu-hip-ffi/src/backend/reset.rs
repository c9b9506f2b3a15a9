//! Resetting a device: its mapped pieces and reserved ranges given back, hipDeviceReset, then
//! forgetting everything of the device the backend kept (handles, library, allocations) and
//! setting its default memory pool up again.

use core::sync::atomic::Ordering;

use gpu_core::{DeviceId, Result};

use super::HipBackend;
use super::devices::configure_default_pool;
use crate::result;

impl HipBackend {
    /// `Backend::reset_device`: hipDeviceReset, then the device's set-up again, its handles
    /// forgotten.
    pub(super) fn reset_and_set_up(&self, device: DeviceId) -> Result<()> {
        let state = self.device(device)?;
        let mut library = state
            .library
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        {
            let _scope = self.enter(device)?;
            // What is still mapped or reserved goes back first: the reset would leave the
            // reservations and the physical allocations' handles behind.
            self.clear_mappings(device);
            // SAFETY: the trait's contract: nothing of the device is used after its reset; its
            // handles go stale below.
            unsafe { result::device::reset(self.hip) }?;
        }
        *library = None;
        drop(library);
        self.streams.forget_device(device);
        self.events.forget_device(device);
        self.modules.forget_device(device);
        // The reset destroyed the graphs' instantiations with the device's state.
        self.graphs.forget_device(device);
        self.allocations.forget_device(device);
        if state.pool().is_some() {
            let pool = configure_default_pool(self.hip, state.ordinal)?;
            state.pool.store(pool, Ordering::Release);
        }
        Ok(())
    }
}
