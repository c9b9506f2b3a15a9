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
//! Failures print `mgpuXxx: message` on stderr (as upstream's wrappers do), set the thread's
//! last error, and return null where the function returns a pointer.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use hashbrown::HashMap;

use gpu_runtime::DeviceId;
use gpu_runtime::Error;
use gpu_runtime::allocator::MemoryKind;
use gpu_runtime::backend::{FillValue, LaunchDims};
use gpu_runtime::id::{EventId, StreamId};
use gpu_runtime::runtime::{Buffer, Kernel, ModuleId, Span};
use gpu_runtime::token::{Token, TraceOp};

use crate::shared::{
    self, CapiError, ClientBackend, Session, TraceExport, dispatch, guarded, with_session,
};

thread_local! {
    /// The device `mgpuSetDefaultDevice` chose on this thread (upstream's is thread-local too).
    static DEFAULT_DEVICE: Cell<u32> = const { Cell::new(0) };
    /// The session (by [`MlirObjects::generation`]) and device this layer last made current
    /// on this thread (generation 0: none yet).
    static MADE_CURRENT: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

/// Set once the exit hook has shut the runtime down: later calls do nothing.
static EXITED: AtomicBool = AtomicBool::new(false);

/// Handle values: a tag in the top byte per kind (no user-space pointer starts with it), a
/// serial below, so a stale or foreign pointer is recognised.
const STREAM_TAG: u64 = 0xC1 << 56;
const EVENT_TAG: u64 = 0xC2 << 56;
const MODULE_TAG: u64 = 0xC3 << 56;
const FUNCTION_TAG: u64 = 0xC4 << 56;

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
    /// Tells sessions apart (a later session may reuse an earlier one's address).
    generation: u64,
    inner: Mutex<Objects<B>>,
}

/// The generation of the next session's MLIR objects (0 means none).
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

struct Objects<B: ClientBackend> {
    next_serial: u64,
    streams: HashMap<u64, Stream>,
    /// Streams whose tail is a branch of a recorded event, oldest first: dropped once done.
    idle: VecDeque<u64>,
    events: HashMap<u64, Option<Token>>,
    modules: HashMap<u64, ModuleId>,
    functions: HashMap<u64, Function>,
    /// Function handles by module, then name, so asking again (the lowering asks before every
    /// launch) returns the same handle, found without allocating.
    function_names: HashMap<ModuleId, HashMap<CString, u64>>,
    /// Kernels resolved per function handle and device.
    kernels: HashMap<(u64, u32), Kernel<'static, B>>,
    buffers: HashMap<usize, Buffer<'static, B>>,
    /// The program's own stream/event calls and where to write them, when asked for.
    trace: Option<(PathBuf, Vec<TraceOp>)>,
}

impl<B: ClientBackend> MlirObjects<B> {
    /// Empty, recording the program's own stream and event calls when the session writes a
    /// trace to `trace` (`GPU_RUNTIME_TRACE`): they go to the same path with `.mlir` appended.
    pub fn new(trace: Option<&Path>) -> Self {
        let program_trace = trace.map(|path| {
            let mut name = path.as_os_str().to_owned();
            name.push(".mlir");
            (PathBuf::from(name), Vec::new())
        });
        Self {
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
            inner: Mutex::new(Objects {
                trace: program_trace,
                next_serial: 1,
                streams: HashMap::new(),
                idle: VecDeque::new(),
                events: HashMap::new(),
                modules: HashMap::new(),
                functions: HashMap::new(),
                function_names: HashMap::new(),
                kernels: HashMap::new(),
                buffers: HashMap::new(),
            }),
        }
    }
}

impl<B: ClientBackend> MlirObjects<B> {
    fn lock(&self) -> MutexGuard<'_, Objects<B>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases everything the program left (streams it never destroyed, events, buffers;
    /// modules stay for the runtime's shutdown to unload); returns how many streams it left.
    pub fn release(&self, session: &Session<B>) -> usize {
        let mut objects = self.lock();
        let runtime = session.runtime();
        let left = objects.streams.len();
        for (_, stream) in objects.streams.drain() {
            for token in stream.tail.into_iter().chain(stream.waits) {
                let _ = runtime.wait(token);
            }
        }
        for (_, token) in objects.events.drain() {
            if let Some(token) = token {
                let _ = runtime.release(token);
            }
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

impl<B: ClientBackend> Objects<B> {
    /// Records one of the program's stream/event calls, when a trace is asked for.
    fn note(&mut self, op: impl FnOnce() -> TraceOp) {
        if let Some((_, ops)) = &mut self.trace {
            ops.push(op());
        }
    }

    fn handle(&mut self, tag: u64) -> u64 {
        let serial = self.next_serial;
        self.next_serial += 1;
        tag | serial
    }

    fn stream(&mut self, handle: u64) -> Result<&mut Stream, CapiError> {
        self.streams
            .get_mut(&handle)
            .ok_or_else(|| unknown("stream", handle))
    }

    fn event(&mut self, handle: u64) -> Result<&mut Option<Token>, CapiError> {
        self.events
            .get_mut(&handle)
            .ok_or_else(|| unknown("event", handle))
    }
}

/// A handle's name in the program's trace (its serial number).
fn stream_id(handle: u64) -> StreamId {
    StreamId(handle as u32)
}

fn event_id(handle: u64) -> EventId {
    EventId(handle as u32)
}

fn unknown(what: &'static str, handle: u64) -> CapiError {
    CapiError::InvalidArgument {
        what,
        detail: format!("{handle:#x} is no live MLIR {what} of this library"),
    }
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
    let wanted = (session.mlir.generation, device().0);
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

/// The operation's dependencies on `stream`: its tail and queued waits (emptied).
fn after_stream<B: ClientBackend>(
    objects: &mut Objects<B>,
    stream: u64,
) -> Result<Vec<Token>, CapiError> {
    if stream == 0 {
        return Ok(Vec::new());
    }
    let stream = objects.stream(stream)?;
    let mut after = core::mem::take(&mut stream.waits);
    after.extend(stream.tail.take());
    Ok(after)
}

/// Puts `token` at `stream`'s tail (with no stream, the caller waits for it now).
fn set_tail<B: ClientBackend>(
    session: &'static Session<B>,
    objects: &mut Objects<B>,
    stream: u64,
    token: Token,
) -> Result<(), CapiError> {
    if stream == 0 {
        return Ok(session.runtime().wait(token)?);
    }
    objects.stream(stream)?.tail = Some(token);
    Ok(())
}

/// Gives `after` back to `stream` when the operation was refused (the runtime leaves a
/// refused operation's dependencies untouched).
fn restore<B: ClientBackend>(objects: &mut Objects<B>, stream: u64, mut after: Vec<Token>) {
    if let Ok(entry) = objects.stream(stream) {
        entry.tail = after.pop();
        entry.waits = after;
    }
}

/// Runs one operation on `stream`: `work` gets the dependencies and returns the new token.
fn on_stream<B: ClientBackend, T>(
    session: &'static Session<B>,
    stream: u64,
    work: impl FnOnce(&mut Vec<Token>) -> Result<(Token, T), CapiError>,
) -> Result<T, CapiError> {
    let mut objects = session.mlir.lock();
    let mut after = after_stream(&mut objects, stream)?;
    match work(&mut after) {
        Ok((token, value)) => {
            if stream != 0 {
                objects.note(|| TraceOp::Launch {
                    stream: stream_id(stream),
                    device: Some(device()),
                });
            }
            set_tail(session, &mut objects, stream, token)?;
            Ok(value)
        }
        Err(error) => {
            restore(&mut objects, stream, after);
            Err(error)
        }
    }
}

fn stream_create<B: ClientBackend>(session: &'static Session<B>) -> Result<u64, CapiError> {
    let mut objects = session.mlir.lock();
    // The oldest idle stream is dropped if its event has completed (one query).
    if let Some(oldest) = objects.idle.pop_front() {
        let done = match objects.streams.get_mut(&oldest) {
            Some(stream) if stream.waits.is_empty() => match stream.tail.take() {
                Some(tail) => match session.runtime().wait_if_done(tail)? {
                    Some(pending) => {
                        stream.tail = Some(pending);
                        false
                    }
                    None => true,
                },
                None => true,
            },
            _ => true,
        };
        if !done {
            objects.idle.push_front(oldest);
        }
    }
    let handle = objects.handle(STREAM_TAG);
    objects.streams.insert(handle, Stream::default());
    objects.note(|| TraceOp::CreateStream {
        stream: stream_id(handle),
        device: device(),
    });
    Ok(handle)
}

fn stream_destroy<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    let entry = objects
        .streams
        .remove(&stream)
        .ok_or_else(|| unknown("stream", stream))?;
    objects.idle.retain(|&s| s != stream);
    objects.note(|| TraceOp::DestroyStream {
        stream: stream_id(stream),
    });
    // Work still pending goes on (CUDA allows destroying a busy stream); its tokens are
    // released without a wait, as the program chose not to wait for them.
    for token in entry.tail.into_iter().chain(entry.waits) {
        session.runtime().release(token)?;
    }
    Ok(())
}

fn stream_synchronize<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    let after = after_stream(&mut objects, stream)?;
    objects.idle.retain(|&s| s != stream);
    objects.note(|| TraceOp::SynchronizeStream {
        stream: stream_id(stream),
    });
    let runtime = session.runtime();
    after
        .into_iter()
        .try_for_each(|token| runtime.wait(token))
        .map_err(CapiError::from)
}

fn stream_wait_event<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
    event: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    objects.stream(stream)?;
    objects.event(event)?;
    objects.note(|| TraceOp::Wait {
        stream: stream_id(stream),
        event: event_id(event),
    });
    let Some(token) = objects.event(event)?.take() else {
        return Ok(()); // never recorded, or done: nothing to wait for
    };
    let [keep, branch] = two(session.runtime().fork(token, 2)?);
    *objects.event(event)? = Some(keep);
    objects.stream(stream)?.waits.push(branch);
    objects.idle.retain(|&s| s != stream);
    Ok(())
}

fn two(tokens: Vec<Token>) -> [Token; 2] {
    <[Token; 2]>::try_from(tokens).unwrap_or_else(|_| unreachable!("a fork into two"))
}

fn event_create<B: ClientBackend>(session: &'static Session<B>) -> Result<u64, CapiError> {
    let mut objects = session.mlir.lock();
    let handle = objects.handle(EVENT_TAG);
    objects.events.insert(handle, None);
    objects.note(|| TraceOp::CreateEvent {
        event: event_id(handle),
        device: device(),
    });
    Ok(handle)
}

fn event_destroy<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
) -> Result<(), CapiError> {
    let token = {
        let mut objects = session.mlir.lock();
        let token = objects
            .events
            .remove(&event)
            .ok_or_else(|| unknown("event", event))?;
        objects.note(|| TraceOp::DestroyEvent {
            event: event_id(event),
        });
        token
    };
    match token {
        Some(token) => Ok(session.runtime().release(token)?),
        None => Ok(()),
    }
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
    match token {
        Some(token) => Ok(session.runtime().wait(token)?),
        None => Ok(()),
    }
}

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
    let mut after = after_stream(&mut objects, stream)?;
    objects.note(|| TraceOp::Record {
        event: event_id(event),
        stream: stream_id(stream),
    });
    let point = match after.len() {
        0 => None,
        1 => after.pop(),
        _ => Some(runtime.join(&mut after)?),
    };
    let (recorded, tail) = match point {
        Some(point) => {
            let [for_event, for_stream] = two(runtime.fork_detached(point, 2)?);
            (Some(for_event), Some(for_stream))
        }
        None => (None, None),
    };
    if let Some(old) = core::mem::replace(objects.event(event)?, recorded) {
        runtime.release(old)?;
    }
    let idle = tail.is_some();
    objects.stream(stream)?.tail = tail;
    if idle {
        objects.idle.push_back(stream);
    }
    Ok(())
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
    if size == 0 {
        return Ok(0); // upstream returns null for no bytes
    }
    let kind = if host_shared {
        MemoryKind::Managed
    } else {
        MemoryKind::Device
    };
    let device = device();
    let buffer = if stream == 0 || host_shared {
        runtime.alloc(device, kind, size)?
    } else {
        on_stream(session, stream, |after| {
            let (buffer, token) = runtime.alloc_after(device, kind, size, after)?;
            Ok((token, buffer))
        })?
    };
    let address = buffer.address();
    session.mlir.lock().buffers.insert(address, buffer);
    Ok(address)
}

fn mem_free<B: ClientBackend>(
    session: &'static Session<B>,
    ptr: usize,
    stream: u64,
) -> Result<(), CapiError> {
    if ptr == 0 {
        return Ok(());
    }
    let mut objects = session.mlir.lock();
    let buffer = objects
        .buffers
        .remove(&ptr)
        .ok_or_else(|| CapiError::InvalidArgument {
            what: "pointer to free",
            detail: format!("{ptr:#x} is no allocation of mgpuMemAlloc (or was freed already)"),
        })?;
    let runtime = session.runtime();
    let tail = match stream {
        0 => None,
        _ => {
            let mut after = after_stream(&mut objects, stream)?;
            match after.len() {
                0 => None,
                1 => after.pop(),
                _ => Some(runtime.join(&mut after)?),
            }
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
    let bytes = bytes as usize;
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: the program's own pointers, valid until the copy completes (the ABI's contract:
    // MLIR orders its frees after the stream).
    let (dst, src) = unsafe { (Span::from_raw(dst, bytes), Span::from_raw(src, bytes)) };
    on_stream(session, stream, |after| {
        Ok((runtime.copy(device(), dst, src, after)?, ()))
    })
}

fn memset<B: ClientBackend>(
    session: &'static Session<B>,
    dst: usize,
    value: FillValue,
    count: u64,
    stream: u64,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    let bytes = (count as usize)
        .checked_mul(value.width())
        .ok_or(Error::AddressOverflow {
            ptr: dst,
            len: usize::MAX,
        })?;
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: as in `memcpy`.
    let dst = unsafe { Span::from_raw(dst, bytes) };
    on_stream(session, stream, |after| {
        Ok((runtime.fill_elements(device(), dst, value, after)?, ()))
    })
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
    // SAFETY: the caller's promise, passed on.
    let module = unsafe { session.runtime().load_module(device(), image) }?;
    let mut objects = session.mlir.lock();
    let handle = objects.handle(MODULE_TAG);
    objects.modules.insert(handle, module);
    Ok(handle)
}

fn module_unload<B: ClientBackend>(
    session: &'static Session<B>,
    module: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    let id = objects
        .modules
        .remove(&module)
        .ok_or_else(|| unknown("module", module))?;
    let gone: Vec<u64> = objects
        .functions
        .iter()
        .filter(|(_, f)| f.module == id)
        .map(|(&h, _)| h)
        .collect();
    for handle in gone {
        objects.functions.remove(&handle);
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
    let id = *objects
        .modules
        .get(&module)
        .ok_or_else(|| unknown("module", module))?;
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
    let handle = objects.handle(FUNCTION_TAG);
    objects.kernels.insert((handle, device().0), kernel);
    objects
        .function_names
        .entry(id)
        .or_default()
        .insert(name.to_owned(), handle);
    objects.functions.insert(
        handle,
        Function {
            module: id,
            name: name.to_owned(),
        },
    );
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
    let kernel = kernel_of(session, function, device)?;
    on_stream(session, stream, |after| {
        // SAFETY: the caller's promise for `params` and the memory the kernel reaches.
        let token = unsafe { kernel.launch_packed(dims, params, after) }?;
        Ok((token, ()))
    })
}

/// The kernel of function handle `function` on `device`, resolved once per device.
fn kernel_of<B: ClientBackend>(
    session: &'static Session<B>,
    function: u64,
    device: DeviceId,
) -> Result<Kernel<'static, B>, CapiError> {
    let objects = session.mlir.lock();
    if let Some(&kernel) = objects.kernels.get(&(function, device.0)) {
        return Ok(kernel);
    }
    let entry = objects
        .functions
        .get(&function)
        .ok_or_else(|| unknown("function", function))?;
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
/// (dense only, as upstream requires).
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
    let rank = usize::try_from(rank).map_err(|_| CapiError::InvalidArgument {
        what: "memref rank",
        detail: format!("{rank} is negative"),
    })?;
    // SAFETY: the caller's promise: the descriptor has `rank` sizes, then `rank` strides.
    let (d, sizes, strides) = unsafe {
        let d = &*descriptor;
        let sizes = core::slice::from_raw_parts(d.sizes.as_ptr(), rank);
        let strides = core::slice::from_raw_parts(d.sizes.as_ptr().add(rank), rank);
        (d, sizes, strides)
    };
    let mut dense = 1i64;
    for (&size, &stride) in sizes.iter().zip(strides).rev() {
        if stride != dense && size > 1 {
            return Err(CapiError::InvalidArgument {
                what: "memref",
                detail: format!("strides {strides:?} of sizes {sizes:?} are not dense"),
            });
        }
        dense = dense.saturating_mul(size);
    }
    let bytes = dense.saturating_mul(element_bytes);
    let start = (d.aligned as usize).wrapping_add((d.offset * element_bytes) as usize);
    Ok((start, usize::try_from(bytes).unwrap_or(0)))
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
    on_session!("mgpuMemHostRegister", (), |s| host_register(
        s,
        ptr as usize,
        size as usize
    ))
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
                .values()
                .filter(|s| s.tail.is_some())
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
            last_error().contains("no live MLIR stream"),
            "{}",
            last_error()
        );
        mgpuEventRecord(0x1234 as *mut c_void, NULL);
        assert!(
            last_error().contains("no live MLIR event"),
            "{}",
            last_error()
        );
        let event = mgpuEventCreate();
        mgpuEventRecord(event, NULL);
        assert!(
            last_error().contains("no live MLIR stream"),
            "{}",
            last_error()
        );
        mgpuEventDestroy(event);
        let stream = mgpuStreamCreate();
        mgpuStreamDestroy(stream);
        mgpuStreamDestroy(stream);
        assert!(
            last_error().contains("stream"),
            "double destroy: {}",
            last_error()
        );
        let local = 0u32;
        mgpuMemFree((&raw const local).cast_mut().cast(), NULL);
        assert!(last_error().contains("no allocation"), "{}", last_error());
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
            last_error().contains("no live MLIR function"),
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
