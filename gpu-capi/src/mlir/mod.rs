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
//!
//! One module per concern: `session` (the default device, the way each call reaches the
//! runtime, the exit hook), `streams` (streams and events), `memory` (allocations, copies,
//! memsets, host registration) and `modules` (modules, functions, launches). This module keeps
//! what a session holds for the ABI ([`MlirObjects`](crate::mlir::MlirObjects)); each concern
//! adds its methods to it.

mod memory;
mod modules;
mod session;
mod streams;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashMap;

use gpu_runtime::runtime::{Buffer, Kernel, ModuleId};
use gpu_runtime::token::{Token, TraceOp};

use crate::shared::{
    ClientBackend, ClientObjects, ClientSlot, Generation, HandleKind, HandleMap, MlirSlot, Session,
    TraceExport,
};

pub use memory::{
    MemRefDescriptor, mgpuMemAlloc, mgpuMemFree, mgpuMemHostRegister, mgpuMemHostRegisterMemRef,
    mgpuMemHostUnregister, mgpuMemHostUnregisterMemRef, mgpuMemcpy, mgpuMemset16, mgpuMemset32,
};
pub use modules::{
    mgpuLaunchKernel, mgpuModuleGetFunction, mgpuModuleLoad, mgpuModuleLoadJIT, mgpuModuleUnload,
};
pub use session::mgpuSetDefaultDevice;
pub use streams::{
    mgpuEventCreate, mgpuEventDestroy, mgpuEventRecord, mgpuEventSynchronize, mgpuStreamCreate,
    mgpuStreamDestroy, mgpuStreamSynchronize, mgpuStreamWaitEvent,
};

use modules::Function;
use streams::Stream;

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
}
