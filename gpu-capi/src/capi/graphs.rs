//! Graphs (`gpurt_graph_t`): recording copies, fills and kernel launches with their node
//! dependencies once, instantiating them, replaying them as one operation, updating nodes.
//!
//! A graph handle is first a recording (`gpurt_graph_begin`, then `gpurt_graph_copy`,
//! `_fill`, `_kernel`, each returning a node number), then, after `gpurt_graph_end`, an
//! instantiated graph (`gpurt_graph_launch`, `gpurt_graph_update_*`) until
//! `gpurt_graph_destroy` or shutdown. The graph holds every memory object its nodes name, so
//! `gpurt_free` of one of them takes effect when the graph is destroyed. A recording may also
//! make blocks of the graph's own memory (`gpurt_graph_alloc`), named in spans like memory,
//! whose handles live as long as the graph.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use gpu_runtime::backend::FillValue;
use gpu_runtime::backend::graph::NodeId;
use gpu_runtime::error::Error;
use gpu_runtime::id::DeviceId;
use gpu_runtime::runtime::{Graph, GraphArg, GraphRecorder, GraphSpan, Span};
use gpu_runtime::token::Token;

use crate::shared::{
    CapiError, ClientBackend, GpurtStatus, HandleKind, Session, dispatch, status_of, with_session,
};

use super::args::{c_slice, out_param, write_out};
use super::kernels::{GpurtArg, GpurtDims, GpurtKernel, kernel_args, launch_dims};
use super::memory::{GpurtMemory, GpurtSpan, held};
use super::objects::Memory;
use super::tokens::{GpurtToken, enqueue, token_out};

/// A graph of device work on one device (`gpurt_graph_begin`): a recording until
/// `gpurt_graph_end`, then instantiated. `{0}` is the null handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtGraph {
    /// The handle's value (opaque).
    pub id: u64,
}

/// A graph behind a handle, and the memory its nodes name.
pub(crate) struct GraphObject<B: ClientBackend> {
    /// Declared first, so dropped first: the graph's spans borrow `memory`'s objects.
    phase: Mutex<Phase<B>>,
    /// Every memory object a node named, once each, kept (not moved: each behind its `Arc`)
    /// while the graph lives.
    memory: Mutex<Vec<Arc<Memory<B>>>>,
    /// The handles of the blocks of its own memory (`gpurt_graph_alloc`), released with it.
    blocks: Mutex<Vec<u64>>,
}

enum Phase<B: ClientBackend> {
    Recording(GraphRecorder<'static, B>),
    Ready(Graph<'static, B>),
    /// Between the two, or after a failed instantiation (the recording is gone).
    Gone,
}

impl<B: ClientBackend> GraphObject<B> {
    fn phase(&self) -> MutexGuard<'_, Phase<B>> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes `[offset, offset + len)` of the memory `span` names, borrowed for as long as the
    /// graph lives: the memory object is kept with the graph.
    fn span(&self, s: &Session<B>, span: &GpurtSpan) -> Result<Span<'static>, CapiError> {
        let memory = held(s, span)?;
        let bytes = memory.span(span.offset, span.len)?;
        // SAFETY: `bytes` borrows the object behind `memory`, an `Arc`'s value, which never
        // moves; the clone pushed below keeps it alive until this graph object is dropped, and
        // the graph that holds the span (`phase`) is dropped before `self.memory`.
        let bytes = unsafe { core::mem::transmute::<Span<'_>, Span<'static>>(bytes) };
        let mut kept = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        // Each object once, however many nodes and updates name it.
        if !kept.iter().any(|other| Arc::ptr_eq(other, &memory)) {
            kept.push(memory);
        }
        Ok(bytes)
    }

    /// What `span` names for a node: bytes of a block of a graph's own memory, or of memory
    /// borrowed as [`GraphObject::span`] does.
    fn operand(&self, s: &Session<B>, span: &GpurtSpan) -> Result<GraphSpan<'static>, CapiError> {
        if HandleKind::of_handle(span.memory.id) == Some(HandleKind::GraphBlock) {
            let block = s.capi.graph_blocks.get(span.memory.id)?;
            return Ok(block.sub(span.offset, span.len)?.into());
        }
        Ok(self.span(s, span)?.into())
    }

    /// The kernel arguments of `args`, their spans as [`GraphObject::operand`] gives them.
    fn args(&self, s: &Session<B>, args: &[GpurtArg]) -> Result<Vec<GraphArg<'static>>, CapiError> {
        kernel_args(args, |span| Ok(self.operand(s, span)?.into()))
    }

    fn recording<T>(
        &self,
        add: impl FnOnce(&mut GraphRecorder<'static, B>) -> Result<T, Error>,
    ) -> Result<T, CapiError> {
        match &mut *self.phase() {
            Phase::Recording(recorder) => Ok(add(recorder)?),
            _ => Err(phase_error("a graph that was ended (gpurt_graph_end)")),
        }
    }

    fn ready<T>(
        &self,
        use_graph: impl FnOnce(&mut Graph<'static, B>) -> Result<T, Error>,
    ) -> Result<T, CapiError> {
        match &mut *self.phase() {
            Phase::Ready(graph) => Ok(use_graph(graph)?),
            _ => Err(phase_error("a graph not yet ended (gpurt_graph_end)")),
        }
    }
}

fn phase_error(given: &'static str) -> CapiError {
    CapiError::InvalidArgument {
        what: "graph handle",
        detail: format!(
            "{given}: nodes are added between gpurt_graph_begin and gpurt_graph_end, and a \
             graph is launched or updated after gpurt_graph_end"
        ),
    }
}

fn graph<B: ClientBackend>(
    s: &Session<B>,
    graph: GpurtGraph,
) -> Result<Arc<GraphObject<B>>, CapiError> {
    Ok(s.capi.graphs.get(graph.id)?)
}

/// The node numbers of an `after` list.
///
/// # Safety
/// `after` is NULL (with `count` 0) or points to `count` node numbers.
unsafe fn nodes_in(after: *const u32, count: usize) -> Result<Vec<NodeId>, CapiError> {
    // SAFETY: this function's contract.
    let after = unsafe { c_slice(after, count, "node list") }?;
    Ok(after.iter().map(|&node| NodeId(node)).collect())
}

/// Runs `add` on the recording `graph` names, with the nodes of `after`, and writes the new
/// node's number to `*node`.
///
/// # Safety
/// `after` is NULL (with `after_count` 0) or points to `after_count` node numbers; `node`
/// points to writable memory for a `uint32_t`.
unsafe fn add_node(
    after: *const u32,
    after_count: usize,
    node: *mut u32,
    add: impl FnOnce(&[NodeId]) -> Result<NodeId, CapiError>,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(node, "node out-parameter")?;
        // SAFETY: this function's contract, passed on.
        let after = unsafe { nodes_in(after, after_count) }?;
        write_out(out, add(&after)?.0);
        Ok(())
    })
}

fn begin<B: ClientBackend>(s: &'static Session<B>, device: u32) -> Result<GpurtGraph, CapiError> {
    let recorder = s.runtime().record_graph(DeviceId(device))?;
    let object = GraphObject {
        phase: Mutex::new(Phase::Recording(recorder)),
        memory: Mutex::new(Vec::new()),
        blocks: Mutex::new(Vec::new()),
    };
    let id = s.capi.graphs.insert(Arc::new(object))?;
    Ok(GpurtGraph { id })
}

fn end<B: ClientBackend>(s: &Session<B>, handle: GpurtGraph) -> Result<(), CapiError> {
    let object = graph(s, handle)?;
    let mut phase = object.phase();
    match core::mem::replace(&mut *phase, Phase::Gone) {
        Phase::Recording(recorder) => {
            *phase = Phase::Ready(recorder.instantiate()?);
            Ok(())
        }
        other => {
            *phase = other;
            Err(phase_error("a graph that was ended (gpurt_graph_end)"))
        }
    }
}

fn launch<B: ClientBackend>(
    s: &Session<B>,
    handle: GpurtGraph,
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let object = graph(s, handle)?;
    object.ready(|graph| graph.launch(after)).map(token_out)
}

fn alloc<B: ClientBackend>(
    s: &Session<B>,
    handle: GpurtGraph,
    size: usize,
) -> Result<GpurtMemory, CapiError> {
    let object = graph(s, handle)?;
    let block = object.recording(|recorder| recorder.alloc(size))?;
    let id = s.capi.graph_blocks.insert(block)?;
    object
        .blocks
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(id);
    Ok(GpurtMemory { id })
}

fn destroy<B: ClientBackend>(s: &Session<B>, handle: GpurtGraph) -> Result<(), CapiError> {
    let object = s.capi.graphs.remove(handle.id)?;
    for block in core::mem::take(&mut *object.blocks.lock().unwrap_or_else(PoisonError::into_inner))
    {
        // Each block's handle is this graph's alone: none is released elsewhere.
        let _ = s.capi.graph_blocks.remove(block);
    }
    let phase = core::mem::replace(&mut *object.phase(), Phase::Gone);
    match phase {
        Phase::Ready(graph) => Ok(graph.destroy()?),
        Phase::Recording(_) | Phase::Gone => Ok(()),
    }
}

/// Starts recording a graph of work on `device`; writes its handle to `*graph`. Add nodes
/// with `gpurt_graph_copy`, `gpurt_graph_fill` and `gpurt_graph_kernel`, then instantiate it
/// with `gpurt_graph_end`; release it with `gpurt_graph_destroy`.
///
/// Thread safety: any thread; calls on one graph are serialised.
///
/// # Safety
/// `graph` points to writable memory for a `gpurt_graph`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_graph_begin(device: u32, graph: *mut GpurtGraph) -> GpurtStatus {
    status_of(|| {
        let out = out_param(graph, "graph out-parameter")?;
        let made = with_session(|s| dispatch!(s, s => begin(s, device)))?;
        write_out(out, made);
        Ok(())
    })
}

/// Makes a block of `size` bytes of the recording `graph`'s own memory and writes its handle to
/// `*block`: device memory of the graph's device that this graph's nodes name in spans as they
/// name memory (`gpurt_span_of(block, offset, len)`), for scratch data inside the graph. Its
/// bytes exist from the first node that uses it to the last, in every replay: all blocks lie in
/// one allocation the graph makes at `gpurt_graph_end` and frees when destroyed, blocks whose
/// uses are ordered one after the other share bytes, and a replay allocates nothing (replays of
/// such a graph run one after another). What a replay leaves in a block is undefined for the
/// next: copy results out into memory. The handle is valid until the graph is destroyed; other
/// calls (`gpurt_copy`, `gpurt_free`, another graph's nodes) refuse it. A size of 0 is
/// `GPURT_STATUS_ZERO_SIZE`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `block` points to writable memory for a `gpurt_memory`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_graph_alloc(
    graph: GpurtGraph,
    size: usize,
    block: *mut GpurtMemory,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(block, "block out-parameter")?;
        let made = with_session(|s| dispatch!(s, s => alloc(s, graph, size)))?;
        write_out(out, made);
        Ok(())
    })
}

/// Adds a copy of `src` into `dst` (equal lengths) to the recording `graph`, to run after the
/// `after_count` nodes of `after` (earlier nodes of this graph); writes the node's number to
/// `*node`. Refused as `gpurt_copy` refuses, and a node number not yet added is
/// `GPURT_STATUS_INVALID_ARGUMENT`; nothing is added on an error.
///
/// Thread safety: any thread.
///
/// # Safety
/// `after` is NULL (with 0) or points to `after_count` node numbers; `node` points to
/// writable memory for a `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_graph_copy(
    graph: GpurtGraph,
    dst: GpurtSpan,
    src: GpurtSpan,
    after: *const u32,
    after_count: usize,
    node: *mut u32,
) -> GpurtStatus {
    let add = |after: &[NodeId]| {
        with_session(|s| {
            dispatch!(s, s => {
                let object = self::graph(s, graph)?;
                let (dst, src) = (object.operand(s, &dst)?, object.operand(s, &src)?);
                object.recording(|recorder| recorder.copy(dst, src, after))
            })
        })
    };
    // SAFETY: `gpurt_graph_copy`'s contract, as `add_node` needs.
    unsafe { add_node(after, after_count, node, add) }
}

/// Adds setting every byte of `dst` to `value` to the recording `graph`; as
/// `gpurt_graph_copy`.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `gpurt_graph_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_graph_fill(
    graph: GpurtGraph,
    dst: GpurtSpan,
    value: u8,
    after: *const u32,
    after_count: usize,
    node: *mut u32,
) -> GpurtStatus {
    let add = |after: &[NodeId]| {
        with_session(|s| {
            dispatch!(s, s => {
                let object = self::graph(s, graph)?;
                let dst = object.operand(s, &dst)?;
                object.recording(|recorder| recorder.fill(dst, FillValue::U8(value), after))
            })
        })
    };
    // SAFETY: `gpurt_graph_fill`'s contract, as `add_node` needs.
    unsafe { add_node(after, after_count, node, add) }
}

/// Adds a launch of `kernel` (of the graph's device) with `dims` and the `arg_count`
/// arguments of `args` to the recording `graph`; as `gpurt_graph_copy`, refused as
/// `gpurt_launch` refuses.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `gpurt_launch`, for every replay (the kernel touches only bytes inside its span
/// arguments); `after` and `node` as for `gpurt_graph_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_graph_kernel(
    graph: GpurtGraph,
    kernel: GpurtKernel,
    dims: *const GpurtDims,
    args: *const GpurtArg,
    arg_count: usize,
    after: *const u32,
    after_count: usize,
    node: *mut u32,
) -> GpurtStatus {
    let add = |after: &[NodeId]| {
        let dims = launch_dims(dims)?;
        // SAFETY: the caller's promise: `arg_count` arguments at `args`.
        let args = unsafe { c_slice(args, arg_count, "kernel argument list") }?;
        with_session(|s| {
            dispatch!(s, s => {
                let object = self::graph(s, graph)?;
                let kernel = s.capi.kernels.get(kernel.id)?;
                let args = object.args(s, args)?;
                // SAFETY: the caller's promise (the kernel stays inside its spans at every
                // replay), passed on.
                object.recording(|recorder| unsafe { recorder.launch(&kernel, dims, &args, after) })
            })
        })
    };
    // SAFETY: `gpurt_graph_kernel`'s contract, as `add_node` needs.
    unsafe { add_node(after, after_count, node, add) }
}

/// Ends the recording `graph` and instantiates it: the graph is ready to launch. A backend
/// without graphs is `GPURT_STATUS_UNSUPPORTED`; on an error the recording is gone (destroy
/// the handle).
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_graph_end(graph: GpurtGraph) -> GpurtStatus {
    status_of(|| with_session(|s| dispatch!(s, s => end(s, graph))))
}

/// Enqueues one replay of the instantiated `graph` after the tokens of `after`; writes its
/// token to `*done`, complete when every node has run. Consumes `after` on success.
///
/// Thread safety: any thread.
///
/// # Safety
/// `after` and `done` as for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_graph_launch(
    graph: GpurtGraph,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation =
        |after: &mut Vec<Token>| with_session(|s| dispatch!(s, s => launch(s, graph, after)));
    // SAFETY: `gpurt_graph_launch`'s contract, as `enqueue` needs.
    unsafe { enqueue(after, after_count, done, operation) }
}

/// Makes copy node `node` of the instantiated `graph` copy `src` into `dst` from the next
/// replay on (replays already enqueued run as they were). A node of another kind is
/// `GPURT_STATUS_INVALID_ARGUMENT`; nothing changes on an error.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_graph_update_copy(
    graph: GpurtGraph,
    node: u32,
    dst: GpurtSpan,
    src: GpurtSpan,
) -> GpurtStatus {
    status_of(|| {
        with_session(|s| {
            dispatch!(s, s => {
                let object = self::graph(s, graph)?;
                let (dst, src) = (object.operand(s, &dst)?, object.operand(s, &src)?);
                object.ready(|graph| graph.set_copy(NodeId(node), dst, src))
            })
        })
    })
}

/// Makes fill node `node` of the instantiated `graph` set `dst` to `value`; as
/// `gpurt_graph_update_copy`.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_graph_update_fill(
    graph: GpurtGraph,
    node: u32,
    dst: GpurtSpan,
    value: u8,
) -> GpurtStatus {
    status_of(|| {
        with_session(|s| {
            dispatch!(s, s => {
                let object = self::graph(s, graph)?;
                let dst = object.operand(s, &dst)?;
                object.ready(|graph| graph.set_fill(NodeId(node), dst, FillValue::U8(value)))
            })
        })
    })
}

/// Makes launch node `node` of the instantiated `graph` launch `kernel` with `dims` and
/// `args`; as `gpurt_graph_update_copy`, refused as `gpurt_launch` refuses.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `gpurt_graph_kernel`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_graph_update_kernel(
    graph: GpurtGraph,
    node: u32,
    kernel: GpurtKernel,
    dims: *const GpurtDims,
    args: *const GpurtArg,
    arg_count: usize,
) -> GpurtStatus {
    status_of(|| {
        let dims = launch_dims(dims)?;
        // SAFETY: the caller's promise: `arg_count` arguments at `args`.
        let args = unsafe { c_slice(args, arg_count, "kernel argument list") }?;
        with_session(|s| {
            dispatch!(s, s => {
                let object = self::graph(s, graph)?;
                let kernel = s.capi.kernels.get(kernel.id)?;
                let args = object.args(s, args)?;
                // SAFETY: the caller's promise, passed on.
                object.ready(|graph| unsafe { graph.set_launch(NodeId(node), &kernel, dims, &args) })
            })
        })
    })
}

/// Destroys `graph` (recording or instantiated); replays already enqueued still run, and the
/// memory its nodes named is let go (memory released with `gpurt_free` meanwhile is freed
/// now, after those replays).
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_graph_destroy(graph: GpurtGraph) -> GpurtStatus {
    status_of(|| with_session(|s| dispatch!(s, s => destroy(s, graph))))
}
