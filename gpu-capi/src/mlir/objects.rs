//! What the MLIR ABI keeps in a session ([`MlirObjects`]): the program's streams, events,
//! modules, functions and allocations, made at open and released at shutdown.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashMap;

use gpu_runtime::runtime::{Buffer, Kernel, ModuleId};
use gpu_runtime::token::{Token, TraceOp};

use crate::shared::{
    ClientBackend, ClientObjects, ClientSlot, Generation, HandleKind, HandleMap, MlirSlot, Session,
    TraceExport,
};

/// An MLIR stream: the token at its tail and the event waits queued since.
#[derive(Default)]
pub(super) struct Stream {
    /// The token of its last operation (none before the first, or once waited for).
    pub(super) tail: Option<Token>,
    /// Branches of recorded events its next operation waits for.
    pub(super) waits: Vec<Token>,
    /// Whether its tail is a branch of its own last record, with nothing queued or run on it
    /// since (a join input, which MLIR's lowering never uses again): it is in the idle queue.
    pub(super) idle: bool,
}

/// A function handle: a kernel name of a module, resolved per device at launch.
pub(super) struct Function {
    /// The module.
    pub(super) module: ModuleId,
    /// The kernel's name in it.
    pub(super) name: CString,
}

/// The allocations of `mgpuMemAlloc` by address, in order: the one an address lies in is the
/// last that starts at or below it.
pub(super) type Allocations<B> = BTreeMap<usize, Buffer<'static, B>>;

/// What the MLIR ABI keeps in a session: the program's streams, events, modules, functions
/// and allocations, by handle or address. One lock: MLIR programs call from one thread.
pub struct MlirObjects<B: ClientBackend> {
    inner: Mutex<Objects<B>>,
    /// Whether the graph mode is on (its log is [`Objects::graphs`]): fixed when the session
    /// opens (only tests change it), and read without the lock, so a call with the mode off
    /// takes the lock once, for its own work.
    graph_mode: AtomicBool,
}

/// The objects behind [`MlirObjects`]'s lock.
pub(super) struct Objects<B: ClientBackend> {
    pub(super) streams: HandleMap<Stream>,
    /// Streams that went idle ([`Stream::idle`]), oldest first: their branches are dropped
    /// once done. An entry whose stream is gone or busy again is skipped when reached.
    pub(super) idle: VecDeque<u64>,
    pub(super) events: HandleMap<Option<Token>>,
    pub(super) modules: HandleMap<ModuleId>,
    pub(super) functions: HandleMap<Function>,
    /// Function handles by module, then name, so asking again (the lowering asks before every
    /// launch) returns the same handle, found without allocating.
    pub(super) function_names: HashMap<ModuleId, HashMap<CString, u64>>,
    /// Kernels resolved per function handle and device.
    pub(super) kernels: HashMap<(u64, u32), Kernel<'static, B>>,
    /// The allocations of `mgpuMemAlloc`.
    pub(super) buffers: Allocations<B>,
    /// The program's own stream/event calls and where to write them, when asked for.
    pub(super) trace: Option<(PathBuf, Vec<TraceOp>)>,
    /// The deferral log of the graph mode (`GPU_RUNTIME_MLIR_GRAPHS=1`; none when off).
    pub(super) graphs: Option<Box<super::graph_log::Deferred<B>>>,
    /// An empty `Vec` whose room each operation uses for its dependencies or a fork's branches
    /// and leaves empty, so no call allocates one.
    pub(super) spare: Vec<Token>,
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
        let graph_mode = crate::shared::config::mlir_graphs(std::env::var_os).unwrap_or(false);
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
                graphs: graph_mode.then(|| Box::new(super::graph_log::Deferred::new())),
                spare: Vec::new(),
            }),
            graph_mode: AtomicBool::new(graph_mode),
        }
    }

    /// Releases everything the program left (streams it never destroyed, events, buffers;
    /// modules stay for the runtime's shutdown to unload); returns how many streams it left.
    fn release(&self, session: &Session<B>) -> usize {
        let mut objects = self.lock();
        let runtime = session.runtime();
        let left = objects.streams.len();
        if let Some(log) = objects.graphs.take()
            && let Err(error) = (*log).release(runtime)
        {
            eprintln!("gpu-runtime (mlir): releasing the graph mode's staging: {error}");
        }
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
    /// The objects, locked (a panic while they were locked left nothing half-changed that a
    /// later call relies on).
    pub(super) fn lock(&self) -> MutexGuard<'_, Objects<B>> {
        #[cfg(test)]
        LOCKS.with(|locks| locks.set(locks.get() + 1));
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the graph mode is on, read without the lock (`Relaxed`: the flag orders nothing;
    /// a call that finds it on takes the lock and reads the log there, as before the flag).
    pub(super) fn graph_mode(&self) -> bool {
        self.graph_mode.load(Ordering::Relaxed)
    }

    /// Turns the graph mode's flag on or off (for tests, with the log set under the lock).
    #[cfg(test)]
    pub(super) fn set_graph_mode(&self, on: bool) {
        self.graph_mode.store(on, Ordering::Relaxed);
    }
}

#[cfg(test)]
thread_local! {
    /// How many times this thread has locked a session's MLIR objects (for tests).
    static LOCKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times this thread has locked a session's MLIR objects (for tests).
#[cfg(test)]
pub(super) fn locks_taken() -> u64 {
    LOCKS.with(std::cell::Cell::get)
}

impl<B: ClientBackend> Objects<B> {
    /// Records one of the program's stream/event calls, when a trace is asked for.
    pub(super) fn note(&mut self, op: impl FnOnce() -> TraceOp) {
        if let Some((_, ops)) = &mut self.trace {
            ops.push(op());
        }
    }
}
