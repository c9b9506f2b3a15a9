//! One opened runtime: the [`Session`] (runtime, generation, each client's objects through its
//! [`ClientSlot`]), and [`AnySession`] with `dispatch!` to reach it on whichever backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpu_runtime::backend::Backend;
use gpu_runtime::host::HostBackend;
use gpu_runtime::runtime::{AllocTrace, RecordingBackend, Runtime};
use gpu_runtime::token::TraceOp;

use super::config;
use super::handle::Generation;
use super::report::{SessionReport, TraceExport};
use super::status::CapiError;

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
    /// The allocation trace being recorded (`GPU_RUNTIME_ALLOC_TRACE`), flushed at shutdown.
    alloc_trace: Option<Arc<AllocTrace>>,
    /// The C API's objects.
    pub capi: ObjectsOf<CapiSlot, B>,
    /// What the MLIR ABI's callers hold (streams, events, modules, allocations).
    pub(crate) mlir: ObjectsOf<MlirSlot, B>,
}

impl<B: ClientBackend> Session<B> {
    pub(super) fn open(backend: B, trace_path: Option<PathBuf>) -> Result<Self, CapiError> {
        let generation = Generation::next()?;
        let backend = Arc::new(backend);
        let runtime = Runtime::shared(Arc::clone(&backend), config::from_env()?)?;
        let alloc_trace = match config::alloc_trace_path() {
            None => None,
            Some(path) => {
                let file =
                    std::fs::File::create(&path).map_err(|e| CapiError::InvalidArgument {
                        what: config::ALLOC_TRACE_VAR,
                        detail: format!("cannot create {}: {e}", path.display()),
                    })?;
                let recording = runtime.record_allocations(Box::new(file));
                Some(recording.map_err(|e| CapiError::InvalidArgument {
                    what: config::ALLOC_TRACE_VAR,
                    detail: format!("cannot write {}: {e}", path.display()),
                })?)
            }
        };
        Ok(Self {
            backend,
            runtime,
            alloc_trace,
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
    pub(super) fn finish(self: Box<Self>) -> SessionReport {
        let released_objects = self.release_client_objects();
        let Session {
            backend,
            runtime,
            trace_path,
            alloc_trace,
            ..
        } = *self;
        // Every failure the shutdown met is the caller's to hear of, a lost device's too: the
        // first one is reported, with the whole report.
        let shutdown = runtime.shutdown_report();
        let mut failure = shutdown.errors.first().cloned().map(CapiError::from);
        if let Some(Err(e)) = alloc_trace.map(|recording| recording.finish()) {
            failure = failure.or(Some(CapiError::InvalidArgument {
                what: config::ALLOC_TRACE_VAR,
                detail: format!("the allocation trace could not be written: {e}"),
            }));
        }
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
            $crate::shared::session::AnySession::Host($s) => $body,
            $crate::shared::session::AnySession::HostTraced($s) => $body,
            #[cfg(feature = "cuda")]
            $crate::shared::session::AnySession::Cuda($s) => $body,
            #[cfg(feature = "cuda")]
            $crate::shared::session::AnySession::CudaTraced($s) => $body,
            #[cfg(feature = "hip")]
            $crate::shared::session::AnySession::Hip($s) => $body,
            #[cfg(feature = "hip")]
            $crate::shared::session::AnySession::HipTraced($s) => $body,
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

impl AnySession {
    /// The name of the backend the session runs on.
    pub fn backend_name(self) -> &'static str {
        dispatch!(self, s => s.backend.name())
    }
}
