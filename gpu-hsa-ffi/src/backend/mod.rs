//! The HSA backend, `gpu_core::backend::Backend` on the HSA runtime: [`HsaBackend`] itself (its
//! fields and tables of live objects), opening it, and the lookups a handle goes through.
//!
//! As LLVM's AMDGPU offload plugin does: agents and memory pools, locked host memory, signals
//! as events, and streams as user-mode AQL queues with DMA copies and kernel dispatches ordered
//! by signals. HSA has no current device: the calling thread's device is a per-thread value of
//! this crate, and every method names its device through its handles (`SCOPES_ITS_CALLS`).
//!
//! `dispatch.rs` implements the trait, each method handing over to the module of its concern:
//! `memory.rs`, `queues.rs`, `events.rs`, `copies.rs`, `fill.rs`, `kernels.rs`, which build on
//! `signals.rs` (the chain of completion signals). Below them lie modules that know nothing of
//! the backend: the handles (`handles.rs`), the devices as opened (`devices.rs`), code objects
//! (`executable.rs`), memory pools (`pools.rs`), a stream's queue and chain (`stream.rs`),
//! record signals (`records.rs`), AQL packets (`packets.rs`) and ELF sizes (`image.rs`). No
//! module imports one above it.

mod copies;
mod devices;
mod dispatch;
mod events;
mod executable;
mod fill;
mod handles;
mod image;
mod kernels;
mod memory;
mod packets;
mod pools;
mod queues;
mod records;
mod signals;
mod stream;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use gpu_core::{DeviceId, Error, Result};

use crate::library::Hsa;
use crate::result::{driver_error, no_gpu_agent};
use crate::runtime::HsaRuntime;
use crate::sys;

use devices::{DeviceState, HostPools};
use executable::Executable;
pub use handles::{HsaEvent, HsaKernel, HsaModule, HsaStream, SavedDevice};
use records::RecordSignals;
use stream::StreamState;

/// An event: the signal its last record completes (`None`: never recorded, or recorded when
/// nothing was pending, so complete).
#[derive(Clone, Copy, Debug, Default)]
struct EventState {
    current: Option<sys::hsa_signal_t>,
}

/// A locked host range: its length and the address agents use for its start.
#[derive(Clone, Copy, Debug)]
struct LockedRange {
    len: usize,
    agent_address: usize,
}

/// The backend's tables of live objects, keyed by the serial numbers in the handles, so that a
/// stale or foreign handle is found missing instead of reaching HSA.
#[derive(Default)]
struct Tables {
    next_serial: u64,
    streams: BTreeMap<u64, Arc<Mutex<StreamState>>>,
    events: BTreeMap<u64, EventState>,
    modules: BTreeMap<u64, Executable>,
    locks: BTreeMap<usize, LockedRange>,
    /// Completion signals free for the next operation or record.
    free_signals: Vec<sys::hsa_signal_t>,
    /// Record signals waited on or superseded, until they may be reused.
    records: RecordSignals,
}

impl Tables {
    fn serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }
}

/// The HSA backend over libhsa-runtime64 (ROCm's ROCr).
pub struct HsaBackend {
    hsa: &'static Hsa,
    devices: Vec<DeviceState>,
    /// `None` only for a backend without devices.
    host: Option<HostPools>,
    tables: Mutex<Tables>,
    /// The runtime reference (hsa_shut_down when dropped, after everything above is gone).
    _runtime: Option<HsaRuntime>,
}

// SAFETY: the raw handles inside (agents, pools, executables, signals, queues) are HSA
// handles, used only through the thread-safe HSA runtime; mutable state is behind mutexes.
unsafe impl Send for HsaBackend {}
// SAFETY: shared use goes through the HSA runtime, which is thread-safe, and through the
// mutexes around the tables and each device's library; the fields that are not behind a
// mutex are read-only after opening.
unsafe impl Sync for HsaBackend {}

impl core::fmt::Debug for HsaBackend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HsaBackend")
            .field(
                "devices",
                &self
                    .devices
                    .iter()
                    .map(|d| &d.info.name)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Locks `mutex`, taking the value even if a panicking thread held it (every update of the
/// tables is a single insert or remove, so no half-done state can be seen).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The error for a handle the backend has no live object for (a stale or foreign handle),
/// with HSA's status for that kind of object.
fn stale(call: &'static str, code: sys::hsa_status_t) -> Error {
    Error::Driver(driver_error(call, code))
}

impl HsaBackend {
    /// Initialises the process-wide HSA library ([`Hsa::global`]) and opens every GPU agent.
    ///
    /// # Errors
    /// As [`HsaBackend::with_library`], and the loader's errors without the library.
    pub fn new() -> Result<Self> {
        Self::with_library(Hsa::global()?)
    }

    /// hsa_init ([`HsaRuntime`]), then for each GPU agent its name, queue limit and pools (the
    /// global coarse-grained pool for device memory, the group pool's size for workgroup
    /// memory) and which other GPUs may reach its device pool, and the first CPU agent's
    /// fine-grained and kernarg pools.
    ///
    /// # Errors
    /// `HSA_STATUS_ERROR_OUT_OF_RESOURCES` from hsa_init without /dev/kfd; an
    /// `HSA_STATUS_ERROR_INVALID_AGENT` error when the runtime reports no GPU agent, or no CPU
    /// agent with both host pools, or a GPU without an allocatable coarse-grained pool; any
    /// HSA failure while opening (the runtime reference is given back).
    pub fn with_library(hsa: &'static Hsa) -> Result<Self> {
        let runtime = HsaRuntime::with_library(hsa)?;
        if runtime.gpu_agents().is_empty() {
            return Err(no_gpu_agent());
        }
        let host = devices::open_host(hsa, runtime.cpu_agents())?;
        let gpus = runtime.gpu_agents();
        let devices = gpus
            .iter()
            .map(|&agent| devices::open_device(hsa, agent, gpus))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            hsa,
            devices,
            host: Some(host),
            tables: Mutex::new(Tables::default()),
            _runtime: Some(runtime),
        })
    }

    /// The loaded HSA library.
    pub fn library(&self) -> &'static Hsa {
        self.hsa
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

    /// The host pools; a backend without devices has none (and fails as for device 0).
    fn host(&self) -> Result<HostPools> {
        self.host.ok_or(Error::UnknownDevice {
            device: DeviceId(0),
            device_count: self.devices.len(),
        })
    }

    /// The GPU agents, in device order.
    fn gpu_agents(&self) -> Vec<sys::hsa_agent_t> {
        self.devices.iter().map(|d| d.agent).collect()
    }

    /// The state of live stream `stream`.
    fn stream_state(&self, stream: HsaStream) -> Result<Arc<Mutex<StreamState>>> {
        self.device(stream.device)?;
        lock(&self.tables)
            .streams
            .get(&stream.serial)
            .cloned()
            .ok_or(stale(
                "stream handle (destroyed or foreign)",
                sys::HSA_STATUS_ERROR_INVALID_QUEUE,
            ))
    }

    /// The signal of live event `event`'s last record, if it has one.
    fn event_current(&self, event: HsaEvent) -> Result<Option<sys::hsa_signal_t>> {
        self.device(event.device)?;
        lock(&self.tables)
            .events
            .get(&event.serial)
            .map(|state| state.current)
            .ok_or(stale(
                "event handle (destroyed or foreign)",
                sys::HSA_STATUS_ERROR_INVALID_SIGNAL,
            ))
    }
}
