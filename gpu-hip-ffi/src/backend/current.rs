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
use crate::result;

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

/// Makes one device current until dropped, then makes the caller's device current again, also
/// when the code in between returns early with an error or unwinds. When the device is already
/// current the scope costs one hipGetDevice and changes nothing.
pub(crate) struct DeviceScope<'h> {
    /// The library and the device to put back; `None` when nothing was switched.
    restore: Option<(&'h Hip, c_int)>,
    /// The current device is per thread: the scope must end on the thread that began it.
    _same_thread: PhantomData<*const ()>,
}

impl<'h> DeviceScope<'h> {
    /// Makes device `ordinal` current on the calling thread for the scope's life.
    pub(crate) fn enter(hip: &'h Hip, ordinal: c_int) -> Result<Self> {
        let previous = result::device::current(hip)?;
        if previous == ordinal {
            return Ok(Self {
                restore: None,
                _same_thread: PhantomData,
            });
        }
        // hipSetDevice is looked up here (and cached from then on), so that putting the
        // caller's device back cannot fail for a missing symbol.
        result::device::set_current(hip, ordinal)?;
        Ok(Self {
            restore: Some((hip, previous)),
            _same_thread: PhantomData,
        })
    }
}

impl Drop for DeviceScope<'_> {
    fn drop(&mut self) {
        if let Some((hip, previous)) = self.restore {
            // `previous` was the thread's device a moment ago, so HIP accepts it again; a drop
            // could not report a failure anyway.
            let _ = result::device::set_current(hip, previous);
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
