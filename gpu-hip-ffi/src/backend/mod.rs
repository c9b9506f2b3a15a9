//! The HIP backend: `gpu_core::backend::Backend` on the HIP runtime API, with every
//! device-bound call made with its device current and the caller's device put back after.
//!
//! Every method that acts on a device runs inside a `DeviceScope` (module `current`): if the
//! device is already current (the runtime's device guard made it so) nothing changes; otherwise
//! hipSetDevice
//! switches to it and back around the HIP calls, so the calling thread's current device is the
//! same after the call as before it, also on error paths (hipSetDevice is per thread: the IREE
//! multi-device bug was a missing restore).
//!
//! Every handle the backend hands out carries its key in the backend's live handles
//! ([`HandleKey`]: a slot of its own and the slot's generation, never reused), and the backend
//! keeps the live ones ([`LiveHandles`]: streams, events, graphs, and modules, the program's and
//! each device's kernel library; a kernel is live while its module is). A method that takes a handle
//! checks it first (one atomic on the handle's slot) and holds it for the length of its HIP
//! calls, so a destroyed, unloaded, reset or foreign handle is [`Error::StaleHandle`] and never
//! reaches HIP, and a destroy waits for the calls in flight on its handle. The addresses it
//! allocated and the host ranges it registered are kept too ([`LiveAllocations`],
//! [`LiveRegistrations`]): `free` and `host_unregister` refuse anything else before HIP.
//!
//! This module holds [`HipBackend`] itself: its fields, opening it, and the lookups every method
//! goes through. `dispatch.rs` implements the trait, each method handing over to the module of
//! its concern, which adds its methods to the backend: `memory.rs`, `streams.rs`, `events.rs`,
//! `copies.rs`, `modules.rs`, `kernels.rs`, `graphs.rs`, `peers.rs`, `vm.rs` (growable segments'
//! virtual memory), `reset.rs`. Below them lie modules that
//! know nothing of the backend: the handles (`handles.rs`), the devices as opened
//! (`devices.rs`), what a device can do (`caps.rs`) and the thread's current device
//! (`current.rs`). No module imports one above it: this one uses only the lower ones, and the
//! trait impl sits on top.
//!
//! [`HandleKey`]: gpu_core::backend::live::HandleKey

mod caps;
mod copies;
mod current;
mod devices;
mod dispatch;
mod events;
mod graphs;
mod handles;
mod kernels;
mod memory;
mod modules;
mod peers;
mod reset;
mod streams;
mod vm;

use core::sync::atomic::AtomicPtr;

use gpu_core::backend::live::{LiveAllocations, LiveHandles, LiveRegistrations};
use gpu_core::{DeviceId, Error, Result};

use crate::library::Hip;
use crate::result::{self, BACKEND, driver_error};
use crate::sys;

use current::DeviceScope;
use devices::{DeviceState, configure_default_pool, open_device};
pub use graphs::HipGraph;
pub use handles::{HipEvent, HipKernel, HipModule, HipStream, SavedDevice};

/// A HIP code as the toolkit's errors carry it.
const fn code(code: sys::hipError_t) -> i64 {
    code as i64
}

/// The HIP backend over the HIP runtime API (ROCm's libamdhip64 on AMD GPUs; on NVIDIA GPUs
/// the `nvidia` feature's shim, which exports the same functions over the CUDA runtime).
pub struct HipBackend {
    hip: &'static Hip,
    devices: Vec<DeviceState>,
    /// The streams it created or adopted and has not destroyed.
    streams: LiveHandles<HipStream>,
    /// The events it created and has not destroyed.
    events: LiveHandles<HipEvent>,
    /// The modules loaded and not unloaded: the program's, and each device's kernel library.
    modules: LiveHandles<HipModule>,
    /// The graphs instantiated and not destroyed.
    graphs: LiveHandles<graphs::GraphState>,
    /// The memory it allocated and has not freed.
    allocations: LiveAllocations,
    /// The host ranges it registered and has not unregistered.
    registrations: LiveRegistrations,
    /// The address ranges it reserved and the pieces of device memory mapped into them.
    mappings: vm::Mappings,
}

// SAFETY: the raw handles inside (pools, modules, functions) are opaque HIP handles, used only
// through the thread-safe HIP runtime; the per-device library slot is behind a mutex.
unsafe impl Send for HipBackend {}
// SAFETY: see above.
unsafe impl Sync for HipBackend {}

impl core::fmt::Debug for HipBackend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HipBackend")
            .field(
                "devices",
                &self
                    .devices
                    .iter()
                    .map(|device| &device.info.name)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl HipBackend {
    /// Opens every device of the process-wide HIP library ([`Hip::global`]).
    ///
    /// # Errors
    /// As [`HipBackend::with_library`], and the loader's errors
    /// ([`Error::DriverLibraryNotFound`], [`Error::DriverSymbolMissing`]) without the library.
    pub fn new() -> Result<Self> {
        Self::with_library(Hip::global()?)
    }

    /// Counts the devices (hipGetDeviceCount, which needs no hipInit and reports
    /// `hipErrorNoDevice` on a machine without one; ROCm 5.2.3's hipInit says
    /// `hipErrorInvalidDevice` there instead), initialises HIP, reads each device's
    /// description, and raises each default memory pool's release threshold to the maximum so
    /// that memory freed in stream order stays cached in the pool.
    ///
    /// # Errors
    /// [`Error::Driver`] with `hipErrorNoDevice` when HIP reports no device, and any HIP
    /// failure while opening.
    pub fn with_library(hip: &'static Hip) -> Result<Self> {
        let count = result::device::count(hip)?;
        if count <= 0 {
            return Err(Error::Driver(driver_error(
                "hipGetDeviceCount",
                sys::hipErrorNoDevice,
            )));
        }
        result::device::init(hip, 0)?;
        let pool_entry_points = hip.hipMallocAsync().is_ok()
            && hip.hipFreeAsync().is_ok()
            && hip.hipDeviceGetDefaultMemPool().is_ok()
            && hip.hipMemPoolSetAttribute().is_ok();
        let mut devices = Vec::with_capacity(count as usize);
        for ordinal in 0..count {
            let mut state = open_device(hip, ordinal, pool_entry_points)?;
            if state.info.allocator.device.stream_ordered {
                state.pool = AtomicPtr::new(configure_default_pool(hip, ordinal)?);
            }
            devices.push(state);
        }
        Ok(Self::with_devices(hip, devices))
    }

    /// A backend of `devices`, with nothing live yet.
    fn with_devices(hip: &'static Hip, devices: Vec<DeviceState>) -> Self {
        Self {
            hip,
            devices,
            streams: LiveHandles::new(BACKEND, "stream"),
            events: LiveHandles::new(BACKEND, "event"),
            modules: LiveHandles::new(BACKEND, "module"),
            graphs: LiveHandles::new(BACKEND, "graph"),
            allocations: LiveAllocations::new(),
            registrations: LiveRegistrations::new(),
            mappings: vm::Mappings::new(),
        }
    }

    /// The loaded HIP library.
    pub fn library(&self) -> &'static Hip {
        self.hip
    }

    /// The opened device `device`.
    fn device(&self, device: DeviceId) -> Result<&DeviceState> {
        self.devices
            .get(device.index())
            .ok_or(Error::UnknownDevice {
                device,
                device_count: self.devices.len(),
            })
    }

    /// Makes `device` current until the returned scope ends.
    fn enter(&self, device: DeviceId) -> Result<DeviceScope<'static>> {
        DeviceScope::enter(self.hip, self.device(device)?.ordinal)
    }
}

#[cfg(test)]
mod tests;
