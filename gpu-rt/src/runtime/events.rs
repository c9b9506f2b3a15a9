//! The driver events of each device that nothing uses now, in one pool per device that the
//! planner's events and the allocators' events both draw from and give back to.
//!
//! The lock is a leaf (no driver call and no other lock under it): a new event is created
//! after it is let go.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use super::guard::with_device;
use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;

/// Idle driver events per device, and how many the driver had to create.
pub(crate) struct EventPool<E> {
    idle: spin::Mutex<Vec<Vec<E>>>,
    /// Events the driver had to create (pool misses).
    created: AtomicU64,
}

impl<E: Copy> EventPool<E> {
    pub(crate) fn new(device_count: usize) -> Self {
        Self {
            idle: spin::Mutex::new((0..device_count).map(|_| Vec::new()).collect()),
            created: AtomicU64::new(0),
        }
    }

    /// An idle event of `device`, or a new one from the driver.
    pub(crate) fn take<B: Backend<Event = E>>(&self, backend: &B, device: DeviceId) -> Result<E> {
        let pooled = self
            .idle
            .lock()
            .get_mut(device.index())
            .ok_or_else(|| Error::UnknownDevice {
                device,
                device_count: backend.device_count(),
            })?
            .pop();
        let event = match pooled {
            Some(event) => event,
            None => {
                let event = with_device(backend, device, || backend.event_create(device))?;
                self.created.fetch_add(1, Ordering::Relaxed);
                event
            }
        };
        Ok(event)
    }

    /// Gives back an event of `device` that nothing will wait on any more.
    pub(crate) fn put(&self, device: DeviceId, event: E) {
        if let Some(idle) = self.idle.lock().get_mut(device.index()) {
            idle.push(event);
        }
    }

    /// Forgets `device`'s idle events, which a reset of the device destroyed.
    pub(crate) fn forget_device(&self, device: DeviceId) {
        if let Some(idle) = self.idle.lock().get_mut(device.index()) {
            idle.clear();
        }
    }

    /// Takes every idle event out, with its device (for shutdown).
    pub(crate) fn drain(&self) -> Vec<(DeviceId, E)> {
        let mut idle = self.idle.lock();
        idle.iter_mut()
            .enumerate()
            .flat_map(|(device, events)| {
                events
                    .drain(..)
                    .map(move |event| (DeviceId(device as u32), event))
            })
            .collect()
    }

    /// Events the driver had to create so far (what the planner's and the allocators' pools
    /// hand out beyond these cost no driver call).
    pub(crate) fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }
}
