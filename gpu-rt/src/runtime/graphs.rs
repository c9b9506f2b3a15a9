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
}

impl<'a, B: Backend> GraphRecorder<'a, B> {
    /// Adds a copy of `src` into `dst` (equal lengths, memory of the graph's device or memory
    /// it reaches), after `after`. Refused as [`Runtime::copy`] refuses.
    pub fn copy(&mut self, dst: Span<'a>, src: Span<'a>, after: &[NodeId]) -> Result<NodeId> {
        let op = copy_node(self.runtime, self.device, dst, src)?;
        self.add(op, alloc::vec![dst, src], after)
    }

    /// Adds setting every element of `dst` to `value`, after `after`. Refused as
    /// [`Runtime::fill_elements`] refuses.
    pub fn fill(&mut self, dst: Span<'a>, value: FillValue, after: &[NodeId]) -> Result<NodeId> {
        let op = fill_node(self.runtime, self.device, dst, value)?;
        self.add(op, alloc::vec![dst], after)
    }

    /// Adds a launch of `kernel` (of the graph's device) with `dims` and `args`, after
    /// `after`. Refused as [`Kernel::launch`] refuses a library kernel's; a kernel of the
    /// program's own module ([`Runtime::module_kernel`]) takes its arguments as given, each
    /// passed as its type (on a stream such a kernel launches through
    /// [`Kernel::launch_packed`]).
    ///
    /// # Safety
    /// As for [`Kernel::launch`], for every replay: the kernel stays inside its spans (a
    /// library kernel does by construction: the runtime checks its reach); a module's kernel's
    /// parameters have the arguments' types, in order (a span is a device address).
    pub unsafe fn launch(
        &mut self,
        kernel: &Kernel<'a, B>,
        dims: LaunchDims,
        args: &[Arg<'a>],
        after: &[NodeId],
    ) -> Result<NodeId> {
        let op = launch_node(self.device, kernel, dims, args)?;
        self.add(op, args.iter().filter_map(Arg::span).collect(), after)
    }

    /// How many nodes the graph has so far.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether no node was added yet.
    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }

    /// Has the backend build and instantiate the graph, ready to replay. A backend without
    /// graphs says [`Error::Unsupported`].
    pub fn instantiate(self) -> Result<Graph<'a, B>> {
        let (runtime, device) = (self.runtime, self.device);
        let epoch = runtime.health.epoch(device);
        let backend: &B = &runtime.backend;
        let exec = with_device(backend, device, || {
            backend.graph_instantiate(device, &self.graph)
        })?;
        Ok(Graph {
            runtime,
            device,
            epoch,
            graph: self.graph,
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
        spans: Vec<Span<'a>>,
        after: &[NodeId],
    ) -> Result<NodeId> {
        let node = self.graph.add(op, after)?;
        self.spans.push(spans);
        Ok(node)
    }
}

/// An instantiated graph ([`GraphRecorder::instantiate`]): replayed by [`Graph::launch`],
/// changed node by node between replays, destroyed when dropped (replays already enqueued
/// still run). It borrows every span it was given, so their buffers outlive it.
pub struct Graph<'a, B: Backend> {
    runtime: &'a Runtime<B>,
    device: DeviceId,
    /// The device's epoch at instantiation: a reset forgets the backend's graph.
    epoch: u32,
    graph: GraphDesc<B::Kernel>,
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
    /// the token is complete when every node is.
    pub fn launch(&self, after: &mut Vec<Token>) -> Result<Token> {
        let runtime = self.runtime;
        self.check_epoch()?;
        let state = runtime.state()?;
        let note = |stream| self.uses.list.iter().for_each(|uses| uses.note(stream));
        let exec = self.exec;
        runtime.run_planned(state, self.device, after, &note, |backend, stream| {
            // SAFETY: every node's spans are memory the runtime owns or borrows for as long as
            // this graph lives, checked when recorded or set, and noted on the replay's stream,
            // so a buffer's free waits for the replay; launch nodes carry the promise their
            // recording made (`GraphRecorder::launch`'s contract).
            unsafe { backend.graph_launch(stream, exec) }
        })
    }

    /// Makes copy node `node` copy `src` into `dst` from the next replay on. Refused as
    /// [`GraphRecorder::copy`] refuses, and [`Error::GraphNodeKind`] for a node of another
    /// kind; nothing changes on an error.
    pub fn set_copy(&mut self, node: NodeId, dst: Span<'a>, src: Span<'a>) -> Result<()> {
        let op = copy_node(self.runtime, self.device, dst, src)?;
        self.set(node, op, alloc::vec![dst, src])
    }

    /// Makes fill node `node` fill `dst` with `value` from the next replay on. Refused as
    /// [`GraphRecorder::fill`] refuses, and [`Error::GraphNodeKind`] for a node of another kind.
    pub fn set_fill(&mut self, node: NodeId, dst: Span<'a>, value: FillValue) -> Result<()> {
        let op = fill_node(self.runtime, self.device, dst, value)?;
        self.set(node, op, alloc::vec![dst])
    }

    /// Makes launch node `node` launch `kernel` with `dims` and `args` from the next replay
    /// on. Refused as [`GraphRecorder::launch`] refuses, and [`Error::GraphNodeKind`] for a
    /// node of another kind.
    ///
    /// # Safety
    /// As for [`GraphRecorder::launch`].
    pub unsafe fn set_launch(
        &mut self,
        node: NodeId,
        kernel: &Kernel<'a, B>,
        dims: LaunchDims,
        args: &[Arg<'a>],
    ) -> Result<()> {
        let op = launch_node(self.device, kernel, dims, args)?;
        self.set(node, op, args.iter().filter_map(Arg::span).collect())
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

    fn set(&mut self, node: NodeId, op: NodeOp<B::Kernel>, spans: Vec<Span<'a>>) -> Result<()> {
        self.check_epoch()?;
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
                self.uses.add(&spans);
                self.spans[node.index()] = spans;
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

    /// Destroys the backend's graph once (after a reset it is already gone).
    fn release(&mut self) -> Result<()> {
        if !core::mem::replace(&mut self.live, false) || self.check_epoch().is_err() {
            return Ok(());
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

/// The node of a copy, checked as [`Runtime::copy`] checks one.
fn copy_node<B: Backend>(
    runtime: &Runtime<B>,
    device: DeviceId,
    dst: Span<'_>,
    src: Span<'_>,
) -> Result<NodeOp<B::Kernel>> {
    runtime.check_copy(device, dst, src, work::CopySource::Shared)?;
    if src.len == 0 {
        return Err(Error::ZeroSize {
            what: "graph copy length",
        });
    }
    Ok(NodeOp::Copy {
        dst: dst.address,
        src: src.address,
        bytes: src.len,
    })
}

/// The node of a fill, checked as [`Runtime::fill_elements`] checks one.
fn fill_node<B: Backend>(
    runtime: &Runtime<B>,
    device: DeviceId,
    dst: Span<'_>,
    value: FillValue,
) -> Result<NodeOp<B::Kernel>> {
    runtime.check_fill(device, dst, value)?;
    if dst.len == 0 {
        return Err(Error::ZeroSize {
            what: "graph fill length",
        });
    }
    Ok(NodeOp::Fill {
        dst: dst.address,
        value,
        count: dst.len / value.width(),
    })
}

/// The node of a launch, checked as [`Kernel::launch`] checks one.
fn launch_node<B: Backend>(
    device: DeviceId,
    kernel: &Kernel<'_, B>,
    dims: LaunchDims,
    args: &[Arg<'_>],
) -> Result<NodeOp<B::Kernel>> {
    if kernel.device != device {
        return Err(Error::WrongDevice {
            expected: device,
            found: kernel.device,
        });
    }
    let values: Vec<KernelArg> = args.iter().map(Arg::value).collect();
    kernel.check_args(dims, args, &values)?;
    let mut state = kernel.prepare(dims)?;
    let handle = state.kernel_for(
        &kernel.runtime.backend,
        device,
        kernel.index,
        dims.dynamic_workgroup_bytes,
    )?;
    Ok(NodeOp::Launch {
        kernel: handle,
        dims,
        args: values,
    })
}
