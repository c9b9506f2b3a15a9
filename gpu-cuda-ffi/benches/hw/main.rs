//! The CUDA backend's hardware benchmark: each figure of the user API (`Runtime<CudaBackend>`)
//! beside the same work done with raw driver calls in the same process and run, as one table.
//!
//! Cases: (1) device alloc+free cache hit against a warm driver pool and cuMemAlloc/cuMemFree;
//! (2) pinned host alloc+free cache hit against cuMemHostAlloc/cuMemFreeHost; (3) "is this range
//! pinned, and where?" through the lock table with 4,096 locked regions against
//! cuPointerGetAttribute; (4) streams and events from the runtime's pools against creating and
//! destroying them; (5) a k-way join against hand-written record+wait; (6) 256 MiB copies from
//! and to locked memory against raw async copies, and from and to pageable memory through the
//! runtime's staging against the driver's own pageable copies; (7) a chained kernel launch
//! against cuLaunchKernel: the host's cost per launch (short batches, so that no call waits for
//! the GPU) and the time to completion of long chains, with the backend alone and a CUkernel
//! launch beside them to show where the difference lies; (8) N threads (1, 4, 16) sharing the
//! device, each launching and copying on a stream of its own, through one runtime against the
//! driver on a stream per thread: the throughput of every thread together; (9) a chain of 1,000
//! small kernels replayed as one graph (the runtime's Graph and a raw cuGraph) against 1,000
//! cuLaunchKernel on a stream, to completion, and a replay after updating every node in place
//! against recording and instantiating again; (10) the MLIR fork/join program's work with its
//! floor's kernels as one replayed graph against the same calls by hand on two streams; (11) a
//! 4-layer MLP's forward step as a graph against the same kernels on a stream. Cases 10 and 11
//! load PTX compiled on the GPU machine (`nvcc -ptx`), named by `GPU_BENCH_FORKJOIN_PTX`
//! (`clients/mlir/baseline/forkjoin_raw.cu`) and `GPU_BENCH_MLP_PTX` (`benches/hw/mlp.cu`), and
//! are skipped without them.
//!
//! Timing: each measurement runs one untimed warm-up batch per side, then N batches of M calls
//! per side, each batch timed with `Instant` around the calls (and the one synchronisation that
//! GPU work needs, inside the timed region); the figure is the median over batches of the batch
//! time divided by M. Where a row sets ours against a driver call of similar cost, the sides
//! are measured interleaved (a batch of each in turn, N rounds), so that drift during the run
//! (GPU clocks, driver state) reaches both alike; the cases say where they measure one side at
//! a time, and why. Device 0's primary context is current on the measuring thread throughout,
//! for both sides (and on each of case 8's threads).
//!
//! `cargo bench` passes `--bench`: the full run (under ~3 minutes on an H200). Without it
//! (`cargo test --benches`) every case runs once with tiny batches, as a smoke test whose
//! figures mean nothing. Without a driver or a device it prints a skip line and exits 0.
//! Environment: `GIT_COMMIT` (printed in the header), `HW_BENCH_OUT` (a file that also gets the
//! table).
// The raw sides call the driver through the crate's typed calls (`result::memory::alloc` is
// cuMemAlloc), which look each entry point up in the loader's cache (one atomic load) and
// check its code, as the backend's own calls do.

use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString, c_void};
use std::hint::black_box;
use std::process::ExitCode;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::library::ArgList;
use gpu_core::backend::{Backend, KernelArg, LaunchDims};
use gpu_core::token::Token;
use gpu_core::{DeviceId, Error};
use gpu_cuda_ffi::{CudaBackend, Driver, check, reports_no_device, result, sys};
use gpu_ffi_loader::hw_bench::{
    KIB, MIB, Outcome, Plan, Report, Target, figure, size_text, today, whole,
};
use gpu_rt::runtime::{Arg, Runtime, RuntimeConfig};

mod copies;
mod forkjoin;
mod graphs;
mod launches;
mod memory;
mod mlp;
mod ordering;
mod threads;

use copies::copies;
use forkjoin::fork_join;
use graphs::graphs;
use launches::kernel_launch;
use memory::{device_alloc_free, host_pinned_alloc_free, pinned_lookup};
use mlp::mlp;
use ordering::{k_way_join, stream_event_pools};
use threads::threads;

const D0: DeviceId = DeviceId(0);

/// A non-blocking stream of the current context, destroyed on drop.
struct RawStream {
    driver: &'static Driver,
    raw: sys::CUstream,
}

impl RawStream {
    fn new(driver: &'static Driver) -> Outcome<Self> {
        let raw = result::stream::create(driver, sys::CU_STREAM_NON_BLOCKING)?;
        Ok(Self { driver, raw })
    }

    fn synchronize(&self) -> Outcome<()> {
        // SAFETY: the stream lives until `self` drops.
        Ok(unsafe { result::stream::synchronize(self.driver, self.raw) }?)
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: the stream was created by `new` and is destroyed once, here.
        let _ = unsafe { result::stream::destroy(self.driver, self.raw) };
    }
}

/// An event without timing of the current context, destroyed on drop.
struct RawEvent {
    driver: &'static Driver,
    raw: sys::CUevent,
}

impl RawEvent {
    fn new(driver: &'static Driver) -> Outcome<Self> {
        let raw = result::event::create(driver, sys::CU_EVENT_DISABLE_TIMING)?;
        Ok(Self { driver, raw })
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: the event was created by `new` and is destroyed once, here.
        let _ = unsafe { result::event::destroy(self.driver, self.raw) };
    }
}

/// The PTX image named by the environment variable `var` (compiled on the GPU machine from a
/// `.cu` file of the bundle), NUL-terminated; `None` when the variable is unset (the case that
/// needs it is skipped).
fn ptx_from_env(var: &str) -> Outcome<Option<CString>> {
    let Ok(path) = std::env::var(var) else {
        return Ok(None);
    };
    let text = std::fs::read(&path).map_err(|e| format!("cannot read {path} ({var}): {e}"))?;
    Ok(Some(
        CString::new(text).map_err(|_| format!("{path} ({var}) holds a NUL byte"))?,
    ))
}

/// A module loaded with the driver directly into the current context, unloaded on drop: the
/// raw side's kernels.
struct RawModule {
    driver: &'static Driver,
    raw: sys::CUmodule,
}

impl RawModule {
    fn new(driver: &'static Driver, image: &CStr) -> Outcome<Self> {
        // SAFETY: a complete, NUL-terminated image, read during the call.
        let raw = unsafe { result::module::load_data(driver, image.as_ptr().cast()) }?;
        Ok(Self { driver, raw })
    }

    fn function(&self, name: &CStr) -> Outcome<sys::CUfunction> {
        // SAFETY: the module lives until `self` drops.
        Ok(unsafe { result::module::function(self.driver, self.raw, name) }?)
    }
}

impl Drop for RawModule {
    fn drop(&mut self) {
        // SAFETY: loaded by `new`, unloaded once, here, after the raw side's launches.
        let _ = unsafe { result::module::unload(self.driver, self.raw) };
    }
}

/// One kernel launch of the raw side, its arguments packed once, before the timed loop.
struct RawLaunch {
    function: sys::CUfunction,
    shape: result::module::LaunchShape,
    /// The values `pointers` point into, kept alive with them.
    _values: ArgList,
    pointers: Vec<*mut c_void>,
}

impl RawLaunch {
    fn new(
        function: sys::CUfunction,
        shape: result::module::LaunchShape,
        args: &[KernelArg],
    ) -> Self {
        let mut values = ArgList::pack(args);
        let pointers = values.pointers();
        Self {
            function,
            shape,
            _values: values,
            pointers,
        }
    }

    /// cuLaunchKernel on `stream`.
    ///
    /// # Safety
    /// The function is of a live module of the current context and takes the packed values'
    /// types, `stream` is a live stream of that context, and the memory the kernel reaches
    /// stays valid, and untouched by anything that races with it, until it has completed.
    unsafe fn launch(&mut self, driver: &Driver, stream: sys::CUstream) -> Outcome<()> {
        // SAFETY: one pointer per parameter, to a value of its type in `values`, alive through
        // the call; the caller's promise for the rest.
        Ok(unsafe {
            result::module::launch(
                driver,
                self.function,
                self.shape,
                stream,
                self.pointers.as_mut_ptr(),
            )
        }?)
    }
}

/// fill_u32's three arguments (destination, value, word count) as cuLaunchKernel takes them,
/// and its one-block shape: what the raw sides launch.
struct RawFill {
    destination: u64,
    value: u32,
    count: u64,
    shape: result::module::LaunchShape,
}

impl RawFill {
    /// `value` into the `words` words at `address`, one block of `words` threads.
    fn new(address: usize, value: u32, words: u32) -> Self {
        Self {
            destination: address as u64,
            value,
            count: u64::from(words),
            shape: result::module::LaunchShape {
                grid: [1, 1, 1],
                block: [words, 1, 1],
                shared_bytes: 0,
            },
        }
    }

    /// cuLaunchKernel of `function` (fill_u32: a CUfunction, or a CUkernel cast) on `stream`.
    ///
    /// # Safety
    /// `function` is fill_u32 of a live module or library, `stream` a live stream of the
    /// current context, and the words at the destination stay valid, and untouched by anything
    /// that races with the kernel, until it has completed.
    unsafe fn launch(
        &self,
        driver: &Driver,
        function: sys::CUfunction,
        stream: sys::CUstream,
    ) -> Outcome<()> {
        let mut params: [*mut c_void; 3] = [
            ptr::from_ref(&self.destination).cast_mut().cast(),
            ptr::from_ref(&self.value).cast_mut().cast(),
            ptr::from_ref(&self.count).cast_mut().cast(),
        ];
        // SAFETY: one pointer per parameter, each to a value of its type that lives through
        // the call (the driver only reads them); the caller's promise for the function, the
        // stream and the memory.
        Ok(unsafe {
            result::module::launch(driver, function, self.shape, stream, params.as_mut_ptr())
        }?)
    }
}

/// What every case needs.
struct Bench<'a> {
    /// The backend, shared with the extra runtimes of the staging sweep.
    backend: &'a Arc<CudaBackend>,
    rt: &'a Runtime<CudaBackend>,
    driver: &'static Driver,
    plan: Plan,
}

impl Bench<'_> {
    /// The allocator's counters of device 0 for `kind`.
    fn allocator_stats(&self, kind: MemoryKind) -> gpu_core::allocator::AllocatorStats {
        self.rt
            .stats()
            .allocator
            .into_iter()
            .find(|&(device, k, _)| device == D0 && k == kind)
            .map(|(_, _, stats)| stats)
            .unwrap_or_default()
    }
}

/// Whether opening the backend failed for want of a driver or of a device.
fn no_driver_or_device(error: &Error) -> bool {
    match error {
        Error::DriverLibraryNotFound { .. } => true,
        other => reports_no_device(other),
    }
}

/// A case: its title and the function that measures it.
type Case = (&'static str, fn(&Bench<'_>, &mut Report) -> Outcome<()>);

const CASES: [Case; 11] = [
    ("device alloc+free cache hit", device_alloc_free),
    ("pinned host alloc+free cache hit", host_pinned_alloc_free),
    ("pinned lookup with 4,096 locked regions", pinned_lookup),
    ("stream and event pools", stream_event_pools),
    ("k-way join", k_way_join),
    ("256 MiB copies", copies),
    ("kernel launch", kernel_launch),
    (
        "threads launching and copying on streams of their own",
        threads,
    ),
    ("graphs: 1,000-kernel chain and in-place updates", graphs),
    ("graphs: the fork/join program's work", fork_join),
    ("graphs: a small MLP's forward step", mlp),
];

fn run(backend: CudaBackend, plan: Plan) -> Outcome<bool> {
    let driver = backend.driver();
    let context = backend.primary_context(D0)?;
    let backend = Arc::new(backend);
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default())?;
    // Device 0's context stays current on this thread for both sides.
    // SAFETY: device 0's primary context, which the backend holds retained until it drops.
    unsafe { result::context::set_current(driver, context) }?;
    let version = driver.driver_version();
    let header = format!(
        "# CUDA backend hardware benchmark\n\n\
         device 0: {} ({} devices); driver API version {} (CUDA {}.{}); date {}; commit {}\n\
         mode: {}; figures are medians over batches of the per-call time, host clock around \
         each batch (GPU work synchronised inside it); speed-up = driver / ours \
         (above 1: ours is faster)\n",
        rt.device_info(D0)?.name,
        rt.device_count(),
        version,
        version / 1000,
        version % 1000 / 10,
        today(),
        std::env::var("GIT_COMMIT").unwrap_or_else(|_| "unknown".into()),
        if plan.full {
            "full (--bench)"
        } else {
            "smoke run without --bench: figures are not meaningful"
        },
    );
    let bench = Bench {
        backend: &backend,
        rt: &rt,
        driver,
        plan,
    };
    let mut report = Report::default();
    let started = Instant::now();
    for (index, (title, case)) in CASES.iter().enumerate() {
        eprintln!(
            "[hw {:6.1}s] case {}/{}: {title}",
            started.elapsed().as_secs_f64(),
            index + 1,
            CASES.len()
        );
        if let Err(error) = case(&bench, &mut report) {
            report.failed = true;
            report
                .notes
                .push(format!("case {} ({title}) FAILED: {error}", index + 1));
        }
    }
    match rt.shutdown() {
        Ok(shutdown) if shutdown.program.unwaited.is_empty() => {}
        Ok(shutdown) => report.notes.push(format!(
            "shutdown: {} tokens ended unwaited",
            shutdown.program.unwaited.len()
        )),
        Err(error) => {
            report.failed = true;
            report.notes.push(format!("shutdown FAILED: {error}"));
        }
    }
    // The backend releases the primary context when it drops: leave none current.
    // SAFETY: no context.
    unsafe { result::context::set_current(driver, ptr::null_mut()) }?;
    eprintln!("[hw {:6.1}s] done", started.elapsed().as_secs_f64());
    report.publish(&header)
}

fn main() -> ExitCode {
    let plan = Plan {
        full: std::env::args().any(|argument| argument == "--bench"),
    };
    let backend = match CudaBackend::new() {
        Ok(backend) => backend,
        Err(error) if no_driver_or_device(&error) => {
            println!("backend cuda: skipped: no CUDA driver/no device");
            eprintln!("({error})");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("backend cuda: opening the backend failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    match run(backend, plan) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("backend cuda: {error}");
            ExitCode::FAILURE
        }
    }
}
