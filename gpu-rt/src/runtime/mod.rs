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

mod drivers;
mod events;
mod foreign;
pub mod guard;
mod handles;
mod health;
mod lock;
mod memory;
mod peers;
pub mod recording;
mod state;
mod streams;
mod transfers;
pub mod worker;

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

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
use lock::BackoffMutex;
use memory::{DeviceMemory, MemoryGuard};
use peers::Peers;
use state::{HostWait, State};
use streams::StreamTable;

pub use guard::{DeviceGuard, restore_failures, with_device};
use handles::UseList;
pub use handles::{Arg, Buffer, Kernel, LockedHost, Span};
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
    state: Mutex<State<B>>,
    /// The driver streams of the planner's streams (shared with the state, which changes
    /// them; the allocator's driver reads them under a device's memory lock alone).
    streams: Arc<StreamTable<B::Stream>>,
    /// Each device's idle driver events (shared with the state and every device's memory).
    events: Arc<EventPool<B::Event>>,
    /// The lock table, behind sleeping locks: a writer holds its lock across the driver's pin
    /// (tens of microseconds to milliseconds), and another writer waits asleep, not spinning.
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
        Ok(Self {
            backend,
            memory: DeviceMemory::for_devices(&infos, config.allocator, &events),
            state: Mutex::new(State::new(
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

    fn state(&self) -> Result<MutexGuard<'_, State<B>>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &state.poisoned {
            Some(cause) => Err(Error::RuntimePoisoned {
                cause: Box::new(cause.clone()),
            }),
            None => Ok(state),
        }
    }

    // ----- tokens -----

    /// Joins `after` into one token. On success `after` is emptied; on a planning error it is
    /// left untouched.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let a = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let b = rt.alloc(DeviceId(1), MemoryKind::Device, 64)?;
    /// let mut both = vec![
    ///     rt.fill(DeviceId(0), a.all(), 1, &mut vec![])?,
    ///     rt.fill(DeviceId(1), b.all(), 2, &mut vec![])?,
    /// ];
    /// let joined = rt.join(&mut both)?;
    /// assert!(both.is_empty()); // the tokens were consumed
    /// rt.wait(joined)?; // both fills have run
    /// # Ok::<(), Error>(())
    /// ```
    pub fn join(&self, after: &mut Vec<Token>) -> Result<Token> {
        let mut state = self.state()?;
        let token = state.planner.join(after)?;
        state.finish(&self.backend, token)
    }

    /// Forks `token` into `count` tokens, each usable once (branches wait lazily, at first use).
    /// A fork into no branch, or into more than [`token::MAX_FORK_BRANCHES`], is refused
    /// ([`Error::ZeroSize`], [`Error::LimitExceeded`]) before anything is allocated, and its
    /// token discarded: it cannot be handed back, and what it holds goes back to the pools
    /// (shutdown reports it as discarded). Check the count first with
    /// [`token::check_fork_count`] to keep the token on refusal.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let d0 = DeviceId(0);
    /// let [x, y, z] = [0; 3].map(|_| rt.alloc(d0, MemoryKind::Device, 64));
    /// let (x, y, z) = (x?, y?, z?);
    /// let filled = rt.fill(d0, x.all(), 9, &mut vec![])?;
    /// // Two copies read what the fill wrote: each needs a token of its own.
    /// let mut branches = rt.fork(filled, 2)?.into_iter();
    /// let to_y = rt.copy(d0, y.all(), x.all(), &mut branches.next().into_iter().collect())?;
    /// let to_z = rt.copy(d0, z.all(), x.all(), &mut branches.next().into_iter().collect())?;
    /// rt.wait(rt.join(&mut vec![to_y, to_z])?)?;
    /// // No branch at all is refused (check first with `token::check_fork_count`).
    /// assert!(gpu_core::token::check_fork_count(0).is_err());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fork(&self, token: Token, count: usize) -> Result<Vec<Token>> {
        self.fork_with(token, count, token::Planner::fork)
    }

    /// Forks `token` into `count` branches that share one event recorded now and gives its
    /// stream back to the pool at once (no branch keeps it), for layers whose handles may be
    /// abandoned without a word: such a handle then holds an event, never a stream. Counts are
    /// refused as by [`Runtime::fork`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![])?;
    /// let branches = rt.fork_detached(filled, 3)?;
    /// assert_eq!(branches.len(), 3);
    /// for branch in branches {
    ///     rt.wait(branch)?; // each waits on the one shared event
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fork_detached(&self, token: Token, count: usize) -> Result<Vec<Token>> {
        self.fork_with(token, count, token::Planner::fork_detached)
    }

    /// A fork planned by `plan` (the planner's `fork` or `fork_detached`) and carried out.
    fn fork_with(
        &self,
        token: Token,
        count: usize,
        plan: fn(&mut token::Planner, Token, usize, &mut Vec<Token>) -> Result<()>,
    ) -> Result<Vec<Token>> {
        let mut state = self.state()?;
        if let Err(refused) = token::check_fork_count(count) {
            state.abandon(&self.backend, token);
            return Err(refused);
        }
        // The planner reserves room for the branches fallibly.
        let mut branches = Vec::new();
        plan(&mut state.planner, token, count, &mut branches)?;
        match state.execute(&self.backend, &mut state::no_work) {
            Ok(()) => Ok(branches),
            Err(e) => {
                for branch in branches {
                    state.abandon(&self.backend, branch);
                }
                Err(e)
            }
        }
    }

    /// Ends `token` without waiting and without reporting it at shutdown: for a token whose
    /// work is observed through another one, or that its holder gave up on purpose (an MLIR
    /// event destroyed). What it held goes back to the pools.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![])?;
    /// let mut branches = rt.fork(filled, 2)?;
    /// rt.wait(branches.pop().unwrap())?;
    /// rt.release(branches.pop().unwrap())?; // its work was seen through the other branch
    /// drop(buffer);
    /// assert!(rt.shutdown()?.program.unwaited.is_empty()); // nothing reported as unwaited
    /// # Ok::<(), Error>(())
    /// ```
    pub fn release(&self, token: Token) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.planner.release(token)?;
        state.execute(&self.backend, &mut state::no_work)
    }

    /// Ends `token` if its work has completed already, without blocking: `Ok(None)` then (one
    /// event query, and no synchronisation: the query reported success, so there is no error
    /// left to observe); otherwise the token comes back, unchanged. Only a fork branch can be
    /// found done: a token that owns its stream is handed back unasked (the backend has no
    /// stream query). The first branch of a [`Runtime::fork`] takes over its token's stream,
    /// so it is never found done; the other branches, and every branch of
    /// [`Runtime::fork_detached`], can be.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![])?;
    /// // A token that owns its stream comes back unasked.
    /// let filled = rt.wait_if_done(filled)?.expect("handed back");
    /// let mut branches = rt.fork(filled, 2)?;
    /// rt.wait(branches.remove(0))?; // the first branch, which holds the fill's stream
    /// // The fill is done: the other branch ends without blocking.
    /// assert!(rt.wait_if_done(branches.remove(0))?.is_none());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn wait_if_done(&self, token: Token) -> Result<Option<Token>> {
        let state = self.state()?;
        let event = match state.planner.pending_of(&token)? {
            token::PendingWait::Event(event) => state.event_handle(event)?,
            token::PendingWait::Stream(_) => return Ok(Some(token)),
        };
        drop(state);
        if self.backend.event_query(event)? {
            self.release(token).map(|()| None)
        } else {
            Ok(Some(token))
        }
    }

    /// Blocks until the work behind `token` has completed, and reports its failure if any.
    /// The runtime's state is not locked while blocking: other threads go on submitting (the
    /// stream or event waited on stays out of the pools until the wait ends).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// // A kernel that fails when it runs: its first argument is not a `u32`.
    /// backend.register_kernel("needs_u32", |ctx, _| ctx.arg_u32(0).map(drop));
    /// let rt = Runtime::new(backend)?;
    /// let dims = LaunchDims::linear(1, 1);
    /// let launch = |args: &[Arg<'_>]| {
    ///     // SAFETY: the kernel touches no memory.
    ///     unsafe { rt.launch(DeviceId(0), "needs_u32", dims, args, &mut vec![]) }
    /// };
    /// rt.wait(launch(&[Arg::U32(1)])?)?;
    /// let failing = launch(&[Arg::F32(1.0)])?; // accepted: the kernel fails when it runs
    /// assert!(rt.wait(failing).is_err()); // and the wait reports it
    /// # Ok::<(), Error>(())
    /// ```
    pub fn wait(&self, token: Token) -> Result<()> {
        let (pending, host_wait, hold) = {
            let mut state = self.state()?;
            let pending = state.planner.begin_wait(token)?;
            let host_wait = state.host_wait(&pending);
            let hold = host_wait
                .as_ref()
                .ok()
                .and_then(HostWait::device)
                .and_then(|device| self.health.hold_host_wait(device));
            (pending, host_wait, hold)
        };
        let waited = host_wait.and_then(|host_wait| host_wait.block(&self.backend, &self.health));
        drop(hold);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.planner.end_wait(pending);
        let released = state.execute(&self.backend, &mut state::no_work);
        waited.and(released)
    }

    // ----- memory -----

    /// Allocates `size` bytes of `kind` on `device`, usable at once by every stream (and by
    /// the host, for host kinds). Served from the cache when it can be, under the device's
    /// memory lock alone: allocations and frees keep working on a runtime that refuses work
    /// ([`Error::RuntimePoisoned`]), since the allocator orders reuse with its own events.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::HostPinned, 100)?;
    /// assert_eq!((buffer.size(), buffer.kind()), (100, MemoryKind::HostPinned));
    /// // More than the device has (the host backend's devices have 1 GiB).
    /// let too_big = rt.alloc(DeviceId(0), MemoryKind::Device, 2 << 30);
    /// assert!(matches!(too_big, Err(Error::OutOfMemory { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub fn alloc(&self, device: DeviceId, kind: MemoryKind, size: usize) -> Result<Buffer<'_, B>> {
        self.health.check(device)?;
        let mut memory = self.memory(device)?;
        // Read under the memory lock, which a reset holds while it starts a new epoch.
        let epoch = self.health.epoch(device);
        let allocated =
            memory.allocate(&self.backend, &self.streams, &AllocRequest::new(kind, size));
        drop(memory);
        let allocation = self.health.lift(device, allocated)?;
        Ok(Buffer::new(self, device, &allocation, size, epoch))
    }

    /// Allocates `size` bytes of `kind` on `device` in stream order after `after`: the buffer
    /// is usable by work that depends on the returned token. Uses the driver's stream-ordered
    /// call where the device has one, else waits for `after` and allocates synchronously.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let (buffer, ready) = rt.alloc_after(DeviceId(0), MemoryKind::Device, 256, &mut vec![])?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![ready])?;
    /// let mut out = [0u8; 256];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![filled])?;
    /// assert!(out.iter().all(|&byte| byte == 3));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn alloc_after(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
        after: &mut Vec<Token>,
    ) -> Result<(Buffer<'_, B>, Token)> {
        self.health.check(device)?;
        let mut memory = self.memory(device)?;
        let epoch = self.health.epoch(device);
        let mut state = self.state()?;
        let (token, (allocation, stream)) =
            state.submit(&self.backend, device, after, |_, backend, stream, _| {
                let request = AllocRequest::new(kind, size).on_stream(stream, &[]);
                Ok((memory.allocate(backend, &self.streams, &request)?, stream))
            })?;
        // Neither lock may be held when a buffer exists: dropping one takes the memory lock.
        drop((state, memory));
        let mut buffer = Buffer::new(self, device, &allocation, size, epoch);
        // The memory exists in that stream's order: even unused, it is freed after that point.
        buffer.uses.get_mut().push(stream);
        Ok((buffer, token))
    }

    /// Frees `buffer` after the work behind `after` as well as every stream that used it: for
    /// memory used through raw addresses ([`Span::from_raw`]), which the buffer cannot see.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let d0 = DeviceId(0);
    /// let source = rt.alloc(d0, MemoryKind::Device, 64)?;
    /// let target = rt.alloc(d0, MemoryKind::Device, 64)?;
    /// rt.wait(rt.fill(d0, source.all(), 7, &mut vec![])?)?;
    /// // SAFETY: the memory stays valid until the copy has run: `free_after` orders the free so.
    /// let raw = unsafe { Span::from_raw(source.address(), 64) };
    /// let copied = rt.copy(d0, target.all(), raw, &mut vec![])?;
    /// rt.free_after(source, &copied)?; // the buffer cannot see the raw span's use
    /// let mut out = [0u8; 64];
    /// rt.download(d0, &mut out, target.all(), &mut vec![copied])?;
    /// assert_eq!(out, [7; 64]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn free_after(&self, buffer: Buffer<'_, B>, after: &Token) -> Result<()> {
        self.own_as(&buffer.all(), "buffer")?;
        let stream = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .planner
            .stream_of(after)?;
        Span::note_stream(&buffer.uses, stream);
        buffer.release()
    }

    /// Frees `buffer` now, reporting a failure (dropping it frees it too, silently). The memory
    /// goes back to the cache, reused only after every stream that used it is done with it.
    /// A buffer of another runtime is refused ([`Error::ForeignRuntime`]) and freed by its own
    /// runtime, as dropping it would.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let _filled = rt.fill(DeviceId(0), buffer.all(), 0, &mut vec![])?;
    /// rt.free(buffer)?; // safe while the fill may still run: reused only after it
    /// let other = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let foreign = other.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// assert!(matches!(rt.free(foreign), Err(Error::ForeignRuntime { what: "buffer", .. })));
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub fn free(&self, buffer: Buffer<'_, B>) -> Result<()> {
        self.own_as(&buffer.all(), "buffer")?;
        buffer.release()
    }

    /// Frees a buffer's block after the streams in `uses` (taken from the buffer, which is
    /// being dropped: no span of it is left).
    /// A block of an earlier epoch of its device (before a reset, which freed it) is done with.
    fn release_block(
        &self,
        device: DeviceId,
        (handle, address, size): (BlockHandle, usize, usize),
        uses: &[StreamId],
        epoch: u32,
    ) -> Result<()> {
        let mut memory = self.memory(device)?;
        if epoch != self.health.epoch(device) {
            return Ok(());
        }
        memory.free(&self.backend, &self.streams, handle, (address, size), uses)
    }

    /// Makes a lost device usable again ([`Runtime::device_lost`]) where the backend can
    /// (not CUDA, HIP or HSA: [`Backend::DEVICE_LOSS_ENDS_THE_PROCESS`], refused with
    /// [`Error::Unsupported`]; the host backend can): the backend resets it
    /// (CUDA: its primary context), and the runtime forgets everything of it. Its buffers from
    /// before are gone (using one is [`Error::StaleAfterReset`], dropping one does nothing), as
    /// are its kernels (ask for them again); its streams and events are made afresh when next
    /// needed, and peer access to and from it is turned on again. Other devices' cached blocks
    /// last used on it become usable by every stream. Refused while live tokens have work on
    /// the device ([`Error::LiveWorkOnDevice`]: wait for them, which reports the loss, or
    /// release them). Works on a device that is not lost as well.
    ///
    /// Not covered: streams of other programs adopted on the device (PyTorch's) die with the
    /// reset, and on CUDA host memory pinned through device 0's context may be unpinned by a
    /// reset of device 0 while the lock table still lists it.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("wild_read", |ctx, _| ctx.view::<u32>(16, 1).map(drop));
    /// let rt = Runtime::new(backend)?;
    /// let (d0, dims) = (DeviceId(0), LaunchDims::linear(1, 1));
    /// let before = rt.alloc(d0, MemoryKind::Device, 64)?;
    /// // SAFETY: the kernel touches no memory: the backend refuses its one access.
    /// let faulted = unsafe { rt.launch(d0, "wild_read", dims, &[], &mut vec![])? };
    /// assert!(rt.wait(faulted).is_err()); // the device is lost now
    /// assert!(matches!(rt.alloc(d0, MemoryKind::Device, 64), Err(Error::DeviceLost { .. })));
    /// rt.reset_device(d0)?;
    /// let after = rt.alloc(d0, MemoryKind::Device, 64)?; // usable again
    /// let stale = Error::StaleAfterReset { device: d0, what: "buffer" };
    /// assert_eq!(rt.fill(d0, before.all(), 0, &mut vec![]).err(), Some(stale));
    /// # drop(after);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn reset_device(&self, device: DeviceId) -> Result<()> {
        let info = self.device_info(device)?;
        if B::DEVICE_LOSS_ENDS_THE_PROCESS && self.health.cause(device).is_some() {
            return Err(Error::Unsupported {
                backend: self.backend.name(),
                what: "bringing a device back after a sticky error: the driver's state of the \
                       whole process is lost (CUDA: restart the process)",
            });
        }
        // The lock order: every device's memory, in order, then the state.
        let mut memories: Vec<MemoryGuard<'_, B>> =
            self.memory.iter().map(BackoffMutex::lock).collect();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A wait in progress counts as the live token it waits for: the reset would destroy
        // the stream or event it blocks on.
        let tokens = state.planner.live_tokens_on(device) + self.health.host_waits(device) as usize;
        if tokens > 0 {
            return Err(Error::LiveWorkOnDevice { device, tokens });
        }
        with_device(&*self.backend, device, || self.backend.reset_device(device))?;
        for (index, memory) in memories.iter_mut().enumerate() {
            if index == device.index() {
                let events = Arc::clone(&self.events);
                let fresh = DeviceMemory::new(device, info, self.config.allocator, events);
                memory.reset(device, fresh);
            } else {
                memory.forget_device(&self.backend, &self.streams, device);
            }
        }
        self.events.forget_device(device);
        state.forget_device(device);
        self.health.restore(device);
        drop((state, memories));
        self.peers.restore(&*self.backend, device)
    }

    /// Gives cached memory of every device back to the driver (retrying frees the driver
    /// failed before); returns the bytes released.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// drop(rt.alloc(DeviceId(0), MemoryKind::Device, 1 << 20)?); // back to the cache
    /// assert_eq!(rt.backend().stats().allocations, 1); // still held from the driver
    /// assert!(rt.trim()? >= 1 << 20);
    /// assert_eq!(rt.backend().stats().allocations, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn trim(&self) -> Result<usize> {
        self.memory.iter().try_fold(0, |total, device| {
            let trimmed = device.lock().trim(&self.backend, &self.streams)?;
            Ok(total + trimmed)
        })
    }

    /// Pins the caller's `memory` for DMA by every device (counted in the lock table: a range
    /// inside one already pinned costs no driver call). Unpinned when the returned guard drops,
    /// after the transfers that used it have finished. The guard owns its lock
    /// ([`LockOwner::Guard`]): [`Runtime::unlock_range`] never releases it.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 16)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 0xab, &mut vec![])?;
    /// let mut host = vec![0u8; 16];
    /// let mut locked = rt.lock_host(&mut host)?; // pinned while `locked` lives
    /// let copied = rt.copy(DeviceId(0), locked.span(0, 16)?, buffer.all(), &mut vec![filled])?;
    /// assert_eq!(locked.memory()?, &[0xab; 16]); // waits for the copy first
    /// rt.wait(copied)?;
    /// drop(locked); // unpinned
    /// assert_eq!((host[0], rt.stats().locks.entries), (0xab, 0));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn lock_host<'m>(&self, memory: &'m mut [u8]) -> Result<LockedHost<'_, 'm, B>> {
        // SAFETY: the memory is borrowed mutably for as long as the guard lives.
        unsafe { self.lock_host_raw(memory.as_mut_ptr(), memory.len()) }
    }

    /// Pins host memory `[ptr, ptr + len)` that the caller manages (a C program's, say) as
    /// [`Runtime::lock_host`] does, without borrowing it: the guard's spans order transfers and
    /// its drop waits for them before unpinning. Ranges inside a pinned one nest (counted).
    /// The guard owns its lock, as [`Runtime::lock_host`]'s does.
    ///
    /// # Safety
    /// The memory stays valid until the guard is dropped; the host neither writes it while a
    /// transfer from it may run nor touches it while a transfer into it may run (both end once
    /// [`LockedHost::memory`] or the unpin has waited for them); and while the slice
    /// [`LockedHost::memory`] returns is borrowed, nothing else accesses those bytes (another
    /// guard of an overlapping range included).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let mut host = vec![0u8; 64]; // as a C caller would hand it over: a pointer and a length
    /// // SAFETY: `host` outlives the guard and is touched only through it while the guard lives.
    /// let mut locked = unsafe { rt.lock_host_raw(host.as_mut_ptr(), host.len())? };
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let uploaded = rt.upload(DeviceId(0), buffer.all(), &[5; 64], &mut vec![])?;
    /// let copied = rt.copy(DeviceId(0), locked.span(0, 64)?, buffer.all(), &mut vec![uploaded])?;
    /// rt.wait(copied)?;
    /// assert_eq!(locked.memory()?, &[5; 64]);
    /// locked.unlock()?;
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn lock_host_raw<'m>(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<LockedHost<'_, 'm, B>> {
        self.pins.lock_as(ptr as usize, len, LockOwner::Guard)?;
        Ok(LockedHost {
            runtime: self,
            address: ptr,
            len,
            memory: core::marker::PhantomData,
            uses: UseList::new(Vec::new()),
        })
    }

    fn unlock_host(&self, locked: &LockedHost<'_, '_, B>) -> Result<()> {
        let uses = core::mem::take(&mut *locked.uses.lock());
        let waited = self.synchronize_streams(&uses);
        // The guard is gone after this call: an unpin the driver refuses (which changes
        // nothing) is tried once more, or the memory would stay pinned after its owner frees it.
        // The guard's lock is still there: raw unlocks cannot release it.
        let ptr = locked.address as usize;
        let unlock = || self.pins.unlock_as(ptr, LockOwner::Guard);
        let unlocked = unlock().or_else(|_| unlock());
        waited.and(unlocked.map(drop))
    }

    /// Blocks until every stream in `streams` has finished the work enqueued on it, outside
    /// the state's lock (as [`Runtime::wait`] does), so other threads plan and submit meanwhile.
    fn synchronize_streams(&self, streams: &[StreamId]) -> Result<()> {
        let (waits, _holds) = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let waits = streams
                .iter()
                .map(|&stream| state.stream_wait(stream))
                .collect::<Result<Vec<_>>>()?;
            let holds: Vec<_> = waits
                .iter()
                .filter_map(HostWait::device)
                .filter_map(|device| self.health.hold_host_wait(device))
                .collect();
            (waits, holds)
        };
        waits
            .into_iter()
            .try_for_each(|wait| wait.block(&self.backend, &self.health))
    }

    /// Pins host range `[ptr, ptr + len)` through the lock table without borrowing it: the
    /// raw form of [`Runtime::lock_host`] for memory the caller manages (keep it alive, and
    /// transfer from it only through [`Runtime::upload`], until [`Runtime::unlock_range`]).
    /// Takes a raw lock ([`LockOwner::Raw`]); the result counts the entry's locks by owner.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let host = vec![0u8; 4096];
    /// let (ptr, len) = (host.as_ptr() as usize, host.len());
    /// let first = rt.lock_range(ptr, len)?;
    /// let nested = rt.lock_range(ptr + 100, 10)?; // inside: counted, no driver call
    /// assert_eq!((first.locks.raw, nested.locks.raw, nested.entry), (1, 2, first.entry));
    /// rt.unlock_range(ptr)?;
    /// rt.unlock_range(ptr)?;
    /// assert_eq!(rt.pinned_address(ptr, len, DeviceId(0))?, None);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn lock_range(&self, ptr: usize, len: usize) -> Result<Locked> {
        self.pins.lock(ptr, len)
    }

    /// Releases one raw lock (taken by [`Runtime::lock_range`]) on the entry containing `ptr`.
    /// An entry that only guards hold ([`LockedHost`]) is [`Error::PinOwned`] and stays as it
    /// was: a raw unlock never removes the pin a live guard relies on.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let mut host = vec![0u8; 4096];
    /// let ptr = host.as_mut_ptr() as usize;
    /// rt.lock_range(ptr, 4096)?;
    /// assert_eq!(rt.unlock_range(ptr)?.remaining.total(), 0); // unpinned
    /// let guard = rt.lock_host(&mut host)?;
    /// // A raw unlock never removes the pin a guard relies on.
    /// assert!(matches!(rt.unlock_range(ptr), Err(Error::PinOwned { .. })));
    /// drop(guard);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn unlock_range(&self, ptr: usize) -> Result<Unlocked> {
        self.pins.unlock(ptr)
    }

    /// The address `device` uses for host range `[ptr, ptr + len)` if every byte is pinned.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let host = vec![0u8; 4096];
    /// let ptr = host.as_ptr() as usize;
    /// assert_eq!(rt.pinned_address(ptr, 4096, DeviceId(1))?, None); // pageable
    /// rt.lock_range(ptr, 4096)?;
    /// // The host backend's devices use the host address itself.
    /// assert_eq!(rt.pinned_address(ptr + 8, 8, DeviceId(1))?, Some(ptr + 8));
    /// assert_eq!(rt.pinned_address(ptr, 8192, DeviceId(1))?, None); // not every byte
    /// rt.unlock_range(ptr)?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn pinned_address(
        &self,
        ptr: usize,
        len: usize,
        device: DeviceId,
    ) -> Result<Option<usize>> {
        self.pins.lookup(ptr, len, device)
    }

    // ----- work -----

    /// Enqueues a copy of `src` into `dst` (equal lengths) on a stream of `device`. Ranges that
    /// share bytes are refused ([`Error::CopyOverlap`]) unless they are the same range.
    ///
    /// Memory of two devices: either may run the copy, which goes over the link where peer
    /// access is enabled between them and is staged by the driver where not
    /// ([`Runtime::peer_link`], counted in [`RuntimeStats`]). Device memory and host memory:
    /// the copy runs on the memory's device, or on a device that reaches it through peer
    /// access; another device is [`Error::WrongDevice`] (the driver would refuse its
    /// stream-ordered memory).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let (d0, buffer) = (DeviceId(0), rt.alloc(DeviceId(0), MemoryKind::Device, 64)?);
    /// let filled = rt.fill(d0, buffer.span(0, 32)?, 1, &mut vec![])?;
    /// let copied = rt.copy(d0, buffer.span(32, 32)?, buffer.span(0, 32)?, &mut vec![filled])?;
    /// let mut out = [0u8; 64];
    /// rt.download(d0, &mut out, buffer.all(), &mut vec![copied])?;
    /// assert_eq!(out, [1; 64]);
    /// // Ranges that share bytes are refused before anything is queued.
    /// let overlap = rt.copy(d0, buffer.span(8, 32)?, buffer.span(0, 32)?, &mut vec![]);
    /// assert!(matches!(overlap, Err(Error::CopyOverlap { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn copy(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        src: Span<'_>,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        self.own(&dst)?;
        self.own(&src)?;
        self.health.check(device)?;
        for memory_device in [dst.device, src.device].into_iter().flatten() {
            self.health.check(memory_device)?;
        }
        if dst.len != src.len {
            return Err(Error::OutOfBounds {
                offset: 0,
                len: src.len,
                size: dst.len,
            });
        }
        // A range copied onto itself changes nothing (and is what a one-device run of a
        // peer-copy program does); any other shared byte makes the driver's result undefined.
        if let (Some(to), Some(from)) = (
            ByteRange::new(dst.address, dst.len),
            ByteRange::new(src.address, src.len),
        ) && to.overlaps(&from)
            && to != from
        {
            return Err(Error::CopyOverlap { dst: to, src: from });
        }
        let between = match (dst.device, src.device) {
            (Some(to), Some(from)) if to != from => Some((to, from)),
            (Some(owner), _) | (_, Some(owner)) => {
                if !self.peers.reaches(device, owner) {
                    self.device_info(device)?;
                    return Err(Error::WrongDevice {
                        expected: owner,
                        found: device,
                    });
                }
                None
            }
            (None, None) => None,
        };
        let note = |stream| [dst, src].iter().for_each(|span| span.note_use(stream));
        let token = self.submit(device, after, &note, |backend, stream| {
            // SAFETY: both spans come from a `Buffer` or `LockedHost` borrowed for at least
            // `'_` (or, raw, from pinned memory the runtime looked up and waits for), and
            // `submit` notes this stream on each: freeing the buffer is ordered after the
            // stream's work, and unpinning waits for it, so the bytes stay valid until the copy
            // has run. The host reaches them only through `unsafe` accessors or `&mut` access
            // that excludes the borrows of pending spans. A span's device is the device whose
            // memory it is.
            unsafe {
                match between {
                    Some((to, from)) => {
                        backend.copy_peer(stream, dst.address, to, src.address, from, src.len)
                    }
                    None => backend.copy(stream, dst.address, src.address, src.len),
                }
            }
        })?;
        if let Some((to, from)) = between {
            self.peers.count_copy(to, from);
        }
        Ok(token)
    }

    /// Enqueues setting every byte of `dst` to `value` on a stream of `device`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 8)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 0xff, &mut vec![])?;
    /// let mut out = [0u8; 8];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![filled])?;
    /// assert_eq!(out, [0xff; 8]);
    /// // Device 0's memory is filled on device 0.
    /// let elsewhere = rt.fill(DeviceId(1), buffer.all(), 0, &mut vec![]);
    /// let wrong = Error::WrongDevice { expected: DeviceId(1), found: DeviceId(0) };
    /// assert_eq!(elsewhere.err(), Some(wrong));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fill(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        value: u8,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        self.fill_elements(device, dst, FillValue::U8(value), after)
    }

    /// Enqueues setting every element of `dst` to `value` (8, 16 or 32 bits wide) on a stream
    /// of `device`. A span that is not a whole number of elements is refused
    /// ([`Error::OutOfBounds`]: the last element would run past it).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let (d0, buffer) = (DeviceId(0), rt.alloc(DeviceId(0), MemoryKind::Device, 8)?);
    /// let filled = rt.fill_elements(d0, buffer.all(), FillValue::U16(0xbeef), &mut vec![])?;
    /// let mut out = [0u8; 8];
    /// rt.download(d0, &mut out, buffer.all(), &mut vec![filled])?;
    /// assert_eq!(out, [0xbeef_u16.to_ne_bytes(); 4].concat()[..]);
    /// // Six bytes are not a whole number of 32-bit words.
    /// let partial = rt.fill_elements(d0, buffer.span(0, 6)?, FillValue::U32(1), &mut vec![]);
    /// assert_eq!(partial.err(), Some(Error::OutOfBounds { offset: 4, len: 4, size: 6 }));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fill_elements(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        value: FillValue,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        self.own(&dst)?;
        dst.check_device(device)?;
        self.health.check(device)?;
        let width = value.width();
        if !dst.len.is_multiple_of(width) {
            // The last element would run past the span.
            return Err(Error::OutOfBounds {
                offset: dst.len - dst.len % width,
                len: width,
                size: dst.len,
            });
        }
        self.submit(
            device,
            after,
            &|stream| dst.note_use(stream),
            |backend, stream| {
                // SAFETY: as in `copy`: the span is memory the runtime owns or borrows, kept until
                // the stream noted on it by `submit` has finished with it.
                unsafe { backend.fill_elements(stream, dst.address, value, dst.len / width) }
            },
        )
    }

    /// Loads a program's module image (CUDA: PTX, cubin or fatbin) on `device` now, so a bad
    /// image fails here; other devices load it at their first [`Runtime::module_kernel`].
    ///
    /// # Safety
    /// `image` points to a complete image in a format the backend's driver reads, and stays
    /// readable until [`Runtime::unload_module`] or the runtime's shutdown.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// // A complete PTX module with no kernels (PTX text ends with a NUL).
    /// const PTX: &core::ffi::CStr = c".version 7.0\n.target sm_70\n.address_size 64\n";
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// // SAFETY: `PTX` is a complete image, readable for as long as the program runs.
    /// let loaded = unsafe { rt.load_module(DeviceId(0), PTX.as_ptr().cast()) };
    /// // The host backend runs Rust kernels only: it refuses every image, typed.
    /// assert!(matches!(loaded, Err(Error::Unsupported { backend: "host", .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn load_module(&self, device: DeviceId, image: *const c_void) -> Result<ModuleId> {
        self.device_info(device)?;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.state()?.load_module(&self.backend, device, image) }
    }

    /// Unloads `module` on every device; its kernels are refused afterwards.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// // A complete PTX module with no kernels (PTX text ends with a NUL).
    /// const PTX: &core::ffi::CStr = c".version 7.0\n.target sm_70\n.address_size 64\n";
    /// fn load_and_unload<B: Backend>(rt: &Runtime<B>) -> Result<()> {
    ///     // SAFETY: `PTX` is a complete image, readable for as long as the program runs.
    ///     let module = unsafe { rt.load_module(DeviceId(0), PTX.as_ptr().cast())? };
    ///     rt.unload_module(module) // its kernels are refused from now on
    /// }
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// // On a GPU backend this loads and unloads; the host backend loads no image.
    /// assert!(matches!(load_and_unload(&rt), Err(Error::Unsupported { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn unload_module(&self, module: ModuleId) -> Result<()> {
        self.state()?.unload_module(&self.backend, module)
    }

    /// Kernel `name` of `module` on `device` (the module is loaded there first if it is not):
    /// a handle to launch it by, cached per module, name and device.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use core::ffi::CStr;
    ///
    /// // The program's own module, as a compiler embedded it (PTX text ends with a NUL).
    /// const PTX: &CStr = c".version 7.0\n.target sm_70\n.address_size 64\n";
    /// /// Kernel `name` of the program's module on `device`.
    /// fn kernel_of<'rt, B: Backend>(rt: &'rt Runtime<B>, device: DeviceId, name: &CStr)
    ///     -> Result<Kernel<'rt, B>> {
    ///     // SAFETY: `PTX` is a complete image, readable for as long as the program runs.
    ///     let module = unsafe { rt.load_module(DeviceId(0), PTX.as_ptr().cast())? };
    ///     rt.module_kernel(module, device, name) // loaded on `device` now if it is not there yet
    /// }
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// // A GPU backend hands out a kernel to launch with `Kernel::launch_packed`; the host, none.
    /// assert!(matches!(kernel_of(&rt, DeviceId(0), c"scale"), Err(Error::Unsupported { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn module_kernel(
        &self,
        module: ModuleId,
        device: DeviceId,
        name: &CStr,
    ) -> Result<Kernel<'_, B>> {
        let info = self.usable(device)?;
        let index = self
            .state()?
            .module_kernel(&self.backend, module, device, name, info)?;
        Ok(Kernel {
            runtime: self,
            device,
            index,
            entry: None,
        })
    }

    /// Kernel `name` of the backend's kernel library on `device`, loaded at the first call: a
    /// handle to launch it by, with no lookup by name on each launch. A kernel of the standard
    /// library ([`library::LIBRARY`]) keeps its table entry, so every launch is checked against
    /// it ([`Kernel::launch`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let fill = rt.kernel(DeviceId(0), "fill_u32")?; // looked up once
    /// let args = [Arg::Span(buffer.all()), Arg::U32(42), Arg::U64(16)];
    /// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    /// let filled = unsafe { fill.launch(LaunchDims::linear(1, 16), &args, &mut vec![])? };
    /// let mut out = [0u8; 64];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![filled])?;
    /// assert_eq!(u32::from_ne_bytes(out[60..].try_into().unwrap()), 42);
    /// let unknown = rt.kernel(DeviceId(0), "no_such_kernel");
    /// assert!(matches!(unknown, Err(Error::UnknownKernel { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn kernel(&self, device: DeviceId, name: &str) -> Result<Kernel<'_, B>> {
        let info = self.usable(device)?;
        let index = self
            .state()?
            .load_kernel(&self.backend, device, name, info)?;
        Ok(Kernel {
            runtime: self,
            device,
            index,
            entry: library::entry(name),
        })
    }

    /// Enqueues kernel `name` of the backend's kernel library on `device`: [`Runtime::kernel`]
    /// then [`Kernel::launch`] (keep the handle to launch a kernel often).
    ///
    /// # Safety
    /// As for [`Kernel::launch`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?; // 16 words
    /// let dims = LaunchDims::linear(1, 64);
    /// let args = [Arg::Span(buffer.all()), Arg::U32(5), Arg::U64(16)];
    /// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    /// let filled = unsafe { rt.launch(DeviceId(0), "fill_u32", dims, &args, &mut vec![])? };
    /// rt.wait(filled)?;
    /// // 17 words would reach past the span: refused before anything is queued.
    /// let too_far = [Arg::Span(buffer.all()), Arg::U32(5), Arg::U64(17)];
    /// // SAFETY: as above.
    /// let refused = unsafe { rt.launch(DeviceId(0), "fill_u32", dims, &too_far, &mut vec![]) };
    /// assert!(matches!(refused, Err(Error::KernelReach { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn launch(
        &self,
        device: DeviceId,
        name: &str,
        dims: LaunchDims,
        args: &[Arg<'_>],
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.kernel(device, name)?.launch(dims, args, after) }
    }

    /// Plans one operation on `device`, runs `work` on its stream, and notes the stream on
    /// each span the operation uses (through `note`).
    fn submit(
        &self,
        device: DeviceId,
        after: &mut Vec<Token>,
        note: &dyn Fn(StreamId),
        work: impl FnOnce(&B, B::Stream) -> Result<()>,
    ) -> Result<Token> {
        // An unknown device is refused by the planner, before anything happens.
        let mut state = self.state()?;
        Self::run_planned(&mut state, &self.backend, device, after, note, work)
    }

    fn run_planned(
        state: &mut State<B>,
        backend: &B,
        device: DeviceId,
        after: &mut Vec<Token>,
        note: &dyn Fn(StreamId),
        work: impl FnOnce(&B, B::Stream) -> Result<()>,
    ) -> Result<Token> {
        let (token, ()) = state.submit(backend, device, after, |_, backend, stream, handle| {
            work(backend, handle)?;
            note(stream);
            Ok(())
        })?;
        Ok(token)
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
        let mut stats = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats();
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
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
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
