//! The host backend: a complete [`Backend`] with no GPU, where device memory is host memory,
//! streams are worker threads, kernels are registered Rust functions, and faults can be injected.
//!
//! It is the embedded default: the runtime, the conformance suite and the examples run on it.
//! It is strict where a driver is strict, and a little stricter where that catches runtime
//! bugs. Every misuse is a typed [`Error::Driver`] named `HOST_...` with CUDA's number for the
//! same situation (see [`HostErrorCode`]), except an unknown kernel name and library kernel
//! arguments that do not match its parameters, which are [`Error::UnknownKernel`] and
//! [`Error::KernelArgumentMismatch`] as on the CUDA backend.
//!
//! # Rules
//! - **Current device.** Each OS thread has a current device per backend instance, as CUDA
//!   keeps a current context. Every call that acts on a device, directly or through a stream,
//!   event or kernel of it, fails with `HOST_WRONG_CURRENT_DEVICE` unless that device is
//!   current. As in CUDA, `stream_wait_event` checks the stream's device only (the event may be
//!   another device's), and `event_query`, `event_synchronize` and the `host_*` calls need no
//!   current device. There are no foreign contexts, so [`Backend::SavedCurrent`] is
//!   `Option<DeviceId>` and saving and restoring are getting and setting the current device.
//! - **Memory.** Allocations are zeroed host memory aligned to
//!   [`HOST_ALLOCATION_ALIGNMENT`], counted against the device's capacity (`Ok(None)` beyond
//!   it). Freeing an address that is not a live allocation of that device and kind is
//!   `HOST_INVALID_VALUE`; freeing after a stream of another device is `HOST_INVALID_HANDLE`. A freed block goes back to the host only once the queued work that
//!   touches it has run (`free` with `after` also waits for the stream's earlier work), so a
//!   free never pulls memory from under a copy or kernel.
//! - **Peer access.** Two devices whose configs both have [`HostDeviceConfig::peer_link`] can
//!   be given access to each other's memory ([`Backend::enable_peer_access`], one direction a
//!   call). As on CUDA (measured on two H100s), a plain `copy` on a stream of device S that
//!   touches device memory another device allocated in a stream's order is
//!   `HOST_INVALID_VALUE` unless S has access to that device; `copy_peer` names each side's
//!   device and is accepted either way (a side that is an allocation must be of the device
//!   named for it).
//! - **Copies and fills** accept any address, as a unified-addressing driver does: a null
//!   address is [`Error::NullPointer`], a range past the end of the address space
//!   [`Error::AddressOverflow`], and a range that touches an allocation must lie inside it
//!   (else `HOST_INVALID_VALUE`), all before anything is queued; any other address is taken as
//!   the caller's host memory, which must stay valid until the queued work has run (the one
//!   obligation of their `# Safety` sections that the backend cannot check).
//! - **Streams** run their work in order on one worker thread each. Destroying a stream lets
//!   its queued work finish. Work reads and writes device memory with relaxed atomic bytes
//!   (`bytes.rs`): work a program left unordered, which a GPU runs with an unspecified
//!   result, gives an unspecified value here too and is never a data race (CI runs those
//!   accesses under Miri).
//! - **Failures**, as a GPU driver's: a call refused for its arguments (a bad launch shape,
//!   an address out of bounds, an injected fault) changes nothing and affects nothing else.
//!   Work that fails while it runs with an error that does not lose the device fails alone:
//!   the stream's later items run, and the first synchronisation (of the stream, or of an
//!   event recorded after it) reports the failure, once. A fault (a kernel's illegal address or panic:
//!   `HOST_ILLEGAL_ADDRESS`, `HOST_LAUNCH_FAILED`, the codes of
//!   [`gpu_core::error::DriverError::loses_device`]) also loses the device, as a kernel fault's
//!   sticky error does on CUDA: the stream's later items are skipped, and every later call that works on the device
//!   (creating, enqueuing, synchronising, querying, on any stream or event of it) reports that
//!   failure with its code, until [`Backend::reset_device`], which tears down the device's
//!   streams, events, allocations, kernels and peer access and makes it usable again.
//!   Destroys and frees still work on a lost device. Other devices go on: a stream that waits
//!   on a lost device's record goes past it.
//! - **Events** belong to the device current at creation; recording on another device's
//!   stream is `HOST_INVALID_HANDLE`. An event never recorded is complete; a wait captures the
//!   event's last record at the time of the call.
//! - **Host registration** is process-wide for the backend: overlapping a registered range or
//!   a host-pinned allocation is `HOST_MEMORY_ALREADY_REGISTERED`, unregistering needs the
//!   exact start (`HOST_INVALID_VALUE` inside a range, `HOST_MEMORY_NOT_REGISTERED` elsewhere);
//!   host-pinned allocations count as pinned for [`Backend::host_pinned_extent`]. Every
//!   device's address for host memory is the host address.
//! - **Kernels** are registered by name ([`HostBackend::register_kernel`]; the standard
//!   library is there from the start) and run one workgroup at a time, each with zeroed dynamic
//!   workgroup memory. A launch of a standard library kernel whose arguments differ in number
//!   or kinds from the library's table is [`Error::KernelArgumentMismatch`] at once, as on the
//!   GPU backends; other kernels check their arguments when they run. A launch's dynamic workgroup memory may not exceed the device's default
//!   limit, or once `kernel_allow_workgroup_bytes` has set the kernel's own limit (at most the
//!   device's opt-in maximum), that limit, as CUDA's `MAX_DYNAMIC_SHARED_SIZE_BYTES` works.
//!   A kernel reaches only memory its pointer arguments lie in ([`KernelContext::view`]): an
//!   allocation (held until the kernel has run) or a registered host range (which the caller
//!   must keep valid, and registered, until then).
//! - **Handles** are never reused, by this backend or any other in the process, so a stale or
//!   foreign handle is always `HOST_INVALID_HANDLE`.
//!
//! # Test support
//! [`HostBackend::fail_nth`] and [`HostBackend::fail_nth_call`] make a chosen call fail with
//! `HOST_INJECTED_FAULT` and no effect, [`HostBackend::calls`] counts calls,
//! [`HostBackend::stats`] counts live objects, and [`HostBackend::work_log`] gives each work
//! item's start and finish in one backend-wide sequence. Dropping the backend lets every
//! stream finish its work, joins every worker thread, and frees what is left.
//!
//! # Examples
//!
//! ```
//! use gpu_rt::prelude::*;
//! use gpu_rt::host::{CallKind, HostErrorCode};
//!
//! let backend = HostBackend::new(HostConfig::with_devices(2));
//! backend.fail_nth(CallKind::StreamCreate, 1); // the first stream the runtime asks for
//! let rt = Runtime::new(backend)?;
//! let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
//! let refused = rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![]).unwrap_err();
//! assert_eq!(HostErrorCode::of(&refused), Some(HostErrorCode::InjectedFault));
//! rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?; // nothing was left broken
//! assert_eq!(rt.backend().calls().of(CallKind::StreamCreate), 2);
//! # Ok::<(), Error>(())
//! ```

mod bytes;
mod codes;
mod config;
mod current;
mod dispatch;
mod faults;
mod footprints;
mod graphs;
mod kernels;
mod library;
mod memory;
mod streams;
#[cfg(test)]
mod tests;

use alloc::boxed::Box;
use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use hashbrown::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use core::ffi::{CStr, c_void};
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, DeviceInfo, FillValue, KernelArg, LaunchDims, check_device};
use gpu_core::error::{ByteRange, Error, Result};
use gpu_core::id::DeviceId;

use current::CurrentDevice;
use faults::CallLedger;
use graphs::GraphSlot;
use kernels::{KernelRegistry, Launch};
use memory::{Memory, Region};
use streams::{
    DeviceHealth, EventSlot, Payload, RecordPoint, StreamShared, WorkItem, WorkLog, run_worker,
};

pub use codes::HostErrorCode;
pub use config::{HostConfig, HostDeviceConfig, HostStats};
pub use faults::{CallCounts, CallKind};
pub use footprints::AnnouncedFootprint;
pub use kernels::{DeviceScalar, DeviceView, HostKernel, KernelContext, KernelFn};
pub use library::standard_kernels;
pub use memory::{HOST_ALLOCATION_ALIGNMENT, HOST_VM_GRANULARITY};
pub use streams::{HostEvent, HostGraph, HostStream, WorkOp, WorkOutcome, WorkRecord};

pub use gpu_core::backend::MAX_THREADS_PER_WORKGROUP;

/// Locks `mutex`, ignoring poisoning: every critical section leaves its data consistent
/// before anything that can panic runs.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A live stream and its worker.
struct StreamEntry {
    shared: Arc<StreamShared>,
    worker: JoinHandle<()>,
}

/// Live streams, and destroyed ones whose worker may still be draining.
#[derive(Default)]
struct StreamTable {
    live: HashMap<HostStream, StreamEntry>,
    draining: Vec<StreamEntry>,
}

impl StreamTable {
    /// Joins the workers of destroyed streams that have finished.
    fn reap(&mut self) {
        let (done, running) = core::mem::take(&mut self.draining)
            .into_iter()
            .partition(|e| e.worker.is_finished());
        self.draining = running;
        join_all(done);
    }
}

fn join_all(entries: Vec<StreamEntry>) {
    for entry in entries {
        // A worker only panics if a lock's data was left inconsistent, which no section does.
        let _ = entry.worker.join();
    }
}

/// A module image on the host backend, which cannot load any ([`Backend::module_load`] is
/// [`Error::Unsupported`] there): a type with no values.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::HostModule;
///
/// /// No `HostModule` exists: code that receives one is unreachable.
/// fn never(module: HostModule) -> u32 {
///     match module {}
/// }
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// let ptx = c".version 7.0\n.target sm_70\n.address_size 64\n"; // a complete PTX module
/// backend.set_current_device(Some(DeviceId(0)))?;
/// // SAFETY: `ptx` is a complete image, readable during the call.
/// let loaded = unsafe { backend.module_load(DeviceId(0), ptx.as_ptr().cast()) };
/// assert!(matches!(loaded.map(never), Err(Error::Unsupported { backend: "host", .. })));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostModule {}

/// The host backend. See the [module documentation](self).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// // Two simulated devices in host memory, with the standard kernels: no GPU needed.
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
/// let buffer = rt.alloc(DeviceId(1), MemoryKind::Device, 1024)?;
/// let filled = rt.fill(DeviceId(1), buffer.all(), 0x33, &mut vec![])?;
/// let mut out = vec![0u8; 1024];
/// rt.download(DeviceId(1), &mut out, buffer.all(), &mut vec![filled])?;
/// assert!(out.iter().all(|&byte| byte == 0x33));
/// assert_eq!(rt.backend().device_memory_in_use(DeviceId(0))?, 0); // device 1's only
/// # Ok::<(), Error>(())
/// ```
pub struct HostBackend {
    devices: Vec<HostDeviceConfig>,
    current: CurrentDevice,
    calls: CallLedger,
    memory: Mutex<Memory>,
    streams: Mutex<StreamTable>,
    events: Mutex<HashMap<HostEvent, EventSlot>>,
    kernels: Mutex<KernelRegistry>,
    graphs: Mutex<HashMap<HostGraph, GraphSlot>>,
    log: Arc<WorkLog>,
    /// `peer_access[device * count + peer]`: whether `device` was given access to `peer`.
    peer_access: Vec<AtomicBool>,
    /// Per device: lost after a failure of work on it, until reset.
    health: Vec<Arc<DeviceHealth>>,
    /// Unfinished work items a stream holds before a launch call blocks (0: never).
    launch_queue_depth: usize,
    /// The launch footprints asked for and announced.
    footprints: footprints::Footprints,
}

impl HostBackend {
    /// A backend with `config`'s devices and the standard kernel library registered.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(2));
    /// assert_eq!((backend.name(), backend.device_count()), ("host", 2));
    /// assert_eq!(backend.device_info(DeviceId(0))?.name, "host device 0");
    /// assert_eq!(backend.stats().allocations, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn new(config: HostConfig) -> Self {
        let mut kernels = KernelRegistry::default();
        for (name, function) in standard_kernels() {
            kernels.register(name, function, 0);
        }
        let device_count = config.devices.len();
        Self {
            memory: Mutex::new(Memory::new(
                config.devices.iter().map(|d| d.memory_capacity).collect(),
            )),
            devices: config.devices,
            current: CurrentDevice::new(),
            calls: CallLedger::new(),
            streams: Mutex::new(StreamTable::default()),
            events: Mutex::new(HashMap::new()),
            kernels: Mutex::new(kernels),
            graphs: Mutex::new(HashMap::new()),
            log: Arc::new(WorkLog::new(config.work_log_capacity)),
            peer_access: (0..device_count * device_count)
                .map(|_| AtomicBool::new(false))
                .collect(),
            health: (0..device_count).map(|_| Arc::default()).collect(),
            launch_queue_depth: config.launch_queue_depth,
            footprints: footprints::Footprints::default(),
        }
    }

    /// Registers `function` as the kernel `name` (replacing one of that name for later loads;
    /// kernels already loaded keep their function, as a loaded module would). A kernel
    /// registered under a name of the standard library
    /// ([`gpu_core::backend::library::LIBRARY`]) must take that kernel's arguments: launches of it
    /// are checked against the library's table, here and in the runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// // `square(data, count)`: data[i] = data[i]^2, one workgroup for all.
    /// backend.register_kernel("square", |ctx, _| {
    ///     let data = ctx.view::<u32>(ctx.arg_ptr(0)?, ctx.arg_u64(1)? as usize)?;
    ///     (0..data.len()).try_for_each(|i| data.set(i, data.get(i)? * data.get(i)?))
    /// });
    /// let rt = Runtime::new(backend)?;
    /// let data = rt.alloc(DeviceId(0), MemoryKind::Device, 8)?;
    /// let input = [3u32, 4].map(u32::to_ne_bytes).concat();
    /// let up = rt.upload(DeviceId(0), data.all(), &input, &mut vec![])?;
    /// let (args, dims) = ([Arg::Span(data.all()), Arg::U64(2)], LaunchDims::linear(1, 1));
    /// // SAFETY: the kernel touches the two words of its span.
    /// let done = unsafe { rt.launch(DeviceId(0), "square", dims, &args, &mut vec![up])? };
    /// let mut out = [0u8; 8];
    /// rt.download(DeviceId(0), &mut out, data.all(), &mut vec![done])?;
    /// assert_eq!(out, [9u32, 16].map(u32::to_ne_bytes).concat()[..]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn register_kernel(
        &self,
        name: &str,
        function: impl Fn(&KernelContext<'_>, &mut [u8]) -> Result<()> + Send + Sync + 'static,
    ) {
        self.register_kernel_with_static_workgroup_bytes(name, 0, function);
    }

    /// [`Self::register_kernel`] for a kernel that declares `static_bytes` of workgroup memory
    /// (as a GPU kernel's fixed-size shared arrays): they count against the device's limits
    /// with the dynamic bytes, as a driver counts them ([`Backend::kernel_static_workgroup_bytes`]
    /// reports them; the opt-in and launches refuse what would pass the limits with them).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HostErrorCode;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// // Declares 200 KiB of workgroup memory, as a GPU kernel's fixed-size shared arrays.
    /// backend.register_kernel_with_static_workgroup_bytes("big_shared", 200 << 10, |_, _| Ok(()));
    /// backend.set_current_device(Some(DeviceId(0)))?;
    /// let kernel = backend.kernel(DeviceId(0), "big_shared")?;
    /// assert_eq!(backend.kernel_static_workgroup_bytes(kernel)?, 200 << 10);
    /// // With them, 32 KiB of dynamic memory passes the device's 227 KiB: refused.
    /// let refused = backend.kernel_allow_workgroup_bytes(kernel, 32 << 10).unwrap_err();
    /// assert_eq!(HostErrorCode::of(&refused), Some(HostErrorCode::InvalidValue));
    /// backend.kernel_allow_workgroup_bytes(kernel, 16 << 10)?; // 216 KiB in all
    /// # Ok::<(), Error>(())
    /// ```
    pub fn register_kernel_with_static_workgroup_bytes(
        &self,
        name: &str,
        static_bytes: u32,
        function: impl Fn(&KernelContext<'_>, &mut [u8]) -> Result<()> + Send + Sync + 'static,
    ) {
        lock(&self.kernels).register(name, Arc::new(function), static_bytes);
    }

    /// Makes the `n`th call of `kind` from now fail with `HOST_INJECTED_FAULT`, changing
    /// nothing (1 = the next call; 0 also means the next).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::{CallKind, HostErrorCode};
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// rt.backend().fail_nth(CallKind::Allocate, 2); // the second allocation from now
    /// let first = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let failed = rt.alloc(DeviceId(0), MemoryKind::HostPinned, 64).err().unwrap();
    /// assert_eq!(HostErrorCode::of(&failed), Some(HostErrorCode::InjectedFault));
    /// assert!(rt.alloc(DeviceId(0), MemoryKind::HostPinned, 64).is_ok()); // it changed nothing
    /// # drop(first);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fail_nth(&self, kind: CallKind, n: u64) {
        self.calls.fail_nth(kind, n);
    }

    /// Makes the `n`th driver call of any kind from now fail with `HOST_INJECTED_FAULT`,
    /// changing nothing (1 = the next call; 0 also means the next). Only calls counted in
    /// [`CallCounts::total`] are counted (see [`CallKind::in_total`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HostErrorCode;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// rt.backend().fail_nth_call(1); // whatever the driver is asked next
    /// let refused = rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![]).unwrap_err();
    /// assert_eq!(HostErrorCode::of(&refused), Some(HostErrorCode::InjectedFault));
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?; // and the next works
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fail_nth_call(&self, n: u64) {
        self.calls.fail_nth_call(n);
    }

    /// Disarms every injected fault that has not fired; returns how many there were.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::CallKind;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.fail_nth(CallKind::Allocate, 1);
    /// backend.fail_nth_call(5);
    /// assert_eq!(backend.clear_faults(), 2); // both disarmed before they fired
    /// backend.set_current_device(Some(DeviceId(0)))?;
    /// assert!(backend.allocate(DeviceId(0), MemoryKind::HostPinned, 64)?.is_some());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn clear_faults(&self) -> usize {
        self.calls.clear()
    }

    /// How many driver calls have been made, in all and per kind.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::CallKind;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// for _ in 0..3 {
    ///     rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?;
    /// }
    /// let calls = rt.backend().calls();
    /// assert_eq!((calls.of(CallKind::Fill), calls.of(CallKind::StreamCreate)), (3, 1));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn calls(&self) -> CallCounts {
        self.calls.counts()
    }

    /// Live objects, for leak checks.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let mut host = vec![0u8; 4096];
    /// let locked = rt.lock_host(&mut host)?;
    /// let stats = rt.backend().stats();
    /// assert_eq!((stats.registered_ranges, stats.registered_bytes), (1, 4096));
    /// drop(locked);
    /// assert_eq!(rt.backend().stats().registered_ranges, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn stats(&self) -> HostStats {
        let (allocations, allocated_bytes, registered_ranges, registered_bytes) = {
            let memory = lock(&self.memory);
            let (allocations, allocated) = memory.allocation_totals();
            let (ranges, registered) = memory.registered_totals();
            (allocations, allocated, ranges, registered)
        };
        let (streams, draining_streams) = {
            let mut table = lock(&self.streams);
            table.reap();
            (table.live.len(), table.draining.len())
        };
        HostStats {
            streams,
            draining_streams,
            events: lock(&self.events).len(),
            graphs: lock(&self.graphs).len(),
            allocations,
            allocated_bytes,
            registered_ranges,
            registered_bytes,
            faults_injected: self.calls.injected(),
        }
    }

    /// Bytes of `device`'s memory not yet returned to the host: live allocations plus freed
    /// ones still held by queued work.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 100)?;
    /// // The allocator took a 2 MiB segment from the "driver" for 100 bytes.
    /// assert_eq!(rt.backend().device_memory_in_use(DeviceId(0))?, 2 << 20);
    /// assert_eq!(rt.backend().device_memory_in_use(DeviceId(1))?, 0);
    /// drop(buffer);
    /// rt.trim()?;
    /// assert_eq!(rt.backend().device_memory_in_use(DeviceId(0))?, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn device_memory_in_use(&self, device: DeviceId) -> Result<usize> {
        check_device(self, device)?;
        Ok(lock(&self.memory).device_usage(device))
    }

    /// The most recent finished work items (up to the configured capacity), in the order they
    /// finished.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::{WorkOp, WorkOutcome};
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?;
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 2, &mut vec![filled])?)?;
    /// let fills: Vec<_> = rt.backend().work_log().into_iter()
    ///     .filter(|record| matches!(record.op, WorkOp::Fill { .. })).collect();
    /// assert_eq!(fills.len(), 2);
    /// assert!(fills[0].finished < fills[1].started); // in order
    /// assert!(fills.iter().all(|record| record.outcome == WorkOutcome::Done));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn work_log(&self) -> Vec<WorkRecord> {
        self.log.records()
    }

    /// Forgets the work log's records (the sequence numbers go on increasing).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?;
    /// let last = rt.backend().work_log().last().map(|record| record.finished).unwrap();
    /// rt.backend().clear_work_log();
    /// assert!(rt.backend().work_log().is_empty());
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 2, &mut vec![])?)?;
    /// assert!(rt.backend().work_log()[0].started > last); // the sequence goes on
    /// # Ok::<(), Error>(())
    /// ```
    pub fn clear_work_log(&self) {
        self.log.clear();
    }

    // ----- shared checks -----

    /// Makes `device` current on the calling thread, after checking it exists.
    fn make_current(&self, device: Option<DeviceId>) -> Result<()> {
        if let Some(device) = device {
            check_device(self, device)?;
        }
        self.current.set(device);
        Ok(())
    }

    fn device_config(&self, device: DeviceId) -> Result<&HostDeviceConfig> {
        check_device(self, device)?;
        Ok(&self.devices[device.index()])
    }

    /// The live stream behind `stream`.
    fn stream(&self, stream: HostStream, call: &'static str) -> Result<Arc<StreamShared>> {
        lock(&self.streams)
            .live
            .get(&stream)
            .map(|e| e.shared.clone())
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))
    }

    /// The live stream behind `stream`, whose device must be current and not lost.
    fn current_stream(&self, stream: HostStream, call: &'static str) -> Result<Arc<StreamShared>> {
        let shared = self.stream(stream, call)?;
        self.usable(shared.device, call)?;
        Ok(shared)
    }

    /// Refuses a call that works on `device` unless the device is current and not lost (a
    /// lost device's calls report the failure that lost it, with its code, as a GPU driver's
    /// sticky error does).
    fn usable(&self, device: DeviceId, call: &'static str) -> Result<()> {
        self.current.require(device, call)?;
        self.not_lost(device, call)
    }

    fn not_lost(&self, device: DeviceId, call: &'static str) -> Result<()> {
        match self.health[device.index()].lost() {
            None => Ok(()),
            Some(cause) => Err(HostErrorCode::of(&cause)
                .unwrap_or(HostErrorCode::LaunchFailed)
                .error(call)),
        }
    }

    /// The failure that lost `device`, if it is lost (a device is lost by the first work
    /// item that fails on it, until [`Backend::reset_device`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HostErrorCode;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(2));
    /// backend.register_kernel("wild_read", |ctx, _| ctx.view::<u32>(0x10, 1).map(drop));
    /// let rt = Runtime::new(backend)?;
    /// // SAFETY: the kernel touches no memory: the backend refuses its one access.
    /// let dims = LaunchDims::linear(1, 1);
    /// let faulted = unsafe { rt.launch(DeviceId(1), "wild_read", dims, &[], &mut vec![])? };
    /// assert!(rt.wait(faulted).is_err());
    /// let cause = rt.backend().device_lost(DeviceId(1)).unwrap();
    /// assert_eq!(HostErrorCode::of(&cause), Some(HostErrorCode::IllegalAddress));
    /// assert_eq!(rt.backend().device_lost(DeviceId(0)), None);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn device_lost(&self, device: DeviceId) -> Option<Error> {
        self.health
            .get(device.index())
            .and_then(|health| health.lost())
    }

    /// The last record of the live event behind `event`, whose device must not be lost.
    fn event_of_usable_device(
        &self,
        event: HostEvent,
        call: &'static str,
    ) -> Result<Option<RecordPoint>> {
        let device = lock(&self.events)
            .get(&event)
            .map(|slot| slot.device)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))?;
        self.not_lost(device, call)?;
        self.last_record(event, call)
    }

    /// The last record of the live event behind `event` (`None`: never recorded).
    fn last_record(&self, event: HostEvent, call: &'static str) -> Result<Option<RecordPoint>> {
        lock(&self.events)
            .get(&event)
            .map(|slot| slot.last.clone())
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))
    }

    /// The allocation a copy or fill touches at `address`, if any, checked to lie inside it
    /// (the caller holds its block for the queued item).
    fn hold_range<'m>(
        memory: &'m Memory,
        address: usize,
        bytes: usize,
        what: &'static str,
        call: &'static str,
    ) -> Result<Option<&'m memory::Allocation>> {
        if address == 0 {
            return Err(Error::NullPointer { what });
        }
        if bytes == 0 {
            return Ok(None);
        }
        let range = ByteRange::new(address, bytes).ok_or_else(|| Error::AddressOverflow {
            ptr: address,
            len: bytes,
        })?;
        memory.holder(range, call)
    }

    fn allocate_checked(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        bytes: usize,
        stream_ordered: bool,
        call: &'static str,
    ) -> Result<Option<usize>> {
        let support = self.device_config(device)?.allocator.support(kind);
        if !support.available || (stream_ordered && !support.stream_ordered) {
            return Err(HostErrorCode::NotSupported.error(call));
        }
        if bytes > support.max_size {
            return Ok(None);
        }
        lock(&self.memory).allocate(device, kind, bytes, stream_ordered)
    }

    /// Whether `device` was given access to `peer`'s memory.
    fn reaches(&self, device: DeviceId, peer: DeviceId) -> bool {
        self.peer_access[device.index() * self.devices.len() + peer.index()].load(Ordering::Acquire)
    }

    /// A copy on `stream` of its device (`copy`, or `copy_from_read_only` where the source is
    /// `read_only`: one that shares a byte with the destination is refused).
    fn enqueue_plain_copy(
        &self,
        stream: HostStream,
        dst: usize,
        src: usize,
        bytes: usize,
        read_only_source: bool,
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::Copy)?;
        if read_only_source
            && let (Some(to), Some(from)) = (ByteRange::new(dst, bytes), ByteRange::new(src, bytes))
            && to.overlaps(&from)
        {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        let shared = self.current_stream(stream, call)?;
        let item =
            self.prepare_plain_copy(shared.device, [dst, src, bytes], read_only_source, call)?;
        shared.enqueue_items([item]);
        Ok(())
    }

    /// A copy on a stream of `device` that is not a peer copy, checked: each side that is an
    /// allocation must be `device`'s or one it reaches through peer access.
    fn prepare_plain_copy(
        &self,
        device: DeviceId,
        copy: [usize; 3],
        read_only_source: bool,
        call: &'static str,
    ) -> Result<WorkItem> {
        self.prepare_copy(copy, read_only_source, call, |allocation, _, range| {
            allocation.plain_copy_allowed(device, range, |from, to| self.reaches(from, to))
        })
    }

    /// A copy (`[dst, src, bytes]`) to queue, after checking both sides; `allowed` judges each
    /// side that is an allocation, given the side's name and bytes (the rule of the calling
    /// copy form).
    fn prepare_copy(
        &self,
        [dst, src, bytes]: [usize; 3],
        read_only_source: bool,
        call: &'static str,
        allowed: impl Fn(&memory::Allocation, &'static str, ByteRange) -> bool,
    ) -> Result<WorkItem> {
        let hold = {
            let memory = lock(&self.memory);
            let dst_side = Self::hold_range(&memory, dst, bytes, "copy destination", call)?;
            let src_side = Self::hold_range(&memory, src, bytes, "copy source", call)?;
            let mut hold = Vec::new();
            for (side, what, start) in [(dst_side, "destination", dst), (src_side, "source", src)] {
                if let Some(allocation) = side {
                    if !allowed(allocation, what, ByteRange { start, len: bytes }) {
                        return Err(HostErrorCode::InvalidValue.error(call));
                    }
                    hold.push(allocation.block.clone());
                }
            }
            hold
        };
        let op = WorkOp::Copy {
            dst,
            src,
            bytes,
            read_only_source,
        };
        Ok(WorkItem::new(op, Payload::Hold(hold)))
    }

    /// A fill of `count` elements of `value` at `dst` to queue, checked.
    fn prepare_fill(
        &self,
        dst: usize,
        value: FillValue,
        count: usize,
        call: &'static str,
    ) -> Result<WorkItem> {
        let width = value.width();
        let bytes = count
            .checked_mul(width)
            .ok_or_else(|| Error::AddressOverflow {
                ptr: dst,
                len: count,
            })?;
        if !dst.is_multiple_of(width) {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        let hold = Self::hold_range(&lock(&self.memory), dst, bytes, "fill destination", call)?
            .map(|allocation| allocation.block.clone());
        Ok(WorkItem::new(
            WorkOp::Fill { dst, value, bytes },
            Payload::Hold(hold.into_iter().collect()),
        ))
    }

    /// A launch of `kernel` on a stream of `device` to queue, checked: the kernel is loaded
    /// on `device`, the shape runs there, and a library kernel's pointer arguments reach no
    /// further than the memory they point into.
    fn prepare_launch(
        &self,
        device: DeviceId,
        kernel: HostKernel,
        dims: LaunchDims,
        args: &[KernelArg],
        call: &'static str,
    ) -> Result<WorkItem> {
        let (function, entry, workgroup_limit) = {
            let kernels = lock(&self.kernels);
            let loaded = kernels.get(kernel, call)?;
            if loaded.device != device {
                return Err(HostErrorCode::InvalidHandle.error(call));
            }
            (
                loaded.function.clone(),
                loaded.entry,
                loaded.allowed_workgroup_bytes.unwrap_or(
                    self.devices[device.index()]
                        .workgroup
                        .default_per_block
                        .saturating_sub(loaded.static_workgroup_bytes),
                ),
            )
        };
        let threads_per_group = dims.block.iter().map(|&n| u64::from(n)).product::<u64>();
        let bad_shape = dims.grid.contains(&0)
            || dims.block.contains(&0)
            || threads_per_group > u64::from(MAX_THREADS_PER_WORKGROUP)
            || dims.dynamic_workgroup_bytes > workgroup_limit;
        if bad_shape {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        let regions: Vec<Option<Region>> = {
            let memory = lock(&self.memory);
            args.iter()
                .map(|arg| match arg {
                    KernelArg::Ptr(p) => memory.region_of(*p),
                    _ => None,
                })
                .collect()
        };
        // A library kernel's pointer arguments may reach the end of the buffer (or registered
        // range) they point into, and no further; one pointing into no memory of this backend
        // may reach nothing.
        if let Some(entry) = entry {
            entry.check_launch(args, &dims, |index| {
                match (args.get(index), regions.get(index)) {
                    (Some(KernelArg::Ptr(p)), Some(Some(region))) => {
                        let range = region.range();
                        range.start + range.len - p
                    }
                    _ => 0,
                }
            })?;
        }
        let launch = Launch {
            function,
            dims,
            args: args.to_vec(),
            regions: regions.into_iter().flatten().collect(),
        };
        Ok(WorkItem::new(
            WorkOp::Launch { kernel },
            Payload::Launch(Box::new(launch)),
        ))
    }

    /// One slot per device in `device_ptrs` (the caller's array may be longer).
    fn device_slots<'a>(
        &self,
        device_ptrs: &'a mut [usize],
        call: &'static str,
    ) -> Result<&'a mut [usize]> {
        device_ptrs
            .get_mut(..self.devices.len())
            .ok_or_else(|| HostErrorCode::InvalidValue.error(call))
    }
}

impl Drop for HostBackend {
    /// Destroys every stream, lets each worker finish its queue, joins them all, then frees
    /// what is left.
    fn drop(&mut self) {
        let mut table = lock(&self.streams);
        let live: Vec<StreamEntry> = table.live.drain().map(|(_, e)| e).collect();
        let mut entries = core::mem::take(&mut table.draining);
        drop(table);
        for entry in &live {
            entry.shared.close();
        }
        entries.extend(live);
        join_all(entries);
        lock(&self.events).clear();
        lock(&self.memory).clear();
    }
}
