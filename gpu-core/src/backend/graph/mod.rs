//! A graph of device work as a backend instantiates it: copies, fills and kernel launches, each
//! node after the nodes it names, so that every graph is acyclic by construction.
//!
//! The runtime records a program's operations into a [`GraphDesc`] (the dependencies are the
//! program's own: a node waits for exactly the nodes its operation was ordered after), and a
//! backend builds its driver's graph from it in one call ([`super::Backend::graph_instantiate`]:
//! CUDA's kernel, memcpy and memset nodes with the same edges; the host backend runs the nodes
//! in order on the replay's stream). A replay is one stream operation; between replays a node's
//! parameters can change in place ([`super::Backend::graph_set_node`]) as long as its kind does
//! not, which keeps the graph's shape, and so its instantiation, valid.

pub mod memory;

use alloc::vec::Vec;

use super::{FillValue, KernelArg, LaunchDims};
use crate::error::{Error, Result};

/// A node of one [`GraphDesc`], numbered in the order the nodes were added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The node's position in its graph.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// What one node does, with the addresses and values of one replay.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeOp<K> {
    /// Copy `bytes` from `src` to `dst` (memory the graph's device reaches; no overlap).
    Copy {
        /// Destination address.
        dst: usize,
        /// Source address.
        src: usize,
        /// Bytes copied (not zero).
        bytes: usize,
    },
    /// Set `count` elements at `dst` to `value` (`dst` aligned to the element's width).
    Fill {
        /// Destination address.
        dst: usize,
        /// The element written, and its width.
        value: FillValue,
        /// Elements written (not zero).
        count: usize,
    },
    /// Run `kernel` with `dims` and `args`.
    Launch {
        /// The kernel, loaded on the graph's device.
        kernel: K,
        /// The launch shape.
        dims: LaunchDims,
        /// The kernel's arguments.
        args: Vec<KernelArg>,
    },
}

impl<K> NodeOp<K> {
    /// The node's kind as errors name it: `"copy"`, `"fill"` or `"launch"`.
    pub const fn kind(&self) -> &'static str {
        match self {
            NodeOp::Copy { .. } => "copy",
            NodeOp::Fill { .. } => "fill",
            NodeOp::Launch { .. } => "launch",
        }
    }
}

/// A graph of device work on one device: nodes in the order they were added, each with the
/// earlier nodes it runs after.
///
/// # Examples
///
/// ```
/// use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};
/// use gpu_core::backend::FillValue;
///
/// let mut graph = GraphDesc::<u32>::new();
/// let fill = |dst| NodeOp::Fill { dst, value: FillValue::U8(1), count: 64 };
/// let a = graph.add(fill(0x1000), &[])?;
/// let b = graph.add(fill(0x2000), &[])?;
/// let copy = graph.add(NodeOp::Copy { dst: 0x3000, src: 0x1000, bytes: 64 }, &[a, a])?;
/// let last = graph.add(fill(0x4000), &[copy, b])?;
/// assert_eq!(graph.deps(copy), [a]); // a node named twice is one edge
/// assert!(graph.happens_before(a, last) && !graph.happens_before(a, b));
/// // Only nodes already added can be waited for, so a graph never has a cycle.
/// assert!(graph.add(fill(0x5000), &[NodeId(9)]).is_err());
/// # Ok::<(), gpu_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct GraphDesc<K> {
    nodes: Vec<NodeOp<K>>,
    /// Node `i`'s dependencies are `deps[dep_ends[i - 1]..dep_ends[i]]` (from 0 for node 0).
    dep_ends: Vec<u32>,
    deps: Vec<NodeId>,
}

impl<K> Default for GraphDesc<K> {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            dep_ends: Vec::new(),
            deps: Vec::new(),
        }
    }
}

impl<K> GraphDesc<K> {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `op`, to run after every node of `after` (nodes of this graph; one named twice is
    /// one edge). [`Error::UnknownGraphNode`] for a node not yet added, and nothing changes.
    pub fn add(&mut self, op: NodeOp<K>, after: &[NodeId]) -> Result<NodeId> {
        let nodes = self.nodes.len();
        if let Some(unknown) = after.iter().find(|node| node.index() >= nodes) {
            return Err(self.unknown(*unknown));
        }
        let id = u32::try_from(nodes)
            .ok()
            .filter(|_| self.deps.len() + after.len() <= u32::MAX as usize)
            .ok_or_else(|| Error::LimitExceeded {
                what: "nodes and edges of one graph",
                required: nodes + 1,
                limit: u32::MAX as usize,
                detail: Vec::new(),
            })?;
        let first = self.deps.len();
        for &node in after {
            if !self.deps[first..].contains(&node) {
                self.deps.push(node);
            }
        }
        self.dep_ends.push(self.deps.len() as u32);
        self.nodes.push(op);
        Ok(NodeId(id))
    }

    /// How many nodes the graph has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// What `node` does ([`Error::UnknownGraphNode`] if the graph has no such node).
    pub fn node(&self, node: NodeId) -> Result<&NodeOp<K>> {
        self.nodes
            .get(node.index())
            .ok_or_else(|| self.unknown(node))
    }

    /// The nodes `node` runs after, in the order first named (empty for an unknown node).
    pub fn deps(&self, node: NodeId) -> &[NodeId] {
        let Some(&end) = self.dep_ends.get(node.index()) else {
            return &[];
        };
        let start = match node.index() {
            0 => 0,
            i => self.dep_ends[i - 1],
        };
        &self.deps[start as usize..end as usize]
    }

    /// Every node with its operation and the nodes it runs after, in the order added (an
    /// order in which every node comes after its dependencies).
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (NodeId, &NodeOp<K>, &[NodeId])> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, op)| (NodeId(index as u32), op, self.deps(NodeId(index as u32))))
    }

    /// How many edges the graph has.
    pub fn edge_count(&self) -> usize {
        self.deps.len()
    }

    /// Makes `node` do `op` instead, keeping its edges, and returns what it did. The kind must
    /// stay the same ([`Error::GraphNodeKind`]), so that an instantiated graph of the old
    /// description can take the new one node by node; nothing changes on an error.
    pub fn replace(&mut self, node: NodeId, op: NodeOp<K>) -> Result<NodeOp<K>> {
        let unknown = self.unknown(node);
        let slot = self.nodes.get_mut(node.index()).ok_or(unknown)?;
        if core::mem::discriminant(slot) != core::mem::discriminant(&op) {
            return Err(Error::GraphNodeKind {
                node: node.0,
                recorded: slot.kind(),
                given: op.kind(),
            });
        }
        Ok(core::mem::replace(slot, op))
    }

    /// Whether `earlier` finishes before `later` starts in every replay: a path of edges leads
    /// from `earlier` to `later`.
    pub fn happens_before(&self, earlier: NodeId, later: NodeId) -> bool {
        if earlier >= later || later.index() >= self.nodes.len() {
            return false;
        }
        // Nodes only wait for earlier nodes: walk back from `later`, never below `earlier`.
        let mut seen = alloc::vec![false; later.index() - earlier.index()];
        let mut stack: Vec<NodeId> = self.deps(later).to_vec();
        while let Some(node) = stack.pop() {
            if node == earlier {
                return true;
            }
            if node > earlier
                && !core::mem::replace(&mut seen[node.index() - earlier.index()], true)
            {
                stack.extend_from_slice(self.deps(node));
            }
        }
        false
    }

    fn unknown(&self, node: NodeId) -> Error {
        Error::UnknownGraphNode {
            node: node.0,
            nodes: self.nodes.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fill(dst: usize) -> NodeOp<u8> {
        NodeOp::Fill {
            dst,
            value: FillValue::U8(0),
            count: 1,
        }
    }

    proptest! {
        /// Against a plain model: each node's set of predecessors as a bit vector, closed
        /// under the edges as nodes are added.
        #[test]
        fn happens_before_is_the_closure_of_the_edges(
            edges in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..4), 1..40)
        ) {
            let mut graph = GraphDesc::new();
            let mut before: Vec<Vec<bool>> = Vec::new();
            for (index, picks) in edges.iter().enumerate() {
                let after: Vec<NodeId> = if index == 0 {
                    Vec::new()
                } else {
                    picks.iter().map(|&p| NodeId(u32::from(p) % index as u32)).collect()
                };
                let mut reach = alloc::vec![false; edges.len()];
                for dep in &after {
                    reach[dep.index()] = true;
                    for (r, &b) in reach.iter_mut().zip(&before[dep.index()]) {
                        *r |= b;
                    }
                }
                before.push(reach);
                prop_assert_eq!(graph.add(fill(index), &after)?, NodeId(index as u32));
            }
            for (later, reach) in before.iter().enumerate() {
                for (earlier, &expected) in reach.iter().enumerate() {
                    prop_assert_eq!(
                        graph.happens_before(NodeId(earlier as u32), NodeId(later as u32)),
                        expected
                    );
                }
            }
        }
    }

    #[test]
    fn a_refused_node_or_replacement_changes_nothing() {
        let mut graph = GraphDesc::new();
        let a = graph.add(fill(1), &[]).unwrap();
        let kept = graph.clone();
        let unknown = graph.add(fill(2), &[a, NodeId(1)]).unwrap_err();
        assert_eq!(unknown, Error::UnknownGraphNode { node: 1, nodes: 1 });
        let copy = NodeOp::Copy {
            dst: 0,
            src: 8,
            bytes: 8,
        };
        let kind = graph.replace(a, copy).unwrap_err();
        assert!(matches!(
            kind,
            Error::GraphNodeKind {
                node: 0,
                recorded: "fill",
                given: "copy"
            }
        ));
        assert_eq!(
            graph.replace(NodeId(3), fill(0)).unwrap_err(),
            Error::UnknownGraphNode { node: 3, nodes: 1 }
        );
        assert_eq!(graph, kept);
        assert_eq!(graph.replace(a, fill(7)).unwrap(), fill(1));
        assert_eq!(graph.node(a).unwrap(), &fill(7));
        assert_eq!(graph.deps(NodeId(5)), []);
    }
}
