//! A backend wrapper that records every stream and event call crossing the backend boundary,
//! as a trace for the checker (what the driver really saw, not what the planner meant), counts
//! live allocations and host registrations, and can make the Nth call fail: the conformance
//! suite's instrument, usable on any backend.
//!
//! Raw handles get trace ids at creation; a handle value the driver reuses after a destroy
//! gets a new id, so a use of the old object after its destroy still shows as one.

use alloc::vec::Vec;
use std::sync::{Mutex, PoisonError};

use core::ffi::{CStr, c_void};
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};
use gpu_core::backend::{Access, Backend, DeviceInfo, FillValue, KernelArg, LaunchDims};
use gpu_core::error::{ByteRange, DriverError, Error, Result};
use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::token::{Defect, TraceOp, check};

/// Trace ids given to raw handles, newest last.
struct Names<H> {
    handles: Vec<(H, u32)>,
    next: u32,
}

impl<H: PartialEq + Copy> Names<H> {
    const fn new() -> Self {
        Self {
            handles: Vec::new(),
            next: 0,
        }
    }

    fn create(&mut self, handle: H) -> u32 {
        let id = self.next;
        self.next += 1;
        self.handles.push((handle, id));
        id
    }

    /// The id of `handle`: its newest name, or a fresh one for a handle never seen created
    /// (which the checker then reports as used without creation).
    fn of(&mut self, handle: H) -> u32 {
        match self.handles.iter().rev().find(|(h, _)| *h == handle) {
            Some(&(_, id)) => id,
            None => self.create(handle),
        }
    }
}

/// What the wrapped backend holds for the caller, each with its device (a reset of a device
/// destroys that device's streams, events and memory).
struct Held<B: Backend> {
    streams: Vec<(B::Stream, DeviceId)>,
    /// Adopted streams: not the caller's to destroy (not counted), but they name a device.
    adopted: Vec<(B::Stream, DeviceId)>,
    events: Vec<(B::Event, DeviceId)>,
    /// With their device (`None`: allocated on a stream the wrapper never saw made).
    allocations: Vec<(usize, Option<DeviceId>)>,
    registrations: usize,
}

impl<B: Backend> Held<B> {
    const fn new() -> Self {
        Self {
            streams: Vec::new(),
            adopted: Vec::new(),
            events: Vec::new(),
            allocations: Vec::new(),
            registrations: 0,
        }
    }

    fn counts(&self) -> LiveObjects {
        LiveObjects {
            streams: self.streams.len(),
            events: self.events.len(),
            allocations: self.allocations.len(),
            registrations: self.registrations,
        }
    }

    /// The device of `stream` (created or adopted through the wrapper).
    fn device_of(&self, stream: B::Stream) -> Option<DeviceId> {
        self.streams
            .iter()
            .chain(&self.adopted)
            .find(|&&(s, _)| s == stream)
            .map(|&(_, device)| device)
    }
}

/// Removes the first entry whose key is `key`.
fn forget<K: PartialEq, V>(entries: &mut Vec<(K, V)>, key: &K) {
    if let Some(index) = entries.iter().position(|(k, _)| k == key) {
        entries.swap_remove(index);
    }
}

struct Log<B: Backend> {
    ops: Vec<TraceOp>,
    streams: Names<B::Stream>,
    events: Names<B::Event>,
    held: Held<B>,
    /// Calls counted so far (all but name, device count, device info and `is_current`).
    calls: u64,
    /// The call number that fails, once.
    fail_at: Option<u64>,
    /// Whether calls are recorded as a trace (else only counted).
    tracing: bool,
    /// Ordered device pairs given peer access through this wrapper: a peer copy between two
    /// devices with access both ways is recorded as direct.
    peer_access: Vec<(DeviceId, DeviceId)>,
}

/// Objects the wrapped backend holds for its caller right now.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::LiveObjects;
/// use std::sync::Arc;
///
/// let recorder = Arc::new(RecordingBackend::new(HostBackend::new(HostConfig::default())));
/// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// rt.wait(rt.fill(DeviceId(0), buffer.all(), 0, &mut vec![])?)?;
/// let live = recorder.live();
/// assert_eq!((live.allocations, live.streams), (1, 1)); // a segment, a pooled stream
/// drop(buffer);
/// rt.shutdown()?;
/// assert_eq!(recorder.live(), LiveObjects::default());
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// Streams created and not destroyed.
    pub streams: usize,
    /// Events created and not destroyed.
    pub events: usize,
    /// Allocations not freed.
    pub allocations: usize,
    /// Host registrations not undone.
    pub registrations: usize,
}

/// Wraps any backend and records its stream/event calls (successful ones) as [`TraceOp`]s.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_core::token::TraceOp;
/// use std::sync::Arc;
///
/// let recorder = Arc::new(RecordingBackend::new(HostBackend::new(HostConfig::default())));
/// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// rt.wait(rt.fill(DeviceId(0), buffer.all(), 0, &mut vec![])?)?;
/// drop(buffer);
/// rt.shutdown()?;
/// let trace = recorder.trace(); // what the driver saw
/// assert!(matches!(trace[0], TraceOp::CreateStream { .. }));
/// assert!(recorder.defects().is_empty()); // no leak, no use after destroy
/// # Ok::<(), Error>(())
/// ```
pub struct RecordingBackend<B: Backend> {
    inner: B,
    log: Mutex<Log<B>>,
}

impl<B: Backend> RecordingBackend<B> {
    /// Records the calls made to `inner`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let recorder = RecordingBackend::new(HostBackend::new(HostConfig::with_devices(2)));
    /// assert_eq!((recorder.device_count(), recorder.calls()), (2, 0)); // a `Backend` too
    /// let rt = Runtime::new(recorder)?;
    /// assert_eq!(rt.device_count(), 2);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn new(inner: B) -> Self {
        Self::with_trace(inner, true)
    }

    /// Counts the calls made to `inner` and the objects it holds, keeping no trace: for long
    /// runs, where a trace would grow with every call ([`RecordingBackend::trace`] stays empty).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use std::sync::Arc;
    ///
    /// let backend = HostBackend::new(HostConfig::default());
    /// let recorder = Arc::new(RecordingBackend::counting(backend));
    /// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 0, &mut vec![])?)?;
    /// assert!(recorder.calls() > 0 && recorder.trace().is_empty()); // counted, not traced
    /// assert_eq!(recorder.live().allocations, 1);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn counting(inner: B) -> Self {
        Self::with_trace(inner, false)
    }

    fn with_trace(inner: B, tracing: bool) -> Self {
        Self {
            inner,
            log: Mutex::new(Log {
                ops: Vec::new(),
                streams: Names::new(),
                events: Names::new(),
                held: Held::new(),
                calls: 0,
                fail_at: None,
                tracing,
                peer_access: Vec::new(),
            }),
        }
    }

    /// Makes call number `n` (counted from the wrapper's creation) fail once with an injected
    /// driver error, without reaching the wrapped backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use std::sync::Arc;
    ///
    /// let recorder = Arc::new(RecordingBackend::new(HostBackend::new(HostConfig::default())));
    /// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
    /// recorder.fail_call(recorder.calls() + 1); // the next call fails, once
    /// assert!(rt.alloc(DeviceId(0), MemoryKind::Device, 64).is_err());
    /// assert!(rt.alloc(DeviceId(0), MemoryKind::Device, 64).is_ok()); // nothing was left broken
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fail_call(&self, n: u64) {
        self.log().fail_at = Some(n);
    }

    /// Calls made so far (every trait method but `name`, `device_count`, `device_info` and
    /// `is_current`).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use std::sync::Arc;
    ///
    /// let recorder = Arc::new(RecordingBackend::new(HostBackend::new(HostConfig::default())));
    /// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let before = recorder.calls();
    /// drop(rt.alloc(DeviceId(0), MemoryKind::Device, 64)?); // a cache hit: no driver call
    /// assert_eq!(recorder.calls(), before);
    /// # drop(buffer);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn calls(&self) -> u64 {
        self.log().calls
    }

    /// What the wrapped backend holds for the caller right now.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use std::sync::Arc;
    ///
    /// let recorder = Arc::new(RecordingBackend::new(HostBackend::new(HostConfig::default())));
    /// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
    /// let mut host = vec![0u8; 4096];
    /// let locked = rt.lock_host(&mut host)?;
    /// assert_eq!(recorder.live().registrations, 1); // pinned through the driver
    /// drop(locked);
    /// assert_eq!(recorder.live().registrations, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn live(&self) -> LiveObjects {
        self.log().held.counts()
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log<B>> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a call; fails it if it is the one chosen by [`RecordingBackend::fail_call`].
    fn enter(&self, call: &'static str) -> Result<()> {
        let mut log = self.log();
        log.calls += 1;
        if log.fail_at == Some(log.calls) {
            log.fail_at = None;
            return Err(Error::Driver(DriverError {
                backend: "recording",
                call,
                name: "INJECTED_FAILURE",
                code: -1,
            }));
        }
        Ok(())
    }

    /// The wrapped backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let recorder = RecordingBackend::new(HostBackend::new(HostConfig::default()));
    /// let rt = Runtime::new(recorder)?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// // The wrapped backend, for what only it offers: the host backend's own counters.
    /// assert_eq!(rt.backend().inner().stats().allocations, 1);
    /// # drop(buffer);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The calls recorded so far.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_core::token::TraceOp;
    /// use std::sync::Arc;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(2));
    /// let recorder = Arc::new(RecordingBackend::new(backend));
    /// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
    /// let a = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let b = rt.alloc(DeviceId(1), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), a.all(), 1, &mut vec![])?;
    /// rt.wait(rt.copy(DeviceId(1), b.all(), a.all(), &mut vec![filled])?)?;
    /// let trace = recorder.trace();
    /// // The copy on device 1 waited for the fill on device 0 with an event, not the host.
    /// assert!(trace.iter().any(|op| matches!(op, TraceOp::Wait { .. })));
    /// assert!(trace.iter().any(|op| matches!(op, TraceOp::PeerCopy { direct: true, .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn trace(&self) -> Vec<TraceOp> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ops
            .clone()
    }

    /// Checks the calls recorded so far (a trace checked before every object was destroyed
    /// reports the live ones as leaks).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use std::sync::Arc;
    ///
    /// let recorder = Arc::new(RecordingBackend::new(HostBackend::new(HostConfig::default())));
    /// let rt = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 0, &mut vec![])?)?;
    /// // Checked while the runtime lives, its pooled stream is still alive: reported as a leak.
    /// assert_eq!(recorder.defects().len(), 1);
    /// drop(buffer);
    /// rt.shutdown()?;
    /// assert!(recorder.defects().is_empty());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn defects(&self) -> Vec<Defect> {
        check(&self.trace())
    }

    fn record(&self, result: &Result<impl Sized>, make: impl FnOnce(&mut Log<B>) -> TraceOp) {
        if result.is_ok() {
            let mut log = self.log();
            if !log.tracing {
                return;
            }
            let op = make(&mut log);
            log.ops.push(op);
        }
    }

    /// Records an operation enqueued on `stream`, with the device current at the call. A
    /// backend that enters each call's device itself ([`Backend::SCOPES_ITS_CALLS`]) ran it
    /// with the stream's device current whatever the thread had: the trace says "unknown".
    fn launch_on(&self, result: &Result<impl Sized>, stream: B::Stream) {
        let device = if result.is_ok() && !B::SCOPES_ITS_CALLS {
            self.inner.current_device().ok().flatten()
        } else {
            None
        };
        self.record(result, |log| TraceOp::Launch {
            stream: StreamId(log.streams.of(stream)),
            device,
        });
    }
}

impl<B: Backend> Backend for RecordingBackend<B> {
    type Stream = B::Stream;
    type Event = B::Event;
    type Kernel = B::Kernel;
    type Module = B::Module;
    const SCOPES_ITS_CALLS: bool = B::SCOPES_ITS_CALLS;
    const DEVICE_LOSS_ENDS_THE_PROCESS: bool = B::DEVICE_LOSS_ENDS_THE_PROCESS;
    type SavedCurrent = B::SavedCurrent;
    type Graph = B::Graph;

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn device_count(&self) -> usize {
        self.inner.device_count()
    }

    fn device_info(&self, device: DeviceId) -> Result<DeviceInfo> {
        self.inner.device_info(device)
    }

    fn current_device(&self) -> Result<Option<DeviceId>> {
        self.enter("current_device")?;
        self.inner.current_device()
    }

    fn set_current_device(&self, device: Option<DeviceId>) -> Result<()> {
        self.enter("set_current_device")?;
        self.inner.set_current_device(device)
    }

    fn save_current(&self) -> Result<B::SavedCurrent> {
        self.enter("save_current")?;
        self.inner.save_current()
    }

    fn restore_current(&self, saved: B::SavedCurrent) -> Result<()> {
        self.enter("restore_current")?;
        self.inner.restore_current(saved)
    }

    /// Forwarded, neither counted nor failed: a comparison, not a driver call.
    fn is_current(&self, saved: B::SavedCurrent, device: DeviceId) -> bool {
        self.inner.is_current(saved, device)
    }

    /// Forwarded, neither counted nor failed: wrapping a handle, not a driver call; the
    /// adopted stream is not counted as live (the runtime never destroys it).
    unsafe fn adopt_stream(&self, device: DeviceId, raw: usize) -> Result<B::Stream> {
        // SAFETY: the caller's promise, passed on.
        let adopted = unsafe { self.inner.adopt_stream(device, raw) };
        if let Ok(stream) = adopted {
            self.log().held.adopted.push((stream, device));
        }
        adopted
    }

    fn allocate(&self, device: DeviceId, kind: MemoryKind, bytes: usize) -> Result<Option<usize>> {
        self.enter("allocate")?;
        let result = self.inner.allocate(device, kind, bytes);
        if let Ok(Some(address)) = result {
            self.log().held.allocations.push((address, Some(device)));
        }
        result
    }

    fn allocate_on_stream(
        &self,
        stream: B::Stream,
        kind: MemoryKind,
        bytes: usize,
    ) -> Result<Option<usize>> {
        self.enter("allocate_on_stream")?;
        let result = self.inner.allocate_on_stream(stream, kind, bytes);
        if let Ok(Some(address)) = result {
            let mut log = self.log();
            let device = log.held.device_of(stream);
            log.held.allocations.push((address, device));
        }
        self.launch_on(&result, stream);
        result
    }

    fn free(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<B::Stream>,
    ) -> Result<()> {
        self.enter("free")?;
        let result = self.inner.free(device, kind, address, after);
        if result.is_ok() {
            forget(&mut self.log().held.allocations, &address);
        }
        if let Some(stream) = after {
            self.launch_on(&result, stream);
        }
        result
    }

    /// Passed on, unrecorded: an annotation, not a driver call.
    fn note_buffer(&self, device: DeviceId, range: ByteRange, live: bool) -> Result<()> {
        self.inner.note_buffer(device, range, live)
    }

    /// Passed on, unrecorded: an annotation, not a driver call.
    fn footprints_wanted(&self) -> bool {
        self.inner.footprints_wanted()
    }

    /// Passed on, unrecorded: an annotation, not a driver call.
    fn note_launch_footprint(
        &self,
        stream: B::Stream,
        kernel: B::Kernel,
        ranges: &[(ByteRange, Access)],
    ) {
        self.inner.note_launch_footprint(stream, kernel, ranges);
    }

    fn vm_granularity(&self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        self.inner.vm_granularity(device, kind)
    }

    /// A reserved range counts as a driver allocation until it is released.
    fn vm_reserve(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        wanted: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        self.enter("vm_reserve")?;
        let result = self.inner.vm_reserve(device, kind, wanted, needed);
        if let Ok(Some((address, _))) = result {
            self.log().held.allocations.push((address, Some(device)));
        }
        result
    }

    fn vm_map(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        self.enter("vm_map")?;
        self.inner.vm_map(device, kind, address, size)
    }

    fn vm_set_access(
        &self,
        device: DeviceId,
        address: usize,
        size: usize,
        peer: DeviceId,
    ) -> Result<()> {
        self.enter("vm_set_access")?;
        self.inner.vm_set_access(device, address, size, peer)
    }

    fn vm_unmap(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<B::Stream>,
    ) -> Result<()> {
        self.enter("vm_unmap")?;
        self.inner.vm_unmap(device, kind, address, size, after)
    }

    fn vm_release(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        self.enter("vm_release")?;
        let result = self.inner.vm_release(device, kind, address, size);
        if result.is_ok() {
            forget(&mut self.log().held.allocations, &address);
        }
        result
    }

    fn host_register(&self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        self.enter("host_register")?;
        let result = self.inner.host_register(range, device_ptrs);
        if result.is_ok() {
            self.log().held.registrations += 1;
        }
        result
    }

    fn host_unregister(&self, start: usize) -> Result<()> {
        self.enter("host_unregister")?;
        let result = self.inner.host_unregister(start);
        if result.is_ok() {
            self.log().held.registrations -= 1;
        }
        result
    }

    fn host_pinned_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        self.enter("host_pinned_extent")?;
        self.inner.host_pinned_extent(ptr, device_ptrs)
    }

    fn stream_create(&self, device: DeviceId) -> Result<B::Stream> {
        self.enter("stream_create")?;
        let result = self.inner.stream_create(device);
        if let Ok(stream) = result {
            self.log().held.streams.push((stream, device));
            self.record(&result, |log| TraceOp::CreateStream {
                stream: StreamId(log.streams.create(stream)),
                device,
            });
        }
        result
    }

    fn stream_destroy(&self, stream: B::Stream) -> Result<()> {
        self.enter("stream_destroy")?;
        let result = self.inner.stream_destroy(stream);
        if result.is_ok() {
            forget(&mut self.log().held.streams, &stream);
        }
        self.record(&result, |log| TraceOp::DestroyStream {
            stream: StreamId(log.streams.of(stream)),
        });
        result
    }

    fn stream_synchronize(&self, stream: B::Stream) -> Result<()> {
        self.enter("stream_synchronize")?;
        let result = self.inner.stream_synchronize(stream);
        self.record(&result, |log| TraceOp::SynchronizeStream {
            stream: StreamId(log.streams.of(stream)),
        });
        result
    }

    fn event_create(&self, device: DeviceId) -> Result<B::Event> {
        self.enter("event_create")?;
        let result = self.inner.event_create(device);
        if let Ok(event) = result {
            self.log().held.events.push((event, device));
            self.record(&result, |log| TraceOp::CreateEvent {
                event: EventId(log.events.create(event)),
                device,
            });
        }
        result
    }

    fn event_destroy(&self, event: B::Event) -> Result<()> {
        self.enter("event_destroy")?;
        let result = self.inner.event_destroy(event);
        if result.is_ok() {
            forget(&mut self.log().held.events, &event);
        }
        self.record(&result, |log| TraceOp::DestroyEvent {
            event: EventId(log.events.of(event)),
        });
        result
    }

    fn event_record(&self, event: B::Event, stream: B::Stream) -> Result<()> {
        self.enter("event_record")?;
        let result = self.inner.event_record(event, stream);
        self.record(&result, |log| TraceOp::Record {
            event: EventId(log.events.of(event)),
            stream: StreamId(log.streams.of(stream)),
        });
        result
    }

    fn stream_wait_event(&self, stream: B::Stream, event: B::Event) -> Result<()> {
        self.enter("stream_wait_event")?;
        let result = self.inner.stream_wait_event(stream, event);
        self.record(&result, |log| TraceOp::Wait {
            stream: StreamId(log.streams.of(stream)),
            event: EventId(log.events.of(event)),
        });
        result
    }

    fn event_query(&self, event: B::Event) -> Result<bool> {
        self.enter("event_query")?;
        let result = self.inner.event_query(event);
        self.record(&result, |log| TraceOp::QueryEvent {
            event: EventId(log.events.of(event)),
        });
        result
    }

    fn event_synchronize(&self, event: B::Event) -> Result<()> {
        self.enter("event_synchronize")?;
        let result = self.inner.event_synchronize(event);
        self.record(&result, |log| TraceOp::SynchronizeEvent {
            event: EventId(log.events.of(event)),
        });
        result
    }

    fn device_synchronize(&self, device: DeviceId) -> Result<()> {
        self.enter("device_synchronize")?;
        self.inner.device_synchronize(device)
    }

    /// Forwarded; the objects of the device are gone from the live counts' point of view
    /// only as their owner forgets them (the runtime does not destroy them after a reset).
    fn reset_device(&self, device: DeviceId) -> Result<()> {
        self.enter("reset_device")?;
        let result = self.inner.reset_device(device);
        if result.is_ok() {
            let mut log = self.log();
            log.peer_access.retain(|&(a, b)| a != device && b != device);
            // The reset destroyed the device's streams and events (the trace says so) and
            // freed its memory.
            let held = &mut log.held;
            let streams: Vec<_> = held
                .streams
                .iter()
                .filter(|&&(_, d)| d == device)
                .map(|&(s, _)| s)
                .collect();
            let events: Vec<_> = held
                .events
                .iter()
                .filter(|&&(_, d)| d == device)
                .map(|&(e, _)| e)
                .collect();
            held.streams.retain(|&(_, d)| d != device);
            held.adopted.retain(|&(_, d)| d != device);
            held.events.retain(|&(_, d)| d != device);
            held.allocations.retain(|&(_, d)| d != Some(device));
            if log.tracing {
                for stream in streams {
                    let op = TraceOp::DestroyStream {
                        stream: StreamId(log.streams.of(stream)),
                    };
                    log.ops.push(op);
                }
                for event in events {
                    let op = TraceOp::DestroyEvent {
                        event: EventId(log.events.of(event)),
                    };
                    log.ops.push(op);
                }
            }
        }
        result
    }

    fn peer_access_possible(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        self.enter("peer_access_possible")?;
        self.inner.peer_access_possible(device, peer)
    }

    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        self.enter("enable_peer_access")?;
        let result = self.inner.enable_peer_access(device, peer);
        if result.is_ok() {
            self.log().peer_access.push((device, peer));
        }
        result
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged.
    unsafe fn copy_peer(
        &self,
        stream: B::Stream,
        dst: usize,
        dst_device: DeviceId,
        src: usize,
        src_device: DeviceId,
        bytes: usize,
    ) -> Result<()> {
        self.enter("copy_peer")?;
        // SAFETY: the caller upholds `copy_peer`'s contract for these very arguments.
        let result = unsafe {
            self.inner
                .copy_peer(stream, dst, dst_device, src, src_device, bytes)
        };
        self.record(&result, |log| {
            let reaches = |pair| log.peer_access.contains(&pair);
            let direct = reaches((dst_device, src_device)) && reaches((src_device, dst_device));
            TraceOp::PeerCopy {
                stream: StreamId(log.streams.of(stream)),
                direct,
            }
        });
        result
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged.
    unsafe fn copy(&self, stream: B::Stream, dst: usize, src: usize, bytes: usize) -> Result<()> {
        self.enter("copy")?;
        // SAFETY: the caller upholds `copy`'s contract for these very arguments.
        let result = unsafe { self.inner.copy(stream, dst, src, bytes) };
        self.launch_on(&result, stream);
        result
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged.
    unsafe fn copy_from_read_only(
        &self,
        stream: B::Stream,
        dst: usize,
        src: usize,
        bytes: usize,
    ) -> Result<()> {
        self.enter("copy")?;
        // SAFETY: the caller upholds `copy_from_read_only`'s contract for these very arguments.
        let result = unsafe { self.inner.copy_from_read_only(stream, dst, src, bytes) };
        self.launch_on(&result, stream);
        result
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged.
    unsafe fn fill(&self, stream: B::Stream, dst: usize, value: u8, bytes: usize) -> Result<()> {
        self.enter("fill")?;
        // SAFETY: the caller upholds `fill`'s contract for these very arguments.
        let result = unsafe { self.inner.fill(stream, dst, value, bytes) };
        self.launch_on(&result, stream);
        result
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged.
    unsafe fn fill_elements(
        &self,
        stream: B::Stream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()> {
        self.enter("fill_elements")?;
        // SAFETY: the caller upholds `fill_elements`'s contract for these very arguments.
        let result = unsafe { self.inner.fill_elements(stream, dst, value, count) };
        self.launch_on(&result, stream);
        result
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged.
    unsafe fn module_load(&self, device: DeviceId, image: *const c_void) -> Result<B::Module> {
        self.enter("module_load")?;
        // SAFETY: the caller upholds `module_load`'s contract for this very image.
        unsafe { self.inner.module_load(device, image) }
    }

    fn module_unload(&self, module: B::Module) -> Result<()> {
        self.enter("module_unload")?;
        self.inner.module_unload(module)
    }

    fn module_kernel(&self, module: B::Module, name: &CStr) -> Result<B::Kernel> {
        self.enter("module_kernel")?;
        self.inner.module_kernel(module, name)
    }

    fn kernel(&self, device: DeviceId, name: &str) -> Result<B::Kernel> {
        self.enter("kernel")?;
        self.inner.kernel(device, name)
    }

    fn kernel_param_sizes(&self, kernel: B::Kernel) -> Result<Vec<usize>> {
        self.enter("kernel_param_sizes")?;
        self.inner.kernel_param_sizes(kernel)
    }

    fn kernel_static_workgroup_bytes(&self, kernel: B::Kernel) -> Result<u32> {
        self.enter("kernel_static_workgroup_bytes")?;
        self.inner.kernel_static_workgroup_bytes(kernel)
    }

    fn kernel_allow_workgroup_bytes(&self, kernel: B::Kernel, bytes: u32) -> Result<()> {
        self.enter("kernel_allow_workgroup_bytes")?;
        self.inner.kernel_allow_workgroup_bytes(kernel, bytes)
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged.
    unsafe fn launch(
        &self,
        stream: B::Stream,
        kernel: B::Kernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        self.enter("launch")?;
        // SAFETY: the caller upholds `launch`'s contract for these very arguments.
        let result = unsafe { self.inner.launch(stream, kernel, dims, args) };
        self.launch_on(&result, stream);
        result
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged.
    unsafe fn launch_packed(
        &self,
        stream: B::Stream,
        kernel: B::Kernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        self.enter("launch_packed")?;
        // SAFETY: the caller upholds `launch_packed`'s contract for these very arguments.
        let result = unsafe { self.inner.launch_packed(stream, kernel, dims, params) };
        self.launch_on(&result, stream);
        result
    }

    fn graph_instantiate(
        &self,
        device: DeviceId,
        graph: &GraphDesc<B::Kernel>,
    ) -> Result<B::Graph> {
        self.enter("graph_instantiate")?;
        self.inner.graph_instantiate(device, graph)
    }

    /// # Safety
    /// The wrapped backend's: the arguments reach it unchanged. A replay is recorded as one
    /// stream operation, as a launch is.
    unsafe fn graph_launch(&self, stream: B::Stream, graph: B::Graph) -> Result<()> {
        self.enter("graph_launch")?;
        // SAFETY: the caller upholds `graph_launch`'s contract for this very graph.
        let result = unsafe { self.inner.graph_launch(stream, graph) };
        self.launch_on(&result, stream);
        result
    }

    fn graph_set_node(&self, graph: B::Graph, node: NodeId, op: &NodeOp<B::Kernel>) -> Result<()> {
        self.enter("graph_set_node")?;
        self.inner.graph_set_node(graph, node, op)
    }

    fn graph_destroy(&self, graph: B::Graph) -> Result<()> {
        self.enter("graph_destroy")?;
        self.inner.graph_destroy(graph)
    }
}
