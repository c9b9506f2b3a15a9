//! What the backend hands out: its stream, event, kernel and module handles, each naming its
//! device (and a serial number in the backend's tables, or a kernel object), and saved devices.

use gpu_core::DeviceId;
use gpu_core::backend::library::LIBRARY;

use super::packets::KernelObject;

/// An in-order queue of work on one device: an HSA user-mode queue and the backend's record of
/// what was enqueued on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HsaStream {
    pub(super) serial: u64,
    pub(super) device: DeviceId,
}

/// A completion marker: the signal its last record completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HsaEvent {
    pub(super) serial: u64,
    pub(super) device: DeviceId,
}

/// A kernel loaded on one device: its kernel object and segment sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HsaKernel {
    pub(super) object: KernelObject,
    pub(super) device: DeviceId,
    /// Index into the library table (name and parameters); `None` for a module's kernel.
    pub(super) library_index: Option<usize>,
}

/// A code object loaded on one device (an HSA executable), from
/// [`Backend::module_load`](gpu_core::backend::Backend::module_load).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HsaModule {
    pub(super) serial: u64,
    pub(super) device: DeviceId,
}

/// What was current on a thread: the device the thread last chose through an HSA backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SavedDevice(pub(super) Option<DeviceId>);

impl HsaStream {
    /// The device the stream belongs to.
    pub fn device(&self) -> DeviceId {
        self.device
    }
}

impl HsaEvent {
    /// The device the event belongs to.
    pub fn device(&self) -> DeviceId {
        self.device
    }
}

impl HsaKernel {
    /// The device the kernel is loaded on.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The kernel's name in the standard library (a module's kernel says so instead).
    pub fn name(&self) -> &'static str {
        self.library_index
            .map_or(MODULE_KERNEL, |index| LIBRARY[index].name)
    }
}

/// What [`HsaKernel::name`] says for a kernel of a program's own module.
pub(super) const MODULE_KERNEL: &str = "(a kernel of a loaded module)";
