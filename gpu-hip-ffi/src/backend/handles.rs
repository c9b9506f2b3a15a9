//! What the backend hands out: its stream, event, kernel and module handles, each naming its
//! device and its key among the backend's live handles, and the thread's saved device.

use core::ffi::c_int;

use gpu_core::DeviceId;
use gpu_core::backend::live::{HandleKey, kernel_name};

use crate::sys;

/// An in-order queue of work on one device: a non-blocking `hipStream_t` (or an adopted one),
/// its device, and its key in the backend's live streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HipStream {
    pub(super) raw: sys::hipStream_t,
    pub(super) device: DeviceId,
    pub(super) key: HandleKey<HipStream>,
}

/// A completion marker: a `hipEvent_t` created without timing, its device, and its key in
/// the backend's live events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HipEvent {
    pub(super) raw: sys::hipEvent_t,
    pub(super) device: DeviceId,
    pub(super) key: HandleKey<HipEvent>,
}

/// A kernel loaded on one device: of the standard library, or of a module the program loaded;
/// live while that module is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HipKernel {
    pub(super) function: sys::hipFunction_t,
    pub(super) device: DeviceId,
    /// The key of its module (the device's library module for a library kernel).
    pub(super) module: HandleKey<HipModule>,
    /// Index into the library table (name and parameters); `None` for a module's kernel,
    /// whose parameters nothing here knows.
    pub(super) library_index: Option<usize>,
}

/// A module image loaded on one device (`hipModule_t`), from [`Backend::module_load`], and its
/// key in the backend's live modules.
///
/// [`Backend::module_load`]: gpu_core::backend::Backend::module_load
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HipModule {
    pub(super) raw: sys::hipModule_t,
    pub(super) device: DeviceId,
    pub(super) key: HandleKey<HipModule>,
}

// SAFETY: (all four handles) the values are opaque HIP handles, never dereferenced by this
// crate. The HIP runtime is thread-safe: a stream, event or function may be used from any
// thread, and every method makes the handle's device current around its calls.
unsafe impl Send for HipStream {}
// SAFETY: see above.
unsafe impl Sync for HipStream {}
// SAFETY: see above.
unsafe impl Send for HipEvent {}
// SAFETY: see above.
unsafe impl Sync for HipEvent {}
// SAFETY: see above.
unsafe impl Send for HipKernel {}
// SAFETY: see above.
unsafe impl Sync for HipKernel {}
// SAFETY: see above (a module is a handle like the others).
unsafe impl Send for HipModule {}
// SAFETY: see above.
unsafe impl Sync for HipModule {}

impl HipStream {
    /// HIP's stream handle (valid until the stream is destroyed).
    pub fn raw(&self) -> sys::hipStream_t {
        self.raw
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> DeviceId {
        self.device
    }
}

impl HipEvent {
    /// HIP's event handle (valid until the event is destroyed).
    pub fn raw(&self) -> sys::hipEvent_t {
        self.raw
    }

    /// The device the event belongs to.
    pub fn device(&self) -> DeviceId {
        self.device
    }
}

impl HipKernel {
    /// HIP's function handle (valid while the backend lives).
    pub fn raw(&self) -> sys::hipFunction_t {
        self.function
    }

    /// The device the kernel is loaded on.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The kernel's name in the standard library (a module's kernel says so instead).
    pub fn name(&self) -> &'static str {
        kernel_name(self.library_index)
    }
}

/// What was current on a thread: one of HIP's device ordinals, or `None` when the thread's
/// last choice through this backend was "no device" (HIP itself always has one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SavedDevice(pub(super) Option<c_int>);
