//! Ordering and data across streams and devices: dependent work sees its inputs whole, and
//! copies between devices' memory of every form arrive, with peer access off and on.

use alloc::format;
use alloc::vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;
use gpu_rt::runtime::{Buffer, PeerLink, RecordingBackend, RuntimeConfig};

use super::harness::{CaseResult, Harness, Open, Stop, ensure, two_devices};

/// A large fill on one stream, an independent fill on another, then a copy that depends on
/// both: the copy must see the first fill's bytes in full.
pub(super) fn cross_stream_order_and_data<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let size = 8 << 20;
    let (a, b) = (
        rt.alloc(d, MemoryKind::Device, size)?,
        rt.alloc(d, MemoryKind::Device, size)?,
    );
    let fill_a = rt.fill(d, a.all(), 0x11, &mut vec![])?;
    let fill_b = rt.fill(d, b.all(), 0x22, &mut vec![])?;
    let copied = rt.copy(d, b.all(), a.all(), &mut vec![fill_a, fill_b])?;
    let mut back = vec![0u8; size];
    rt.download(d, &mut back, b.all(), &mut vec![copied])?;
    let wrong = back.iter().position(|&x| x != 0x11);
    ensure!(
        wrong.is_none(),
        "byte {wrong:?} of the copy does not hold the first stream's fill"
    );
    drop((a, b));
    h.close()
}

pub(super) fn cross_device_order_and_data<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let (d0, d1) = two_devices(rt)?;
    let size = 4 << 20;
    let on0 = rt.alloc(d0, MemoryKind::Device, size)?;
    let on1 = rt.alloc(d1, MemoryKind::Device, size)?;
    let filled = rt.fill(d0, on0.all(), 0x77, &mut vec![])?;
    let copied = rt.copy(d1, on1.all(), on0.all(), &mut vec![filled])?;
    let mut back = vec![0u8; size];
    rt.download(d1, &mut back, on1.all(), &mut vec![copied])?;
    let wrong = back.iter().position(|&x| x != 0x77);
    ensure!(
        wrong.is_none(),
        "byte {wrong:?} on device 1 does not hold device 0's fill"
    );
    let refused = rt.fill(d1, on0.all(), 0, &mut vec![]).err();
    ensure!(
        refused
            == Some(Error::WrongDevice {
                expected: d1,
                found: d0
            }),
        "device 0 memory used on device 1 gave {refused:?}"
    );
    drop((on0, on1));
    h.close()
}

/// Copies between two devices' memory, synchronous and stream-ordered allocations on either
/// side, on either device's stream, with peer access off and on: every byte arrives, and the
/// runtime's peer links agree with what the backend says is possible. On CUDA a plain copy of
/// another device's stream-ordered memory is refused without peer access: this is the case
/// that found it.
pub(super) fn peer_copies_of_every_memory_form<B: Backend>(open: Open<'_, B>) -> CaseResult {
    for peer_access in [false, true] {
        let config = RuntimeConfig {
            peer_access,
            ..RuntimeConfig::default()
        };
        let h = Harness::open_with(open, config)?;
        let rt = &h.runtime;
        let (d0, d1) = two_devices(rt)?;
        let possible = rt.backend().peer_access_possible(d0, d1)?;
        let link = rt.peer_link(d0, d1)?.clone();
        let expected = match (possible, peer_access) {
            (false, _) => PeerLink::Impossible,
            (true, false) => PeerLink::OptedOut,
            (true, true) => PeerLink::Enabled,
        };
        ensure!(
            link == expected,
            "peer link {link:?}, expected {expected:?}"
        );
        let size = 1 << 20;
        let mut value = 0u8;
        for (from, to) in [(d0, d1), (d1, d0)] {
            for (ordered_src, ordered_dst) in
                [(false, false), (true, false), (false, true), (true, true)]
            {
                for on in [from, to] {
                    value += 1;
                    let allocate = |device, ordered| -> Result<Buffer<'_, RecordingBackend<B>>> {
                        if ordered {
                            let (buffer, token) =
                                rt.alloc_after(device, MemoryKind::Device, size, &mut vec![])?;
                            rt.wait(token)?;
                            Ok(buffer)
                        } else {
                            rt.alloc(device, MemoryKind::Device, size)
                        }
                    };
                    let (src, dst) = (allocate(from, ordered_src)?, allocate(to, ordered_dst)?);
                    let filled = rt.fill(from, src.all(), value, &mut vec![])?;
                    let copied = rt.copy(on, dst.all(), src.all(), &mut vec![filled])?;
                    let mut back = vec![0u8; size];
                    rt.download(to, &mut back, dst.all(), &mut vec![copied])?;
                    let wrong = back.iter().position(|&x| x != value);
                    ensure!(
                        wrong.is_none(),
                        "peer access {peer_access}: {from} -> {to} on {on} (stream-ordered \
                         source {ordered_src}, destination {ordered_dst}): byte {wrong:?} wrong"
                    );
                }
            }
        }
        let stats = rt.stats();
        ensure!(
            stats.peer_copies_direct + stats.peer_copies_staged == 16,
            "peer copies counted {} direct + {} staged, not 16",
            stats.peer_copies_direct,
            stats.peer_copies_staged
        );
        h.close()?;
    }
    Ok(())
}
