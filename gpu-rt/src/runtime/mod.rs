//! What users hold: a [`Runtime`] over one backend, composing the token planner, the caching
//! allocator and the lock table into streams of work, buffers and pinned host memory.
//!
//! Ownership makes misuse hard: a [`Token`] is consumed by value (use one twice through
//! [`Runtime::fork`]); a [`Buffer`] borrows the runtime, so it cannot outlive it, and freeing
//! it (dropping it, or [`Runtime::free`]) orders the free after every stream that used it; a
//! [`LockedHost`] borrows the caller's memory for as long as it is pinned and waits for the
//! transfers that use it before unpinning. Every driver call that needs a device runs under
//! the [`DeviceGuard`], so the caller's current device is the same after every call.

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ModuleId(u32);

/// Tunables of a [`Runtime`].
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
    pub fn pool_calls_saved(&self) -> u64 {
        (self.stream_acquires - self.streams_created) + (self.event_acquires - self.events_created)
    }
}

/// What shutting a runtime down found.
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
    pub fn new(backend: B) -> Result<Self> {
        Self::with_config(backend, RuntimeConfig::default())
    }

    /// Opens every device of `backend`.
    pub fn with_config(backend: B, config: RuntimeConfig) -> Result<Self> {
        Self::shared(Arc::new(backend), config)
    }

    /// Opens every device of a backend the caller keeps a handle to as well (to read a
    /// wrapper's counters after shutdown, say).
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
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// How many devices the runtime drives.
    pub fn device_count(&self) -> usize {
        self.infos.len()
    }

    /// What `device` is and can do.
    pub fn device_info(&self, device: DeviceId) -> Result<&DeviceInfo> {
        self.of_device(&self.infos, device)
    }

    /// What opening the runtime found and did about `device`'s access to `peer`'s memory.
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
    pub fn fork(&self, token: Token, count: usize) -> Result<Vec<Token>> {
        self.fork_with(token, count, token::Planner::fork)
    }

    /// Forks `token` into `count` branches that share one event recorded now and gives its
    /// stream back to the pool at once (no branch keeps it), for layers whose handles may be
    /// abandoned without a word: such a handle then holds an event, never a stream. Counts are
    /// refused as by [`Runtime::fork`].
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
    pub fn release(&self, token: Token) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.planner.release(token)?;
        state.execute(&self.backend, &mut state::no_work)
    }

    /// Ends `token` if its work has completed already, without blocking: `Ok(None)` then (one
    /// event query, and no synchronisation: the query reported success, so there is no error
    /// left to observe); otherwise the token comes back, unchanged. Only a fork branch can be
    /// found done: a token that owns its stream is handed back unasked (the backend has no
    /// stream query).
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
    pub fn lock_range(&self, ptr: usize, len: usize) -> Result<Locked> {
        self.pins.lock(ptr, len)
    }

    /// Releases one raw lock (taken by [`Runtime::lock_range`]) on the entry containing `ptr`.
    /// An entry that only guards hold ([`LockedHost`]) is [`Error::PinOwned`] and stays as it
    /// was: a raw unlock never removes the pin a live guard relies on.
    pub fn unlock_range(&self, ptr: usize) -> Result<Unlocked> {
        self.pins.unlock(ptr)
    }

    /// The address `device` uses for host range `[ptr, ptr + len)` if every byte is pinned.
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
    pub unsafe fn load_module(&self, device: DeviceId, image: *const c_void) -> Result<ModuleId> {
        self.device_info(device)?;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.state()?.load_module(&self.backend, device, image) }
    }

    /// Unloads `module` on every device; its kernels are refused afterwards.
    pub fn unload_module(&self, module: ModuleId) -> Result<()> {
        self.state()?.unload_module(&self.backend, module)
    }

    /// Kernel `name` of `module` on `device` (the module is loaded there first if it is not):
    /// a handle to launch it by, cached per module, name and device.
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
    pub fn allocator_stats(&self, device: DeviceId, kind: MemoryKind) -> Result<AllocatorStats> {
        Ok(self.memory(device)?.allocator_stats(kind))
    }

    /// The runtime's counters.
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
    pub fn shutdown(self) -> Result<ShutdownReport> {
        self.shutdown_report().into_result()
    }

    /// Shuts down as [`Runtime::shutdown`] does and always returns the report: the failures
    /// met on the way (it goes on past each) and what could not be given back.
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
