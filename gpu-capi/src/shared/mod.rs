//! The layer every client ABI stands on: the process-wide runtime (opened once, lazily, on the
//! backend `GPU_RUNTIME_BACKEND` names), handle tables, status codes and the last error.
//!
//! # Dispatch over backends
//!
//! [`Runtime`](gpu_runtime::runtime::Runtime) is generic over the
//! [`Backend`](gpu_runtime::backend::Backend) trait, which is not object safe, and the backend
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
//!
//! # Modules
//!
//! - `session`: one opened runtime ([`Session`]), the objects clients keep in it, and the
//!   dispatch over backends ([`AnySession`], `dispatch!`).
//! - `process`: the process-wide slot: [`open`], [`with_session`], [`shutdown`].
//! - `report`: what a shutdown found ([`SessionReport`], [`TraceExport`]).
//! - [`handle`], [`status`], [`config`]: handle tables, status codes and errors (with the last
//!   error and the panic guard), and the tunables read from the environment.
//! - `args`: null pointers and C strings, checked the same way for every client ABI.
//! - [`recorder`]: our allocator's block events, into gpu-recorder's trace when it records the
//!   process.

pub(crate) mod args;
pub mod config;
pub mod handle;
mod process;
pub mod recorder;
mod report;
pub(crate) mod session;
pub mod status;

pub use handle::{Generation, HandleError, HandleKind, HandleMap, HandleTable};
pub use process::{
    BACKEND_VAR, BackendChoice, HOST_DEVICES, OpenOptions, TRACE_VAR, open, shutdown,
    with_open_session, with_session,
};
#[cfg(test)]
pub(crate) use process::{open_host, process_test_lock};
pub use report::{SessionReport, TraceExport};
pub(crate) use session::dispatch;
pub use session::{
    AnySession, CapiSlot, ClientBackend, ClientObjects, ClientSlot, MlirSlot, Session,
};
pub use status::{CapiError, GpurtStatus, guarded, status_of};
