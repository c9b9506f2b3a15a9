//! How the runtime orders work on the host backend: tokens used once and left with the caller
//! when refused, forks (into no branch, detached), transfers failing part-way, the event pools
//! and a failed event record, and unordered fills of one buffer (no data race, under Miri too).

use std::sync::Arc;

use gpu_core::allocator::MemoryKind;
use gpu_core::token::UnwaitedKind;
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::{LiveObjects, RecordingBackend, Runtime, RuntimeConfig};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap()
}

#[test]
fn a_token_used_twice_is_a_typed_error_and_the_deps_stay_with_the_caller() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let token = rt.fill(D0, buffer.all(), 1, &mut vec![]).unwrap();
    let id = token.id();
    rt.wait(token).unwrap();
    let mut deps = vec![gpu_core::token::Token::from_id(id)];
    let err = rt.fill(D0, buffer.all(), 2, &mut deps).unwrap_err();
    assert!(matches!(err, Error::TokenConsumed { .. }), "{err}");
    assert_eq!(
        deps.len(),
        1,
        "a refused call leaves the caller's tokens untouched"
    );
}

/// A fork into no branch is refused; its token, which cannot be handed back, is discarded, so
/// its stream goes back to the pool (and shutdown reports the token as discarded).
#[test]
fn a_fork_into_no_branch_is_refused_and_its_stream_goes_back_to_the_pool() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let filled = rt.fill(D0, buffer.all(), 1, &mut vec![]).unwrap();
    assert!(matches!(
        rt.fork(filled, 0),
        Err(Error::ZeroSize {
            what: "fork branch count"
        })
    ));
    let again = rt.fill(D0, buffer.all(), 2, &mut vec![]).unwrap();
    rt.wait(again).unwrap();
    assert_eq!(
        rt.stats().streams_created,
        1,
        "the refused fork's stream was reused"
    );
    drop(buffer);
    let report = rt.shutdown().unwrap();
    let kinds: Vec<_> = report.program.unwaited.iter().map(|t| t.kind).collect();
    assert_eq!(kinds, [UnwaitedKind::Discarded]);
}

/// A staged transfer that fails part-way discards every token it held, the caller's
/// dependencies included: none stays live (its stream out of the pools) until shutdown.
#[test]
fn a_transfer_failing_part_way_leaves_no_token_behind() {
    const BYTES: usize = 64 << 10;
    let config = RuntimeConfig {
        staging_chunk: 4096,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::with_config(HostBackend::new(HostConfig::with_devices(1)), config).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, BYTES).unwrap();
    let mut data = vec![5u8; BYTES];

    let cleared = rt.fill(D0, buffer.all(), 0, &mut vec![]).unwrap();
    rt.backend().fail_nth(CallKind::Copy, 3);
    let mut after = vec![cleared];
    assert!(rt.upload(D0, buffer.all(), &data, &mut after).is_err());
    assert!(after.is_empty(), "the upload took its dependencies");

    let cleared = rt.fill(D0, buffer.all(), 0, &mut vec![]).unwrap();
    rt.backend().fail_nth(CallKind::Copy, 3);
    let mut after = vec![cleared];
    assert!(
        rt.download(D0, &mut data, buffer.all(), &mut after)
            .is_err()
    );
    assert!(after.is_empty(), "the download took its dependencies");

    drop(buffer);
    let report = rt.shutdown().unwrap();
    let outstanding: Vec<_> = report
        .program
        .unwaited
        .iter()
        .filter(|token| token.kind == UnwaitedKind::Outstanding)
        .collect();
    assert_eq!(outstanding, Vec::<&gpu_core::token::UnwaitedToken>::new());
}

/// Found by the stress run: the allocator's events are created on the device of the stream
/// they are recorded on, but went back to the pool of the memory's device. A buffer of device 0
/// used by a stream of device 1 (a peer copy) then gave device 1's event to device 0, whose
/// next multi-stream free recorded it on a device-0 stream: HOST_INVALID_HANDLE (CUDA's
/// "invalid resource handle"). (A trim completes the pending frees, as memory pressure does.)
#[test]
fn a_free_after_a_peer_use_pools_each_event_with_its_own_device() {
    let rt = runtime();
    let on_d1 = rt.alloc(D1, MemoryKind::Device, 4096).unwrap();
    for round in 0..6u8 {
        let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
        let filled = rt.fill(D0, buffer.all(), round, &mut vec![]).unwrap();
        let mut branches = rt.fork(filled, 2).unwrap();
        let (a, b) = (branches.pop().unwrap(), branches.pop().unwrap());
        // Two streams of device 0 use the buffer, and (every other round) one of device 1.
        let low = rt
            .fill(D0, buffer.span(0, 2048).unwrap(), round, &mut vec![a])
            .unwrap();
        let high = if round % 2 == 0 {
            rt.copy(D1, on_d1.all(), buffer.all(), &mut vec![b])
                .unwrap()
        } else {
            rt.fill(D0, buffer.span(2048, 2048).unwrap(), round, &mut vec![b])
                .unwrap()
        };
        rt.wait(low).unwrap();
        rt.wait(high).unwrap();
        rt.free(buffer).unwrap();
        // Completes the free's fences, giving their events back to the pools.
        rt.trim().unwrap();
    }
    drop(on_d1);
    rt.shutdown().unwrap();
}

/// The planner's events and the allocators' come from one pool per device: every driver event
/// created is counted once in `events_created`, and every event handed out by either (a pool
/// hit saves a create/destroy pair) in `event_acquires`. Before, the allocators kept pools of
/// their own whose creations were counted as both, and whose reuse was never counted.
#[test]
fn one_event_pool_per_device_counts_each_create_once_and_every_reuse() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    for round in 0..8u8 {
        let filled = rt.fill(D0, buffer.all(), round, &mut vec![]).unwrap();
        let mut branches = rt.fork(filled, 2).unwrap();
        let (a, b) = (branches.pop().unwrap(), branches.pop().unwrap());
        let low = rt
            .fill(D0, buffer.span(0, 2048).unwrap(), round, &mut vec![a])
            .unwrap();
        let high = rt
            .fill(D0, buffer.span(2048, 2048).unwrap(), round, &mut vec![b])
            .unwrap();
        // A block used on two streams: its free records an event on the other one.
        let scratch = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
        let used = rt.fill(D0, scratch.all(), 1, &mut vec![low]).unwrap();
        rt.wait(used).unwrap();
        rt.wait(high).unwrap();
        rt.free(scratch).unwrap();
        rt.trim().unwrap();
    }
    let stats = rt.stats();
    let created = rt.backend().calls().of(CallKind::EventCreate);
    assert_eq!(stats.events_created, created, "{stats:?}");
    assert!(
        stats.event_acquires > stats.events_created + 8,
        "the allocators' reuse is counted: {stats:?}"
    );
    assert_eq!(
        stats.pool_calls_saved(),
        (stats.stream_acquires - stats.streams_created) + (stats.event_acquires - created)
    );
    drop(buffer);
    let report = rt.shutdown().unwrap();
    assert_eq!(report.left.events, 0);
}

/// Found by the stress run with faults: one failed event record poisoned the runtime, so every
/// thread's later work failed. The host now stands in for the record (it synchronises the
/// stream) and the waits on that event are skipped: later work succeeds, in order, and the
/// backend sees no wait on an unrecorded event.
#[test]
fn a_failed_event_record_is_replaced_by_a_host_synchronisation() {
    let backend = Arc::new(RecordingBackend::new(HostBackend::new(
        HostConfig::with_devices(2),
    )));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let filled = rt.fill(D0, buffer.all(), 5, &mut vec![]).unwrap();
    let target = rt.alloc(D1, MemoryKind::Device, 4096).unwrap();
    let records = backend.inner().calls().of(CallKind::EventRecord);
    backend.inner().fail_nth(CallKind::EventRecord, 1);
    let mut branches = rt.fork(filled, 2).unwrap();
    let (a, b) = (branches.pop().unwrap(), branches.pop().unwrap());
    assert_eq!(
        backend.inner().calls().of(CallKind::EventRecord),
        records,
        "the fork's record waits until something needs it"
    );
    // Branch `b` runs on another stream, so the fork's event is recorded then, and that
    // record fails: `b`'s copy is ordered by the host's synchronisation instead.
    let copied = rt
        .copy(D1, target.all(), buffer.all(), &mut vec![b])
        .unwrap();
    assert_eq!(backend.inner().stats().faults_injected, 1);
    let mut back = vec![0u8; 4096];
    rt.download(D1, &mut back, target.all(), &mut vec![copied])
        .unwrap();
    assert!(back.iter().all(|&byte| byte == 5));
    rt.wait(a).unwrap();
    // Not poisoned: the next fork records normally.
    let again = rt.fill(D0, buffer.all(), 6, &mut vec![]).unwrap();
    for branch in rt.fork(again, 3).unwrap() {
        rt.wait(branch).unwrap();
    }
    drop((buffer, target));
    let report = rt.shutdown().unwrap();
    assert_eq!(report.program.unwaited_count(), 0);
    assert_eq!(backend.live(), LiveObjects::default());
    assert_eq!(backend.defects(), vec![], "{:#?}", backend.trace());
}

/// A detached fork gives its stream back at once; a branch found done by `wait_if_done` ends
/// without a synchronisation, a released one goes unreported, and a buffer can be freed after a
/// branch (which names the stream its point was recorded on).
#[test]
fn detached_forks_polls_releases_and_frees_after_a_token() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let filled = rt.fill(D0, buffer.all(), 7, &mut vec![]).unwrap();
    let streams_before = rt.stats().stream_acquires;
    let [for_event, for_stream] =
        <[gpu_core::token::Token; 2]>::try_from(rt.fork_detached(filled, 2).unwrap()).unwrap();
    // The stream went back: new work with no dependency takes it from the pool again.
    let other = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let next = rt.fill(D0, other.all(), 1, &mut vec![]).unwrap();
    assert_eq!(
        rt.stats().streams_created,
        1,
        "the pooled stream was reused"
    );
    assert!(rt.stats().stream_acquires > streams_before);
    rt.wait(next).unwrap();
    // Done by now (the same in-order stream ran the fill): ended without a wait.
    let synchronizes = rt.backend().calls().of(CallKind::EventSynchronize);
    let for_event_id = for_event.id();
    assert!(rt.wait_if_done(for_event).unwrap().is_none());
    assert_eq!(
        rt.backend().calls().of(CallKind::EventSynchronize),
        synchronizes
    );
    rt.free_after(buffer, &for_stream).unwrap();
    rt.release(for_stream).unwrap();
    assert!(matches!(
        rt.release(gpu_core::token::Token::from_id(for_event_id)),
        Err(Error::TokenConsumed { .. })
    ));
    drop(other);
    let report = rt.shutdown().unwrap();
    assert_eq!(report.program.unwaited, vec![], "releases are not reported");
}

/// Unordered writes from safe code: eight fills of one buffer with no tokens between them land
/// on different streams, which a GPU allows (the bytes end up holding one of the values). On
/// the host backend that must not be a data race either: its work touches device memory with
/// relaxed atomic bytes. Before, the stream threads wrote the same bytes with plain memset,
/// which ThreadSanitizer reported (run this test under Miri or ThreadSanitizer to check).
#[test]
fn unordered_fills_of_one_buffer_leave_one_of_the_values_and_no_race() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let tokens: Vec<_> = (1..=8u8)
        .map(|value| rt.fill(D0, buffer.all(), value, &mut vec![]).unwrap())
        .collect();
    let mut after = tokens;
    let joined = rt.join(&mut after).unwrap();
    let mut back = vec![0u8; 256];
    rt.download(D0, &mut back, buffer.all(), &mut vec![joined])
        .unwrap();
    assert!(back.iter().all(|&b| (1..=8).contains(&b)), "{back:?}");
}
