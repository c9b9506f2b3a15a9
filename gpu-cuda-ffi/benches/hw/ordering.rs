//! Cases 4 and 5: ordering. Streams and events from the runtime's pools against creating
//! and destroying them, and a k-way join against hand-written record and wait.

use super::*;

/// Case 4: streams and events from the runtime's pools against creating and destroying them.
pub(super) fn stream_event_pools(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    let buffer = rt.alloc(D0, MemoryKind::Device, 64)?;
    let address = buffer.address() as sys::CUdeviceptr;
    let kept_stream = RawStream::new(driver)?;
    let kept_event = RawEvent::new(driver)?;
    let before = rt.stats();

    // Streams: an operation with no dependency takes a stream from the pool; waiting for its
    // token synchronises the stream and gives it back.
    let [ours, created, kept] = plan.interleaved(
        51,
        200,
        [
            &mut whole(|calls| {
                for _ in 0..calls {
                    let token = rt.fill(D0, buffer.all(), 1, &mut Vec::new())?;
                    rt.wait(token)?;
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    let stream = result::stream::create(driver, sys::CU_STREAM_NON_BLOCKING)?;
                    // SAFETY: (the three calls) the stream just created, and 64 bytes of the
                    // runtime's live buffer, which nothing else uses meanwhile.
                    unsafe {
                        result::memory::set_d8_async(driver, address, 1, 64, stream)?;
                        result::stream::synchronize(driver, stream)?;
                        result::stream::destroy(driver, stream)?;
                    }
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    // SAFETY: the kept stream, and 64 bytes of the live buffer.
                    unsafe {
                        result::memory::set_d8_async(driver, address, 1, 64, kept_stream.raw)?;
                    }
                    kept_stream.synchronize()?;
                }
                Ok(())
            }),
        ],
    )?;
    let label = "fill 64 B with no dependency (stream from the pool) + wait";
    report.row(
        "4",
        label,
        ours,
        "cuStreamCreate + cuMemsetD8Async + cuStreamSynchronize + cuStreamDestroy",
        created,
        None,
        Target::None,
    );
    report.row(
        "4",
        label,
        ours,
        "cuMemsetD8Async + cuStreamSynchronize on one kept stream (the floor)",
        kept,
        None,
        Target::None,
    );

    // Events: forking a token records an event from the pool on its stream; waiting for the
    // second branch synchronises that event and gives it back.
    let [ours, created, kept] = plan.interleaved(
        51,
        400,
        [
            &mut whole(|calls| {
                for _ in 0..calls {
                    let token = rt.fill(D0, buffer.all(), 2, &mut Vec::new())?;
                    for branch in rt.fork(token, 2)? {
                        rt.wait(branch)?;
                    }
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    // SAFETY: the kept stream, and 64 bytes of the live buffer.
                    unsafe {
                        result::memory::set_d8_async(driver, address, 2, 64, kept_stream.raw)?;
                    }
                    let event = result::event::create(driver, sys::CU_EVENT_DISABLE_TIMING)?;
                    // SAFETY: the event just created, recorded on the kept stream, waited for
                    // and destroyed.
                    unsafe {
                        result::event::record(driver, event, kept_stream.raw)?;
                        result::stream::synchronize(driver, kept_stream.raw)?;
                        result::event::synchronize(driver, event)?;
                        result::event::destroy(driver, event)?;
                    }
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    // SAFETY: the kept stream and event, and 64 bytes of the live buffer.
                    unsafe {
                        result::memory::set_d8_async(driver, address, 2, 64, kept_stream.raw)?;
                        result::event::record(driver, kept_event.raw, kept_stream.raw)?;
                        result::stream::synchronize(driver, kept_stream.raw)?;
                        result::event::synchronize(driver, kept_event.raw)?;
                    }
                }
                Ok(())
            }),
        ],
    )?;
    let label = "fill 64 B with no dependency, fork in 2 (event from the pool), wait both";
    report.row(
        "4",
        label,
        ours,
        "cuMemsetD8Async + cuEventCreate + cuEventRecord + cuStreamSynchronize + \
         cuEventSynchronize + cuEventDestroy",
        created,
        None,
        Target::None,
    );
    report.row(
        "4",
        label,
        ours,
        "the same on one kept stream and one kept event (the floor)",
        kept,
        None,
        Target::None,
    );
    let after = rt.stats();
    report.notes.push(format!(
        "case 4: the runtime handed out {} streams and {} events, of which the driver created {} \
         and {} (pool misses)",
        after.stream_acquires - before.stream_acquires,
        after.event_acquires - before.event_acquires,
        after.streams_created - before.streams_created,
        after.events_created - before.events_created,
    ));
    rt.free(buffer)?;
    Ok(())
}

/// Case 5: k tokens from k streams joined, then one operation after the join.
pub(super) fn k_way_join(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    const SPAN: usize = 64;
    let buffer = rt.alloc(D0, MemoryKind::Device, 8 * SPAN)?;
    let streams = (0..8)
        .map(|_| RawStream::new(driver))
        .collect::<Outcome<Vec<_>>>()?;
    let events = (0..8)
        .map(|_| RawEvent::new(driver))
        .collect::<Outcome<Vec<_>>>()?;
    let before = rt.stats();
    for k in [2, 4, 8] {
        // Each round: k fills with no dependency between them (the first continues the previous
        // round's chain, the others take pool streams), joined, then one fill after the join.
        // The rounds chain, so one wait per batch synchronises everything.
        let [ours, raw] = plan.interleaved(
            31,
            200,
            [
                &mut whole(|rounds| {
                    let mut carry: Vec<Token> = Vec::with_capacity(1);
                    let mut tokens: Vec<Token> = Vec::with_capacity(k);
                    for _ in 0..rounds {
                        tokens.push(rt.fill(D0, buffer.span(0, SPAN)?, 1, &mut carry)?);
                        for branch in 1..k {
                            let span = buffer.span(branch * SPAN, SPAN)?;
                            tokens.push(rt.fill(D0, span, 1, &mut Vec::new())?);
                        }
                        carry.push(rt.join(&mut tokens)?);
                        let after_join = rt.fill(D0, buffer.span(0, SPAN)?, 2, &mut carry)?;
                        carry.push(after_join);
                    }
                    for token in carry {
                        rt.wait(token)?;
                    }
                    Ok(())
                }),
                &mut whole(|rounds| {
                    let base = buffer.address() as sys::CUdeviceptr;
                    // SAFETY: (the whole loop) the kept streams and events, and spans of the
                    // runtime's live buffer, which nothing else uses meanwhile.
                    unsafe {
                        for _ in 0..rounds {
                            for (branch, stream) in streams.iter().take(k).enumerate() {
                                let span = base + (branch * SPAN) as sys::CUdeviceptr;
                                result::memory::set_d8_async(driver, span, 1, SPAN, stream.raw)?;
                            }
                            for (stream, event) in streams.iter().zip(&events).take(k).skip(1) {
                                result::event::record(driver, event.raw, stream.raw)?;
                                result::stream::wait_event(driver, streams[0].raw, event.raw, 0)?;
                            }
                            result::memory::set_d8_async(driver, base, 2, SPAN, streams[0].raw)?;
                        }
                    }
                    streams[0].synchronize()
                }),
            ],
        )?;
        report.row(
            "5",
            format!("{k} fills on {k} streams, join, 1 fill after (chained rounds)"),
            ours,
            format!(
                "{k} cuMemsetD8Async on {k} streams, {} x (cuEventRecord + cuStreamWaitEvent), \
                 1 cuMemsetD8Async",
                k - 1
            ),
            raw,
            None,
            Target::None,
        );
    }
    let after = rt.stats();
    report.notes.push(format!(
        "case 5: the runtime inserted {} waits; the driver created {} streams and {} events \
         (pool misses)",
        after.waits - before.waits,
        after.streams_created - before.streams_created,
        after.events_created - before.events_created,
    ));
    rt.free(buffer)?;
    Ok(())
}
