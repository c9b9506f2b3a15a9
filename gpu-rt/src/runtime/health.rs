//! Which devices are lost, and how often each was reset: a driver's sticky error (a kernel's
//! illegal address, a launch failure) ends a device's useful life until it is reset.
//!
//! Shared by the runtime and its state: an error that loses a device is turned into
//! [`Error::DeviceLost`] where it is met (the first one is kept as the cause), and every later
//! call on that device is refused with it; other devices keep working. A reset makes the
//! device usable again in a new epoch: buffers and kernels of an earlier one are gone.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;

/// One device's state.
#[derive(Default)]
struct DeviceHealth {
    /// Set once the device is lost (read on every call: one load).
    lost: AtomicBool,
    /// The failure that lost it.
    cause: spin::Mutex<Option<Error>>,
    /// Resets so far: the device's epoch.
    resets: AtomicU32,
    /// Host waits blocking on the device's streams and events outside the state's lock
    /// ([`HostWaitHold`]): a reset, which destroys those, is refused while any runs.
    host_waits: AtomicU32,
}

/// A host wait in progress on a device, taken under the state's lock before the lock is let go
/// and the host blocks: while it lives the device is not reset under the wait.
pub(crate) struct HostWaitHold<'h> {
    counter: &'h AtomicU32,
}

impl Drop for HostWaitHold<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::Release);
    }
}

/// The health of every device of a runtime.
pub(crate) struct Health {
    devices: Vec<DeviceHealth>,
    /// A loss is every device's (the backend's `DEVICE_LOSS_ENDS_THE_PROCESS`).
    process_wide: bool,
}

impl Health {
    pub(crate) fn new(device_count: usize, process_wide: bool) -> Self {
        Self {
            devices: (0..device_count).map(|_| DeviceHealth::default()).collect(),
            process_wide,
        }
    }

    /// Refuses a call on a lost device with [`Error::DeviceLost`] (unknown devices pass: the
    /// caller reports them).
    #[inline]
    pub(crate) fn check(&self, device: DeviceId) -> Result<()> {
        match self.devices.get(device.index()) {
            Some(health) if health.lost.load(Ordering::Acquire) => {
                match health.cause.lock().clone() {
                    Some(cause) => Err(lost(device, cause)),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// Passes `result` on, unless its error loses `device`: then the device is lost (the first
    /// such error is kept as the cause) and the error becomes [`Error::DeviceLost`].
    #[inline]
    pub(crate) fn lift<T>(&self, device: DeviceId, result: Result<T>) -> Result<T> {
        result.map_err(|error| self.note(device, error))
    }

    /// `error`, or [`Error::DeviceLost`] if it loses `device` (which it marks lost).
    pub(crate) fn note(&self, device: DeviceId, error: Error) -> Error {
        let loses = matches!(&error, Error::Driver(driver) if driver.loses_device());
        let Some(health) = self.devices.get(device.index()).filter(|_| loses) else {
            return error;
        };
        let cause = health.cause.lock().get_or_insert(error).clone();
        health.lost.store(true, Ordering::Release);
        if self.process_wide {
            for other in &self.devices {
                other.cause.lock().get_or_insert_with(|| cause.clone());
                other.lost.store(true, Ordering::Release);
            }
        }
        lost(device, cause)
    }

    /// The failure that lost `device`, if it is lost.
    pub(crate) fn cause(&self, device: DeviceId) -> Option<Error> {
        self.devices.get(device.index())?.cause.lock().clone()
    }

    /// How many times `device` was reset: what was allocated or loaded in an earlier epoch is
    /// gone.
    #[inline]
    pub(crate) fn epoch(&self, device: DeviceId) -> u32 {
        self.devices
            .get(device.index())
            .map_or(0, |health| health.resets.load(Ordering::Acquire))
    }

    /// Notes a host wait about to block on `device` outside the state's lock (take it under the
    /// lock: a reset holds that lock while it checks [`Health::host_waits`]).
    pub(crate) fn hold_host_wait(&self, device: DeviceId) -> Option<HostWaitHold<'_>> {
        let counter = &self.devices.get(device.index())?.host_waits;
        counter.fetch_add(1, Ordering::Relaxed);
        Some(HostWaitHold { counter })
    }

    /// Host waits blocking on `device` now.
    pub(crate) fn host_waits(&self, device: DeviceId) -> u32 {
        self.devices
            .get(device.index())
            .map_or(0, |health| health.host_waits.load(Ordering::Acquire))
    }

    /// Marks `device` usable again after a reset, in a new epoch.
    pub(crate) fn restore(&self, device: DeviceId) {
        if let Some(health) = self.devices.get(device.index()) {
            health.resets.fetch_add(1, Ordering::AcqRel);
            health.lost.store(false, Ordering::Release);
            *health.cause.lock() = None;
        }
    }
}

fn lost(device: DeviceId, cause: Error) -> Error {
    Error::DeviceLost {
        device,
        cause: Box::new(cause),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_core::error::DriverError;

    fn illegal_address() -> Error {
        Error::Driver(DriverError {
            backend: "cuda",
            call: "cuStreamSynchronize",
            name: "CUDA_ERROR_ILLEGAL_ADDRESS",
            code: 700,
        })
    }

    #[test]
    fn a_device_loss_is_the_devices_own_or_every_devices_as_the_backend_says() {
        let (d0, d1) = (DeviceId(0), DeviceId(1));
        for process_wide in [false, true] {
            let health = Health::new(2, process_wide);
            let other = Error::Driver(DriverError {
                code: 1,
                ..match illegal_address() {
                    Error::Driver(driver) => driver,
                    _ => unreachable!(),
                }
            });
            // An error that does not lose the device passes through and changes nothing.
            assert_eq!(health.note(d1, other.clone()), other);
            assert_eq!(health.check(d1), Ok(()));
            let lost = health.note(d1, illegal_address());
            assert_eq!(lost, super::lost(d1, illegal_address()));
            assert_eq!(health.check(d1), Err(lost));
            assert_eq!(health.check(d0).is_err(), process_wide);
            assert_eq!(health.cause(d0).is_some(), process_wide);
            health.restore(d1);
            assert_eq!((health.check(d1), health.epoch(d1)), (Ok(()), 1));
        }
    }
}
