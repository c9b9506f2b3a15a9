//! The backend's life: the work log keeping the most recent items, and dropping the backend
//! running queued work, joining its workers and freeing everything.

use super::*;

#[test]
fn the_work_log_keeps_the_most_recent_items() {
    let b = HostBackend::new(HostConfig {
        work_log_capacity: 2,
        ..HostConfig::default()
    });
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let mut host = [0u8; 3];
    // The address is taken once: borrowing `host` again while the stream fills it would race
    // with that fill (Miri saw it).
    let base = addr_mut(&mut host);
    for (i, value) in (1..=3u8).enumerate() {
        // SAFETY: byte `i` of `host`, untouched until the synchronise below.
        unsafe { b.fill(s, base + i, value, 1) }.unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert_eq!(host, [1, 2, 3]);
    let values: Vec<u8> = b
        .work_log()
        .iter()
        .map(|r| match r.op {
            WorkOp::Fill {
                value: FillValue::U8(value),
                ..
            } => value,
            _ => 0,
        })
        .collect();
    assert_eq!(values, [2, 3]);
    b.clear_work_log();
    assert!(b.work_log().is_empty());
    b.stream_destroy(s).unwrap();
}

#[test]
fn dropping_the_backend_runs_queued_work_joins_workers_and_frees_everything() {
    let ran = Arc::new(AtomicUsize::new(0));
    let host = vec![0u8; 4096];
    let b = backend();
    let counter = ran.clone();
    b.register_kernel("count", move |_, _| {
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    let registered = Arc::new(AtomicBool::new(false));
    for device in [D0, D1] {
        b.set_current_device(Some(device)).unwrap();
        let s = b.stream_create(device).unwrap();
        let e = b.event_create(device).unwrap();
        let a = b
            .allocate(device, MemoryKind::Device, 1 << 20)
            .unwrap()
            .unwrap();
        b.allocate(device, MemoryKind::HostPinned, 4096)
            .unwrap()
            .unwrap();
        // SAFETY: no pointer arguments; `a` is live until the stream-ordered free below.
        unsafe {
            for _ in 0..3 {
                launch_named(&b, s, device, "count", LaunchDims::linear(1, 1), &[]).unwrap();
            }
            b.fill(s, a, 1, 1 << 20).unwrap();
        }
        b.event_record(e, s).unwrap();
        b.free(device, MemoryKind::Device, a, Some(s)).unwrap();
    }
    let draining = b.stream_create(D1).unwrap();
    // SAFETY: no pointer arguments.
    unsafe { launch_named(&b, draining, D1, "count", LaunchDims::linear(1, 1), &[]) }.unwrap();
    b.stream_destroy(draining).unwrap();
    b.host_register(ByteRange::new(addr(&host), 4096).unwrap(), &mut [0usize; 2])
        .unwrap();
    registered.store(true, Ordering::Relaxed);
    drop(b);
    assert_eq!(ran.load(Ordering::Relaxed), 7);
    // Every clone of the kernel (registry, loaded kernels, queued launches) is gone: the
    // workers that held them have been joined.
    assert_eq!(Arc::strong_count(&ran), 1);
    assert!(registered.load(Ordering::Relaxed));
}
