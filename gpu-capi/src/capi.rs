//! The C API of `include/gpu_runtime.h`: `gpurt_*` functions over the process-wide runtime.
//! Each translates its arguments and handles, calls the runtime, and returns a status code.
//!
//! Every function returns a [`GpurtStatus`] (0 is success; `gpurt_last_error()` has the
//! calling thread's last failure message) and never unwinds into the caller. Out-parameters
//! are written only on success (`gpurt_shutdown`'s report excepted: the runtime is closed even
//! when its shutdown reports a failure). All functions may be called from any thread at any
//! time unless their documentation says otherwise.
//!
//! Every argument is checked before the call changes anything: arrays and out-parameters (null,
//! alignment, a length that fits the address space) before a slice is made of them or anything
//! is written, spans before the caller's host memory is taken at their length, and handles are
//! taken before the runtime consumes tokens, so that storing one cannot fail afterwards.

use hashbrown::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use gpu_runtime::allocator::{AllocatorStats, MemoryKind};
use gpu_runtime::backend::LaunchDims;
use gpu_runtime::error::Error;
use gpu_runtime::id::DeviceId;
use gpu_runtime::runtime::{Arg, Buffer, Kernel, LockedHost, Span};
use gpu_runtime::token::{Token, TokenId, check_fork_count};

use crate::shared::{
    self, BackendChoice, CapiError, CapiSlot, ClientBackend, ClientObjects, ClientSlot, Generation,
    GpurtStatus, HandleKind, HandleTable, OpenOptions, Session, dispatch, status_of, with_session,
};

/// What `gpurt_shutdown` found.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtReport {
    /// Objects the program still held handles to (buffers, registrations, kernels), released
    /// by the shutdown.
    pub released_objects: u64,
    /// Tokens that ended without a wait (an error they carried would be lost).
    pub unwaited_tokens: u64,
    /// Bytes of cached memory given back to the driver.
    pub trimmed_bytes: u64,
    /// Host ranges still locked or registered, unpinned by the shutdown.
    pub unpinned_ranges: u64,
    /// 1 when a trace was written (`GPU_RUNTIME_TRACE` was set at open), else 0.
    pub trace_written: u32,
    /// Stream/event calls in the trace.
    pub trace_calls: u64,
    /// Defects the trace checker found in the trace (each printed on stderr).
    pub trace_defects: u64,
}

/// Reads an optional C string argument.
///
/// # Safety
/// `text` is null or points to a NUL-terminated string.
unsafe fn optional_str<'a>(
    text: *const c_char,
    what: &'static str,
) -> Result<Option<&'a str>, CapiError> {
    if text.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's promise: a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(text) };
    text.to_str()
        .map(Some)
        .map_err(|_| CapiError::InvalidArgument {
            what,
            detail: format!("{text:?} is not valid UTF-8"),
        })
}

/// Opens the process-wide runtime now, on `backend` (`"cuda"`, `"hip"`, `"host"`), or when
/// `backend` is NULL on the one `GPU_RUNTIME_BACKEND` names (unset or empty: the best present).
/// Any other call opens it lazily the same way, so calling this is optional; it lets a program
/// pick the backend and see a failure early. Opening when a runtime is open already succeeds if
/// `backend` is NULL or names the open one's backend, and fails with
/// `GPURT_STATUS_INVALID_ARGUMENT` otherwise.
///
/// Thread safety: any thread; concurrent opens open one runtime.
///
/// # Safety
/// `backend` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_open(backend: *const c_char) -> GpurtStatus {
    status_of(|| {
        // SAFETY: the caller's promise.
        let name = unsafe { optional_str(backend, "backend name") }?;
        let mut options = OpenOptions::from_env()?;
        if let Some(name) = name {
            options.backend = BackendChoice::parse(name)?;
        }
        let asked = options.backend;
        let (open, _) = shared::open(options)?;
        match name {
            Some(name) if asked != BackendChoice::Best && name != open => {
                Err(CapiError::InvalidArgument {
                    what: "backend name",
                    detail: format!(
                        "the runtime is already open on `{open}`; shut it down before opening `{name}`"
                    ),
                })
            }
            _ => Ok(()),
        }
    })
}

/// Shuts the process-wide runtime down: waits for calls in flight and for all work, releases
/// every object the program still holds (buffers, registrations, kernels: their handles become
/// invalid), gives all memory, streams, events and pins back to the driver, writes the trace
/// when `GPU_RUNTIME_TRACE` was set at open (printing the checker's verdict on stderr), and
/// fills `*report` (which may be NULL). A later call opens a new runtime.
/// `GPURT_STATUS_NOT_OPEN` when no runtime is open. A failure on the way (work that failed and
/// was never waited for, a trace file that cannot be written) is returned, with `*report` still
/// filled (its runtime figures zero when the runtime's own shutdown failed): the runtime is
/// closed either way.
///
/// Thread safety: any thread; waits for the calls other threads have in flight.
///
/// # Safety
/// `report` is NULL or points to writable memory for a `gpurt_report`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_shutdown(report: *mut GpurtReport) -> GpurtStatus {
    status_of(|| {
        // Checked before the runtime shuts down: a refused call changes nothing.
        let report = if report.is_null() {
            None
        } else {
            Some(out_param(report, "report out-parameter")?)
        };
        let found = shared::shutdown()?;
        let mut out = GpurtReport {
            released_objects: found.released_objects as u64,
            unwaited_tokens: found.shutdown.program.unwaited.len() as u64,
            trimmed_bytes: found.shutdown.trimmed_bytes as u64,
            unpinned_ranges: found.shutdown.unpinned_ranges as u64,
            ..GpurtReport::default()
        };
        if let Some(trace) = &found.trace {
            for defect in &trace.defects {
                eprintln!("gpu-runtime: {}: {defect}", trace.path.display());
            }
            eprintln!(
                "gpu-runtime: trace of {} stream/event calls written to {}: {} defect(s)",
                trace.calls,
                trace.path.display(),
                trace.defects.len()
            );
            out.trace_written = 1;
            out.trace_calls = trace.calls as u64;
            out.trace_defects = trace.defects.len() as u64;
        }
        if let Some(report) = report {
            write_out(report, out);
        }
        found.failure.map_or(Ok(()), Err)
    })
}

/// The message of the calling thread's last failure ("" if it has none): a NUL-terminated
/// string owned by the library, valid until the thread's next failing call. Never NULL.
///
/// Thread safety: any thread; each thread has its own last error.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_last_error() -> *const c_char {
    shared::status::with_last_error(|message| message.as_ptr())
}

// ----- value types of the header -----

/// Memory the C API hands out: from the runtime's allocator (`gpurt_alloc`) or the caller's
/// host memory registered with it (`gpurt_host_register`). `{0}` is the null handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtMemory {
    /// The handle's value (opaque).
    pub id: u64,
}

/// A kernel of the backend's library loaded on one device (`gpurt_kernel`), valid until
/// shutdown. `{0}` is the null handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtKernel {
    /// The handle's value (opaque).
    pub id: u64,
}

/// "The work that produced me has completed": what every enqueued operation returns, and what
/// later operations list to run after it. Linear: each token is consumed by exactly one call
/// (an operation's `after` list, `gpurt_join`, `gpurt_fork` or `gpurt_wait`); use
/// `gpurt_fork` to depend on it twice. `{0}` is the null token.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtToken {
    /// The token's value (opaque).
    pub id: u64,
}

/// Bytes `[offset, offset + len)` of a memory handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtSpan {
    /// The memory.
    pub memory: GpurtMemory,
    /// First byte, from the memory's start.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// Device memory: `gpurt_alloc`'s `kind`.
pub const GPURT_MEMORY_DEVICE: u32 = 0;
/// Managed memory (one address on the host and every device).
pub const GPURT_MEMORY_MANAGED: u32 = 1;
/// Page-locked host memory every device can reach.
pub const GPURT_MEMORY_PINNED: u32 = 2;
/// The caller's host memory registered with `gpurt_host_register` (in `gpurt_memory_info`).
pub const GPURT_MEMORY_REGISTERED: u32 = 3;

/// What a memory handle is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpurtMemoryInfo {
    /// The first byte: a device address for device memory, else a host pointer (usable by the
    /// host once the work that uses the memory has been waited for).
    pub address: *mut c_void,
    /// Bytes.
    pub size: usize,
    /// The device it belongs to (device memory), or was allocated for (`UINT32_MAX` for
    /// registered memory, which every device reaches).
    pub device: u32,
    /// One of the `GPURT_MEMORY_*` kinds.
    pub kind: u32,
}

/// Grid and workgroup of a launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtDims {
    /// Workgroups (blocks) per dimension.
    pub grid: [u32; 3],
    /// Threads per workgroup per dimension.
    pub block: [u32; 3],
    /// Dynamic workgroup (shared) memory per workgroup, in bytes; above the device's default
    /// limit the runtime opts in once per kernel and size.
    pub dynamic_workgroup_bytes: u32,
}

/// A kernel argument: memory (the address of `span` is passed).
pub const GPURT_ARG_SPAN: u32 = 0;
/// A kernel argument: `u32_value`.
pub const GPURT_ARG_U32: u32 = 1;
/// A kernel argument: `u64_value`.
pub const GPURT_ARG_U64: u32 = 2;
/// A kernel argument: `f32_value`.
pub const GPURT_ARG_F32: u32 = 3;

/// One kernel argument: `kind` says which field holds it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpurtArg {
    /// One of the `GPURT_ARG_*` kinds.
    pub kind: u32,
    /// The memory, for `GPURT_ARG_SPAN`: the kernel is passed its address, and the runtime
    /// keeps it alive and ordered until the kernel has run.
    pub span: GpurtSpan,
    /// The value, for `GPURT_ARG_U32`.
    pub u32_value: u32,
    /// The value, for `GPURT_ARG_U64`.
    pub u64_value: u64,
    /// The value, for `GPURT_ARG_F32`.
    pub f32_value: f32,
}

/// The runtime's counters: pools, planning, the allocator (summed over devices and kinds) and
/// the lock table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtStats {
    /// Streams handed out by the pools.
    pub stream_acquires: u64,
    /// Streams the driver had to create.
    pub streams_created: u64,
    /// Events handed out by the pools.
    pub event_acquires: u64,
    /// Events the driver had to create.
    pub events_created: u64,
    /// Operations planned.
    pub operations: u64,
    /// Waits the plan inserted between streams.
    pub waits: u64,
    /// Bytes the allocator holds from the driver.
    pub reserved_bytes: u64,
    /// Bytes handed out and not yet freed.
    pub allocated_bytes: u64,
    /// Bytes in free cached blocks, ready for reuse.
    pub cached_bytes: u64,
    /// Allocations served from the cache.
    pub allocation_hits: u64,
    /// Allocations that needed memory from the driver.
    pub allocation_misses: u64,
    /// Segments obtained from the driver.
    pub segment_allocations: u64,
    /// Segments given back to the driver.
    pub segment_frees: u64,
    /// The allocator's driver calls of every kind.
    pub allocator_driver_calls: u64,
    /// Host ranges locked or registered now.
    pub locked_ranges: u64,
    /// Bytes of those.
    pub locked_bytes: u64,
    /// Locks of `gpurt_lock` (and of MLIR's host registrations) held now, over all ranges.
    pub raw_locks: u64,
    /// Locks registrations (`gpurt_host_register`) hold now, over all ranges: only
    /// `gpurt_host_unregister` releases them.
    pub registered_locks: u64,
    /// Locks served by a range already pinned (no driver call).
    pub nested_locks: u64,
    /// Driver pins made.
    pub driver_pins: u64,
    /// Driver unpins made.
    pub driver_unpins: u64,
    /// Memory handles live now.
    pub live_memory: u64,
    /// Kernel handles live now.
    pub live_kernels: u64,
}

// ----- the objects behind the handles -----

/// Memory behind a [`GpurtMemory`] handle.
enum Memory<B: ClientBackend> {
    Buffer(Buffer<'static, B>),
    Registered {
        guard: LockedHost<'static, 'static, B>,
        address: usize,
        size: usize,
    },
}

impl<B: ClientBackend> Memory<B> {
    fn span(&self, offset: usize, len: usize) -> Result<Span<'_>, Error> {
        match self {
            Memory::Buffer(buffer) => buffer.span(offset, len),
            Memory::Registered { guard, .. } => guard.span(offset, len),
        }
    }

    fn info(&self) -> GpurtMemoryInfo {
        match self {
            Memory::Buffer(buffer) => GpurtMemoryInfo {
                address: buffer.address() as *mut c_void,
                size: buffer.size(),
                device: buffer.device().0,
                kind: match buffer.kind() {
                    MemoryKind::Device => GPURT_MEMORY_DEVICE,
                    MemoryKind::Managed => GPURT_MEMORY_MANAGED,
                    MemoryKind::HostPinned => GPURT_MEMORY_PINNED,
                    MemoryKind::HostRegistered => GPURT_MEMORY_REGISTERED,
                },
            },
            Memory::Registered { address, size, .. } => GpurtMemoryInfo {
                address: *address as *mut c_void,
                size: *size,
                device: u32::MAX,
                kind: GPURT_MEMORY_REGISTERED,
            },
        }
    }
}

/// The objects C callers hold handles to, in one session.
pub struct Objects<B: ClientBackend> {
    memory: HandleTable<Arc<Memory<B>>>,
    kernels: HandleTable<Kernel<'static, B>>,
    /// The handle of each kernel loaded, so asking twice gives the same handle.
    kernel_handles: Mutex<HashMap<(DeviceId, String), u64>>,
}

impl<B: ClientBackend> ClientSlot<B> for CapiSlot {
    type Objects = Objects<B>;
}

impl<B: ClientBackend> ClientObjects<B> for Objects<B> {
    /// No objects, for the session of `generation` (the C API records no trace of its own).
    fn open(generation: Generation, _trace: Option<&Path>) -> Self {
        Self {
            memory: HandleTable::new(HandleKind::Memory, generation),
            kernels: HandleTable::new(HandleKind::Kernel, generation),
            kernel_handles: Mutex::new(HashMap::new()),
        }
    }

    /// Releases every object (at shutdown, with no call in flight): buffers are freed,
    /// registrations unpinned after their transfers. Returns how many there were.
    fn release(&self, _session: &Session<B>) -> usize {
        let memory = self.memory.drain().len();
        let kernels = self.kernels.drain().len();
        self.kernel_handles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        memory + kernels
    }
}

// ----- argument translation -----

/// `ptr` as an out-parameter: refused when null or misaligned (writing through it would be
/// undefined behaviour).
fn out_param<T>(ptr: *mut T, what: &'static str) -> Result<*mut T, CapiError> {
    check_array(ptr, 1, what)?;
    Ok(ptr)
}

/// Writes `value` to an out-parameter checked by [`out_param`].
fn write_out<T>(out: *mut T, value: T) {
    // SAFETY: `out` passed `out_param` (non-null, aligned); every exported function's contract
    // says its out-parameters point to writable memory of their type.
    unsafe { out.write(value) }
}

/// Refuses a C array of `count` values of `T` at `ptr` that no slice can stand for: a null or
/// misaligned pointer, or more bytes than fit below the top of the address space (or above
/// `isize::MAX`, the most one Rust slice may span). Making a slice of such an array is
/// undefined behaviour, whatever the caller promised.
fn check_array<T>(ptr: *const T, count: usize, what: &'static str) -> Result<(), CapiError> {
    if ptr.is_null() {
        return Err(Error::NullPointer { what }.into());
    }
    if !ptr.is_aligned() {
        return Err(CapiError::InvalidArgument {
            what,
            detail: format!(
                "{ptr:p} is not aligned to {} bytes",
                core::mem::align_of::<T>()
            ),
        });
    }
    let bytes = count
        .checked_mul(core::mem::size_of::<T>())
        .filter(|&bytes| isize::try_from(bytes).is_ok());
    match bytes.and_then(|bytes| (ptr as usize).checked_add(bytes)) {
        Some(_) => Ok(()),
        None => Err(CapiError::InvalidArgument {
            what,
            detail: format!(
                "{count} elements of {} bytes at {ptr:p} do not fit the address space",
                core::mem::size_of::<T>()
            ),
        }),
    }
}

/// `count` values at `ptr` (none when `count` is 0, whatever `ptr` is), after [`check_array`].
///
/// # Safety
/// When the checks pass, `ptr` points to `count` initialised values that stay valid and
/// unchanged for `'a`.
unsafe fn c_slice<'a, T>(
    ptr: *const T,
    count: usize,
    what: &'static str,
) -> Result<&'a [T], CapiError> {
    if count == 0 {
        return Ok(&[]);
    }
    check_array(ptr, count, what)?;
    // SAFETY: checked above (non-null, aligned, a size a slice may have); the caller's promise
    // for the rest.
    Ok(unsafe { std::slice::from_raw_parts(ptr, count) })
}

/// `count` writable values at `ptr` (none when `count` is 0), after [`check_array`].
///
/// # Safety
/// When the checks pass, `ptr` points to `count` values that nothing else accesses for `'a`.
unsafe fn c_slice_mut<'a, T>(
    ptr: *mut T,
    count: usize,
    what: &'static str,
) -> Result<&'a mut [T], CapiError> {
    if count == 0 {
        return Ok(&mut []);
    }
    check_array(ptr, count, what)?;
    // SAFETY: as in `c_slice`.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, count) })
}

/// The tokens of an `after` list, to be consumed by the call.
///
/// # Safety
/// `after` is NULL (with `count` 0) or points to `count` tokens.
unsafe fn tokens_in(after: *const GpurtToken, count: usize) -> Result<Vec<Token>, CapiError> {
    // SAFETY: the caller's promise.
    let tokens = unsafe { c_slice(after, count, "token list") }?;
    tokens.iter().map(|token| token_in(*token)).collect()
}

fn token_in(token: GpurtToken) -> Result<Token, CapiError> {
    match token.id {
        0 => Err(Error::NullPointer { what: "token" }.into()),
        id => Ok(Token::from_id(TokenId::from_raw(id))),
    }
}

fn token_out(token: Token) -> GpurtToken {
    GpurtToken {
        id: token.into_id().raw(),
    }
}

/// Runs an operation that consumes the tokens of `after` and yields one, written to `*done`.
///
/// # Safety
/// `after` points to `after_count` tokens (or is NULL with 0); `done` is NULL (refused) or
/// points to writable memory for a token.
unsafe fn enqueue(
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
    operation: impl FnOnce(&mut Vec<Token>) -> Result<GpurtToken, CapiError>,
) -> GpurtStatus {
    status_of(|| {
        let done = out_param(done, "done token out-parameter")?;
        // SAFETY: the caller's promise.
        let mut after = unsafe { tokens_in(after, after_count) }?;
        write_out(done, operation(&mut after)?);
        Ok(())
    })
}

fn memory_kind(kind: u32) -> Result<MemoryKind, CapiError> {
    match kind {
        GPURT_MEMORY_DEVICE => Ok(MemoryKind::Device),
        GPURT_MEMORY_MANAGED => Ok(MemoryKind::Managed),
        GPURT_MEMORY_PINNED => Ok(MemoryKind::HostPinned),
        other => Err(CapiError::InvalidArgument {
            what: "memory kind",
            detail: format!(
                "{other} is not GPURT_MEMORY_DEVICE (0), GPURT_MEMORY_MANAGED (1) or \
                 GPURT_MEMORY_PINNED (2)"
            ),
        }),
    }
}

/// A `size_t` byte count as a host address range length, refusing null `ptr`.
fn host_range(ptr: *const c_void, what: &'static str) -> Result<usize, CapiError> {
    if ptr.is_null() {
        return Err(Error::NullPointer { what }.into());
    }
    Ok(ptr as usize)
}

// ----- operations, written once for every backend -----

fn alloc<B: ClientBackend>(
    s: &'static Session<B>,
    device: u32,
    kind: MemoryKind,
    size: usize,
) -> Result<GpurtMemory, CapiError> {
    let (id, ()) = s.capi.memory.insert_with(|| -> Result<_, CapiError> {
        let buffer = s.runtime().alloc(DeviceId(device), kind, size)?;
        Ok((Arc::new(Memory::Buffer(buffer)), ()))
    })?;
    Ok(GpurtMemory { id })
}

fn alloc_after<B: ClientBackend>(
    s: &'static Session<B>,
    device: u32,
    kind: MemoryKind,
    size: usize,
    after: &mut Vec<Token>,
) -> Result<(GpurtMemory, GpurtToken), CapiError> {
    // The handle is taken first: once the runtime has consumed `after`, nothing can fail.
    let (id, token) = s.capi.memory.insert_with(|| -> Result<_, CapiError> {
        let (buffer, token) = s
            .runtime()
            .alloc_after(DeviceId(device), kind, size, after)?;
        Ok((Arc::new(Memory::Buffer(buffer)), token))
    })?;
    Ok((GpurtMemory { id }, token_out(token)))
}

fn free<B: ClientBackend>(s: &Session<B>, memory: GpurtMemory) -> Result<(), CapiError> {
    match take(s, memory, false)? {
        Some(Memory::Buffer(buffer)) => Ok(s.runtime().free(buffer)?),
        _ => Ok(()),
    }
}

/// Takes allocated (or, with `registered`, registered) memory out of the table: the other
/// kind is refused and left there. `None` when a call on another thread still holds the memory:
/// it is released when that call ends.
fn take<B: ClientBackend>(
    s: &Session<B>,
    memory: GpurtMemory,
    registered: bool,
) -> Result<Option<Memory<B>>, CapiError> {
    let removed = s.capi.memory.remove_if(memory.id, |held| {
        let release_with = match (&**held, registered) {
            (Memory::Registered { .. }, false) => {
                "registered host memory: release it with \
                                                    gpurt_host_unregister"
            }
            (Memory::Buffer(_), true) => "allocated memory: release it with gpurt_free",
            _ => return Ok(()),
        };
        Err(CapiError::InvalidArgument {
            what: "memory",
            detail: format!("handle {:#x} is {release_with}", memory.id),
        })
    })?;
    Ok(Arc::try_unwrap(removed).ok())
}

fn register<B: ClientBackend>(
    s: &'static Session<B>,
    ptr: *mut c_void,
    len: usize,
) -> Result<GpurtMemory, CapiError> {
    let address = host_range(ptr, "registered memory")?;
    let (id, ()) = s.capi.memory.insert_with(|| -> Result<_, CapiError> {
        // SAFETY: `gpurt_host_register`'s contract: the memory stays valid until unregistered,
        // and the host keeps off it while transfers that use it may run.
        let guard = unsafe { s.runtime().lock_host_raw(ptr.cast::<u8>(), len) }?;
        let memory = Memory::Registered {
            guard,
            address,
            size: len,
        };
        Ok((Arc::new(memory), ()))
    })?;
    Ok(GpurtMemory { id })
}

fn unregister<B: ClientBackend>(s: &Session<B>, memory: GpurtMemory) -> Result<(), CapiError> {
    match take(s, memory, true)? {
        Some(Memory::Registered { guard, .. }) => Ok(guard.unlock()?),
        _ => Ok(()),
    }
}

fn memory_info<B: ClientBackend>(
    s: &Session<B>,
    memory: GpurtMemory,
) -> Result<GpurtMemoryInfo, CapiError> {
    Ok(s.capi.memory.get(memory.id)?.info())
}

/// The memory a span names, held for the duration of a call.
fn held<B: ClientBackend>(s: &Session<B>, span: &GpurtSpan) -> Result<Arc<Memory<B>>, CapiError> {
    Ok(s.capi.memory.get(span.memory.id)?)
}

fn copy<B: ClientBackend>(
    s: &Session<B>,
    device: u32,
    dst: GpurtSpan,
    src: GpurtSpan,
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let (to, from) = (held(s, &dst)?, held(s, &src)?);
    let (to, from) = (
        to.span(dst.offset, dst.len)?,
        from.span(src.offset, src.len)?,
    );
    Ok(token_out(s.runtime().copy(
        DeviceId(device),
        to,
        from,
        after,
    )?))
}

fn fill<B: ClientBackend>(
    s: &Session<B>,
    device: u32,
    dst: GpurtSpan,
    value: u8,
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let to = held(s, &dst)?;
    let to = to.span(dst.offset, dst.len)?;
    Ok(token_out(s.runtime().fill(
        DeviceId(device),
        to,
        value,
        after,
    )?))
}

/// # Safety
/// As for `gpurt_upload`: `src` points to `dst.len` readable bytes.
unsafe fn upload<B: ClientBackend>(
    s: &Session<B>,
    device: u32,
    dst: GpurtSpan,
    src: *const c_void,
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let to = held(s, &dst)?;
    // The span is checked before the caller's bytes are taken as a slice of its length.
    let to = to.span(dst.offset, dst.len)?;
    // SAFETY: the caller's promise: `dst.len` readable bytes at `src`.
    let src = unsafe { c_slice(src.cast::<u8>(), to.len(), "upload source") }?;
    Ok(token_out(s.runtime().upload(
        DeviceId(device),
        to,
        src,
        after,
    )?))
}

/// # Safety
/// As for `gpurt_download`: `dst` points to `src.len` writable bytes nothing else accesses
/// during the call.
unsafe fn download<B: ClientBackend>(
    s: &Session<B>,
    device: u32,
    dst: *mut c_void,
    src: GpurtSpan,
    after: &mut Vec<Token>,
) -> Result<(), CapiError> {
    let from = held(s, &src)?;
    // The span is checked before the caller's bytes are taken as a slice of its length.
    let from = from.span(src.offset, src.len)?;
    // SAFETY: the caller's promise: `src.len` writable bytes at `dst`, not accessed elsewhere.
    let dst = unsafe { c_slice_mut(dst.cast::<u8>(), from.len(), "download destination") }?;
    Ok(s.runtime().download(DeviceId(device), dst, from, after)?)
}

fn kernel<B: ClientBackend>(
    s: &'static Session<B>,
    device: u32,
    name: &str,
) -> Result<GpurtKernel, CapiError> {
    let device = DeviceId(device);
    let mut handles = s
        .capi
        .kernel_handles
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(&id) = handles.get(&(device, name.to_string())) {
        return Ok(GpurtKernel { id });
    }
    let kernel = s.runtime().kernel(device, name)?;
    let id = s.capi.kernels.insert(kernel)?;
    handles.insert((device, name.to_string()), id);
    Ok(GpurtKernel { id })
}

/// # Safety
/// As for `gpurt_launch`: the kernel touches only bytes inside its span arguments.
unsafe fn launch<B: ClientBackend>(
    s: &Session<B>,
    kernel: GpurtKernel,
    dims: GpurtDims,
    args: &[GpurtArg],
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let kernel = s.capi.kernels.get(kernel.id)?;
    let memory = args
        .iter()
        .filter(|arg| arg.kind == GPURT_ARG_SPAN)
        .map(|arg| held(s, &arg.span))
        .collect::<Result<Vec<_>, _>>()?;
    let mut spans = memory.iter();
    let values = args
        .iter()
        .enumerate()
        .map(|(index, arg)| match arg.kind {
            GPURT_ARG_SPAN => match spans.next() {
                Some(memory) => Ok(Arg::Span(memory.span(arg.span.offset, arg.span.len)?)),
                None => Err(Error::NullPointer {
                    what: "kernel span argument",
                }
                .into()),
            },
            GPURT_ARG_U32 => Ok(Arg::U32(arg.u32_value)),
            GPURT_ARG_U64 => Ok(Arg::U64(arg.u64_value)),
            GPURT_ARG_F32 => Ok(Arg::F32(arg.f32_value)),
            other => Err(CapiError::InvalidArgument {
                what: "kernel argument kind",
                detail: format!(
                    "argument {index} has kind {other}; the kinds are GPURT_ARG_SPAN (0), \
                     GPURT_ARG_U32 (1), GPURT_ARG_U64 (2) and GPURT_ARG_F32 (3)"
                ),
            }),
        })
        .collect::<Result<Vec<_>, CapiError>>()?;
    let dims = LaunchDims {
        grid: dims.grid,
        block: dims.block,
        dynamic_workgroup_bytes: dims.dynamic_workgroup_bytes,
    };
    // SAFETY: the caller's promise (`gpurt_launch`'s contract), passed on.
    Ok(token_out(unsafe { kernel.launch(dims, &values, after) }?))
}

fn stats<B: ClientBackend>(s: &Session<B>) -> GpurtStats {
    let figures = s.runtime().stats();
    let total =
        figures
            .allocator
            .iter()
            .fold(AllocatorStats::default(), |mut sum, (_, _, kind)| {
                sum.reserved += kind.reserved;
                sum.allocated += kind.allocated;
                sum.cached += kind.cached;
                sum.hits += kind.hits + kind.cross_stream_hits;
                sum.misses += kind.misses;
                sum.segment_allocations += kind.segment_allocations;
                sum.segment_frees += kind.segment_frees;
                sum.driver_calls += kind.driver_calls;
                sum
            });
    GpurtStats {
        stream_acquires: figures.stream_acquires,
        streams_created: figures.streams_created,
        event_acquires: figures.event_acquires,
        events_created: figures.events_created,
        operations: figures.operations,
        waits: figures.waits,
        reserved_bytes: total.reserved as u64,
        allocated_bytes: total.allocated as u64,
        cached_bytes: total.cached as u64,
        allocation_hits: total.hits,
        allocation_misses: total.misses,
        segment_allocations: total.segment_allocations,
        segment_frees: total.segment_frees,
        allocator_driver_calls: total.driver_calls,
        locked_ranges: figures.locks.entries as u64,
        locked_bytes: figures.locks.bytes_locked as u64,
        raw_locks: figures.locks.held.raw as u64,
        registered_locks: figures.locks.held.guards as u64,
        nested_locks: figures.locks.nested_locks,
        driver_pins: figures.locks.driver_pins,
        driver_unpins: figures.locks.driver_unpins,
        live_memory: s.capi.memory.len() as u64,
        live_kernels: s.capi.kernels.len() as u64,
    }
}

// ----- exported functions -----

/// Writes how many devices the runtime drives to `*count`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `count` points to writable memory for a `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_device_count(count: *mut usize) -> GpurtStatus {
    status_of(|| {
        let out = out_param(count, "device count out-parameter")?;
        let devices = with_session(|s| dispatch!(s, s => Ok(s.runtime().device_count())))?;
        write_out(out, devices);
        Ok(())
    })
}

/// The name of a status code (`"GPURT_STATUS_OK"`, ...), or `"unknown status"` for a value
/// that is none. A static string. Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_status_name(status: i32) -> *const c_char {
    GpurtStatus::from_code(status)
        .map_or(c"unknown status", GpurtStatus::name)
        .as_ptr()
}

/// Allocates `size` bytes of `kind` (`GPURT_MEMORY_DEVICE`, `_MANAGED` or `_PINNED`) for
/// `device`, usable at once by every stream (and by the host, for managed and pinned memory).
/// Served from the caching allocator when it can be (no driver call). Writes the handle to
/// `*memory`; release it with `gpurt_free`.
///
/// Thread safety: any thread; allocations on different devices do not wait for each other.
///
/// # Safety
/// `memory` points to writable memory for a `gpurt_memory`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_alloc(
    device: u32,
    kind: u32,
    size: usize,
    memory: *mut GpurtMemory,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(memory, "memory out-parameter")?;
        let kind = memory_kind(kind)?;
        let memory = with_session(|s| dispatch!(s, s => alloc(s, device, kind, size)))?;
        write_out(out, memory);
        Ok(())
    })
}

/// Allocates as `gpurt_alloc` does, in stream order: the memory is usable by work that runs
/// after the token written to `*done` (stream-ordered on the device where the driver can, so
/// the call does not wait for `after`). Consumes the `after_count` tokens of `after` on success;
/// a refused call leaves them valid.
///
/// Thread safety: any thread.
///
/// # Safety
/// `after` points to `after_count` tokens (or is NULL with 0); `memory` and `done` point to
/// writable memory of their types.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_alloc_after(
    device: u32,
    kind: u32,
    size: usize,
    after: *const GpurtToken,
    after_count: usize,
    memory: *mut GpurtMemory,
    done: *mut GpurtToken,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(memory, "memory out-parameter")?;
        let done = out_param(done, "done token out-parameter")?;
        let kind = memory_kind(kind)?;
        // SAFETY: the caller's promise.
        let mut after = unsafe { tokens_in(after, after_count) }?;
        let (memory, token) =
            with_session(|s| dispatch!(s, s => alloc_after(s, device, kind, size, &mut after)))?;
        write_out(out, memory);
        write_out(done, token);
        Ok(())
    })
}

/// Frees memory from `gpurt_alloc`/`gpurt_alloc_after`. The bytes are reused only after every
/// stream that used them has finished with them (no wait here). The handle is invalid
/// afterwards: a second free is `GPURT_STATUS_INVALID_HANDLE`. A bad handle changes nothing; a
/// failure the runtime reports while taking the memory back (a driver error) is returned, and
/// the handle is released all the same.
///
/// Thread safety: any thread; a call on another thread that still uses the memory keeps it
/// until that call returns.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_free(memory: GpurtMemory) -> GpurtStatus {
    status_of(|| with_session(|s| dispatch!(s, s => free(s, memory))))
}

/// Writes what `memory` is (address, size, device, kind) to `*info`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `info` points to writable memory for a `gpurt_memory_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_memory_info(
    memory: GpurtMemory,
    info: *mut GpurtMemoryInfo,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(info, "memory info out-parameter")?;
        let found = with_session(|s| dispatch!(s, s => memory_info(s, memory)))?;
        write_out(out, found);
        Ok(())
    })
}

/// Registers (pins) the caller's host memory `[ptr, ptr + len)` for transfers by every device,
/// through the lock table: a range inside a registered or locked one costs no driver call
/// (counted); a range that overlaps one without lying inside it is `GPURT_STATUS_OVERLAP`.
/// Writes a memory handle to `*memory`, for spans of copies and launches; release it with
/// `gpurt_host_unregister`. The registration owns its lock: `gpurt_unlock` never releases it
/// (`GPURT_STATUS_PIN_OWNED`), so the memory stays pinned until it is unregistered.
///
/// Thread safety: any thread.
///
/// # Safety
/// The memory stays valid until unregistered (or shutdown); the host does not write it while a
/// transfer from it may run, nor touch it while a transfer into it may run (wait for their
/// tokens). `memory` points to writable memory for a `gpurt_memory`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_host_register(
    ptr: *mut c_void,
    len: usize,
    memory: *mut GpurtMemory,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(memory, "memory out-parameter")?;
        let registered = with_session(|s| dispatch!(s, s => register(s, ptr, len)))?;
        write_out(out, registered);
        Ok(())
    })
}

/// Unregisters memory from `gpurt_host_register`: waits for the transfers that used it, then
/// drops the registration's lock (the range's last lock unpins). The handle is invalid
/// afterwards. A bad handle changes nothing; a failure of those transfers or of the unpin is
/// returned, and the handle is released all the same.
///
/// Thread safety: any thread; blocks the caller until those transfers have finished.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_host_unregister(memory: GpurtMemory) -> GpurtStatus {
    status_of(|| with_session(|s| dispatch!(s, s => unregister(s, memory))))
}

/// Locks (pins) host range `[ptr, ptr + len)` in the lock table without a handle: counted like
/// a registration (nested ranges cost no driver call; a partial overlap is refused). Undo with
/// `gpurt_unlock`, which releases only such locks, never a registration's. For memory that is
/// transferred by others who look it up (`gpurt_lookup`); to use the memory in this API's
/// copies, register it instead.
///
/// Thread safety: any thread.
///
/// # Safety
/// The memory stays valid until unlocked.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_lock(ptr: *const c_void, len: usize) -> GpurtStatus {
    status_of(|| {
        let address = host_range(ptr, "lock start")?;
        with_session(|s| dispatch!(s, s => Ok(s.runtime().lock_range(address, len).map(drop)?)))
    })
}

/// Drops one `gpurt_lock` lock of the locked range containing `ptr` (any byte of it); the
/// range's last lock unpins. `GPURT_STATUS_NOT_LOCKED` when no locked range contains `ptr`;
/// `GPURT_STATUS_PIN_OWNED` when the range holds no `gpurt_lock` lock, only registrations'
/// (`gpurt_host_register`): those go with `gpurt_host_unregister`, and the range stays pinned.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_unlock(ptr: *const c_void) -> GpurtStatus {
    status_of(|| {
        let address = host_range(ptr, "unlock pointer")?;
        with_session(|s| dispatch!(s, s => Ok(s.runtime().unlock_range(address).map(drop)?)))
    })
}

/// Writes to `*device_address` the address `device` uses for host range `[ptr, ptr + len)` if
/// every byte of it is locked or registered, else NULL.
///
/// Thread safety: any thread; lookups never wait for each other.
///
/// # Safety
/// `device_address` points to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_lookup(
    ptr: *const c_void,
    len: usize,
    device: u32,
    device_address: *mut *mut c_void,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(device_address, "device address out-parameter")?;
        let address = host_range(ptr, "lookup pointer")?;
        let found = with_session(
            |s| dispatch!(s, s => Ok(s.runtime().pinned_address(address, len, DeviceId(device))?)),
        )?;
        write_out(out, found.unwrap_or(0) as *mut c_void);
        Ok(())
    })
}

/// Forks `token` into `count` tokens written to `branches[0..count]`, each usable once (each
/// branch waits lazily, at its first use). Consumes `token` on success. A count of zero is
/// `GPURT_STATUS_ZERO_SIZE` and one above 65,536 (the branches one fork may make)
/// `GPURT_STATUS_LIMIT_EXCEEDED`, both before anything is allocated and leaving `token` usable.
///
/// Thread safety: any thread.
///
/// # Safety
/// `branches` points to writable memory for `count` tokens.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_fork(
    token: GpurtToken,
    count: usize,
    branches: *mut GpurtToken,
) -> GpurtStatus {
    status_of(|| {
        check_fork_count(count)?;
        let out = out_param(branches, "fork branches out-parameter")?;
        check_array(out, count, "fork branches out-parameter")?;
        let token = token_in(token)?;
        let forked = with_session(|s| dispatch!(s, s => Ok(s.runtime().fork(token, count)?)))?;
        for (index, branch) in forked.into_iter().enumerate() {
            // SAFETY: the caller's promise: room for `count` tokens; the runtime made `count`.
            write_out(unsafe { out.add(index) }, token_out(branch));
        }
        Ok(())
    })
}

/// Joins `count` tokens into one written to `*joined` (work after it runs after all of them).
/// Consumes the tokens on success.
///
/// Thread safety: any thread.
///
/// # Safety
/// `tokens` points to `count` tokens; `joined` to writable memory for a token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_join(
    tokens: *const GpurtToken,
    count: usize,
    joined: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |tokens: &mut Vec<Token>| {
        with_session(|s| dispatch!(s, s => Ok(token_out(s.runtime().join(tokens)?))))
    };
    // SAFETY: the caller's promise.
    unsafe { enqueue(tokens, count, joined, operation) }
}

/// Blocks until the work behind `token` has completed and reports its failure, if any.
/// Consumes the token.
///
/// Thread safety: any thread; blocks only the caller (other threads go on submitting work).
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_wait(token: GpurtToken) -> GpurtStatus {
    status_of(|| {
        let token = token_in(token)?;
        with_session(|s| dispatch!(s, s => Ok(s.runtime().wait(token)?)))
    })
}

/// Enqueues a copy of `src` into `dst` (equal lengths) on a stream of `device` after the tokens
/// of `after`; writes the token of the copy to `*done`. Memory of another device is
/// `GPURT_STATUS_WRONG_DEVICE`; host memory must be pinned, managed or registered (for pageable
/// memory use `gpurt_upload`/`gpurt_download`). Consumes `after` on success.
///
/// Thread safety: any thread.
///
/// # Safety
/// `after` points to `after_count` tokens (or is NULL with 0); `done` to writable memory for a
/// token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_copy(
    device: u32,
    dst: GpurtSpan,
    src: GpurtSpan,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |after: &mut Vec<Token>| {
        with_session(|s| dispatch!(s, s => copy(s, device, dst, src, after)))
    };
    // SAFETY: the caller's promise.
    unsafe { enqueue(after, after_count, done, operation) }
}

/// Enqueues setting every byte of `dst` to `value` on a stream of `device`; as `gpurt_copy`.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_fill(
    device: u32,
    dst: GpurtSpan,
    value: u8,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |after: &mut Vec<Token>| {
        with_session(|s| dispatch!(s, s => fill(s, device, dst, value, after)))
    };
    // SAFETY: the caller's promise.
    unsafe { enqueue(after, after_count, done, operation) }
}

/// Copies `dst.len` bytes of the caller's pageable host memory at `src` into `dst` on `device`
/// after `after`. Returns once `src` is no longer needed (staged through pinned buffers, or
/// directly when `src` is locked); `*done` stands for the device side. Consumes `after` on
/// success.
///
/// Thread safety: any thread.
///
/// # Safety
/// `src` points to `dst.len` readable bytes; `after` and `done` as for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_upload(
    device: u32,
    dst: GpurtSpan,
    src: *const c_void,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |after: &mut Vec<Token>| {
        host_range(src, "upload source")?;
        // SAFETY: the caller's promise, passed on.
        with_session(|s| dispatch!(s, s => unsafe { upload(s, device, dst, src, after) }))
    };
    // SAFETY: the caller's promise.
    unsafe { enqueue(after, after_count, done, operation) }
}

/// Copies `src` on `device`, after `after`, into the caller's pageable host memory at `dst`
/// (`src.len` bytes); returns once `dst` holds the data. Consumes `after` on success.
///
/// Thread safety: any thread; blocks the caller until the data is there.
///
/// # Safety
/// `dst` points to `src.len` writable bytes that nothing else accesses during the call;
/// `after` as for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_download(
    device: u32,
    dst: *mut c_void,
    src: GpurtSpan,
    after: *const GpurtToken,
    after_count: usize,
) -> GpurtStatus {
    status_of(|| {
        host_range(dst, "download destination")?;
        // SAFETY: the caller's promise.
        let mut after = unsafe { tokens_in(after, after_count) }?;
        // SAFETY: the caller's promise, passed on.
        with_session(|s| dispatch!(s, s => unsafe { download(s, device, dst, src, &mut after) }))
    })
}

/// Loads kernel `name` of the backend's standard kernel library (`fill_u32`, `axpy_f32`,
/// `workgroup_reverse_u32`) on `device`, once, and writes its handle to `*kernel` (the same
/// handle every time). Valid until shutdown; needs no release.
///
/// Thread safety: any thread.
///
/// # Safety
/// `name` is a NUL-terminated string; `kernel` points to writable memory for a `gpurt_kernel`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_kernel(
    device: u32,
    name: *const c_char,
    kernel: *mut GpurtKernel,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(kernel, "kernel out-parameter")?;
        // SAFETY: the caller's promise.
        let name = unsafe { optional_str(name, "kernel name") }?.ok_or(Error::NullPointer {
            what: "kernel name",
        })?;
        let loaded = with_session(|s| dispatch!(s, s => self::kernel(s, device, name)))?;
        write_out(out, loaded);
        Ok(())
    })
}

/// Enqueues `kernel` on its device with `dims` and the `arg_count` arguments of `args`, after
/// `after`; writes the launch's token to `*done`. Span arguments are kept alive and ordered
/// until the kernel has run. Refused before anything is queued: arguments that do not match
/// the kernel's parameters in number or kinds, or whose counts make it reach past a span
/// (`fill_u32` of 2,048 words on a 4 KiB span) or past the launch's dynamic workgroup memory,
/// are `GPURT_STATUS_KERNEL_ARGUMENTS`; a grid or workgroup dimension of zero or more than 1024
/// threads per workgroup is `GPURT_STATUS_INVALID_ARGUMENT`; the message says what was wrong.
/// Consumes `after` on success.
///
/// Thread safety: any thread.
///
/// # Safety
/// The kernel touches only bytes inside its span arguments: for the standard library's
/// kernels the runtime checks the counts against the spans; for a kernel of the host backend
/// registered under another name the caller promises it. `dims` points to a `gpurt_dims`;
/// `args` to `arg_count` arguments (or is NULL with 0); `after` and `done` as for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_launch(
    kernel: GpurtKernel,
    dims: *const GpurtDims,
    args: *const GpurtArg,
    arg_count: usize,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |after: &mut Vec<Token>| {
        check_array(dims, 1, "launch dimensions")?;
        // SAFETY: non-null and aligned (checked); the caller's promise: a `gpurt_dims_t`.
        let dims = unsafe { dims.read() };
        // SAFETY: the caller's promise: `arg_count` arguments at `args`.
        let args = unsafe { c_slice(args, arg_count, "kernel argument list") }?;
        with_session(|s| {
            // SAFETY: the caller's promise (the kernel stays inside its spans), passed on.
            dispatch!(s, s => unsafe { launch(s, kernel, dims, args, after) })
        })
    };
    // SAFETY: the caller's promise.
    unsafe { enqueue(after, after_count, done, operation) }
}

/// Writes the runtime's counters to `*stats`.
///
/// Thread safety: any thread; a snapshot (other threads' calls may change it at once).
///
/// # Safety
/// `stats` points to writable memory for a `gpurt_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_stats(stats: *mut GpurtStats) -> GpurtStatus {
    status_of(|| {
        let out = out_param(stats, "stats out-parameter")?;
        let figures = with_session(|s| dispatch!(s, s => Ok(self::stats(s))))?;
        write_out(out, figures);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::status::with_last_error;

    fn last_error() -> String {
        with_last_error(|message| message.to_string_lossy().into_owned())
    }

    /// Misaligned arrays and out-parameters are refused with a status before anything is read,
    /// written or shut down (a slice of one, or a write through it, is undefined behaviour: a
    /// debug build aborted the process).
    #[test]
    fn misaligned_pointers_are_refused_before_anything_happens() {
        let _serial = shared::process_test_lock();
        shared::open(OpenOptions {
            backend: BackendChoice::Host,
            trace: None,
        })
        .unwrap();
        let mut words = [0u64; 8];
        let misaligned = words.as_mut_ptr().cast::<u8>().wrapping_add(1);
        let mut done = GpurtToken::default();
        // SAFETY (each call): the misaligned pointers are refused before they are used.
        unsafe {
            let status = gpurt_join(misaligned.cast(), 2, &mut done);
            assert_eq!(status, GpurtStatus::InvalidArgument);
            assert!(last_error().contains("token list"), "{}", last_error());
            let status = gpurt_device_count(misaligned.cast());
            assert_eq!(status, GpurtStatus::InvalidArgument);
            assert!(last_error().contains("not aligned"), "{}", last_error());
            let status = gpurt_launch(
                GpurtKernel { id: 1 },
                misaligned.cast(),
                core::ptr::null(),
                0,
                core::ptr::null(),
                0,
                &mut done,
            );
            assert_eq!(status, GpurtStatus::InvalidArgument);
            assert!(
                last_error().contains("launch dimensions"),
                "{}",
                last_error()
            );
            let status = gpurt_shutdown(misaligned.cast());
            assert_eq!(status, GpurtStatus::InvalidArgument);
        }
        assert_eq!(done, GpurtToken::default(), "nothing written");
        assert_eq!(words, [0; 8], "nothing written");
        let report = shared::shutdown().expect("the refused shutdown left the runtime open");
        assert_eq!(report.released_objects, 0);
    }
}
