//! The device guard: makes a device current on the calling thread for a bracket of driver
//! calls and restores the caller's device afterwards, on every path (return, error, unwind).
//!
//! IREE's HIP driver set the device and never restored it, so a user's thread silently changed
//! device after calling the library. Every runtime call that needs a device goes through this.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::backend::Backend;
use crate::error::Result;
use crate::id::DeviceId;

/// Holds `device` current until dropped (or [`DeviceGuard::restore`]d), then puts back the
/// device that was current before.
#[must_use = "the device is current only while the guard lives"]
pub struct DeviceGuard<'a, B: Backend + ?Sized> {
    backend: &'a B,
    previous: Option<DeviceId>,
    /// Whether the guard changed the current device (and so must restore it).
    switched: bool,
}

impl<'a, B: Backend + ?Sized> DeviceGuard<'a, B> {
    /// Makes `device` current. Asks the driver for the current device first and switches only
    /// if it differs, so nested guards on one device cost one query each.
    pub fn new(backend: &'a B, device: DeviceId) -> Result<Self> {
        let previous = backend.current_device()?;
        let switched = previous != Some(device);
        if switched {
            backend.set_current_device(Some(device))?;
        }
        Ok(Self {
            backend,
            previous,
            switched,
        })
    }

    /// Restores the previous device now and reports a driver failure to do so (dropping the
    /// guard restores too, but can only ignore such a failure).
    pub fn restore(mut self) -> Result<()> {
        let switched = core::mem::replace(&mut self.switched, false);
        if switched {
            self.backend.set_current_device(self.previous)
        } else {
            Ok(())
        }
    }
}

impl<B: Backend + ?Sized> Drop for DeviceGuard<'_, B> {
    fn drop(&mut self) {
        if self.switched {
            // Nothing can be reported from a drop (it may run during unwinding); the explicit
            // `restore` reports failures.
            let _ = self.backend.set_current_device(self.previous);
        }
    }
}

/// Restores that failed after the bracketed call itself had succeeded (process-wide count).
static RESTORE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// How many device restores failed after a successful bracketed call, process-wide. Such a
/// call still returns its value: what it created (an allocation, a stream) must reach the
/// caller, or it would leak.
pub fn restore_failures() -> u64 {
    RESTORE_FAILURES.load(Ordering::Relaxed)
}

/// Runs `f` with `device` current and restores the caller's device afterwards. Returns `f`'s
/// result; a failed restore after a successful `f` is counted in [`restore_failures`].
pub fn with_device<B: Backend + ?Sized, T>(
    backend: &B,
    device: DeviceId,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let guard = DeviceGuard::new(backend, device)?;
    let result = f();
    if guard.restore().is_err() {
        RESTORE_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    result
}
