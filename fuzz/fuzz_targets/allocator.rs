//! The caching allocator on operation sequences from the fuzzer, checked by the same harness as
//! the property test (`gpu_core::allocator::model`): overlap, containment in driver segments,
//! stream safety, path choice, consistency after injected failures, a clean return at the end.
#![no_main]

use arbitrary::Arbitrary;
use gpu_core::allocator::AllocatorConfig;
use gpu_core::allocator::model::{Harness, Step, capabilities};
use libfuzzer_sys::fuzz_target;

/// Sizes that reach every pool: small, mid-size, dedicated, and anything at all.
#[derive(Arbitrary, Debug)]
enum Size {
    Small(u16),
    Mid(u8),
    Large(u8),
    Any(usize),
}

impl Size {
    fn bytes(&self) -> usize {
        match *self {
            Size::Small(bytes) => bytes as usize,
            Size::Mid(mib) => (1 << 20) + (mib as usize) * (40 << 10),
            Size::Large(mib) => (10 + mib as usize % 40) << 20,
            Size::Any(bytes) => bytes,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum FuzzStep {
    Allocate {
        kind: u8,
        size: Size,
        alignment_log2: u8,
        odd_alignment: Option<u16>,
        stream: Option<u8>,
        deps: Vec<u8>,
    },
    Use(u16, u8),
    Free(u16, bool),
    Progress(u8, u8),
    FailSoon(u8),
    Trim,
    Retire(u8),
}

#[derive(Arbitrary, Debug)]
struct Setup {
    stream_ordered: [bool; 3],
    managed: bool,
    split_limit: bool,
    release_before_growing: bool,
    streams: u8,
    capacity_mib: Option<u8>,
}

fuzz_target!(|input: (Setup, Vec<FuzzStep>)| {
    let (setup, steps) = input;
    let config = AllocatorConfig {
        max_split_size: if setup.split_limit {
            16 << 20
        } else {
            usize::MAX
        },
        release_before_growing: setup.release_before_growing,
        ..AllocatorConfig::default()
    };
    let capacity = setup
        .capacity_mib
        .map_or(usize::MAX / 2, |mib| (16 + mib as usize) << 20);
    let mut harness = Harness::new(
        capabilities(setup.stream_ordered, setup.managed),
        config,
        1 + setup.streams % 4,
        capacity,
    );
    for (number, step) in steps.into_iter().enumerate() {
        let step = match step {
            FuzzStep::Allocate {
                kind,
                size,
                alignment_log2,
                odd_alignment,
                stream,
                deps,
            } => Step::Allocate {
                kind,
                size: size.bytes(),
                alignment: odd_alignment.map_or(1usize << (alignment_log2 % 26), usize::from),
                stream,
                deps: deps.into_iter().take(4).collect(),
            },
            FuzzStep::Use(pick, stream) => Step::Use {
                pick: pick.into(),
                stream,
            },
            FuzzStep::Free(pick, idle) => Step::Free {
                pick: pick.into(),
                idle,
            },
            FuzzStep::Progress(stream, count) => Step::Progress { stream, count },
            FuzzStep::FailSoon(after) => Step::FailSoon { after: after % 16 },
            FuzzStep::Trim => Step::Trim,
            FuzzStep::Retire(stream) => Step::Retire { stream },
        };
        if let Err(message) = harness.step(&step) {
            panic!("step {number} {step:?}: {message}");
        }
    }
    if let Err(message) = harness.finish() {
        panic!("at the end: {message}");
    }
});
