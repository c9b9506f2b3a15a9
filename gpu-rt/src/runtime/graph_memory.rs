//! A graph's own memory as the runtime hands it out: blocks of one pool the graph owns
//! ([`GraphBlock`]), the operands that name either a span or a block, and the book of which
//! nodes use which block and where each node's addresses into blocks go.
//!
//! A block's address is known only when the graph is instantiated (the pool is laid out then,
//! [`gpu_core::backend::graph::memory`]), so a node records its block addresses as places to
//! fill in, and recording checks a block as device memory of the graph's device.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use gpu_core::backend::KernelArg;
use gpu_core::backend::graph::memory::{BlockUses, Placement, check_placement, place_blocks};
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;

use super::handles::Span;
use super::kernels::Arg;

/// Blocks of graph memory start at multiples of this (as the drivers' allocations do).
pub(super) const BLOCK_ALIGN: usize = 256;

/// Numbers recordings, so that a block of one graph is refused by another.
static RECORDINGS: AtomicU64 = AtomicU64::new(1);

/// Bytes of a graph's own memory ([`super::GraphRecorder::alloc`]): a whole block, or bytes of
/// one ([`GraphBlock::sub`]). Nodes of its graph use it in place of a span; it exists only
/// inside the graph's replays, from the first node that uses it to the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphBlock {
    recording: u64,
    index: u32,
    offset: usize,
    len: usize,
}

impl GraphBlock {
    /// The block's number in its graph, in the order the blocks were made.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Bytes named.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte is named (a [`GraphBlock::sub`] of length 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes `[offset, offset + len)` of these bytes ([`Error::OutOfBounds`] past their end).
    pub fn sub(&self, offset: usize, len: usize) -> Result<GraphBlock> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::OutOfBounds {
                offset,
                len,
                size: self.len,
            });
        }
        Ok(GraphBlock {
            offset: self.offset + offset,
            len,
            ..*self
        })
    }

    /// What the runtime's checks see: device memory of `device` of this length, at its offset
    /// in the block (the address is never used for work).
    fn stand_in(&self, device: DeviceId) -> Span<'static> {
        Span {
            address: self.offset,
            len: self.len,
            device: Some(device),
            runtime: None,
            epoch: None,
            uses: None,
        }
    }
}

/// Memory a graph's copy or fill node names: a span of a buffer, of pinned host memory or of
/// raw pinned memory, or bytes of the graph's own memory. Both convert into it (`.into()`).
#[derive(Clone, Copy)]
pub enum GraphSpan<'a> {
    /// Memory that outlives the graph (the graph borrows it).
    Memory(Span<'a>),
    /// Bytes of the graph's own memory.
    Block(GraphBlock),
}

impl<'a> From<Span<'a>> for GraphSpan<'a> {
    fn from(span: Span<'a>) -> Self {
        GraphSpan::Memory(span)
    }
}

impl From<GraphBlock> for GraphSpan<'_> {
    fn from(block: GraphBlock) -> Self {
        GraphSpan::Block(block)
    }
}

/// An argument of a graph's launch node: any kernel argument, or bytes of the graph's own
/// memory (passed as their device address). Both convert into it (`.into()`).
#[derive(Clone, Copy)]
pub enum GraphArg<'a> {
    /// An argument as a stream launch takes it.
    Arg(Arg<'a>),
    /// Bytes of the graph's own memory.
    Block(GraphBlock),
}

impl<'a> From<Arg<'a>> for GraphArg<'a> {
    fn from(arg: Arg<'a>) -> Self {
        GraphArg::Arg(arg)
    }
}

impl<'a> From<GraphSpan<'a>> for GraphArg<'a> {
    fn from(span: GraphSpan<'a>) -> Self {
        match span {
            GraphSpan::Memory(span) => GraphArg::Arg(Arg::Span(span)),
            GraphSpan::Block(block) => GraphArg::Block(block),
        }
    }
}

impl From<GraphBlock> for GraphArg<'_> {
    fn from(block: GraphBlock) -> Self {
        GraphArg::Block(block)
    }
}

/// The field of a node that holds an address into a block.
#[derive(Clone, Copy, Debug)]
pub(super) enum Slot {
    CopyDst,
    CopySrc,
    FillDst,
    Arg(usize),
}

/// One address of a node into a block, filled in once the pool is laid out.
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockAddress {
    slot: Slot,
    block: GraphBlock,
}

/// A node's operands: the memory it borrows, and the places of its block addresses.
#[derive(Default)]
pub(super) struct Operands<'a> {
    /// The memory operands only (the graph borrows them and notes their use on replays).
    pub(super) memory: Vec<Span<'a>>,
    pub(super) blocks: Vec<BlockAddress>,
}

impl<'a> Operands<'a> {
    /// A copy's or fill's `(slot, operand)`s as the runtime's checks see them (a block as its
    /// stand-in span), and its operands.
    pub(super) fn of_spans<const N: usize>(
        device: DeviceId,
        spans: &[(Slot, GraphSpan<'a>); N],
    ) -> ([Span<'a>; N], Self) {
        let mut operands = Operands::default();
        let checked = spans.map(|(slot, span)| match span {
            GraphSpan::Memory(span) => {
                operands.memory.push(span);
                span
            }
            GraphSpan::Block(block) => {
                operands.blocks.push(BlockAddress { slot, block });
                block.stand_in(device)
            }
        });
        (checked, operands)
    }

    /// A launch's arguments as stream-launch arguments (a block as its stand-in span) and its
    /// operands.
    pub(super) fn of_args(device: DeviceId, args: &[GraphArg<'a>]) -> (Vec<Arg<'a>>, Self) {
        let mut operands = Operands::default();
        let args = args
            .iter()
            .enumerate()
            .map(|(index, arg)| match *arg {
                GraphArg::Arg(arg) => {
                    operands.memory.extend(arg.span());
                    arg
                }
                GraphArg::Block(block) => {
                    let slot = Slot::Arg(index);
                    operands.blocks.push(BlockAddress { slot, block });
                    Arg::Span(block.stand_in(device))
                }
            })
            .collect();
        (args, operands)
    }

    /// Whether the copy's two ends are bytes of one block (only then can they overlap: a block
    /// shares no byte with memory outside the pool, nor with a block used by the same node).
    pub(super) fn one_block(&self) -> bool {
        matches!(&self.blocks[..], [a, b] if a.block.index == b.block.index)
    }
}

/// The blocks of one graph: their sizes, the nodes that use each, each node's addresses into
/// them, and, once instantiated, where the pool lies and the blocks in it.
pub(super) struct Blocks {
    recording: u64,
    sizes: Vec<usize>,
    /// Per block, the nodes that use it (a node once per block).
    users: Vec<Vec<NodeId>>,
    /// Per node, its addresses into blocks.
    addresses: Vec<Vec<BlockAddress>>,
    /// Where the pool lies and how, once instantiated.
    pool: Option<Pool>,
}

/// A graph's pool, laid out.
struct Pool {
    /// Its address.
    base: usize,
    placement: Placement,
    /// Per block, whether a node used it at instantiation (a block no node used has no bytes).
    placed: Vec<bool>,
}

impl Blocks {
    pub(super) fn new() -> Self {
        Self {
            recording: RECORDINGS.fetch_add(1, Ordering::Relaxed),
            sizes: Vec::new(),
            users: Vec::new(),
            addresses: Vec::new(),
            pool: None,
        }
    }

    /// A new block of `len` bytes ([`Error::ZeroSize`] for none).
    pub(super) fn alloc(&mut self, len: usize) -> Result<GraphBlock> {
        if len == 0 {
            return Err(Error::ZeroSize {
                what: "graph memory block",
            });
        }
        let index = u32::try_from(self.sizes.len()).map_err(|_| Error::LimitExceeded {
            what: "blocks of one graph",
            required: self.sizes.len() + 1,
            limit: u32::MAX as usize,
            detail: Vec::new(),
        })?;
        self.sizes.push(len);
        self.users.push(Vec::new());
        Ok(GraphBlock {
            recording: self.recording,
            index,
            offset: 0,
            len,
        })
    }

    /// Refuses an operand's block of another graph ([`Error::UnknownGraphBlock`]).
    pub(super) fn check(&self, operands: &Operands<'_>) -> Result<()> {
        match operands
            .blocks
            .iter()
            .find(|address| address.block.recording != self.recording)
        {
            Some(foreign) => Err(Error::UnknownGraphBlock {
                block: foreign.block.index,
                blocks: self.sizes.len(),
            }),
            None => Ok(()),
        }
    }

    /// Notes the block addresses of `node`, just added (checked by [`Blocks::check`]).
    pub(super) fn added(&mut self, node: NodeId, addresses: Vec<BlockAddress>) {
        debug_assert_eq!(node.index(), self.addresses.len());
        for address in &addresses {
            let users = &mut self.users[address.block.index as usize];
            if users.last() != Some(&node) {
                users.push(node);
            }
        }
        self.addresses.push(addresses);
    }

    /// Lays the blocks out in one pool.
    pub(super) fn place<K>(&self, graph: &GraphDesc<K>) -> Result<Placement> {
        place_blocks(graph, &self.uses(&self.users), BLOCK_ALIGN)
    }

    /// Fills in every node's block addresses with the pool at `base`, laid out as `placement`.
    pub(super) fn resolve<K: Clone>(
        &mut self,
        graph: &mut GraphDesc<K>,
        base: usize,
        placement: Placement,
    ) {
        let placed = self.users.iter().map(|users| !users.is_empty()).collect();
        self.pool = Some(Pool {
            base,
            placement,
            placed,
        });
        for (index, addresses) in self.addresses.iter().enumerate() {
            let node = NodeId(index as u32);
            if let (false, Ok(op)) = (addresses.is_empty(), graph.node(node)) {
                let mut op = op.clone();
                self.fill_in(&mut op, addresses);
                // The same kind, with the same edges: `replace` refuses neither.
                let _ = graph.replace(node, op);
            }
        }
    }

    /// The blocks' users were `node` to use the blocks of `addresses` instead of its current
    /// ones, whose addresses this fills in `op` (none: no block's users change): refused if the
    /// pool's layout would not hold ([`Error::GraphBlockConflict`]), or for a block no node used
    /// at instantiation, which has no bytes ([`Error::UnknownGraphBlock`]). Nothing changes
    /// here: [`Blocks::commit`] makes the change once the node took `op`.
    pub(super) fn prepare<K>(
        &self,
        graph: &GraphDesc<K>,
        node: NodeId,
        addresses: &[BlockAddress],
        op: &mut NodeOp<K>,
    ) -> Result<Option<Vec<Vec<NodeId>>>> {
        // An update of a node that names no block, before or after, costs nothing here (every
        // update of a graph without memory of its own).
        let before = self
            .addresses
            .get(node.index())
            .map_or(&[][..], Vec::as_slice);
        if before.is_empty() && addresses.is_empty() {
            return Ok(None);
        }
        let mut users = self.users.clone();
        for list in &mut users {
            list.retain(|&user| user != node);
        }
        for address in addresses {
            let list = &mut users[address.block.index as usize];
            if !list.contains(&node) {
                list.push(node);
            }
        }
        if let Some(pool) = &self.pool {
            if let Some(unplaced) = addresses
                .iter()
                .find(|address| !pool.placed[address.block.index as usize])
            {
                return Err(Error::UnknownGraphBlock {
                    block: unplaced.block.index,
                    blocks: self.sizes.len(),
                });
            }
            // Fewer uses keep every ordering the layout relied on: only a new use can break it.
            let gains = addresses
                .iter()
                .any(|address| !self.users[address.block.index as usize].contains(&node));
            if gains {
                check_placement(graph, &self.uses(&users), &pool.placement)?;
            }
        }
        self.fill_in(op, addresses);
        Ok(Some(users))
    }

    /// Makes the change [`Blocks::prepare`] found to hold.
    pub(super) fn commit(
        &mut self,
        node: NodeId,
        users: Option<Vec<Vec<NodeId>>>,
        addresses: Vec<BlockAddress>,
    ) {
        if let Some(users) = users {
            self.users = users;
            self.addresses[node.index()] = addresses;
        }
    }

    /// The size of the pool laid out (0 before instantiation or when no node uses a block).
    pub(super) fn pool_bytes(&self) -> usize {
        self.pool.as_ref().map_or(0, |pool| pool.placement.bytes)
    }

    fn uses<'u>(&self, users: &'u [Vec<NodeId>]) -> Vec<BlockUses<'u>> {
        self.sizes
            .iter()
            .zip(users)
            .map(|(&bytes, users)| BlockUses { bytes, users })
            .collect()
    }

    /// Writes each address's place in `op`, once the pool is laid out (before, recording
    /// keeps the offsets in their blocks).
    fn fill_in<K>(&self, op: &mut NodeOp<K>, addresses: &[BlockAddress]) {
        let Some(pool) = &self.pool else {
            return;
        };
        for address in addresses {
            let block = address.block;
            let at = pool.base + pool.placement.offsets[block.index as usize] + block.offset;
            match (address.slot, &mut *op) {
                (Slot::CopyDst, NodeOp::Copy { dst, .. }) => *dst = at,
                (Slot::CopySrc, NodeOp::Copy { src, .. }) => *src = at,
                (Slot::FillDst, NodeOp::Fill { dst, .. }) => *dst = at,
                (Slot::Arg(index), NodeOp::Launch { args, .. }) => args[index] = KernelArg::Ptr(at),
                // A node of another kind: `GraphDesc::replace` refuses it next.
                _ => {}
            }
        }
    }
}
