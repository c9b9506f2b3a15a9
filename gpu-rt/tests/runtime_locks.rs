//! Locked host memory through the runtime on the host backend: guards used directly and unpinned
//! after their transfers, raw guards nesting, a raw unlock unable to take a guard's pin, and a
//! refused unpin tried again.

use std::sync::Arc;

use gpu_core::allocator::MemoryKind;
use gpu_core::error::ByteRange;
use gpu_core::lock_table::{LockCounts, LockOutcome, LockOwner};
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::Runtime;

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap()
}

#[test]
fn locked_host_memory_is_used_directly_and_unpinned_after_its_transfers() {
    let rt = Arc::new(runtime());
    let mut host = vec![5u8; 1 << 16];
    let buffer = rt.alloc(D0, MemoryKind::Device, 1 << 16).unwrap();
    let locked = rt.lock_host(&mut host).unwrap();
    let address = locked.span(0, 1).unwrap().address();
    assert!(rt.pinned_address(address, 1 << 16, D0).unwrap().is_some());
    let uploaded = rt
        .copy(
            D0,
            buffer.all(),
            locked.span(0, 1 << 16).unwrap(),
            &mut vec![],
        )
        .unwrap();
    locked.unlock().unwrap(); // waits for the copy that reads it
    assert_eq!(rt.pinned_address(address, 1, D0).unwrap(), None);
    assert_eq!(rt.stats().locks.entries, 0);
    let mut back = vec![0u8; 1 << 16];
    rt.download(D0, &mut back, buffer.all(), &mut vec![uploaded])
        .unwrap();
    assert!(back.iter().all(|&b| b == 5));
}

/// Raw guards (memory the caller manages, e.g. a C program's) nest: a range inside a pinned
/// one is counted, not pinned again; a partial overlap is refused; the last guard unpins, and
/// each guard's transfers land in the caller's memory.
#[test]
fn raw_locked_host_guards_nest_and_carry_transfers() {
    let rt = runtime();
    let mut host = vec![0u8; 4096];
    let base = host.as_mut_ptr();
    let buffer = rt.alloc(D0, MemoryKind::Device, 1024).unwrap();
    let filled = rt.fill(D0, buffer.all(), 7, &mut vec![]).unwrap();
    // SAFETY: `host` outlives both guards and is not touched until they are dropped.
    let (outer, inner) = unsafe {
        (
            rt.lock_host_raw(base, 4096).unwrap(),
            rt.lock_host_raw(base.add(1024), 1024).unwrap(),
        )
    };
    assert_eq!(rt.stats().locks.entries, 1);
    assert_eq!(rt.stats().locks.driver_pins, 1);
    // SAFETY: as above.
    let overlap = unsafe { rt.lock_host_raw(base.add(3072), 2048) }.err();
    assert!(
        matches!(overlap, Some(Error::LockOverlap { .. })),
        "{overlap:?}"
    );
    let copied = rt
        .copy(
            D0,
            inner.span(0, 1024).unwrap(),
            buffer.all(),
            &mut vec![filled],
        )
        .unwrap();
    rt.wait(copied).unwrap();
    inner.unlock().unwrap();
    assert_eq!(rt.stats().locks.entries, 1, "the outer guard still pins");
    drop(outer);
    assert_eq!(rt.stats().locks.entries, 0);
    assert_eq!(rt.stats().locks.driver_unpins, 1);
    assert!(host[1024..2048].iter().all(|&b| b == 7));
    assert!(host[..1024].iter().chain(&host[2048..]).all(|&b| b == 0));
}

/// Issue 20 ("safe means safe"), point 5: `unlock_range` (safe code) took away the pin of a
/// live `LockedHost`, so the lookup said "not pinned" while the guard still handed out spans,
/// and the guard's own unlock then failed with `NotLocked`. The guard owns its lock now: a raw
/// unlock is a typed error that changes nothing, a raw lock nested in the guard's range is the
/// raw unlock's to release, transfers through the guard go on, and the guard unpins cleanly.
#[test]
fn a_raw_unlock_cannot_take_the_pin_of_a_live_locked_host() {
    let rt = runtime();
    let mut host = vec![0u8; 4096];
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let filled = rt.fill(D0, buffer.all(), 9, &mut vec![]).unwrap();
    let mut locked = rt.lock_host(&mut host).unwrap();
    let address = locked.span(0, 1).unwrap().address();
    let entry = ByteRange::new(address, 4096).unwrap();
    let guard_only = LockCounts { raw: 0, guards: 1 };
    let owned = |ptr| Error::PinOwned {
        ptr,
        entry,
        releaser: LockOwner::Raw,
        held: guard_only,
    };
    let before = rt.stats().locks;
    assert_eq!(before.held, guard_only, "the guard's lock is the guard's");
    assert_eq!(rt.unlock_range(address + 100), Err(owned(address + 100)));
    assert_eq!(rt.unlock_range(address), Err(owned(address)));
    assert_eq!(rt.stats().locks, before, "a refused unlock changes nothing");
    assert!(rt.pinned_address(address, 4096, D0).unwrap().is_some());

    let nested = rt.lock_range(address + 64, 64).unwrap();
    assert_eq!(
        (nested.outcome, nested.locks),
        (LockOutcome::Nested, LockCounts { raw: 1, guards: 1 })
    );
    assert_eq!(rt.unlock_range(address).unwrap().remaining, guard_only);
    assert_eq!(rt.unlock_range(address), Err(owned(address)));
    assert!(rt.pinned_address(address, 4096, D1).unwrap().is_some());

    let copied = rt
        .copy(
            D0,
            locked.span(0, 4096).unwrap(),
            buffer.all(),
            &mut vec![filled],
        )
        .unwrap();
    rt.wait(copied).unwrap();
    assert!(locked.memory().unwrap().iter().all(|&b| b == 9));
    drop(locked);
    let after = rt.stats().locks;
    assert_eq!((after.entries, after.held), (0, LockCounts::default()));
    assert_eq!(after.driver_unpins, before.driver_unpins + 1);
    assert_eq!(rt.pinned_address(address, 1, D0).unwrap(), None);
    assert_eq!(rt.backend().stats().registered_ranges, 0);
    drop(buffer);
    assert_eq!(rt.shutdown().unwrap().unpinned_ranges, 0, "nothing left");
}

/// Found by the stress run with faults (shutdown still found pins): a `LockedHost` whose unpin
/// the driver refused was gone, and its memory stayed pinned after the caller freed it. A
/// refused unpin changes nothing, so unlocking tries once more.
#[test]
fn a_refused_unpin_of_locked_host_memory_is_tried_again() {
    let rt = runtime();
    let mut memory = vec![3u8; 8192];
    let locked = rt.lock_host(&mut memory).unwrap();
    rt.backend().fail_nth(CallKind::HostUnregister, 1);
    locked.unlock().unwrap();
    assert_eq!(rt.stats().locks.entries, 0);
    assert_eq!(rt.backend().stats().registered_ranges, 0);
    assert_eq!(rt.backend().stats().faults_injected, 1);
    let report = rt.shutdown().unwrap();
    assert_eq!(report.unpinned_ranges, 0);
}
