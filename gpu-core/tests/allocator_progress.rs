//! A program on one stream gets the same blocks whatever the GPU's progress: the allocator's
//! choices depend on the requests alone, so the what-if replay (which takes every free as
//! complete) predicts a single-stream program's figures exactly. Random sequences, run twice.

use gpu_core::allocator::model::{FakeDriver, capabilities};
use gpu_core::allocator::{
    AllocPath, AllocRequest, AllocatorConfig, AllocatorStats, BlockHandle, DeviceAllocator,
    MemoryKind, Release,
};
use gpu_core::id::{DeviceId, StreamId};
use proptest::prelude::*;

const STREAM: StreamId = StreamId(0);
const MIB: usize = 1 << 20;

#[derive(Clone, Debug)]
enum Op {
    Allocate { size: usize },
    Free { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    // Few distinct sizes: equal-size free blocks (ties) are where a choice could differ.
    let size = prop_oneof![
        4 => prop::sample::select(vec![512usize, 4096, 300 << 10, 2 * MIB, 6 * MIB, 20 * MIB]),
        1 => 1usize..=24 * MIB,
    ];
    prop_oneof![
        5 => size.prop_map(|size| Op::Allocate { size }),
        4 => any::<usize>().prop_map(|pick| Op::Free { pick }),
    ]
}

/// How far the GPU gets between the host's calls.
#[derive(Clone, Copy, Debug)]
enum Progress {
    KeepsUp,
    NeverRuns,
}

/// What a request got: its path (hit or which miss) and the block's size and offset in its
/// segment (addresses themselves are the driver's, which reuses a freed range only once the
/// stream-ordered free has run).
type Served = (AllocPath, usize, usize);

/// Runs `ops` on one stream, each block's work enqueued before its free; what each request
/// got, in order, and the final statistics.
fn run(ops: &[Op], progress: Progress, config: &AllocatorConfig) -> (Vec<Served>, AllocatorStats) {
    let mut allocator = DeviceAllocator::new(DeviceId(0), capabilities([true; 3], true), *config);
    let mut driver = FakeDriver::new(usize::MAX / 2);
    let mut live: Vec<(BlockHandle, usize, usize)> = Vec::new();
    let mut served = Vec::new();
    for op in ops {
        match *op {
            Op::Allocate { size } => {
                let request = AllocRequest::new(MemoryKind::Device, size).on_stream(STREAM, &[]);
                let block = allocator.allocate(&mut driver, &request).unwrap();
                let (&base, _) = driver
                    .live_segments()
                    .range(..=block.address)
                    .next_back()
                    .expect("a block lies in a driver segment");
                served.push((block.path, block.size, block.address - base));
                live.push((block.handle, block.address, block.size));
            }
            Op::Free { pick } if !live.is_empty() => {
                let (handle, address, size) = live.swap_remove(pick % live.len());
                driver.enqueue(STREAM, address, size);
                allocator
                    .free(&mut driver, handle, Release::OnStream(STREAM))
                    .unwrap();
            }
            Op::Free { .. } => {}
        }
        if let Progress::KeepsUp = progress {
            driver.finish_all();
        }
    }
    (served, allocator.stats(MemoryKind::Device))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn one_streams_blocks_do_not_depend_on_the_gpus_progress(
        ops in prop::collection::vec(op(), 1..160),
        wait_before_growing in any::<bool>(),
        release_before_growing in any::<bool>(),
    ) {
        let config = AllocatorConfig {
            wait_before_growing,
            release_before_growing,
            ..AllocatorConfig::default()
        };
        let (kept_up, kept_up_stats) = run(&ops, Progress::KeepsUp, &config);
        let (behind, behind_stats) = run(&ops, Progress::NeverRuns, &config);
        prop_assert_eq!(kept_up, behind, "the blocks handed out differ");
        let figures = |s: &AllocatorStats| {
            (s.peak_reserved, s.segments, s.misses, s.segment_allocations, s.segment_frees)
        };
        prop_assert_eq!(figures(&kept_up_stats), figures(&behind_stats));
    }
}
