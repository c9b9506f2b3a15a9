//! Random lock/unlock/lookup programs, with injected driver failures and memory pinned by
//! someone else, run on the lock table and on its brute-force model side by side; locks are
//! raw or held by guards, and each kind is released only by its own unlock.
//!
//! Addresses come from a small arena (so nested, overlapping and adjacent ranges are common)
//! or from the top of the address space; the test counts how often each case occurred and
//! fails if the generator never produced one of them.

use std::cell::RefCell;
use std::collections::BTreeMap;

use gpu_core::DeviceId;
use gpu_core::lock_table::LockOwner;
use gpu_core::lock_table::model::{CallKind, Case, Harness, Op, UnlockBy};
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

fn owner() -> impl Strategy<Value = LockOwner> {
    prop_oneof![Just(LockOwner::Raw), Just(LockOwner::Guard)]
}

fn unlock_by() -> impl Strategy<Value = UnlockBy> {
    prop_oneof![
        Just(UnlockBy::Raw),
        Just(UnlockBy::RawExact),
        Just(UnlockBy::Guard)
    ]
}

fn op(top: bool) -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        Just(CallKind::Pin),
        Just(CallKind::Unpin),
        Just(CallKind::Query)
    ];
    prop_oneof![
        40 => (address(top), length(), owner())
            .prop_map(|(ptr, len, owner)| Op::Lock { ptr, len, owner }),
        20 => (address(top), unlock_by()).prop_map(|(ptr, by)| Op::Unlock { ptr, by }),
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
        Case::NestedMixedOwners,
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
        Case::UnlockOwnedByOthers,
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
                let owner = if action & 0x80 == 0 {
                    LockOwner::Raw
                } else {
                    LockOwner::Guard
                };
                let op = match action % 4 {
                    0 | 1 => Op::Lock {
                        ptr,
                        len: pages * 48,
                        owner,
                    },
                    2 => Op::Unlock {
                        ptr: ptr + 3,
                        by: if owner == LockOwner::Raw {
                            UnlockBy::Raw
                        } else {
                            UnlockBy::Guard
                        },
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

/// One step of a program of guards and raw locks over one arena.
#[derive(Clone, Debug)]
enum GuardStep {
    /// A guard locks `[ptr, ptr + len)` (kept if the lock succeeds).
    Guard { ptr: usize, len: usize },
    /// The guard at this position (modulo the live guards) is dropped: its own unlock.
    Drop(usize),
    /// A raw lock of `[ptr, ptr + len)`.
    RawLock { ptr: usize, len: usize },
    /// A raw unlock through `ptr`, exact-start or not: however many, whenever.
    RawUnlock { ptr: usize, exact: bool },
    /// The next driver call of this kind fails.
    Fail(CallKind),
}

fn guard_step() -> impl Strategy<Value = GuardStep> {
    let place = || (address(false), 1usize..64);
    let kind = prop_oneof![
        Just(CallKind::Pin),
        Just(CallKind::Unpin),
        Just(CallKind::Query)
    ];
    prop_oneof![
        20 => place().prop_map(|(ptr, len)| GuardStep::Guard { ptr, len }),
        10 => any::<usize>().prop_map(GuardStep::Drop),
        20 => place().prop_map(|(ptr, len)| GuardStep::RawLock { ptr, len }),
        30 => (address(false), any::<bool>())
            .prop_map(|(ptr, exact)| GuardStep::RawUnlock { ptr, exact }),
        3 => kind.prop_map(GuardStep::Fail),
    ]
}

/// Whether a lock succeeded.
fn locked(case: Case) -> bool {
    matches!(
        case,
        Case::Pinned
            | Case::PinnedAdjacent
            | Case::Nested
            | Case::NestedMixedOwners
            | Case::External
    )
}

/// Whether an unlock succeeded.
fn unlocked(case: Case) -> bool {
    matches!(case, Case::UnlockNested | Case::UnlockLast)
}

/// Runs `op` (an unlock), once more if an injected driver failure refused it: a failed call
/// changes nothing, so the runtime's guards retry their unlock once.
fn unlock_retrying(harness: &mut Harness, op: Op) -> Case {
    match harness.apply(op) {
        Case::DriverFailure => harness.apply(op),
        case => case,
    }
}

/// The rule a guard relies on, with guard and raw locks mixed at random (and checked against
/// the model at every step): while a guard lives, its whole range stays pinned whatever raw
/// unlocks run (they release raw locks or are refused), and its own unlock succeeds; the
/// table's counts say how many locks of each kind are held; once every guard and raw lock is
/// released, nothing is pinned.
#[test]
fn raw_unlocks_never_take_a_live_guards_pin() {
    let mut runner = TestRunner::new(config(256));
    let program = prop::collection::vec(guard_step(), 1..200);
    let refused = RefCell::new(0u64);
    runner
        .run(&program, |steps| {
            let mut harness = Harness::new(1);
            let mut guards: Vec<(usize, usize)> = Vec::new();
            let mut raw_locks = 0usize;
            for step in steps {
                match step {
                    GuardStep::Guard { ptr, len } => {
                        let owner = LockOwner::Guard;
                        if locked(harness.apply(Op::Lock { ptr, len, owner })) {
                            guards.push((ptr, len));
                        }
                    }
                    GuardStep::Drop(at) if !guards.is_empty() => {
                        let (ptr, _) = guards.swap_remove(at % guards.len());
                        let by = UnlockBy::Guard;
                        let case = unlock_retrying(&mut harness, Op::Unlock { ptr, by });
                        prop_assert!(unlocked(case), "a guard's own unlock failed: {case:?}");
                    }
                    GuardStep::Drop(_) => {}
                    GuardStep::RawLock { ptr, len } => {
                        let owner = LockOwner::Raw;
                        if locked(harness.apply(Op::Lock { ptr, len, owner })) {
                            raw_locks += 1;
                        }
                    }
                    GuardStep::RawUnlock { ptr, exact } => {
                        let by = if exact {
                            UnlockBy::RawExact
                        } else {
                            UnlockBy::Raw
                        };
                        match harness.apply(Op::Unlock { ptr, by }) {
                            case if unlocked(case) => raw_locks -= 1,
                            Case::UnlockOwnedByOthers => *refused.borrow_mut() += 1,
                            _ => {}
                        }
                    }
                    GuardStep::Fail(kind) => {
                        harness.apply(Op::FailNext(kind));
                    }
                }
                let held = harness.table.stats().held;
                prop_assert_eq!(held.guards, guards.len(), "one lock per live guard");
                prop_assert_eq!(held.raw, raw_locks, "one lock per raw lock not released");
                for &(ptr, len) in &guards {
                    prop_assert!(
                        harness
                            .table
                            .lookup(ptr, len, DeviceId(0))
                            .unwrap()
                            .is_some(),
                        "a live guard's range [{:#x}, +{}) is not pinned",
                        ptr,
                        len
                    );
                }
            }
            for (ptr, _) in guards.drain(..) {
                let case = unlock_retrying(
                    &mut harness,
                    Op::Unlock {
                        ptr,
                        by: UnlockBy::Guard,
                    },
                );
                prop_assert!(unlocked(case), "a guard's own unlock failed: {case:?}");
            }
            let raw: Vec<(usize, usize)> = harness
                .table
                .entries()
                .map(|e| (e.range.start, e.locks.raw))
                .collect();
            for (ptr, count) in raw {
                for _ in 0..count {
                    let by = UnlockBy::RawExact;
                    let case = unlock_retrying(&mut harness, Op::Unlock { ptr, by });
                    prop_assert!(unlocked(case), "a raw lock's unlock failed: {case:?}");
                }
            }
            prop_assert_eq!(harness.table.stats().entries, 0);
            prop_assert!(harness.table_driver.pinned.is_empty());
            Ok(())
        })
        .unwrap();
    let refused = refused.into_inner();
    println!("raw unlocks refused for a guard's pin: {refused}");
    assert!(
        refused > 0,
        "the generator never aimed a raw unlock at a guard's pin"
    );
}
