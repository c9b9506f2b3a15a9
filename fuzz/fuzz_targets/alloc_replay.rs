//! The allocation trace's parser and replay on fuzzer input: text that may be anything (errors
//! are fine, panics are not), replayed under three configurations (growable segments in one) and a small cap, line by line.
#![no_main]

use gpu_core::allocator::AllocatorConfig;
use gpu_core::allocator::replay::{Replay, ReplayConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let configs = vec![
        ReplayConfig {
            name: "default".into(),
            allocator: AllocatorConfig::default(),
        },
        ReplayConfig {
            name: "torch-like".into(),
            allocator: AllocatorConfig {
                release_before_growing: false,
                max_split_size: usize::MAX,
                ..AllocatorConfig::default()
            },
        },
        ReplayConfig {
            name: "growable".into(),
            allocator: AllocatorConfig {
                growable_segments: true,
                ..AllocatorConfig::default()
            },
        },
    ];
    let mut replay = Replay::new(configs, Some(64 << 20));
    for line in data.split(|&b| b == b'\n') {
        let before = replay.events();
        if replay.feed_line(line).is_err() {
            assert_eq!(replay.events(), before, "a refused line counted as replayed");
        }
    }
    for report in replay.finish() {
        for (_, stats) in &report.devices {
            assert!(stats.reserved <= 64 << 20, "above the cap: {stats:?}");
        }
    }
});
