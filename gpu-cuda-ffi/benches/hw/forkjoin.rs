//! Case 10: the fork/join program's work (`clients/mlir/forkjoin.mlir`, 4,096 floats: copy in,
//! `twice` and `plus_one` on two branches, `multiply` joining them, copy out) with the very
//! kernels of its hand-written floor (`clients/mlir/baseline/forkjoin_raw.cu`, compiled on the
//! GPU machine with `nvcc -ptx` and named by `GPU_BENCH_FORKJOIN_PTX`; the case is skipped
//! without it), as one replayed graph against the same calls by hand on two streams with an
//! event fork and join (the floor's `fork` variant, host memory pinned on both sides), each
//! iteration to completion; every iteration's result is checked at the end.

use super::*;

/// Elements of the program's vectors.
const N: u32 = 4096;

/// `in[i]`, as forkjoin_raw.cu fills it, and the program's result for it.
fn input(i: u32) -> f32 {
    (i % 1000) as f32
}
fn expected(i: u32) -> f32 {
    (2.0 * input(i)) * (input(i) + 1.0)
}

/// Case 10: see the module's documentation.
pub(super) fn fork_join(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let Some(ptx) = ptx_from_env("GPU_BENCH_FORKJOIN_PTX")? else {
        println!("case 10 skipped: GPU_BENCH_FORKJOIN_PTX names no PTX of forkjoin_raw.cu");
        return Ok(());
    };
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let bytes = N as usize * 4;
    let alloc = |kind| rt.alloc(D0, kind, bytes);
    let (host_in, host_out, raw_output) = (
        alloc(MemoryKind::HostPinned)?,
        alloc(MemoryKind::HostPinned)?,
        alloc(MemoryKind::HostPinned)?,
    );
    let values: Vec<u8> = (0..N).flat_map(|i| input(i).to_ne_bytes()).collect();
    // SAFETY: pinned memory of this runtime, not used by any work yet.
    unsafe { host_in.write_host(0, &values) }?;
    let device_buffers = || -> Outcome<[gpu_rt::runtime::Buffer<'_, CudaBackend>; 3]> {
        Ok([
            alloc(MemoryKind::Device)?,
            alloc(MemoryKind::Device)?,
            alloc(MemoryKind::Device)?,
        ])
    };
    let [x, y, z] = device_buffers()?;
    let [rx, ry, rz] = device_buffers()?;
    // SAFETY: a complete PTX image, alive until the module is unloaded at the end.
    let module = unsafe { rt.load_module(D0, ptx.as_ptr().cast()) }?;
    let kernel = |name: &CStr| rt.module_kernel(module, D0, name);
    let (twice, plus_one, multiply) = (
        kernel(c"twice")?,
        kernel(c"plus_one")?,
        kernel(c"multiply")?,
    );
    let dims = LaunchDims::linear(N.div_ceil(256), 256);
    let n = Arg::U64(u64::from(N));

    let mut recorder = rt.record_graph(D0)?;
    let copy_in = recorder.copy(x.all(), host_in.all(), &[])?;
    // SAFETY: (all three) forkjoin_raw.cu's kernels take (const float *, float *, long) and
    // (const float *, const float *, float *, long), and touch the first N floats of each
    // pointer: the spans' sizes.
    let left = unsafe {
        recorder.launch(
            &twice,
            dims,
            &[Arg::Span(x.all()), Arg::Span(y.all()), n],
            &[copy_in],
        )
    }?;
    // SAFETY: see above.
    let right = unsafe {
        recorder.launch(
            &plus_one,
            dims,
            &[Arg::Span(x.all()), Arg::Span(z.all()), n],
            &[copy_in],
        )
    }?;
    let join_args = [
        Arg::Span(y.all()),
        Arg::Span(z.all()),
        Arg::Span(x.all()),
        n,
    ];
    // SAFETY: see above.
    let joined = unsafe { recorder.launch(&multiply, dims, &join_args, &[left, right]) }?;
    recorder.copy(host_out.all(), x.all(), &[joined])?;
    let graph = recorder.instantiate()?;

    let (main, side) = (RawStream::new(driver)?, RawStream::new(driver)?);
    let (forked, joined_event) = (RawEvent::new(driver)?, RawEvent::new(driver)?);
    let raw_module = RawModule::new(driver, &ptx)?;
    let shape = result::module::LaunchShape {
        grid: [N.div_ceil(256), 1, 1],
        block: [256, 1, 1],
        shared_bytes: 0,
    };
    let address = |b: &gpu_rt::runtime::Buffer<'_, CudaBackend>| KernelArg::Ptr(b.address());
    let count = KernelArg::U64(u64::from(N));
    let mut raw_twice = RawLaunch::new(
        raw_module.function(c"twice")?,
        shape,
        &[address(&rx), address(&ry), count],
    );
    let mut raw_plus_one = RawLaunch::new(
        raw_module.function(c"plus_one")?,
        shape,
        &[address(&rx), address(&rz), count],
    );
    let mut raw_multiply = RawLaunch::new(
        raw_module.function(c"multiply")?,
        shape,
        &[address(&ry), address(&rz), address(&rx), count],
    );

    let ours_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            rt.wait(graph.launch(&mut vec![])?)?;
        }
        Ok(start.elapsed())
    };
    let mut by_hand_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            // SAFETY: live pinned and device memory of this runtime, N floats each, on live
            // streams and events of the current context; the kernels of the live module.
            unsafe {
                let (s, t) = (main.raw, side.raw);
                result::memory::copy_async(
                    driver,
                    rx.address() as u64,
                    host_in.address() as u64,
                    bytes,
                    s,
                )?;
                result::event::record(driver, forked.raw, s)?;
                result::stream::wait_event(driver, t, forked.raw, 0)?;
                raw_twice.launch(driver, s)?;
                raw_plus_one.launch(driver, t)?;
                result::event::record(driver, joined_event.raw, t)?;
                result::stream::wait_event(driver, s, joined_event.raw, 0)?;
                raw_multiply.launch(driver, s)?;
                result::memory::copy_async(
                    driver,
                    raw_output.address() as u64,
                    rx.address() as u64,
                    bytes,
                    s,
                )?;
            }
            main.synchronize()?;
        }
        Ok(start.elapsed())
    };
    let [ours, by_hand] =
        plan.interleaved(31, 20, [&mut |c| ours_side(c), &mut |c| by_hand_side(c)])?;
    report.row(
        "10",
        "fork/join work (copy in, 3 kernels, copy out; 4,096 floats; forkjoin_raw.cu's kernels) as one Graph::launch, to completion",
        ours,
        "the same calls by hand on two streams with an event fork and join (the floor)",
        by_hand,
        None,
        Target::FasterBy(2.0),
    );
    for (side, output) in [("graph", &host_out), ("by hand", &raw_output)] {
        let mut back = vec![0u8; bytes];
        // SAFETY: pinned memory of this runtime whose last writer was waited for above.
        unsafe { output.read_host(0, &mut back) }?;
        let wrong = (0..N)
            .zip(back.chunks_exact(4))
            .filter(|(i, w)| f32::from_ne_bytes([w[0], w[1], w[2], w[3]]) != expected(*i))
            .count();
        if wrong != 0 {
            report.failed = true;
            report.notes.push(format!(
                "case 10 ({side}): {wrong} of {N} results are wrong"
            ));
        }
    }
    graph.destroy()?;
    drop((x, y, z, rx, ry, rz));
    rt.unload_module(module)?;
    Ok(())
}
