//! Case 7: kernel launches. The host's cost per chained launch and the time to completion
//! of long chains, against cuLaunchKernel, with the backend alone and a CUkernel beside.

use super::*;

/// Where a batch of launches stops its clock.
#[derive(Clone, Copy)]
pub(super) enum Until {
    /// When the last launch call returns: the host's cost (a short batch never fills the
    /// driver's queue, so no call waits for the GPU).
    Enqueued,
    /// When the work has completed, after the synchronisation: the GPU's time for a chain of
    /// dependent kernels included.
    Completed,
}

/// Launches per batch when timing the host's cost, few enough that the driver's queue never
/// fills (a full queue makes a launch call wait for the GPU, timing the GPU instead).
pub(super) const HOST_BATCH: usize = 64;

/// Times `calls` launches (`launch`), then `finish` (the synchronisation), to `until`.
pub(super) fn time_launches(
    calls: usize,
    until: Until,
    mut launch: impl FnMut() -> Outcome<()>,
    finish: impl FnOnce() -> Outcome<()>,
) -> Outcome<Duration> {
    let start = Instant::now();
    for _ in 0..calls {
        launch()?;
    }
    let enqueued = start.elapsed();
    finish()?;
    Ok(match until {
        Until::Enqueued => enqueued,
        Until::Completed => start.elapsed(),
    })
}

/// Case 7: kernel launch of fill_u32 on a tiny buffer, each launch after the previous token,
/// against cuLaunchKernel of the same function on one stream. Four sides, interleaved: the
/// runtime (through a kernel handle), the backend alone (splits the gap into the runtime's and
/// the backend's part), raw cuLaunchKernel of the CUfunction, and raw cuLaunchKernel of a
/// CUkernel (which takes its context from the stream: the backend would need no current
/// context, at the price the row shows). Timed twice: the host's cost per launch (short
/// batches, the row with the target) and the time to completion of long chains.
pub(super) fn kernel_launch(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    const WORDS: u32 = 256;
    let buffer = rt.alloc(D0, MemoryKind::Device, WORDS as usize * 4)?;
    let dims = LaunchDims::linear(1, WORDS);
    let stream = RawStream::new(driver)?;
    let synchronize = || stream.synchronize();

    // Ours: a handle resolved once, as the raw sides hold their function.
    let fill = rt.kernel(D0, "fill_u32")?;
    let args = [
        Arg::Span(buffer.all()),
        Arg::U32(7),
        Arg::U64(u64::from(WORDS)),
    ];
    let before = rt.stats();
    let launches = Cell::new(0u64);
    let ours = |calls: usize, until: Until| -> Outcome<Duration> {
        let chain = RefCell::new(Vec::<Token>::with_capacity(1));
        launches.set(launches.get() + calls as u64);
        time_launches(
            calls,
            until,
            || {
                let mut chain = chain.borrow_mut();
                // SAFETY: the kernel touches its count of words of its span, which fit.
                let token = unsafe { fill.launch(dims, &args, &mut chain) }?;
                chain.push(token);
                Ok(())
            },
            || {
                Ok(chain
                    .take()
                    .into_iter()
                    .try_for_each(|token| rt.wait(token))?)
            },
        )
    };

    // The backend alone (no planner, no state lock, no use list) on a stream of its own.
    let backend = rt.backend();
    let kernel = backend.kernel(D0, "fill_u32")?;
    let backend_stream = backend.stream_create(D0)?;
    let kernel_args = [
        KernelArg::Ptr(buffer.address()),
        KernelArg::U32(7),
        KernelArg::U64(u64::from(WORDS)),
    ];
    let backend_only = |calls: usize, until: Until| -> Outcome<Duration> {
        time_launches(
            calls,
            until,
            // SAFETY: the kernel writes its count of words of the buffer, which fit.
            || Ok(unsafe { backend.launch(backend_stream, kernel, dims, &kernel_args) }?),
            || Ok(backend.stream_synchronize(backend_stream)?),
        )
    };

    // Raw: the backend's CUfunction, and the same kernel as a CUkernel of a library.
    let function = kernel.raw();
    let ptx = concat!(include_str!("../../kernels/kernels.ptx"), "\0");
    // SAFETY: the PTX ends with a NUL and lives as long as the program.
    let library = unsafe { result::module::library_load_data(driver, ptx.as_ptr().cast()) }?;
    // SAFETY: the library just loaded.
    let context_free = unsafe { result::module::library_kernel(driver, library, c"fill_u32") }?;
    let fill_args = RawFill::new(buffer.address(), 7, WORDS);
    let raw_launch = |f: sys::CUfunction| -> Outcome<()> {
        // SAFETY: fill_u32 of the backend's module or of the library (both live until the
        // end), on a live stream of the current context; it writes `WORDS` words of the live
        // buffer.
        unsafe { fill_args.launch(driver, f, stream.raw) }
    };
    let raw = |calls: usize, until: Until| {
        time_launches(calls, until, || raw_launch(function), synchronize)
    };
    let raw_kernel = |calls: usize, until: Until| {
        time_launches(
            calls,
            until,
            || raw_launch(context_free.cast()),
            synchronize,
        )
    };

    let measure = |until: Until, rounds: usize, batch: usize| {
        plan.interleaved(
            rounds,
            batch,
            [
                &mut |calls| ours(calls, until),
                &mut |calls| backend_only(calls, until),
                &mut |calls| raw(calls, until),
                &mut |calls| raw_kernel(calls, until),
            ],
        )
    };
    let [ours_host, backend_host, raw_host, raw_kernel_host] =
        measure(Until::Enqueued, 101, HOST_BATCH)?;
    let [ours_done, backend_done, raw_done, raw_kernel_done] = measure(Until::Completed, 31, 1000)?;
    // SAFETY: the library loaded above, whose kernel's launches have all completed.
    unsafe { result::module::library_unload(driver, library) }?;
    backend.stream_destroy(backend_stream)?;
    let after = rt.stats();

    let host = format!("host cost per launch ({HOST_BATCH} per batch, to the last call's return)");
    let done = "1000 chained launches, to completion";
    let label = "launch fill_u32 (1 x 256 threads) after the previous token, kernel handle";
    for (scope, ours, backend, raw, raw_kernel, target) in [
        (
            host.as_str(),
            ours_host,
            backend_host,
            raw_host,
            raw_kernel_host,
            Target::WithinPercent(10.0),
        ),
        (
            done,
            ours_done,
            backend_done,
            raw_done,
            raw_kernel_done,
            Target::None,
        ),
    ] {
        let rows = [
            (
                format!("{label}: {scope}"),
                ours,
                "cuLaunchKernel of the same CUfunction",
                raw,
                target,
            ),
            (
                format!("{label}: {scope}"),
                ours,
                "CudaBackend::launch (the runtime's part)",
                backend,
                Target::None,
            ),
            (
                format!("CudaBackend::launch: {scope}"),
                backend,
                "cuLaunchKernel (the backend's part)",
                raw,
                Target::None,
            ),
            (
                format!("cuLaunchKernel of a CUkernel: {scope}"),
                raw_kernel,
                "cuLaunchKernel of the CUfunction",
                raw,
                Target::None,
            ),
        ];
        for (ours_label, ours, driver_label, driver, target) in rows {
            report.row("7", ours_label, ours, driver_label, driver, None, target);
        }
    }
    let get_current = plan.median_per_call(31, 1000, |calls| {
        for _ in 0..calls {
            black_box(result::context::current(driver)?);
        }
        Ok(())
    })?;
    report.notes.push(format!(
        "case 7: cuCtxGetCurrent, which the backend asks before each launch, costs {} alone",
        figure(get_current, None)
    ));
    report.notes.push(format!(
        "case 7: the runtime's planner during {} launches: {} operations planned, {} \
         cross-stream waits, {} event acquires, {} stream acquires (streams created: {}, \
         events created: {})",
        launches.get(),
        after.operations - before.operations,
        after.waits - before.waits,
        after.event_acquires - before.event_acquires,
        after.stream_acquires - before.stream_acquires,
        after.streams_created - before.streams_created,
        after.events_created - before.events_created,
    ));
    rt.free(buffer)?;
    Ok(())
}
