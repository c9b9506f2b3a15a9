//! The host backend's graphs: a graph is its description, kept per handle; a replay checks
//! every node as the matching stream call would, then queues them all, in order, at once.

use super::*;
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};

/// An instantiated graph: its device and its nodes as of the last update.
pub(super) struct GraphSlot {
    device: DeviceId,
    graph: GraphDesc<HostKernel>,
}

impl HostBackend {
    /// `graph_instantiate`: every launch node's kernel is loaded on `device`.
    pub(super) fn instantiate_graph(
        &self,
        device: DeviceId,
        graph: &GraphDesc<HostKernel>,
    ) -> Result<HostGraph> {
        let call = self.calls.enter(CallKind::GraphInstantiate)?;
        check_device(self, device)?;
        self.usable(device, call)?;
        for (_, op, _) in graph.nodes() {
            self.check_node(device, op, call)?;
        }
        let handle = HostGraph::fresh();
        let slot = GraphSlot {
            device,
            graph: graph.clone(),
        };
        lock(&self.graphs).insert(handle, slot);
        Ok(handle)
    }

    /// `graph_launch`: each node checked as its own call would be (nothing is queued if one
    /// is refused), then all queued in the graph's order, which puts every node after the
    /// nodes it names.
    pub(super) fn launch_graph(&self, stream: HostStream, graph: HostGraph) -> Result<()> {
        let call = self.calls.enter(CallKind::GraphLaunch)?;
        let shared = self.current_stream(stream, call)?;
        let items = {
            let graphs = lock(&self.graphs);
            let slot = graphs
                .get(&graph)
                .filter(|slot| slot.device == shared.device)
                .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))?;
            slot.graph
                .nodes()
                .map(|(_, op, _)| self.prepare_node(shared.device, op, call))
                .collect::<Result<Vec<WorkItem>>>()?
        };
        shared.wait_for_room(self.launch_queue_depth);
        shared.enqueue_items(items);
        Ok(())
    }

    /// `graph_set_node`.
    pub(super) fn set_graph_node(
        &self,
        graph: HostGraph,
        node: NodeId,
        op: &NodeOp<HostKernel>,
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::GraphSetNode)?;
        let mut graphs = lock(&self.graphs);
        let slot = graphs
            .get_mut(&graph)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))?;
        self.current.require(slot.device, call)?;
        self.check_node(slot.device, op, call)?;
        slot.graph
            .replace(node, op.clone())
            .map_err(|_| HostErrorCode::InvalidValue.error(call))?;
        Ok(())
    }

    /// `graph_destroy`: replays already queued keep their items.
    pub(super) fn destroy_graph(&self, graph: HostGraph) -> Result<()> {
        let call = self.calls.enter(CallKind::GraphDestroy)?;
        let mut graphs = lock(&self.graphs);
        let slot = graphs
            .get(&graph)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))?;
        self.current.require(slot.device, call)?;
        graphs.remove(&graph);
        Ok(())
    }

    /// Forgets the graphs of a device being reset.
    pub(super) fn forget_graphs(&self, device: DeviceId) {
        lock(&self.graphs).retain(|_, slot| slot.device != device);
    }

    /// A launch node's kernel must be loaded on the graph's device (what instantiation can
    /// check; the rest depends on memory at each replay).
    fn check_node(
        &self,
        device: DeviceId,
        op: &NodeOp<HostKernel>,
        call: &'static str,
    ) -> Result<()> {
        if let NodeOp::Launch { kernel, .. } = op
            && lock(&self.kernels).get(*kernel, call)?.device != device
        {
            return Err(HostErrorCode::InvalidHandle.error(call));
        }
        Ok(())
    }

    fn prepare_node(
        &self,
        device: DeviceId,
        op: &NodeOp<HostKernel>,
        call: &'static str,
    ) -> Result<WorkItem> {
        match op {
            NodeOp::Copy { dst, src, bytes } => {
                self.prepare_plain_copy(device, [*dst, *src, *bytes], false, call)
            }
            NodeOp::Fill { dst, value, count } => self.prepare_fill(*dst, *value, *count, call),
            NodeOp::Launch { kernel, dims, args } => {
                self.prepare_launch(device, *kernel, *dims, args, call)
            }
        }
    }
}
