//! The calling thread's current device, kept per OS thread and per backend instance, as CUDA
//! keeps the current context: what `set_current_device` sets and every device call checks.

use alloc::vec::Vec;
use core::cell::RefCell;
use core::sync::atomic::{AtomicU64, Ordering};
use std::thread_local;

use super::HostErrorCode;
use gpu_core::error::Result;
use gpu_core::id::DeviceId;

/// Instance numbers of backends, never reused, so two backends never share a thread's entry.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// `(backend instance, device)` for every backend that has a device current on this thread.
    static CURRENT: RefCell<Vec<(u64, DeviceId)>> = const { RefCell::new(Vec::new()) };
}

/// One backend instance's view of the thread-local current device.
#[derive(Debug)]
pub(super) struct CurrentDevice {
    instance: u64,
}

impl CurrentDevice {
    /// A fresh instance, with no device current on any thread.
    pub(super) fn new() -> Self {
        Self {
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The device current on the calling thread for this instance.
    pub(super) fn get(&self) -> Option<DeviceId> {
        CURRENT
            .try_with(|current| {
                current
                    .borrow()
                    .iter()
                    .find(|(instance, _)| *instance == self.instance)
                    .map(|&(_, device)| device)
            })
            .ok()
            .flatten()
    }

    /// Makes `device` current on the calling thread for this instance.
    pub(super) fn set(&self, device: Option<DeviceId>) {
        // A thread being torn down has no current device left to change.
        let _ = CURRENT.try_with(|current| {
            let mut current = current.borrow_mut();
            current.retain(|(instance, _)| *instance != self.instance);
            if let Some(device) = device {
                current.push((self.instance, device));
            }
        });
    }

    /// Fails with `HOST_WRONG_CURRENT_DEVICE` unless `device` is current on the calling thread:
    /// how the backend catches a runtime that forgot its device guard.
    pub(super) fn require(&self, device: DeviceId, call: &'static str) -> Result<()> {
        if self.get() == Some(device) {
            Ok(())
        } else {
            Err(HostErrorCode::WrongCurrentDevice.error(call))
        }
    }
}

impl Drop for CurrentDevice {
    fn drop(&mut self) {
        // Other threads' entries are unreachable once the instance is gone; forget ours.
        self.set(None);
    }
}
