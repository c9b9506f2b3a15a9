//! The committed, seeded mixed trace: what the generator produces, and the fragmentation
//! figure (peak reserved / peak requested) the caching allocator reaches on it (spec target:
//! at most 1.3). Counts, not timings.

use gpu_core::allocator::AllocatorConfig;
use gpu_core::allocator::model::{TraceOp, mixed_trace, peak_live_bytes, run_trace, trace_streams};

const SEED: u64 = 0x5EED_A110C;

#[test]
fn the_trace_mixes_sizes_streams_and_out_of_order_frees() {
    let trace = mixed_trace(SEED, 20_000, 4);
    assert_eq!(
        trace,
        mixed_trace(SEED, 20_000, 4),
        "the generator is not deterministic"
    );
    let sizes: Vec<usize> = trace
        .iter()
        .filter_map(|op| match op {
            TraceOp::Allocate { size, .. } => Some(*size),
            TraceOp::Free { .. } => None,
        })
        .collect();
    let small = sizes.iter().filter(|&&s| s <= 64 << 10).count();
    let large = sizes.iter().filter(|&&s| s >= 16 << 20).count();
    assert!(small * 10 > sizes.len() * 8, "mostly small tensors");
    assert!(large > 50, "some large ones: {large}");
    assert_eq!(trace_streams(&trace).len(), 4);
    let mut live = Vec::new();
    let mut out_of_order = 0;
    for op in &trace {
        match *op {
            TraceOp::Allocate { id, .. } => live.push(id),
            TraceOp::Free { id } => {
                let position = live.iter().position(|&l| l == id).unwrap();
                out_of_order += usize::from(position + 1 != live.len());
                live.remove(position);
            }
        }
    }
    assert!(live.is_empty(), "the trace frees everything");
    assert!(
        out_of_order * 2 > sizes.len(),
        "frees mostly out of order: {out_of_order}"
    );
}

#[test]
fn fragmentation_on_the_trace_stays_within_the_target() {
    let trace = mixed_trace(SEED, 20_000, 4);
    let stats = run_trace(&trace, AllocatorConfig::default()).unwrap();
    assert_eq!(stats.peak_requested, peak_live_bytes(&trace));
    let figure = stats.fragmentation();
    println!(
        "fragmentation {figure:.3} ({} segments obtained)",
        stats.segment_allocations
    );
    assert!(figure <= 1.3, "fragmentation {figure:.3} above 1.3");
    assert_eq!((stats.allocated, stats.requested), (0, 0));
}
