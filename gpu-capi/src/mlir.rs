//! MLIR's GPU runtime ABI (`mgpu*`, as LLVM 22's GPU-to-LLVM lowering declares it), served by
//! the toolkit: a program compiled by `mlir-opt` links against this library unchanged.
//!
//! How MLIR's objects map onto the runtime:
//! - A stream is the token at its tail (none before its first operation) plus the event waits
//!   queued on it; each operation runs after them and becomes the new tail, so consecutive
//!   operations chain on one pooled driver stream, and creating or destroying a stream is no
//!   driver call.
//! - Recording an event forks the stream's tail into detached branches (one event record):
//!   the event holds one, the stream another, and the driver stream goes back to the pool at
//!   once. So the inputs of a join, which MLIR's lowering never destroys, hold no stream; a
//!   stream left idle after a record is dropped (its branch released) once its event has
//!   completed, checked with one event query per stream creation.
//! - Waiting on an event queues a branch of its token on the stream; destroying the event
//!   releases its branch. Synchronising waits for the tail (and queued waits).
//! - Memory: `mgpuMemAlloc` with a stream is a stream-ordered allocation from the caching
//!   allocator (a hit is no driver call), `isHostShared` managed memory; `mgpuMemFree` frees
//!   after the stream's tail. Host registration goes through the lock table: a range inside a
//!   registered one counts one more lock, and unregistering counts down.
//! - Modules keep their image; each device loads it at its first kernel there, so
//!   `mgpuSetDefaultDevice` (per thread, as upstream) moves every later call, launches
//!   included, to that device.
//!
//! Handles (streams, events, modules, functions) are the shared layer's
//! ([`crate::shared::handle`]): never issued twice in the process, and carrying the session that
//! issued them, so a handle kept across a shutdown is refused in the next session instead of
//! naming one of its objects.
//!
//! Every call checks all its arguments (handles, pointers, sizes, and for memsets and copies
//! that a range starting in an allocation of `mgpuMemAlloc` ends inside it) before it changes
//! anything: a refused call leaves streams, events and allocations as they were. Failures print
//! `mgpuXxx: message` on stderr (as upstream's wrappers do), set the thread's last error, and
//! return null where the function returns a pointer.

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use hashbrown::HashMap;

use gpu_runtime::DeviceId;
use gpu_runtime::Error;
use gpu_runtime::allocator::MemoryKind;
use gpu_runtime::backend::{FillValue, LaunchDims};
use gpu_runtime::id::{EventId, StreamId};
use gpu_runtime::runtime::{Buffer, Kernel, ModuleId, Runtime, Span};
use gpu_runtime::token::{Token, TraceOp};

use crate::shared::{
    self, CapiError, ClientBackend, ClientObjects, ClientSlot, Generation, HandleKind, HandleMap,
    MlirSlot, Session, TraceExport, dispatch, guarded, with_session,
};

thread_local! {
    /// The device `mgpuSetDefaultDevice` chose on this thread (upstream's is thread-local too).
    static DEFAULT_DEVICE: Cell<u32> = const { Cell::new(0) };
    /// The session (by its generation) and device this layer last made current on this
    /// thread (generation 0: none yet).
    static MADE_CURRENT: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

/// Set once the exit hook has shut the runtime down: later calls do nothing.
static EXITED: AtomicBool = AtomicBool::new(false);

/// An MLIR stream: the token at its tail and the event waits queued since.
#[derive(Default)]
struct Stream {
    tail: Option<Token>,
    waits: Vec<Token>,
}

/// A function handle: a kernel name of a module, resolved per device at launch.
struct Function {
    module: ModuleId,
    name: CString,
}

/// What the MLIR ABI keeps in a session: the program's streams, events, modules, functions
/// and allocations, by handle or address. One lock: MLIR programs call from one thread.
pub struct MlirObjects<B: ClientBackend> {
    inner: Mutex<Objects<B>>,
}

struct Objects<B: ClientBackend> {
    streams: HandleMap<Stream>,
    /// Streams whose tail is a branch of a recorded event, oldest first: dropped once done.
    idle: VecDeque<u64>,
    events: HandleMap<Option<Token>>,
    modules: HandleMap<ModuleId>,
    functions: HandleMap<Function>,
    /// Function handles by module, then name, so asking again (the lowering asks before every
    /// launch) returns the same handle, found without allocating.
    function_names: HashMap<ModuleId, HashMap<CString, u64>>,
    /// Kernels resolved per function handle and device.
    kernels: HashMap<(u64, u32), Kernel<'static, B>>,
    /// The allocations of `mgpuMemAlloc` by address, in order: the one an address lies in is
    /// the last that starts at or below it.
    buffers: BTreeMap<usize, Buffer<'static, B>>,
    /// The program's own stream/event calls and where to write them, when asked for.
    trace: Option<(PathBuf, Vec<TraceOp>)>,
}

impl<B: ClientBackend> ClientSlot<B> for MlirSlot {
    type Objects = MlirObjects<B>;
}

impl<B: ClientBackend> ClientObjects<B> for MlirObjects<B> {
    /// Empty, for the session of `generation`, recording the program's own stream and event
    /// calls when the session writes a trace to `trace` (`GPU_RUNTIME_TRACE`): they go to the
    /// same path with `.mlir` appended.
    fn open(generation: Generation, trace: Option<&Path>) -> Self {
        let program_trace = trace.map(|path| {
            let mut name = path.as_os_str().to_owned();
            name.push(".mlir");
            (PathBuf::from(name), Vec::new())
        });
        Self {
            inner: Mutex::new(Objects {
                trace: program_trace,
                streams: HandleMap::new(HandleKind::Stream, generation),
                idle: VecDeque::new(),
                events: HandleMap::new(HandleKind::Event, generation),
                modules: HandleMap::new(HandleKind::Module, generation),
                functions: HandleMap::new(HandleKind::Function, generation),
                function_names: HashMap::new(),
                kernels: HashMap::new(),
                buffers: BTreeMap::new(),
            }),
        }
    }

    /// Releases everything the program left (streams it never destroyed, events, buffers;
    /// modules stay for the runtime's shutdown to unload); returns how many streams it left.
    fn release(&self, session: &Session<B>) -> usize {
        let mut objects = self.lock();
        let runtime = session.runtime();
        let left = objects.streams.len();
        for stream in objects.streams.drain() {
            for token in stream.tail.into_iter().chain(stream.waits) {
                let _ = runtime.wait(token);
            }
        }
        for token in objects.events.drain().flatten() {
            let _ = runtime.release(token);
        }
        objects.idle.clear();
        objects.kernels.clear();
        objects.buffers.clear();
        if let Some((path, ops)) = objects.trace.take() {
            match TraceExport::write(path, &ops) {
                Ok(export) => {
                    eprintln!(
                        "gpu-runtime (mlir): the program's own stream/event calls: {} written to \
                         {}: {} defect(s)",
                        export.calls,
                        export.path.display(),
                        export.defects.len()
                    );
                    for defect in &export.defects {
                        eprintln!("  {defect}");
                    }
                }
                Err(error) => eprintln!("gpu-runtime (mlir): {error}"),
            }
        }
        left
    }
}

impl<B: ClientBackend> MlirObjects<B> {
    fn lock(&self) -> MutexGuard<'_, Objects<B>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<B: ClientBackend> Objects<B> {
    /// Records one of the program's stream/event calls, when a trace is asked for.
    fn note(&mut self, op: impl FnOnce() -> TraceOp) {
        if let Some((_, ops)) = &mut self.trace {
            ops.push(op());
        }
    }

    /// The live stream `handle` names (null is refused: the call needs a stream).
    fn stream(&mut self, handle: u64) -> Result<&mut Stream, CapiError> {
        Ok(self.streams.get_mut(handle)?)
    }

    /// Refuses a stream handle that is neither null (no stream: the call is synchronous) nor a
    /// live stream of this session.
    fn check_stream(&self, handle: u64) -> Result<(), CapiError> {
        match handle {
            0 => Ok(()),
            _ => Ok(self.streams.get(handle).map(drop)?),
        }
    }

    /// The live event `handle` names.
    fn event(&mut self, handle: u64) -> Result<&mut Option<Token>, CapiError> {
        Ok(self.events.get_mut(handle)?)
    }

    /// An operation's dependencies on `stream`: its queued waits and its tail, taken out (none
    /// for the null stream). Refuses a stream that is not live, taking nothing.
    fn take_deps(&mut self, stream: u64) -> Result<Vec<Token>, CapiError> {
        if stream == 0 {
            return Ok(Vec::new());
        }
        let stream = self.stream(stream)?;
        let mut after = core::mem::take(&mut stream.waits);
        after.extend(stream.tail.take());
        Ok(after)
    }

    /// Gives `after` (from [`Objects::take_deps`]) back to `stream` when the operation was
    /// refused (the runtime leaves a refused operation's dependencies untouched).
    fn restore(&mut self, stream: u64, mut after: Vec<Token>) {
        if let Ok(entry) = self.streams.get_mut(stream) {
            entry.tail = after.pop();
            entry.waits = after;
        }
    }

    /// `stream`'s dependencies as one token: the only one, several joined, or none. A refused
    /// join gives them back to the stream.
    fn take_point(
        &mut self,
        runtime: &Runtime<B>,
        stream: u64,
    ) -> Result<Option<Token>, CapiError> {
        let mut after = self.take_deps(stream)?;
        if after.len() < 2 {
            return Ok(after.pop());
        }
        match runtime.join(&mut after) {
            Ok(point) => Ok(Some(point)),
            Err(error) => {
                self.restore(stream, after);
                Err(error.into())
            }
        }
    }

    /// Drops the oldest idle stream's branch if its event has completed (one query): such a
    /// stream is a join input the program never uses again. A stream still running goes back
    /// to the queue; one whose query failed keeps its branch (the failure is seen through the
    /// event's own branch, or at shutdown) and leaves the queue.
    fn prune_idle(&mut self, runtime: &Runtime<B>) {
        let Some(oldest) = self.idle.pop_front() else {
            return;
        };
        let Ok(stream) = self.streams.get_mut(oldest) else {
            return;
        };
        if !stream.waits.is_empty() {
            return;
        }
        let Some(tail) = stream.tail.take() else {
            return;
        };
        let id = tail.id();
        match runtime.wait_if_done(tail) {
            Ok(None) => {}
            Ok(Some(pending)) => {
                stream.tail = Some(pending);
                self.idle.push_front(oldest);
            }
            // The runtime hands a token back unchanged when it cannot tell.
            Err(_) => stream.tail = Some(Token::from_id(id)),
        }
    }

    /// Refuses a range `[address, address + len)` that an operation would read or write when
    /// it is null, runs past the top of the address space, runs past the end of the
    /// allocation of `mgpuMemAlloc` it starts in, or starts outside every such allocation and
    /// runs into one. Memory this ABI did not allocate (the host's, say) is the program's to
    /// size.
    fn check_range(&self, address: usize, len: usize, what: &'static str) -> Result<(), CapiError> {
        if address == 0 {
            return Err(Error::NullPointer { what }.into());
        }
        let end = address
            .checked_add(len)
            .ok_or(Error::AddressOverflow { ptr: address, len })?;
        let refused = |detail: String| Err(CapiError::InvalidArgument { what, detail });
        if let Some((&start, buffer)) = self.buffers.range(..=address).next_back()
            && address - start < buffer.size()
        {
            let (offset, size) = (address - start, buffer.size());
            if len > size - offset {
                return refused(format!(
                    "{len} bytes at {address:#x} (offset {offset}) run past the end of the \
                     {size}-byte allocation at {start:#x}"
                ));
            }
            return Ok(());
        }
        match self.buffers.range(address..end).next() {
            Some((&start, _)) => refused(format!(
                "{len} bytes at {address:#x} start outside every allocation of mgpuMemAlloc but \
                 run into the one at {start:#x}"
            )),
            None => Ok(()),
        }
    }

    /// Why `ptr`, given to free, is not the start of a live allocation of `mgpuMemAlloc`.
    fn not_allocated(&self, ptr: usize) -> CapiError {
        let inside = self
            .buffers
            .range(..ptr)
            .next_back()
            .filter(|(start, buffer)| ptr - **start < buffer.size());
        CapiError::InvalidArgument {
            what: "pointer to free",
            detail: match inside {
                Some((start, _)) => {
                    format!("{ptr:#x} lies inside the allocation at {start:#x}; free its start")
                }
                None => format!("{ptr:#x} is no allocation of mgpuMemAlloc (or was freed already)"),
            },
        }
    }
}

/// A handle's name in the program's trace (the low bits of its serial number).
fn stream_id(handle: u64) -> StreamId {
    StreamId(handle as u32)
}

fn event_id(handle: u64) -> EventId {
    EventId(handle as u32)
}

fn device() -> DeviceId {
    DeviceId(DEFAULT_DEVICE.with(Cell::get))
}

/// Makes the default device current on the calling thread, once per thread and device (as the
/// CUDA runtime API's cudaSetDevice does), so that each backend call finds its device's
/// context current instead of pushing and popping it around every call (upstream's wrappers
/// push and pop on each). A program that switches the thread's context itself between calls
/// only costs those calls the push and pop again.
fn make_current<B: ClientBackend>(session: &Session<B>) -> Result<(), CapiError> {
    let wanted = (session.generation().raw(), device().0);
    if MADE_CURRENT.with(Cell::get) != wanted {
        session
            .runtime()
            .backend()
            .set_current_device(Some(DeviceId(wanted.1)))?;
        MADE_CURRENT.with(|made| made.set(wanted));
    }
    Ok(())
}

/// Runs `body` on the process session; a failure is printed with `call`'s name, set as the
/// thread's last error, and turned into `failed`.
fn mlir_call<T>(
    call: &'static str,
    failed: T,
    body: impl FnOnce(shared::AnySession) -> Result<T, CapiError>,
) -> T {
    if EXITED.load(Ordering::Acquire) {
        // The exit hook shut the runtime down; what the program's own destructors still call
        // (MLIR's module unload) has nothing left to act on, and must not open a new runtime.
        return failed;
    }
    guarded(failed, || {
        with_session(|session| {
            // Registered once the runtime (and so the driver) is open: exit hooks run in
            // reverse order, so this one runs before the driver's own (CUDA deinitialises in
            // one) and before those of tools attached to it (a sanitizer's leak check).
            static REGISTER: Once = Once::new();
            REGISTER.call_once(|| {
                // SAFETY: registering a plain `extern "C" fn()` with the C library.
                unsafe { atexit(at_exit) };
            });
            body(session)
        })
        .inspect_err(|error| eprintln!("{call}: {error}"))
    })
}

unsafe extern "C" {
    fn atexit(hook: extern "C" fn()) -> core::ffi::c_int;
}

/// Runs an operation written once over `B` on the session's backend.
macro_rules! on_session {
    ($call:expr, $failed:expr, |$s:ident| $body:expr) => {
        mlir_call($call, $failed, |session| {
            dispatch!(session, $s => make_current($s).and_then(|()| $body))
        })
    };
}

/// Refuses `stream` unless it is null or live (for calls that do nothing else with it, or
/// check it before other work).
fn check_stream<B: ClientBackend>(session: &Session<B>, stream: u64) -> Result<(), CapiError> {
    session.mlir.lock().check_stream(stream)
}

/// Runs one operation on `stream` (null: no stream, and the caller waits for it): `check`
/// refuses bad arguments against the objects, then `work` gets the dependencies and returns
/// the new token. A refusal of either leaves the stream as it was.
fn on_stream<B: ClientBackend, T>(
    session: &'static Session<B>,
    stream: u64,
    check: impl FnOnce(&Objects<B>) -> Result<(), CapiError>,
    work: impl FnOnce(&mut Vec<Token>) -> Result<(Token, T), CapiError>,
) -> Result<T, CapiError> {
    let mut objects = session.mlir.lock();
    objects.check_stream(stream)?;
    check(&objects)?;
    let mut after = objects.take_deps(stream)?;
    let (token, value) = match work(&mut after) {
        Ok(done) => done,
        Err(error) => {
            objects.restore(stream, after);
            return Err(error);
        }
    };
    if stream == 0 {
        drop(objects);
        session.runtime().wait(token)?;
        return Ok(value);
    }
    objects.note(|| TraceOp::Launch {
        stream: stream_id(stream),
        device: Some(device()),
    });
    objects.stream(stream)?.tail = Some(token);
    Ok(value)
}

/// Ends every token with `end`, even after a failure, and reports the first failure.
fn end_all(
    tokens: impl IntoIterator<Item = Token>,
    mut end: impl FnMut(Token) -> Result<(), Error>,
) -> Result<(), CapiError> {
    let mut first = Ok(());
    for token in tokens {
        let ended = end(token);
        if first.is_ok() {
            first = ended;
        }
    }
    Ok(first?)
}

fn stream_create<B: ClientBackend>(session: &'static Session<B>) -> Result<u64, CapiError> {
    let mut objects = session.mlir.lock();
    objects.prune_idle(session.runtime());
    let handle = objects.streams.insert(Stream::default())?;
    objects.note(|| TraceOp::CreateStream {
        stream: stream_id(handle),
        device: device(),
    });
    Ok(handle)
}

/// Destroys `stream`; its pending work goes on (CUDA allows destroying a busy stream) and its
/// tokens are released without a wait, as the program chose not to wait for them. A failure
/// to release one is reported; the stream is destroyed all the same.
fn stream_destroy<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    let entry = objects.streams.remove(stream)?;
    objects.idle.retain(|&s| s != stream);
    objects.note(|| TraceOp::DestroyStream {
        stream: stream_id(stream),
    });
    drop(objects);
    let runtime = session.runtime();
    end_all(entry.tail.into_iter().chain(entry.waits), |token| {
        runtime.release(token)
    })
}

/// Waits for everything on `stream` (nothing for the null stream); every token is waited for,
/// and the first failure reported.
fn stream_synchronize<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    let after = objects.take_deps(stream)?;
    if stream != 0 {
        objects.idle.retain(|&s| s != stream);
        objects.note(|| TraceOp::SynchronizeStream {
            stream: stream_id(stream),
        });
    }
    drop(objects);
    let runtime = session.runtime();
    end_all(after, |token| runtime.wait(token))
}

fn stream_wait_event<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
    event: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    objects.stream(stream)?;
    let recorded = objects.event(event)?.take();
    if let Some(token) = recorded {
        // Never recorded, or done: nothing to wait for. Else the event keeps one branch and
        // the stream waits on the other.
        let id = token.id();
        let [keep, branch] = match session.runtime().fork(token, 2) {
            Ok(branches) => two(branches),
            Err(error) => {
                *objects.event(event)? = Some(Token::from_id(id));
                return Err(error.into());
            }
        };
        *objects.event(event)? = Some(keep);
        objects.stream(stream)?.waits.push(branch);
        objects.idle.retain(|&s| s != stream);
    }
    objects.note(|| TraceOp::Wait {
        stream: stream_id(stream),
        event: event_id(event),
    });
    Ok(())
}

fn two(tokens: Vec<Token>) -> [Token; 2] {
    <[Token; 2]>::try_from(tokens).unwrap_or_else(|_| unreachable!("a fork into two"))
}

fn event_create<B: ClientBackend>(session: &'static Session<B>) -> Result<u64, CapiError> {
    let mut objects = session.mlir.lock();
    let handle = objects.events.insert(None)?;
    objects.note(|| TraceOp::CreateEvent {
        event: event_id(handle),
        device: device(),
    });
    Ok(handle)
}

/// Destroys `event`, releasing its branch; a failure to release it is reported, the event is
/// destroyed all the same.
fn event_destroy<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
) -> Result<(), CapiError> {
    let token = {
        let mut objects = session.mlir.lock();
        let token = objects.events.remove(event)?;
        objects.note(|| TraceOp::DestroyEvent {
            event: event_id(event),
        });
        token
    };
    let runtime = session.runtime();
    end_all(token, |token| runtime.release(token))
}

fn event_synchronize<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
) -> Result<(), CapiError> {
    let token = {
        let mut objects = session.mlir.lock();
        let token = objects.event(event)?.take();
        objects.note(|| TraceOp::SynchronizeEvent {
            event: event_id(event),
        });
        token
    };
    let runtime = session.runtime();
    end_all(token, |token| runtime.wait(token))
}

/// Records `event` at `stream`'s tail. A refusal by the runtime gives the stream its
/// dependencies back; the event's previous record is released last, once the new one is in
/// place (a failure to release it is reported, the record stands).
fn event_record<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
    stream: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    objects.event(event)?;
    // A null stream (no MLIR stream) is refused here, before anything changes.
    objects.stream(stream)?;
    let runtime = session.runtime();
    let (recorded, tail) = match objects.take_point(runtime, stream)? {
        Some(point) => {
            let id = point.id();
            match runtime.fork_detached(point, 2) {
                Ok(branches) => {
                    let [for_event, for_stream] = two(branches);
                    (Some(for_event), Some(for_stream))
                }
                Err(error) => {
                    objects.stream(stream)?.tail = Some(Token::from_id(id));
                    return Err(error.into());
                }
            }
        }
        None => (None, None),
    };
    objects.note(|| TraceOp::Record {
        event: event_id(event),
        stream: stream_id(stream),
    });
    let old = core::mem::replace(objects.event(event)?, recorded);
    let idle = tail.is_some();
    objects.stream(stream)?.tail = tail;
    if idle {
        objects.idle.push_back(stream);
    }
    drop(objects);
    end_all(old, |token| runtime.release(token))
}

fn mem_alloc<B: ClientBackend>(
    session: &'static Session<B>,
    size: u64,
    stream: u64,
    host_shared: bool,
) -> Result<usize, CapiError> {
    let runtime = session.runtime();
    let size = usize::try_from(size).map_err(|_| Error::AddressOverflow {
        ptr: 0,
        len: usize::MAX,
    })?;
    let kind = if host_shared {
        MemoryKind::Managed
    } else {
        MemoryKind::Device
    };
    let device = device();
    let buffer = if stream != 0 && !host_shared && size != 0 {
        on_stream(
            session,
            stream,
            |_| Ok(()),
            |after| {
                let (buffer, token) = runtime.alloc_after(device, kind, size, after)?;
                Ok((token, buffer))
            },
        )?
    } else {
        // Managed memory is allocated at once (as upstream's); the stream is still checked.
        check_stream(session, stream)?;
        if size == 0 {
            return Ok(0); // upstream returns null for no bytes
        }
        runtime.alloc(device, kind, size)?
    };
    let address = buffer.address();
    session.mlir.lock().buffers.insert(address, buffer);
    Ok(address)
}

/// Frees an allocation of `mgpuMemAlloc` after `stream`'s work (at once with no stream). The
/// stream and the pointer are both checked before anything happens: a refused free leaves the
/// allocation live (a correct free of it later succeeds) and the stream as it was.
fn mem_free<B: ClientBackend>(
    session: &'static Session<B>,
    ptr: usize,
    stream: u64,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    let mut objects = session.mlir.lock();
    objects.check_stream(stream)?;
    if ptr == 0 {
        return Ok(()); // as upstream: freeing null does nothing
    }
    let buffer = objects
        .buffers
        .remove(&ptr)
        .ok_or_else(|| objects.not_allocated(ptr))?;
    let tail = match objects.take_point(runtime, stream) {
        Ok(tail) => tail,
        Err(error) => {
            objects.buffers.insert(ptr, buffer);
            return Err(error);
        }
    };
    let freed = match &tail {
        Some(tail) => runtime.free_after(buffer, tail),
        None => runtime.free(buffer),
    };
    if let Some(tail) = tail {
        objects.stream(stream)?.tail = Some(tail);
    }
    Ok(freed?)
}

fn memcpy<B: ClientBackend>(
    session: &'static Session<B>,
    dst: usize,
    src: usize,
    bytes: u64,
    stream: u64,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    let bytes = usize::try_from(bytes).map_err(|_| Error::AddressOverflow {
        ptr: src,
        len: usize::MAX,
    })?;
    if bytes == 0 {
        return check_stream(session, stream);
    }
    // SAFETY: the program's own pointers, valid until the copy completes (the ABI's contract:
    // MLIR orders its frees after the stream); the ranges are checked before the copy runs.
    let (to, from) = unsafe { (Span::from_raw(dst, bytes), Span::from_raw(src, bytes)) };
    on_stream(
        session,
        stream,
        |objects| {
            objects.check_range(dst, bytes, "copy destination")?;
            objects.check_range(src, bytes, "copy source")
        },
        |after| Ok((runtime.copy(device(), to, from, after)?, ())),
    )
}

fn memset<B: ClientBackend>(
    session: &'static Session<B>,
    dst: usize,
    value: FillValue,
    count: u64,
    stream: u64,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    let bytes = usize::try_from(count)
        .ok()
        .and_then(|count| count.checked_mul(value.width()))
        .ok_or(Error::AddressOverflow {
            ptr: dst,
            len: usize::MAX,
        })?;
    if bytes == 0 {
        return check_stream(session, stream);
    }
    // SAFETY: as in `memcpy`.
    let to = unsafe { Span::from_raw(dst, bytes) };
    on_stream(
        session,
        stream,
        |objects| objects.check_range(dst, bytes, "memset destination"),
        |after| Ok((runtime.fill_elements(device(), to, value, after)?, ())),
    )
}

/// # Safety
/// `image` points to a module image the driver reads, readable until the module is unloaded.
unsafe fn module_load<B: ClientBackend>(
    session: &'static Session<B>,
    image: *const c_void,
) -> Result<u64, CapiError> {
    if image.is_null() {
        return Err(Error::NullPointer {
            what: "module image",
        }
        .into());
    }
    let runtime = session.runtime();
    // SAFETY: the caller's promise, passed on.
    let module = unsafe { runtime.load_module(device(), image) }?;
    let inserted = session.mlir.lock().modules.insert(module);
    if inserted.is_err() {
        // No handle for it: it is unloaded again, and the call refused.
        let _ = runtime.unload_module(module);
    }
    Ok(inserted?)
}

fn module_unload<B: ClientBackend>(
    session: &'static Session<B>,
    module: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    let id = objects.modules.remove(module)?;
    let gone: Vec<u64> = objects
        .functions
        .iter()
        .filter(|(_, f)| f.module == id)
        .map(|(h, _)| h)
        .collect();
    for handle in gone {
        let _ = objects.functions.remove(handle);
        objects.kernels.retain(|&(h, _), _| h != handle);
    }
    objects.function_names.remove(&id);
    drop(objects);
    Ok(session.runtime().unload_module(id)?)
}

/// # Safety
/// `name` is a NUL-terminated string.
unsafe fn module_get_function<B: ClientBackend>(
    session: &'static Session<B>,
    module: u64,
    name: *const c_char,
) -> Result<u64, CapiError> {
    if name.is_null() {
        return Err(Error::NullPointer {
            what: "kernel name",
        }
        .into());
    }
    // SAFETY: the caller's promise.
    let name = unsafe { CStr::from_ptr(name) };
    let objects = session.mlir.lock();
    let id = *objects.modules.get(module)?;
    if let Some(&handle) = objects
        .function_names
        .get(&id)
        .and_then(|names| names.get(name))
    {
        return Ok(handle);
    }
    // Resolved now on the default device, so a missing name fails here, as upstream's does.
    drop(objects);
    let kernel = session.runtime().module_kernel(id, device(), name)?;
    let mut objects = session.mlir.lock();
    let handle = objects.functions.insert(Function {
        module: id,
        name: name.to_owned(),
    })?;
    objects.kernels.insert((handle, device().0), kernel);
    objects
        .function_names
        .entry(id)
        .or_default()
        .insert(name.to_owned(), handle);
    Ok(handle)
}

/// # Safety
/// As [`Kernel::launch_packed`] for `params`.
#[allow(clippy::too_many_arguments)]
unsafe fn launch_kernel<B: ClientBackend>(
    session: &'static Session<B>,
    function: u64,
    grid: [i64; 3],
    block: [i64; 3],
    shared_bytes: i32,
    stream: u64,
    params: *mut *mut c_void,
) -> Result<(), CapiError> {
    let dimension = |value: i64, what: &'static str| {
        u32::try_from(value).map_err(|_| CapiError::InvalidArgument {
            what,
            detail: format!("{value} is not a launch dimension (0 to 2^32 - 1)"),
        })
    };
    let dims = LaunchDims {
        grid: [
            dimension(grid[0], "grid x")?,
            dimension(grid[1], "grid y")?,
            dimension(grid[2], "grid z")?,
        ],
        block: [
            dimension(block[0], "block x")?,
            dimension(block[1], "block y")?,
            dimension(block[2], "block z")?,
        ],
        dynamic_workgroup_bytes: u32::try_from(shared_bytes).map_err(|_| {
            CapiError::InvalidArgument {
                what: "dynamic shared memory",
                detail: format!("{shared_bytes} bytes is negative"),
            }
        })?,
    };
    let device = device();
    // Before the kernel is resolved, which may load its module on this device.
    check_stream(session, stream)?;
    let kernel = kernel_of(session, function, device)?;
    on_stream(
        session,
        stream,
        |_| Ok(()),
        |after| {
            // SAFETY: the caller's promise for `params` and the memory the kernel reaches.
            let token = unsafe { kernel.launch_packed(dims, params, after) }?;
            Ok((token, ()))
        },
    )
}

/// The kernel of function handle `function` on `device`, resolved once per device.
fn kernel_of<B: ClientBackend>(
    session: &'static Session<B>,
    function: u64,
    device: DeviceId,
) -> Result<Kernel<'static, B>, CapiError> {
    let objects = session.mlir.lock();
    let entry = objects.functions.get(function)?;
    if let Some(&kernel) = objects.kernels.get(&(function, device.0)) {
        return Ok(kernel);
    }
    let (module, name) = (entry.module, entry.name.clone());
    drop(objects);
    let kernel = session.runtime().module_kernel(module, device, &name)?;
    session
        .mlir
        .lock()
        .kernels
        .insert((function, device.0), kernel);
    Ok(kernel)
}

/// MLIR's ranked memref descriptor as the register functions receive it: rank 1's layout,
/// followed in memory by `rank` sizes and `rank` strides.
#[repr(C)]
pub struct MemRefDescriptor {
    allocated: *mut c_char,
    aligned: *mut c_char,
    offset: i64,
    sizes: [i64; 1],
}

/// The host range a memref covers: from its first element, sizes times element size bytes
/// (dense only, as upstream requires). A negative size, offset or element size, and a range
/// whose size or end does not fit the address space, are refused.
///
/// # Safety
/// `descriptor` points to a ranked memref descriptor of `rank` dimensions.
unsafe fn memref_range(
    rank: i64,
    descriptor: *const MemRefDescriptor,
    element_bytes: i64,
) -> Result<(usize, usize), CapiError> {
    if descriptor.is_null() {
        return Err(Error::NullPointer {
            what: "memref descriptor",
        }
        .into());
    }
    let invalid = |what: &'static str, detail: String| CapiError::InvalidArgument { what, detail };
    let rank =
        usize::try_from(rank).map_err(|_| invalid("memref rank", format!("{rank} is negative")))?;
    let element_bytes = usize::try_from(element_bytes)
        .ok()
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| invalid("memref element size", format!("{element_bytes} bytes")))?;
    // SAFETY: the caller's promise: the descriptor has `rank` sizes, then `rank` strides.
    let (d, sizes, strides) = unsafe {
        let d = &*descriptor;
        let sizes = core::slice::from_raw_parts(d.sizes.as_ptr(), rank);
        let strides = core::slice::from_raw_parts(d.sizes.as_ptr().add(rank), rank);
        (d, sizes, strides)
    };
    let too_large = || {
        invalid(
            "memref",
            format!(
                "sizes {sizes:?} of {element_bytes}-byte elements at offset {} do not fit the address space",
                d.offset
            ),
        )
    };
    let mut dense = 1usize;
    for (&size, &stride) in sizes.iter().zip(strides).rev() {
        let size = usize::try_from(size)
            .map_err(|_| invalid("memref", format!("sizes {sizes:?} include a negative one")))?;
        if size > 1 && usize::try_from(stride) != Ok(dense) {
            return Err(invalid(
                "memref",
                format!("strides {strides:?} of sizes {sizes:?} are not dense"),
            ));
        }
        dense = dense.checked_mul(size).ok_or_else(too_large)?;
    }
    let bytes = dense.checked_mul(element_bytes).ok_or_else(too_large)?;
    let offset = usize::try_from(d.offset)
        .map_err(|_| invalid("memref offset", format!("{} is negative", d.offset)))?;
    let start = offset
        .checked_mul(element_bytes)
        .and_then(|offset| (d.aligned as usize).checked_add(offset))
        .ok_or_else(too_large)?;
    Ok((start, bytes))
}

fn host_register<B: ClientBackend>(
    session: &'static Session<B>,
    start: usize,
    bytes: usize,
) -> Result<(), CapiError> {
    session.runtime().lock_range(start, bytes)?;
    Ok(())
}

fn host_unregister<B: ClientBackend>(
    session: &'static Session<B>,
    start: usize,
) -> Result<(), CapiError> {
    session.runtime().unlock_range(start)?;
    Ok(())
}

// ----- the exported ABI -----

/// Creates a stream (no driver call: its work runs on pooled driver streams).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuStreamCreate() -> *mut c_void {
    on_session!("mgpuStreamCreate", 0, |s| stream_create(s)) as *mut c_void
}

/// Destroys a stream; work on it goes on, and its driver stream goes back to the pool.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuStreamDestroy(stream: *mut c_void) {
    on_session!("mgpuStreamDestroy", (), |s| stream_destroy(
        s,
        stream as u64
    ))
}

/// Blocks until the work on `stream` (and the waits queued on it) has finished.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuStreamSynchronize(stream: *mut c_void) {
    on_session!("mgpuStreamSynchronize", (), |s| stream_synchronize(
        s,
        stream as u64
    ))
}

/// Makes later work on `stream` wait for `event`'s last record.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuStreamWaitEvent(stream: *mut c_void, event: *mut c_void) {
    on_session!("mgpuStreamWaitEvent", (), |s| stream_wait_event(
        s,
        stream as u64,
        event as u64
    ))
}

/// Creates an event (no driver call: a recorded one uses a pooled driver event).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuEventCreate() -> *mut c_void {
    on_session!("mgpuEventCreate", 0, |s| event_create(s)) as *mut c_void
}

/// Destroys an event; its driver event goes back to the pool once nothing waits on it.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuEventDestroy(event: *mut c_void) {
    on_session!("mgpuEventDestroy", (), |s| event_destroy(s, event as u64))
}

/// Blocks until `event`'s last record has completed.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuEventSynchronize(event: *mut c_void) {
    on_session!("mgpuEventSynchronize", (), |s| event_synchronize(
        s,
        event as u64
    ))
}

/// Records `event` at `stream`'s tail.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuEventRecord(event: *mut c_void, stream: *mut c_void) {
    on_session!("mgpuEventRecord", (), |s| event_record(
        s,
        event as u64,
        stream as u64
    ))
}

/// Allocates `size` bytes on the default device: device memory in `stream`'s order through
/// the caching allocator, or managed memory (`is_host_shared`, synchronous as upstream's).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemAlloc(
    size: u64,
    stream: *mut c_void,
    is_host_shared: bool,
) -> *mut c_void {
    on_session!("mgpuMemAlloc", 0, |s| mem_alloc(
        s,
        size,
        stream as u64,
        is_host_shared
    )) as *mut c_void
}

/// Frees memory from `mgpuMemAlloc` after the work on `stream` (the cache reuses it then).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemFree(ptr: *mut c_void, stream: *mut c_void) {
    on_session!("mgpuMemFree", (), |s| mem_free(
        s,
        ptr as usize,
        stream as u64
    ))
}

/// Copies `size` bytes from `src` to `dst` (host or device) in `stream`'s order.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemcpy(dst: *mut c_void, src: *mut c_void, size: u64, stream: *mut c_void) {
    on_session!("mgpuMemcpy", (), |s| memcpy(
        s,
        dst as usize,
        src as usize,
        size,
        stream as u64
    ))
}

/// Sets `count` 32-bit words at `dst` to `value` in `stream`'s order.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemset32(dst: *mut c_void, value: u32, count: u64, stream: *mut c_void) {
    on_session!("mgpuMemset32", (), |s| memset(
        s,
        dst as usize,
        FillValue::U32(value),
        count,
        stream as u64
    ))
}

/// Sets `count` 16-bit words at `dst` to `value` in `stream`'s order.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemset16(dst: *mut c_void, value: u16, count: u64, stream: *mut c_void) {
    on_session!("mgpuMemset16", (), |s| memset(
        s,
        dst as usize,
        FillValue::U16(value),
        count,
        stream as u64
    ))
}

/// Loads a module image (PTX, cubin, fatbin) on the default device; other devices load it at
/// their first launch.
///
/// # Safety
/// `data` points to a module image that stays readable until `mgpuModuleUnload`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuModuleLoad(data: *mut c_void) -> *mut c_void {
    // SAFETY: the caller's promise.
    on_session!("mgpuModuleLoad", 0, |s| unsafe { module_load(s, data) }) as *mut c_void
}

/// As `mgpuModuleLoad`; the driver JIT-compiles PTX at its default (highest) level.
///
/// # Safety
/// As `mgpuModuleLoad`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuModuleLoadJIT(data: *mut c_void, _opt_level: i32) -> *mut c_void {
    // SAFETY: the caller's promise.
    unsafe { mgpuModuleLoad(data) }
}

/// Unloads a module on every device it was loaded on.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuModuleUnload(module: *mut c_void) {
    on_session!("mgpuModuleUnload", (), |s| module_unload(s, module as u64))
}

/// The function `name` of `module` (the same handle every time it is asked).
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuModuleGetFunction(
    module: *mut c_void,
    name: *const c_char,
) -> *mut c_void {
    // SAFETY: the caller's promise.
    on_session!("mgpuModuleGetFunction", 0, |s| unsafe {
        module_get_function(s, module as u64, name)
    }) as *mut c_void
}

/// Launches `function` on the default device in `stream`'s order. Dynamic shared memory
/// above the default limit is opted in once per function and size; above the device's opt-in
/// limit the launch is refused with a message (nothing is launched). `extra` must be null and
/// the parameter count (LLVM 22 passes it) is not needed.
///
/// # Safety
/// `params` holds one pointer per kernel parameter, each to a value of its type; the memory
/// the kernel reaches stays valid until it has run.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn mgpuLaunchKernel(
    function: *mut c_void,
    grid_x: i64,
    grid_y: i64,
    grid_z: i64,
    block_x: i64,
    block_y: i64,
    block_z: i64,
    shared_bytes: i32,
    stream: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) {
    on_session!("mgpuLaunchKernel", (), |s| {
        if extra.is_null() {
            // SAFETY: the caller's promise.
            unsafe {
                launch_kernel(
                    s,
                    function as u64,
                    [grid_x, grid_y, grid_z],
                    [block_x, block_y, block_z],
                    shared_bytes,
                    stream as u64,
                    params,
                )
            }
        } else {
            Err(CapiError::InvalidArgument {
                what: "extra",
                detail: "launch options in `extra` are not supported; pass null".into(),
            })
        }
    })
}

/// Registers (pins) `size` bytes at `ptr` for every device, through the lock table: a range
/// inside a registered one counts one more registration.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemHostRegister(ptr: *mut c_void, size: u64) {
    on_session!("mgpuMemHostRegister", (), |s| {
        let bytes = usize::try_from(size).map_err(|_| Error::AddressOverflow {
            ptr: ptr as usize,
            len: usize::MAX,
        })?;
        host_register(s, ptr as usize, bytes)
    })
}

/// Registers the memory of a dense memref (as `mgpuMemHostRegister`).
///
/// # Safety
/// `descriptor` points to a ranked memref descriptor of `rank` dimensions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuMemHostRegisterMemRef(
    rank: i64,
    descriptor: *const MemRefDescriptor,
    element_bytes: i64,
) {
    on_session!("mgpuMemHostRegisterMemRef", (), |s| {
        // SAFETY: the caller's promise.
        let (start, bytes) = unsafe { memref_range(rank, descriptor, element_bytes) }?;
        host_register(s, start, bytes)
    })
}

/// Counts one registration of the range containing `ptr` down; the last one unpins it.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuMemHostUnregister(ptr: *mut c_void) {
    on_session!("mgpuMemHostUnregister", (), |s| host_unregister(
        s,
        ptr as usize
    ))
}

/// Unregisters the memory of a memref (as `mgpuMemHostUnregister`).
///
/// # Safety
/// `descriptor` points to a ranked memref descriptor of `rank` dimensions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuMemHostUnregisterMemRef(
    rank: i64,
    descriptor: *const MemRefDescriptor,
    element_bytes: i64,
) {
    on_session!("mgpuMemHostUnregisterMemRef", (), |s| {
        // SAFETY: the caller's promise.
        let (start, _) = unsafe { memref_range(rank, descriptor, element_bytes) }?;
        host_unregister(s, start)
    })
}

/// Makes `device` the default for this thread's later calls (allocations, copies, launches).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuSetDefaultDevice(device: i32) {
    guarded((), || {
        let index = u32::try_from(device).map_err(|_| CapiError::InvalidArgument {
            what: "device",
            detail: format!("{device} is negative"),
        });
        match index {
            Ok(index) => {
                DEFAULT_DEVICE.with(|d| d.set(index));
                Ok(())
            }
            Err(error) => {
                eprintln!("mgpuSetDefaultDevice: {error}");
                Err(error)
            }
        }
    })
}

/// At process exit (registered with `atexit` at the first call, so it runs while the driver
/// is still loaded): shuts the runtime down, reclaiming what the program left (streams it
/// never destroyed, MLIR's join inputs), and prints what was found, with the checker's verdict
/// on the trace when `GPU_RUNTIME_TRACE` was set. Calls after it (the program's destructors
/// unload its modules) do nothing.
extern "C" fn at_exit() {
    EXITED.store(true, Ordering::Release);
    // On a thread of its own: this thread's thread-local storage (the last error, the host
    // backend's current device) is already torn down when exit hooks run.
    let shutdown = std::thread::Builder::new()
        .name("gpu-runtime exit".into())
        .spawn(shared::shutdown)
        .map_err(drop)
        .and_then(|thread| thread.join().map_err(drop));
    match shutdown {
        Ok(Ok(report)) => {
            let shutdown = &report.shutdown;
            eprintln!(
                "gpu-runtime (mlir): shut down on {}: {} streams the program left reclaimed, \
                 {} unwaited token(s), {} cached bytes and {} pinned range(s) given back",
                report.backend,
                report.released_objects,
                shutdown.program.unwaited.len(),
                shutdown.trimmed_bytes,
                shutdown.unpinned_ranges,
            );
            if let Some(failure) = &report.failure {
                eprintln!("gpu-runtime (mlir): the shutdown reported: {failure}");
            }
            if let Some(trace) = &report.trace {
                eprintln!(
                    "gpu-runtime (mlir): trace of {} calls written to {}: {} defect(s)",
                    trace.calls,
                    trace.path.display(),
                    trace.defects.len()
                );
                for defect in &trace.defects {
                    eprintln!("  {defect}");
                }
            }
        }
        // Shut down already (gpurt_shutdown): nothing left to do.
        Ok(Err(CapiError::NotOpen)) => {}
        Ok(Err(error)) => eprintln!("gpu-runtime (mlir): shutdown at exit failed: {error}"),
        Err(()) => eprintln!("gpu-runtime (mlir): shutdown at exit could not run or panicked"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::status::with_last_error;
    use crate::shared::{BackendChoice, OpenOptions, open, process_test_lock};

    const NULL: *mut c_void = core::ptr::null_mut();

    fn open_host() {
        open(OpenOptions {
            backend: BackendChoice::Host,
            trace: None,
        })
        .unwrap();
        mgpuSetDefaultDevice(0);
    }

    fn last_error() -> String {
        with_last_error(|message| message.to_string_lossy().into_owned())
    }

    /// Runs `call` and returns the message it failed with, or `None` when it succeeded (the
    /// thread's last error is set to a marker first: only a failure replaces it).
    fn refusal(call: impl FnOnce()) -> Option<String> {
        const MARKER: &str = "no failure yet";
        crate::shared::status::set_last_error(&CapiError::InvalidArgument {
            what: MARKER,
            detail: String::new(),
        });
        call();
        let message = last_error();
        (!message.starts_with(MARKER)).then_some(message)
    }

    /// The operations the runtime has planned so far, and the bytes allocated now.
    fn enqueued_and_allocated() -> (u64, usize) {
        inspect(|_, session| {
            let stats = session.runtime().stats();
            let allocated = stats
                .allocator
                .iter()
                .map(|(_, _, kind)| kind.allocated)
                .sum();
            (stats.operations, allocated)
        })
    }

    /// `mgpuMemFree` with a destroyed stream is refused and leaves the allocation live: its
    /// address is not handed out again, its contents stay, and the correct free afterwards
    /// succeeds.
    #[test]
    fn a_refused_free_leaves_the_allocation_live() {
        let _serial = process_test_lock();
        open_host();
        let stream = mgpuStreamCreate();
        let ptr = mgpuMemAlloc(256, stream, false);
        mgpuMemset32(ptr, 7, 64, stream);
        let dead = mgpuStreamCreate();
        mgpuStreamDestroy(dead);
        let refused = refusal(|| mgpuMemFree(ptr, dead)).expect("a destroyed stream is refused");
        assert!(refused.contains("MLIR stream"), "{refused}");
        assert!(
            inspect(|objects, _| objects.buffers.contains_key(&(ptr as usize))),
            "the refused free left the allocation live"
        );
        let other = mgpuMemAlloc(256, NULL, false);
        assert_ne!(
            other, ptr,
            "a live allocation's address is not handed out again"
        );
        let mut host = [0u32; 64];
        mgpuMemcpy(host.as_mut_ptr().cast(), ptr, 256, stream);
        mgpuStreamSynchronize(stream);
        assert!(host.iter().all(|&word| word == 7), "{host:?}");
        assert_eq!(
            refusal(|| mgpuMemFree(ptr, stream)),
            None,
            "the correct free"
        );
        assert_eq!(refusal(|| mgpuMemFree(other, NULL)), None);
        mgpuStreamSynchronize(stream);
        mgpuStreamDestroy(stream);
        let report = shared::shutdown().unwrap();
        assert_eq!(report.shutdown.program.unwaited, vec![]);
    }

    /// Every call that takes a stream refuses a destroyed one before it does anything, whatever
    /// its other arguments (no bytes, managed memory, a null pointer).
    #[test]
    fn a_destroyed_stream_is_refused_by_every_call_before_anything_happens() {
        let _serial = process_test_lock();
        open_host();
        let buffer = mgpuMemAlloc(64, NULL, false);
        let dead = mgpuStreamCreate();
        mgpuStreamDestroy(dead);
        let before = enqueued_and_allocated();
        let mut host = [0u8; 64];
        let h = host.as_mut_ptr().cast::<c_void>();
        let cases: [(&str, Option<String>); 8] = [
            (
                "managed alloc",
                refusal(|| assert!(mgpuMemAlloc(64, dead, true).is_null())),
            ),
            (
                "alloc of no bytes",
                refusal(|| assert!(mgpuMemAlloc(0, dead, false).is_null())),
            ),
            (
                "alloc",
                refusal(|| assert!(mgpuMemAlloc(64, dead, false).is_null())),
            ),
            ("free of null", refusal(|| mgpuMemFree(NULL, dead))),
            (
                "memset of nothing",
                refusal(|| mgpuMemset32(buffer, 1, 0, dead)),
            ),
            ("memset16", refusal(|| mgpuMemset16(buffer, 1, 8, dead))),
            (
                "memcpy of no bytes",
                refusal(|| mgpuMemcpy(h, buffer, 0, dead)),
            ),
            ("memcpy", refusal(|| mgpuMemcpy(h, buffer, 64, dead))),
        ];
        for (what, refused) in cases {
            let message = refused.unwrap_or_else(|| panic!("{what} with a destroyed stream ran"));
            assert!(message.contains("MLIR stream"), "{what}: {message}");
        }
        assert_eq!(
            enqueued_and_allocated(),
            before,
            "nothing enqueued or allocated"
        );
        mgpuMemFree(buffer, NULL);
        shared::shutdown().unwrap();
    }

    /// Handles of a session that was shut down are refused in the next one, and never act on
    /// its objects (before, handles restarted at the same values in every session).
    #[test]
    fn a_handle_of_an_earlier_session_is_refused_and_leaves_the_new_one_alone() {
        let _serial = process_test_lock();
        open_host();
        let old_stream = mgpuStreamCreate();
        let old_event = mgpuEventCreate();
        shared::shutdown().unwrap();
        open_host();
        let stream = mgpuStreamCreate();
        let event = mgpuEventCreate();
        assert_ne!(
            stream, old_stream,
            "a new session issues new stream handles"
        );
        assert_ne!(event, old_event, "and new event handles");
        let buffer = mgpuMemAlloc(64, stream, false);
        mgpuMemset32(buffer, 3, 16, stream);
        let before = enqueued_and_allocated();
        let cases = [
            refusal(|| mgpuStreamDestroy(old_stream)),
            refusal(|| mgpuStreamSynchronize(old_stream)),
            refusal(|| mgpuStreamWaitEvent(old_stream, event)),
            refusal(|| mgpuStreamWaitEvent(stream, old_event)),
            refusal(|| mgpuEventRecord(old_event, stream)),
            refusal(|| mgpuEventSynchronize(old_event)),
            refusal(|| mgpuEventDestroy(old_event)),
            refusal(|| mgpuMemset32(buffer, 9, 16, old_stream)),
            refusal(|| mgpuMemFree(buffer, old_stream)),
        ];
        for refused in cases {
            let message = refused.expect("a handle of the earlier session is refused");
            assert!(message.contains("earlier session"), "{message}");
        }
        assert_eq!(
            enqueued_and_allocated(),
            before,
            "nothing enqueued or freed"
        );
        let live = inspect(|objects, _| (objects.streams.len(), objects.events.len()));
        assert_eq!(live, (1, 1), "the new session's stream and event are alive");
        let mut host = [0u32; 16];
        mgpuMemcpy(host.as_mut_ptr().cast(), buffer, 64, stream);
        assert_eq!(refusal(|| mgpuStreamSynchronize(stream)), None);
        assert!(host.iter().all(|&word| word == 3), "{host:?}");
        mgpuMemFree(buffer, stream);
        mgpuEventDestroy(event);
        mgpuStreamSynchronize(stream);
        mgpuStreamDestroy(stream);
        let report = shared::shutdown().unwrap();
        assert_eq!(report.released_objects, 0);
        assert_eq!(report.shutdown.program.unwaited, vec![]);
    }

    /// A memset or copy whose range starts in an allocation of `mgpuMemAlloc` must end inside
    /// it: past its end is refused, and nothing is enqueued.
    #[test]
    fn memsets_and_copies_past_an_allocations_end_are_refused_with_nothing_enqueued() {
        let _serial = process_test_lock();
        open_host();
        let stream = mgpuStreamCreate();
        let buffer = mgpuMemAlloc(64, stream, false);
        mgpuMemset32(buffer, 1, 16, stream);
        mgpuStreamSynchronize(stream);
        let before = enqueued_and_allocated();
        let mut host = [0u32; 32];
        let h = host.as_mut_ptr().cast::<c_void>();
        let inside = |offset: usize| buffer.wrapping_byte_add(offset);
        let cases: [(&str, Option<String>); 7] = [
            ("memset32", refusal(|| mgpuMemset32(buffer, 2, 17, stream))),
            (
                "memset32 inside",
                refusal(|| mgpuMemset32(inside(4), 2, 16, stream)),
            ),
            (
                "memset32, no stream",
                refusal(|| mgpuMemset32(buffer, 2, 17, NULL)),
            ),
            (
                "memset16",
                refusal(|| mgpuMemset16(inside(32), 2, 17, stream)),
            ),
            (
                "memcpy source",
                refusal(|| mgpuMemcpy(h, inside(8), 64, stream)),
            ),
            (
                "memcpy destination",
                refusal(|| mgpuMemcpy(buffer, h, 65, stream)),
            ),
            (
                "memcpy within",
                refusal(|| mgpuMemcpy(inside(32), buffer, 33, stream)),
            ),
        ];
        for (what, refused) in cases {
            let message = refused.unwrap_or_else(|| panic!("{what} past the end was accepted"));
            assert!(message.contains("past the end"), "{what}: {message}");
        }
        assert_eq!(enqueued_and_allocated(), before, "nothing was enqueued");
        mgpuMemcpy(h, buffer, 64, stream);
        mgpuStreamSynchronize(stream);
        assert!(host[..16].iter().all(|&word| word == 1), "{host:?}");
        mgpuMemFree(buffer, stream);
        mgpuStreamSynchronize(stream);
        mgpuStreamDestroy(stream);
        let report = shared::shutdown().unwrap();
        assert_eq!(report.shutdown.program.unwaited, vec![]);
    }

    /// Runs `check` on the session's MLIR objects and runtime.
    fn inspect<T>(
        check: impl FnOnce(
            &Objects<gpu_runtime::host::HostBackend>,
            &Session<gpu_runtime::host::HostBackend>,
        ) -> T,
    ) -> T {
        with_session(|session| match session {
            shared::AnySession::Host(s) => Ok(check(&s.mlir.lock(), s)),
            _ => panic!("the tests open the host backend"),
        })
        .unwrap()
    }

    #[test]
    fn copies_and_16_and_32_bit_memsets_run_in_stream_order() {
        let _serial = process_test_lock();
        open_host();
        let stream = mgpuStreamCreate();
        assert!(!stream.is_null());
        let device = mgpuMemAlloc(64, stream, false);
        let mut host = [0u8; 64];
        mgpuMemset32(device, 0x0102_0304, 8, stream);
        mgpuMemset16(device.wrapping_byte_add(32), 0xbeef, 16, stream);
        mgpuMemcpy(host.as_mut_ptr().cast(), device, 64, stream);
        mgpuStreamSynchronize(stream);
        assert!(
            host[..32]
                .chunks(4)
                .all(|w| w == 0x0102_0304u32.to_ne_bytes())
        );
        assert!(host[32..].chunks(2).all(|h| h == 0xbeefu16.to_ne_bytes()));
        mgpuMemFree(device, stream);
        mgpuStreamSynchronize(stream);
        mgpuStreamDestroy(stream);
        let report = shared::shutdown().unwrap();
        assert_eq!(
            report.released_objects, 0,
            "the program destroyed its stream"
        );
        assert_eq!(report.shutdown.program.unwaited, vec![]);
    }

    /// MLIR's join: two streams recorded into events, a third waiting on both; the inputs are
    /// never destroyed. Their driver streams go back at once, an idle input whose event has
    /// completed is dropped at the next stream creation, and shutdown counts what was left.
    #[test]
    fn a_join_leaves_no_driver_stream_behind_and_its_inputs_are_reclaimed() {
        let _serial = process_test_lock();
        open_host();
        let buffer = mgpuMemAlloc(256, NULL, false);
        for _ in 0..3 {
            let (s1, s2) = (mgpuStreamCreate(), mgpuStreamCreate());
            mgpuMemset32(buffer, 1, 32, s1);
            mgpuMemset32(buffer.wrapping_byte_add(128), 2, 32, s2);
            let (e1, e2) = (mgpuEventCreate(), mgpuEventCreate());
            mgpuEventRecord(e1, s1);
            mgpuEventRecord(e2, s2);
            let s3 = mgpuStreamCreate();
            mgpuStreamWaitEvent(s3, e1);
            mgpuStreamWaitEvent(s3, e2);
            mgpuEventDestroy(e1);
            mgpuEventDestroy(e2);
            let mut host = [0u32; 64];
            mgpuMemcpy(host.as_mut_ptr().cast(), buffer, 256, s3);
            mgpuStreamSynchronize(s3);
            mgpuStreamDestroy(s3);
            assert!(host[..32].iter().all(|&w| w == 1) && host[32..].iter().all(|&w| w == 2));
        }
        let (streams, held) = inspect(|objects, _| {
            let held = objects
                .streams
                .iter()
                .filter(|(_, s)| s.tail.is_some())
                .count();
            (objects.streams.len(), held)
        });
        assert_eq!(streams, 6, "the program never destroyed the join inputs");
        assert!(
            held <= 2,
            "only the last iteration's inputs may still hold a branch"
        );
        let created = inspect(|_, session| session.runtime().stats().streams_created);
        assert_eq!(
            created, 2,
            "two pooled driver streams (the inputs run side by side) served all nine MLIR streams"
        );
        mgpuMemFree(buffer, NULL);
        let report = shared::shutdown().unwrap();
        assert_eq!(report.released_objects, 6);
        assert_eq!(report.shutdown.program.unwaited, vec![], "nothing was lost");
    }

    /// With a trace asked for, the program's own calls are written beside the backend's and
    /// checked: the checker names the join's input streams the program never destroyed.
    #[test]
    fn the_programs_own_trace_shows_the_streams_it_leaked() {
        let _serial = process_test_lock();
        let path = std::env::temp_dir().join(format!("mlir-trace-{}.txt", std::process::id()));
        open(OpenOptions {
            backend: BackendChoice::Host,
            trace: Some(path.clone()),
        })
        .unwrap();
        mgpuSetDefaultDevice(0);
        let buffer = mgpuMemAlloc(64, NULL, false);
        let (s1, s2) = (mgpuStreamCreate(), mgpuStreamCreate());
        mgpuMemset32(buffer, 1, 8, s1);
        mgpuMemset32(buffer.wrapping_byte_add(32), 2, 8, s2);
        let (e1, e2) = (mgpuEventCreate(), mgpuEventCreate());
        mgpuEventRecord(e1, s1);
        mgpuEventRecord(e2, s2);
        let s3 = mgpuStreamCreate();
        mgpuStreamWaitEvent(s3, e1);
        mgpuStreamWaitEvent(s3, e2);
        mgpuEventDestroy(e1);
        mgpuEventDestroy(e2);
        mgpuMemFree(buffer, s3);
        mgpuStreamSynchronize(s3);
        mgpuStreamDestroy(s3);
        let report = shared::shutdown().unwrap();
        assert_eq!(
            report.trace.unwrap().defects,
            Vec::<String>::new(),
            "ours is clean"
        );
        let program = path.with_extension("txt.mlir");
        let text = std::fs::read_to_string(&program).unwrap();
        let parsed = gpu_runtime::token::parse_trace(&text).unwrap();
        let defects: Vec<String> = parsed
            .check()
            .iter()
            .map(|d| parsed.describe(d).to_string())
            .collect();
        assert_eq!(defects.len(), 2, "{defects:?}");
        assert!(
            defects.iter().all(|d| d.contains("never destroyed")),
            "{defects:?}"
        );
        for file in [path, program] {
            let _ = std::fs::remove_file(file);
        }
    }

    #[test]
    fn nested_registrations_are_counted_and_unregistered_in_any_order() {
        let _serial = process_test_lock();
        open_host();
        let mut data = vec![0i32; 4096];
        let base = data.as_mut_ptr() as i64;
        // A rank-1 descriptor: sizes then strides follow the offset.
        let descriptor = |offset: i64, len: i64| [base, base, offset, len, 1];
        let whole = descriptor(0, 4096);
        let part = descriptor(1024, 512);
        let whole_ptr = whole.as_ptr().cast::<MemRefDescriptor>();
        let part_ptr = part.as_ptr().cast::<MemRefDescriptor>();
        let start = data.as_ptr() as usize;
        let pinned = |at: usize, len: usize| {
            inspect(|_, s| s.runtime().pinned_address(at, len, DeviceId(0)).unwrap())
        };
        // SAFETY (each call): descriptors of rank 1 over `data`, which outlives them.
        unsafe {
            mgpuMemHostRegisterMemRef(1, whole_ptr, 4);
            mgpuMemHostRegisterMemRef(1, part_ptr, 4);
        }
        assert!(pinned(start + 4096, 2048).is_some());
        // SAFETY: as above.
        unsafe { mgpuMemHostUnregisterMemRef(1, whole_ptr, 4) };
        assert!(pinned(start, 16384).is_some(), "one registration is left");
        // SAFETY: as above.
        unsafe { mgpuMemHostUnregisterMemRef(1, part_ptr, 4) };
        assert!(pinned(start, 4).is_none(), "the last one unpinned it");
        // SAFETY: as above; a third unregistration has nothing left to count down.
        unsafe { mgpuMemHostUnregisterMemRef(1, part_ptr, 4) };
        assert!(last_error().contains("no locked range"), "{}", last_error());
        let strided = [base, base, 0, 8, 2];
        // SAFETY: a rank-1 descriptor over `data`.
        unsafe { mgpuMemHostRegisterMemRef(1, strided.as_ptr().cast(), 4) };
        assert!(last_error().contains("not dense"), "{}", last_error());
        // SAFETY: null is checked.
        unsafe { mgpuMemHostRegisterMemRef(1, core::ptr::null(), 4) };
        assert!(last_error().contains("null"), "{}", last_error());
        // Offsets and sizes that would reach outside the memref (before: a negative offset
        // wrapped to memory below it; a huge one overflowed, a panic caught at the boundary).
        for (offset, len, element_bytes, message) in [
            (-1, 16, 4, "offset: -1 is negative"),
            (i64::MAX, 16, 4, "do not fit the address space"),
            (0, -16, 4, "negative"),
            (0, 16, 0, "element size"),
            (0, i64::MAX, 8, "do not fit the address space"),
        ] {
            let bad = [base, base, offset, len, 1];
            // SAFETY: a rank-1 descriptor; nothing is registered.
            unsafe { mgpuMemHostRegisterMemRef(1, bad.as_ptr().cast(), element_bytes) };
            assert!(last_error().contains(message), "{}", last_error());
        }
        assert!(pinned(start, 4).is_none(), "nothing was registered");
        shared::shutdown().unwrap();
    }

    #[test]
    fn the_default_device_moves_every_later_call() {
        let _serial = process_test_lock();
        open_host();
        let on_zero = mgpuMemAlloc(64, NULL, false);
        mgpuSetDefaultDevice(1);
        let stream = mgpuStreamCreate();
        let on_one = mgpuMemAlloc(64, stream, false);
        mgpuMemset32(on_one, 5, 16, stream);
        mgpuStreamSynchronize(stream);
        let devices = inspect(|objects, _| {
            [on_zero, on_one].map(|ptr| objects.buffers[&(ptr as usize)].device())
        });
        assert_eq!(devices, [DeviceId(0), DeviceId(1)]);
        mgpuMemFree(on_one, stream);
        mgpuStreamSynchronize(stream);
        mgpuStreamDestroy(stream);
        mgpuSetDefaultDevice(0);
        mgpuMemFree(on_zero, NULL);
        mgpuSetDefaultDevice(-1);
        assert!(last_error().contains("negative"), "{}", last_error());
        shared::shutdown().unwrap();
    }

    #[test]
    fn bad_handles_and_images_are_reported_and_change_nothing() {
        let _serial = process_test_lock();
        open_host();
        mgpuStreamSynchronize(0x1234 as *mut c_void);
        assert!(
            last_error().contains("0x1234 is not a handle of this library (a MLIR stream"),
            "{}",
            last_error()
        );
        mgpuEventRecord(0x1234 as *mut c_void, NULL);
        assert!(
            last_error().contains("not a handle of this library (a MLIR event"),
            "{}",
            last_error()
        );
        let event = mgpuEventCreate();
        mgpuEventRecord(event, NULL);
        assert!(
            last_error().contains("MLIR stream handle is a null pointer"),
            "{}",
            last_error()
        );
        mgpuStreamDestroy(event);
        assert!(
            last_error().contains("is a MLIR event handle where a MLIR stream handle"),
            "{}",
            last_error()
        );
        mgpuEventDestroy(event);
        assert_eq!(
            inspect(|objects, _| objects.events.len()),
            0,
            "destroyed by its own call only"
        );
        let stream = mgpuStreamCreate();
        mgpuStreamDestroy(stream);
        mgpuStreamDestroy(stream);
        assert!(
            last_error().contains("names no live MLIR stream: it was already released"),
            "double destroy: {}",
            last_error()
        );
        let local = 0u32;
        mgpuMemFree((&raw const local).cast_mut().cast(), NULL);
        assert!(last_error().contains("no allocation"), "{}", last_error());
        let buffer = mgpuMemAlloc(64, NULL, false);
        mgpuMemFree(buffer.wrapping_byte_add(8), NULL);
        assert!(
            last_error().contains("lies inside the allocation"),
            "{}",
            last_error()
        );
        mgpuMemFree(buffer, NULL);
        let image = c"// PTX";
        // SAFETY: a NUL-terminated image (refused by the host backend).
        let module = unsafe { mgpuModuleLoadJIT(image.as_ptr().cast_mut().cast(), 2) };
        assert!(module.is_null());
        assert!(
            last_error().contains("host backend does not support"),
            "{}",
            last_error()
        );
        // SAFETY: a NUL-terminated name; the module handle is checked first.
        let function = unsafe { mgpuModuleGetFunction(module, c"k".as_ptr()) };
        assert!(function.is_null());
        let mut params: [*mut c_void; 0] = [];
        // SAFETY: refused before the parameters are read.
        unsafe {
            mgpuLaunchKernel(
                function,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                NULL,
                params.as_mut_ptr(),
                core::ptr::null_mut(),
            )
        };
        assert!(
            last_error().contains("MLIR function handle is a null pointer"),
            "{}",
            last_error()
        );
        assert!(
            mgpuMemAlloc(0, NULL, false).is_null(),
            "no bytes: null, as upstream"
        );
        let report = shared::shutdown().unwrap();
        assert_eq!(report.released_objects, 0);
    }
}
