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
//!   stream left idle after a record is dropped (its branch released) at a stream creation
//!   once a synchronisation has covered it (no driver call), or, past a bound of idle streams,
//!   once its event has completed (one event query per stream creation).
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
//!
//! One module per concern: `objects` (what a session holds for the ABI:
//! [`MlirObjects`](crate::mlir::MlirObjects)), `session` (the default device, the way each call
//! reaches the runtime, the exit hook), `core_ops` (an operation in a stream's order, and the
//! stream operations every path issues through), `streams` (streams and events), `memory`
//! (allocations, copies, memsets, host registration) and `modules` (modules, functions, launches);
//! each concern adds its methods to the objects. This module only declares them and re-exports the
//! public items. The opt-in graph mode (`GPU_RUNTIME_MLIR_GRAPHS=1`) is `graphs` (deferral and
//! flushes), `graph_log` (its log, keys and cache), `graph_launches` (its launches), `graph_replay`
//! (a sequence replayed as a graph or issued through `core_ops`) and `ptx` (kernels' parameter
//! sizes from a PTX image); the layers import downwards only. `forkjoin` (the calls of one
//! iteration of `clients/mlir/forkjoin.mlir`) serves the tests and the bench only.

mod core_ops;
#[cfg(test)]
mod forkjoin;
mod graph_launches;
mod graph_log;
mod graph_replay;
#[cfg(test)]
mod graph_tests;
mod graphs;
mod memory;
mod modules;
mod objects;
mod ptx;
mod session;
mod streams;
#[cfg(test)]
mod tests;

pub use graph_log::GraphStats;
pub use memory::{
    MemRefDescriptor, mgpuMemAlloc, mgpuMemFree, mgpuMemHostRegister, mgpuMemHostRegisterMemRef,
    mgpuMemHostUnregister, mgpuMemHostUnregisterMemRef, mgpuMemcpy, mgpuMemset16, mgpuMemset32,
};
pub use modules::{
    mgpuLaunchKernel, mgpuModuleGetFunction, mgpuModuleLoad, mgpuModuleLoadJIT, mgpuModuleUnload,
};
pub use objects::MlirObjects;
pub use session::mgpuSetDefaultDevice;
pub use streams::{
    mgpuEventCreate, mgpuEventDestroy, mgpuEventRecord, mgpuEventSynchronize, mgpuStreamCreate,
    mgpuStreamDestroy, mgpuStreamSynchronize, mgpuStreamWaitEvent,
};
