//! Growable segments: buffers that grow one reserved range across several mapped pieces,
//! written and read by kernels and copies, freed and trimmed (mapped bytes go back, the range
//! stays until nothing of it is mapped), and a peer device's copies reaching the pieces (a
//! peer copy, and plain copies on the peer's stream, which need the pieces granted to it).
//!
//! Skipped where the backend has no virtual memory management for device memory (the allocator
//! then uses ordinary segments, which the other cases cover).

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use gpu_core::allocator::{AllocatorConfig, AllocatorStats, MemoryKind};
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::id::DeviceId;
use gpu_rt::runtime::{Arg, Buffer, PeerLink, Runtime, RuntimeConfig, Span};

use super::harness::{CaseResult, Harness, Open, Stop, ensure, two_devices};

/// A runtime's configuration with growable segments.
fn growable_config() -> RuntimeConfig {
    RuntimeConfig {
        staging_chunk: 64 << 10,
        allocator: AllocatorConfig {
            growable_segments: true,
            ..AllocatorConfig::default()
        },
        ..RuntimeConfig::default()
    }
}

/// The granularity of `device`'s device memory, or the case's skip.
fn granularity<B: Backend>(rt: &Runtime<B>, device: DeviceId) -> Result<usize, Stop> {
    rt.backend()
        .vm_granularity(device, MemoryKind::Device)
        .ok_or_else(|| Stop::Skip("no virtual memory management for device memory".into()))
}

fn device_stats<B: Backend>(rt: &Runtime<B>, device: DeviceId) -> Result<AllocatorStats, Stop> {
    Ok(rt.allocator_stats(device, MemoryKind::Device)?)
}

/// Trims until no free of `device`'s memory is pending (a free's event, recorded on the stream
/// that used the memory last, completes a moment after the buffer is dropped), for at most
/// about a second: the bytes trimmed and the stats then.
fn trim_settled<B: Backend>(
    rt: &Runtime<B>,
    device: DeviceId,
) -> Result<(usize, AllocatorStats), Stop> {
    let mut trimmed = 0;
    for _ in 0..1000 {
        trimmed += rt.trim()?;
        let stats = device_stats(rt, device)?;
        if stats.pending == 0 {
            return Ok((trimmed, stats));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok((trimmed, device_stats(rt, device)?))
}

/// Skips where nothing could be reserved and the allocator fell back to ordinary segments, as
/// it should, in a 32-bit process (whose few GiB of address space run out of ranges of 1 GiB,
/// the size it asks for there, when several runtimes live at once). On 64-bit targets that is
/// a failure of the case's later checks.
fn reserved_some(stats: &AllocatorStats) -> CaseResult {
    if stats.address_space == 0 && cfg!(target_pointer_width = "32") {
        return Err(Stop::Skip(
            "no address space for a reservation (32-bit process)".into(),
        ));
    }
    Ok(())
}

/// Words of `value`, `bytes` long.
fn words(value: f32, bytes: usize) -> Vec<u8> {
    (0..bytes / 4).flat_map(|_| value.to_le_bytes()).collect()
}

/// Checks that every 32-bit word of `span` (memory of `device`) is `expected`'s bits.
fn expect_words<B: Backend>(
    rt: &Runtime<B>,
    device: DeviceId,
    span: Span<'_>,
    expected: u32,
    mut after: Vec<gpu_core::token::Token>,
    what: &str,
) -> CaseResult {
    let mut back = vec![0u8; span.len()];
    rt.download(device, &mut back, span, &mut after)?;
    let wrong = back
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .position(|word| word != expected);
    ensure!(
        wrong.is_none(),
        "{what}: word {wrong:?} of {} is not {expected:#x}",
        span.len() / 4
    );
    Ok(())
}

/// Fills `buffer` on its device with the library's fill_u32 (one word per thread).
fn fill_words<B: Backend>(
    rt: &Runtime<B>,
    device: DeviceId,
    buffer: &Buffer<'_, B>,
    value: u32,
) -> Result<gpu_core::token::Token, Stop> {
    let count = buffer.all().len() / 4;
    let dims = LaunchDims::linear(count.div_ceil(256) as u32, 256);
    let args = [
        Arg::Span(buffer.all()),
        Arg::U32(value),
        Arg::U64(count as u64),
    ];
    // SAFETY: a library kernel: the runtime checks its reach into the span.
    Ok(unsafe { rt.launch(device, "fill_u32", dims, &args, &mut vec![]) }?)
}

pub(super) fn growable_segments<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open_with(open, growable_config())?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let g = granularity(rt, d)?;
    // Three live buffers grow one range: each starts in the free tail of the one before and
    // spans piece boundaries.
    let sizes = [g + g / 2, 2 * g + g / 4, 3 * g];
    let buffers = sizes
        .iter()
        .map(|&size| rt.alloc(d, MemoryKind::Device, size))
        .collect::<Result<Vec<_>, _>>()?;
    let grown = device_stats(rt, d)?;
    reserved_some(&grown)?;
    let total: usize = sizes.iter().sum();
    ensure!(
        grown.segment_allocations == 0 && grown.maps >= 3,
        "not grown by mapping: {grown:?}"
    );
    ensure!(
        grown.mapped >= total && grown.address_space >= grown.mapped,
        "{total} bytes live but {grown:?}"
    );
    // Kernels write each buffer, a copy moves one into another across pieces, every word read
    // back.
    for (index, buffer) in buffers.iter().enumerate() {
        let value = 0x5157_0000 + index as u32;
        let filled = fill_words(rt, d, buffer, value)?;
        expect_words(rt, d, buffer.all(), value, vec![filled], "filled buffer")?;
    }
    let [first, second, third] = &buffers[..] else {
        return Err(Stop::Fail("three buffers".into()));
    };
    let moved = second.span(0, sizes[1])?;
    let copied = rt.copy(d, third.span(g / 2, sizes[1])?, moved, &mut vec![])?;
    expect_words(
        rt,
        d,
        third.span(g / 2, sizes[1])?,
        0x5157_0001,
        vec![copied],
        "copy",
    )?;
    let uploaded = rt.upload(d, first.all(), &words(2.5, sizes[0]), &mut vec![])?;
    expect_words(
        rt,
        d,
        first.all(),
        2.5f32.to_bits(),
        vec![uploaded],
        "upload",
    )?;
    // The last two freed: trimming unmaps the free tail; the range stays reserved while its
    // first piece holds the first buffer.
    let mut buffers = buffers;
    buffers.truncate(1);
    let (trimmed, shrunk) = trim_settled(rt, d)?;
    ensure!(
        trimmed > 0 && shrunk.mapped < grown.mapped && shrunk.mapped >= sizes[0],
        "trimmed {trimmed}: {shrunk:?} after {grown:?}"
    );
    ensure!(
        shrunk.address_space == grown.address_space && shrunk.unmaps > grown.unmaps,
        "the range went back with a buffer in it: {shrunk:?}"
    );
    expect_words(
        rt,
        d,
        buffers[0].all(),
        2.5f32.to_bits(),
        vec![],
        "the first buffer after the trim",
    )?;
    drop(buffers);
    let (_, empty) = trim_settled(rt, d)?;
    ensure!(
        (empty.mapped, empty.address_space, empty.reserved) == (0, 0, 0),
        "left after the last trim: {empty:?}"
    );
    h.close()
}

pub(super) fn growable_segments_across_peers<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open_with(open, growable_config())?;
    let rt = &h.runtime;
    let (d0, d1) = two_devices(rt)?;
    let g = granularity(rt, d0)?;
    let linked =
        rt.peer_link(d0, d1)? == &PeerLink::Enabled && rt.peer_link(d1, d0)? == &PeerLink::Enabled;
    let size = 2 * g + g / 2;
    // Mapped pieces of device 0, written there.
    let x = rt.alloc(d0, MemoryKind::Device, size)?;
    reserved_some(&device_stats(rt, d0)?)?;
    let written = rt.upload(d0, x.all(), &words(1.5, size), &mut vec![])?;
    rt.wait(written)?;
    // Device 1 copies out of them (a peer copy, staged without a link).
    let z = rt.alloc(d1, MemoryKind::Device, size)?;
    let copied = rt.copy(d1, z.all(), x.all(), &mut vec![])?;
    expect_words(rt, d1, z.all(), 1.5f32.to_bits(), vec![copied], "peer copy")?;
    if linked {
        // Device 1's stream reaches the pieces directly: a plain copy between them and pinned
        // host memory runs there (the driver needs the pieces granted to device 1).
        let host = rt.alloc(d1, MemoryKind::HostPinned, size)?;
        let read = rt.copy(d1, host.all(), x.all(), &mut vec![])?;
        expect_words(
            rt,
            d1,
            host.all(),
            1.5f32.to_bits(),
            vec![read],
            "read by the peer",
        )?;
        let set = rt.upload(d1, host.all(), &words(4.0, size), &mut vec![])?;
        let wrote = rt.copy(d1, x.all(), host.all(), &mut vec![set])?;
        expect_words(
            rt,
            d0,
            x.all(),
            4.0f32.to_bits(),
            vec![wrote],
            "written by the peer",
        )?;
        // Pieces mapped after peer access was on are granted too.
        let before = device_stats(rt, d0)?;
        let x2 = rt.alloc(d0, MemoryKind::Device, size)?;
        let grown = device_stats(rt, d0)?;
        ensure!(
            grown.maps > before.maps,
            "the second buffer mapped nothing: {grown:?}"
        );
        let written = rt.upload(d0, x2.all(), &words(3.0, size), &mut vec![])?;
        let read = rt.copy(d1, host.all(), x2.all(), &mut vec![written])?;
        expect_words(
            rt,
            d1,
            host.all(),
            3.0f32.to_bits(),
            vec![read],
            "new pieces read",
        )?;
        drop((x2, host));
    }
    drop((x, z));
    for device in [d0, d1] {
        let (_, left) = trim_settled(rt, device)?;
        ensure!(
            (left.mapped, left.address_space) == (0, 0),
            "device {device:?} keeps {left:?}"
        );
    }
    h.close()
}
