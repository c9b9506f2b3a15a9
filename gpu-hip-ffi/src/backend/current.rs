//! The calling thread's current HIP device: a scope that makes a device current for a few HIP
//! calls and puts the caller's device back after, and the backend's "no device chosen" mark.
//!
//! hipSetDevice is per thread, like CUDA's current context, but HIP has no "no device" state:
//! a thread that never chose one has device 0. `set_current_device(None)` is therefore recorded
//! in a thread-local mark of this crate (the driver's device stays as it was), which
//! `current_device` reports until the thread chooses a device again.

use core::cell::Cell;
use core::ffi::c_int;
use core::marker::PhantomData;

use gpu_core::Result;

use crate::library::Hip;
use crate::result::check;
use crate::sys;

std::thread_local! {
    /// Whether the thread's last choice through this backend was "no device".
    static NO_DEVICE_CHOSEN: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread's last choice was "no device".
pub(crate) fn no_device_chosen() -> bool {
    NO_DEVICE_CHOSEN.with(Cell::get)
}

/// Records the calling thread's choice of "no device" (`true`) or of a device (`false`).
pub(crate) fn set_no_device_chosen(none: bool) {
    NO_DEVICE_CHOSEN.with(|mark| mark.set(none));
}

/// The calling thread's device, as hipGetDevice reports it.
pub(crate) fn current_ordinal(hip: &Hip) -> Result<c_int> {
    let get = hip.hipGetDevice()?;
    let mut ordinal: c_int = 0;
    // SAFETY: `ordinal` is valid for writes.
    check("hipGetDevice", unsafe { get(&mut ordinal) })?;
    Ok(ordinal)
}

/// Makes one device current until dropped, then makes the caller's device current again, also
/// when the code in between returns early with an error or unwinds. When the device is already
/// current the scope costs one hipGetDevice and changes nothing.
pub(crate) struct DeviceScope {
    /// hipSetDevice and the device to put back, looked up before the switch so that putting it
    /// back cannot fail for a missing symbol; `None` when nothing was switched.
    restore: Option<(sys::PFN_hipSetDevice, c_int)>,
    /// The current device is per thread: the scope must end on the thread that began it.
    _same_thread: PhantomData<*const ()>,
}

impl DeviceScope {
    /// Makes device `ordinal` current on the calling thread for the scope's life.
    pub(crate) fn enter(hip: &Hip, ordinal: c_int) -> Result<Self> {
        let previous = current_ordinal(hip)?;
        if previous == ordinal {
            return Ok(Self {
                restore: None,
                _same_thread: PhantomData,
            });
        }
        let set = hip.hipSetDevice()?;
        // SAFETY: plain value argument; HIP checks the ordinal.
        check("hipSetDevice", unsafe { set(ordinal) })?;
        Ok(Self {
            restore: Some((set, previous)),
            _same_thread: PhantomData,
        })
    }
}

impl Drop for DeviceScope {
    fn drop(&mut self) {
        if let Some((set, previous)) = self.restore {
            // SAFETY: `previous` was the thread's device a moment ago, so HIP accepts it again;
            // a drop could not report a failure anyway.
            let _ = unsafe { set(previous) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_no_device_mark_is_per_thread() {
        set_no_device_chosen(true);
        assert!(no_device_chosen());
        std::thread::spawn(|| assert!(!no_device_chosen(), "a new thread starts unmarked"))
            .join()
            .unwrap();
        set_no_device_chosen(false);
        assert!(!no_device_chosen());
    }
}
