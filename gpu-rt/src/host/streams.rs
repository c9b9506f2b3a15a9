//! Streams and events of the host backend: in-order work queues, each drained by its own
//! worker thread, completion points recorded as events, and the start/finish log of work.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Condvar, Mutex};

use super::kernels::{HostKernel, Launch};
use super::memory::Block;
use super::{HostErrorCode, lock};
use gpu_core::backend::FillValue;
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;

/// A stream of the host backend (the backend's [`gpu_core::backend::Backend::Stream`]).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::HostErrorCode;
/// use gpu_rt::runtime::with_device;
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// let stream = with_device(&backend, DeviceId(0), || backend.stream_create(DeviceId(0)))?;
/// with_device(&backend, DeviceId(0), || backend.stream_destroy(stream))?;
/// // Handles are never reused: a destroyed stream is always recognised.
/// let stale = with_device(&backend, DeviceId(0), || backend.stream_synchronize(stream));
/// assert_eq!(HostErrorCode::of(&stale.unwrap_err()), Some(HostErrorCode::InvalidHandle));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostStream {
    id: u64,
}

/// An event of the host backend (the backend's [`gpu_core::backend::Backend::Event`]).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::with_device;
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// let d0 = DeviceId(0);
/// let (stream, event) = with_device(&backend, d0, || {
///     Ok((backend.stream_create(d0)?, backend.event_create(d0)?))
/// })?;
/// assert!(backend.event_query(event)?); // never recorded: complete
/// with_device(&backend, d0, || backend.event_record(event, stream))?;
/// backend.event_synchronize(event)?;
/// assert!(backend.event_query(event)?);
/// with_device(&backend, d0, || backend.event_destroy(event))?;
/// with_device(&backend, d0, || backend.stream_destroy(stream))?;
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostEvent {
    id: u64,
}

/// A graph of device work instantiated by the host backend (the backend's
/// [`gpu_core::backend::Backend::Graph`]): its nodes run in order, one after another, on the
/// stream of each replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostGraph {
    id: u64,
}

/// Stream, event and graph numbers, never reused by any backend in the process, so a handle from
/// another backend or a destroyed object is always recognised as invalid.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

impl HostStream {
    pub(super) fn fresh() -> Self {
        Self {
            id: NEXT_HANDLE.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The stream's number, as a program that created it would hand it to another library
    /// (what [`gpu_core::backend::Backend::adopt_stream`] takes back). Never zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HostErrorCode;
    /// use gpu_rt::runtime::with_device;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(2));
    /// let stream = with_device(&backend, DeviceId(1), || backend.stream_create(DeviceId(1)))?;
    /// assert_ne!(stream.raw(), 0);
    /// // SAFETY: `stream.raw()` is a live stream, destroyed only below.
    /// assert_eq!(unsafe { backend.adopt_stream(DeviceId(1), stream.raw()) }?, stream);
    /// // Another device's number is refused.
    /// let refused = unsafe { backend.adopt_stream(DeviceId(0), stream.raw()) }.unwrap_err();
    /// assert_eq!(HostErrorCode::of(&refused), Some(HostErrorCode::InvalidHandle));
    /// with_device(&backend, DeviceId(1), || backend.stream_destroy(stream))?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn raw(&self) -> usize {
        self.id as usize
    }

    /// The handle of raw number `raw` (checked against the live streams by the caller).
    pub(super) fn from_raw(raw: usize) -> Self {
        Self { id: raw as u64 }
    }
}

impl HostEvent {
    pub(super) fn fresh() -> Self {
        Self {
            id: NEXT_HANDLE.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl HostGraph {
    pub(super) fn fresh() -> Self {
        Self {
            id: NEXT_HANDLE.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// What a queued work item does, as the work log reports it.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::WorkOp;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// rt.wait(rt.fill(DeviceId(0), buffer.span(0, 32)?, 7, &mut vec![])?)?;
/// let ops: Vec<WorkOp> = rt.backend().work_log().iter().map(|record| record.op).collect();
/// let fill = WorkOp::Fill { dst: buffer.address(), value: FillValue::U8(7), bytes: 32 };
/// assert!(ops.contains(&fill));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkOp {
    /// Copy `bytes` from `src` to `dst`.
    Copy {
        /// Destination address.
        dst: usize,
        /// Source address.
        src: usize,
        /// Bytes copied.
        bytes: usize,
        /// Whether nothing writes the source until the copy has run
        /// ([`Backend::copy_from_read_only`](gpu_core::backend::Backend::copy_from_read_only)):
        /// it is read without atomics.
        read_only_source: bool,
    },
    /// Set `bytes` at `dst` to `value`, element by element.
    Fill {
        /// Destination address.
        dst: usize,
        /// The element written (a byte, or a 16- or 32-bit word).
        value: FillValue,
        /// Bytes written (a whole number of elements).
        bytes: usize,
    },
    /// Run a kernel.
    Launch {
        /// The kernel launched.
        kernel: HostKernel,
    },
    /// Complete an event's record.
    Record {
        /// The event recorded.
        event: HostEvent,
    },
    /// Wait for an event's last record (as it was when the wait was enqueued).
    Wait {
        /// The event waited on.
        event: HostEvent,
    },
    /// Return freed memory (a free ordered after the stream's earlier work).
    Free {
        /// The freed address.
        address: usize,
    },
}

/// How a work item ended.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::{WorkOp, WorkOutcome};
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// backend.register_kernel("fails", |ctx, _| ctx.arg_u32(0).map(drop)); // needs a `u32`
/// let rt = Runtime::new(backend)?;
/// // SAFETY: the kernel touches no memory.
/// let dims = LaunchDims::linear(1, 1);
/// let failed = unsafe { rt.launch(DeviceId(0), "fails", dims, &[], &mut vec![])? };
/// assert!(rt.wait(failed).is_err());
/// let log = rt.backend().work_log();
/// let launch = log.iter().find(|record| matches!(record.op, WorkOp::Launch { .. })).unwrap();
/// assert_eq!(launch.outcome, WorkOutcome::Failed);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkOutcome {
    /// It ran and succeeded.
    Done,
    /// It ran and failed; its error is now the stream's sticky error.
    Failed,
    /// It did not run because an earlier item of its stream had failed (memory is still
    /// returned by a skipped free).
    Skipped,
}

/// One finished work item, with the backend-wide sequence numbers of its start and finish.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::{WorkOp, WorkRecord};
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
/// let a = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// let b = rt.alloc(DeviceId(1), MemoryKind::Device, 64)?;
/// let filled = rt.fill(DeviceId(0), a.all(), 1, &mut vec![])?;
/// rt.wait(rt.fill(DeviceId(1), b.all(), 2, &mut vec![filled])?)?; // after the first
/// let log = rt.backend().work_log();
/// let fill_on = |device| {
///     let fill = |r: &&WorkRecord| r.device == device && matches!(r.op, WorkOp::Fill { .. });
///     log.iter().find(fill).unwrap()
/// };
/// let (first, second) = (fill_on(DeviceId(0)), fill_on(DeviceId(1)));
/// assert_ne!(first.stream, second.stream);
/// assert!(first.finished < second.started); // device 1's stream waited for device 0's
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkRecord {
    /// The stream it ran on.
    pub stream: HostStream,
    /// The stream's device.
    pub device: DeviceId,
    /// What it did.
    pub op: WorkOp,
    /// Sequence number taken when it started.
    pub started: u64,
    /// Sequence number taken when it finished (greater than `started`).
    pub finished: u64,
    /// How it ended.
    pub outcome: WorkOutcome,
}

/// The backend-wide sequence counter and the most recent work records.
#[derive(Debug)]
pub(super) struct WorkLog {
    sequence: AtomicU64,
    capacity: usize,
    records: Mutex<VecDeque<WorkRecord>>,
}

impl WorkLog {
    /// A log keeping the last `capacity` records.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            sequence: AtomicU64::new(0),
            capacity,
            records: Mutex::new(VecDeque::new()),
        }
    }

    fn next(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::AcqRel) + 1
    }

    fn push(&self, record: WorkRecord) {
        if self.capacity == 0 {
            return;
        }
        let mut records = lock(&self.records);
        if records.len() == self.capacity {
            records.pop_front();
        }
        records.push_back(record);
    }

    /// The kept records, in the order they finished.
    pub(super) fn records(&self) -> Vec<WorkRecord> {
        lock(&self.records).iter().copied().collect()
    }

    /// Forgets the kept records (the sequence counter goes on).
    pub(super) fn clear(&self) {
        lock(&self.records).clear();
    }
}

/// What a work item holds while queued: the memory it touches (kept alive until it has run),
/// the kernel it launches, or the event record it waits for.
pub(super) enum Payload {
    /// Nothing beyond the operation.
    None,
    /// Blocks the item reads or writes, or the block a deferred free returns: held only so
    /// that they are returned to the host after the item has run.
    Hold(#[expect(dead_code, reason = "held for its drop, never read")] Vec<Arc<Block>>),
    /// A kernel launch.
    Launch(Box<Launch>),
    /// The record waited for (`None`: never recorded, so already complete).
    Wait(Option<RecordPoint>),
}

/// One operation queued on a stream, with what it carries.
pub(super) struct WorkItem {
    op: WorkOp,
    payload: Payload,
}

impl WorkItem {
    /// `op` carrying `payload`.
    pub(super) fn new(op: WorkOp, payload: Payload) -> Self {
        Self { op, payload }
    }
}

/// A point in a stream's queue: complete when the stream has finished `count` items.
#[derive(Clone)]
pub(super) struct RecordPoint {
    stream: Arc<StreamShared>,
    count: u64,
}

impl RecordPoint {
    /// Whether the point is complete; `Err` if the stream failed before it (see
    /// [`StreamState::failure_before`]).
    pub(super) fn query(&self) -> Result<bool> {
        let mut state = lock(&self.stream.state);
        if state.completed < self.count {
            return Ok(false);
        }
        state.failure_before(self.count).map_or(Ok(true), Err)
    }

    /// Blocks until the point is complete; `Err` if the stream failed before it (see
    /// [`StreamState::failure_before`]).
    pub(super) fn wait(&self) -> Result<()> {
        let mut state = self.stream.wait_for(self.count);
        state.failure_before(self.count).map_or(Ok(()), Err)
    }

    /// Blocks until the point is complete, reporting nothing: for a stream waiting on
    /// another's record, which must not take that stream's failure from its own waiters.
    pub(super) fn reached(&self) {
        drop(self.stream.wait_for(self.count));
    }
}

struct StreamState {
    queue: VecDeque<WorkItem>,
    enqueued: u64,
    completed: u64,
    /// A fault that lost the device: the number of the failed item (from 1) and its error.
    /// Later items are skipped, and every point at or after it reports it.
    fault: Option<(u64, Error)>,
    /// The first failure not yet reported that did not lose the device: it failed only its
    /// own item (later items run), and the first synchronisation that covers it reports it.
    unreported: Option<(u64, Error)>,
    /// Destroyed: the worker exits once the queue is empty.
    closing: bool,
}

impl StreamState {
    /// The failure a synchronisation of the first `count` items reports: the fault, if one
    /// came before (every time), else the unreported failure before (once: it is taken).
    fn failure_before(&mut self, count: u64) -> Option<Error> {
        if let Some((item, error)) = &self.fault
            && *item <= count
        {
            return Some(error.clone());
        }
        if self
            .unreported
            .as_ref()
            .is_some_and(|(item, _)| *item <= count)
        {
            return self.unreported.take().map(|(_, error)| error);
        }
        None
    }
}

/// Whether a device is lost: the first failure of work on it, which every later call that
/// works on the device reports until the device is reset (as a GPU driver's sticky error).
#[derive(Default)]
pub(super) struct DeviceHealth(Mutex<Option<Error>>);

impl DeviceHealth {
    /// The failure that lost the device, if it is lost.
    pub(super) fn lost(&self) -> Option<Error> {
        lock(&self.0).clone()
    }

    /// Loses the device with `cause`, unless an earlier failure already did.
    fn lose(&self, cause: &Error) {
        lock(&self.0).get_or_insert_with(|| cause.clone());
    }

    /// Makes the device usable again (a reset).
    pub(super) fn restore(&self) {
        *lock(&self.0) = None;
    }
}

/// A stream's queue, shared by the backend, its worker, and the events recorded on it.
pub(super) struct StreamShared {
    pub(super) handle: HostStream,
    pub(super) device: DeviceId,
    health: Arc<DeviceHealth>,
    state: Mutex<StreamState>,
    changed: Condvar,
}

impl StreamShared {
    pub(super) fn new(handle: HostStream, device: DeviceId, health: Arc<DeviceHealth>) -> Self {
        Self {
            handle,
            device,
            health,
            state: Mutex::new(StreamState {
                queue: VecDeque::new(),
                enqueued: 0,
                completed: 0,
                fault: None,
                unreported: None,
                closing: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// Appends an item; returns the point at which it is complete.
    pub(super) fn enqueue(self: &Arc<Self>, op: WorkOp, payload: Payload) -> RecordPoint {
        self.enqueue_items([WorkItem { op, payload }])
    }

    /// Appends `items` in order, at once (no other thread's item comes between them); returns
    /// the point at which the last is complete.
    pub(super) fn enqueue_items(
        self: &Arc<Self>,
        items: impl IntoIterator<Item = WorkItem>,
    ) -> RecordPoint {
        let mut state = lock(&self.state);
        for item in items {
            state.queue.push_back(item);
            state.enqueued += 1;
        }
        let count = state.enqueued;
        drop(state);
        self.changed.notify_all();
        RecordPoint {
            stream: self.clone(),
            count,
        }
    }

    /// Blocks while `depth` items or more are unfinished (a full launch queue); a `depth` of
    /// 0 never blocks.
    pub(super) fn wait_for_room(&self, depth: usize) {
        if depth == 0 {
            return;
        }
        let mut state = lock(&self.state);
        while state.enqueued - state.completed >= depth as u64 {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// The point at which everything enqueued so far is complete.
    pub(super) fn tail(self: &Arc<Self>) -> RecordPoint {
        RecordPoint {
            stream: self.clone(),
            count: lock(&self.state).enqueued,
        }
    }

    /// Lets the worker exit once the queue is empty (work already queued still runs).
    pub(super) fn close(&self) {
        lock(&self.state).closing = true;
        self.changed.notify_all();
    }

    fn wait_for(&self, count: u64) -> std::sync::MutexGuard<'_, StreamState> {
        let mut state = lock(&self.state);
        while state.completed < count {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state
    }
}

/// The worker loop of one stream: runs items in order until the stream is closed and empty.
pub(super) fn run_worker(stream: Arc<StreamShared>, log: Arc<WorkLog>) {
    loop {
        let mut state = lock(&stream.state);
        let item = loop {
            if let Some(item) = state.queue.pop_front() {
                break item;
            }
            if state.closing {
                return;
            }
            state = stream
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        };
        let failed_earlier = state.fault.is_some();
        drop(state);

        let started = log.next();
        let result = if failed_earlier {
            None
        } else {
            Some(execute(&item))
        };
        let finished = log.next();
        // The item's memory and kernel are released before anyone can see it complete.
        let WorkItem { op, payload } = item;
        drop(payload);

        let (outcome, error) = match result {
            None => (WorkOutcome::Skipped, None),
            Some(Ok(())) => (WorkOutcome::Done, None),
            Some(Err(error)) => (WorkOutcome::Failed, Some(error)),
        };
        // Logged before it is seen complete, so a synchronised caller finds it in the log.
        log.push(WorkRecord {
            stream: stream.handle,
            device: stream.device,
            op,
            started,
            finished,
            outcome,
        });
        let mut state = lock(&stream.state);
        state.completed += 1;
        if let Some(error) = error {
            // A fault (an illegal address, a launch failure: a GPU driver's sticky codes)
            // loses the device; any other failure is its item's alone.
            if matches!(&error, Error::Driver(driver) if driver.loses_device()) {
                stream.health.lose(&error);
                state.fault = Some((state.completed, error));
            } else if state.unreported.is_none() {
                state.unreported = Some((state.completed, error));
            }
        }
        drop(state);
        stream.changed.notify_all();
    }
}

/// Carries out one item; a panicking kernel fails the item instead of the worker.
fn execute(item: &WorkItem) -> Result<()> {
    match (&item.op, &item.payload) {
        (
            &WorkOp::Copy {
                dst,
                src,
                bytes,
                read_only_source,
            },
            _,
        ) => {
            // SAFETY: the backend checked both ranges lie wholly in live allocations it holds
            // for this item, or touch none (the caller's host memory, as a unified-addressing
            // driver accepts, kept valid by the caller); other work on them is atomic too, and
            // a read-only source is written by nothing until this copy has run (the caller of
            // `copy_from_read_only` promised it; the backend checked the ranges are disjoint).
            unsafe {
                if read_only_source {
                    super::bytes::copy_from_read_only(dst, src, bytes);
                } else {
                    super::bytes::copy(dst, src, bytes);
                }
            }
            Ok(())
        }
        (WorkOp::Fill { dst, value, bytes }, _) => {
            let (pattern, width) = match *value {
                FillValue::U8(v) => ([v, 0, 0, 0], 1),
                FillValue::U16(v) => {
                    let [a, b] = v.to_ne_bytes();
                    ([a, b, 0, 0], 2)
                }
                FillValue::U32(v) => (v.to_ne_bytes(), 4),
            };
            // SAFETY: as for a copy's destination; the pattern repeats every element's bytes,
            // so writing it byte by byte sets each element (whatever the alignment).
            unsafe { super::bytes::fill(*dst, &pattern[..width], *bytes) };
            Ok(())
        }
        (WorkOp::Launch { .. }, Payload::Launch(launch)) => {
            catch_unwind(AssertUnwindSafe(|| launch.run()))
                .unwrap_or_else(|_| Err(HostErrorCode::LaunchFailed.error("launch")))
        }
        // A record that failed belongs to a lost device, which reports the failure itself:
        // the waiting stream (perhaps of a device that keeps working) goes on.
        (WorkOp::Wait { .. }, Payload::Wait(Some(point))) => {
            point.reached();
            Ok(())
        }
        _ => Ok(()),
    }
}

/// An event: the device it belongs to and its last record.
pub(super) struct EventSlot {
    pub(super) device: DeviceId,
    pub(super) last: Option<RecordPoint>,
}
