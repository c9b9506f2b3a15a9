//! Random operation sequences on the allocator against the model harness (gpu_core::allocator::
//! model): overlap, containment in driver segments, stream safety, path choice, consistency
//! after injected failures, and a clean return of everything after trim.

use gpu_core::allocator::AllocatorConfig;
use gpu_core::allocator::model::{Harness, Step, capabilities};
use proptest::prelude::*;

const MIB: usize = 1 << 20;

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 1usize..=64 << 10,
        2 => (64 << 10)..=SMALL,
        2 => (SMALL + 1)..=12 * MIB,
        1 => (12 * MIB)..=48 * MIB,
        1 => Just(0usize),
    ]
}
const SMALL: usize = MIB;

fn alignment() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => Just(1usize),
        3 => (0u32..=22).prop_map(|log| 1usize << log),
        1 => 0usize..=5000,
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..4, size(), alignment(), proptest::option::weighted(0.8, 0u8..4), proptest::collection::vec(0u8..4, 0..3))
            .prop_map(|(kind, size, alignment, stream, deps)| Step::Allocate { kind, size, alignment, stream, deps }),
        3 => (any::<usize>(), 0u8..4).prop_map(|(pick, stream)| Step::Use { pick, stream }),
        5 => (any::<usize>(), proptest::bool::weighted(0.15)).prop_map(|(pick, idle)| Step::Free { pick, idle }),
        3 => (0u8..4, 0u8..4).prop_map(|(stream, count)| Step::Progress { stream, count }),
        1 => (0u8..12).prop_map(|after| Step::FailSoon { after }),
        1 => Just(Step::Trim),
        1 => (0u8..4).prop_map(|stream| Step::Retire { stream }),
    ]
}

/// What a run starts from: capabilities, tunables, stream count, device capacity.
#[derive(Clone, Debug)]
struct Setup {
    stream_ordered: [bool; 3],
    managed: bool,
    max_split_size: usize,
    streams: u8,
    capacity: usize,
    /// Growable segments over a fake with virtual memory.
    growable: bool,
}

impl Setup {
    fn harness(&self) -> Harness {
        let config = AllocatorConfig {
            max_split_size: self.max_split_size,
            growable_segments: self.growable,
            ..AllocatorConfig::default()
        };
        let mut harness = Harness::new(
            capabilities(self.stream_ordered, self.managed),
            config,
            self.streams,
            self.capacity,
        );
        if self.growable {
            harness.driver.granularity = Some(2 * MIB);
        }
        harness
    }
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        any::<[bool; 3]>(),
        any::<bool>(),
        prop_oneof![Just(usize::MAX), Just(16 * MIB)],
        1u8..=4,
        prop_oneof![Just(48 * MIB), Just(160 * MIB), Just(usize::MAX / 2)],
        proptest::bool::weighted(0.3),
    )
        .prop_map(
            |(stream_ordered, managed, max_split_size, streams, capacity, growable)| Setup {
                stream_ordered,
                managed,
                max_split_size,
                streams,
                capacity,
                growable,
            },
        )
}

proptest! {
    #[test]
    fn random_sequences_keep_every_rule(setup in setup(), steps in proptest::collection::vec(step(), 1..120)) {
        let mut harness = setup.harness();
        for (number, step) in steps.iter().enumerate() {
            if let Err(message) = harness.step(step) {
                prop_assert!(false, "step {number} {step:?}: {message}");
            }
        }
        if let Err(message) = harness.finish() {
            prop_assert!(false, "at the end: {message}");
        }
    }
}

/// The generator reaches every path, injected failures and out-of-memory errors, so a
/// generator that never exercises one is visible.
#[test]
fn the_generator_reaches_every_path() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (setup(), proptest::collection::vec(step(), 1..120));
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..256 {
        let (setup, steps) = strategy.new_tree(&mut runner).unwrap().current();
        let mut harness = setup.harness();
        for step in &steps {
            harness.step(step).unwrap();
        }
        harness.finish().unwrap();
        for (path, count) in &harness.paths {
            *seen.entry(*path).or_insert(0u64) += count;
        }
    }
    println!("paths taken: {seen:?}");
    for path in [
        "cached",
        "other stream, complete",
        "other stream, waited",
        "stream-ordered",
        "synchronous",
        "fallback",
        "injected failure",
        "out of memory",
        "segment grown",
    ] {
        assert!(
            seen.get(path).copied().unwrap_or(0) > 0,
            "no request took the {path} path: {seen:?}"
        );
    }
}
