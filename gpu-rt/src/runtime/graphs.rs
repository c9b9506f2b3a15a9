//! Graphs: a program of copies, fills and launches on one device, recorded once with its
//! dependencies, instantiated by the backend, and replayed as one stream operation per launch.
//!
//! Recording checks each operation as the runtime's own call would (spans owned, devices,
//! lengths, overlaps, library kernels' reaches) and keeps the spans borrowed for as long as
//! the graph lives, so no buffer a graph touches can be freed under it. A replay is planned like
//! any other operation: it runs after the tokens it is given and returns a token, and every
//! span of the graph is noted as used on the replay's stream. Between replays a node's
//! addresses and values can change in place ([`Graph::set_copy`], [`Graph::set_fill`],
//! [`Graph::set_launch`]), which is the driver's cheap update, not a new instantiation.
//!
//! A graph may also use memory of its own ([`GraphRecorder::alloc`]): one pool, allocated at
//! instantiation and laid out so that blocks share bytes only where their uses are ordered
//! ([`super::graph_memory`]); replays reuse it, one after another.

use super::graph_memory::{Blocks, GraphArg, GraphBlock, GraphSpan, Operands, Slot};
use super::*;
use gpu_core::backend::KernelArg;
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};

impl<B: Backend> Runtime<B> {
    /// Starts recording a graph of work on `device` ([`GraphRecorder`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let d0 = DeviceId(0);
    /// let (a, b) = (rt.alloc(d0, MemoryKind::Device, 64)?, rt.alloc(d0, MemoryKind::Device, 64)?);
    /// // Record once: fill `a`, then copy it into `b`.
    /// let mut recorder = rt.record_graph(d0)?;
    /// let fill = recorder.fill(a.all(), FillValue::U32(7), &[])?;
    /// let copy = recorder.copy(b.all(), a.all(), &[fill])?;
    /// let mut graph = recorder.instantiate()?;
    /// // Replay: each replay is one operation with tokens in and out.
    /// let first = graph.launch(&mut vec![])?;
    /// graph.set_fill(fill, a.all(), FillValue::U32(9))?; // in place, for later replays
    /// let second = graph.launch(&mut vec![first])?;
    /// let mut out = [0u8; 64];
    /// rt.download(d0, &mut out, b.all(), &mut vec![second])?;
    /// assert_eq!(out[..4], 9u32.to_ne_bytes());
    /// # let _ = copy;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn record_graph(&self, device: DeviceId) -> Result<GraphRecorder<'_, B>> {
        self.usable(device)?;
        Ok(GraphRecorder {
            runtime: self,
            device,
            graph: GraphDesc::new(),
            spans: Vec::new(),
            blocks: Blocks::new(),
        })
    }
}

/// A graph being recorded on one device ([`Runtime::record_graph`]): each call adds a node
/// after the nodes it names and returns the new node, checked as the runtime's call of the
/// same name would be. Nothing reaches the device until the graph is instantiated and
/// launched.
pub struct GraphRecorder<'a, B: Backend> {
    runtime: &'a Runtime<B>,
    device: DeviceId,
    graph: GraphDesc<B::Kernel>,
    /// Per node, the spans it touches (noted as used on each replay's stream).
    spans: Vec<Vec<Span<'a>>>,
    /// The graph's own memory.
    blocks: Blocks,
}

impl<'a, B: Backend> GraphRecorder<'a, B> {
    /// Makes a block of `len` bytes of the graph's own memory, device memory of the graph's
    /// device that nodes of this graph name in place of a span (`.into()` a [`GraphSpan`] or a
    /// [`GraphArg`]). Its bytes are the graph's: allocated in stream order before the first
    /// node that uses it and freed after the last, in every replay, with no driver call; all
    /// blocks lie in one pool the graph allocates when instantiated and frees when destroyed,
    /// which no one else is handed while the graph lives. Blocks whose uses are ordered one
    /// entirely after the other share bytes. What a replay leaves in a block is undefined for
    /// the next: copy results out into a buffer. [`Error::ZeroSize`] for no byte.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let d0 = DeviceId(0);
    /// let out = rt.alloc(d0, MemoryKind::Device, 64)?;
    /// let mut recorder = rt.record_graph(d0)?;
    /// // A scratch block, then another that reuses its bytes once the first is done with.
    /// let (first, second) = (recorder.alloc(64)?, recorder.alloc(64)?);
    /// let fill = recorder.fill(first, FillValue::U32(7), &[])?;
    /// let staged = recorder.copy(second, first, &[fill])?;
    /// let read = recorder.copy(out.all(), second, &[staged])?;
    /// let third = recorder.alloc(64)?;
    /// let reuse = recorder.fill(third, FillValue::U32(1), &[read])?; // after every use of `first`
    /// let graph = recorder.instantiate()?;
    /// assert_eq!(graph.memory_bytes(), 256 + 64); // two blocks at once at most
    /// rt.wait(graph.launch(&mut vec![])?)?;
    /// let mut bytes = [0u8; 64];
    /// rt.download(d0, &mut bytes, out.all(), &mut vec![])?;
    /// assert_eq!(bytes[..4], 7u32.to_ne_bytes());
    /// # let _ = reuse;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn alloc(&mut self, len: usize) -> Result<GraphBlock> {
        self.blocks.alloc(len)
    }

    /// Adds a copy of `src` into `dst` (equal lengths, memory of the graph's device or memory
    /// it reaches, or blocks of the graph's own memory), after `after`. Refused as
    /// [`Runtime::copy`] refuses, and [`Error::UnknownGraphBlock`] for a block of another
    /// graph.
    pub fn copy(
        &mut self,
        dst: impl Into<GraphSpan<'a>>,
        src: impl Into<GraphSpan<'a>>,
        after: &[NodeId],
    ) -> Result<NodeId> {
        let ends = [(Slot::CopyDst, dst.into()), (Slot::CopySrc, src.into())];
        let (op, operands) = copy_node(self.runtime, self.device, &self.blocks, &ends)?;
        self.add(op, operands, after)
    }

    /// Adds setting every element of `dst` (a span or a block of the graph's own memory) to
    /// `value`, after `after`. Refused as [`Runtime::fill_elements`] refuses, and
    /// [`Error::UnknownGraphBlock`] for a block of another graph.
    pub fn fill(
        &mut self,
        dst: impl Into<GraphSpan<'a>>,
        value: FillValue,
        after: &[NodeId],
    ) -> Result<NodeId> {
        let dst = [(Slot::FillDst, dst.into())];
        let (op, operands) = fill_node(self.runtime, self.device, &self.blocks, &dst, value)?;
        self.add(op, operands, after)
    }

    /// Adds a launch of `kernel` (of the graph's device) with `dims` and `args` ([`Arg`]s, or
    /// [`GraphArg`]s where blocks of the graph's own memory are among them), after `after`.
    /// Refused as [`Kernel::launch`] refuses a library kernel's, and
    /// [`Error::UnknownGraphBlock`] for a block of another graph; a kernel of the program's own
    /// module ([`Runtime::module_kernel`]) takes its arguments as given, each passed as its
    /// type (on a stream such a kernel launches through [`Kernel::launch_packed`]).
    ///
    /// # Safety
    /// As for [`Kernel::launch`], for every replay: the kernel stays inside its spans (a
    /// library kernel does by construction: the runtime checks its reach); a module's kernel's
    /// parameters have the arguments' types, in order (a span is a device address).
    pub unsafe fn launch<A: Copy + Into<GraphArg<'a>>>(
        &mut self,
        kernel: &Kernel<'a, B>,
        dims: LaunchDims,
        args: &[A],
        after: &[NodeId],
    ) -> Result<NodeId> {
        let (op, operands) = launch_node(self.device, &self.blocks, kernel, dims, args)?;
        self.add(op, operands, after)
    }

    /// How many nodes the graph has so far.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether no node was added yet.
    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }

    /// Has the backend build and instantiate the graph, ready to replay, with its own memory
    /// allocated (one allocation, [`Graph::memory_bytes`]). A backend without graphs says
    /// [`Error::Unsupported`]; on any error nothing is left allocated.
    pub fn instantiate(self) -> Result<Graph<'a, B>> {
        let (runtime, device) = (self.runtime, self.device);
        let (mut graph, mut blocks) = (self.graph, self.blocks);
        let epoch = runtime.health.epoch(device);
        let placement = blocks.place(&graph)?;
        let memory = match placement.bytes {
            0 => None,
            bytes => Some(runtime.alloc(device, MemoryKind::Device, bytes)?),
        };
        blocks.resolve(
            &mut graph,
            memory.as_ref().map_or(0, Buffer::address),
            placement,
        );
        let backend: &B = &runtime.backend;
        let exec = with_device(backend, device, || {
            backend.graph_instantiate(device, &graph)
        })?;
        Ok(Graph {
            runtime,
            device,
            epoch,
            graph,
            blocks,
            memory,
            last_replay: spin::Mutex::new(None),
            uses: {
                let mut uses = NotedUses::default();
                self.spans.iter().for_each(|spans| uses.add(spans));
                uses
            },
            spans: self.spans,
            exec,
            live: true,
        })
    }

    fn add(
        &mut self,
        op: NodeOp<B::Kernel>,
        operands: Operands<'a>,
        after: &[NodeId],
    ) -> Result<NodeId> {
        let node = self.graph.add(op, after)?;
        self.blocks.added(node, operands.blocks);
        self.spans.push(operands.memory);
        Ok(node)
    }
}

/// An instantiated graph ([`GraphRecorder::instantiate`]): replayed by [`Graph::launch`],
/// changed node by node between replays, destroyed when dropped (replays already enqueued
/// still run, and its own memory is freed after them). It borrows every span it was given, so
/// their buffers outlive it.
pub struct Graph<'a, B: Backend> {
    runtime: &'a Runtime<B>,
    device: DeviceId,
    /// The device's epoch at instantiation: a reset forgets the backend's graph.
    epoch: u32,
    graph: GraphDesc<B::Kernel>,
    /// The blocks of its own memory, laid out in `memory`.
    blocks: Blocks,
    /// Its own memory (none if it has no block a node uses).
    memory: Option<Buffer<'a, B>>,
    /// With own memory, the end of the last replay: the next runs after it, so two replays
    /// never use the memory at once.
    last_replay: spin::Mutex<Option<Token>>,
    spans: Vec<Vec<Span<'a>>>,
    /// The use lists of the buffers those spans lie in (and lay in before an update), each
    /// once: a chain of 1,000 launches on one buffer notes it once per replay, not 1,000 times.
    uses: NotedUses<'a>,
    exec: B::Graph,
    /// Until destroyed.
    live: bool,
}

impl<'a, B: Backend> Graph<'a, B> {
    /// Enqueues one replay on a stream of the graph's device after `after` (consumed as by
    /// any operation) and returns its token: every node of the replay runs after `after`, and
    /// the token is complete when every node is. A graph with memory of its own also runs each
    /// replay after the one before (it keeps a fork of each replay's token for that).
    pub fn launch(&self, after: &mut Vec<Token>) -> Result<Token> {
        let runtime = self.runtime;
        self.check_epoch()?;
        if self.memory.is_none() {
            return self.enqueue(after);
        }
        // Held across the replay, so concurrent launches queue in order. The last replay's
        // token goes into this one's `after` as a fork, whose other branch stays here until the
        // replay is enqueued: a replay the backend refuses consumes its tokens, and the next
        // one must still run after the last.
        let mut last = self.last_replay.lock();
        let backup = match last.take() {
            Some(kept) => {
                let (into_replay, backup) = fork_two(runtime, kept)?;
                after.push(into_replay);
                Some(backup)
            }
            None => None,
        };
        match self.enqueue(after) {
            Ok(token) => {
                let (replay, kept) = fork_two(runtime, token)?;
                *last = Some(kept);
                backup.map_or(Ok(()), |backup| runtime.release(backup))?;
                Ok(replay)
            }
            Err(e) => {
                if backup.is_some() && !after.is_empty() {
                    // Refused before running: the caller's tokens are theirs again.
                    after.pop().map(|ours| runtime.release(ours));
                }
                *last = backup;
                Err(e)
            }
        }
    }

    /// Plans and enqueues one replay after `after`.
    fn enqueue(&self, after: &mut Vec<Token>) -> Result<Token> {
        let runtime = self.runtime;
        let state = runtime.state()?;
        let note = |stream| {
            self.uses.list.iter().for_each(|uses| uses.note(stream));
            if let Some(memory) = &self.memory {
                memory.uses.note(stream);
            }
        };
        let exec = self.exec;
        runtime.run_planned(state, self.device, after, &note, |backend, stream| {
            // SAFETY: every node's spans are memory the runtime owns or borrows for as long as
            // this graph lives, checked when recorded or set, and noted on the replay's stream,
            // so a buffer's free waits for the replay; the graph's own memory is its buffer,
            // noted too, and replays using it run one after another; launch nodes carry the
            // promise their recording made (`GraphRecorder::launch`'s contract).
            unsafe { backend.graph_launch(stream, exec) }
        })
    }

    /// Bytes of the graph's own memory: its blocks laid out in one pool, allocated once (0 if
    /// no node uses a block).
    pub fn memory_bytes(&self) -> usize {
        self.blocks.pool_bytes()
    }

    /// Makes copy node `node` copy `src` into `dst` from the next replay on. Refused as
    /// [`GraphRecorder::copy`] refuses, [`Error::GraphNodeKind`] for a node of another kind,
    /// and, for blocks of the graph's own memory, as [`Graph::set_launch`] says; nothing
    /// changes on an error.
    pub fn set_copy(
        &mut self,
        node: NodeId,
        dst: impl Into<GraphSpan<'a>>,
        src: impl Into<GraphSpan<'a>>,
    ) -> Result<()> {
        let ends = [(Slot::CopyDst, dst.into()), (Slot::CopySrc, src.into())];
        let (op, operands) = copy_node(self.runtime, self.device, &self.blocks, &ends)?;
        self.set(node, op, operands)
    }

    /// Makes fill node `node` fill `dst` with `value` from the next replay on. Refused as
    /// [`GraphRecorder::fill`] refuses, [`Error::GraphNodeKind`] for a node of another kind,
    /// and, for a block of the graph's own memory, as [`Graph::set_launch`] says.
    pub fn set_fill(
        &mut self,
        node: NodeId,
        dst: impl Into<GraphSpan<'a>>,
        value: FillValue,
    ) -> Result<()> {
        let dst = [(Slot::FillDst, dst.into())];
        let (op, operands) = fill_node(self.runtime, self.device, &self.blocks, &dst, value)?;
        self.set(node, op, operands)
    }

    /// Makes launch node `node` launch `kernel` with `dims` and `args` from the next replay
    /// on. Refused as [`GraphRecorder::launch`] refuses, and [`Error::GraphNodeKind`] for a
    /// node of another kind. A node may name other blocks of the graph's own memory than it
    /// was recorded with only where the pool's layout still holds: a block no node used at
    /// instantiation has no bytes ([`Error::UnknownGraphBlock`]), and a block that shares
    /// bytes with another must stay used entirely before or after it
    /// ([`Error::GraphBlockConflict`]).
    ///
    /// # Safety
    /// As for [`GraphRecorder::launch`].
    pub unsafe fn set_launch<A: Copy + Into<GraphArg<'a>>>(
        &mut self,
        node: NodeId,
        kernel: &Kernel<'a, B>,
        dims: LaunchDims,
        args: &[A],
    ) -> Result<()> {
        let (op, operands) = launch_node(self.device, &self.blocks, kernel, dims, args)?;
        self.set(node, op, operands)
    }

    /// How many nodes the graph has.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether the graph has no node (a replay then only orders its tokens).
    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }

    /// The device the graph runs on.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    fn set(
        &mut self,
        node: NodeId,
        mut op: NodeOp<B::Kernel>,
        operands: Operands<'a>,
    ) -> Result<()> {
        self.check_epoch()?;
        let users = self
            .blocks
            .prepare(&self.graph, node, &operands.blocks, &mut op)?;
        // The description first: it refuses an unknown node or another kind before the driver.
        let before = self.graph.replace(node, op)?;
        let (backend, device, exec): (&B, _, _) = (&self.runtime.backend, self.device, self.exec);
        let changed = self
            .graph
            .node(node)
            .and_then(|op| with_device(backend, device, || backend.graph_set_node(exec, node, op)));
        match changed {
            Ok(()) => {
                // The replaced spans' buffers stay noted: harmless (the graph borrows them
                // anyway), and an update costs no pass over the whole graph.
                self.uses.add(&operands.memory);
                self.spans[node.index()] = operands.memory;
                self.blocks.commit(node, users, operands.blocks);
                Ok(())
            }
            Err(e) => {
                self.graph.replace(node, before)?;
                Err(e)
            }
        }
    }

    /// Destroys the backend's graph now, reporting a failure (dropping the graph does the
    /// same, silently). Replays already enqueued still run.
    pub fn destroy(mut self) -> Result<()> {
        self.release()
    }

    /// Destroys the backend's graph once (after a reset it is already gone), and lets go of
    /// the last replay's token it kept.
    fn release(&mut self) -> Result<()> {
        let kept = self
            .last_replay
            .get_mut()
            .take()
            .map(|token| self.runtime.release(token));
        if !core::mem::replace(&mut self.live, false) || self.check_epoch().is_err() {
            return kept.unwrap_or(Ok(()));
        }
        let (backend, device, exec): (&B, _, _) = (&self.runtime.backend, self.device, self.exec);
        with_device(backend, device, || backend.graph_destroy(exec))
    }

    fn check_epoch(&self) -> Result<()> {
        if self.runtime.health.epoch(self.device) == self.epoch {
            Ok(())
        } else {
            Err(Error::StaleAfterReset {
                device: self.device,
                what: "graph",
            })
        }
    }
}

impl<B: Backend> Drop for Graph<'_, B> {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop; `Graph::destroy` reports them.
        let _ = self.release();
    }
}

/// `token` forked into two.
fn fork_two<B: Backend>(runtime: &Runtime<B>, token: Token) -> Result<(Token, Token)> {
    match <[Token; 2]>::try_from(runtime.fork(token, 2)?) {
        Ok([first, second]) => Ok((first, second)),
        Err(_) => unreachable!("Runtime::fork gives as many branches as asked for"),
    }
}

/// The use lists a replay notes its stream on, each once (spans of pinned host memory have
/// none: their unpinning waits for the work that used them).
#[derive(Default)]
struct NotedUses<'a> {
    list: Vec<&'a UseList>,
    /// The lists' addresses, for the test of membership.
    known: hashbrown::HashSet<usize>,
}

impl<'a> NotedUses<'a> {
    /// Adds the use lists of `spans` not yet noted.
    fn add(&mut self, spans: &[Span<'a>]) {
        for uses in spans.iter().filter_map(|span| span.uses) {
            if self.known.insert(core::ptr::from_ref(uses) as usize) {
                self.list.push(uses);
            }
        }
    }
}

/// The node of a copy between `ends` (destination first), checked as [`Runtime::copy`]
/// checks one; two ends that are not bytes of one block cannot overlap.
fn copy_node<'a, B: Backend>(
    runtime: &Runtime<B>,
    device: DeviceId,
    blocks: &Blocks,
    ends: &[(Slot, GraphSpan<'a>); 2],
) -> Result<(NodeOp<B::Kernel>, Operands<'a>)> {
    let ([dst, src], operands) = Operands::of_spans(device, ends);
    blocks.check(&operands)?;
    if operands.blocks.is_empty() || operands.one_block() {
        runtime.check_copy(device, dst, src, work::CopySource::Shared)?;
    } else {
        runtime.check_copy_ends(device, dst, src)?;
    }
    if src.len == 0 {
        return Err(Error::ZeroSize {
            what: "graph copy length",
        });
    }
    let op = NodeOp::Copy {
        dst: dst.address,
        src: src.address,
        bytes: src.len,
    };
    Ok((op, operands))
}

/// The node of a fill of `dst`, checked as [`Runtime::fill_elements`] checks one.
fn fill_node<'a, B: Backend>(
    runtime: &Runtime<B>,
    device: DeviceId,
    blocks: &Blocks,
    dst: &[(Slot, GraphSpan<'a>); 1],
    value: FillValue,
) -> Result<(NodeOp<B::Kernel>, Operands<'a>)> {
    let ([dst], operands) = Operands::of_spans(device, dst);
    blocks.check(&operands)?;
    runtime.check_fill(device, dst, value)?;
    if dst.len == 0 {
        return Err(Error::ZeroSize {
            what: "graph fill length",
        });
    }
    let op = NodeOp::Fill {
        dst: dst.address,
        value,
        count: dst.len / value.width(),
    };
    Ok((op, operands))
}

/// The node of a launch, checked as [`Kernel::launch`] checks one.
fn launch_node<'a, B: Backend, A: Copy + Into<GraphArg<'a>>>(
    device: DeviceId,
    blocks: &Blocks,
    kernel: &Kernel<'_, B>,
    dims: LaunchDims,
    args: &[A],
) -> Result<(NodeOp<B::Kernel>, Operands<'a>)> {
    let args: Vec<GraphArg<'a>> = args.iter().map(|&arg| arg.into()).collect();
    let (args, operands) = Operands::of_args(device, &args);
    blocks.check(&operands)?;
    if kernel.device != device {
        return Err(Error::WrongDevice {
            expected: device,
            found: kernel.device,
        });
    }
    let values: Vec<KernelArg> = args.iter().map(Arg::value).collect();
    kernel.check_args(dims, &args, &values)?;
    let (_, handle) = kernel.prepare(dims)?;
    let op = NodeOp::Launch {
        kernel: handle,
        dims,
        args: values,
    };
    Ok((op, operands))
}
