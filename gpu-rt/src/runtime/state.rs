//! The runtime's mutable state behind its one lock: the token planner, the driver handles of
//! the planner's events (its streams' are in their own table, [`super::streams`]), the kernel
//! cache; and the code that carries a plan out on the backend, step by step, each under the
//! device guard, up to the operation's own call, which [`Planned`] makes after the lock is let
//! go. (Memory has a lock per device.)

use alloc::ffi::CString;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ffi::{CStr, c_void};

use super::events::EventPool;
use super::guard::with_device;
use super::health::Health;
use super::lock::BackoffMutex;
use super::memory::DeviceMemory;
use super::streams::{StreamSlot, StreamTable, StreamWriter};
use super::{ModuleId, RuntimeStats};
use gpu_core::backend::{Backend, DeviceInfo};
use gpu_core::error::{Error, Result};
use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::token::{OpId, PendingWait, PlanStep, Planner, ProgramReport, Token};

/// The work of one planned operation, called at its `Run` step with the stream it got.
pub(crate) type Work<'w, B> =
    dyn FnMut(&mut State<B>, &B, StreamId, <B as Backend>::Stream) -> Result<()> + 'w;

/// A plan with no operation (join, fork, wait): a `Run` step would be a planner bug.
pub(crate) fn no_work<B: Backend>(
    _: &mut State<B>,
    _: &B,
    stream: StreamId,
    _: B::Stream,
) -> Result<()> {
    Err(Error::UnknownStream { stream })
}

/// An operation whose plan has been carried out up to its own step: the driver call left to
/// make on `handle`, the driver stream of `stream`.
///
/// The call may be made after the state's lock is let go, so that threads on other streams
/// plan and submit meanwhile: until the call returns, no other thread can plan work that
/// must follow it. The operation's token, the only one that stands at the stream's new tail,
/// goes back to the caller only once the call is made, and every other plan that touches the
/// stream (a record, a wait, a release to the pool) needs a token at its tail, or orders only
/// what was submitted before this plan (a fork's event, a free's record of the streams that
/// used a buffer, which the borrow of its spans keeps from running meanwhile).
pub(crate) struct Planned<B: Backend> {
    /// The operation's token.
    pub(crate) token: Token,
    /// Its device.
    pub(crate) device: DeviceId,
    /// The planner's stream it runs on.
    pub(crate) stream: StreamId,
    /// That stream's driver handle.
    pub(crate) handle: B::Stream,
}

impl<B: Backend> Planned<B> {
    /// Makes the operation's driver call, `work`, on its stream under the device guard; a
    /// failure that loses the device comes back as [`Error::DeviceLost`].
    pub(crate) fn run<T>(
        &self,
        backend: &B,
        health: &Health,
        work: impl FnOnce(&B, B::Stream) -> Result<T>,
    ) -> Result<T> {
        let ran = with_device(backend, self.device, || work(backend, self.handle));
        health.lift(self.device, ran)
    }
}

/// What the host blocks on to wait for work, resolved to driver handles.
pub(crate) enum HostWait<B: Backend> {
    /// Nothing to wait for (a stream that was never created).
    Nothing,
    /// All work enqueued on a stream of a device so far.
    Stream(DeviceId, B::Stream),
    /// The work before an event's latest record, on the event's device.
    Event(DeviceId, B::Event),
}

impl<B: Backend> HostWait<B> {
    /// The device the wait blocks on (none for [`HostWait::Nothing`]).
    pub(crate) fn device(&self) -> Option<DeviceId> {
        match self {
            HostWait::Nothing => None,
            HostWait::Stream(device, _) | HostWait::Event(device, _) => Some(*device),
        }
    }

    /// Blocks until the work has finished; reports its failure (a failure that loses the
    /// device as [`Error::DeviceLost`], noted in `health`).
    pub(crate) fn block(&self, backend: &B, health: &Health) -> Result<()> {
        match *self {
            HostWait::Nothing => Ok(()),
            HostWait::Stream(device, stream) => health.lift(
                device,
                with_device(backend, device, || backend.stream_synchronize(stream)),
            ),
            HostWait::Event(device, event) => health.lift(device, backend.event_synchronize(event)),
        }
    }
}

/// A loaded kernel, the dynamic workgroup bytes it has been allowed, and its device's limits.
#[derive(Clone, Copy)]
struct LoadedKernel<K> {
    kernel: K,
    /// Dynamic workgroup bytes a launch may use: the device's default limit until the kernel's
    /// static bytes are known (at its first launch with dynamic bytes), then as allowed.
    allowed_bytes: u32,
    /// The device's opt-in limit, the most static and dynamic bytes together may reach.
    opt_in_limit: u32,
    /// The workgroup bytes the kernel declares statically, asked of the backend at its first
    /// launch with dynamic workgroup bytes (`None` before).
    static_bytes: Option<u32>,
    /// The program's module it came from (`None`: the backend's library).
    module: Option<ModuleId>,
    /// Its device, and that device's epoch when it was loaded (a reset unloads it).
    device: DeviceId,
    epoch: u32,
}

/// A program's module image: loaded on a device at the first kernel asked of it there.
struct ModuleSlot<M> {
    /// The image's address (the loader keeps it readable until the module is unloaded).
    image: usize,
    /// The module as loaded on each device, by device index.
    loaded: Vec<Option<M>>,
    /// Indices of its kernels by name, then by device.
    kernels: hashbrown::HashMap<CString, Vec<Option<KernelIndex>>>,
    /// Set by unloading: its kernels are refused from then on.
    unloaded: bool,
}

/// Where a loaded kernel sits in the state: what a [`super::Kernel`] handle holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelIndex(u32);

pub(crate) struct State<B: Backend> {
    pub(crate) planner: Planner,
    /// Steps being carried out (a reused buffer).
    steps: Vec<PlanStep>,
    /// Driver streams of the planner's stream ids (the table is shared with the allocator's
    /// driver; the state writes it, and reads its own copy).
    streams: StreamWriter<B::Stream>,
    /// Driver events of the planner's event ids, with their devices.
    events: Vec<Option<(DeviceId, B::Event)>>,
    /// Where driver events come from and go back to (shared with the allocators).
    event_pool: Arc<EventPool<B::Event>>,
    /// Indices of loaded kernels by name, then by device: looked up by `&str` with no
    /// allocation, once per handle.
    kernel_names: hashbrown::HashMap<String, Vec<Option<KernelIndex>>>,
    /// Loaded kernels, in loading order.
    kernels: Vec<LoadedKernel<B::Kernel>>,
    /// Module images programs loaded, by [`ModuleId`].
    modules: Vec<ModuleSlot<B::Module>>,
    next_op: u32,
    /// Events whose last record failed and was replaced by synchronising its stream: the
    /// work before that point has finished, so waits on them are skipped until the next record.
    completed_on_host: Vec<EventId>,
    /// Set when a failed record or wait left stream ordering unknown (a failure that lost
    /// its device does not: that device refuses everything, the others go on).
    pub(crate) poisoned: Option<Error>,
    /// Which devices are lost (shared with the runtime).
    health: Arc<Health>,
    counts: Counts,
}

#[derive(Default)]
struct Counts {
    stream_acquires: u64,
    streams_created: u64,
    event_acquires: u64,
    operations: u64,
    waits: u64,
}

impl<B: Backend> State<B> {
    pub(crate) fn new(
        infos: &[DeviceInfo],
        health: Arc<Health>,
        streams: Arc<StreamTable<B::Stream>>,
        event_pool: Arc<EventPool<B::Event>>,
    ) -> Self {
        Self {
            planner: Planner::new(infos.len()),
            steps: Vec::new(),
            streams: StreamWriter::new(streams),
            events: Vec::new(),
            event_pool,
            kernel_names: hashbrown::HashMap::new(),
            kernels: Vec::new(),
            modules: Vec::new(),
            next_op: 0,
            completed_on_host: Vec::new(),
            poisoned: None,
            health,
            counts: Counts::default(),
        }
    }

    /// Plans one operation on `device` after `after` and carries out every step of the plan
    /// but the operation's own: what is left is its driver call, on the stream the plan chose,
    /// which the caller makes with [`Planned::run`], after letting the state's lock go where it
    /// can (see [`Planned`]). On a failure the operation's token is discarded (its streams go
    /// back to the pools) and the error returned.
    pub(crate) fn plan(
        &mut self,
        backend: &B,
        device: DeviceId,
        after: &mut Vec<Token>,
    ) -> Result<Planned<B>> {
        let op = OpId(self.next_op);
        let token = self.planner.run(op, device, after)?;
        self.next_op = self.next_op.wrapping_add(1);
        self.counts.operations += 1;
        // After the previous token on its stream, the plan is the run alone.
        let run = match self.planner.take_lone_run() {
            Some(stream) => self.stream(stream).map(|(_, handle)| (stream, handle)),
            None => {
                let mut run = None;
                let executed = self.execute(backend, &mut |_, _, stream, handle| {
                    // A plan of one operation has one `Run` step: a second would be a planner
                    // bug.
                    match run.replace((stream, handle)) {
                        None => Ok(()),
                        Some(_) => Err(Error::UnknownStream { stream }),
                    }
                });
                // No `Run` step at all would also be a planner bug, reported rather than
                // trusted.
                executed.and_then(|()| {
                    run.ok_or_else(|| Error::UnknownStream {
                        stream: StreamId(u32::MAX),
                    })
                })
            }
        };
        match run {
            Ok((stream, handle)) => Ok(Planned {
                token,
                device,
                stream,
                handle,
            }),
            Err(e) => {
                self.abandon(backend, token);
                Err(e)
            }
        }
    }

    /// Plans one operation as [`State::plan`] does and runs `work` on its stream at once,
    /// under the state's lock (for work that must not move while the lock is free: a
    /// stream-ordered allocation, whose memory lock is taken before the state's), given the
    /// planner's stream. Returns the token, the stream and `work`'s value; on a failure the
    /// token is discarded.
    pub(crate) fn submit<T>(
        &mut self,
        backend: &B,
        device: DeviceId,
        after: &mut Vec<Token>,
        work: impl FnOnce(&B, StreamId) -> Result<T>,
    ) -> Result<(Token, StreamId, T)> {
        let planned = self.plan(backend, device, after)?;
        match planned.run(backend, &self.health, |backend, _| {
            work(backend, planned.stream)
        }) {
            Ok(output) => Ok((planned.token, planned.stream, output)),
            Err(e) => {
                self.abandon(backend, planned.token);
                Err(e)
            }
        }
    }

    /// Carries out a plan without an operation that produced `token`.
    pub(crate) fn finish(&mut self, backend: &B, token: Token) -> Result<Token> {
        match self.execute(backend, &mut no_work) {
            Ok(()) => Ok(token),
            Err(e) => {
                self.abandon(backend, token);
                Err(e)
            }
        }
    }

    /// Drops a token whose work failed: the planner releases what it held.
    pub(crate) fn abandon(&mut self, backend: &B, token: Token) {
        if self.planner.discard(token).is_ok() {
            // Releases are bookkeeping only; nothing here can fail that matters.
            let _ = self.execute(backend, &mut no_work);
        }
    }

    /// Carries out the planner's pending steps in order; stops at the first failure.
    pub(crate) fn execute(&mut self, backend: &B, work: &mut Work<'_, B>) -> Result<()> {
        let mut steps = core::mem::take(&mut self.steps);
        self.planner.take_steps(&mut steps);
        // Pool releases are bookkeeping of the planner's alone: no call for them.
        let result = steps
            .iter()
            .filter(|step| {
                !matches!(
                    step,
                    PlanStep::ReleaseStream { .. } | PlanStep::ReleaseEvent { .. }
                )
            })
            .try_for_each(|&step| self.carry_out(backend, step, work));
        steps.clear();
        self.steps = steps;
        result
    }

    fn carry_out(&mut self, backend: &B, step: PlanStep, work: &mut Work<'_, B>) -> Result<()> {
        match step {
            PlanStep::AcquireStream { device, stream, .. } => {
                self.counts.stream_acquires += 1;
                let created = self.ensure_stream(backend, device, stream).map(drop);
                self.health.lift(device, created)
            }
            PlanStep::AcquireEvent { device, event, .. } => {
                self.counts.event_acquires += 1;
                let created = self.ensure_event(backend, device, event).map(drop);
                self.health.lift(device, created)
            }
            PlanStep::ReleaseStream { .. } | PlanStep::ReleaseEvent { .. } => Ok(()),
            PlanStep::DestroyStream { stream, .. } => self.destroy_stream(backend, stream.index()),
            PlanStep::DestroyEvent { event, .. } => {
                self.give_back_event(event.index());
                Ok(())
            }
            PlanStep::Record { event, stream } => {
                let event_id = event;
                let (device, stream) = self.stream(stream)?;
                let (_, event) = self.event(event)?;
                let recorded = with_device(backend, device, || {
                    backend
                        .event_record(event, stream)
                        .map(|()| true)
                        .or_else(|_| {
                            // The host stands in for the record: once the stream's work so far has
                            // finished, waits on the event are already satisfied and are skipped.
                            backend.stream_synchronize(stream).map(|()| false)
                        })
                });
                let recorded = self.lift_or_poison(device, recorded)?;
                self.note_completed_on_host(event_id, !recorded);
                Ok(())
            }
            PlanStep::Wait { event, .. } if self.completed_on_host(event) => Ok(()),
            PlanStep::Wait { stream, event } => {
                self.counts.waits += 1;
                let (device, stream) = self.stream(stream)?;
                let (event_device, event) = self.event(event)?;
                let waited =
                    with_device(backend, device, || backend.stream_wait_event(stream, event))
                        .map_err(|e| self.health.note(device, e))
                        // The host can order the stream instead, by waiting for the event itself
                        // (a lost device's record is one the stream cannot wait for: its work died).
                        .or_else(|_| backend.event_synchronize(event));
                self.lift_or_poison(event_device, waited)
            }
            PlanStep::Run { stream, .. } => {
                let (_, handle) = self.stream(stream)?;
                work(self, backend, stream, handle)
            }
            PlanStep::SynchronizeStream { stream } => self.synchronize_stream(backend, stream),
            PlanStep::SynchronizeEvent { event } if self.completed_on_host(event) => Ok(()),
            PlanStep::SynchronizeEvent { event } => {
                let (device, event) = self.event(event)?;
                HostWait::Event(device, event).block(backend, &self.health)
            }
        }
    }

    /// Passes a record's or wait's outcome on: a failure that loses `device` becomes
    /// [`Error::DeviceLost`] (that device refuses everything from now on); any other leaves
    /// stream order unknown and poisons the runtime.
    fn lift_or_poison<T>(&mut self, device: DeviceId, result: Result<T>) -> Result<T> {
        self.health.lift(device, result).inspect_err(|e| {
            if !matches!(e, Error::DeviceLost { .. }) {
                self.poisoned = Some(e.clone());
            }
        })
    }

    /// Whether `event`'s last record was done by the host (see `completed_on_host`).
    #[inline]
    fn completed_on_host(&self, event: EventId) -> bool {
        !self.completed_on_host.is_empty() && self.completed_on_host.contains(&event)
    }

    /// Notes whether `event`'s latest record was replaced by a host synchronisation.
    #[inline]
    fn note_completed_on_host(&mut self, event: EventId, on_host: bool) {
        if on_host {
            self.completed_on_host.push(event);
        } else if !self.completed_on_host.is_empty() {
            self.completed_on_host.retain(|&e| e != event);
        }
    }

    /// The driver stream of `stream`, created now if it has none yet (first use, or an
    /// earlier creation failed).
    fn ensure_stream(
        &mut self,
        backend: &B,
        device: DeviceId,
        stream: StreamId,
    ) -> Result<B::Stream> {
        if let Some(handle) = self.streams.handle(stream) {
            return Ok(handle);
        }
        let handle = with_device(backend, device, || backend.stream_create(device))?;
        self.counts.streams_created += 1;
        self.streams.set(
            stream,
            StreamSlot {
                device,
                handle: Some(handle),
                adopted: false,
            },
        );
        Ok(handle)
    }

    /// The driver event of `event`, taken from the pool now if it has none yet.
    fn ensure_event(&mut self, backend: &B, device: DeviceId, event: EventId) -> Result<B::Event> {
        let index = event.index();
        if self.events.len() <= index {
            self.events.resize(index + 1, None);
        }
        if let Some((_, handle)) = self.events[index] {
            return Ok(handle);
        }
        let handle = self.event_pool.take(backend, device)?;
        self.events[index] = Some((device, handle));
        Ok(handle)
    }

    /// A stream id for `handle`, a stream of `device` that another program created: used like
    /// the runtime's own streams (the allocator's lanes, events recorded and waited on), never
    /// destroyed.
    pub(crate) fn adopt_stream(&mut self, device: DeviceId, handle: B::Stream) -> Result<StreamId> {
        let stream = self.planner.reserve_stream(device)?;
        self.streams.set(
            stream,
            StreamSlot {
                device,
                handle: Some(handle),
                adopted: true,
            },
        );
        Ok(stream)
    }

    /// Destroys the driver stream at `index`, if any and not adopted; a failed destroy keeps
    /// the handle.
    fn destroy_stream(&mut self, backend: &B, index: usize) -> Result<()> {
        let Some((device, handle)) = self.streams.take_own(index) else {
            return Ok(());
        };
        with_device(backend, device, || backend.stream_destroy(handle))
            .inspect_err(|_| self.streams.put_back(index, handle))
    }

    /// Gives the driver event at `index`, if any, back to the pool (the planner no longer
    /// names it).
    fn give_back_event(&mut self, index: usize) {
        if let Some((device, handle)) = self.events.get_mut(index).and_then(Option::take) {
            self.note_completed_on_host(EventId(index as u32), false);
            self.event_pool.put(device, handle);
        }
    }

    #[inline]
    fn stream(&self, stream: StreamId) -> Result<(DeviceId, B::Stream)> {
        self.streams.get(stream)
    }

    /// The driver event of `event`.
    pub(crate) fn event_handle(&self, event: EventId) -> Result<B::Event> {
        Ok(self.event(event)?.1)
    }

    fn event(&self, event: EventId) -> Result<(DeviceId, B::Event)> {
        self.events
            .get(event.index())
            .copied()
            .flatten()
            .ok_or_else(|| Error::UnknownEvent { event })
    }

    /// Blocks until the work on `stream` has finished (a stream never created has none).
    pub(crate) fn synchronize_stream(&self, backend: &B, stream: StreamId) -> Result<()> {
        self.stream_wait(stream)?.block(backend, &self.health)
    }

    /// The driver handles a begun wait blocks on, to use after the state's lock is released
    /// (the planner keeps them out of its pools until the wait ends).
    pub(crate) fn host_wait(&self, pending: &PendingWait) -> Result<HostWait<B>> {
        match *pending {
            PendingWait::Stream(stream) => self.stream_wait(stream),
            PendingWait::Event(event) if self.completed_on_host(event) => Ok(HostWait::Nothing),
            PendingWait::Event(event) => {
                let (device, event) = self.event(event)?;
                Ok(HostWait::Event(device, event))
            }
        }
    }

    /// What the host blocks on to wait for the work enqueued on `stream` so far.
    pub(crate) fn stream_wait(&self, stream: StreamId) -> Result<HostWait<B>> {
        match self.stream(stream) {
            Ok((device, handle)) => Ok(HostWait::Stream(device, handle)),
            // A stream never created has no work to wait for.
            Err(Error::UnknownStream { .. }) => Ok(HostWait::Nothing),
            Err(e) => Err(e),
        }
    }

    /// Kernel `name` of the backend's library on `device`, loaded at the first call.
    pub(crate) fn load_kernel(
        &mut self,
        backend: &B,
        device: DeviceId,
        name: &str,
        info: &DeviceInfo,
    ) -> Result<KernelIndex> {
        let slot = device.index();
        if let Some(index) = self
            .kernel_names
            .get(name)
            .and_then(|by_device| by_device.get(slot).copied().flatten())
        {
            return Ok(index);
        }
        let kernel = with_device(backend, device, || backend.kernel(device, name))?;
        let index = self.push_kernel(kernel, info, None, device);
        let by_device = self.kernel_names.entry(name.to_string()).or_default();
        if by_device.len() <= slot {
            by_device.resize(slot + 1, None);
        }
        by_device[slot] = Some(index);
        Ok(index)
    }

    fn push_kernel(
        &mut self,
        kernel: B::Kernel,
        info: &DeviceInfo,
        module: Option<ModuleId>,
        device: DeviceId,
    ) -> KernelIndex {
        let index = KernelIndex(self.kernels.len() as u32);
        self.kernels.push(LoadedKernel {
            kernel,
            allowed_bytes: info.workgroup.default_per_block,
            opt_in_limit: info.workgroup.max_per_block(),
            static_bytes: None,
            module,
            device,
            epoch: self.health.epoch(device),
        });
        index
    }

    /// Forgets every driver object of `device` after the backend reset it (the reset destroyed
    /// them: nothing here destroys them again): stream and event handles are made afresh at
    /// their next use, kernels and modules are loaded again when asked for, and kernel handles
    /// from before are refused ([`Error::StaleAfterReset`]).
    pub(crate) fn forget_device(&mut self, device: DeviceId) {
        self.streams.forget_device(device);
        let mut forgotten = Vec::new();
        for (index, event) in self.events.iter_mut().enumerate() {
            if event.is_some_and(|(of, _)| of == device) {
                *event = None;
                forgotten.push(EventId(index as u32));
            }
        }
        self.completed_on_host
            .retain(|event| !forgotten.contains(event));
        let slot = device.index();
        for by_device in self.kernel_names.values_mut() {
            if let Some(entry) = by_device.get_mut(slot) {
                *entry = None;
            }
        }
        for module in &mut self.modules {
            if let Some(loaded) = module.loaded.get_mut(slot) {
                *loaded = None;
            }
            for by_device in module.kernels.values_mut() {
                if let Some(entry) = by_device.get_mut(slot) {
                    *entry = None;
                }
            }
        }
    }

    /// Loads the module image at `image` on `device` now (so a bad image fails here) and
    /// registers it; other devices load it at their first kernel.
    ///
    /// # Safety
    /// As [`super::Runtime::load_module`].
    pub(crate) unsafe fn load_module(
        &mut self,
        backend: &B,
        device: DeviceId,
        image: *const c_void,
    ) -> Result<ModuleId> {
        // SAFETY: the caller's promise for the image.
        let module = with_device(backend, device, || unsafe {
            backend.module_load(device, image)
        })?;
        let mut loaded = Vec::new();
        loaded.resize(self.planner.device_count(), None);
        loaded[device.index()] = Some(module);
        let id = ModuleId(self.modules.len() as u32);
        self.modules.push(ModuleSlot {
            image: image as usize,
            loaded,
            kernels: hashbrown::HashMap::new(),
            unloaded: false,
        });
        Ok(id)
    }

    fn module(&mut self, module: ModuleId) -> Result<&mut ModuleSlot<B::Module>> {
        match self.modules.get_mut(module.0 as usize) {
            Some(slot) if !slot.unloaded => Ok(slot),
            _ => Err(Error::UnknownKernel {
                backend: "runtime",
                name: alloc::format!("(module {} was unloaded or never loaded)", module.0),
            }),
        }
    }

    /// Kernel `name` of `module` on `device`, loading the module there first if needed.
    pub(crate) fn module_kernel(
        &mut self,
        backend: &B,
        module: ModuleId,
        device: DeviceId,
        name: &CStr,
        info: &DeviceInfo,
    ) -> Result<KernelIndex> {
        let slot = device.index();
        let entry = self.module(module)?;
        if let Some(index) = entry
            .kernels
            .get(name)
            .and_then(|by_device| by_device.get(slot).copied().flatten())
        {
            return Ok(index);
        }
        let loaded = match entry.loaded.get(slot).copied().flatten() {
            Some(loaded) => loaded,
            None => {
                let image = entry.image as *const c_void;
                // SAFETY: the image stays readable until the module is unloaded (the
                // promise `load_module` took), and it is not unloaded yet.
                let loaded = with_device(backend, device, || unsafe {
                    backend.module_load(device, image)
                })?;
                self.module(module)?.loaded[slot] = Some(loaded);
                loaded
            }
        };
        let kernel = with_device(backend, device, || backend.module_kernel(loaded, name))?;
        let index = self.push_kernel(kernel, info, Some(module), device);
        let by_device = self.module(module)?.kernels.entry(name.into()).or_default();
        if by_device.len() <= slot {
            by_device.resize(slot + 1, None);
        }
        by_device[slot] = Some(index);
        Ok(index)
    }

    /// Unloads `module` on every device it was loaded on; its kernels are refused afterwards.
    /// Every device is tried; the first failure is returned.
    pub(crate) fn unload_module(&mut self, backend: &B, module: ModuleId) -> Result<()> {
        let entry = self.module(module)?;
        entry.unloaded = true;
        let loaded: Vec<(usize, B::Module)> = entry
            .loaded
            .iter_mut()
            .enumerate()
            .filter_map(|(device, slot)| slot.take().map(|m| (device, m)))
            .collect();
        let mut first = Ok(());
        for (device, module) in loaded {
            let device = DeviceId(device as u32);
            let unloaded = with_device(backend, device, || backend.module_unload(module));
            if first.is_ok() {
                first = unloaded;
            }
        }
        first
    }

    /// The loaded kernel at `index` (of `device`), allowed `bytes` of dynamic workgroup memory
    /// first if that is more than it has been (the opt-in above the default limit).
    ///
    /// The kernel's static workgroup bytes count against the same limits, so at its first
    /// launch with dynamic bytes the runtime asks for them (once) and the dynamic bytes
    /// may reach each limit less them; more than the opt-in limit allows is
    /// [`Error::LimitExceeded`], with nothing changed. The opt-in asks for all the kernel may
    /// have (the most a launch may then use; it reserves nothing), so it happens once per
    /// kernel, and runtimes sharing a backend, and with it the driver's kernel object, never
    /// lower each other's limit (opting in exact sizes, one runtime's 50 KB undid another's
    /// 64 KB and failed its next launch).
    #[inline]
    pub(crate) fn kernel_for(
        &mut self,
        backend: &B,
        device: DeviceId,
        index: KernelIndex,
        bytes: u32,
    ) -> Result<B::Kernel> {
        let loaded = self
            .kernels
            .get_mut(index.0 as usize)
            // Handles come only from this state, which never unloads: not reached.
            .ok_or_else(|| Error::UnknownKernel {
                backend: backend.name(),
                name: String::from("(a handle this runtime did not make)"),
            })?;
        if loaded.epoch != self.health.epoch(loaded.device) {
            return Err(Error::StaleAfterReset {
                device: loaded.device,
                what: "kernel",
            });
        }
        if let Some(module) = loaded.module
            && self.modules[module.0 as usize].unloaded
        {
            return Err(Error::UnknownKernel {
                backend: backend.name(),
                name: alloc::format!("(a kernel of module {}, unloaded)", module.0),
            });
        }
        if bytes > loaded.allowed_bytes || (bytes > 0 && loaded.static_bytes.is_none()) {
            let kernel = loaded.kernel;
            let static_bytes = match loaded.static_bytes {
                Some(known) => known,
                None => {
                    let known = backend.kernel_static_workgroup_bytes(kernel)?;
                    loaded.static_bytes = Some(known);
                    loaded.allowed_bytes = loaded.allowed_bytes.saturating_sub(known);
                    known
                }
            };
            let most = loaded.opt_in_limit.saturating_sub(static_bytes);
            if bytes > most {
                return Err(Error::LimitExceeded {
                    what: "dynamic workgroup memory per workgroup",
                    required: bytes as usize,
                    limit: most as usize,
                    detail: alloc::vec![alloc::format!(
                        "{device}'s opt-in limit of {} bytes less the kernel's {static_bytes} \
                         static bytes",
                        loaded.opt_in_limit
                    )],
                });
            }
            if bytes > loaded.allowed_bytes {
                with_device(backend, device, || {
                    backend.kernel_allow_workgroup_bytes(kernel, most)
                })?;
                loaded.allowed_bytes = most;
            }
        }
        Ok(loaded.kernel)
    }

    /// The planner's and the pools' counters (memory and lock figures are added by the caller).
    pub(crate) fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            stream_acquires: self.counts.stream_acquires,
            streams_created: self.counts.streams_created,
            event_acquires: self.counts.event_acquires,
            events_created: self.event_pool.created(),
            operations: self.counts.operations,
            waits: self.counts.waits,
            planner: self.planner.footprint(),
            ..RuntimeStats::default()
        }
    }

    /// Waits for all work, then gives back each device's cached memory, every stream and every
    /// event. Returns the program report, the bytes trimmed and the first failure, if any:
    /// teardown goes on past failures so that as much as possible is released.
    pub(crate) fn teardown(
        &mut self,
        backend: &B,
        memory: &mut [BackoffMutex<DeviceMemory<B>>],
    ) -> Teardown {
        let mut errors: Vec<Error> = Vec::new();
        let mut note = |result: Result<()>| {
            if let Err(e) = result {
                errors.push(e);
            }
        };
        let program = self.planner.end_program();
        // Once every stream is idle, the first trim retries the frees the driver failed (they
        // may wait for events recorded just now). With the streams synchronised again, the
        // allocator takes every fence and every free pending on an event as complete without
        // asking the driver (a query that fails, or a backend that answers "not yet" for an
        // event its synchronised stream recorded, or a fence recorded by the last trim, would
        // otherwise leave blocks of one segment apart and the segment cached), and the second
        // trim finds every free complete and releases every segment.
        let mut trimmed = 0;
        for round in 0..2 {
            for index in 0..self.streams.len() {
                note(self.synchronize_stream(backend, StreamId(index as u32)));
            }
            for device in memory.iter_mut().map(BackoffMutex::get_mut) {
                device.release_by_address();
                if round == 1 {
                    device.all_streams_idle(backend, self.streams.shared());
                }
                trimmed += device
                    .trim(backend, self.streams.shared())
                    .unwrap_or_else(|e| {
                        note(Err(e));
                        0
                    });
            }
        }
        for module in 0..self.modules.len() {
            if !self.modules[module].unloaded {
                note(self.unload_module(backend, ModuleId(module as u32)));
            }
        }
        self.planner.drain_pools();
        let mut steps = core::mem::take(&mut self.steps);
        self.planner.take_steps(&mut steps);
        for step in steps.drain(..) {
            note(self.carry_out(backend, step, &mut no_work));
        }
        // Streams and events the planner no longer names (those of outstanding tokens) go too;
        // every event goes back to the pool, and the pool's events are destroyed. A destroy
        // the driver refuses is tried once more (a failed call changes nothing).
        for index in 0..self.events.len() {
            self.give_back_event(index);
        }
        for device in memory.iter_mut() {
            device.get_mut().events.give_back(None);
        }
        let mut events = self.event_pool.drain();
        for _ in 0..2 {
            for index in 0..self.streams.len() {
                note(self.destroy_stream(backend, index));
            }
            events.retain(|&(device, handle)| {
                let destroyed = with_device(backend, device, || backend.event_destroy(handle));
                let failed = destroyed.is_err();
                note(destroyed);
                failed
            });
        }
        let streams_left = self.streams.own_live();
        let events_left = events.len();
        Teardown {
            program,
            trimmed,
            errors,
            streams_left,
            events_left,
        }
    }
}

/// What tearing the state down did and left.
pub(crate) struct Teardown {
    pub(crate) program: ProgramReport,
    /// Bytes of cached memory given back.
    pub(crate) trimmed: usize,
    /// Every failure met, in order.
    pub(crate) errors: Vec<Error>,
    /// Driver streams the state could not destroy.
    pub(crate) streams_left: usize,
    /// Driver events it could not destroy.
    pub(crate) events_left: usize,
}
