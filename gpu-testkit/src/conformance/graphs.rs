//! Graphs: a program recorded once through the runtime (fills, a copy, library kernels with
//! fork and join edges) and replayed with tokens in and out, then updated in place node by
//! node; every replay's results verified, the graph destroyed, nothing left behind. A graph with
//! memory of its own: scratch blocks laid out in one pool, reused across replays with no
//! allocation, given back when the graph is destroyed.

use alloc::vec;
use alloc::vec::Vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, FillValue, LaunchDims};
use gpu_core::error::Error;
use gpu_core::id::DeviceId;
use gpu_rt::runtime::{Arg, Buffer, GraphArg, Runtime};

use super::harness::{CaseResult, Harness, Open, Stop, ensure};

/// Elements per buffer (several workgroups, one partial).
const N: usize = 3000;

fn words(value: f32) -> Vec<u8> {
    (0..N).flat_map(|_| value.to_le_bytes()).collect()
}

/// Checks that every element of `buffer` is `expected`.
fn expect_all<B: Backend>(
    rt: &Runtime<B>,
    buffer: &Buffer<'_, B>,
    expected: f32,
    after: gpu_core::token::Token,
    what: &str,
) -> CaseResult {
    let mut back = vec![0u8; 4 * N];
    rt.download(DeviceId(0), &mut back, buffer.all(), &mut vec![after])?;
    for (i, chunk) in back.chunks_exact(4).enumerate() {
        let got = f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        ensure!(
            got == expected,
            "{what} element {i}: {got}, expected {expected}"
        );
    }
    Ok(())
}

pub(super) fn graphs_replay_and_update<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let alloc = || rt.alloc(d, MemoryKind::Device, 4 * N);
    let (x, y, z, input, other) = (alloc()?, alloc()?, alloc()?, alloc()?, alloc()?);
    let w = rt.alloc(d, MemoryKind::Device, N)?;
    let axpy = rt.kernel(d, "axpy_f32")?;
    let dims = LaunchDims::linear(N.div_ceil(256) as u32, 256);
    let count = Arg::U64(N as u64);
    let mut recorder = rt.record_graph(d)?;
    // Two independent fills (a fork), joined by y = 3x + y; z = input, joined with y by
    // z = 1y + z; an independent byte fill.
    let fill_x = recorder.fill(x.all(), FillValue::U32(1f32.to_bits()), &[])?;
    let fill_y = recorder.fill(y.all(), FillValue::U32(2f32.to_bits()), &[])?;
    let y_args = [Arg::F32(3.0), Arg::Span(x.all()), Arg::Span(y.all()), count];
    // SAFETY: (both launches) library kernels: the runtime checks their reach into each span.
    let join = unsafe { recorder.launch(&axpy, dims, &y_args, &[fill_x, fill_y]) }?;
    let copy = recorder.copy(z.all(), input.all(), &[])?;
    let z_args = [Arg::F32(1.0), Arg::Span(y.all()), Arg::Span(z.all()), count];
    // SAFETY: see above.
    let last = unsafe { recorder.launch(&axpy, dims, &z_args, &[join, copy]) }?;
    let bytes = recorder.fill(w.all(), FillValue::U8(7), &[])?;
    ensure!(
        recorder.len() == 6,
        "six nodes recorded, not {}",
        recorder.len()
    );
    let mut graph = match recorder.instantiate() {
        Err(Error::Unsupported { what, .. }) => return Err(Stop::Skip(what.into())),
        other => other?,
    };
    // Replays with a token in (the upload of this replay's input) and out (the reads).
    for replay in 0..4 {
        let uploaded = rt.upload(d, input.all(), &words(replay as f32), &mut vec![])?;
        let done = graph.launch(&mut vec![uploaded])?;
        let [a, b, c] = rt.fork(done, 3)?.try_into().expect("three tokens");
        expect_all(rt, &y, 5.0, a, "y")?;
        expect_all(rt, &z, replay as f32 + 5.0, b, "z")?;
        let mut back = vec![0u8; N];
        rt.download(d, &mut back, w.all(), &mut vec![c])?;
        ensure!(back.iter().all(|&v| v == 7), "w after replay {replay}");
    }
    // In place: y starts at 10, then y = 4x + y; z copies another buffer; w gets 9s.
    graph.set_fill(fill_y, y.all(), FillValue::U32(10f32.to_bits()))?;
    let y_args = [Arg::F32(4.0), Arg::Span(x.all()), Arg::Span(y.all()), count];
    // SAFETY: as recorded.
    unsafe { graph.set_launch(join, &axpy, dims, &y_args) }?;
    graph.set_copy(copy, z.all(), other.all())?;
    graph.set_fill(bytes, w.all(), FillValue::U8(9))?;
    let refused = graph.set_copy(fill_x, z.all(), other.all());
    ensure!(
        matches!(refused, Err(Error::GraphNodeKind { .. })),
        "a fill node given a copy: {refused:?}"
    );
    for replay in 0..3 {
        let uploaded = rt.upload(d, other.all(), &words(100.0 * replay as f32), &mut vec![])?;
        let done = graph.launch(&mut vec![uploaded])?;
        let [a, b, c] = rt.fork(done, 3)?.try_into().expect("three tokens");
        expect_all(rt, &y, 14.0, a, "updated y")?;
        expect_all(rt, &z, 100.0 * replay as f32 + 14.0, b, "updated z")?;
        let mut back = vec![0u8; N];
        rt.download(d, &mut back, w.all(), &mut vec![c])?;
        ensure!(
            back.iter().all(|&v| v == 9),
            "updated w after replay {replay}"
        );
    }
    let _ = last;
    graph.destroy()?;
    drop((x, y, z, input, other, w, axpy));
    h.close()
}

pub(super) fn graphs_with_own_memory<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let (input, out) = (
        rt.alloc(d, MemoryKind::Device, 4 * N)?,
        rt.alloc(d, MemoryKind::Device, 4 * N)?,
    );
    let axpy = rt.kernel(d, "axpy_f32")?;
    let dims = LaunchDims::linear(N.div_ceil(256) as u32, 256);
    let count = Arg::U64(N as u64).into();
    let mut recorder = rt.record_graph(d)?;
    let [a, b, c] = [0; 3].map(|_| recorder.alloc(4 * N));
    let (a, b, c) = (a?, b?, c?);
    // b = 2 * input + 1 through a; then c (in a's bytes: every use of a is done) = b + 3.
    let staged = recorder.copy(a, input.all(), &[])?;
    let ones = recorder.fill(b, FillValue::U32(1f32.to_bits()), &[])?;
    let b_args: [GraphArg<'_>; 4] = [Arg::F32(2.0).into(), a.into(), b.into(), count];
    // SAFETY: (both launches) library kernels: the runtime checks their reach into each span.
    let doubled = unsafe { recorder.launch(&axpy, dims, &b_args, &[staged, ones]) }?;
    let threes = recorder.fill(c, FillValue::U32(3f32.to_bits()), &[doubled])?;
    let c_args: [GraphArg<'_>; 4] = [Arg::F32(1.0).into(), b.into(), c.into(), count];
    // SAFETY: see above.
    let summed = unsafe { recorder.launch(&axpy, dims, &c_args, &[threes]) }?;
    recorder.copy(out.all(), c, &[summed])?;
    let before = rt.allocator_stats(d, MemoryKind::Device)?;
    let graph = match recorder.instantiate() {
        Err(Error::Unsupported { what, .. }) => return Err(Stop::Skip(what.into())),
        other => other?,
    };
    let block = (4 * N).next_multiple_of(256);
    ensure!(
        graph.memory_bytes() == block + 4 * N,
        "two blocks' bytes for three blocks, not {}",
        graph.memory_bytes()
    );
    let instantiated = rt.allocator_stats(d, MemoryKind::Device)?;
    for replay in 0..4 {
        let uploaded = rt.upload(d, input.all(), &words(replay as f32), &mut vec![])?;
        let done = graph.launch(&mut vec![uploaded])?;
        expect_all(rt, &out, 2.0 * replay as f32 + 4.0, done, "out")?;
    }
    let replayed = rt.allocator_stats(d, MemoryKind::Device)?;
    ensure!(
        replayed.segment_allocations == instantiated.segment_allocations
            && replayed.allocated == instantiated.allocated,
        "replays allocated: {instantiated:?} then {replayed:?}"
    );
    graph.destroy()?;
    let destroyed = rt.allocator_stats(d, MemoryKind::Device)?;
    ensure!(
        destroyed.requested == before.requested,
        "the graph's memory given back: {} bytes requested before, {} after",
        before.requested,
        destroyed.requested
    );
    drop((input, out, axpy));
    h.close()
}
