//! The device guard: makes a device current on the calling thread for a bracket of driver
//! calls and restores whatever was current before afterwards, on every path (return, error,
//! unwind).
//!
//! IREE's HIP driver set the device and never restored it, so a user's thread silently changed
//! device after calling the library. Every runtime call that needs a device goes through this.
//! The guard saves the thread's state as the backend's [`Backend::SavedCurrent`], not as a
//! device id, so a context the runtime does not own (a CUDA context the embedding program
//! created itself) is put back as it was rather than refused.

use core::sync::atomic::{AtomicU64, Ordering};

use gpu_core::backend::Backend;
use gpu_core::error::Result;
use gpu_core::id::DeviceId;

/// Holds `device` current until dropped (or [`DeviceGuard::restore`]d), then puts back what
/// was current before: a device, nothing, or a context the backend does not own.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::DeviceGuard;
///
/// let backend = HostBackend::new(HostConfig::with_devices(2));
/// backend.set_current_device(Some(DeviceId(0)))?; // what the caller had current
/// {
///     let _guard = DeviceGuard::new(&backend, DeviceId(1))?;
///     assert_eq!(backend.current_device()?, Some(DeviceId(1)));
///     let stream = backend.stream_create(DeviceId(1))?; // device 1's calls work here
///     backend.stream_destroy(stream)?;
/// }
/// assert_eq!(backend.current_device()?, Some(DeviceId(0))); // put back at the drop
/// # Ok::<(), Error>(())
/// ```
#[must_use = "the device is current only while the guard lives"]
pub struct DeviceGuard<'a, B: Backend + ?Sized> {
    backend: &'a B,
    saved: B::SavedCurrent,
    /// Whether the guard changed the current device (and so must restore it).
    switched: bool,
}

impl<'a, B: Backend + ?Sized> DeviceGuard<'a, B> {
    /// Makes `device` current. Saves the thread's current state first (one query of the
    /// driver) and switches only if it is not `device` already, so nested guards on one device
    /// cost one query each.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::CallKind;
    /// use gpu_rt::runtime::DeviceGuard;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(2));
    /// let outer = DeviceGuard::new(&backend, DeviceId(1))?;
    /// let switches = backend.calls().of(CallKind::SetCurrentDevice);
    /// let inner = DeviceGuard::new(&backend, DeviceId(1))?; // already current: no switch
    /// assert_eq!(backend.calls().of(CallKind::SetCurrentDevice), switches);
    /// drop((inner, outer));
    /// assert_eq!(backend.current_device()?, None);
    /// assert!(DeviceGuard::new(&backend, DeviceId(2)).is_err()); // no such device
    /// # Ok::<(), Error>(())
    /// ```
    pub fn new(backend: &'a B, device: DeviceId) -> Result<Self> {
        let saved = backend.save_current()?;
        let switched = !backend.is_current(saved, device);
        if switched {
            backend.set_current_device(Some(device))?;
        }
        Ok(Self {
            backend,
            saved,
            switched,
        })
    }

    /// Restores what was current before now and reports a driver failure to do so (dropping
    /// the guard restores too, but can only ignore such a failure).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::CallKind;
    /// use gpu_rt::runtime::DeviceGuard;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// DeviceGuard::new(&backend, DeviceId(0))?.restore()?;
    /// assert_eq!(backend.current_device()?, None);
    /// // A failure to restore is reported here (a drop would have to ignore it).
    /// backend.fail_nth(CallKind::RestoreCurrent, 1);
    /// assert!(DeviceGuard::new(&backend, DeviceId(0))?.restore().is_err());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn restore(mut self) -> Result<()> {
        let switched = core::mem::replace(&mut self.switched, false);
        if switched {
            self.backend.restore_current(self.saved)
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
            let _ = self.backend.restore_current(self.saved);
        }
    }
}

/// Restores that failed after the bracketed call itself had succeeded (process-wide count).
static RESTORE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// How many device restores failed after a successful bracketed call, process-wide. Such a
/// call still returns its value: what it created (an allocation, a stream) must reach the
/// caller, or it would leak.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::CallKind;
/// use gpu_rt::runtime::{restore_failures, with_device};
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// let before = restore_failures();
/// backend.fail_nth(CallKind::RestoreCurrent, 1);
/// // The bracketed call succeeded, so its value comes back; the failed restore is counted.
/// assert_eq!(with_device(&backend, DeviceId(0), || Ok(5))?, 5);
/// assert_eq!(restore_failures(), before + 1);
/// # Ok::<(), Error>(())
/// ```
pub fn restore_failures() -> u64 {
    RESTORE_FAILURES.load(Ordering::Relaxed)
}

/// Runs `f` with `device` current and restores what the caller had current afterwards.
/// Returns `f`'s result; a failed restore after a successful `f` is counted in
/// [`restore_failures`].
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::HostErrorCode;
/// use gpu_rt::runtime::with_device;
///
/// let backend = HostBackend::new(HostConfig::with_devices(2));
/// // The host backend, as CUDA, acts on a device only while it is current.
/// let refused = backend.stream_create(DeviceId(1)).unwrap_err();
/// assert_eq!(HostErrorCode::of(&refused), Some(HostErrorCode::WrongCurrentDevice));
/// let stream = with_device(&backend, DeviceId(1), || backend.stream_create(DeviceId(1)))?;
/// with_device(&backend, DeviceId(1), || backend.stream_destroy(stream))?;
/// assert_eq!(backend.current_device()?, None); // the caller's state, unchanged
/// # Ok::<(), Error>(())
/// ```
pub fn with_device<B: Backend + ?Sized, T>(
    backend: &B,
    device: DeviceId,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    if B::SCOPES_ITS_CALLS {
        return f();
    }
    let guard = DeviceGuard::new(backend, device)?;
    let result = f();
    if guard.restore().is_err() {
        RESTORE_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    result
}
