//! The process-wide session: the slot that holds it, opening it (once, lazily, on the backend
//! the environment or the caller names), running calls on it, and shutting it down.

use std::path::PathBuf;
use std::sync::{PoisonError, RwLock};

#[cfg(any(feature = "cuda", feature = "hip"))]
use gpu_runtime::backend::Backend;
use gpu_runtime::host::{HostBackend, HostConfig};
use gpu_runtime::runtime::RecordingBackend;

use super::report::SessionReport;
use super::session::{AnySession, ClientBackend, Session, dispatch};
use super::status::CapiError;

/// Environment variable naming the backend: `cuda`, `hip` or `host` (unset or empty: the best
/// present).
pub const BACKEND_VAR: &str = "GPU_RUNTIME_BACKEND";

/// Environment variable naming a file: when set at open, the backend's stream/event calls are
/// recorded and written there, in the project's trace format, at shutdown.
pub const TRACE_VAR: &str = "GPU_RUNTIME_TRACE";

/// Simulated devices of the host backend when it is opened by this library.
pub const HOST_DEVICES: usize = 2;

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

/// Opens the process-wide runtime on the host backend, recording no trace (for the tests of
/// every client ABI; under [`process_test_lock`]).
#[cfg(test)]
pub(crate) fn open_host() {
    open(OpenOptions {
        backend: BackendChoice::Host,
        trace: None,
    })
    .expect("the host backend opens");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::status::GpurtStatus;
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
