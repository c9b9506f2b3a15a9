//! Graphs on the HIP runtime: a graph description as a `hipGraph_t` of kernel, 1-D memcpy and
//! memset nodes with its edges, instantiated once, replayed with hipGraphLaunch, updated in place.
//!
//! A [`HipGraph`] handle owns the `hipGraph_t`, its `hipGraphExec_t` and each node's
//! `hipGraphNode_t` in the description's order, its key among the backend's live graphs (a
//! destroyed, reset or foreign graph is [`Error::StaleHandle`] before HIP). Kernel nodes take
//! the module's `hipFunction_t` and its arguments packed as `launch` packs them; copies are
//! hipGraphAddMemcpyNode1D with `hipMemcpyDefault`; fills memsets of the value's element width.
//!
//! [`Error::StaleHandle`]: gpu_core::Error::StaleHandle

use core::ffi::c_void;

use gpu_core::backend::check_same_device;
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};
use gpu_core::backend::live::{HandleKey, LiveGraph, fill_element, node_arguments};
use gpu_core::{DeviceId, Result};

use super::{HipBackend, HipKernel, HipModule, HipStream};
use crate::result::graph as hip_graph;
use crate::result::module::LaunchShape;
use crate::sys;

/// HIP's graph objects as the shared policy keeps them.
type HipLiveGraph =
    LiveGraph<sys::hipGraph_t, sys::hipGraphExec_t, sys::hipGraphNode_t, HandleKey<HipModule>>;

/// What the backend keeps for one graph: HIP's objects, its nodes, the modules its kernels
/// need, and the lock serialising calls on it.
pub(super) struct GraphState {
    /// Destroys the `hipGraph_t` as it drops: after [`HipBackend::destroy_graph`] destroyed
    /// the instantiation, or once a device reset forgot the graph (the reset destroyed the
    /// instantiation with the device's state, not the graph, a host object).
    pub(super) live: HipLiveGraph,
}

// SAFETY: HIP's graph objects are opaque handles, never dereferenced by this crate; HIP lets
// any thread use them with their device current (every method makes it so), and `LiveGraph`
// serialises the calls on one graph, as CUDA's graphs (HIP's model) require.
unsafe impl Send for GraphState {}
// SAFETY: see above.
unsafe impl Sync for GraphState {}

/// A graph instantiated on one device (`Backend::graph_instantiate`): its device and its key
/// in the backend's live graphs, which keep the `hipGraph_t`, `hipGraphExec_t` and node
/// handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HipGraph {
    pub(super) device: DeviceId,
    pub(super) key: HandleKey<GraphState>,
}

impl HipGraph {
    /// The device the graph was instantiated on.
    pub fn device(&self) -> DeviceId {
        self.device
    }
}

/// One node's HIP parameters.
enum NodeParams {
    Kernel(sys::hipKernelNodeParams),
    Copy {
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    },
    Fill(sys::hipMemsetParams),
}

impl HipBackend {
    /// `Backend::graph_instantiate`: hipGraphCreate, one hipGraphAdd*Node per node after its
    /// dependencies' nodes, hipGraphInstantiateWithFlags (flags 0), with the device current; a
    /// failure anywhere destroys the graph built so far.
    pub(super) fn instantiate_graph(
        &self,
        device: DeviceId,
        desc: &GraphDesc<HipKernel>,
    ) -> Result<HipGraph> {
        self.device(device)?;
        // Looked up before building (and cached from then on), so that destroying the partial
        // graph on an error path cannot fail for a missing symbol.
        self.hip.hipGraphDestroy()?;
        let _scope = self.enter(device)?;
        let hip = self.hip;
        let state = LiveGraph::build(
            desc,
            |kernel: &HipKernel| kernel.module,
            || hip_graph::create(hip),
            |graph, op, deps| {
                self.with_node_params(device, op, |params| match params {
                    // SAFETY: (all three) a graph just created here and used by this thread
                    // only, nodes of it, and parameters of the current device: a function of a
                    // live module of the device (held).
                    NodeParams::Kernel(params) => unsafe {
                        hip_graph::add_kernel_node(hip, graph, deps, params)
                    },
                    // SAFETY: see above.
                    NodeParams::Copy { dst, src, bytes } => unsafe {
                        hip_graph::add_memcpy_node(hip, graph, deps, *dst, *src, *bytes)
                    },
                    // SAFETY: see above.
                    NodeParams::Fill(params) => unsafe {
                        hip_graph::add_memset_node(hip, graph, deps, params)
                    },
                })
            },
            // SAFETY: the graph just built, used by this thread only; its device is current.
            |graph| unsafe { hip_graph::instantiate(hip, graph) },
            // SAFETY: the graph just built, destroyed once: on a failure to build it, or when
            // its state drops (no call holds it any more), never used again.
            move |graph| drop(unsafe { hip_graph::destroy(hip, graph) }),
        )?;
        let key = self.graphs.insert(device, GraphState { live: state });
        Ok(HipGraph { device, key })
    }

    /// `Backend::graph_launch`: hipGraphLaunch on a live stream of the graph's device, the
    /// modules of its kernels live (held for the call).
    ///
    /// # Safety
    /// As `Backend::graph_launch`.
    pub(super) unsafe fn launch_graph(&self, stream: HipStream, graph: HipGraph) -> Result<()> {
        check_same_device(stream.device, graph.device)?;
        let (stream, state) = (self.streams.get(stream.key)?, self.graphs.get(graph.key)?);
        let _modules = state
            .live
            .hold_modules(|module| self.modules.get_as(module, "kernel"))?;
        let _scope = self.enter(stream.device)?;
        state.live.serialized(|| {
            // SAFETY: a live instantiation (held, its calls serialised) and a live stream of
            // its device (held), which is current; its kernels' modules are loaded (held); the
            // caller's promise for the memory every node reaches.
            unsafe { hip_graph::launch(self.hip, state.live.exec(), stream.raw) }
        })
    }

    /// `Backend::graph_set_node`: the hipGraphExec*NodeSetParams of the node's kind; a node
    /// the graph lacks or another kind than recorded is refused before HIP.
    pub(super) fn set_graph_node(
        &self,
        graph: HipGraph,
        node: NodeId,
        op: &NodeOp<HipKernel>,
    ) -> Result<()> {
        let state = self.graphs.get(graph.key)?;
        let handle = state.live.node_for(node, op)?;
        let _scope = self.enter(graph.device)?;
        let (hip, exec) = (self.hip, state.live.exec());
        self.with_node_params(graph.device, op, |params| {
            state.live.serialized(|| match params {
                // SAFETY: (all three) a live instantiation (held, its calls serialised), a node
                // of its graph of the same kind, and parameters of the current device.
                NodeParams::Kernel(params) => unsafe {
                    hip_graph::exec_set_kernel_node(hip, exec, handle, params)
                },
                // SAFETY: see above.
                NodeParams::Copy { dst, src, bytes } => unsafe {
                    hip_graph::exec_set_memcpy_node(hip, exec, handle, *dst, *src, *bytes)
                },
                // SAFETY: see above.
                NodeParams::Fill(params) => unsafe {
                    hip_graph::exec_set_memset_node(hip, exec, handle, params)
                },
            })
        })
    }

    /// `Backend::graph_destroy`: once no call of another thread uses the graph,
    /// hipGraphExecDestroy (its refusal is returned), then hipGraphDestroy as the state drops.
    /// The handle is stale from the moment the call begins, also if HIP refuses.
    pub(super) fn destroy_graph(&self, graph: HipGraph) -> Result<()> {
        // Looked up first, so that a missing symbol leaves the graph live.
        self.hip.hipGraphExecDestroy()?;
        self.hip.hipGraphDestroy()?;
        let (device, state) = self.graphs.remove(graph.key, std::thread::yield_now)?;
        let _scope = self.enter(device)?;
        // SAFETY: a live instantiation, just taken out of the live graphs after the last call
        // using it returned, so nothing uses it again.
        unsafe { hip_graph::exec_destroy(self.hip, state.live.exec()) }
    }

    /// Builds `op`'s HIP parameters for a graph of `device` and passes them to `call`: a
    /// launch node's kernel must be of `device` and live (held for the call), and a library
    /// kernel's arguments match its parameters; a module's kernel takes its arguments as given
    /// (`node_arguments`).
    fn with_node_params<R>(
        &self,
        device: DeviceId,
        op: &NodeOp<HipKernel>,
        call: impl FnOnce(&NodeParams) -> Result<R>,
    ) -> Result<R> {
        match op {
            NodeOp::Copy { dst, src, bytes } => call(&NodeParams::Copy {
                dst: *dst as *mut c_void,
                src: *src as *const c_void,
                bytes: *bytes,
            }),
            NodeOp::Fill { dst, value, count } => {
                let (value, width) = fill_element(*value);
                call(&NodeParams::Fill(hip_graph::fill_params(
                    *dst as *mut c_void,
                    value,
                    width,
                    *count,
                )))
            }
            NodeOp::Launch { kernel, dims, args } => {
                check_same_device(device, kernel.device)?;
                let _module = self.modules.get_as(kernel.module, "kernel")?;
                let mut values = node_arguments(kernel.library_index, args)?;
                let mut pointers = values.pointers();
                let shape = LaunchShape {
                    grid: dims.grid,
                    block: dims.block,
                    shared_bytes: dims.dynamic_workgroup_bytes,
                };
                call(&NodeParams::Kernel(hip_graph::kernel_params(
                    kernel.function,
                    shape,
                    pointers.as_mut_ptr(),
                )))
            }
        }
    }
}
