//! Stress, soak and scaling on the best backend present (`gpu_runtime::stress` is the driver):
//!
//! 1. scaling: the 16-thread mix's operations per second per thread at 1, 4 and 16 threads,
//!    with one runtime shared by all threads and with one runtime per thread (separate
//!    locking), so a lock that serialises threads shows up as lost efficiency;
//! 2. two devices (skipped with one), first: peer copies through the runtime against the
//!    backend's own peer copy on a raw stream (CUDA's cuMemcpyPeerAsync), staged (a runtime
//!    opened with peer access off, before any has turned it on) and direct (peer access on),
//!    4 KiB latency and 64 / 256 MiB bandwidth both ways; then device 1's small-work latency
//!    while device 0 is busy;
//! 3. soak: the mix for the whole time on one shared runtime, sampling resident memory, the
//!    runtime's bookkeeping and the driver's live objects; shutdown must leave nothing.
//!
//! With `--faults N` it runs the soak on the host backend instead, with a fault injected about
//! every N driver calls. Exits non-zero on a wrong byte, an unexpected error or a leak.
//!
//! Run: `cargo run --release --example stress [-- --seconds S --threads N --seed X
//! --largest BYTES --scaling SECONDS --faults N --sample-ms MS --trims 0|1 --growable 0|1]`
//! (`--growable 1`: the soak's runtime has growable segments on, where the backend has virtual
//! memory).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_runtime::allocator::AllocatorConfig;
use gpu_runtime::backend::KernelArg;
use gpu_runtime::prelude::*;
use gpu_runtime::runtime::{LiveObjects, with_device};
use gpu_runtime::stress::{self, NoProbe, Probe, StressConfig, StressReport};

/// Command-line options.
#[derive(Clone, Debug)]
struct Options {
    soak: StressConfig,
    /// Seconds per scaling measurement (0: no scaling run).
    scaling: f64,
    /// The soak runtime's allocator tunables.
    allocator: AllocatorConfig,
}

fn parse() -> std::result::Result<Options, String> {
    let mut options = Options {
        soak: StressConfig {
            duration: Duration::from_secs(10),
            sample_every: Some(Duration::from_millis(500)),
            ..StressConfig::default()
        },
        scaling: 2.0,
        allocator: AllocatorConfig::default(),
    };
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        let arg = arg.to_string_lossy().into_owned();
        let value = args
            .next()
            .and_then(|v| v.into_string().ok())
            .ok_or(format!("{arg} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{arg} {v}: {e}"));
        let soak = &mut options.soak;
        match arg.as_str() {
            "--seconds" => soak.duration = Duration::from_secs_f64(number(&value)?),
            "--threads" => soak.threads = number(&value)? as usize,
            "--seed" => soak.seed = number(&value)? as u64,
            "--largest" => soak.largest = number(&value)? as usize,
            "--faults" => soak.fault_every = Some(number(&value)? as u64),
            "--sample-ms" => {
                soak.sample_every = Some(Duration::from_secs_f64(number(&value)? / 1e3))
            }
            "--scaling" => options.scaling = number(&value)?,
            "--trims" => soak.trims = number(&value)? != 0.0,
            "--growable" => options.allocator.growable_segments = number(&value)? != 0.0,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(why) => {
            eprintln!("stress: {why}");
            return ExitCode::from(2);
        }
    };
    let result = if options.soak.fault_every.is_some() {
        faults_on_host(&options.soak, options.allocator)
    } else {
        with_best_backend(Stress(options))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stress: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Stress(Options);

impl WithBackend for Stress {
    type Output = Result<()>;

    fn with<B: Backend>(self, backend: B) -> Result<()> {
        let Stress(options) = self;
        let backend = Arc::new(backend);
        println!(
            "stress: backend '{}', {} device(s), seed {}",
            backend.name(),
            backend.device_count(),
            options.soak.seed
        );
        // Two devices first: the staged peer copies need a process where no runtime has turned
        // peer access on yet (it stays on in the driver's shared primary contexts).
        two_devices(&backend)?;
        if options.scaling > 0.0 {
            scaling(&backend, &options)?;
        }
        // The soak counts the driver's live objects through a recording wrapper (counting
        // only, no trace), which needs the backend back from the scaling runtimes.
        let backend = Arc::try_unwrap(backend).map_err(|_| Error::ZeroSize {
            what: "backend still shared after the benchmarks",
        })?;
        let recorder = Arc::new(RecordingBackend::counting(backend));
        soak(&recorder, &*recorder, &options.soak, options.allocator)
    }
}

/// The soak with faults, on the host backend (the backend with fault injection).
fn faults_on_host(config: &StressConfig, allocator: AllocatorConfig) -> Result<()> {
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(2)));
    println!(
        "stress: host backend, 2 devices, seed {}, a fault about every {} driver calls",
        config.seed,
        config.fault_every.unwrap_or(0)
    );
    soak(&backend, &*backend, config, allocator)
}

/// Runs the mix on one shared runtime, prints the counts, the footprint samples and what
/// shutdown left, and fails on any failure or leak.
fn soak<B: Backend>(
    backend: &Arc<B>,
    probe: &dyn Probe,
    config: &StressConfig,
    allocator: AllocatorConfig,
) -> Result<()> {
    let runtime = Runtime::shared(
        Arc::clone(backend),
        RuntimeConfig {
            allocator,
            ..RuntimeConfig::default()
        },
    )?;
    let report = stress::run(std::slice::from_ref(&runtime), probe, config)?;
    let shutdown = runtime.shutdown()?;
    let live = probe.live();
    print_report("soak", config, &report);
    println!(
        "soak: shutdown: {} tokens ended unwaited (discarded after failed calls), {} cached bytes \
         returned, {} pins released; live driver objects: {live:?}",
        shutdown.program.unwaited_count(),
        shutdown.trimmed_bytes,
        shutdown.unpinned_ranges
    );
    let leaked = live.is_some_and(|live| live != LiveObjects::default());
    let unwaited = config.fault_every.is_none() && shutdown.program.unwaited_count() > 0;
    let unbounded = unbounded_without_trims(config, &report);
    if report.failure_count > 0 || leaked || unwaited || unbounded {
        return Err(Error::LimitExceeded {
            what: "stress failures, leaked objects, unwaited tokens or unbounded growth",
            required: report.failure_count as usize
                + usize::from(leaked)
                + usize::from(unwaited)
                + usize::from(unbounded),
            limit: 0,
            detail: Vec::new(),
        });
    }
    println!("soak: passed");
    Ok(())
}

/// The growth check of a soak that never trims (`--trims 0`, no faults): only the allocator's
/// own reclaiming keeps it bounded, so growth of the allocator's or the driver's quantities, or
/// reserved memory above its bound (docs/allocator.md), fails the run. Prints the bound.
fn unbounded_without_trims(config: &StressConfig, report: &StressReport) -> bool {
    if config.trims || config.fault_every.is_some() {
        return false;
    }
    let mut unbounded = false;
    if let Some(bound) = report.reserved_bound() {
        let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        println!(
            "soak: without trims: reserved at most {:.1} MiB; bound {:.1} MiB = {} x (live peaks \
             {:.1} MiB + pending peak {:.1} MiB) + one small segment per pool: {}",
            mib(bound.reserved),
            mib(bound.bound),
            stress::RESERVED_BOUND_FACTOR,
            mib(bound.live_peak),
            mib(bound.pending_peak),
            if bound.holds() { "within" } else { "ABOVE" }
        );
        unbounded |= !bound.holds();
    }
    for (early, late) in report.growth() {
        if early.name.starts_with("allocator") || early.name.starts_with("driver") {
            println!(
                "soak: without trims: FAILED: {} grew {} -> {late}",
                early.name, early.value
            );
            unbounded = true;
        }
    }
    unbounded
}

fn print_report(name: &str, config: &StressConfig, report: &StressReport) {
    let c = &report.counts;
    println!(
        "{name}: {} threads for {:.1} s: {} operations ({:.0} per thread per second), {} faults \
         injected, {} calls failed with them, {} failures",
        report.per_thread.len(),
        report.elapsed.as_secs_f64(),
        c.total(),
        report.ops_per_thread_per_second(),
        report.faults_injected,
        c.faulted,
        report.failure_count
    );
    println!("{name}: counts: {c:?}");
    for failure in &report.failures {
        println!("{name}: FAILURE: {failure}");
    }
    let (Some(first), Some(last)) = (report.samples.first(), report.samples.last()) else {
        return;
    };
    println!(
        "{name}: {} samples every {:?}; quantity: first / max of the first half / max of the \
         second half / last",
        report.samples.len(),
        config.sample_every.unwrap_or_default()
    );
    let halves = report.halves();
    for (index, (at_first, at_last)) in first.bounded().into_iter().zip(last.bounded()).enumerate()
    {
        let (early, late) = halves
            .get(index)
            .map_or((0, 0), |(early, late)| (early.value, *late));
        println!(
            "{name}:   {}: {} / {early} / {late} / {}",
            at_first.name, at_first.value, at_last.value
        );
    }
    let growth = report.growth();
    if growth.is_empty() {
        println!(
            "{name}: growth: none (no jump above 1.5x the first half's maximum, no creep of the \
             last quarter above the second's, beyond each quantity's noise)"
        );
    }
    for (early, late) in growth {
        println!("{name}: growth: {} {} -> {late}", early.name, early.value);
    }
}

/// Operations per second per thread at 1, 4 and 16 threads, one shared runtime against one
/// runtime per thread, in this run: after an untimed warm-up, each side runs twice per point in
/// the order shared, separate, separate, shared (so drift reaches both alike), half the time
/// each, and its two rates are averaged.
fn scaling<B: Backend>(backend: &Arc<B>, options: &Options) -> Result<()> {
    println!(
        "scaling: the mix for {:.1} s per point and side; ops/s per thread (efficiency against 1 \
         thread)",
        options.scaling
    );
    let config = |threads: usize, seconds: f64| StressConfig {
        threads,
        duration: Duration::from_secs_f64(seconds),
        sample_every: None,
        fault_every: None,
        ..options.soak.clone()
    };
    let rate = |config: &StressConfig, separate: bool| -> Result<f64> {
        let runtimes = (0..if separate { config.threads } else { 1 })
            .map(|_| Runtime::shared(Arc::clone(backend), RuntimeConfig::default()))
            .collect::<Result<Vec<_>>>()?;
        let report = stress::run(&runtimes, &NoProbe, config)?;
        if report.failure_count > 0 {
            print_report("scaling", config, &report);
            return Err(Error::LimitExceeded {
                what: "failures in a scaling run",
                required: report.failure_count as usize,
                limit: 0,
                detail: Vec::new(),
            });
        }
        Ok(report.ops_per_thread_per_second())
    };
    rate(&config(1, options.scaling.min(1.0)), false)?;
    println!("| threads | shared runtime | runtime per thread | shared / separate |");
    println!("|---|---|---|---|");
    let mut single = [0.0f64; 2];
    for threads in [1usize, 4, 16] {
        let half = config(threads, options.scaling / 2.0);
        let mut rates = [0.0f64; 2];
        for separate in [false, true, true, false] {
            rates[usize::from(separate)] += rate(&half, separate)? / 2.0;
        }
        if threads == 1 {
            single = rates;
        }
        println!(
            "| {threads} | {:.0} ({:.2}) | {:.0} ({:.2}) | {:.2} |",
            rates[0],
            rates[0] / single[0],
            rates[1],
            rates[1] / single[1],
            rates[0] / rates[1]
        );
    }
    Ok(())
}

/// The two-device measurements; skipped cleanly with one device.
fn two_devices<B: Backend>(backend: &Arc<B>) -> Result<()> {
    if backend.device_count() < 2 {
        println!("peer copies: skipped: one device");
        println!("busy-device latency: skipped: one device");
        return Ok(());
    }
    let staged = RuntimeConfig {
        peer_access: false,
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::shared(Arc::clone(backend), staged)?;
    peer_copies(&runtime, "staged (peer access off)")?;
    runtime.shutdown()?;
    let runtime = Runtime::shared(Arc::clone(backend), RuntimeConfig::default())?;
    println!(
        "peer access: device 0 -> 1 {:?}, device 1 -> 0 {:?}",
        runtime.peer_link(D0, D1)?,
        runtime.peer_link(D1, D0)?
    );
    peer_copies(&runtime, "direct (peer access on)")?;
    busy_device_latency(&runtime)?;
    runtime.shutdown().map(drop)
}

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Copies between the two devices, on the destination's stream: the runtime's copy + wait
/// against the backend's own peer copy on a raw stream + stream synchronisation, interleaved,
/// medians of 9 after a warm-up round. Prints one table row per size and direction, and the
/// runtime's count of direct and staged peer copies.
fn peer_copies<B: Backend>(rt: &Runtime<B>, path: &str) -> Result<()> {
    // 64 and 256 MiB on a GPU; a simulated device's share of its memory on the host backend
    // (1 and 4 MiB for its default 1 GiB: it copies byte by byte).
    let memory = rt.device_info(D0)?.total_memory;
    let sizes = [
        4 << 10,
        (64 << 20).min(memory / 1024),
        (256 << 20).min(memory / 256),
    ];
    println!("peer copies, {path}:");
    println!("| size | direction | runtime | backend's peer copy | runtime / backend |");
    println!("|---|---|---|---|---|");
    for bytes in sizes {
        for (from, to) in [(D0, D1), (D1, D0)] {
            let (ours, raw) = peer_copy_seconds(rt, from, to, bytes)?;
            let (ours_text, raw_text, ratio) = if bytes < 1 << 20 {
                // Latency: lower is better, so the ratio is the backend's over ours.
                (
                    format!("{:.2} us", ours * 1e6),
                    format!("{:.2} us", raw * 1e6),
                    raw / ours,
                )
            } else {
                let rate = |s: f64| format!("{:.1} GB/s", bytes as f64 / s / 1e9);
                (rate(ours), rate(raw), raw / ours)
            };
            println!(
                "| {} | {from} -> {to} | {ours_text} | {raw_text} | {ratio:.3} |",
                size_name(bytes)
            );
        }
    }
    let stats = rt.stats();
    println!(
        "peer copies, {path}: the runtime counted {} direct, {} staged",
        stats.peer_copies_direct, stats.peer_copies_staged
    );
    Ok(())
}

fn size_name(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// Median seconds of one copy of `bytes` from device `from` to device `to`: (runtime, backend).
fn peer_copy_seconds<B: Backend>(
    rt: &Runtime<B>,
    from: DeviceId,
    to: DeviceId,
    bytes: usize,
) -> Result<(f64, f64)> {
    let (src, dst) = (
        rt.alloc(from, MemoryKind::Device, bytes)?,
        rt.alloc(to, MemoryKind::Device, bytes)?,
    );
    rt.wait(rt.fill(from, src.all(), 7, &mut vec![])?)?;
    let backend = rt.backend();
    let stream = with_device(backend, to, || backend.stream_create(to))?;
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    let mut measure = || -> Result<()> {
        for round in 0..10 {
            let started = Instant::now();
            rt.wait(rt.copy(to, dst.all(), src.all(), &mut vec![])?)?;
            let ours_s = started.elapsed().as_secs_f64();
            let started = Instant::now();
            with_device(backend, to, || {
                // SAFETY: both buffers are live, `bytes` long, of the devices named, and no
                // other work uses them now.
                unsafe {
                    backend.copy_peer(stream, dst.address(), to, src.address(), from, bytes)
                }?;
                backend.stream_synchronize(stream)
            })?;
            let raw_s = started.elapsed().as_secs_f64();
            if round > 0 {
                ours.push(ours_s);
                raw.push(raw_s);
            }
        }
        Ok(())
    };
    let measured = measure();
    let destroyed = with_device(backend, to, || backend.stream_destroy(stream));
    measured.and(destroyed)?;
    Ok((median(ours), median(raw)))
}

/// Device 1's latency for a small fill + wait, idle and while device 0 runs about 100 ms of
/// fills, queued by another thread through the runtime, or to device 0's worker (medians of 30).
fn busy_device_latency<B: Backend>(rt: &Runtime<B>) -> Result<()> {
    // 256 MiB on a GPU, 16 MiB on the host backend's default device.
    let big: usize = (256 << 20).min(rt.device_info(D0)?.total_memory / 64);
    let busy = rt.alloc(D0, MemoryKind::Device, big)?;
    let small = rt.alloc(D1, MemoryKind::Device, 4096)?;
    let fill_u32 = rt.kernel(D0, "fill_u32")?;
    let long_work = |launches: usize| -> Result<()> {
        let mut chain = Vec::new();
        for value in 0..launches {
            let args = [
                Arg::Span(busy.all()),
                Arg::U32(value as u32),
                Arg::U64((big / 4) as u64),
            ];
            // SAFETY: fill_u32 writes big / 4 words: the whole buffer.
            let token = unsafe { fill_u32.launch(LaunchDims::linear(1, 32), &args, &mut chain) }?;
            chain.push(token);
        }
        chain.into_iter().try_for_each(|token| rt.wait(token))
    };
    // Calibrate: how many launches of one-block fills make about 100 ms on device 0.
    let started = Instant::now();
    long_work(1)?;
    let one = started.elapsed().as_secs_f64().max(1e-6);
    let launches = ((0.1 / one).round() as usize).clamp(1, 10_000);
    let latency = |count: usize| -> Result<Vec<f64>> {
        (0..count)
            .map(|_| {
                let started = Instant::now();
                rt.wait(rt.fill(D1, small.all(), 1, &mut vec![])?)?;
                Ok(started.elapsed().as_secs_f64() * 1e6)
            })
            .collect()
    };
    let idle = median(latency(30)?);
    // Device 0's work queued by another user thread through the runtime.
    let (busy_latency, long) = std::thread::scope(|scope| {
        let started = Instant::now();
        let long = scope.spawn(move || long_work(launches).map(|()| started.elapsed()));
        std::thread::sleep(Duration::from_millis(5));
        let measured = latency(30);
        (measured, long.join())
    });
    let long = long.map_err(|_| Error::ZeroSize {
        what: "long-work thread panicked",
    })??;
    let busy_latency = median(busy_latency?);
    // The same work handed to device 0's worker (raw launches on a stream of its own).
    let (address, words) = (busy.address(), (big / 4) as u64);
    let started = Instant::now();
    let ticket = rt.worker(D0)?.submit(move |backend: &B| {
        let kernel = backend.kernel(D0, "fill_u32")?;
        let stream = backend.stream_create(D0)?;
        let launched = (0..launches).try_for_each(|value| {
            let args = [
                KernelArg::Ptr(address),
                KernelArg::U32(value as u32),
                KernelArg::U64(words),
            ];
            // SAFETY: fill_u32 writes `words` words of the busy buffer, which outlives the
            // ticket (waited for below).
            unsafe { backend.launch(stream, kernel, LaunchDims::linear(1, 32), &args) }
        });
        let synchronized = backend.stream_synchronize(stream);
        launched
            .and(synchronized)
            .and(backend.stream_destroy(stream))
    });
    std::thread::sleep(Duration::from_millis(5));
    let measured = latency(30);
    ticket.wait()?;
    let on_worker = started.elapsed();
    let worker_latency = median(measured?);
    println!(
        "busy-device latency: device 1 fill 4 KiB + wait: idle {idle:.1} us; while device 0 runs \
         {:.0} ms of work ({launches} chained launches) queued by another thread {:.1} us (ratio \
         {:.2}), queued to device 0's worker ({:.0} ms) {:.1} us (ratio {:.2})",
        long.as_secs_f64() * 1e3,
        busy_latency,
        busy_latency / idle,
        on_worker.as_secs_f64() * 1e3,
        worker_latency,
        worker_latency / idle
    );
    Ok(())
}
