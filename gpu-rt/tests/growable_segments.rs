//! Growable segments through the runtime on the host backend's virtual memory model: larger
//! and larger buffers come from one mapped range (no segment allocated), their bytes are usable
//! by work on both devices (the peer granted access), accesses beyond the mapped part are
//! refused, trim and shutdown give every mapped piece and reserved range back, also a tail the
//! peer device used last.

use std::sync::Arc;

use gpu_core::allocator::AllocatorConfig;
use gpu_rt::prelude::*;

const MIB: usize = 1 << 20;

/// A runtime with growable segments on two host devices, and its backend.
fn runtime() -> (Runtime<HostBackend>, Arc<HostBackend>) {
    let config = RuntimeConfig {
        allocator: AllocatorConfig {
            growable_segments: true,
            ..AllocatorConfig::default()
        },
        ..RuntimeConfig::default()
    };
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(2)));
    (
        Runtime::shared(Arc::clone(&backend), config).unwrap(),
        backend,
    )
}

#[test]
fn growing_buffers_come_from_one_mapped_range_and_are_usable_on_both_devices() {
    let (rt, backend) = runtime();
    let (d0, d1) = (DeviceId(0), DeviceId(1));
    for size in [4 * MIB, 6 * MIB, 12 * MIB] {
        let buffer = rt.alloc(d0, MemoryKind::Device, size).unwrap();
        rt.wait(rt.fill(d0, buffer.all(), 5, &mut vec![]).unwrap())
            .unwrap();
        // Device 1 reads the whole buffer through peer access to the mapped pieces.
        let copy = rt.alloc(d1, MemoryKind::Device, size).unwrap();
        rt.wait(rt.copy(d1, copy.all(), buffer.all(), &mut vec![]).unwrap())
            .unwrap();
        let mut out = vec![0u8; size];
        rt.download(d1, &mut out, copy.all(), &mut vec![]).unwrap();
        assert!(out.iter().all(|&b| b == 5), "{size} bytes not copied whole");
    }
    let stats = rt.allocator_stats(d0, MemoryKind::Device).unwrap();
    assert_eq!((stats.segments, stats.segment_allocations), (1, 0));
    assert!(
        stats.maps >= 2 && stats.address_space >= 12 * MIB,
        "{stats:?}"
    );
    // Shutdown waits for all work and gives every mapped piece and reserved range back.
    let report = rt.shutdown().unwrap();
    assert!(report.errors.is_empty() && report.left.reserved_bytes == 0);
    assert!(report.trimmed_bytes >= 12 * MIB);
    assert_eq!(backend.stats().allocations, 0);
}

#[test]
fn the_host_model_refuses_accesses_beyond_the_mapped_part_and_misuse_of_ranges() {
    let backend = HostBackend::new(HostConfig::with_devices(1));
    let d0 = DeviceId(0);
    backend.set_current_device(Some(d0)).unwrap();
    let g = backend.vm_granularity(d0, MemoryKind::Device).unwrap();
    let (base, size) = backend
        .vm_reserve(d0, MemoryKind::Device, 64 * g, g)
        .unwrap()
        .unwrap();
    assert!(size >= g && base % g == 0);
    // Only at the end of the mapped part, in whole granules.
    assert!(backend.vm_map(d0, MemoryKind::Device, base + g, g).is_err());
    assert!(backend.vm_map(d0, MemoryKind::Device, base, g / 2).is_err());
    assert!(backend.vm_map(d0, MemoryKind::Device, base, g).unwrap());
    let stream = backend.stream_create(d0).unwrap();
    // SAFETY: the fill stays in the mapped granule.
    unsafe { backend.fill(stream, base, 7, g) }.unwrap();
    // SAFETY: the fill runs past the mapped granule; the backend refuses it.
    assert!(unsafe { backend.fill(stream, base, 7, 2 * g) }.is_err());
    backend.stream_synchronize(stream).unwrap();
    assert!(
        backend
            .vm_release(d0, MemoryKind::Device, base, size)
            .is_err(),
        "still mapped"
    );
    backend
        .vm_unmap(d0, MemoryKind::Device, base, g, Some(stream))
        .unwrap();
    backend
        .vm_release(d0, MemoryKind::Device, base, size)
        .unwrap();
    backend.stream_destroy(stream).unwrap();
    assert_eq!(backend.stats().allocations, 0);
}

#[test]
fn a_free_tail_last_used_by_the_peer_is_unmapped_after_the_peers_stream() {
    let (rt, backend) = runtime();
    let (d0, d1) = (DeviceId(0), DeviceId(1));
    let buffer = rt.alloc(d0, MemoryKind::Device, 8 * MIB).unwrap();
    let copy = rt.alloc(d1, MemoryKind::Device, 8 * MIB).unwrap();
    // Device 1's stream uses the buffer last: its free follows that stream's work.
    let copied = rt.copy(d1, copy.all(), buffer.all(), &mut vec![]).unwrap();
    drop(buffer);
    rt.wait(copied).unwrap();
    // Its tail goes back in the order of a stream of device 0, the device whose memory it is.
    assert!(rt.trim().unwrap() >= 8 * MIB);
    let stats = rt.allocator_stats(d0, MemoryKind::Device).unwrap();
    assert_eq!((stats.reserved, stats.address_space), (0, 0), "{stats:?}");
    drop(copy);
    rt.shutdown().unwrap();
    assert_eq!(backend.stats().allocations, 0);
}

#[test]
fn the_host_model_lets_a_peer_copy_only_mapped_pieces_granted_to_it() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    let (d0, d1) = (DeviceId(0), DeviceId(1));
    backend.set_current_device(Some(d0)).unwrap();
    let g = backend.vm_granularity(d0, MemoryKind::Device).unwrap();
    let (base, size) = backend
        .vm_reserve(d0, MemoryKind::Device, 4 * g, g)
        .unwrap()
        .unwrap();
    assert!(backend.vm_map(d0, MemoryKind::Device, base, 2 * g).unwrap());
    backend.set_current_device(Some(d1)).unwrap();
    backend.enable_peer_access(d1, d0).unwrap();
    let stream = backend.stream_create(d1).unwrap();
    let target = backend
        .allocate(d1, MemoryKind::Device, 2 * g)
        .unwrap()
        .unwrap();
    // SAFETY: (each copy) both sides are live memory of the sizes copied.
    let copy = |bytes| unsafe { backend.copy(stream, target, base, bytes) };
    assert!(copy(g).is_err(), "nothing granted to device 1 yet");
    // Granted only what is mapped, and only the first piece: the second stays out of reach.
    assert!(backend.vm_set_access(d0, base, 3 * g, d1).is_err());
    backend.vm_set_access(d0, base, g, d1).unwrap();
    copy(g).unwrap();
    assert!(copy(2 * g).is_err());
    backend.vm_set_access(d0, base + g, g, d1).unwrap();
    copy(2 * g).unwrap();
    backend.stream_synchronize(stream).unwrap();
    // Unmapping the second piece takes its grant away; mapping it again does not bring it back.
    backend.set_current_device(Some(d0)).unwrap();
    backend
        .vm_unmap(d0, MemoryKind::Device, base + g, g, None)
        .unwrap();
    assert!(backend.vm_map(d0, MemoryKind::Device, base + g, g).unwrap());
    backend.set_current_device(Some(d1)).unwrap();
    assert!(copy(2 * g).is_err());
    copy(g).unwrap();
    backend.stream_synchronize(stream).unwrap();
    backend.stream_destroy(stream).unwrap();
    backend.free(d1, MemoryKind::Device, target, None).unwrap();
    backend.set_current_device(Some(d0)).unwrap();
    backend
        .vm_unmap(d0, MemoryKind::Device, base, 2 * g, None)
        .unwrap();
    backend
        .vm_release(d0, MemoryKind::Device, base, size)
        .unwrap();
}

/// Copies `len` bytes at `src` (device 0's memory) with a plain copy on a stream of device 1,
/// straight through the backend (the runtime would use a peer copy, which needs no grant): the
/// bytes, or the backend's refusal.
fn plain_copy_on_device_1(backend: &HostBackend, src: usize, len: usize) -> Result<Vec<u8>> {
    let d1 = DeviceId(1);
    backend.set_current_device(Some(d1))?;
    let stream = backend.stream_create(d1)?;
    let target = backend.allocate(d1, MemoryKind::Device, len)?.unwrap();
    // SAFETY: both sides are live memory of `len` bytes (the backend checks the source's
    // grant and refuses the copy without one).
    let copied = unsafe { backend.copy(stream, target, src, len) };
    backend.stream_synchronize(stream)?;
    // SAFETY: the host backend's device memory is host memory; the copy has finished.
    let bytes = unsafe { std::slice::from_raw_parts(target as *const u8, len) }.to_vec();
    backend.stream_destroy(stream)?;
    backend.free(d1, MemoryKind::Device, target, None)?;
    backend.set_current_device(None)?;
    copied.map(|()| bytes)
}

#[test]
fn a_peer_reset_gets_its_access_to_mapped_pieces_back() {
    let (rt, backend) = runtime();
    let (d0, d1) = (DeviceId(0), DeviceId(1));
    let buffer = rt.alloc(d0, MemoryKind::Device, 4 * MIB).unwrap();
    rt.wait(rt.fill(d0, buffer.all(), 9, &mut vec![]).unwrap())
        .unwrap();
    let src = buffer.address();
    // The runtime granted device 1 the pieces it mapped.
    let before = plain_copy_on_device_1(&backend, src, 4 * MIB).unwrap();
    assert!(before.iter().all(|&b| b == 9));
    // The reset of device 1 takes its access to device 0's mapped pieces away (the host model
    // does, as a driver may); the runtime grants them again with the peer links.
    rt.reset_device(d1).unwrap();
    let after = plain_copy_on_device_1(&backend, src, 4 * MIB).unwrap();
    assert!(after.iter().all(|&b| b == 9));
    drop(buffer);
    rt.shutdown().unwrap();
}
