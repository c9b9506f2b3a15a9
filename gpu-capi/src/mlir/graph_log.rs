//! The graph mode's log (`mlir::graphs`): the deferred calls of a sequence, its key and nodes,
//! the staging, the instantiated graphs and the counts, with no knowledge of the calls' paths.

use std::collections::VecDeque;
use std::ffi::CString;

use hashbrown::HashMap;

use gpu_runtime::DeviceId;
use gpu_runtime::allocator::MemoryKind;
use gpu_runtime::backend::graph::{NodeId, NodeOp};
use gpu_runtime::backend::{FillValue, KernelArg, LaunchDims};
use gpu_runtime::runtime::{Arg, Buffer, Graph, Kernel, ModuleId, Runtime};
use gpu_runtime::token::Token;

use crate::shared::{CapiError, ClientBackend, HandleError, HandleKind};

/// How many instantiated graphs a session keeps.
pub(super) const CACHED_GRAPHS: usize = 8;

/// The fewest copies and memsets a sequence replayed as a graph has (a single one is issued).
pub(super) const MIN_NODES: usize = 2;

/// How many keys seen once a session remembers.
pub(super) const SEEN_KEYS: usize = 32;

/// One deferred call, with the addresses it will use.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    /// `mgpuMemcpy`.
    Copy {
        device: DeviceId,
        stream: u64,
        copy: Transfer,
    },
    /// `mgpuMemset32` / `mgpuMemset16`.
    Fill {
        device: DeviceId,
        stream: u64,
        dst: usize,
        value: FillValue,
        count: usize,
    },
    /// `mgpuEventRecord`.
    Record { event: u64, stream: u64 },
    /// `mgpuStreamWaitEvent`.
    Wait { stream: u64, event: u64 },
    /// `mgpuEventDestroy`.
    DestroyEvent { event: u64 },
    /// `mgpuLaunchKernel` of `function` with `dims`; its kernel and argument values are
    /// [`Deferred::launches`]`[index]`.
    Launch {
        device: DeviceId,
        stream: u64,
        function: u64,
        dims: LaunchDims,
        index: usize,
    },
    /// `mgpuMemFree` on a stream (the allocation is held in [`Deferred::freed`]).
    Free { stream: u64, ptr: usize },
}

/// A deferred copy's ends: `src` already redirected to staging when it was pageable.
#[derive(Clone, Copy, Debug)]
pub(super) struct Transfer {
    /// The program's destination.
    pub(super) dst: usize,
    /// The source (staging for a pageable one).
    pub(super) src: usize,
    /// Bytes copied.
    pub(super) bytes: usize,
    /// Whether `src` is staging (the program's source was pageable).
    pub(super) host_src: bool,
    /// The staging the copy writes for a pageable destination, copied out at the sequence's
    /// end.
    pub(super) staged_dst: Option<usize>,
}

impl Transfer {
    /// Where the copy writes: the staging of a pageable destination, or the destination.
    pub(super) fn target(&self) -> usize {
        self.staged_dst.unwrap_or(self.dst)
    }
}

/// One operation of a sequence's key: what fixes its graph's nodes and edges.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum KeyOp {
    Copy {
        stream: u32,
        bytes: usize,
        host_dst: bool,
        host_src: bool,
    },
    Fill {
        stream: u32,
        width: usize,
        count: usize,
    },
    Launch {
        stream: u32,
        function: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
    },
    Record {
        event: u32,
        stream: u32,
    },
    Wait {
        stream: u32,
        event: u32,
    },
}

/// A sequence's key: its device and operations.
pub(super) type Key = (DeviceId, Vec<KeyOp>);

/// A node's addresses and values in one replay (never a launch: launches end a sequence).
pub(super) type NodeParams = NodeOp<()>;

/// A node of a sequence's graph, the nodes it runs after, and for a launch its index in
/// [`Deferred::launches`].
pub(super) type Node = (NodeParams, Vec<NodeId>, Option<usize>);

/// A deferred launch: the kernel and its arguments' values, copied at the call.
pub(super) type Launch<B> = (Kernel<'static, B>, Vec<Arg<'static>>);

/// An instantiated graph and the parameters of its nodes as they are now.
pub(super) struct Cached<B: ClientBackend> {
    key: Key,
    graph: Graph<'static, B>,
    nodes: Vec<NodeParams>,
}

/// How the graph mode has served a session's sequences (for the tests and reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Calls deferred.
    pub deferred: u64,
    /// Sequences issued call by call (first seen, not expressible, or after a failure).
    pub issued: u64,
    /// Graphs instantiated.
    pub instantiated: u64,
    /// Sequences replayed as a graph.
    pub replays: u64,
    /// Nodes updated in place before a replay.
    pub updates: u64,
    /// Graph recordings, updates or launches that failed (their sequence was issued instead).
    pub failures: u64,
}

/// The deferral log of a session in graph mode.
pub(super) struct Deferred<B: ClientBackend> {
    /// The current sequence.
    pub(super) ops: Vec<Op>,
    /// Allocations freed in the current sequence, by address.
    pub(super) freed: Vec<(usize, Buffer<'static, B>)>,
    /// The current sequence's launches.
    pub(super) launches: Vec<Launch<B>>,
    /// The parameter sizes of each function whose module declares them (PTX), by handle.
    pub(super) params: HashMap<u64, Vec<usize>>,
    /// The parameter sizes of each kernel of each module loaded as PTX.
    pub(super) modules: HashMap<ModuleId, HashMap<CString, Vec<usize>>>,
    /// Events destroyed in the current sequence (their handles are refused from then on).
    pub(super) doomed: Vec<u64>,
    /// Pinned staging, one buffer per position in a sequence.
    pub(super) staging: Vec<Buffer<'static, B>>,
    /// Staging buffers the current sequence uses.
    pub(super) staged: usize,
    /// Work that may still read or write the staging.
    pub(super) busy: Vec<Token>,
    /// Keys seen once, oldest first.
    pub(super) seen: VecDeque<Key>,
    /// Instantiated graphs, least recently used first.
    pub(super) cache: Vec<Cached<B>>,
    /// How sequences were served.
    pub(super) stats: GraphStats,
}

impl<B: ClientBackend> Deferred<B> {
    /// An empty log.
    pub(super) fn new() -> Self {
        Self {
            ops: Vec::new(),
            freed: Vec::new(),
            launches: Vec::new(),
            params: HashMap::new(),
            modules: HashMap::new(),
            doomed: Vec::new(),
            staging: Vec::new(),
            staged: 0,
            busy: Vec::new(),
            seen: VecDeque::new(),
            cache: Vec::new(),
            stats: GraphStats::default(),
        }
    }

    /// How many staging buffers the log holds.
    #[cfg(test)]
    pub(super) fn staging_buffers(&self) -> usize {
        self.staging.len()
    }

    /// How many calls the current sequence holds.
    #[cfg(test)]
    pub(super) fn pending(&self) -> usize {
        self.ops.len()
    }

    /// Refuses an event this sequence destroyed, as a destroyed event is refused.
    pub(super) fn check_event(&self, event: u64) -> Result<(), CapiError> {
        if self.doomed.contains(&event) {
            return Err(HandleError::Stale {
                kind: HandleKind::Event,
                handle: event,
            }
            .into());
        }
        Ok(())
    }

    /// Releases everything at shutdown: the work that used staging is waited for, then the
    /// graphs, the staging and the held allocations go; the unsynchronised sequence is
    /// dropped. Returns the first failure.
    pub(super) fn release(mut self, runtime: &Runtime<B>) -> Result<(), CapiError> {
        let mut first = Ok(());
        for token in self.busy.drain(..) {
            let waited = runtime.wait(token);
            if first.is_ok() {
                first = waited;
            }
        }
        for cached in self.cache.drain(..) {
            let destroyed = cached.graph.destroy();
            if first.is_ok() {
                first = destroyed;
            }
        }
        self.ops.clear();
        Ok(first?)
    }
}

impl<B: ClientBackend> Deferred<B> {
    /// The next staging buffer of the sequence, of at least `bytes` bytes, once no work uses
    /// any staging; returns its address.
    pub(super) fn stage(
        &mut self,
        runtime: &'static Runtime<B>,
        device: DeviceId,
        bytes: usize,
    ) -> Result<usize, CapiError> {
        for token in self.busy.drain(..) {
            runtime.wait(token)?;
        }
        let position = self.staged;
        if self.staging.get(position).is_none_or(|b| b.size() < bytes) {
            let buffer = runtime.alloc(device, MemoryKind::HostPinned, bytes)?;
            match self.staging.get_mut(position) {
                Some(old) => *old = buffer,
                None => self.staging.push(buffer),
            }
        }
        self.staged += 1;
        Ok(self.staging[position].address())
    }
}

impl<B: ClientBackend> Deferred<B> {
    /// The cached graph of `key`, moved to the most recently used end.
    pub(super) fn lookup(&mut self, key: &Key) -> Option<&mut Cached<B>> {
        let index = self.cache.iter().position(|c| &c.key == key)?;
        let hit = self.cache.remove(index);
        self.cache.push(hit);
        self.cache.last_mut()
    }

    /// Whether `key` was seen before; remembers it otherwise (forgetting the oldest past
    /// [`SEEN_KEYS`]).
    pub(super) fn seen_before(&mut self, key: &Key) -> bool {
        if let Some(index) = self.seen.iter().position(|k| k == key) {
            self.seen.remove(index);
            return true;
        }
        if self.seen.len() == SEEN_KEYS {
            self.seen.pop_front();
        }
        self.seen.push_back(key.clone());
        false
    }

    /// Caches a new graph (the least recently used goes past [`CACHED_GRAPHS`]).
    pub(super) fn insert(&mut self, key: Key, graph: Graph<'static, B>, nodes: Vec<NodeParams>) {
        if self.cache.len() == CACHED_GRAPHS {
            // Replays already enqueued still run.
            let _ = self.cache.remove(0).graph.destroy();
        }
        self.cache.push(Cached { key, graph, nodes });
    }

    /// Drops the most recently used graph (one whose update failed halfway).
    pub(super) fn evict_last(&mut self) {
        if let Some(cached) = self.cache.pop() {
            let _ = cached.graph.destroy();
        }
    }

    /// The most recently used graph (the one [`Deferred::lookup`] or [`Deferred::insert`] made
    /// ready).
    pub(super) fn last(&self) -> Option<&Graph<'static, B>> {
        self.cache.last().map(|cached| &cached.graph)
    }

    /// Work that may still read or write staging.
    pub(super) fn busy(&mut self) -> &mut Vec<Token> {
        &mut self.busy
    }
}

impl<B: ClientBackend> Cached<B> {
    /// The graph and its nodes' parameters.
    pub(super) fn parts(&mut self) -> (&mut Graph<'static, B>, &mut Vec<NodeParams>) {
        (&mut self.graph, &mut self.nodes)
    }
}

/// The value a launch node passes for `arg` (an allocation's address for a span).
pub(super) fn arg_value(arg: &Arg<'_>) -> KernelArg {
    match *arg {
        Arg::Span(span) => KernelArg::Ptr(span.address()),
        Arg::U32(value) => KernelArg::U32(value),
        Arg::U64(value) => KernelArg::U64(value),
        Arg::F32(value) => KernelArg::F32(value),
    }
}
