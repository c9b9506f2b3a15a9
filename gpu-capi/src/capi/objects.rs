//! What the C API keeps in a session: the handle tables of memory, kernels, graphs and graphs'
//! memory blocks ([`Objects`]),
//! and the memory a memory handle names (an allocation, or a registration of host memory).

use hashbrown::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use gpu_runtime::error::Error;
use gpu_runtime::id::DeviceId;
use gpu_runtime::runtime::{Buffer, GraphBlock, Kernel, LockedHost, Span};

use super::GraphObject;
use crate::shared::{
    CapiSlot, ClientBackend, ClientObjects, ClientSlot, Generation, HandleKind, HandleTable,
    Session,
};

/// Memory behind a memory handle (`gpurt_memory_t`).
pub(super) enum Memory<B: ClientBackend> {
    Buffer(Buffer<'static, B>),
    Registered {
        guard: LockedHost<'static, 'static, B>,
        address: usize,
        size: usize,
    },
}

impl<B: ClientBackend> Memory<B> {
    /// Bytes `[offset, offset + len)` of the memory, checked against its size.
    pub(super) fn span(&self, offset: usize, len: usize) -> Result<Span<'_>, Error> {
        match self {
            Memory::Buffer(buffer) => buffer.span(offset, len),
            Memory::Registered { guard, .. } => guard.span(offset, len),
        }
    }
}

/// The objects C callers hold handles to, in one session.
pub struct Objects<B: ClientBackend> {
    /// Allocated and registered memory.
    pub(super) memory: HandleTable<Arc<Memory<B>>>,
    /// Kernels loaded.
    pub(super) kernels: HandleTable<Kernel<'static, B>>,
    /// The handle of each kernel loaded, so asking twice gives the same handle.
    pub(super) kernel_handles: Mutex<HashMap<(DeviceId, String), u64>>,
    /// Graphs, recording or instantiated.
    pub(super) graphs: HandleTable<Arc<GraphObject<B>>>,
    /// Blocks of graphs' own memory (each graph lets go of its own when destroyed).
    pub(super) graph_blocks: HandleTable<GraphBlock>,
}

impl<B: ClientBackend> ClientSlot<B> for CapiSlot {
    type Objects = Objects<B>;
}

impl<B: ClientBackend> ClientObjects<B> for Objects<B> {
    /// No objects, for the session of `generation` (the C API records no trace of its own).
    fn open(generation: Generation, _trace: Option<&Path>) -> Self {
        Self {
            memory: HandleTable::new(HandleKind::Memory, generation),
            kernels: HandleTable::new(HandleKind::Kernel, generation),
            kernel_handles: Mutex::new(HashMap::new()),
            graphs: HandleTable::new(HandleKind::Graph, generation),
            graph_blocks: HandleTable::new(HandleKind::GraphBlock, generation),
        }
    }

    /// Releases every object (at shutdown, with no call in flight): buffers are freed,
    /// registrations unpinned after their transfers. Returns how many there were.
    fn release(&self, _session: &Session<B>) -> usize {
        // Graphs first: they hold memory objects, let go with them.
        let graphs = self.graphs.drain().len();
        self.graph_blocks.drain();
        let memory = self.memory.drain().len();
        let kernels = self.kernels.drain().len();
        self.kernel_handles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        graphs + memory + kernels
    }
}
