//! The graph policies the GPU backends share: a driver graph built node by node from a
//! [`GraphDesc`] with everything undone on a failure, and what an instantiated graph keeps.
//!
//! CUDA and HIP build a graph the same way: create an empty graph, add each node after the
//! driver nodes of its dependencies, instantiate, keep the graph (its nodes name what a later
//! in-place update changes) beside the instantiation. [`LiveGraph::build`] is that sequence,
//! the backend supplying each driver call; [`LiveGraph`] is what a backend's graph handle keeps:
//! the driver's objects, each node's driver handle and kind, the modules its launch nodes'
//! kernels belong to (checked live at each replay), and a lock, because the drivers' graph
//! objects are not internally synchronised (CUDA's programming guide: calls on one graph or one
//! instantiation "must be serialized externally").

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use spin::Mutex;

use crate::backend::FillValue;
use crate::backend::graph::{GraphDesc, NodeId, NodeOp};
use crate::error::{Error, Result};

/// A graph as a backend instantiated it: the driver's graph `G` and instantiation `E`, each
/// node's driver handle `N` in the description's order with its kind, and the distinct
/// modules `M` of its launch nodes' kernels. Dropping it destroys the driver's graph (a
/// host-side object, which a device reset does not take with the instantiation); the
/// instantiation is the backend's to destroy first, where it still exists.
pub struct LiveGraph<G: Copy, E, N, M> {
    graph: G,
    exec: E,
    nodes: Vec<(N, &'static str)>,
    modules: Vec<M>,
    /// Held for every driver call on the graph or its instantiation.
    calls: Mutex<()>,
    /// Destroys the driver's graph, once, when this drops.
    destroy: Box<dyn Fn(G) + Send + Sync>,
}

impl<G: Copy + fmt::Debug, E: fmt::Debug, N, M: fmt::Debug> fmt::Debug for LiveGraph<G, E, N, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveGraph")
            .field("graph", &self.graph)
            .field("exec", &self.exec)
            .field("nodes", &self.nodes.len())
            .field("modules", &self.modules)
            .finish_non_exhaustive()
    }
}

impl<G: Copy, E, N, M> Drop for LiveGraph<G, E, N, M> {
    fn drop(&mut self) {
        (self.destroy)(self.graph);
    }
}

impl<G: Copy, E: Copy, N: Copy, M: Copy + PartialEq> LiveGraph<G, E, N, M> {
    /// Builds the driver's graph of `desc` and instantiates it: `create` makes an empty graph,
    /// `add` adds one node after the driver nodes of its dependencies (in the description's
    /// order, so they exist), `instantiate` makes the executable graph, and `module_of` names
    /// a launch node's kernel's module. If any step fails, `destroy` destroys the graph (and
    /// with it the nodes added) and the step's error is returned: nothing stays behind; else
    /// it destroys the graph when the result drops. Look up `destroy`'s driver entry point
    /// before calling this, so that it cannot fail.
    pub fn build<K>(
        desc: &GraphDesc<K>,
        module_of: impl Fn(&K) -> M,
        create: impl FnOnce() -> Result<G>,
        mut add: impl FnMut(G, &NodeOp<K>, &[N]) -> Result<N>,
        instantiate: impl FnOnce(G) -> Result<E>,
        destroy: impl Fn(G) + Send + Sync + 'static,
    ) -> Result<Self> {
        let graph = create()?;
        let mut nodes: Vec<(N, &'static str)> = Vec::with_capacity(desc.len());
        let mut modules = Vec::new();
        let mut deps = Vec::new();
        let built = (|| {
            for (_, op, after) in desc.nodes() {
                deps.clear();
                deps.extend(after.iter().map(|dep| nodes[dep.index()].0));
                if let NodeOp::Launch { kernel, .. } = op {
                    let module = module_of(kernel);
                    if !modules.contains(&module) {
                        modules.push(module);
                    }
                }
                nodes.push((add(graph, op, &deps)?, op.kind()));
            }
            instantiate(graph)
        })();
        match built {
            Ok(exec) => Ok(Self {
                graph,
                exec,
                nodes,
                modules,
                calls: Mutex::new(()),
                destroy: Box::new(destroy),
            }),
            Err(error) => {
                destroy(graph);
                Err(error)
            }
        }
    }

    /// The driver's graph (what the nodes belong to).
    pub fn graph(&self) -> G {
        self.graph
    }

    /// The driver's instantiation (what a replay launches).
    pub fn exec(&self) -> E {
        self.exec
    }

    /// How many nodes the graph has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The distinct modules of the launch nodes' kernels, in the order first used.
    pub fn modules(&self) -> &[M] {
        &self.modules
    }

    /// Holds every module of the launch nodes' kernels for the length of a call (`hold` takes
    /// one: a live-handle guard), so that no unload frees a kernel a replay is launching; the
    /// first module that cannot be held is the call's error.
    pub fn hold_modules<H>(&self, hold: impl FnMut(M) -> Result<H>) -> Result<Vec<H>> {
        self.modules.iter().copied().map(hold).collect()
    }

    /// The driver handle of `node`, to be given `op`: [`Error::UnknownGraphNode`] for a node
    /// the graph does not have, [`Error::GraphNodeKind`] for an operation of another kind than
    /// the node was built with (the driver's in-place updates keep a node's kind).
    pub fn node_for<K>(&self, node: NodeId, op: &NodeOp<K>) -> Result<N> {
        let &(handle, recorded) = self
            .nodes
            .get(node.index())
            .ok_or(Error::UnknownGraphNode {
                node: node.0,
                nodes: self.nodes.len(),
            })?;
        if recorded != op.kind() {
            return Err(Error::GraphNodeKind {
                node: node.0,
                recorded,
                given: op.kind(),
            });
        }
        Ok(handle)
    }

    /// Runs `call` (driver calls on the graph or its instantiation) with the graph's lock held,
    /// so that no two threads reach the driver's graph objects at once.
    pub fn serialized<R>(&self, call: impl FnOnce() -> R) -> R {
        let _held = self.calls.lock();
        call()
    }
}

/// A fill's element as the drivers' memset nodes take it: the value widened to 32 bits, and the
/// element's width in bytes (1, 2 or 4).
pub fn fill_element(value: FillValue) -> (u32, u32) {
    match value {
        FillValue::U8(v) => (u32::from(v), 1),
        FillValue::U16(v) => (u32::from(v), 2),
        FillValue::U32(v) => (v, 4),
    }
}
