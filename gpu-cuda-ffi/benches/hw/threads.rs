//! Case 8: threads sharing one device. N threads each launch and copy on a stream of their
//! own, through one shared runtime against the driver directly.

use std::sync::Barrier;

use super::*;

/// The thread counts measured.
const THREADS: [usize; 3] = [1, 4, 16];
/// Bytes of each buffer, all of which the kernel writes and the copy moves.
const BYTES: usize = 256;
/// The words the kernel writes, one per GPU thread.
const WORDS: u32 = (BYTES / 4) as u32;
/// Rounds (a launch and a copy each) per thread and batch, few enough that no stream's queue
/// in the driver fills.
const ROUNDS_PER_BATCH: usize = 256;

/// The wall time from the barrier that starts `threads` threads together until the last of
/// them has returned from `work(thread, &prepared)`, where `prepared` is what
/// `prepare(thread)` made before the barrier and drops after the clock stops, untimed. Each thread makes device 0's primary
/// context current first, as the measuring thread of the other cases has it. The clock starts
/// when the first thread leaves the barrier (the threads read it themselves: with more
/// threads than cores, a thread that only watched could run late).
fn time_threads<P>(
    bench: &Bench<'_>,
    threads: usize,
    prepare: impl Fn(usize) -> Outcome<P> + Sync,
    work: impl Fn(usize, &P) -> Outcome<()> + Sync,
) -> Outcome<Duration> {
    let start = Barrier::new(threads);
    let spans = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let (start, prepare, work) = (&start, &prepare, &work);
                scope.spawn(move || {
                    let prepared = bench
                        .backend
                        .primary_context(D0)
                        .map_err(Into::into)
                        .and_then(|context| {
                            // SAFETY: device 0's primary context, which the backend holds
                            // retained until it drops, after this case.
                            unsafe { result::context::set_current(bench.driver, context) }?;
                            prepare(thread)
                        });
                    // Every thread reaches the barrier, so that one failing leaves none waiting.
                    start.wait();
                    let started = Instant::now();
                    let outcome = match &prepared {
                        Ok(prepared) => work(thread, prepared),
                        Err(error) => Err(error.to_string().into()),
                    };
                    let finished = Instant::now();
                    drop(prepared);
                    // The error as text: a boxed error need not be `Send`.
                    outcome
                        .map(|()| (started, finished))
                        .map_err(|error| error.to_string())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .map_err(|_| "a thread of case 8 panicked".to_string())?
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    let started = spans.iter().map(|&(started, _)| started).min();
    let finished = spans.iter().map(|&(_, finished)| finished).max();
    Ok(started
        .zip(finished)
        .map_or(Duration::ZERO, |(started, finished)| finished - started))
}

/// Case 8: N threads (1, 4 and 16) sharing device 0, each doing rounds of one launch of
/// fill_u32 (64 words into a 256-byte buffer of its own) and one 256-byte device-to-device copy
/// (to a second buffer of its own). Ours: one runtime shared by the threads, each thread its
/// own token chain (the launch, through a kernel handle, after the previous token, the copy
/// after the launch), so that the planner keeps each on a stream of its own, waited for at the
/// end of the batch. The driver: each thread its own stream, cuLaunchKernel of the backend's
/// CUfunction and cuMemcpyAsync, cuStreamSynchronize at the end. A batch is timed from the
/// barrier that starts the threads together until the last has finished (its wait included);
/// the figure is per round of every thread (N launches and N copies), interleaved; buffers are
/// allocated ahead, the driver's streams made before the barrier, untimed.
pub(super) fn threads(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let most = THREADS[THREADS.len() - 1];
    // Each thread's pair: the kernel fills the first buffer, the copy moves it to the second.
    let buffers = (0..most)
        .map(|_| {
            let alloc = || rt.alloc(D0, MemoryKind::Device, BYTES);
            Ok((alloc()?, alloc()?))
        })
        .collect::<Outcome<Vec<_>>>()?;
    let fill = rt.kernel(D0, "fill_u32")?;
    let dims = LaunchDims::linear(1, WORDS);
    let kernel = bench.backend.kernel(D0, "fill_u32")?;
    let before = rt.stats();

    for n in THREADS {
        let mut ours = |rounds: usize| {
            time_threads(
                bench,
                n,
                |_| Ok(()),
                |thread, &()| {
                    let (filled, copy) = &buffers[thread];
                    let args = [
                        Arg::Span(filled.all()),
                        Arg::U32(thread as u32),
                        Arg::U64(u64::from(WORDS)),
                    ];
                    let mut chain = Vec::with_capacity(1);
                    for _ in 0..rounds {
                        // SAFETY: the kernel touches its count of words of its span, which fit.
                        let launched = unsafe { fill.launch(dims, &args, &mut chain) }?;
                        chain.push(launched);
                        let copied = rt.copy(D0, copy.all(), filled.all(), &mut chain)?;
                        chain.push(copied);
                    }
                    Ok(chain.into_iter().try_for_each(|token| rt.wait(token))?)
                },
            )
        };
        let mut raw = |rounds: usize| {
            time_threads(
                bench,
                n,
                |_| RawStream::new(driver),
                |thread, stream| {
                    let (filled, copy) = &buffers[thread];
                    let function = kernel.raw();
                    let fill_args = RawFill::new(filled.address(), thread as u32, WORDS);
                    let (dst, src) = (
                        copy.address() as sys::CUdeviceptr,
                        filled.address() as sys::CUdeviceptr,
                    );
                    for _ in 0..rounds {
                        // SAFETY: (both calls) the backend's fill_u32, live until it drops, on
                        // the thread's live stream of the current context; the thread's own two
                        // buffers, live until the end of the case and used by no one else
                        // meanwhile, of which the kernel writes the 64 words of the first.
                        unsafe {
                            fill_args.launch(driver, function, stream.raw)?;
                            result::memory::copy_async(driver, dst, src, BYTES, stream.raw)?;
                        }
                    }
                    stream.synchronize()
                },
            )
        };
        let [ours, raw] = plan.interleaved(31, ROUNDS_PER_BATCH, [&mut ours, &mut raw])?;
        report.row(
            "8",
            format!(
                "{n} threads, launch fill_u32 + 256 B copy each on its own stream, after the \
                 previous token (per round of all threads)"
            ),
            ours,
            "cuLaunchKernel + cuMemcpyAsync on a stream per thread, cuStreamSynchronize at \
             the end",
            raw,
            None,
            Target::None,
        );
        let ops_per_second = |ns: f64| n as f64 * 1e9 / ns;
        report.notes.push(format!(
            "case 8, {n} threads: ours {:.0} ops/s, the driver {:.0} ops/s (an op: one launch \
             and one copy): {:.2}x (issue 22's target for each thread's throughput: >= 0.9x)",
            ops_per_second(ours),
            ops_per_second(raw),
            raw / ours,
        ));
    }
    let after = rt.stats();
    report.notes.push(format!(
        "case 8: the runtime's planner: {} operations planned, {} cross-stream waits, {} stream \
         acquires (streams created: {})",
        after.operations - before.operations,
        after.waits - before.waits,
        after.stream_acquires - before.stream_acquires,
        after.streams_created - before.streams_created,
    ));
    for (filled, copy) in buffers {
        rt.free(filled)?;
        rt.free(copy)?;
    }
    Ok(())
}
