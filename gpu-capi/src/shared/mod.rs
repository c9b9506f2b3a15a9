//! The layer every client ABI stands on: the process-wide runtime (opened once, lazily, on the
//! backend `GPU_RUNTIME_BACKEND` names), handle tables, status codes and the last error.
//!
//! # Dispatch over backends
//!
//! [`Runtime`] is generic over the [`Backend`] trait, which is not object safe, and the backend
//! is chosen at run time. The process holds an [`AnySession`]: an enum with one variant per
//! concrete backend this build has (each also in a recording form, for `GPU_RUNTIME_TRACE`),
//! each a `&'static Session<B>`. A client ABI writes each operation once, as a function generic
//! over `B: ClientBackend` taking `&Session<B>`, and reaches it through [`with_session`] and the
//! `dispatch!` macro, which expands to a `match` whose every arm calls
//! that one function:
//!
//! ```text
//! shared::with_session(|session| dispatch!(session, s => my_operation(s, arg)))
//! ```
//!
//! So the operation is compiled once per backend (no virtual call, no boxing on the hot path),
//! written once, and a new backend is one enum variant and one `ClientBackend` impl.
//!
//! # Lifetime of the process-wide runtime
//!
//! The session is leaked into a `&'static` when opened, so objects that borrow the runtime
//! (buffers, kernels, registrations) can live in its handle tables between C calls. Every call
//! runs under a read lock of the process slot; [`shutdown`] takes the write lock (so it waits for
//! calls in flight), empties the tables, shuts the runtime down and frees the session. After a
//! shutdown the next call opens a new runtime, a new session with a new [`Generation`]; handles
//! of the old one are refused as from an earlier session (handle values are never reissued;
//! tokens carry their planner's id).

pub mod config;
pub mod handle;
pub mod status;

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use gpu_runtime::backend::Backend;
use gpu_runtime::host::{HostBackend, HostConfig};
use gpu_runtime::runtime::{RecordingBackend, Runtime, ShutdownReport};
use gpu_runtime::token::{TraceOp, parse_trace, write_trace};

pub use handle::{Generation, HandleError, HandleKind, HandleMap, HandleTable};
pub use status::{CapiError, GpurtStatus, guarded, status_of};

/// Environment variable naming the backend: `cuda`, `hip` or `host` (unset or empty: the best
/// present).
pub const BACKEND_VAR: &str = "GPU_RUNTIME_BACKEND";

/// Environment variable naming a file: when set at open, the backend's stream/event calls are
/// recorded and written there, in the project's trace format, at shutdown.
pub const TRACE_VAR: &str = "GPU_RUNTIME_TRACE";

/// Simulated devices of the host backend when it is opened by this library.
pub const HOST_DEVICES: usize = 2;

/// A backend a session can run on: the [`Backend`] plus what the client layer needs to know
/// about it.
pub trait ClientBackend: Backend + Sized {
    /// Wraps a session of this backend into the process-wide enum.
    fn into_any(session: &'static Session<Self>) -> AnySession;

    /// The stream/event calls recorded so far, if this backend records them.
    fn recorded_trace(&self) -> Option<Vec<TraceOp>> {
        None
    }
}

/// The objects one client ABI keeps in a session: those its callers hold handles to. Made when
/// the session opens; released before its runtime shuts down.
pub trait ClientObjects<B: ClientBackend> {
    /// No objects yet, for the session of `generation`, which writes its trace to `trace` at
    /// shutdown when one was asked for.
    fn open(generation: Generation, trace: Option<&Path>) -> Self;

    /// Releases every object (at shutdown, with no call in flight); returns how many there
    /// were.
    fn release(&self, session: &Session<B>) -> usize;
}

/// A client ABI's place in every session: names the type of the objects it keeps there. Each
/// client module implements it for its own slot, so this layer holds the client's objects
/// without naming the client.
pub trait ClientSlot<B: ClientBackend> {
    /// What the client keeps in a session on backend `B`.
    type Objects: ClientObjects<B>;
}

/// The C API's slot: its objects are [`Session::capi`].
pub enum CapiSlot {}

/// The MLIR ABI's slot: its objects are `Session::mlir`.
pub enum MlirSlot {}

/// What the client of `Slot` keeps in a session on backend `B`.
type ObjectsOf<Slot, B> = <Slot as ClientSlot<B>>::Objects;

/// One opened runtime (a session of the library, from open to shutdown) and the objects client
/// ABIs keep in it.
///
/// Each client ABI keeps the objects its callers hold handles to in a field of its own (typed
/// through its [`ClientSlot`]), made when the session opens and emptied by
/// [`ClientObjects::release`] before the runtime shuts down.
pub struct Session<B: ClientBackend> {
    backend: Arc<B>,
    runtime: Runtime<B>,
    /// Tells this session's handles from those of earlier sessions.
    generation: Generation,
    trace_path: Option<PathBuf>,
    /// The C API's objects.
    pub capi: ObjectsOf<CapiSlot, B>,
    /// What the MLIR ABI's callers hold (streams, events, modules, allocations).
    pub(crate) mlir: ObjectsOf<MlirSlot, B>,
}

impl<B: ClientBackend> Session<B> {
    fn open(backend: B, trace_path: Option<PathBuf>) -> Result<Self, CapiError> {
        let generation = Generation::next()?;
        let backend = Arc::new(backend);
        let runtime = Runtime::shared(Arc::clone(&backend), config::from_env()?)?;
        Ok(Self {
            backend,
            runtime,
            generation,
            mlir: ObjectsOf::<MlirSlot, B>::open(generation, trace_path.as_deref()),
            capi: ObjectsOf::<CapiSlot, B>::open(generation, trace_path.as_deref()),
            trace_path,
        })
    }

    /// The session's generation: every handle it issues carries it, and handles of earlier
    /// sessions are refused as such.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The runtime every operation goes through.
    pub fn runtime(&self) -> &Runtime<B> {
        &self.runtime
    }

    /// Drops every object client ABIs hold in this session (each goes back to the runtime);
    /// returns how many there were.
    fn release_client_objects(&self) -> usize {
        self.capi.release(self) + self.mlir.release(self)
    }

    /// Shuts the runtime down and writes the trace, if one was asked for; a failure of either
    /// is reported, the runtime is closed anyway. Boxed: the client objects borrow the runtime
    /// where it lies, so they go before it moves.
    fn finish(self: Box<Self>) -> SessionReport {
        let released_objects = self.release_client_objects();
        let Session {
            backend,
            runtime,
            trace_path,
            ..
        } = *self;
        // Every failure the shutdown met is the caller's to hear of, a lost device's too: the
        // first one is reported, with the whole report.
        let shutdown = runtime.shutdown_report();
        let mut failure = shutdown.errors.first().cloned().map(CapiError::from);
        let trace = match (trace_path, backend.recorded_trace()) {
            (Some(path), Some(ops)) => TraceExport::write(path, &ops)
                .map_err(|e| failure = failure.take().or(Some(e)))
                .ok(),
            _ => None,
        };
        SessionReport {
            backend: backend.name(),
            released_objects,
            shutdown,
            trace,
            failure,
        }
    }
}

/// What shutting the process-wide runtime down found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionReport {
    /// The backend the runtime ran on (`"cuda"`, `"host"`).
    pub backend: &'static str,
    /// Objects callers still held handles to (buffers, registrations, kernels), released now.
    pub released_objects: usize,
    /// The runtime's own report: unwaited tokens, bytes trimmed, ranges unpinned (all zero when
    /// the runtime's shutdown failed).
    pub shutdown: ShutdownReport,
    /// The trace written, when `GPU_RUNTIME_TRACE` was set at open.
    pub trace: Option<TraceExport>,
    /// The first failure: the runtime's shutdown (work that failed and was never waited for,
    /// say) or writing the trace. The runtime is closed all the same.
    pub failure: Option<CapiError>,
}

/// A recorded trace written at shutdown, and the checker's verdict on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceExport {
    /// Where it was written.
    pub path: PathBuf,
    /// Stream/event calls in it.
    pub calls: usize,
    /// The checker's defects, each described with its line in the file.
    pub defects: Vec<String>,
}

impl TraceExport {
    /// Writes `ops` to `path` in the trace format and checks the written text.
    pub(crate) fn write(path: PathBuf, ops: &[TraceOp]) -> Result<Self, CapiError> {
        let text = write_trace(ops);
        std::fs::write(&path, &text).map_err(|e| CapiError::InvalidArgument {
            what: "GPU_RUNTIME_TRACE",
            detail: format!("cannot write the trace to {}: {e}", path.display()),
        })?;
        // The written text is checked, so defects name the lines a reader of the file sees.
        let parsed = parse_trace(&text)?;
        let defects = parsed
            .check()
            .iter()
            .map(|defect| parsed.describe(defect).to_string())
            .collect();
        Ok(Self {
            path,
            calls: ops.len(),
            defects,
        })
    }
}

/// The process-wide session, on whichever backend it was opened.
#[derive(Clone, Copy)]
pub enum AnySession {
    /// The host backend (simulated devices, no GPU).
    Host(&'static Session<HostBackend>),
    /// The host backend, its stream/event calls recorded.
    HostTraced(&'static Session<RecordingBackend<HostBackend>>),
    /// The CUDA backend.
    #[cfg(feature = "cuda")]
    Cuda(&'static Session<gpu_runtime::cuda::CudaBackend>),
    /// The CUDA backend, its stream/event calls recorded.
    #[cfg(feature = "cuda")]
    CudaTraced(&'static Session<RecordingBackend<gpu_runtime::cuda::CudaBackend>>),
    /// The HIP backend.
    #[cfg(feature = "hip")]
    Hip(&'static Session<gpu_runtime::hip::HipBackend>),
    /// The HIP backend, its stream/event calls recorded.
    #[cfg(feature = "hip")]
    HipTraced(&'static Session<RecordingBackend<gpu_runtime::hip::HipBackend>>),
}

/// Runs `$body` with `$s` bound to the `&'static Session<B>` inside an [`AnySession`], for
/// whichever backend it is: one `match` arm per variant, each compiled for its own `B`. Keep
/// `$body` a call of one function generic over `B: ClientBackend`.
///
/// Nothing borrowed from the session may outlive the call that lent it, except objects stored
/// in the session's own handle tables (shutdown empties those first).
macro_rules! dispatch {
    ($session:expr, $s:ident => $body:expr) => {
        match $session {
            $crate::shared::AnySession::Host($s) => $body,
            $crate::shared::AnySession::HostTraced($s) => $body,
            #[cfg(feature = "cuda")]
            $crate::shared::AnySession::Cuda($s) => $body,
            #[cfg(feature = "cuda")]
            $crate::shared::AnySession::CudaTraced($s) => $body,
            #[cfg(feature = "hip")]
            $crate::shared::AnySession::Hip($s) => $body,
            #[cfg(feature = "hip")]
            $crate::shared::AnySession::HipTraced($s) => $body,
        }
    };
}
pub(crate) use dispatch;

impl ClientBackend for HostBackend {
    fn into_any(session: &'static Session<Self>) -> AnySession {
        AnySession::Host(session)
    }
}

impl ClientBackend for RecordingBackend<HostBackend> {
    fn into_any(session: &'static Session<Self>) -> AnySession {
        AnySession::HostTraced(session)
    }

    fn recorded_trace(&self) -> Option<Vec<TraceOp>> {
        Some(self.trace())
    }
}

#[cfg(feature = "cuda")]
impl ClientBackend for gpu_runtime::cuda::CudaBackend {
    fn into_any(session: &'static Session<Self>) -> AnySession {
        AnySession::Cuda(session)
    }
}

#[cfg(feature = "cuda")]
impl ClientBackend for RecordingBackend<gpu_runtime::cuda::CudaBackend> {
    fn into_any(session: &'static Session<Self>) -> AnySession {
        AnySession::CudaTraced(session)
    }

    fn recorded_trace(&self) -> Option<Vec<TraceOp>> {
        Some(self.trace())
    }
}

#[cfg(feature = "hip")]
impl ClientBackend for gpu_runtime::hip::HipBackend {
    fn into_any(session: &'static Session<Self>) -> AnySession {
        AnySession::Hip(session)
    }
}

#[cfg(feature = "hip")]
impl ClientBackend for RecordingBackend<gpu_runtime::hip::HipBackend> {
    fn into_any(session: &'static Session<Self>) -> AnySession {
        AnySession::HipTraced(session)
    }

    fn recorded_trace(&self) -> Option<Vec<TraceOp>> {
        Some(self.trace())
    }
}

/// Which backend to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// The best present: CUDA, then HIP, when built in and a device is found; else the host
    /// backend.
    Best,
    /// The CUDA backend.
    Cuda,
    /// The HIP backend.
    Hip,
    /// The host backend with [`HOST_DEVICES`] simulated devices.
    Host,
}

impl BackendChoice {
    /// The choice a name stands for: `cuda`, `hip`, `host`, or empty for the best present.
    pub fn parse(name: &str) -> Result<Self, CapiError> {
        match name {
            "" => Ok(BackendChoice::Best),
            "cuda" => Ok(BackendChoice::Cuda),
            "hip" => Ok(BackendChoice::Hip),
            "host" => Ok(BackendChoice::Host),
            other => Err(CapiError::InvalidArgument {
                what: "backend name",
                detail: format!("`{other}` is not one of `cuda`, `hip`, `host` (or empty)"),
            }),
        }
    }

    /// The choice `GPU_RUNTIME_BACKEND` makes (unset: the best present).
    pub fn from_env() -> Result<Self, CapiError> {
        match std::env::var_os(BACKEND_VAR) {
            None => Ok(BackendChoice::Best),
            Some(value) => match value.to_str() {
                Some(name) => Self::parse(name),
                None => Err(CapiError::InvalidArgument {
                    what: BACKEND_VAR,
                    detail: format!("{value:?} is not valid Unicode"),
                }),
            },
        }
    }
}

/// The process-wide session, if one is open.
static PROCESS: RwLock<Option<AnySession>> = RwLock::new(None);

/// How to open the process-wide runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// The backend.
    pub backend: BackendChoice,
    /// Where to write the recorded stream/event trace at shutdown (none: nothing recorded).
    pub trace: Option<PathBuf>,
}

impl OpenOptions {
    /// The options the environment gives: `GPU_RUNTIME_BACKEND` and `GPU_RUNTIME_TRACE`.
    pub fn from_env() -> Result<Self, CapiError> {
        Ok(Self {
            backend: BackendChoice::from_env()?,
            trace: std::env::var_os(TRACE_VAR)
                .filter(|path| !path.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// Opens the process-wide runtime unless one is open already; returns the name of the backend
/// of the open runtime, and whether this call opened it.
pub fn open(options: OpenOptions) -> Result<(&'static str, bool), CapiError> {
    let mut slot = PROCESS.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(session) = *slot {
        return Ok((session.backend_name(), false));
    }
    let session = open_session(options.backend, options.trace)?;
    *slot = Some(session);
    Ok((session.backend_name(), true))
}

impl AnySession {
    /// The name of the backend the session runs on.
    pub fn backend_name(self) -> &'static str {
        dispatch!(self, s => s.backend.name())
    }
}

fn open_session(choice: BackendChoice, trace: Option<PathBuf>) -> Result<AnySession, CapiError> {
    match choice {
        BackendChoice::Host => start(host_backend(), trace),
        BackendChoice::Cuda => open_cuda(trace),
        BackendChoice::Hip => open_hip(trace),
        BackendChoice::Best => open_cuda(trace.clone())
            .or_else(|_| open_hip(trace.clone()))
            .or_else(|_| start(host_backend(), trace)),
    }
}

fn host_backend() -> HostBackend {
    HostBackend::new(HostConfig::with_devices(HOST_DEVICES))
}

#[cfg(feature = "cuda")]
fn open_cuda(trace: Option<PathBuf>) -> Result<AnySession, CapiError> {
    start(
        usable(gpu_runtime::cuda::CudaBackend::new(), "cuda")?,
        trace,
    )
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_trace: Option<PathBuf>) -> Result<AnySession, CapiError> {
    Err(not_built("cuda"))
}

#[cfg(feature = "hip")]
fn open_hip(trace: Option<PathBuf>) -> Result<AnySession, CapiError> {
    start(usable(gpu_runtime::hip::HipBackend::new(), "hip")?, trace)
}

#[cfg(not(feature = "hip"))]
fn open_hip(_trace: Option<PathBuf>) -> Result<AnySession, CapiError> {
    Err(not_built("hip"))
}

/// A driver backend that opened and has a device, or why it is unavailable.
#[cfg(any(feature = "cuda", feature = "hip"))]
fn usable<B: Backend>(
    opened: Result<B, gpu_runtime::error::Error>,
    backend: &'static str,
) -> Result<B, CapiError> {
    let unavailable = |reason: String| CapiError::BackendUnavailable { backend, reason };
    let opened = opened.map_err(|e| unavailable(e.to_string()))?;
    if opened.device_count() == 0 {
        return Err(unavailable("the driver reports no device".into()));
    }
    Ok(opened)
}

#[cfg(not(all(feature = "cuda", feature = "hip")))]
fn not_built(backend: &'static str) -> CapiError {
    CapiError::BackendUnavailable {
        backend,
        reason: format!("this library was built without the `{backend}` feature"),
    }
}

/// Opens a session on `backend` (recorded when a trace file is named) and leaks it.
fn start<B>(backend: B, trace: Option<PathBuf>) -> Result<AnySession, CapiError>
where
    B: ClientBackend,
    RecordingBackend<B>: ClientBackend,
{
    fn leak<B: ClientBackend>(session: Session<B>) -> AnySession {
        B::into_any(Box::leak(Box::new(session)))
    }
    Ok(match trace {
        None => leak(Session::open(backend, None)?),
        Some(path) => leak(Session::open(RecordingBackend::new(backend), Some(path))?),
    })
}

/// Runs `call` on the process-wide session, opening it first (on the backend
/// `GPU_RUNTIME_BACKEND` names) if none is open. Many calls run at once; a shutdown waits for
/// the calls in flight.
pub fn with_session<T>(
    call: impl FnOnce(AnySession) -> Result<T, CapiError>,
) -> Result<T, CapiError> {
    loop {
        if let Some(session) = *PROCESS.read().unwrap_or_else(PoisonError::into_inner) {
            return call(session);
        }
        open(OpenOptions::from_env()?)?;
    }
}

/// Runs `call` on the process-wide session if one is open, else fails with
/// [`CapiError::NotOpen`] without opening one: for calls that can only name objects of an open
/// runtime (a free after a shutdown would otherwise open a new runtime just to refuse it).
pub fn with_open_session<T>(
    call: impl FnOnce(AnySession) -> Result<T, CapiError>,
) -> Result<T, CapiError> {
    let session = *PROCESS.read().unwrap_or_else(PoisonError::into_inner);
    call(session.ok_or(CapiError::NotOpen)?)
}

/// Shuts the process-wide runtime down: waits for calls in flight, releases every object
/// callers still hold, waits for all work, gives everything back to the driver, writes the
/// trace if one was asked for, and reports (a failure on the way included: the runtime is
/// closed either way). Fails with [`CapiError::NotOpen`] when none is open.
pub fn shutdown() -> Result<SessionReport, CapiError> {
    let mut slot = PROCESS.write().unwrap_or_else(PoisonError::into_inner);
    let session = slot.take().ok_or(CapiError::NotOpen)?;
    Ok(dispatch!(session, s => reclaim(s).finish()))
}

/// Takes back ownership of a leaked session.
fn reclaim<B: ClientBackend>(session: &'static Session<B>) -> Box<Session<B>> {
    // SAFETY: `session` came from `Box::leak` in `start`, and was taken out of the process slot
    // under its write lock: no call is in flight (each holds a read lock while it uses the
    // session), and nothing borrowed from it survives a call except the objects in its own
    // tables, which `finish` drops before the runtime moves.
    unsafe { Box::from_raw(session as *const Session<B> as *mut Session<B>) }
}

/// Serialises the tests that open and shut down the process-wide runtime (one per process),
/// and shuts down what a failed test left open.
#[cfg(test)]
pub(crate) fn process_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let serial = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let _ = shutdown();
    serial
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_runtime::allocator::MemoryKind;
    use gpu_runtime::id::DeviceId;

    fn host(trace: Option<PathBuf>) -> OpenOptions {
        OpenOptions {
            backend: BackendChoice::Host,
            trace,
        }
    }

    /// Leaves one token unwaited on device 0.
    fn leave_a_token<B: ClientBackend>(session: &Session<B>) -> Result<(), CapiError> {
        let runtime = session.runtime();
        let (buffer, token) =
            runtime.alloc_after(DeviceId(0), MemoryKind::Device, 256, &mut Vec::new())?;
        runtime.free(buffer)?;
        drop(token);
        Ok(())
    }

    /// Allocates in stream order on device 0 and waits: a stream is created and used.
    fn use_a_stream<B: ClientBackend>(session: &Session<B>) -> Result<usize, CapiError> {
        let runtime = session.runtime();
        let (buffer, token) =
            runtime.alloc_after(DeviceId(0), MemoryKind::Device, 256, &mut Vec::new())?;
        runtime.wait(token)?;
        runtime.free(buffer)?;
        Ok(runtime.device_count())
    }

    #[test]
    fn open_once_use_shut_down_and_report() {
        let _serial = process_test_lock();
        assert_eq!(open(host(None)), Ok(("host", true)));
        assert_eq!(open(host(None)), Ok(("host", false)), "opened once");
        let devices = with_session(|s| dispatch!(s, s => use_a_stream(s))).unwrap();
        assert_eq!(devices, HOST_DEVICES);
        with_session(|s| dispatch!(s, s => leave_a_token(s))).unwrap();
        let report = shutdown().unwrap();
        assert_eq!(report.backend, "host");
        assert_eq!(report.shutdown.program.unwaited.len(), 1);
        assert_eq!(report.trace, None);
        assert_eq!(report.failure, None);
        assert_eq!(shutdown().unwrap_err(), CapiError::NotOpen);
    }

    #[test]
    fn a_failed_open_leaves_nothing_open() {
        let _serial = process_test_lock();
        let refused = open(OpenOptions {
            backend: BackendChoice::Hip,
            trace: None,
        })
        .unwrap_err();
        assert_eq!(refused.status(), GpurtStatus::BackendUnavailable);
        assert!(refused.to_string().contains("hip"), "{refused}");
        assert_eq!(shutdown().unwrap_err(), CapiError::NotOpen);
    }

    #[test]
    fn the_trace_is_written_at_shutdown_and_checked() {
        let _serial = process_test_lock();
        let path = std::env::temp_dir().join(format!("gpu-capi-trace-{}.txt", std::process::id()));
        open(host(Some(path.clone()))).unwrap();
        with_session(|s| dispatch!(s, s => use_a_stream(s))).unwrap();
        let report = shutdown().unwrap();
        let trace = report.trace.expect("a trace was asked for");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(trace.path, path);
        assert!(text.contains("stream_create"), "{text}");
        assert!(text.contains("stream_destroy"), "{text}");
        assert_eq!(trace.calls, text.lines().count());
        assert_eq!(trace.defects, Vec::<String>::new());
    }

    #[test]
    fn a_shutdown_waits_for_calls_in_flight_and_the_next_call_reopens() {
        let _serial = process_test_lock();
        open(host(None)).unwrap();
        let (entered, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            let call = scope.spawn(|| {
                with_session(|s| {
                    entered.wait();
                    release.wait();
                    dispatch!(s, s => use_a_stream(s))
                })
            });
            entered.wait();
            let stopper = scope.spawn(shutdown);
            // The shutdown cannot finish while the call holds the session.
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!stopper.is_finished());
            release.wait();
            assert_eq!(call.join().unwrap(), Ok(HOST_DEVICES));
            assert_eq!(stopper.join().unwrap().unwrap().backend, "host");
        });
        assert_eq!(open(host(None)), Ok(("host", true)), "a new runtime");
        shutdown().unwrap();
    }
}
