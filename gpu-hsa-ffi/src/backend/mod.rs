//! The HSA backend: `gpu_core::backend::Backend` on the HSA runtime (what LLVM's AMDGPU offload
//! plugin uses): agents and memory pools, locked host memory, signals as events, and streams as
//! user-mode AQL queues with DMA copies and kernel dispatches ordered by signals.
//!
//! HSA has no current device: the calling thread's device is a per-thread value of this crate,
//! and every method names its device through its handles (`SCOPES_ITS_CALLS`).

mod fill;
mod image;
mod packets;
mod pools;
mod records;
mod stream;

use core::cell::Cell;
use core::ffi::{CStr, c_char, c_void};
use core::ptr;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use gpu_core::allocator::{AllocatorCapabilities, KindSupport, MemoryKind};
use gpu_core::backend::library::{LIBRARY, ParamKind, find_for};
use gpu_core::backend::{
    Backend, DeviceInfo, FillValue, KernelArg, LaunchDims, check_device_slots, check_same_device,
};
use gpu_core::workgroup::WorkgroupLimits;
use gpu_core::{ByteRange, DeviceId, Error, Result};
use gpu_hip_ffi::code_objects::CODE_OBJECTS;

use crate::library::Hsa;
use crate::result::{BACKEND, check, driver_error, no_gpu_agent};
use crate::runtime::HsaRuntime;
use crate::sys;

use image::{ELF_HEADER_BYTES, elf_image_size};
use packets::{KernelObject, args_from_parameter_array, barrier_and_packets, dispatch_packet};
use pools::CopyAgents;
use records::RecordSignals;
use stream::{Op, Packet, Producer, StreamState};

/// Calls HSA function `$name` through the loader and checks its status, naming the call.
macro_rules! hsa {
    ($hsa:expr, $name:ident($($argument:expr),* $(,)?)) => {
        $hsa.$name().and_then(|function| {
            // SAFETY: each call site passes handles the backend owns (or the caller vouched
            // for through the trait contract) and out-parameters valid for writes.
            check(stringify!($name), unsafe { function($($argument),*) })
        })
    };
}

/// Slots of each queue's ring (clamped to what the agent allows).
const QUEUE_SLOTS: u32 = 1024;

/// Workgroups of the `fill_u32` kernel at most (it strides over the rest).
const FILL_GROUPS: u64 = 1024;

/// Work-items per workgroup of the `fill_u32` kernel.
const FILL_BLOCK: u32 = 256;

/// An in-order queue of work on one device: an HSA user-mode queue and the backend's record of
/// what was enqueued on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HsaStream {
    serial: u64,
    device: DeviceId,
}

/// A completion marker: the signal its last record completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HsaEvent {
    serial: u64,
    device: DeviceId,
}

/// A kernel loaded on one device: its kernel object and segment sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HsaKernel {
    object: KernelObject,
    device: DeviceId,
    /// Index into the library table (name and parameters); `None` for a module's kernel.
    library_index: Option<usize>,
}

/// A code object loaded on one device (an HSA executable), from [`Backend::module_load`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HsaModule {
    serial: u64,
    device: DeviceId,
}

/// What was current on a thread: the device the thread last chose through an HSA backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SavedDevice(Option<DeviceId>);

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
const MODULE_KERNEL: &str = "(a kernel of a loaded module)";

std::thread_local! {
    /// The device the calling thread chose last (HSA has no such state of its own).
    static CURRENT: Cell<Option<DeviceId>> = const { Cell::new(None) };
}

/// A loaded code object: the executable and the reader it was loaded from.
#[derive(Clone, Copy, Debug)]
struct Executable {
    executable: sys::hsa_executable_t,
    reader: sys::hsa_code_object_reader_t,
}

/// The kernel library loaded on one device: its executable and each kernel's object.
struct LoadedLibrary {
    executable: Executable,
    kernels: [KernelObject; LIBRARY.len()],
}

/// One GPU agent as opened.
struct DeviceState {
    agent: sys::hsa_agent_t,
    /// The global, coarse-grained pool device memory comes from.
    memory_pool: sys::hsa_amd_memory_pool_t,
    /// The other GPUs' agents that may reach `memory_pool` (read at open,
    /// [`pools::reaching_agents`]): each device allocation is opened to them.
    peers: Vec<sys::hsa_agent_t>,
    queue_slots: u32,
    info: DeviceInfo,
    /// Loaded at the first [`Backend::kernel`] call for the device.
    library: Mutex<Option<LoadedLibrary>>,
}

/// The host side: the CPU agent, the fine-grained pool pinned host memory comes from, and the
/// kernarg pool (kernel arguments and fill patterns).
#[derive(Clone, Copy, Debug)]
struct HostPools {
    cpu: sys::hsa_agent_t,
    memory_pool: sys::hsa_amd_memory_pool_t,
    kernarg_pool: sys::hsa_amd_memory_pool_t,
}

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
// SAFETY: see above.
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

/// The error for peer access, or a peer copy, between GPUs that cannot have it: one's device
/// pool is `NEVER_ALLOWED` for the other's agent (or, for enabling, a device and itself).
fn no_peer_access() -> Error {
    Error::Driver(driver_error(
        "hsa_amd_agent_memory_pool_get_info (peer access never allowed)",
        sys::HSA_STATUS_ERROR_INVALID_AGENT,
    ))
}

/// `Some(address)` for success, `None` when the pool is out of memory, else HSA's error.
fn allocation_outcome(code: sys::hsa_status_t, address: *mut c_void) -> Result<Option<usize>> {
    match code {
        sys::HSA_STATUS_SUCCESS => Ok(Some(address as usize)),
        sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES => Ok(None),
        failed => Err(Error::Driver(driver_error(
            "hsa_amd_memory_pool_allocate",
            failed,
        ))),
    }
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
        let mut host = None;
        for &cpu in runtime.cpu_agents() {
            let chosen = pools::choose_pools(&pools::agent_pools(hsa, cpu)?);
            if let (Some(memory_pool), Some(kernarg_pool)) = (chosen.host, chosen.kernarg) {
                host = Some(HostPools {
                    cpu,
                    memory_pool,
                    kernarg_pool,
                });
                break;
            }
        }
        let host = host.ok_or(Error::Driver(driver_error(
            "hsa_amd_agent_iterate_memory_pools (no CPU agent with fine-grained and kernarg pools)",
            sys::HSA_STATUS_ERROR_INVALID_AGENT,
        )))?;
        let gpus = runtime.gpu_agents();
        let devices = gpus
            .iter()
            .map(|&agent| open_device(hsa, agent, gpus))
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

    /// The opened device `device`, which allocates memory of `kind` ([`Error::KindUnsupported`]
    /// for managed memory, which it does not offer, and host-registered memory, which is
    /// never allocated).
    fn allocating_device(&self, device: DeviceId, kind: MemoryKind) -> Result<&DeviceState> {
        let state = self.device(device)?;
        if !state.info.allocator.support(kind).available || kind == MemoryKind::HostRegistered {
            return Err(Error::KindUnsupported { device, kind });
        }
        Ok(state)
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

    /// Whether `signal` has reached 0 or below (every operation it counts has completed).
    fn signal_done(&self, signal: sys::hsa_signal_t) -> Result<bool> {
        let load = self.hsa.hsa_signal_load_scacquire()?;
        // SAFETY: a live signal of the backend.
        Ok(unsafe { load(signal) } <= 0)
    }

    /// Blocks until `signal` is below 1.
    fn wait_signal(&self, signal: sys::hsa_signal_t) -> Result<()> {
        let wait = self.hsa.hsa_signal_wait_scacquire()?;
        loop {
            // SAFETY: a live signal of the backend; the wait may return early (spuriously or
            // at the timeout), so the value is checked again.
            let value = unsafe {
                wait(
                    signal,
                    sys::HSA_SIGNAL_CONDITION_LT,
                    1,
                    u64::MAX,
                    sys::HSA_WAIT_STATE_BLOCKED,
                )
            };
            if value < 1 {
                return Ok(());
            }
        }
    }

    /// A completion signal at 1 for a new operation: a free one, or a new one.
    fn fresh_signal(&self) -> Result<sys::hsa_signal_t> {
        let store = self.hsa.hsa_signal_store_screlease()?;
        if let Some(signal) = lock(&self.tables).free_signals.pop() {
            // SAFETY: a live signal no operation reads any more.
            unsafe { store(signal, 1) };
            return Ok(signal);
        }
        let mut signal = sys::hsa_signal_t::default();
        hsa!(self.hsa, hsa_signal_create(1, 0, ptr::null(), &mut signal))?;
        Ok(signal)
    }

    /// Frees what a retired operation held: its host buffer, its signal for reuse, and its
    /// hold on the record signal it waited for.
    fn recycle(&self, op: Op) {
        free_pool_memory(self.hsa, op.scratch);
        let mut tables = lock(&self.tables);
        tables.free_signals.push(op.signal);
        if let Some(record) = op.waits_on
            && let Some(free) = tables.records.end_wait(record)
        {
            tables.free_signals.push(free);
        }
    }

    /// Retires the stream's operations whose signals nothing reads any more, and frees the
    /// superseded record signals whose records have completed.
    fn reclaim(&self, state: &mut StreamState) -> Result<()> {
        let load = self.hsa.hsa_signal_load_scacquire()?;
        // SAFETY (both closures): the chain's and the records' signals are live signals of
        // the backend.
        for op in state.retire(|op| unsafe { load(op.signal) } <= 0) {
            self.recycle(op);
        }
        let mut tables = lock(&self.tables);
        let free = tables
            .records
            .collect(|signal| unsafe { load(signal) } <= 0);
        tables.free_signals.extend(free);
        Ok(())
    }

    /// An event no longer names `signal`, its previous record's (recorded again, or destroyed):
    /// free now if that record has completed and nothing waits for it, else later.
    fn supersede(&self, signal: Option<sys::hsa_signal_t>) -> Result<()> {
        let Some(signal) = signal else { return Ok(()) };
        let done = self.signal_done(signal)?;
        let mut tables = lock(&self.tables);
        if let Some(free) = tables.records.supersede(signal, done) {
            tables.free_signals.push(free);
        }
        Ok(())
    }

    /// Enqueues one operation: `enqueue` gets the signals it must wait for (the previous
    /// operation's, where queue order does not already cover it) and its own completion signal,
    /// and submits it. On success the operation joins the chain; on failure its signal,
    /// `scratch` and its hold on `waits_on` are given back and the stream is as it was.
    fn enqueue_op(
        &self,
        state: &mut StreamState,
        on_queue: bool,
        scratch: Option<usize>,
        waits_on: Option<sys::hsa_signal_t>,
        enqueue: impl FnOnce(&[sys::hsa_signal_t], sys::hsa_signal_t) -> Result<()>,
    ) -> Result<()> {
        let signal = match self.reclaim(state).and_then(|()| self.fresh_signal()) {
            Ok(signal) => signal,
            Err(error) => {
                free_pool_memory(self.hsa, scratch);
                let mut tables = lock(&self.tables);
                if let Some(free) = waits_on.and_then(|record| tables.records.end_wait(record)) {
                    tables.free_signals.push(free);
                }
                return Err(error);
            }
        };
        let op = Op {
            signal,
            on_queue,
            scratch,
            waits_on,
        };
        let dependencies = state.dependencies(on_queue);
        match enqueue(&dependencies, signal) {
            Ok(()) => {
                state.chain.push_back(op);
                state.record_after_chain = false;
                Ok(())
            }
            Err(error) => {
                self.recycle(op);
                Err(error)
            }
        }
    }

    /// Enqueues barrier-AND packets on the stream's queue waiting for `record` (an event
    /// record's signal, already counted as waited on) and whatever the chain requires,
    /// completing an operation of the chain.
    fn enqueue_barrier(
        &self,
        state: &mut StreamState,
        record: Option<sys::hsa_signal_t>,
    ) -> Result<()> {
        let producer = Producer::new(self.hsa)?;
        let queue = state.queue;
        self.enqueue_op(state, true, None, record, |dependencies, signal| {
            let mut all: Vec<_> = record.into_iter().collect();
            all.extend_from_slice(dependencies);
            let packets = barrier_packets(&all, Some(signal));
            // SAFETY: a live queue of the backend; the signals live until the chain retires
            // the operation, after the packets have been processed.
            unsafe { producer.submit(queue, &packets) };
            Ok(())
        })
    }

    /// Enqueues a DMA copy of `bytes` from `src` to `dst` after the stream's previous
    /// operation, each side named by the agent `agents` gives it, from `scratch` when the
    /// source is a buffer of the backend's.
    ///
    /// # Safety
    /// [`Backend::copy`]'s.
    unsafe fn enqueue_copy(
        &self,
        state: &mut StreamState,
        agents: CopyAgents,
        dst: usize,
        src: usize,
        bytes: usize,
        scratch: Option<usize>,
    ) -> Result<()> {
        let prepared = self.hsa.hsa_amd_memory_async_copy().and_then(|copy| {
            Ok((
                copy,
                agents.sides(dst, src, |address| self.copy_side(address))?,
            ))
        });
        let (copy, [(dst_agent, dst), (src_agent, src)]) = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                free_pool_memory(self.hsa, scratch);
                return Err(error);
            }
        };
        self.enqueue_op(state, false, scratch, None, |dependencies, signal| {
            // SAFETY: the caller's promise for the memory; the signals are live.
            check("hsa_amd_memory_async_copy", unsafe {
                copy(
                    dst as *mut c_void,
                    dst_agent,
                    src as *const c_void,
                    src_agent,
                    bytes,
                    dependencies.len() as u32,
                    dependencies.as_ptr(),
                    signal,
                )
            })
        })
    }

    /// The agent and address a copy names for `address` ([`pools::copy_side`] of one
    /// hsa_amd_pointer_info).
    fn copy_side(&self, address: usize) -> Result<(sys::hsa_agent_t, usize)> {
        let host = self.host()?;
        let info = self.pointer_info(address)?;
        let is_gpu =
            |agent: sys::hsa_agent_t| self.devices.iter().any(|d| d.agent.handle == agent.handle);
        Ok(pools::copy_side(&info, address, host.cpu, is_gpu))
    }

    /// What hsa_amd_pointer_info knows of `address` (its type, extent, owner).
    fn pointer_info(&self, address: usize) -> Result<sys::hsa_amd_pointer_info_t> {
        let mut info = sys::hsa_amd_pointer_info_t {
            size: size_of::<sys::hsa_amd_pointer_info_t>() as u32,
            ..Default::default()
        };
        hsa!(
            self.hsa,
            hsa_amd_pointer_info(
                address as *mut c_void,
                &mut info,
                None,
                ptr::null_mut(),
                ptr::null_mut()
            )
        )?;
        Ok(info)
    }

    /// A kernarg-pool buffer holding `bytes` (kernel arguments, a fill pattern), reachable by
    /// every GPU; `None` for no bytes.
    fn scratch(&self, bytes: &[u8]) -> Result<Option<usize>> {
        if bytes.is_empty() {
            return Ok(None);
        }
        let host = self.host()?;
        let mut address = ptr::null_mut();
        hsa!(
            self.hsa,
            hsa_amd_memory_pool_allocate(host.kernarg_pool, bytes.len(), 0, &mut address)
        )?;
        if let Err(error) = self.allow(&self.gpu_agents(), address) {
            free_pool_memory(self.hsa, Some(address as usize));
            return Err(error);
        }
        // SAFETY: the pool just gave `bytes.len()` bytes of host memory at `address`.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), address.cast::<u8>(), bytes.len()) };
        Ok(Some(address as usize))
    }

    /// Lets `agents` reach pool memory at `address` (host memory of a CPU pool, or a device
    /// allocation for its peers).
    fn allow(&self, agents: &[sys::hsa_agent_t], address: *mut c_void) -> Result<()> {
        hsa!(
            self.hsa,
            hsa_amd_agents_allow_access(agents.len() as u32, agents.as_ptr(), ptr::null(), address)
        )
    }

    /// Enqueues a dispatch of `kernel` with `args` (already checked against its parameters)
    /// after the stream's previous operation.
    ///
    /// # Safety
    /// [`Backend::launch`]'s.
    unsafe fn enqueue_dispatch(
        &self,
        stream: HsaStream,
        kernel: HsaKernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        check_same_device(stream.device, kernel.device)?;
        let state = self.stream_state(stream)?;
        // The shape is checked before anything is allocated.
        dispatch_packet(&kernel.object, &dims, 0, sys::hsa_signal_t::default())?;
        let producer = Producer::new(self.hsa)?;
        let kernargs = packets::kernarg_bytes(args, kernel.object.kernarg_size as usize);
        let scratch = self.scratch(&kernargs)?;
        let mut state = lock(&state);
        let queue = state.queue;
        self.enqueue_op(&mut state, true, scratch, None, |dependencies, signal| {
            let dispatch = dispatch_packet(&kernel.object, &dims, scratch.unwrap_or(0), signal)?;
            let mut all = barrier_packets(dependencies, None);
            all.push(Packet::new(
                &dispatch,
                packets::header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH),
                dispatch.setup,
            ));
            // SAFETY: a live queue; the kernel object lives as long as the backend, the
            // kernarg buffer and signal until the chain retires the operation.
            unsafe { producer.submit(queue, &all) };
            Ok(())
        })
    }

    /// The library kernel `library_index` on `device`, loading the library on first use (the
    /// first code object the agent accepts).
    fn library_kernel(&self, device: DeviceId, library_index: usize) -> Result<HsaKernel> {
        let state = self.device(device)?;
        let mut slot = lock(&state.library);
        if let Some(loaded) = slot.as_ref() {
            return Ok(HsaKernel {
                object: loaded.kernels[library_index],
                device,
                library_index: Some(library_index),
            });
        }
        let mut refusal = None;
        for image in CODE_OBJECTS {
            match self.load_executable(state.agent, image) {
                Ok(executable) => {
                    let mut kernels = [KernelObject::default(); LIBRARY.len()];
                    for (kernel, entry) in kernels.iter_mut().zip(LIBRARY) {
                        match self.kernel_object(executable, state.agent, entry.symbol) {
                            Ok(object) => *kernel = object,
                            Err(error) => {
                                self.destroy_executable(executable);
                                return Err(error);
                            }
                        }
                    }
                    let object = kernels[library_index];
                    *slot = Some(LoadedLibrary {
                        executable,
                        kernels,
                    });
                    return Ok(HsaKernel {
                        object,
                        device,
                        library_index: Some(library_index),
                    });
                }
                Err(error) => refusal = Some(error),
            }
        }
        Err(refusal.unwrap_or(Error::Driver(driver_error(
            "hsa_executable_load_agent_code_object",
            sys::HSA_STATUS_ERROR_INVALID_ISA,
        ))))
    }

    /// Reads `image` into an executable for `agent` and freezes it; on failure everything
    /// created on the way is destroyed again.
    fn load_executable(&self, agent: sys::hsa_agent_t, image: &[u8]) -> Result<Executable> {
        // Looked up first, so that the clean-up on the error paths cannot fail for a symbol.
        self.hsa.hsa_executable_destroy()?;
        self.hsa.hsa_code_object_reader_destroy()?;
        let mut reader = sys::hsa_code_object_reader_t::default();
        hsa!(
            self.hsa,
            hsa_code_object_reader_create_from_memory(
                image.as_ptr().cast(),
                image.len(),
                &mut reader
            )
        )?;
        let mut executable = sys::hsa_executable_t::default();
        if let Err(error) = hsa!(
            self.hsa,
            hsa_executable_create_alt(
                sys::HSA_PROFILE_FULL,
                sys::HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                ptr::null(),
                &mut executable
            )
        ) {
            let _ = hsa!(self.hsa, hsa_code_object_reader_destroy(reader));
            return Err(error);
        }
        let loaded = Executable { executable, reader };
        let finished = hsa!(
            self.hsa,
            hsa_executable_load_agent_code_object(
                executable,
                agent,
                reader,
                ptr::null(),
                ptr::null_mut()
            )
        )
        .and_then(|()| hsa!(self.hsa, hsa_executable_freeze(executable, ptr::null())));
        match finished {
            Ok(()) => Ok(loaded),
            Err(error) => {
                self.destroy_executable(loaded);
                Err(error)
            }
        }
    }

    /// Destroys an executable and its reader (nothing to report: they are gone either way).
    fn destroy_executable(&self, loaded: Executable) {
        let _ = hsa!(self.hsa, hsa_executable_destroy(loaded.executable));
        let _ = hsa!(self.hsa, hsa_code_object_reader_destroy(loaded.reader));
    }

    /// The kernel object and segment sizes of kernel `name` (its `name.kd` symbol).
    fn kernel_object(
        &self,
        loaded: Executable,
        agent: sys::hsa_agent_t,
        name: &CStr,
    ) -> Result<KernelObject> {
        let mut symbol_name = name.to_bytes().to_vec();
        symbol_name.extend_from_slice(b".kd\0");
        let mut symbol = sys::hsa_executable_symbol_t::default();
        hsa!(
            self.hsa,
            hsa_executable_get_symbol_by_name(
                loaded.executable,
                symbol_name.as_ptr().cast(),
                &agent,
                &mut symbol
            )
        )?;
        let mut object = KernelObject::default();
        let info = |attribute, value: *mut c_void| {
            hsa!(
                self.hsa,
                hsa_executable_symbol_get_info(symbol, attribute, value)
            )
        };
        info(
            sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
            (&mut object.object as *mut u64).cast(),
        )?;
        let sizes = [
            (
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                &mut object.kernarg_size,
            ),
            (
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                &mut object.group_size,
            ),
            (
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                &mut object.private_size,
            ),
        ];
        for (attribute, size) in sizes {
            info(attribute, (size as *mut u32).cast())?;
        }
        Ok(object)
    }

    /// Waits for the stream's operations and an event record submitted after them (through a
    /// marker that completes after it), then retires them all.
    fn drain(&self, state: &mut StreamState) -> Result<()> {
        if state.record_after_chain {
            self.enqueue_barrier(state, None)?;
        }
        if let Some(last) = state.chain.back() {
            self.wait_signal(last.signal)?;
        }
        self.reclaim(state)
    }

    /// Waits until the packet processor has taken every packet of `queue` (event packets
    /// outside the chain included), as HSA requires before a queue is destroyed.
    fn wait_queue_idle(&self, queue: *mut sys::hsa_queue_t) -> Result<()> {
        let written = self.hsa.hsa_queue_load_write_index_relaxed()?;
        let read = self.hsa.hsa_queue_load_read_index_scacquire()?;
        // SAFETY: a live queue of the backend.
        while unsafe { read(queue) } < unsafe { written(queue) } {
            std::thread::yield_now();
        }
        Ok(())
    }
}

/// Gives pool memory back, if any, on paths that report something else (nothing to report: a
/// buffer nothing reads is freed, or left to the process if even the lookup fails).
fn free_pool_memory(hsa: &Hsa, address: Option<usize>) {
    if let (Some(address), Ok(free)) = (address, hsa.hsa_amd_memory_pool_free()) {
        // SAFETY: pool memory of the backend that nothing reads any more.
        let _ = unsafe { free(address as *mut c_void) };
    }
}

/// Barrier-AND packets for `dependencies`, completing `completion`, ready to submit.
fn barrier_packets(
    dependencies: &[sys::hsa_signal_t],
    completion: Option<sys::hsa_signal_t>,
) -> Vec<Packet> {
    let header = packets::header(sys::HSA_PACKET_TYPE_BARRIER_AND);
    barrier_and_packets(dependencies, completion)
        .iter()
        .map(|packet| Packet::new(packet, header, 0))
        .collect()
}

/// Opens GPU agent `agent`: name, queue limit, pools, the GPUs of `gpus` that may reach its
/// device pool, description.
fn open_device(
    hsa: &Hsa,
    agent: sys::hsa_agent_t,
    gpus: &[sys::hsa_agent_t],
) -> Result<DeviceState> {
    let info =
        |attribute, value: *mut c_void| hsa!(hsa, hsa_agent_get_info(agent, attribute, value));
    let mut name = [0 as c_char; 64];
    info(sys::HSA_AGENT_INFO_NAME, name.as_mut_ptr().cast())?;
    name[63] = 0;
    // SAFETY: NUL-terminated: HSA writes at most 64 bytes and the last is zero.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut queue_max: u32 = 0;
    info(
        sys::HSA_AGENT_INFO_QUEUE_MAX_SIZE,
        (&mut queue_max as *mut u32).cast(),
    )?;
    let chosen = pools::choose_pools(&pools::agent_pools(hsa, agent)?);
    let (memory_pool, total_memory) = chosen.device.ok_or(Error::Driver(driver_error(
        "hsa_amd_agent_iterate_memory_pools (no coarse-grained pool on a GPU)",
        sys::HSA_STATUS_ERROR_INVALID_AGENT,
    )))?;
    let lds = u32::try_from(chosen.group_bytes.unwrap_or(0)).unwrap_or(u32::MAX);
    let peers = pools::reaching_agents(hsa, agent, memory_pool, gpus)?;
    Ok(DeviceState {
        agent,
        memory_pool,
        peers,
        queue_slots: QUEUE_SLOTS.min(queue_max.max(1)),
        info: describe_device(name, total_memory, lds),
        library: Mutex::new(None),
    })
}

/// What an HSA GPU is and can do: device memory from its pool (synchronous: HSA has no
/// stream-ordered allocation), pinned host memory and locking always, no managed memory (HSA
/// offers it only through SVM attributes, which this backend does not use), its whole LDS for
/// every kernel (no opt-in), one address space.
fn describe_device(name: String, total_memory: usize, lds: u32) -> DeviceInfo {
    DeviceInfo {
        name,
        total_memory,
        allocator: AllocatorCapabilities {
            device: KindSupport {
                available: true,
                stream_ordered: false,
                max_size: total_memory,
            },
            managed: KindSupport::synchronous_if(false),
            host_pinned: KindSupport::SYNCHRONOUS,
            host_register: true,
        },
        workgroup: WorkgroupLimits {
            default_per_block: lds,
            max_per_block_opt_in: lds,
            per_multiprocessor: lds,
            reserved_per_block: 0,
        },
        unified_addressing: true,
        pageable_memory_access: false,
    }
}

impl Drop for HsaBackend {
    fn drop(&mut self) {
        let tables = core::mem::take(
            self.tables
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (_, state) in tables.streams {
            let mut state = lock(&state);
            let _ = self.drain(&mut state);
            if !state.adopted {
                let _ = self.wait_queue_idle(state.queue);
                let _ = hsa!(self.hsa, hsa_queue_destroy(state.queue));
            }
            for op in core::mem::take(&mut state.chain) {
                free_pool_memory(self.hsa, op.scratch);
                let _ = hsa!(self.hsa, hsa_signal_destroy(op.signal));
            }
        }
        let mut records = tables.records;
        let signals = tables
            .free_signals
            .into_iter()
            .chain(records.take_all())
            .chain(tables.events.values().filter_map(|event| event.current));
        for signal in signals {
            let _ = hsa!(self.hsa, hsa_signal_destroy(signal));
        }
        for loaded in tables.modules.into_values() {
            self.destroy_executable(loaded);
        }
        let libraries: Vec<Executable> = self
            .devices
            .iter_mut()
            .filter_map(|device| {
                let slot = device.library.get_mut();
                slot.unwrap_or_else(PoisonError::into_inner).take()
            })
            .map(|library| library.executable)
            .collect();
        for executable in libraries {
            self.destroy_executable(executable);
        }
        // `_runtime` drops after this: hsa_shut_down once nothing of the backend is left.
    }
}

impl Backend for HsaBackend {
    type Stream = HsaStream;
    type Event = HsaEvent;
    type Kernel = HsaKernel;
    type Module = HsaModule;
    // No method depends on a current device: each names its device through its handles.
    const SCOPES_ITS_CALLS: bool = true;
    // ROCr ends the process on a GPU memory fault by default, and has no per-agent reset.
    const DEVICE_LOSS_ENDS_THE_PROCESS: bool = true;
    type SavedCurrent = SavedDevice;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device_info(&self, device: DeviceId) -> Result<DeviceInfo> {
        Ok(self.device(device)?.info.clone())
    }

    /// The device the thread chose last through an HSA backend (HSA has no current device).
    fn current_device(&self) -> Result<Option<DeviceId>> {
        Ok(CURRENT.with(Cell::get))
    }

    fn set_current_device(&self, device: Option<DeviceId>) -> Result<()> {
        if let Some(device) = device {
            self.device(device)?;
        }
        CURRENT.with(|current| current.set(device));
        Ok(())
    }

    fn save_current(&self) -> Result<SavedDevice> {
        Ok(SavedDevice(CURRENT.with(Cell::get)))
    }

    fn restore_current(&self, saved: SavedDevice) -> Result<()> {
        CURRENT.with(|current| current.set(saved.0));
        Ok(())
    }

    fn is_current(&self, saved: SavedDevice, device: DeviceId) -> bool {
        device.index() < self.devices.len() && saved.0 == Some(device)
    }

    /// Device: hsa_amd_memory_pool_allocate from the agent's coarse-grained pool; pinned host:
    /// from the CPU's fine-grained pool. Then hsa_amd_agents_allow_access: pinned host memory
    /// for every GPU, device memory for the other GPUs that may reach the pool, where any (so
    /// their copies and kernels reach it: this is the backend's peer access).
    /// Managed and host-registered memory are [`Error::KindUnsupported`].
    fn allocate(&self, device: DeviceId, kind: MemoryKind, bytes: usize) -> Result<Option<usize>> {
        let state = self.allocating_device(device, kind)?;
        if bytes == 0 {
            return Err(Error::ZeroSize {
                what: "allocation size",
            });
        }
        let pool = match kind {
            MemoryKind::HostPinned => self.host()?.memory_pool,
            _ => state.memory_pool,
        };
        let allocate = self.hsa.hsa_amd_memory_pool_allocate()?;
        self.hsa.hsa_amd_memory_pool_free()?;
        let mut address = ptr::null_mut();
        // SAFETY: a pool of the backend; `address` is valid for writes.
        let code = unsafe { allocate(pool, bytes, 0, &mut address) };
        let outcome = allocation_outcome(code, address)?;
        // Host memory must be opened to the GPUs; device memory to its peers, where any.
        let gpus;
        let agents = if kind == MemoryKind::HostPinned {
            gpus = self.gpu_agents();
            &gpus
        } else {
            &state.peers
        };
        if outcome.is_some()
            && !agents.is_empty()
            && let Err(error) = self.allow(agents, address)
        {
            free_pool_memory(self.hsa, outcome);
            return Err(error);
        }
        Ok(outcome)
    }

    /// HSA has no stream-ordered allocation: every kind is [`Error::KindUnsupported`] (the
    /// capabilities say so, and the runtime does not ask).
    fn allocate_on_stream(
        &self,
        stream: HsaStream,
        kind: MemoryKind,
        _bytes: usize,
    ) -> Result<Option<usize>> {
        self.device(stream.device)?;
        Err(Error::KindUnsupported {
            device: stream.device,
            kind,
        })
    }

    /// hsa_amd_memory_pool_free, after `after`'s work where given (HSA frees at once).
    fn free(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<HsaStream>,
    ) -> Result<()> {
        self.allocating_device(device, kind)?;
        if address == 0 {
            return Err(Error::NullPointer {
                what: "freed address",
            });
        }
        if let Some(stream) = after {
            self.stream_synchronize(stream)?;
        }
        hsa!(self.hsa, hsa_amd_memory_pool_free(address as *mut c_void))
    }

    /// hsa_amd_memory_lock for every GPU agent; the one agent address it returns is each
    /// device's address, and the backend keeps it with the range until the exact start is
    /// unlocked.
    fn host_register(&self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        check_device_slots(self.devices.len(), device_ptrs)?;
        self.host()?;
        let mut agents = self.gpu_agents();
        let mut agent_address = ptr::null_mut();
        let mut tables = lock(&self.tables);
        if let Some((&start, locked)) = tables.locks.range(..range.start + range.len).next_back()
            && start + locked.len > range.start
        {
            return Err(Error::LockOverlap {
                requested: range,
                conflicting: ByteRange {
                    start,
                    len: locked.len,
                },
                external: false,
            });
        }
        hsa!(
            self.hsa,
            hsa_amd_memory_lock(
                range.start as *mut c_void,
                range.len,
                agents.as_mut_ptr(),
                agents.len() as i32,
                &mut agent_address
            )
        )?;
        tables.locks.insert(
            range.start,
            LockedRange {
                len: range.len,
                agent_address: agent_address as usize,
            },
        );
        device_ptrs.fill(agent_address as usize);
        Ok(())
    }

    /// hsa_amd_memory_unlock of exactly `start`, a start the backend locked: anything else is
    /// [`Error::NotEntryStart`] (inside a locked range) or [`Error::NotLocked`] before HSA.
    fn host_unregister(&self, start: usize) -> Result<()> {
        let mut tables = lock(&self.tables);
        if !tables.locks.contains_key(&start) {
            return Err(match tables.locks.range(..start).next_back() {
                Some((&entry, locked)) if entry + locked.len > start => Error::NotEntryStart {
                    ptr: start,
                    entry: ByteRange {
                        start: entry,
                        len: locked.len,
                    },
                },
                _ => Error::NotLocked { ptr: start },
            });
        }
        hsa!(self.hsa, hsa_amd_memory_unlock(start as *mut c_void))?;
        tables.locks.remove(&start);
        Ok(())
    }

    /// A range the backend locked answers from its own table (the agent address kept at
    /// lock time); anything else takes one hsa_amd_pointer_info: locked host memory (by anyone)
    /// and memory of a CPU pool are pinned. The agent address of the extent's start goes to
    /// every device slot.
    fn host_pinned_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        check_device_slots(self.devices.len(), device_ptrs)?;
        let host = self.host()?;
        if let Some((&start, locked)) = lock(&self.tables).locks.range(..=ptr).next_back()
            && ptr < start + locked.len
        {
            device_ptrs.fill(locked.agent_address);
            return Ok(Some(ByteRange {
                start,
                len: locked.len,
            }));
        }
        let info = self.pointer_info(ptr)?;
        let Some((extent, agent_address)) = pools::pinned_extent(&info, host.cpu) else {
            return Ok(None);
        };
        device_ptrs.fill(agent_address);
        Ok(Some(extent))
    }

    /// hsa_queue_create on the device's agent (single producer: the stream's mutex
    /// serialises its packets).
    fn stream_create(&self, device: DeviceId) -> Result<HsaStream> {
        let state = self.device(device)?;
        let mut queue = ptr::null_mut();
        hsa!(
            self.hsa,
            hsa_queue_create(
                state.agent,
                state.queue_slots,
                sys::HSA_QUEUE_TYPE_SINGLE,
                None,
                ptr::null_mut(),
                u32::MAX,
                u32::MAX,
                &mut queue
            )
        )?;
        let mut tables = lock(&self.tables);
        let serial = tables.serial();
        tables.streams.insert(
            serial,
            Arc::new(Mutex::new(StreamState {
                queue,
                device,
                adopted: false,
                chain: Default::default(),
                record_after_chain: false,
            })),
        );
        Ok(HsaStream { serial, device })
    }

    /// Wraps a program's `hsa_queue_t *` of `device`'s agent; the backend enqueues on it
    /// (reserving slots atomically, as any producer of a multi-producer queue must) and never
    /// destroys it.
    unsafe fn adopt_stream(&self, device: DeviceId, raw: usize) -> Result<HsaStream> {
        self.device(device)?;
        if raw == 0 {
            return Err(Error::NullPointer {
                what: "adopted HSA queue",
            });
        }
        let mut tables = lock(&self.tables);
        let serial = tables.serial();
        tables.streams.insert(
            serial,
            Arc::new(Mutex::new(StreamState {
                queue: raw as *mut sys::hsa_queue_t,
                device,
                adopted: true,
                chain: Default::default(),
                record_after_chain: false,
            })),
        );
        Ok(HsaStream { serial, device })
    }

    /// Waits for the stream's work (HSA destroys only an idle queue), then hsa_queue_destroy;
    /// an adopted queue is only forgotten.
    fn stream_destroy(&self, stream: HsaStream) -> Result<()> {
        let state = self.stream_state(stream)?;
        let mut state = lock(&state);
        self.drain(&mut state)?;
        if !state.adopted {
            self.wait_queue_idle(state.queue)?;
            hsa!(self.hsa, hsa_queue_destroy(state.queue))?;
        }
        lock(&self.tables).streams.remove(&stream.serial);
        Ok(())
    }

    /// Waits for the completion signal of the stream's last operation.
    fn stream_synchronize(&self, stream: HsaStream) -> Result<()> {
        let state = self.stream_state(stream)?;
        self.drain(&mut lock(&state))
    }

    /// An event with no record (complete); its signals come with its records.
    fn event_create(&self, device: DeviceId) -> Result<HsaEvent> {
        self.device(device)?;
        let mut tables = lock(&self.tables);
        let serial = tables.serial();
        tables.events.insert(serial, EventState::default());
        Ok(HsaEvent { serial, device })
    }

    /// Forgets the event; its last record's signal is reused once that record has completed
    /// and no queue waits for it any more.
    fn event_destroy(&self, event: HsaEvent) -> Result<()> {
        self.event_current(event)?;
        let removed = lock(&self.tables).events.remove(&event.serial);
        self.supersede(removed.and_then(|state| state.current))
    }

    /// A record completes a signal of its own (at 1 from the free list): a barrier-AND packet
    /// after the work before it (after a marker packet when the stream's last operation was a
    /// copy, which the queue does not order). With nothing pending on the stream the event is
    /// complete at once. The event's previous record signal is superseded.
    fn event_record(&self, event: HsaEvent, stream: HsaStream) -> Result<()> {
        check_same_device(stream.device, event.device)?;
        self.event_current(event)?;
        let state = self.stream_state(stream)?;
        let mut state = lock(&state);
        self.reclaim(&mut state)?;
        let current = if state.chain.is_empty() {
            None
        } else {
            if !state.dependencies(true).is_empty() {
                self.enqueue_barrier(&mut state, None)?;
            }
            let producer = Producer::new(self.hsa)?;
            let signal = self.fresh_signal()?;
            // SAFETY: a live queue; the signal is kept until its record has completed and no
            // queue waits for it.
            unsafe { producer.submit(state.queue, &barrier_packets(&[], Some(signal))) };
            state.record_after_chain = true;
            Some(signal)
        };
        // Swapped in one step, so that records and destroys of the event on other threads
        // each supersede a signal exactly once (a record of an event destroyed meanwhile
        // supersedes its own signal).
        let previous = match lock(&self.tables).events.get_mut(&event.serial) {
            Some(recorded) => core::mem::replace(&mut recorded.current, current),
            None => current,
        };
        self.supersede(previous)
    }

    /// Nothing when the event's last record has completed (or there is none); otherwise a
    /// barrier-AND packet on the stream's queue waiting for that record's signal, as an
    /// operation of the stream's chain.
    fn stream_wait_event(&self, stream: HsaStream, event: HsaEvent) -> Result<()> {
        let current = self.event_current(event)?;
        let state = self.stream_state(stream)?;
        let Some(record) = current else { return Ok(()) };
        if self.signal_done(record)? {
            return Ok(());
        }
        lock(&self.tables).records.add_wait(record);
        self.enqueue_barrier(&mut lock(&state), Some(record))
    }

    fn event_query(&self, event: HsaEvent) -> Result<bool> {
        match self.event_current(event)? {
            Some(record) => self.signal_done(record),
            None => Ok(true),
        }
    }

    /// hsa_signal_wait_scacquire on the last record's signal until it is below 1.
    fn event_synchronize(&self, event: HsaEvent) -> Result<()> {
        match self.event_current(event)? {
            Some(record) => self.wait_signal(record),
            None => Ok(()),
        }
    }

    /// Waits for every stream of the device (HSA has no device-wide wait).
    fn device_synchronize(&self, device: DeviceId) -> Result<()> {
        self.device(device)?;
        let streams: Vec<_> = lock(&self.tables).streams.values().cloned().collect();
        for state in streams {
            let mut state = lock(&state);
            if state.device == device {
                self.drain(&mut state)?;
            }
        }
        Ok(())
    }

    /// Unsupported: HSA has no per-process reset of one agent (ROCr recovers a GPU only by
    /// tearing the runtime down); the device stays as it is.
    fn reset_device(&self, device: DeviceId) -> Result<()> {
        self.device(device)?;
        Err(Error::Unsupported {
            backend: "hsa",
            what: "resetting one device (ROCr has no per-agent reset)",
        })
    }

    /// Whether `peer`'s device pool may be reached by `device`'s agent
    /// (hsa_amd_agent_memory_pool_get_info's `HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS` is not
    /// `NEVER_ALLOWED`, read at open); false for a device and itself.
    fn peer_access_possible(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        let agent = self.device(device)?.agent;
        let peers = &self.device(peer)?.peers;
        Ok(device != peer && peers.iter().any(|p| p.handle == agent.handle))
    }

    /// Nothing to enable: every device allocation is opened at allocation
    /// (hsa_amd_agents_allow_access) to each other GPU that may reach its pool, which covers
    /// memory allocated before this call and after it. So this only checks the pair, and
    /// changes nothing: [`Backend::peer_access_possible`] false (the pool is `NEVER_ALLOWED`
    /// for `device`'s agent, or `device` is `peer`) is an `HSA_STATUS_ERROR_INVALID_AGENT`
    /// error, anything else success, as often as asked.
    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        if self.peer_access_possible(device, peer)? {
            Ok(())
        } else {
            Err(no_peer_access())
        }
    }

    /// hsa_amd_memory_async_copy after the stream's previous operation, each side named by
    /// its agent (hsa_amd_pointer_info: a GPU's pool memory is that GPU's, the rest the CPU's).
    ///
    /// # Safety
    /// The trait's; HSA copies only memory it knows (pool, locked), not pageable memory.
    unsafe fn copy(&self, stream: HsaStream, dst: usize, src: usize, bytes: usize) -> Result<()> {
        let state = self.stream_state(stream)?;
        if bytes == 0 {
            return Err(Error::ZeroSize { what: "copy size" });
        }
        // SAFETY: the caller's promise, passed on.
        unsafe {
            self.enqueue_copy(
                &mut lock(&state),
                CopyAgents::FromAddresses,
                dst,
                src,
                bytes,
                None,
            )
        }
    }

    /// As [`Backend::copy`], with each side's agent named: `dst_device`'s and `src_device`'s
    /// GPU agents, the addresses as given (no hsa_amd_pointer_info). Device memory is opened
    /// to every peer that may reach it at allocation, so the copy needs nothing enabled. HSA
    /// has no staged copy: each agent must reach both buffers, so two devices that cannot
    /// reach each other both ways ([`Backend::peer_access_possible`]) are refused with the
    /// `HSA_STATUS_ERROR_INVALID_AGENT` error of [`Backend::enable_peer_access`] before
    /// anything is enqueued.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn copy_peer(
        &self,
        stream: HsaStream,
        dst: usize,
        dst_device: DeviceId,
        src: usize,
        src_device: DeviceId,
        bytes: usize,
    ) -> Result<()> {
        let agents = CopyAgents::Named {
            dst: self.device(dst_device)?.agent,
            src: self.device(src_device)?.agent,
        };
        let reaches = |device, peer| self.peer_access_possible(device, peer);
        if dst_device != src_device
            && !(reaches(dst_device, src_device)? && reaches(src_device, dst_device)?)
        {
            return Err(no_peer_access());
        }
        let state = self.stream_state(stream)?;
        if bytes == 0 {
            return Err(Error::ZeroSize { what: "copy size" });
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.enqueue_copy(&mut lock(&state), agents, dst, src, bytes, None) }
    }

    /// As [`Backend::fill_elements`] with bytes.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn fill(&self, stream: HsaStream, dst: usize, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.fill_elements(stream, dst, FillValue::U8(value), bytes) }
    }

    /// The aligned words by the `fill_u32` kernel, the one to three bytes before and after
    /// them copied from a host buffer holding the pattern (`backend/fill.rs` splits the range).
    ///
    /// # Safety
    /// The trait's.
    unsafe fn fill_elements(
        &self,
        stream: HsaStream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()> {
        let state = self.stream_state(stream)?;
        let plan = fill::plan_fill(dst, value, count)?;
        if let Some((start, words)) = plan.words {
            let kernel = self.library_kernel(stream.device, find_for(BACKEND, "fill_u32")?)?;
            let groups = words.div_ceil(u64::from(FILL_BLOCK)).min(FILL_GROUPS) as u32;
            let args = [
                KernelArg::Ptr(start),
                KernelArg::U32(plan.pattern),
                KernelArg::U64(words),
            ];
            // SAFETY: the caller's promise for the range the words lie in.
            unsafe {
                self.enqueue_dispatch(
                    stream,
                    kernel,
                    LaunchDims::linear(groups, FILL_BLOCK),
                    &args,
                )?
            };
        }
        for edge in [plan.head, plan.tail].into_iter().flatten() {
            let scratch = self.scratch(&plan.pattern.to_le_bytes()[..edge.bytes])?;
            let source = scratch.unwrap_or(0);
            // SAFETY: the caller's promise for the destination; the source is the backend's
            // buffer, freed when the copy's operation retires.
            unsafe {
                self.enqueue_copy(
                    &mut lock(&state),
                    CopyAgents::FromAddresses,
                    edge.dst,
                    source,
                    edge.bytes,
                    scratch,
                )?
            };
        }
        Ok(())
    }

    /// Reads the code object (its size from its ELF header) into an executable for the
    /// device's agent.
    ///
    /// # Safety
    /// The trait's: `image` is a complete AMDGPU code object.
    unsafe fn module_load(&self, device: DeviceId, image: *const c_void) -> Result<HsaModule> {
        if image.is_null() {
            return Err(Error::NullPointer {
                what: "module image",
            });
        }
        let state = self.device(device)?;
        // SAFETY: the caller's promise: a complete image, so at least an ELF header.
        let header = unsafe { &*image.cast::<[u8; ELF_HEADER_BYTES]>() };
        let size = elf_image_size(header)?;
        // SAFETY: the caller's promise: the image is complete, `size` bytes by its header.
        let bytes = unsafe { core::slice::from_raw_parts(image.cast::<u8>(), size) };
        let loaded = self.load_executable(state.agent, bytes)?;
        let mut tables = lock(&self.tables);
        let serial = tables.serial();
        tables.modules.insert(serial, loaded);
        Ok(HsaModule { serial, device })
    }

    /// Destroys the module's executable and reader.
    fn module_unload(&self, module: HsaModule) -> Result<()> {
        self.device(module.device)?;
        let loaded = lock(&self.tables)
            .modules
            .remove(&module.serial)
            .ok_or(stale(
                "module handle (unloaded or foreign)",
                sys::HSA_STATUS_ERROR_INVALID_EXECUTABLE,
            ))?;
        self.destroy_executable(loaded);
        Ok(())
    }

    /// The kernel's `NAME.kd` symbol in the module's executable.
    fn module_kernel(&self, module: HsaModule, name: &CStr) -> Result<HsaKernel> {
        let state = self.device(module.device)?;
        let loaded = lock(&self.tables)
            .modules
            .get(&module.serial)
            .copied()
            .ok_or(stale(
                "module handle (unloaded or foreign)",
                sys::HSA_STATUS_ERROR_INVALID_EXECUTABLE,
            ))?;
        Ok(HsaKernel {
            object: self.kernel_object(loaded, state.agent, name)?,
            device: module.device,
            library_index: None,
        })
    }

    /// The library executable is loaded on the device at the first call (the first code
    /// object its agent accepts) and kept.
    fn kernel(&self, device: DeviceId, name: &str) -> Result<HsaKernel> {
        let library_index = find_for(BACKEND, name)?;
        self.library_kernel(device, library_index)
    }

    /// The kernel symbol's group segment size (`HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE`,
    /// read when the kernel was looked up).
    fn kernel_static_workgroup_bytes(&self, kernel: HsaKernel) -> Result<u32> {
        self.device(kernel.device)?;
        Ok(kernel.object.group_size)
    }

    /// Nothing to opt in on AMD GPUs: every kernel may use the device's whole workgroup
    /// memory; more than that (with the kernel's static part) is [`Error::LimitExceeded`].
    fn kernel_allow_workgroup_bytes(&self, kernel: HsaKernel, bytes: u32) -> Result<()> {
        let limit = self
            .device(kernel.device)?
            .info
            .workgroup
            .max_per_block_opt_in;
        let required = u64::from(bytes) + u64::from(kernel.object.group_size);
        if required > u64::from(limit) {
            return Err(Error::LimitExceeded {
                what: "dynamic workgroup memory per workgroup",
                required: required as usize,
                limit: limit as usize,
                detail: vec![format!("kernel {}", kernel.name())],
            });
        }
        Ok(())
    }

    /// An AQL kernel-dispatch packet with the arguments in a kernarg-pool buffer. A library
    /// kernel's arguments are checked against its parameters
    /// ([`Error::KernelArgumentMismatch`]); a module's kernel takes them as given, laid out by
    /// their kinds, and they must fit its kernarg segment.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn launch(
        &self,
        stream: HsaStream,
        kernel: HsaKernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        match kernel.library_index {
            Some(index) => LIBRARY[index].check_arguments(args)?,
            None => {
                let kinds: Vec<ParamKind> = args.iter().map(ParamKind::of).collect();
                let size = gpu_hip_ffi::code_objects::kernarg_layout(&kinds).size;
                if size > kernel.object.kernarg_size as usize {
                    return Err(Error::KernelArgumentMismatch {
                        kernel: MODULE_KERNEL,
                        expected: "arguments that fit the kernel's kernarg segment",
                    });
                }
            }
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.enqueue_dispatch(stream, kernel, dims, args) }
    }

    /// A library kernel's parameter array is read by its parameter table; a module's kernel
    /// has no table here (HSA keeps parameter types in the code object's metadata), so it is
    /// [`Error::Unsupported`]: launch it with [`Backend::launch`].
    ///
    /// # Safety
    /// The trait's.
    unsafe fn launch_packed(
        &self,
        stream: HsaStream,
        kernel: HsaKernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        let Some(index) = kernel.library_index else {
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: "launching a module's kernel with a parameter array (use launch)",
            });
        };
        // SAFETY: the caller's promise: one pointer per parameter, to a value of its type.
        let args = unsafe { args_from_parameter_array(LIBRARY[index].params, params)? };
        // SAFETY: the caller's promise, passed on.
        unsafe { self.enqueue_dispatch(stream, kernel, dims, &args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_thread_safe<T: Send + Sync>() {}

    /// A backend over the real library with no device opened (what a machine without an AMD
    /// GPU would have if opening did not refuse); `None` where the library is absent.
    fn deviceless() -> Option<HsaBackend> {
        Hsa::global().ok().map(|hsa| HsaBackend {
            hsa,
            devices: Vec::new(),
            host: None,
            tables: Mutex::new(Tables::default()),
            _runtime: None,
        })
    }

    #[test]
    fn every_method_of_a_backend_without_devices_is_a_typed_error() {
        let Some(backend) = deviceless() else {
            eprintln!("skipped: the HSA library is not installed");
            return;
        };
        let d0 = DeviceId(0);
        let unknown = Error::UnknownDevice {
            device: d0,
            device_count: 0,
        };
        let stream = HsaStream {
            serial: 1,
            device: d0,
        };
        let event = HsaEvent {
            serial: 2,
            device: d0,
        };
        let object = KernelObject {
            kernarg_size: 24,
            ..KernelObject::default()
        };
        let kernel = HsaKernel {
            object,
            device: d0,
            library_index: Some(0),
        };
        let module_kernel = HsaKernel {
            library_index: None,
            ..kernel
        };
        let module = HsaModule {
            serial: 3,
            device: d0,
        };
        let range = ByteRange::new(0x1000, 64).unwrap();
        let mut one_slot = [0usize; 1];
        assert_eq!(backend.name(), "hsa");
        assert_eq!(backend.device_count(), 0);
        assert_eq!(backend.device_info(d0), Err(unknown.clone()));
        assert_eq!(backend.set_current_device(Some(d0)), Err(unknown.clone()));
        for kind in [
            MemoryKind::Device,
            MemoryKind::Managed,
            MemoryKind::HostPinned,
            MemoryKind::HostRegistered,
        ] {
            assert_eq!(backend.allocate(d0, kind, 64), Err(unknown.clone()));
            assert_eq!(
                backend.allocate_on_stream(stream, kind, 64),
                Err(unknown.clone())
            );
            assert_eq!(backend.free(d0, kind, 0x1000, None), Err(unknown.clone()));
        }
        assert_eq!(
            backend.host_register(range, &mut one_slot),
            Err(unknown.clone())
        );
        assert_eq!(backend.host_register(range, &mut []), Err(unknown.clone()));
        assert_eq!(
            backend.host_unregister(0x1000),
            Err(Error::NotLocked { ptr: 0x1000 })
        );
        assert_eq!(
            backend.host_pinned_extent(0x1000, &mut one_slot),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.host_pinned_extent(0x1000, &mut []),
            Err(unknown.clone())
        );
        assert_eq!(backend.stream_create(d0), Err(unknown.clone()));
        // SAFETY: refused before the raw handle is used.
        assert_eq!(
            unsafe { backend.adopt_stream(d0, 0x1000) },
            Err(unknown.clone())
        );
        assert_eq!(backend.stream_destroy(stream), Err(unknown.clone()));
        assert_eq!(backend.stream_synchronize(stream), Err(unknown.clone()));
        assert_eq!(backend.event_create(d0), Err(unknown.clone()));
        assert_eq!(backend.event_destroy(event), Err(unknown.clone()));
        assert_eq!(backend.event_record(event, stream), Err(unknown.clone()));
        assert_eq!(
            backend.event_record(
                HsaEvent {
                    device: DeviceId(1),
                    ..event
                },
                stream
            ),
            Err(Error::WrongDevice {
                expected: d0,
                found: DeviceId(1)
            })
        );
        assert_eq!(
            backend.stream_wait_event(stream, event),
            Err(unknown.clone())
        );
        assert_eq!(backend.event_query(event), Err(unknown.clone()));
        assert_eq!(backend.event_synchronize(event), Err(unknown.clone()));
        assert_eq!(backend.device_synchronize(d0), Err(unknown.clone()));
        assert_eq!(backend.peer_access_possible(d0, d0), Err(unknown.clone()));
        assert_eq!(
            backend.peer_access_possible(d0, DeviceId(1)),
            Err(unknown.clone())
        );
        assert_eq!(backend.enable_peer_access(d0, d0), Err(unknown.clone()));
        let args = [KernelArg::Ptr(0x1000), KernelArg::U32(1), KernelArg::U64(1)];
        // SAFETY: every call is refused before any address is used.
        unsafe {
            assert_eq!(
                backend.copy(stream, 0x1000, 0x2000, 8),
                Err(unknown.clone())
            );
            assert_eq!(
                backend.copy_peer(stream, 0x1000, d0, 0x2000, d0, 8),
                Err(unknown.clone())
            );
            assert_eq!(backend.fill(stream, 0x1000, 0, 8), Err(unknown.clone()));
            assert_eq!(
                backend.fill_elements(stream, 0x1000, FillValue::U16(7), 4),
                Err(unknown.clone())
            );
            assert_eq!(
                backend.launch(stream, kernel, LaunchDims::linear(1, 1), &[]),
                Err(Error::KernelArgumentMismatch {
                    kernel: "fill_u32",
                    expected: "(Ptr dst, U32 value, U64 count)",
                })
            );
            assert_eq!(
                backend.launch(stream, kernel, LaunchDims::linear(1, 1), &args),
                Err(unknown.clone())
            );
            assert_eq!(
                backend.launch(
                    stream,
                    HsaKernel {
                        device: DeviceId(1),
                        ..kernel
                    },
                    LaunchDims::linear(1, 1),
                    &args
                ),
                Err(Error::WrongDevice {
                    expected: d0,
                    found: DeviceId(1)
                })
            );
            let too_many = [KernelArg::U64(1); 4];
            assert_eq!(
                backend.launch(stream, module_kernel, LaunchDims::linear(1, 1), &too_many),
                Err(Error::KernelArgumentMismatch {
                    kernel: MODULE_KERNEL,
                    expected: "arguments that fit the kernel's kernarg segment",
                })
            );
            assert_eq!(
                backend.launch(stream, module_kernel, LaunchDims::linear(1, 1), &args),
                Err(unknown.clone())
            );
            let mut values = [0x1000u64, 1, 1];
            let mut params: Vec<*mut c_void> =
                values.iter_mut().map(|v| (v as *mut u64).cast()).collect();
            assert_eq!(
                backend.launch_packed(
                    stream,
                    kernel,
                    LaunchDims::linear(1, 1),
                    params.as_mut_ptr()
                ),
                Err(unknown.clone())
            );
            assert_eq!(
                backend.launch_packed(
                    stream,
                    module_kernel,
                    LaunchDims::linear(1, 1),
                    params.as_mut_ptr()
                ),
                Err(Error::Unsupported {
                    backend: "hsa",
                    what: "launching a module's kernel with a parameter array (use launch)",
                })
            );
            let image = gpu_hip_ffi::code_objects::CODE_OBJECTS[0];
            assert_eq!(
                backend.module_load(d0, image.as_ptr().cast()),
                Err(unknown.clone())
            );
            assert_eq!(
                backend.module_load(d0, ptr::null()),
                Err(Error::NullPointer {
                    what: "module image"
                })
            );
        }
        assert_eq!(backend.module_unload(module), Err(unknown.clone()));
        assert_eq!(backend.module_kernel(module, c"k"), Err(unknown.clone()));
        assert_eq!(backend.kernel(d0, "fill_u32"), Err(unknown.clone()));
        assert_eq!(
            backend.kernel(d0, "no_such_kernel"),
            Err(Error::UnknownKernel {
                backend: "hsa",
                name: "no_such_kernel".into()
            })
        );
        assert_eq!(
            backend.kernel_allow_workgroup_bytes(kernel, 1 << 20),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.kernel_static_workgroup_bytes(kernel),
            Err(unknown.clone())
        );
        // The thread's device is the backend's own record: no device can be chosen, none is.
        assert!(!backend.is_current(SavedDevice(Some(d0)), d0));
        assert_eq!(backend.set_current_device(None), Ok(()));
        assert_eq!(backend.current_device(), Ok(None));
        assert_eq!(backend.save_current(), Ok(SavedDevice(None)));
        assert_eq!(backend.restore_current(SavedDevice(None)), Ok(()));
        // Nothing was created along the way.
        let tables = lock(&backend.tables);
        assert!(tables.streams.is_empty() && tables.events.is_empty());
        assert!(tables.modules.is_empty() && tables.locks.is_empty());
        assert!(tables.free_signals.is_empty() && tables.records.is_empty());
        assert_eq!(tables.next_serial, 0);
    }

    /// A backend over the real library with one device per entry of `peers`, each reached by
    /// the agents of the devices listed (agent handles are device index + 1); nothing opened.
    fn with_peers(peers: &[&[u64]]) -> Option<HsaBackend> {
        let mut backend = deviceless()?;
        backend.devices = (1..=peers.len() as u64)
            .zip(peers)
            .map(|(handle, reaching)| DeviceState {
                agent: sys::hsa_agent_t { handle },
                memory_pool: sys::hsa_amd_memory_pool_t {
                    handle: handle * 10,
                },
                peers: reaching
                    .iter()
                    .map(|&handle| sys::hsa_agent_t { handle })
                    .collect(),
                queue_slots: 1,
                info: describe_device("gfx90a".into(), 1 << 30, 65536),
                library: Mutex::new(None),
            })
            .collect();
        Some(backend)
    }

    #[test]
    fn peer_access_follows_which_gpus_reach_each_pool_and_enabling_only_checks_it() {
        // Devices 0 and 1 reach each other's pools; device 2's pool is reached by device 0,
        // and device 2 reaches no other pool.
        let Some(backend) = with_peers(&[&[2], &[1], &[1]]) else {
            return;
        };
        let (d0, d1, d2) = (DeviceId(0), DeviceId(1), DeviceId(2));
        assert_eq!(backend.peer_access_possible(d0, d1), Ok(true));
        assert_eq!(backend.peer_access_possible(d1, d0), Ok(true));
        assert_eq!(backend.peer_access_possible(d0, d2), Ok(true));
        assert_eq!(backend.peer_access_possible(d2, d0), Ok(false));
        assert_eq!(backend.peer_access_possible(d0, d0), Ok(false));
        for _ in 0..2 {
            assert_eq!(backend.enable_peer_access(d0, d1), Ok(()));
        }
        assert_eq!(backend.enable_peer_access(d0, d2), Ok(()));
        assert_eq!(backend.enable_peer_access(d2, d0), Err(no_peer_access()));
        assert_eq!(backend.enable_peer_access(d1, d1), Err(no_peer_access()));
        let unknown = Error::UnknownDevice {
            device: DeviceId(3),
            device_count: 3,
        };
        assert_eq!(
            backend.peer_access_possible(d0, DeviceId(3)),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.enable_peer_access(DeviceId(3), d0),
            Err(unknown.clone())
        );
        let stream = HsaStream {
            serial: 1,
            device: d0,
        };
        let no_stream = Err(stale(
            "stream handle (destroyed or foreign)",
            sys::HSA_STATUS_ERROR_INVALID_QUEUE,
        ));
        // SAFETY: every call is refused before any address is used: an unknown device, a pair
        // that does not reach each other both ways, else the unknown stream.
        unsafe {
            assert_eq!(
                backend.copy_peer(stream, 0x1000, DeviceId(3), 0x2000, d0, 8),
                Err(unknown.clone())
            );
            assert_eq!(
                backend.copy_peer(stream, 0x1000, d1, 0x2000, DeviceId(3), 8),
                Err(unknown)
            );
            assert_eq!(
                backend.copy_peer(stream, 0x1000, d2, 0x2000, d0, 8),
                Err(no_peer_access())
            );
            assert_eq!(
                backend.copy_peer(stream, 0x1000, d0, 0x2000, d2, 8),
                Err(no_peer_access())
            );
            assert_eq!(
                backend.copy_peer(stream, 0x1000, d1, 0x2000, d0, 8),
                no_stream
            );
            assert_eq!(
                backend.copy_peer(stream, 0x1000, d2, 0x2000, d2, 8),
                no_stream
            );
        }
    }

    #[test]
    fn the_current_device_is_per_thread() {
        let Some(backend) = deviceless() else { return };
        backend
            .restore_current(SavedDevice(Some(DeviceId(3))))
            .unwrap();
        assert_eq!(backend.current_device(), Ok(Some(DeviceId(3))));
        // Device 3 does not exist here, so it is never "current" for the guard.
        assert!(!backend.is_current(SavedDevice(Some(DeviceId(3))), DeviceId(3)));
        std::thread::scope(|scope| {
            scope.spawn(|| assert_eq!(backend.current_device(), Ok(None)));
        });
        backend.set_current_device(None).unwrap();
        assert_eq!(backend.current_device(), Ok(None));
    }

    #[test]
    fn handles_and_backend_are_send_and_sync() {
        assert_thread_safe::<HsaStream>();
        assert_thread_safe::<HsaEvent>();
        assert_thread_safe::<HsaKernel>();
        assert_thread_safe::<HsaModule>();
        assert_thread_safe::<HsaBackend>();
        assert_thread_safe::<SavedDevice>();
    }

    #[test]
    fn out_of_resources_is_none_and_other_codes_are_hsa_errors() {
        let address = ptr::without_provenance_mut(0x1000);
        assert_eq!(
            allocation_outcome(sys::HSA_STATUS_SUCCESS, address),
            Ok(Some(0x1000))
        );
        assert_eq!(
            allocation_outcome(sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES, ptr::null_mut()),
            Ok(None)
        );
        assert_eq!(
            allocation_outcome(sys::HSA_STATUS_ERROR_INVALID_ALLOCATION, ptr::null_mut()),
            Err(Error::Driver(driver_error(
                "hsa_amd_memory_pool_allocate",
                sys::HSA_STATUS_ERROR_INVALID_ALLOCATION
            )))
        );
    }

    #[test]
    fn a_device_offers_device_and_pinned_memory_its_whole_lds_and_no_managed_memory() {
        let info = describe_device("gfx90a".into(), 64 << 30, 65536);
        assert!(info.allocator.device.available && !info.allocator.device.stream_ordered);
        assert_eq!(info.allocator.device.max_size, 64 << 30);
        assert!(!info.allocator.managed.available);
        assert!(info.allocator.host_pinned.available && info.allocator.host_register);
        assert_eq!(
            info.workgroup,
            WorkgroupLimits {
                default_per_block: 65536,
                max_per_block_opt_in: 65536,
                per_multiprocessor: 65536,
                reserved_per_block: 0,
            }
        );
        assert!(info.unified_addressing && !info.pageable_memory_access);
    }
}
