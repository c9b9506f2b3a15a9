//! What users hold: a [`Runtime`] over one backend, composing the token planner, the caching
//! allocator and the lock table into streams of work, buffers and pinned host memory.
//!
//! Ownership makes misuse hard: a [`Token`] is consumed by value (use one twice through
//! [`Runtime::fork`]); a [`Buffer`] borrows the runtime, so it cannot outlive it, and freeing
//! it (dropping it, or [`Runtime::free`]) orders the free after every stream that used it; a
//! [`LockedHost`] borrows the caller's memory for as long as it is pinned and waits for the
//! transfers that use it before unpinning. Every driver call that needs a device runs under
//! the [`DeviceGuard`], so the caller's current device is the same after every call.
//!
//! # Examples
//!
//! ```
//! use gpu_rt::prelude::*;
//!
//! let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
//! let [x, y] = [0; 2].map(|_| rt.alloc(DeviceId(0), MemoryKind::Device, 64));
//! let (x, y) = (x?, y?);
//! let filled = rt.fill(DeviceId(0), x.all(), 5, &mut vec![])?;
//! // A token is used once: two operations after the fill need a fork.
//! let mut after_fill = rt.fork(filled, 2)?;
//! let copied = rt.copy(DeviceId(0), y.all(), x.all(), &mut vec![after_fill.remove(0)])?;
//! let mut out = [0u8; 64];
//! rt.download(DeviceId(0), &mut out, x.all(), &mut after_fill)?;
//! rt.wait(copied)?;
//! assert_eq!(out, [5; 64]);
//! # Ok::<(), Error>(())
//! ```
//!
//! Using a token twice does not compile:
//!
//! ```compile_fail,E0382
//! # use gpu_rt::prelude::*;
//! # let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
//! # let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
//! let filled = rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?;
//! rt.wait(filled)?;
//! rt.wait(filled)?; // use of moved value: `filled`
//! # Ok::<(), Error>(())
//! ```
//!
//! nor does shutting a runtime down while one of its buffers lives:
//!
//! ```compile_fail,E0505
//! # use gpu_rt::prelude::*;
//! let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
//! let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
//! rt.shutdown()?; // cannot move out of `rt` because it is borrowed
//! drop(buffer);
//! # Ok::<(), Error>(())
//! ```

mod alloc_trace;
mod allocations;
mod drivers;
mod events;
mod foreign;
mod graph_memory;
mod graphs;
pub mod guard;
mod handles;
mod health;
mod kernels;
mod lock;
mod memory;
mod peers;
pub mod recording;
mod state;
mod streams;
mod tokens;
mod transfers;
mod work;
pub mod worker;

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use std::sync::OnceLock;

use alloc_trace::DeviceTrace;
use core::ffi::{CStr, c_void};
use drivers::HostPins;
use events::EventPool;
use gpu_core::allocator::{AllocRequest, AllocatorConfig, AllocatorStats, BlockHandle, MemoryKind};
use gpu_core::backend::library;
use gpu_core::backend::{Backend, DeviceInfo, FillValue, LaunchDims};
use gpu_core::error::{ByteRange, Error, Result};
use gpu_core::id::{DeviceId, StreamId};
use gpu_core::lock_table::{LockOwner, LockStats, Locked, SharedLockTable, Unlocked};
use gpu_core::token::{self, PlannerFootprint, ProgramReport, Token};
use health::Health;
use lock::{BackoffGuard, BackoffMutex};
use memory::{DeviceMemory, MemoryGuard};
use peers::Peers;
use state::{HostWait, State};
use streams::StreamTable;

pub use alloc_trace::AllocTrace;
pub use graph_memory::{GraphArg, GraphBlock, GraphSpan};
pub use graphs::{Graph, GraphRecorder};
pub use guard::{DeviceGuard, restore_failures, with_device};
use handles::UseList;
pub use handles::{Buffer, LockedHost, Span};
pub use kernels::{Arg, Kernel};
pub use peers::{PeerLink, PeerPath};
pub use recording::{LiveObjects, RecordingBackend};
pub use worker::{DeviceWorker, Ticket};

/// A module image a program loaded into a runtime ([`Runtime::load_module`]).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::ModuleId;
///
/// // A complete PTX module with no kernels (PTX text ends with a NUL).
/// const PTX: &core::ffi::CStr = c".version 7.0\n.target sm_70\n.address_size 64\n";
/// /// Loads the program's module on device 0; the handle names it on every device.
/// fn load<B: Backend>(rt: &Runtime<B>) -> Result<ModuleId> {
///     // SAFETY: `PTX` is a complete image, readable for as long as the program runs.
///     unsafe { rt.load_module(DeviceId(0), PTX.as_ptr().cast()) }
/// }
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
/// // A GPU backend returns a `ModuleId`; the host backend runs Rust kernels only.
/// assert!(matches!(load(&rt), Err(Error::Unsupported { backend: "host", .. })));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ModuleId(u32);

/// Tunables of a [`Runtime`].
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::PeerLink;
///
/// let config = RuntimeConfig {
///     staging_chunk: 1 << 20, // 1 MiB chunks for pageable transfers
///     peer_access: false,     // copies between devices are staged by the driver
///     ..RuntimeConfig::default()
/// };
/// let rt = Runtime::with_config(HostBackend::new(HostConfig::with_devices(2)), config)?;
/// assert_eq!(rt.peer_link(DeviceId(0), DeviceId(1))?, &PeerLink::OptedOut);
/// assert_eq!(RuntimeConfig::default().staging_chunk, 16 << 20);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// The caching allocator's tunables.
    pub allocator: AllocatorConfig,
    /// Chunk size of transfers from and to pageable host memory, which go through two pinned
    /// staging buffers of this size, so the host copy of one chunk overlaps the DMA of the
    /// previous one. 16 MiB by default: on an H200 (PCIe 5) that made 256 MiB pageable copies
    /// 2.4x (to the device) and 1.2x (from it) faster than the driver's own, where 4 MiB chunks
    /// were slower than the driver from the device.
    pub staging_chunk: usize,
    /// Whether opening the runtime turns peer access on between every pair of devices whose
    /// driver allows it (true by default): copies between them then run over the link, and
    /// each device's kernels and copies may use the other's memory, the cached memory of the
    /// allocator included. Off, copies between devices are staged by the driver.
    pub peer_access: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            allocator: AllocatorConfig::default(),
            staging_chunk: 16 << 20,
            peer_access: true,
        }
    }
}

/// Counters of a runtime: what the pools and caches saved, and the allocator and lock table
/// figures.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// for value in 0..3 {
///     let filled = rt.fill(DeviceId(0), buffer.all(), value, &mut vec![])?;
///     rt.wait(filled)?;
/// }
/// let stats = rt.stats();
/// assert_eq!(stats.operations, 3);
/// // Three fills, one after the other: the pool handed the same stream out each time.
/// assert_eq!((stats.stream_acquires, stats.streams_created), (3, 1));
/// assert_eq!(stats.peer_access.len(), 2); // 0 -> 1 and 1 -> 0
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Streams handed out by the pools.
    pub stream_acquires: u64,
    /// Streams the driver had to create (pool misses).
    pub streams_created: u64,
    /// Events handed out by the pools (planner and allocator).
    pub event_acquires: u64,
    /// Events the driver had to create (pool misses).
    pub events_created: u64,
    /// Operations planned.
    pub operations: u64,
    /// Waits the plan inserted between streams.
    pub waits: u64,
    /// Allocator figures per device and cached kind.
    pub allocator: Vec<(DeviceId, MemoryKind, AllocatorStats)>,
    /// The lock table's figures.
    pub locks: LockStats,
    /// The sizes of the token planner's bookkeeping.
    pub planner: PlannerFootprint,
    /// Events the allocators recorded at frees and hold now (the rest wait in their pools).
    pub allocator_events_in_use: usize,
    /// Ordered device pairs with peer access enabled ([`Runtime::peer_link`]).
    pub peer_access: Vec<(DeviceId, DeviceId)>,
    /// Copies between two devices' memory that ran over the link.
    pub peer_copies_direct: u64,
    /// Copies between two devices' memory that the driver staged through the host.
    pub peer_copies_staged: u64,
}

impl RuntimeStats {
    /// Driver create/destroy pairs that the stream and event pools saved.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// for _ in 0..10 {
    ///     rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?;
    /// }
    /// let stats = rt.stats();
    /// // Ten streams handed out, one created: nine create/destroy pairs saved on streams alone.
    /// assert!(stats.pool_calls_saved() >= 9);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn pool_calls_saved(&self) -> u64 {
        (self.stream_acquires - self.streams_created) + (self.event_acquires - self.events_created)
    }
}

/// What shutting a runtime down found.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::LeftBehind;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 1 << 20)?;
/// let _never_waited = rt.fill(DeviceId(0), buffer.all(), 0, &mut vec![])?;
/// drop(buffer); // back to the allocator's cache
/// let report = rt.shutdown()?;
/// assert_eq!(report.program.unwaited.len(), 1); // the fill's token
/// assert!(report.trimmed_bytes >= 1 << 20); // the cache, given back to the driver
/// assert_eq!((report.errors, report.left), (vec![], LeftBehind::default()));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Tokens that ended without a synchronous wait (an error they carried would be lost).
    pub program: ProgramReport,
    /// Bytes of cached memory given back to the driver.
    pub trimmed_bytes: usize,
    /// Host ranges still pinned at shutdown, unpinned now.
    pub unpinned_ranges: usize,
    /// Every failure the shutdown met, in order (it goes on past each, giving back what it
    /// can). On a lost device these are [`Error::DeviceLost`].
    pub errors: Vec<Error>,
    /// What could not be given back.
    pub left: LeftBehind,
}

/// Driver objects and memory a shutdown could not give back (all zero after a clean one).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::LeftBehind;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
/// let mut host = vec![0u8; 4096];
/// rt.lock_range(host.as_mut_ptr() as usize, host.len())?; // pinned, never unlocked
/// let report = rt.shutdown()?;
/// // The shutdown unpinned the range: nothing was left behind.
/// assert_eq!((report.unpinned_ranges, report.left), (1, LeftBehind::default()));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeftBehind {
    /// Streams not destroyed.
    pub streams: usize,
    /// Events not destroyed.
    pub events: usize,
    /// Bytes of cached memory not freed.
    pub reserved_bytes: usize,
    /// Host ranges still pinned.
    pub pinned_ranges: usize,
}

impl ShutdownReport {
    /// The report, or the first failure that a lost device does not explain (a device's loss
    /// was reported by the call that met it; its shutdown failures follow from it).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::ShutdownReport;
    ///
    /// let cause = Box::new(Error::ZeroSize { what: "x" });
    /// let lost = Error::DeviceLost { device: DeviceId(0), cause };
    /// let report = ShutdownReport { errors: vec![lost], ..ShutdownReport::default() };
    /// assert!(report.into_result().is_ok()); // a lost device explains its own failures
    /// let other = Error::ZeroSize { what: "y" };
    /// let report = ShutdownReport { errors: vec![other.clone()], ..ShutdownReport::default() };
    /// assert_eq!(report.into_result().err(), Some(other));
    /// ```
    pub fn into_result(self) -> Result<ShutdownReport> {
        let explained = |error: &Error| match error {
            Error::DeviceLost { .. } => true,
            Error::Driver(driver) => driver.loses_device(),
            _ => false,
        };
        match self.errors.iter().find(|error| !explained(error)) {
            Some(error) => Err(error.clone()),
            None => Ok(self),
        }
    }
}

/// A runtime over one backend: devices, streams and tokens, buffers, pinned host memory.
///
/// Locks: each device's memory has its own, taken alone by an allocation or a free; the state
/// (planner, streams, events, kernels) has one. Whoever needs both takes the memory first.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
/// let (d0, d1) = (DeviceId(0), DeviceId(1));
/// let a = rt.alloc(d0, MemoryKind::Device, 1024)?;
/// let b = rt.alloc(d1, MemoryKind::Device, 1024)?;
/// // Each call returns a token for its work; `&mut vec![..]` lists what it runs after.
/// let filled = rt.fill(d0, a.all(), 0x5a, &mut vec![])?;
/// let copied = rt.copy(d1, b.all(), a.all(), &mut vec![filled])?; // device 0 to device 1
/// let mut out = vec![0u8; 1024];
/// rt.download(d1, &mut out, b.all(), &mut vec![copied])?;
/// assert!(out.iter().all(|&byte| byte == 0x5a));
/// drop((a, b)); // buffers borrow the runtime: free them before shutting it down
/// assert!(rt.shutdown()?.errors.is_empty());
/// # Ok::<(), Error>(())
/// ```
pub struct Runtime<B: Backend> {
    backend: Arc<B>,
    infos: Vec<DeviceInfo>,
    config: RuntimeConfig,
    memory: Vec<BackoffMutex<DeviceMemory<B>>>,
    /// The planner and the rest of the state: held to plan an operation and carry out its
    /// records and waits, not across the operation's own driver call (`state::Planned`).
    state: BackoffMutex<State<B>>,
    /// The driver streams of the planner's streams (shared with the state, which changes
    /// them; the allocator's driver reads them under a device's memory lock alone).
    streams: Arc<StreamTable<B::Stream>>,
    /// Each device's idle driver events (shared with the state and every device's memory).
    events: Arc<EventPool<B::Event>>,
    /// The lock table, behind sleeping locks: a writer holds its lock across the driver's pin
    /// (tens of microseconds to milliseconds), and another writer waits asleep, not spinning.
    /// Lookups (`pinned_address`, and the uploads' "is this pinned?") take no lock at all.
    pins: SharedLockTable<HostPins<B>, parking_lot::RawRwLock>,
    workers: Vec<OnceLock<DeviceWorker<B>>>,
    peers: Peers,
    /// This runtime's number ([`Runtime::id`]): its spans carry it, and every operation
    /// refuses spans of another runtime.
    id: u32,
    /// Which devices are lost (shared with the state).
    health: Arc<Health>,
}

/// The next runtime's number (never 0, never reused within the process).
static NEXT_RUNTIME_ID: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(1);

impl<B: Backend> Runtime<B> {
    /// Opens every device of `backend` with the default configuration.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// assert_eq!(rt.device_count(), 2);
    /// // A backend without devices is refused.
    /// let none = Runtime::new(HostBackend::new(HostConfig::with_devices(0)));
    /// assert!(matches!(none, Err(Error::UnknownDevice { device_count: 0, .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn new(backend: B) -> Result<Self> {
        Self::with_config(backend, RuntimeConfig::default())
    }

    /// Opens every device of `backend`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let config = RuntimeConfig { staging_chunk: 64, ..RuntimeConfig::default() };
    /// let rt = Runtime::with_config(HostBackend::new(HostConfig::with_devices(1)), config)?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 1000)?;
    /// let input: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    /// let uploaded = rt.upload(DeviceId(0), buffer.all(), &input, &mut vec![])?; // 64 at a time
    /// let mut out = vec![0u8; 1000];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![uploaded])?;
    /// assert_eq!(out, input);
    /// let zero = RuntimeConfig { staging_chunk: 0, ..RuntimeConfig::default() };
    /// let refused = Runtime::with_config(HostBackend::new(HostConfig::with_devices(1)), zero);
    /// assert!(matches!(refused, Err(Error::ZeroSize { what: "staging chunk" })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn with_config(backend: B, config: RuntimeConfig) -> Result<Self> {
        Self::shared(Arc::new(backend), config)
    }

    /// Opens every device of a backend the caller keeps a handle to as well (to read a
    /// wrapper's counters after shutdown, say).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use std::sync::Arc;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// let recorder = Arc::new(RecordingBackend::new(backend));
    /// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?;
    /// drop(buffer);
    /// rt.shutdown()?;
    /// // The caller's handle outlives the runtime: everything went back, in a sound order.
    /// assert_eq!(recorder.live(), Default::default());
    /// assert!(recorder.defects().is_empty());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn shared(backend: Arc<B>, config: RuntimeConfig) -> Result<Self> {
        if config.staging_chunk == 0 {
            return Err(Error::ZeroSize {
                what: "staging chunk",
            });
        }
        let count = backend.device_count();
        if count == 0 {
            return Err(Error::UnknownDevice {
                device: DeviceId(0),
                device_count: 0,
            });
        }
        let infos = (0..count)
            .map(|d| backend.device_info(DeviceId(d as u32)))
            .collect::<Result<Vec<_>>>()?;
        let pins = SharedLockTable::new(
            HostPins {
                backend: Arc::clone(&backend),
            },
            count,
        )?;
        let peers = Peers::open(&*backend, count, config.peer_access)?;
        let health = Arc::new(Health::new(count, B::DEVICE_LOSS_ENDS_THE_PROCESS));
        let streams = Arc::new(StreamTable::new());
        let events = Arc::new(EventPool::new(count));
        let memory = DeviceMemory::for_devices(&infos, config.allocator, &events);
        for (index, device) in memory.iter().enumerate() {
            let owner = DeviceId(index as u32);
            device.lock().vm_peers = (0..count as u32)
                .map(DeviceId)
                .filter(|&peer| peer != owner && peers.reaches(peer, owner))
                .collect();
        }
        Ok(Self {
            backend,
            memory,
            state: BackoffMutex::new(State::new(
                &infos,
                Arc::clone(&health),
                Arc::clone(&streams),
                Arc::clone(&events),
            )),
            events,
            streams,
            infos,
            config,
            pins,
            workers: (0..count).map(|_| OnceLock::new()).collect(),
            peers,
            id: NEXT_RUNTIME_ID.fetch_add(1, core::sync::atomic::Ordering::Relaxed),
            health,
        })
    }

    /// The failure that lost `device`, if it is lost: a driver's sticky error (a kernel's
    /// illegal address, a launch failure; [`gpu_core::error::DriverError::loses_device`]) met by
    /// any call. Every later call on the device is then [`Error::DeviceLost`] naming it;
    /// other devices keep working.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(2));
    /// // A kernel that reads outside its arguments' memory: the host backend faults it, as a GPU
    /// // faults a wild access.
    /// backend.register_kernel("wild_read", |ctx, _| ctx.view::<u32>(16, 1).map(drop));
    /// let rt = Runtime::new(backend)?;
    /// let dims = LaunchDims::linear(1, 1);
    /// // SAFETY: the kernel touches no memory: the backend refuses its one access.
    /// let faulted = unsafe { rt.launch(DeviceId(0), "wild_read", dims, &[], &mut vec![])? };
    /// assert!(matches!(rt.wait(faulted), Err(Error::DeviceLost { .. })));
    /// assert!(rt.device_lost(DeviceId(0)).is_some());
    /// assert_eq!(rt.device_lost(DeviceId(1)), None); // the other device keeps working
    /// # Ok::<(), Error>(())
    /// ```
    pub fn device_lost(&self, device: DeviceId) -> Option<Error> {
        self.health.cause(device)
    }

    /// `device`'s description, if the device exists and is not lost.
    #[inline]
    fn usable(&self, device: DeviceId) -> Result<&DeviceInfo> {
        let info = self.device_info(device)?;
        self.health.check(device)?;
        Ok(info)
    }

    /// This runtime's number, unique in the process (runtimes are numbered from 1 as they
    /// open): what [`Error::ForeignRuntime`] names.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt1 = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let rt2 = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// assert_ne!(rt1.id(), rt2.id());
    /// let buffer = rt1.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// // Memory of one runtime given to another is refused, naming both.
    /// let refused = rt2.fill(DeviceId(0), buffer.all(), 0, &mut vec![]);
    /// let foreign = Error::ForeignRuntime { what: "span", owner: rt1.id(), runtime: rt2.id() };
    /// assert_eq!(refused.err(), Some(foreign));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Refuses a span of another runtime (raw spans belong to none and pass).
    #[inline]
    fn own(&self, span: &Span<'_>) -> Result<()> {
        self.own_as(span, "span")
    }

    /// Refuses `what` (a span, or a buffer through its span) of another runtime.
    #[inline]
    fn own_as(&self, span: &Span<'_>, what: &'static str) -> Result<()> {
        match (span.runtime, span.epoch) {
            (Some(owner), _) if owner != self.id => Err(Error::ForeignRuntime {
                what,
                owner,
                runtime: self.id,
            }),
            (_, Some((device, epoch))) if epoch != self.health.epoch(device) => {
                Err(Error::StaleAfterReset {
                    device,
                    what: "buffer",
                })
            }
            _ => Ok(()),
        }
    }

    /// The backend driven.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// assert_eq!(rt.backend().name(), "host"); // a `Backend` method
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 4096)?;
    /// // The host backend's own counters: the allocator took one segment from the "driver".
    /// assert_eq!(rt.backend().stats().allocations, 1);
    /// # drop(buffer);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// How many devices the runtime drives.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(3)))?;
    /// let devices: Vec<DeviceId> = (0..rt.device_count()).map(|d| DeviceId(d as u32)).collect();
    /// assert_eq!(devices, [DeviceId(0), DeviceId(1), DeviceId(2)]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn device_count(&self) -> usize {
        self.infos.len()
    }

    /// What `device` is and can do.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let info = rt.device_info(DeviceId(1))?;
    /// assert_eq!((info.name.as_str(), info.total_memory), ("host device 1", 1 << 30));
    /// let unknown = Error::UnknownDevice { device: DeviceId(2), device_count: 2 };
    /// assert_eq!(rt.device_info(DeviceId(2)).err(), Some(unknown));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn device_info(&self, device: DeviceId) -> Result<&DeviceInfo> {
        self.of_device(&self.infos, device)
    }

    /// What opening the runtime found and did about `device`'s access to `peer`'s memory.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::runtime::PeerLink;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// assert_eq!(rt.peer_link(DeviceId(0), DeviceId(1))?, &PeerLink::Enabled);
    /// assert_eq!(rt.peer_link(DeviceId(1), DeviceId(1))?, &PeerLink::SameDevice);
    /// assert!(rt.peer_link(DeviceId(0), DeviceId(5)).is_err());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn peer_link(&self, device: DeviceId, peer: DeviceId) -> Result<&PeerLink> {
        self.device_info(device)?;
        self.device_info(peer)?;
        self.peers.link(device, peer).ok_or(Error::UnknownDevice {
            device: peer,
            device_count: self.infos.len(),
        })
    }

    /// `device`'s entry of a per-device list, or the unknown-device error.
    #[inline]
    fn of_device<'a, T>(&self, per_device: &'a [T], device: DeviceId) -> Result<&'a T> {
        per_device
            .get(device.index())
            .ok_or_else(|| Error::UnknownDevice {
                device,
                device_count: self.infos.len(),
            })
    }

    /// Locks `device`'s memory.
    #[inline]
    fn memory(&self, device: DeviceId) -> Result<MemoryGuard<'_, B>> {
        Ok(self.of_device(&self.memory, device)?.lock())
    }

    fn state(&self) -> Result<BackoffGuard<'_, State<B>>> {
        let state = self.state.lock();
        match &state.poisoned {
            Some(cause) => Err(Error::RuntimePoisoned {
                cause: Box::new(cause.clone()),
            }),
            None => Ok(state),
        }
    }

    // ----- workers, stats, shutdown -----

    /// The worker thread of `device` (started on first use): queue actions that run with the
    /// device permanently current, with errors carried back to waiters and sticky per queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let worker = rt.worker(DeviceId(1))?; // started now
    /// // Actions run on the worker's own thread, with its device current.
    /// let ticket = worker.submit(|backend: &HostBackend| backend.current_device());
    /// assert_eq!(ticket.wait()?, Some(DeviceId(1)));
    /// assert_eq!(rt.backend().current_device()?, None); // this thread's is untouched
    /// # Ok::<(), Error>(())
    /// ```
    pub fn worker(&self, device: DeviceId) -> Result<&DeviceWorker<B>> {
        let cell = self.of_device(&self.workers, device)?;
        if let Some(worker) = cell.get() {
            return Ok(worker);
        }
        let worker = DeviceWorker::start(Arc::clone(&self.backend), device)?;
        Ok(cell.get_or_init(|| worker))
    }

    /// The allocator's figures for `kind` on `device`, taking only that device's memory lock
    /// (the caller's host memory pinned in place is counted in [`RuntimeStats::locks`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// drop(rt.alloc(DeviceId(0), MemoryKind::Device, 1000)?);
    /// let again = rt.alloc(DeviceId(0), MemoryKind::Device, 1000)?; // from the cache
    /// let stats = rt.allocator_stats(DeviceId(0), MemoryKind::Device)?;
    /// assert_eq!((stats.misses, stats.hits), (1, 1));
    /// assert!(stats.allocated >= 1000 && stats.reserved >= stats.allocated);
    /// # drop(again);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn allocator_stats(&self, device: DeviceId, kind: MemoryKind) -> Result<AllocatorStats> {
        Ok(self.memory(device)?.allocator_stats(kind))
    }

    /// The runtime's counters.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let a = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let b = rt.alloc(DeviceId(1), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), a.all(), 1, &mut vec![])?;
    /// rt.wait(rt.copy(DeviceId(1), b.all(), a.all(), &mut vec![filled])?)?;
    /// let stats = rt.stats();
    /// assert_eq!(stats.operations, 2);
    /// assert_eq!(stats.waits, 1); // the copy's stream waited for the fill's
    /// assert_eq!((stats.peer_copies_direct, stats.peer_copies_staged), (1, 0));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn stats(&self) -> RuntimeStats {
        let mut stats = self.state.lock().stats();
        for (index, device) in self.memory.iter().enumerate() {
            let memory = device.lock();
            stats.allocator_events_in_use += memory.events.in_use();
            stats.event_acquires += memory.events.acquired;
            let device = DeviceId(index as u32);
            stats.allocator.extend(
                memory
                    .stats()
                    .map(|(kind, figures)| (device, kind, figures)),
            );
        }
        stats.locks = self.pins.stats();
        stats.peer_access = self.peers.enabled_pairs();
        (stats.peer_copies_direct, stats.peer_copies_staged) = self.peers.copies();
        stats
    }

    /// Waits for all work, gives every cached byte, stream, event and pin back to the driver,
    /// and reports tokens that ended unwaited: [`Runtime::shutdown_report`], then
    /// [`ShutdownReport::into_result`] (a failure not explained by a lost device is the
    /// error). Dropping the runtime does the same silently.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?;
    /// drop(buffer); // buffers borrow the runtime: free them first
    /// let report = rt.shutdown()?;
    /// assert!(report.program.unwaited.is_empty() && report.errors.is_empty());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn shutdown(self) -> Result<ShutdownReport> {
        self.shutdown_report().into_result()
    }

    /// Shuts down as [`Runtime::shutdown`] does and always returns the report: the failures
    /// met on the way (it goes on past each) and what could not be given back.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("wild_read", |ctx, _| ctx.view::<u32>(16, 1).map(drop));
    /// let rt = Runtime::new(backend)?;
    /// let dims = LaunchDims::linear(1, 1);
    /// // SAFETY: the kernel touches no memory: the backend refuses its one access.
    /// let faulted = unsafe { rt.launch(DeviceId(0), "wild_read", dims, &[], &mut vec![])? };
    /// assert!(rt.wait(faulted).is_err()); // device 0 is lost
    /// let report = rt.shutdown_report();
    /// // What the lost device could not give back is reported, and explained by the loss.
    /// assert!(report.errors.iter().all(|e| matches!(e, Error::DeviceLost { .. })));
    /// assert!(report.into_result().is_ok());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn shutdown_report(mut self) -> ShutdownReport {
        self.teardown()
    }

    fn teardown(&mut self) -> ShutdownReport {
        self.workers.clear();
        let state = self.state.get_mut();
        let torn = state.teardown(&self.backend, &mut self.memory);
        let mut errors = torn.errors;
        // An unpin the driver refuses is tried once more (a failed call changes nothing).
        let unpinned_ranges = match self.pins.release_all().or_else(|_| self.pins.release_all()) {
            Ok(count) => count,
            Err(error) => {
                errors.push(error);
                0
            }
        };
        let reserved_bytes = self
            .memory
            .iter()
            .flat_map(|device| {
                device
                    .lock()
                    .stats()
                    .map(|(_, stats)| stats.reserved)
                    .collect::<Vec<_>>()
            })
            .sum();
        ShutdownReport {
            program: torn.program,
            trimmed_bytes: torn.trimmed,
            unpinned_ranges,
            errors,
            left: LeftBehind {
                streams: torn.streams_left,
                events: torn.events_left,
                reserved_bytes,
                pinned_ranges: self.pins.stats().entries,
            },
        }
    }
}

impl<B: Backend> Drop for Runtime<B> {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop; `shutdown` reports them.
        let _ = self.teardown();
    }
}
