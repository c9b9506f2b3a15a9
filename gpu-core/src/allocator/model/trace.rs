//! Seeded workloads: traces of mixed allocation sizes and lifetimes over a few streams, their
//! peak live bytes, and a run of one through the allocator over the fake driver.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use super::fake::{FakeDriver, capabilities};
use crate::allocator::{
    AllocRequest, AllocatorConfig, AllocatorStats, BlockHandle, DeviceAllocator, MemoryKind,
    Release,
};
use crate::error::Result;
use crate::id::{DeviceId, StreamId};

/// One operation of a generated workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes as allocation number `id`, for use on `stream`.
    Allocate {
        /// Number of the allocation (dense, from 0).
        id: usize,
        /// Bytes.
        size: usize,
        /// Stream number.
        stream: u32,
    },
    /// Free allocation number `id`.
    Free {
        /// Number of the allocation.
        id: usize,
    },
}

/// A small deterministic generator (xorshift64*), so traces are identical everywhere.
#[derive(Clone, Debug)]
pub struct TraceRng(u64);

impl TraceRng {
    /// A generator from a seed (zero is replaced by a fixed constant).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..bound` (`bound > 0`).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }
}

/// A mixed workload like a training step's: mostly small tensors (256 B .. 64 KiB, sizes not
/// multiples of 512), some mid-size (1 .. 8 MiB) and a few large (16 .. 96 MiB) ones, on
/// `streams` streams, with frees out of order (a random live allocation, more often an old
/// one), live memory drifting between bursts. Ends with everything freed.
pub fn mixed_trace(seed: u64, operations: usize, streams: u32) -> Vec<TraceOp> {
    let mut rng = TraceRng::new(seed);
    let mut trace = Vec::with_capacity(operations + operations / 2);
    let mut live: Vec<usize> = Vec::new();
    let mut next_id = 0;
    let streams = u64::from(streams.max(1));
    for step in 0..operations {
        let phase = (step / 512) % 4;
        let target_live = [48u64, 160, 96, 240][phase];
        let allocate = live.is_empty()
            || (live.len() as u64) < target_live && rng.below(100) < 70
            || rng.below(100) < 35;
        if allocate {
            let kind = rng.below(1000);
            let size = if kind < 900 {
                256 + rng.below(64 << 10) as usize
            } else if kind < 985 {
                (1 << 20) + rng.below(7 << 20) as usize
            } else {
                (16 << 20) + rng.below(80 << 20) as usize
            };
            let stream = rng.below(streams) as u32;
            trace.push(TraceOp::Allocate {
                id: next_id,
                size,
                stream,
            });
            live.push(next_id);
            next_id += 1;
        } else {
            let skew =
                rng.below(live.len() as u64) * rng.below(live.len() as u64) / live.len() as u64;
            let id = live.swap_remove(skew as usize);
            trace.push(TraceOp::Free { id });
        }
    }
    while let Some(id) = live.pop() {
        trace.push(TraceOp::Free { id });
    }
    trace
}

/// Bytes live at the busiest point of a trace (requested sizes).
pub fn peak_live_bytes(trace: &[TraceOp]) -> usize {
    let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
    let (mut live, mut peak) = (0usize, 0usize);
    for op in trace {
        match *op {
            TraceOp::Allocate { id, size, .. } => {
                sizes.insert(id, size);
                live += size;
                peak = peak.max(live);
            }
            TraceOp::Free { id } => live -= sizes.remove(&id).unwrap_or(0),
        }
    }
    peak
}

/// Which streams a trace uses.
pub fn trace_streams(trace: &[TraceOp]) -> BTreeSet<u32> {
    trace
        .iter()
        .filter_map(|op| match op {
            TraceOp::Allocate { stream, .. } => Some(*stream),
            TraceOp::Free { .. } => None,
        })
        .collect()
}

/// Runs a trace on a [`DeviceAllocator`] over a [`FakeDriver`] (device memory, each
/// allocation on its stream, freed on it) and returns the allocator's statistics.
pub fn run_trace(trace: &[TraceOp], config: AllocatorConfig) -> Result<AllocatorStats> {
    let mut driver = FakeDriver::new(usize::MAX / 2);
    let mut allocator = DeviceAllocator::new(DeviceId(0), capabilities([true; 3], true), config);
    let mut handles: BTreeMap<usize, (BlockHandle, StreamId)> = BTreeMap::new();
    for op in trace {
        match *op {
            TraceOp::Allocate { id, size, stream } => {
                let stream = StreamId(stream);
                let request = AllocRequest::new(MemoryKind::Device, size).on_stream(stream, &[]);
                let allocation = allocator.allocate(&mut driver, &request)?;
                handles.insert(id, (allocation.handle, stream));
            }
            TraceOp::Free { id } => {
                if let Some((handle, stream)) = handles.remove(&id) {
                    allocator.free(&mut driver, handle, Release::OnStream(stream))?;
                }
            }
        }
    }
    Ok(allocator.stats(MemoryKind::Device))
}
