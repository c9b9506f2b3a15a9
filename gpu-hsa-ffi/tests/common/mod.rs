//! What the HSA backend's tests run on any HSA runtime that opens: on an AMD GPU (hsa_hw) and
//! on the CPU stand-in (hsa_fake).

use gpu_core::DeviceId;
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, FillValue, KernelArg, LaunchDims};
use gpu_hsa_ffi::HsaBackend;

/// Fills (a byte fill with a 3-byte head and 2-byte tail around aligned words), copies back
/// through pinned host memory, `fill_u32` launched after a copy, an event recorded on one
/// stream and waited for on another, each result checked; everything created is destroyed.
pub(crate) fn round_trip(b: &HsaBackend) {
    let d0 = DeviceId(0);
    let stream = b.stream_create(d0).unwrap();
    let words = 1000usize;
    let device = b
        .allocate(d0, MemoryKind::Device, words * 4)
        .unwrap()
        .unwrap();
    let host = b
        .allocate(d0, MemoryKind::HostPinned, words * 4)
        .unwrap()
        .unwrap();
    let read_back = |b: &HsaBackend| -> Vec<u8> {
        // SAFETY: both buffers are live, `words * 4` bytes, and only this test touches them.
        unsafe { b.copy(stream, host, device, words * 4) }.unwrap();
        b.stream_synchronize(stream).unwrap();
        // SAFETY: the copy has completed; the pinned buffer holds `words * 4` bytes.
        unsafe { core::slice::from_raw_parts(host as *const u8, words * 4) }.to_vec()
    };
    // Bytes 1..3998: a head of 3 bytes, aligned words, a tail of 2 bytes.
    // SAFETY: inside the device buffer.
    unsafe {
        b.fill(stream, device, 0, words * 4).unwrap();
        b.fill_elements(stream, device + 1, FillValue::U8(0xAB), words * 4 - 3)
            .unwrap();
    }
    let bytes = read_back(b);
    assert_eq!(bytes[0], 0);
    assert!(bytes[1..words * 4 - 2].iter().all(|&x| x == 0xAB));
    assert_eq!(&bytes[words * 4 - 2..], &[0, 0]);
    // fill_u32 through `launch`, after a copy (a barrier-AND on the copy's signal).
    let kernel = b.kernel(d0, "fill_u32").unwrap();
    let args = [
        KernelArg::Ptr(device),
        KernelArg::U32(0x1234_5678),
        KernelArg::U64(words as u64),
    ];
    // SAFETY: the kernel writes `words` words of the device buffer.
    unsafe { b.launch(stream, kernel, LaunchDims::linear(4, 256), &args) }.unwrap();
    let bytes = read_back(b);
    assert!(bytes.chunks(4).all(|w| w == 0x1234_5678u32.to_le_bytes()));
    // An event recorded last on a stream has completed once the stream is synchronised, as
    // cuStreamSynchronize covers a trailing cuEventRecord (the record is a packet outside the
    // stream's chain of operations). Repeated: the stand-in's random delays (FAKE_HSA_JITTER=1)
    // leave the record pending after the kernel most times.
    let trailing = b.event_create(d0).unwrap();
    for round in 0..20 {
        // SAFETY: the kernel writes `words` words of the live device buffer, read back only
        // after the stream is synchronised.
        unsafe { b.launch(stream, kernel, LaunchDims::linear(4, 256), &args) }.unwrap();
        b.event_record(trailing, stream).unwrap();
        b.stream_synchronize(stream).unwrap();
        assert!(
            b.event_query(trailing).unwrap(),
            "round {round}: a record on a synchronised stream is still pending"
        );
    }
    b.event_destroy(trailing).unwrap();
    // An event recorded after the work completes; a second stream waits for it.
    let event = b.event_create(d0).unwrap();
    let other = b.stream_create(d0).unwrap();
    b.event_record(event, stream).unwrap();
    b.stream_wait_event(other, event).unwrap();
    b.stream_synchronize(other).unwrap();
    b.event_synchronize(event).unwrap();
    assert!(b.event_query(event).unwrap());
    b.event_destroy(event).unwrap();
    b.stream_destroy(other).unwrap();
    b.free(d0, MemoryKind::Device, device, Some(stream))
        .unwrap();
    b.free(d0, MemoryKind::HostPinned, host, None).unwrap();
    b.stream_destroy(stream).unwrap();
}

/// Peer access between devices 0 and 1, asked and enabled both ways (twice: no error), then
/// `copy_peer` from device 0's memory to device 1's on a stream of device 0 and back on a
/// stream of device 1 (whole buffers, then an unaligned part), each result read back through
/// pinned host memory and checked; everything created is destroyed. With one device, or a pair
/// without peer access, it says so and returns.
pub(crate) fn peer_round_trip(b: &HsaBackend) {
    let (d0, d1) = (DeviceId(0), DeviceId(1));
    if b.device_count() < 2 {
        eprintln!("peer round trip skipped: one device");
        return;
    }
    for (device, peer) in [(d0, d1), (d1, d0)] {
        if !b.peer_access_possible(device, peer).unwrap() {
            eprintln!("peer round trip skipped: {device:?} cannot reach {peer:?}");
            return;
        }
        b.enable_peer_access(device, peer).unwrap();
        b.enable_peer_access(device, peer).unwrap();
    }
    assert!(!b.peer_access_possible(d0, d0).unwrap());
    let bytes = 4096usize;
    let device_memory = |device| {
        b.allocate(device, MemoryKind::Device, bytes)
            .unwrap()
            .unwrap()
    };
    let (a, c) = (device_memory(d0), device_memory(d1));
    let host = b
        .allocate(d0, MemoryKind::HostPinned, bytes)
        .unwrap()
        .unwrap();
    let (s0, s1) = (b.stream_create(d0).unwrap(), b.stream_create(d1).unwrap());
    let read = |address: usize| -> Vec<u8> {
        // SAFETY: `address` is a live buffer of `bytes` bytes and only this test touches it.
        unsafe { b.copy(s0, host, address, bytes) }.unwrap();
        b.stream_synchronize(s0).unwrap();
        // SAFETY: the copy has completed; the pinned buffer holds `bytes` bytes.
        unsafe { core::slice::from_raw_parts(host as *const u8, bytes) }.to_vec()
    };
    // SAFETY: every fill and copy stays inside the live buffers above, and is waited for before
    // they are read or freed.
    unsafe {
        b.fill(s0, a, 0x5A, bytes).unwrap();
        b.copy_peer(s0, c, d1, a, d0, bytes).unwrap();
    }
    b.stream_synchronize(s0).unwrap();
    assert!(read(c).iter().all(|&x| x == 0x5A), "device 0 to device 1");
    // SAFETY: as for the first pair: inside the live buffers, waited for before they are
    // read or freed.
    unsafe {
        b.fill(s1, c, 0xC3, bytes).unwrap();
        b.copy_peer(s1, a, d0, c, d1, bytes).unwrap();
    }
    b.stream_synchronize(s1).unwrap();
    assert!(read(a).iter().all(|&x| x == 0xC3), "device 1 to device 0");
    // SAFETY: as for the first pair: inside the live buffers, waited for before they are
    // read or freed.
    unsafe {
        b.fill(s0, a, 0x11, bytes).unwrap();
        b.copy_peer(s0, c + 3, d1, a + 5, d0, 100).unwrap();
    }
    b.stream_synchronize(s0).unwrap();
    let part = read(c);
    assert!(part[..3].iter().all(|&x| x == 0xC3));
    assert!(part[3..103].iter().all(|&x| x == 0x11));
    assert!(part[103..].iter().all(|&x| x == 0xC3));
    b.stream_destroy(s1).unwrap();
    b.stream_destroy(s0).unwrap();
    b.free(d0, MemoryKind::Device, a, None).unwrap();
    b.free(d1, MemoryKind::Device, c, None).unwrap();
    b.free(d0, MemoryKind::HostPinned, host, None).unwrap();
}
