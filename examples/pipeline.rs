//! The main example: a two-device, two-stream pipeline through the public API, on the best
//! backend present (the host backend on a machine without a GPU).
//!
//! Input floats live in a pinned staging buffer; each chunk goes to one of the devices
//! (alternating), where `y = a * x + 1` is computed: the upload (one stream) and the
//! initialisation of `y` (another stream) are joined by the kernel; the result is forked into
//! a copy back to the host (into locked, pageable memory) and a copy into a gather buffer on
//! device 0 (a cross-device dependency for chunks of device 1). Every result is verified, and
//! every stream/event call the backend saw is recorded and checked for defects.
//!
//! Run: `cargo run --release --example pipeline [-- FLOATS CHUNK_FLOATS]`; with
//! `PIPELINE_TRACE_OUT=FILE` it also writes the recorded calls there in the trace format.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use gpu_runtime::prelude::*;
use gpu_runtime::token::write_trace;

const A: f32 = 2.0;
const Y0: f32 = 1.0;

/// The pipeline's sizes, in floats.
struct Pipeline {
    floats: usize,
    chunk: usize,
}

impl WithBackend for Pipeline {
    type Output = Result<()>;

    fn with<B: Backend>(self, backend: B) -> Result<()> {
        let recorder = Arc::new(RecordingBackend::new(backend));
        let runtime = Runtime::shared(Arc::clone(&recorder), RuntimeConfig::default())?;
        let started = Instant::now();
        let stats = run(&runtime, &self)?;
        let elapsed = started.elapsed();
        let calls = recorder.calls();
        let shutdown = runtime.shutdown()?;
        let defects = recorder.defects();
        report(&recorder, &self, &stats, calls, elapsed.as_secs_f64());
        println!(
            "shutdown: {} unwaited tokens, {} cached bytes returned, {} pins released; live: {:?}",
            shutdown.program.unwaited.len(),
            shutdown.trimmed_bytes,
            shutdown.unpinned_ranges,
            recorder.live()
        );
        println!(
            "trace: {} stream/event calls recorded at the backend boundary, {} defects",
            recorder.trace().len(),
            defects.len()
        );
        // The backend's own trace, for comparing with what gpu-recorder records of this run.
        if let Some(path) = std::env::var_os("PIPELINE_TRACE_OUT")
            && let Err(e) = std::fs::write(&path, write_trace(&recorder.trace()))
        {
            eprintln!("pipeline: cannot write PIPELINE_TRACE_OUT: {e}");
        }
        if defects.is_empty() {
            Ok(())
        } else {
            for defect in &defects {
                eprintln!("defect: {defect:?}");
            }
            Err(Error::LimitExceeded {
                what: "trace defects",
                required: defects.len(),
                limit: 0,
                detail: Vec::new(),
            })
        }
    }
}

fn input(i: usize) -> f32 {
    (i % 1000) as f32 * 0.5
}

fn run<B: Backend>(rt: &Runtime<B>, p: &Pipeline) -> Result<RuntimeStats> {
    let devices: Vec<DeviceId> = (0..rt.device_count().min(2))
        .map(|d| DeviceId(d as u32))
        .collect();
    let bytes = p.floats * 4;
    let chunk_bytes = p.chunk * 4;
    let chunks = p.floats.div_ceil(p.chunk);
    println!(
        "pipeline: {} floats ({} MiB) in {chunks} chunks of {} KiB over {} device(s) of backend '{}'",
        p.floats,
        bytes >> 20,
        chunk_bytes >> 10,
        devices.len(),
        rt.backend().name()
    );
    for &d in &devices {
        let info = rt.device_info(d)?;
        println!("  {d}: {} ({} MiB)", info.name, info.total_memory >> 20);
    }

    // Pinned staging input, written by the host.
    let staging = rt.alloc(devices[0], MemoryKind::HostPinned, bytes)?;
    let x_bytes: Vec<u8> = (0..p.floats).flat_map(|i| input(i).to_le_bytes()).collect();
    // SAFETY: no work has been enqueued that uses the staging buffer yet.
    unsafe { staging.write_host(0, &x_bytes)? };
    drop(x_bytes);

    // Device buffers: x and y per device (whole size, each device uses its chunks), and the
    // gather buffer on device 0.
    let x: Vec<Buffer<'_, B>> = devices
        .iter()
        .map(|&d| rt.alloc(d, MemoryKind::Device, bytes))
        .collect::<Result<_>>()?;
    let y: Vec<Buffer<'_, B>> = devices
        .iter()
        .map(|&d| rt.alloc(d, MemoryKind::Device, bytes))
        .collect::<Result<_>>()?;
    let gather = rt.alloc(devices[0], MemoryKind::Device, bytes)?;
    let mut output = vec![0u8; bytes];
    let locked = rt.lock_host(&mut output)?;

    // Kernels are looked up by name once per device; the loop launches the handles.
    let kernels = |name| -> Result<Vec<Kernel<'_, B>>> {
        devices.iter().map(|&d| rt.kernel(d, name)).collect()
    };
    let (fill, axpy) = (kernels("fill_u32")?, kernels("axpy_f32")?);
    let mut pending: Vec<(usize, Token)> = Vec::with_capacity(chunks);
    let mut gathered: Vec<Token> = Vec::with_capacity(chunks);
    for c in 0..chunks {
        let slot = c % devices.len();
        let d = devices[slot];
        let (offset, len) = (c * chunk_bytes, chunk_bytes.min(bytes - c * chunk_bytes));
        let x_chunk = x[slot].span(offset, len)?;
        let y_chunk = y[slot].span(offset, len)?;
        let uploaded = rt.copy(d, x_chunk, staging.span(offset, len)?, &mut vec![])?;
        // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
        let initialised = unsafe {
            fill[slot].launch(
                LaunchDims::linear(64, 256),
                &[
                    Arg::Span(y_chunk),
                    Arg::U32(Y0.to_bits()),
                    Arg::U64((len / 4) as u64),
                ],
                &mut vec![],
            )
        }?;
        // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
        let computed = unsafe {
            axpy[slot].launch(
                LaunchDims::linear(64, 256),
                &[
                    Arg::F32(A),
                    Arg::Span(x_chunk),
                    Arg::Span(y_chunk),
                    Arg::U64((len / 4) as u64),
                ],
                &mut vec![uploaded, initialised],
            )
        }?;
        let mut branches = rt.fork(computed, 2)?.into_iter();
        let (to_host, to_gather) = (branches.next(), branches.next());
        let downloaded = rt.copy(
            d,
            locked.span(offset, len)?,
            y_chunk,
            &mut to_host.into_iter().collect(),
        )?;
        pending.push((c, downloaded));
        let copied = rt.copy(
            devices[0],
            gather.span(offset, len)?,
            y_chunk,
            &mut to_gather.into_iter().collect(),
        )?;
        gathered.push(copied);
    }

    // Wait in order, showing progress.
    let mut shown = 0;
    for (c, token) in pending {
        rt.wait(token)?;
        let percent = (c + 1) * 100 / chunks;
        if percent >= shown + 10 || c + 1 == chunks {
            shown = percent;
            println!(
                "  [{:<20}] {percent:3}% of chunks back on the host",
                "#".repeat(percent / 5)
            );
        }
    }
    let all_gathered = rt.join(&mut gathered)?;
    let mut gathered_bytes = vec![0u8; bytes];
    rt.download(
        devices[0],
        &mut gathered_bytes,
        gather.all(),
        &mut vec![all_gathered],
    )?;
    let mut locked = locked;
    verify(locked.memory()?, "host copy")?;
    verify(&gathered_bytes, "gather buffer on device 0")?;
    locked.unlock()?;
    println!(
        "verified: {} results on the host and in the gather buffer, all equal to {A} * x + {Y0}",
        p.floats
    );
    let stats = rt.stats();
    drop((staging, x, y, gather));
    Ok(stats)
}

fn verify(bytes: &[u8], what: &str) -> Result<()> {
    for (i, word) in bytes.chunks_exact(4).enumerate() {
        let got = f32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        let expected = A * input(i) + Y0;
        if got != expected {
            eprintln!("{what}: element {i} is {got}, expected {expected}");
            return Err(Error::LimitExceeded {
                what: "wrong results",
                required: i,
                limit: 0,
                detail: Vec::new(),
            });
        }
    }
    Ok(())
}

fn report<B: Backend>(
    recorder: &RecordingBackend<B>,
    p: &Pipeline,
    stats: &RuntimeStats,
    calls: u64,
    seconds: f64,
) {
    let bytes = (p.floats * 4) as f64;
    println!("report ({seconds:.3} s):");
    println!(
        "  bytes moved: {:.1} MiB host->device, {:.1} MiB device->host, {:.1} MiB gathered on device 0 (peer copies from device 1)",
        bytes / 1048576.0,
        bytes / 1048576.0,
        bytes / 1048576.0
    );
    println!(
        "  operations: {} planned, {} cross-stream waits; {} driver calls in all",
        stats.operations, stats.waits, calls
    );
    println!(
        "  pools: streams {} handed out / {} created, events {} / {}: {} driver create/destroy pairs saved",
        stats.stream_acquires,
        stats.streams_created,
        stats.event_acquires,
        stats.events_created,
        stats.pool_calls_saved()
    );
    for (device, kind, a) in &stats.allocator {
        if a.driver_calls > 0 || a.hits > 0 {
            println!(
                "  allocator {device} {kind}: peak {} KiB, {} hits, {} misses, {} driver calls",
                a.peak_allocated >> 10,
                a.hits,
                a.misses,
                a.driver_calls
            );
        }
    }
    println!(
        "  lock table: {} entries now, {} pins, {} nested locks; backend '{}'",
        stats.locks.entries,
        stats.locks.driver_pins,
        stats.locks.nested_locks,
        recorder.name()
    );
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let floats = args.next().and_then(|a| a.ok()).unwrap_or(8 << 20);
    let chunk = args.next().and_then(|a| a.ok()).unwrap_or(512 << 10).max(1);
    match with_best_backend(Pipeline { floats, chunk }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipeline failed: {e}");
            ExitCode::FAILURE
        }
    }
}
