//! Copies between devices on the host backend, which models the CUDA driver's rule (measured on
//! two H100s): a plain copy on one device's stream refuses another device's stream-ordered
//! memory unless peer access lets it reach that device. The runtime routes copies between two
//! devices' memory through the backend's peer copy, turns peer access on at open where the
//! driver allows it, and reports both in its stats.

use gpu_core::allocator::MemoryKind;
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::{PeerLink, Runtime, RuntimeConfig};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);
const D2: DeviceId = DeviceId(2);
const BYTES: usize = 4096;

fn runtime(devices: usize, peer_access: bool) -> Runtime<HostBackend> {
    let config = RuntimeConfig {
        peer_access,
        ..RuntimeConfig::default()
    };
    Runtime::with_config(HostBackend::new(HostConfig::with_devices(devices)), config).unwrap()
}

/// Allocates a stream-ordered buffer on `from` filled with `value`, copies it into a buffer of
/// `to` on `on`'s stream, and reads the copy back.
fn copy_across(
    rt: &Runtime<HostBackend>,
    from: DeviceId,
    to: DeviceId,
    on: DeviceId,
    value: u8,
) -> Result<Vec<u8>, Error> {
    let (source, allocated) = rt.alloc_after(from, MemoryKind::Device, BYTES, &mut vec![])?;
    let filled = rt.fill(from, source.all(), value, &mut vec![allocated])?;
    let target = rt.alloc(to, MemoryKind::Device, BYTES)?;
    let copied = rt.copy(on, target.all(), source.all(), &mut vec![filled])?;
    let mut out = vec![0u8; BYTES];
    rt.download(to, &mut out, target.all(), &mut vec![copied])?;
    Ok(out)
}

/// The defect the two-H100 stress run found (`cuMemcpyAsync failed:
/// CUDA_ERROR_INVALID_VALUE`): without peer access, a copy of another device's stream-ordered
/// memory went to the driver as a plain copy. Fails before the fix on the host backend.
#[test]
fn a_copy_of_another_devices_stream_ordered_memory_arrives_without_peer_access() {
    let rt = runtime(2, false);
    assert_eq!(rt.peer_link(D0, D1), Ok(&PeerLink::OptedOut));
    for (from, to, on, value) in [(D0, D1, D1, 0x11), (D0, D1, D0, 0x22), (D1, D0, D0, 0x33)] {
        let out = copy_across(&rt, from, to, on, value).unwrap();
        assert_eq!(out, vec![value; BYTES], "{from} -> {to} on {on}");
    }
    let stats = rt.stats();
    assert_eq!(stats.peer_access, vec![]);
    assert_eq!((stats.peer_copies_direct, stats.peer_copies_staged), (0, 3));
    rt.shutdown().unwrap();
}

#[test]
fn peer_access_is_enabled_at_open_both_ways_and_copies_go_direct() {
    let rt = runtime(2, true);
    assert_eq!(rt.peer_link(D0, D1), Ok(&PeerLink::Enabled));
    assert_eq!(rt.peer_link(D1, D0), Ok(&PeerLink::Enabled));
    assert_eq!(rt.peer_link(D0, D0), Ok(&PeerLink::SameDevice));
    assert!(matches!(
        rt.peer_link(D0, D2),
        Err(Error::UnknownDevice { device: D2, .. })
    ));
    let out = copy_across(&rt, D1, D0, D1, 0x44).unwrap();
    assert_eq!(out, vec![0x44; BYTES]);
    let stats = rt.stats();
    assert_eq!(stats.peer_access, vec![(D0, D1), (D1, D0)]);
    assert_eq!((stats.peer_copies_direct, stats.peer_copies_staged), (1, 0));
    rt.shutdown().unwrap();
}

#[test]
fn devices_without_a_link_copy_staged_and_the_runtime_says_why() {
    let mut config = HostConfig::with_devices(3);
    config.devices[2].peer_link = false;
    let rt = Runtime::new(HostBackend::new(config)).unwrap();
    assert_eq!(rt.peer_link(D0, D1), Ok(&PeerLink::Enabled));
    assert_eq!(rt.peer_link(D0, D2), Ok(&PeerLink::Impossible));
    assert_eq!(rt.peer_link(D2, D1), Ok(&PeerLink::Impossible));
    // Device 2 runs a copy between 0 and 1 (a third device's stream), then 0 -> 2 staged.
    assert_eq!(
        copy_across(&rt, D0, D1, D2, 0x55).unwrap(),
        vec![0x55; BYTES]
    );
    assert_eq!(
        copy_across(&rt, D0, D2, D2, 0x66).unwrap(),
        vec![0x66; BYTES]
    );
    let stats = rt.stats();
    assert_eq!((stats.peer_copies_direct, stats.peer_copies_staged), (1, 1));
    rt.shutdown().unwrap();
}

/// Device memory and host memory: the copy runs on a device that reaches the memory. Another
/// device's stream would be refused by the driver for stream-ordered memory, so it is a typed
/// error before anything is queued, with or without a stream-ordered buffer.
#[test]
fn host_memory_and_another_devices_memory_need_a_device_that_reaches_it() {
    for peer_access in [false, true] {
        let rt = runtime(2, peer_access);
        let (device, allocated) = rt
            .alloc_after(D0, MemoryKind::Device, BYTES, &mut vec![])
            .unwrap();
        rt.wait(allocated).unwrap();
        let pinned = rt.alloc(D0, MemoryKind::HostPinned, BYTES).unwrap();
        let mut after = vec![];
        let result = rt.copy(D1, pinned.all(), device.all(), &mut after);
        if peer_access {
            let token = result.unwrap();
            rt.wait(token).unwrap();
        } else {
            assert_eq!(
                result.err(),
                Some(Error::WrongDevice {
                    expected: D0,
                    found: D1
                })
            );
        }
        let copied = rt.copy(D0, pinned.all(), device.all(), &mut after).unwrap();
        rt.wait(copied).unwrap();
        let stats = rt.stats();
        assert_eq!(stats.peer_copies_direct + stats.peer_copies_staged, 0);
        drop((device, pinned));
        rt.shutdown().unwrap();
    }
}

/// A driver that refuses to enable a pair leaves that pair staged, the error kept, and the
/// runtime usable.
#[test]
fn a_refused_enable_is_reported_per_pair_and_the_pair_copies_staged() {
    let backend = HostBackend::new(HostConfig::with_devices(2));
    backend.fail_nth(CallKind::EnablePeerAccess, 2);
    let rt = Runtime::new(backend).unwrap();
    assert_eq!(rt.peer_link(D0, D1), Ok(&PeerLink::Enabled));
    let Ok(PeerLink::Refused(error)) = rt.peer_link(D1, D0) else {
        panic!("{:?}", rt.peer_link(D1, D0));
    };
    assert!(error.to_string().contains("enable_peer_access"), "{error}");
    assert_eq!(
        copy_across(&rt, D0, D1, D1, 0x77).unwrap(),
        vec![0x77; BYTES]
    );
    let stats = rt.stats();
    assert_eq!(stats.peer_access, vec![(D0, D1)]);
    assert_eq!((stats.peer_copies_direct, stats.peer_copies_staged), (0, 1));
    rt.shutdown().unwrap();
}

/// A buffer of device 0 last used by a copy on device 1's stream: its segment's lane is that
/// stream, and the driver frees in stream order only on the memory's own device (the host
/// backend refuses the other, as cuMemFreeAsync would). Freeing it and trimming gives the
/// memory back with nothing left and no error.
#[test]
fn memory_last_used_on_another_devices_stream_is_freed_and_trimmed_cleanly() {
    for stream_ordered in [false, true] {
        let rt = runtime(2, true);
        let buffer = if stream_ordered {
            let (buffer, token) = rt
                .alloc_after(D0, MemoryKind::Device, BYTES, &mut vec![])
                .unwrap();
            rt.wait(token).unwrap();
            buffer
        } else {
            rt.alloc(D0, MemoryKind::Device, BYTES).unwrap()
        };
        let other = rt.alloc(D1, MemoryKind::Device, BYTES).unwrap();
        let copied = rt.copy(D1, other.all(), buffer.all(), &mut vec![]).unwrap();
        drop(buffer);
        rt.trim().unwrap();
        rt.wait(copied).unwrap();
        drop(other);
        rt.trim().unwrap();
        let report = rt.shutdown().unwrap();
        assert_eq!(report.trimmed_bytes, 0, "stream-ordered {stream_ordered}");
    }
}

/// The trace says which path each peer copy took: `peer_copy sN direct` where both devices
/// were given access to each other through the backend, `staged` where not; the text form
/// reads back to the same operations and the checker finds nothing wrong.
#[test]
fn the_trace_records_each_peer_copy_with_its_path() {
    use gpu_core::token::{TraceOp, parse_trace, write_trace};
    use gpu_rt::runtime::RecordingBackend;
    use std::sync::Arc;
    for peer_access in [true, false] {
        let backend = Arc::new(RecordingBackend::new(HostBackend::new(
            HostConfig::with_devices(2),
        )));
        let config = RuntimeConfig {
            peer_access,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::shared(Arc::clone(&backend), config).unwrap();
        let (source, allocated) = rt
            .alloc_after(D0, MemoryKind::Device, BYTES, &mut vec![])
            .unwrap();
        let target = rt.alloc(D1, MemoryKind::Device, BYTES).unwrap();
        let copied = rt
            .copy(D1, target.all(), source.all(), &mut vec![allocated])
            .unwrap();
        rt.wait(copied).unwrap();
        drop((source, target));
        rt.shutdown().unwrap();
        let ops = backend.trace();
        let paths: Vec<bool> = ops
            .iter()
            .filter_map(|op| match op {
                TraceOp::PeerCopy { direct, .. } => Some(*direct),
                _ => None,
            })
            .collect();
        assert_eq!(paths, vec![peer_access]);
        let text = write_trace(&ops);
        let path = if peer_access { "direct" } else { "staged" };
        assert!(text.contains(&format!(" {path}\n")), "{text}");
        assert_eq!(parse_trace(&text).unwrap().ops, ops);
        assert_eq!(backend.defects(), vec![]);
    }
}
