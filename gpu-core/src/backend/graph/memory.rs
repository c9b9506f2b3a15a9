//! A graph's own memory: where each block lies in the one pool the graph owns, so that two
//! blocks share bytes only when every use of one finishes before any use of the other begins.
//!
//! A block lives from its graph's first node that uses it to the last, in every replay: it is
//! allocated and freed in stream order inside the graph, with no driver call, as a compiler
//! assigns buffers. [`place_blocks`] lays the blocks out (first fit, in the order they were
//! made), and [`check_placement`] tells whether a placement still holds after nodes changed
//! the blocks they use. Replays of one graph run one after another, so a block's bytes are
//! never in use by two replays at once.

use alloc::vec::Vec;

use super::{GraphDesc, NodeId};
use crate::error::{Error, Result};

/// Where a graph's blocks lie in its pool ([`place_blocks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Each block's offset in the pool, in the order the blocks were given (0 for a block no
    /// node uses: it takes no bytes).
    pub offsets: Vec<usize>,
    /// The pool's size: the end of the block that ends last (0 when no node uses a block).
    pub bytes: usize,
}

/// One block to place: its size and the nodes that use it (in any order, repeats allowed).
#[derive(Clone, Copy, Debug)]
pub struct BlockUses<'u> {
    /// The block's size in bytes.
    pub bytes: usize,
    /// The nodes that read or write it.
    pub users: &'u [NodeId],
}

/// Lays out `blocks` in one pool: each at the lowest offset, a multiple of `align` (a power of
/// two), that shares no byte with a block placed before it unless every use of one of the two
/// happens before every use of the other in `graph`. [`Error::LimitExceeded`] if the pool's
/// size would not fit an address; [`Error::UnknownGraphNode`] for a user `graph` lacks.
///
/// # Examples
///
/// ```
/// use gpu_core::backend::FillValue;
/// use gpu_core::backend::graph::memory::{BlockUses, place_blocks};
/// use gpu_core::backend::graph::{GraphDesc, NodeOp};
///
/// let fill = |dst| NodeOp::<u32>::Fill { dst, value: FillValue::U8(0), count: 1 };
/// let mut graph = GraphDesc::new();
/// let first = graph.add(fill(0), &[])?;
/// let second = graph.add(fill(0), &[first])?;
/// let beside = graph.add(fill(0), &[])?;
/// let blocks = [
///     BlockUses { bytes: 1000, users: &[first] },
///     BlockUses { bytes: 500, users: &[second] }, // after every use of the first: reuses it
///     BlockUses { bytes: 100, users: &[beside] }, // unordered with both: bytes of its own
/// ];
/// let placement = place_blocks(&graph, &blocks, 256)?;
/// assert_eq!(placement.offsets, [0, 0, 1024]);
/// assert_eq!(placement.bytes, 1024 + 100);
/// # Ok::<(), gpu_core::Error>(())
/// ```
pub fn place_blocks<K>(
    graph: &GraphDesc<K>,
    blocks: &[BlockUses<'_>],
    align: usize,
) -> Result<Placement> {
    let order = UseOrder::new(graph, blocks)?;
    let too_large = |required| Error::LimitExceeded {
        what: "bytes of a graph's memory",
        required,
        limit: isize::MAX as usize,
        detail: Vec::new(),
    };
    let mut offsets = Vec::with_capacity(blocks.len());
    // (start, end) of every placed block, by block.
    let mut placed: Vec<Option<(usize, usize)>> = Vec::with_capacity(blocks.len());
    let mut pool_bytes = 0usize;
    for (index, block) in blocks.iter().enumerate() {
        if block.users.is_empty() {
            offsets.push(0);
            placed.push(None);
            continue;
        }
        let mut taken: Vec<(usize, usize)> = placed
            .iter()
            .enumerate()
            .filter_map(|(other, range)| range.filter(|_| order.conflict(index, other)))
            .collect();
        taken.sort_unstable();
        let mut offset = 0usize;
        for &(start, end) in &taken {
            if offset
                .checked_add(block.bytes)
                .is_some_and(|end| end <= start)
            {
                break;
            }
            offset = offset.max(end.checked_next_multiple_of(align).ok_or(too_large(end))?);
        }
        let end = offset
            .checked_add(block.bytes)
            .filter(|&end| end <= isize::MAX as usize)
            .ok_or(too_large(usize::MAX))?;
        offsets.push(offset);
        placed.push(Some((offset, end)));
        pool_bytes = pool_bytes.max(end);
    }
    Ok(Placement {
        offsets,
        bytes: pool_bytes,
    })
}

/// Checks that `placement` (of blocks of these sizes) still holds for the blocks' users now:
/// every two blocks that share a byte are used one entirely after the other. The first pair
/// that is not is [`Error::GraphBlockConflict`] (the later block of the two, and the other).
pub fn check_placement<K>(
    graph: &GraphDesc<K>,
    blocks: &[BlockUses<'_>],
    placement: &Placement,
) -> Result<()> {
    let order = UseOrder::new(graph, blocks)?;
    let range = |index: usize| {
        let start = placement.offsets.get(index).copied().unwrap_or(0);
        (start, start.saturating_add(blocks[index].bytes))
    };
    for later in 0..blocks.len() {
        let (start, end) = range(later);
        for earlier in 0..later {
            let (other_start, other_end) = range(earlier);
            let share = start < other_end && other_start < end;
            if share && order.conflict(later, earlier) {
                return Err(Error::GraphBlockConflict {
                    block: later as u32,
                    other: earlier as u32,
                });
            }
        }
    }
    Ok(())
}

/// Which blocks' uses are ordered: for each node that uses a block, the set of nodes that
/// happen before it (one bit per node), found once.
struct UseOrder<'b, 'u> {
    blocks: &'b [BlockUses<'u>],
    /// Per node, its ancestors' bits, for the nodes that use a block (empty otherwise).
    ancestors: Vec<Vec<u64>>,
}

impl<'b, 'u> UseOrder<'b, 'u> {
    fn new<K>(graph: &GraphDesc<K>, blocks: &'b [BlockUses<'u>]) -> Result<Self> {
        let nodes = graph.len();
        let words = nodes.div_ceil(64);
        let mut ancestors: Vec<Vec<u64>> = alloc::vec![Vec::new(); nodes];
        for &user in blocks.iter().flat_map(|block| block.users) {
            let slot = ancestors
                .get_mut(user.index())
                .ok_or(Error::UnknownGraphNode {
                    node: user.0,
                    nodes,
                })?;
            if !slot.is_empty() {
                continue;
            }
            let mut seen = alloc::vec![0u64; words.max(1)];
            let mut stack: Vec<NodeId> = graph.deps(user).to_vec();
            while let Some(node) = stack.pop() {
                let (word, bit) = (node.index() / 64, 1u64 << (node.index() % 64));
                if seen[word] & bit == 0 {
                    seen[word] |= bit;
                    stack.extend_from_slice(graph.deps(node));
                }
            }
            *slot = seen;
        }
        Ok(Self { blocks, ancestors })
    }

    /// Whether `earlier` happens before `later` (both users of some block).
    fn before(&self, earlier: NodeId, later: NodeId) -> bool {
        let bits = &self.ancestors[later.index()];
        bits[earlier.index() / 64] & (1u64 << (earlier.index() % 64)) != 0
    }

    /// Whether every use of block `first` happens before every use of block `then`.
    fn all_before(&self, first: usize, then: usize) -> bool {
        let (first, then) = (self.blocks[first].users, self.blocks[then].users);
        then.iter()
            .all(|&later| first.iter().all(|&earlier| self.before(earlier, later)))
    }

    /// Whether blocks `a` and `b` may be in use at once, so they may not share bytes.
    fn conflict(&self, a: usize, b: usize) -> bool {
        !self.all_before(a, b) && !self.all_before(b, a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FillValue;
    use crate::backend::graph::NodeOp;
    use proptest::prelude::*;

    fn fill() -> NodeOp<u8> {
        NodeOp::Fill {
            dst: 0,
            value: FillValue::U8(0),
            count: 1,
        }
    }

    /// Per node, picks of the earlier nodes it runs after; per block, its size and picks of
    /// its users.
    type Program = (Vec<Vec<u8>>, Vec<(usize, Vec<u8>)>);

    /// A random graph (each node after some earlier ones) and blocks with random users.
    fn program() -> impl Strategy<Value = Program> {
        let edges = proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3), 1..24);
        let blocks = proptest::collection::vec(
            (1usize..3000, proptest::collection::vec(any::<u8>(), 0..4)),
            0..12,
        );
        (edges, blocks)
    }

    proptest! {
        /// Against a plain model: the transitive closure of the edges, as a matrix of booleans.
        /// Two placed blocks that share a byte are used one entirely after the other; every
        /// block lies aligned inside the pool; the pool is no larger than all blocks side by
        /// side; and the placement passes its own check.
        #[test]
        fn blocks_share_bytes_only_when_their_uses_are_ordered((edges, picks) in program()) {
            let mut graph = GraphDesc::new();
            let mut before: Vec<Vec<bool>> = Vec::new();
            for (index, deps) in edges.iter().enumerate() {
                let after: Vec<NodeId> = deps
                    .iter()
                    .filter(|_| index > 0)
                    .map(|&d| NodeId(u32::from(d) % index as u32))
                    .collect();
                let mut reach = alloc::vec![false; edges.len()];
                for dep in &after {
                    reach[dep.index()] = true;
                    for (r, &b) in reach.iter_mut().zip(&before[dep.index()]) {
                        *r |= b;
                    }
                }
                before.push(reach);
                graph.add(fill(), &after)?;
            }
            let users: Vec<Vec<NodeId>> = picks
                .iter()
                .map(|(_, p)| p.iter().map(|&n| NodeId(u32::from(n) % edges.len() as u32)).collect())
                .collect();
            let blocks: Vec<BlockUses<'_>> = picks
                .iter()
                .zip(&users)
                .map(|((bytes, _), users)| BlockUses { bytes: *bytes, users })
                .collect();
            let placement = place_blocks(&graph, &blocks, 256)?;
            let ordered = |a: &[NodeId], b: &[NodeId]| {
                b.iter().all(|l| a.iter().all(|e| before[l.index()][e.index()]))
            };
            let mut side_by_side = 0;
            for (i, block) in blocks.iter().enumerate() {
                if block.users.is_empty() {
                    continue;
                }
                let start = placement.offsets[i];
                prop_assert_eq!(start % 256, 0);
                prop_assert!(start + block.bytes <= placement.bytes);
                side_by_side += block.bytes.next_multiple_of(256);
                for (j, other) in blocks.iter().enumerate().take(i) {
                    let other_start = placement.offsets[j];
                    let share = !other.users.is_empty()
                        && start < other_start + other.bytes
                        && other_start < start + block.bytes;
                    if share {
                        prop_assert!(
                            ordered(block.users, other.users) || ordered(other.users, block.users),
                            "blocks {} and {} share bytes but are used unordered", i, j
                        );
                    }
                }
            }
            prop_assert!(placement.bytes <= side_by_side);
            check_placement(&graph, &blocks, &placement)?;
        }
    }

    #[test]
    fn a_placement_no_longer_ordered_is_a_conflict_and_an_unknown_user_is_refused() {
        let mut graph = GraphDesc::new();
        let first = graph.add(fill(), &[]).unwrap();
        let second = graph.add(fill(), &[first]).unwrap();
        let beside = graph.add(fill(), &[]).unwrap();
        let blocks = [
            BlockUses {
                bytes: 64,
                users: &[first],
            },
            BlockUses {
                bytes: 64,
                users: &[second],
            },
        ];
        let placement = place_blocks(&graph, &blocks, 256).unwrap();
        assert_eq!(placement.offsets, [0, 0]);
        // The second block now also used by a node unordered with the first's use.
        let moved = [
            blocks[0],
            BlockUses {
                bytes: 64,
                users: &[second, beside],
            },
        ];
        assert_eq!(
            check_placement(&graph, &moved, &placement),
            Err(Error::GraphBlockConflict { block: 1, other: 0 })
        );
        let unknown = [BlockUses {
            bytes: 64,
            users: &[NodeId(3)],
        }];
        assert_eq!(
            place_blocks(&graph, &unknown, 256),
            Err(Error::UnknownGraphNode { node: 3, nodes: 3 })
        );
    }
}
