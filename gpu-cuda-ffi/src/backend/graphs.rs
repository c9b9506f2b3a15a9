//! Graphs on the driver API: a graph description as a `CUgraph` of kernel, memcpy and memset
//! nodes with its edges, instantiated once, replayed with cuGraphLaunch, updated node by node.
//!
//! A [`CudaGraph`] handle owns the `CUgraph`, its `CUgraphExec` and each node's `CUgraphNode`
//! in the description's order (the `cuGraphExec*NodeSetParams` calls name the node of the graph
//! the instantiation came from); its key lives among the backend's live graphs like a stream's
//! among the streams, so a destroyed, reset or foreign graph is [`Error::StaleHandle`] before
//! the driver. Kernel nodes take the kernel's `CUfunction` and its arguments packed as
//! `launch` packs them (the driver copies the values when it adds or updates the node); copies
//! are 1-D `CU_MEMORYTYPE_UNIFIED` copies; fills memsets of the value's element width.

use super::*;
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};
use gpu_core::backend::live::{LiveGraph, fill_element, node_arguments};

use crate::result::graph as driver_graph;

/// What the backend keeps for one graph: the driver's objects, its nodes, the modules its
/// kernels need, and the lock serialising calls on it.
pub(super) struct GraphState {
    /// Destroys the `CUgraph` as it drops: after [`CudaBackend::destroy_graph`] destroyed the
    /// instantiation, or once a device reset forgot the graph (the reset destroyed the
    /// instantiation with the context, not the graph, a host-side object).
    live: LiveGraph<sys::CUgraph, sys::CUgraphExec, sys::CUgraphNode, HandleKey<CudaModule>>,
}

// SAFETY: the driver's graph objects are opaque handles, never dereferenced by this crate; the
// driver lets any thread use them with the context current (every method makes it so), and
// `LiveGraph` serialises the calls on one graph, which the driver requires.
unsafe impl Send for GraphState {}
// SAFETY: see above.
unsafe impl Sync for GraphState {}

/// A graph instantiated on one device ([`Backend::graph_instantiate`]): its device and its key
/// in the backend's live graphs, which keep the `CUgraph`, `CUgraphExec` and node handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaGraph {
    pub(super) device: DeviceId,
    pub(super) key: HandleKey<GraphState>,
}

impl CudaGraph {
    /// The device the graph was instantiated on.
    pub fn device(&self) -> DeviceId {
        self.device
    }
}

/// One node's driver parameters.
enum NodeParams {
    Kernel(sys::CUDA_KERNEL_NODE_PARAMS),
    Copy(sys::CUDA_MEMCPY3D),
    Fill(sys::CUDA_MEMSET_NODE_PARAMS),
}

impl CudaBackend {
    /// `Backend::graph_instantiate`: cuGraphCreate, one cuGraphAdd*Node per node after its
    /// dependencies' nodes (copies and fills in the device's primary context, kernels in their
    /// module's), cuGraphInstantiateWithFlags (flags 0); a failure anywhere destroys the graph
    /// built so far. Each launch node's kernel must be live and of `device`; a library
    /// kernel's arguments must match its parameters, as for `launch`, and a module's kernel
    /// takes them as given (a graph node is the one typed way to launch one).
    pub(super) fn instantiate_graph(
        &self,
        device: DeviceId,
        desc: &GraphDesc<CudaKernel>,
    ) -> Result<CudaGraph> {
        let context = self.device(device)?.context();
        // Looked up before building (and cached from then on), so that destroying the partial
        // graph on an error path cannot fail for a missing symbol.
        self.driver.cuGraphDestroy()?;
        let _scope = self.enter(device)?;
        let driver = self.driver;
        let state = LiveGraph::build(
            desc,
            |kernel: &CudaKernel| kernel.module,
            || driver_graph::create(driver),
            |graph, op, deps| {
                self.with_node_params(device, op, |params| match params {
                    // SAFETY: (all three) a graph just created here and used by this thread
                    // only, nodes of it, and parameters built for the current context: a
                    // function of a live module of the device (held), the device's context.
                    NodeParams::Kernel(params) => unsafe {
                        driver_graph::add_kernel_node(driver, graph, deps, params)
                    },
                    // SAFETY: see above.
                    NodeParams::Copy(params) => unsafe {
                        driver_graph::add_memcpy_node(driver, graph, deps, params, context)
                    },
                    // SAFETY: see above.
                    NodeParams::Fill(params) => unsafe {
                        driver_graph::add_memset_node(driver, graph, deps, params, context)
                    },
                })
            },
            // SAFETY: the graph just built, used by this thread only; its context is current.
            |graph| unsafe { driver_graph::instantiate(driver, graph) },
            // SAFETY: the graph just built, destroyed once: on a failure to build it, or when
            // its state drops (no call holds it any more), never used again.
            move |graph| drop(unsafe { driver_graph::destroy(driver, graph) }),
        )?;
        let key = self.graphs.insert(device, GraphState { live: state });
        Ok(CudaGraph { device, key })
    }

    /// `Backend::graph_launch`: cuGraphLaunch on a live stream of the graph's device, the
    /// modules of its kernels live (held for the call).
    ///
    /// # Safety
    /// As `Backend::graph_launch`.
    pub(super) unsafe fn launch_graph(&self, stream: CudaStream, graph: CudaGraph) -> Result<()> {
        check_same_device(stream.device, graph.device)?;
        let (stream, state) = (self.streams.get(stream.key)?, self.graphs.get(graph.key)?);
        let _modules = state
            .live
            .hold_modules(|module| self.modules.get_as(module, "kernel"))?;
        let _scope = self.enter(stream.device)?;
        state.live.serialized(|| {
            // SAFETY: a live instantiation (held, its calls serialised) and a live stream of
            // its device (held), whose context is current; its kernels' modules are loaded
            // (held); the caller's promise for the memory every node reaches.
            unsafe { driver_graph::launch(self.driver, state.live.exec(), stream.raw) }
        })
    }

    /// `Backend::graph_set_node`: the cuGraphExec*NodeSetParams of the node's kind; a node the
    /// graph lacks or another kind than recorded is refused before the driver.
    pub(super) fn set_graph_node(
        &self,
        graph: CudaGraph,
        node: NodeId,
        op: &NodeOp<CudaKernel>,
    ) -> Result<()> {
        let state = self.graphs.get(graph.key)?;
        let handle = state.live.node_for(node, op)?;
        let context = self.device(graph.device)?.context();
        let _scope = self.enter(graph.device)?;
        let (driver, exec) = (self.driver, state.live.exec());
        self.with_node_params(graph.device, op, |params| {
            state.live.serialized(|| match params {
                // SAFETY: (all three) a live instantiation (held, its calls serialised), a node
                // of its graph of the same kind, and parameters built for the current context.
                NodeParams::Kernel(params) => unsafe {
                    driver_graph::exec_set_kernel_node(driver, exec, handle, params)
                },
                // SAFETY: see above.
                NodeParams::Copy(params) => unsafe {
                    driver_graph::exec_set_memcpy_node(driver, exec, handle, params, context)
                },
                // SAFETY: see above.
                NodeParams::Fill(params) => unsafe {
                    driver_graph::exec_set_memset_node(driver, exec, handle, params, context)
                },
            })
        })
    }

    /// `Backend::graph_destroy`: once no call of another thread uses the graph, cuGraphExecDestroy
    /// (its refusal is returned), then cuGraphDestroy as the state drops. The handle is stale
    /// from the moment the call begins, also if the driver refuses.
    pub(super) fn destroy_graph(&self, graph: CudaGraph) -> Result<()> {
        // Looked up first, so that a missing symbol leaves the graph live.
        self.driver.cuGraphExecDestroy()?;
        self.driver.cuGraphDestroy()?;
        let (device, state) = self.graphs.remove(graph.key, std::thread::yield_now)?;
        let _scope = self.enter(device)?;
        // SAFETY: a live instantiation, just taken out of the live graphs after the last call
        // using it returned, so nothing uses it again.
        unsafe { driver_graph::exec_destroy(self.driver, state.live.exec()) }
    }

    /// Builds `op`'s driver parameters for a graph of `device` and passes them to `call`: a
    /// launch node's kernel must be of `device` ([`Error::WrongDevice`]) and live (held for
    /// the call), and a library kernel's arguments match its parameters
    /// ([`Error::KernelArgumentMismatch`]); a module's kernel takes its arguments as given
    /// (`node_arguments`).
    fn with_node_params<R>(
        &self,
        device: DeviceId,
        op: &NodeOp<CudaKernel>,
        call: impl FnOnce(&NodeParams) -> Result<R>,
    ) -> Result<R> {
        match op {
            NodeOp::Copy { dst, src, bytes } => call(&NodeParams::Copy(driver_graph::copy_params(
                *dst as sys::CUdeviceptr,
                *src as sys::CUdeviceptr,
                *bytes,
            ))),
            NodeOp::Fill { dst, value, count } => {
                let (value, width) = fill_element(*value);
                call(&NodeParams::Fill(driver_graph::fill_params(
                    *dst as sys::CUdeviceptr,
                    value,
                    width,
                    *count,
                )))
            }
            NodeOp::Launch { kernel, dims, args } => {
                check_same_device(device, kernel.device)?;
                let _module = self.live_kernel(*kernel)?;
                let mut values = node_arguments(kernel.library_index, args)?;
                let mut pointers = values.pointers();
                let shape = LaunchShape {
                    grid: dims.grid,
                    block: dims.block,
                    shared_bytes: dims.dynamic_workgroup_bytes,
                };
                call(&NodeParams::Kernel(driver_graph::kernel_params(
                    kernel.function,
                    shape,
                    pointers.as_mut_ptr(),
                )))
            }
        }
    }
}
