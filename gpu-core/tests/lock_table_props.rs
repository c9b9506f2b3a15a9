//! Random lock/unlock/lookup programs, with injected driver failures and memory pinned by
//! someone else, run on the lock table and on its brute-force model side by side.
//!
//! Addresses come from a small arena (so nested, overlapping and adjacent ranges are common)
//! or from the top of the address space; the test counts how often each case occurred and
//! fails if the generator never produced one of them.

use std::cell::RefCell;
use std::collections::BTreeMap;

use gpu_core::lock_table::model::{CallKind, Case, Harness, Op};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const ARENA_BASE: usize = 0x1000;
const ARENA_BYTES: usize = 256;

/// A start address: mostly inside the arena at the bottom or at the top of the address
/// space, sometimes null.
fn address(top: bool) -> impl Strategy<Value = usize> {
    let base = if top {
        usize::MAX - (ARENA_BYTES - 1)
    } else {
        ARENA_BASE
    };
    prop_oneof![
        30 => (0..ARENA_BYTES).prop_map(move |offset| base + offset),
        1 => Just(0usize),
    ]
}

/// A length: mostly short, sometimes zero, sometimes long enough to overflow at the top.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        20 => 1usize..48,
        4 => 48usize..ARENA_BYTES,
        1 => Just(0usize),
        1 => Just(usize::MAX / 2),
    ]
}

fn op(top: bool) -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        Just(CallKind::Pin),
        Just(CallKind::Unpin),
        Just(CallKind::Query)
    ];
    prop_oneof![
        40 => (address(top), length()).prop_map(|(ptr, len)| Op::Lock { ptr, len }),
        20 => (address(top), any::<bool>()).prop_map(|(ptr, e)| Op::Unlock { ptr, exact: e }),
        30 => (address(top), length(), 0u32..3)
            .prop_map(|(ptr, len, device)| Op::Lookup { ptr, len, device }),
        4 => kind.prop_map(Op::FailNext),
        4 => (address(top), 1usize..64).prop_map(|(ptr, len)| Op::PinElsewhere { ptr, len }),
    ]
}

fn program() -> impl Strategy<Value = Vec<Op>> {
    any::<bool>().prop_flat_map(|top| prop::collection::vec(op(top), 1..160))
}

/// `cases` programs; a failure prints its shrunk program instead of writing a file.
fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

#[test]
fn table_agrees_with_the_model_on_random_programs() {
    let counts: RefCell<BTreeMap<Case, u64>> = RefCell::default();
    let mut runner = TestRunner::new(config(512));
    runner
        .run(&program(), |ops| {
            let mut harness = Harness::new(2);
            for op in ops {
                *counts.borrow_mut().entry(harness.apply(op)).or_default() += 1;
            }
            Ok(())
        })
        .unwrap();
    let counts = counts.into_inner();
    println!("lock table program cases: {counts:#?}");
    let all = [
        Case::Pinned,
        Case::PinnedAdjacent,
        Case::Nested,
        Case::External,
        Case::OverlapSwallows,
        Case::OverlapEntryStartsInside,
        Case::OverlapRunsPastEnd,
        Case::ExternalTooSmall,
        Case::BadArgument,
        Case::DriverFailure,
        Case::UnlockNested,
        Case::UnlockLast,
        Case::UnlockUnknown,
        Case::LookupHit,
        Case::LookupMiss,
    ];
    for case in all {
        assert!(
            counts.get(&case).copied().unwrap_or(0) > 0,
            "the generator never produced {case:?}"
        );
    }
}

/// Many entries, so the index splits and merges chunks, checked against the model.
#[test]
fn table_agrees_with_the_model_at_scale() {
    let mut runner = TestRunner::new(config(16));
    let program = prop::collection::vec((0usize..4000, 1usize..3, any::<u8>()), 500..3000);
    runner
        .run(&program, |steps| {
            let mut harness = Harness::new(1);
            for (slot, pages, action) in steps {
                let ptr = 0x10_0000 + slot * 64;
                let op = match action % 4 {
                    0 | 1 => Op::Lock {
                        ptr,
                        len: pages * 48,
                    },
                    2 => Op::Unlock {
                        ptr: ptr + 3,
                        exact: false,
                    },
                    _ => Op::Lookup {
                        ptr: ptr + 5,
                        len: 40,
                        device: 0,
                    },
                };
                harness.apply(op);
            }
            Ok(())
        })
        .unwrap();
}
