//! The bound without trims (docs/allocator.md): a pool grows only when no run of adjacent free
//! blocks holds the request, whichever stream freed them and whether or not their work has
//! completed; random multi-stream sequences checked against a plain model of segments and blocks.

use std::collections::BTreeMap;

use gpu_core::allocator::model::{FakeDriver, capabilities};
use gpu_core::allocator::{
    AllocRequest, AllocatorConfig, BlockHandle, DeviceAllocator, MemoryKind, ROUNDING, Release,
    SMALL_REQUEST_LIMIT,
};
use gpu_core::id::{DeviceId, StreamId};
use proptest::prelude::*;

/// One step: sizes are whole multiples of the rounding, so a block is exactly the request and
/// the plain model knows every block's extent.
#[derive(Clone, Debug)]
enum Op {
    Allocate { units: usize, stream: u8 },
    Free { pick: usize },
    Progress { stream: u8, count: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1..=SMALL_REQUEST_LIMIT / ROUNDING, 0u8..3)
            .prop_map(|(units, stream)| Op::Allocate { units, stream }),
        4 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => (0u8..3, 0u8..4).prop_map(|(stream, count)| Op::Progress { stream, count }),
    ]
}

/// A live block in the plain model: its handle, extent and stream.
struct Live {
    handle: BlockHandle,
    address: usize,
    size: usize,
    stream: StreamId,
}

/// The largest stretch of a driver segment that no live block covers.
fn largest_gap(segments: &BTreeMap<usize, (usize, MemoryKind)>, live: &[Live]) -> usize {
    let mut largest = 0;
    for (&base, &(size, _)) in segments {
        let mut inside: Vec<(usize, usize)> = live
            .iter()
            .filter(|l| l.address >= base && l.address < base + size)
            .map(|l| (l.address, l.size))
            .collect();
        inside.sort_unstable();
        let mut at = base;
        for (address, len) in inside {
            largest = largest.max(address - at);
            at = address + len;
        }
        largest = largest.max(base + size - at);
    }
    largest
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn a_pool_grows_only_when_no_free_run_holds_the_request(
        ops in proptest::collection::vec(op(), 1..250)
    ) {
        let mut driver = FakeDriver::new(usize::MAX / 2);
        let mut allocator = DeviceAllocator::new(
            DeviceId(0),
            capabilities([true; 3], true),
            AllocatorConfig::default(),
        );
        let mut live: Vec<Live> = Vec::new();
        for (number, op) in ops.iter().enumerate() {
            match *op {
                Op::Allocate { units, stream } => {
                    let (size, stream) = (units * ROUNDING, StreamId(u32::from(stream)));
                    let gap = largest_gap(driver.live_segments(), &live);
                    let grown = allocator.stats(MemoryKind::Device).segment_allocations;
                    let request = AllocRequest::new(MemoryKind::Device, size).on_stream(stream, &[]);
                    let allocation = allocator.allocate(&mut driver, &request).unwrap();
                    let grew = allocator.stats(MemoryKind::Device).segment_allocations > grown;
                    prop_assert!(
                        !grew || gap < size,
                        "step {}: grew for {} bytes while a free run of {} bytes lay in a segment",
                        number, size, gap
                    );
                    driver.enqueue(stream, allocation.address, size);
                    live.push(Live { handle: allocation.handle, address: allocation.address, size, stream });
                }
                Op::Free { pick } if !live.is_empty() => {
                    let block = live.swap_remove(pick % live.len());
                    allocator.free(&mut driver, block.handle, Release::OnStream(block.stream)).unwrap();
                }
                Op::Free { .. } => {}
                Op::Progress { stream, count } => {
                    driver.progress(StreamId(u32::from(stream)), usize::from(count));
                }
            }
            prop_assert!(driver.violations.is_empty(), "step {}: {:?}", number, driver.violations);
        }
        allocator.check_consistency().unwrap();
    }
}
