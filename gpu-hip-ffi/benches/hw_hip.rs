//! The HIP backend's hardware benchmark: figures of the user API (`Runtime<HipBackend>`) beside
//! the same work done with raw `hip*` calls of the same library in the same process and run
//! (on NVIDIA GPUs the `nvidia` shim's functions), as the HIP column of the CUDA bench's table.
//!
//! Cases (numbered as the CUDA bench's): (1) device alloc+free cache hit against
//! hipMallocAsync/hipFreeAsync from the warm default pool; (3) "is this range pinned, and
//! where?" through the lock table with 4,096 locked regions against hipPointerGetAttributes;
//! (7) a chained kernel launch (host cost per launch, short batches) against
//! hipModuleLaunchKernel of the same function. Timing is gpu_ffi_loader::hw_bench's: medians
//! over batches, the two sides interleaved. Device 0 is current on the measuring thread.
//!
//! `--bench` runs the full measurement; without it each case runs once as a smoke test. Without
//! the library or a device it prints a skip line and exits 0.

use std::cell::RefCell;
use std::ffi::c_void;
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::token::Token;
use gpu_core::{DeviceId, Error};
use gpu_ffi_loader::hw_bench::{KIB, MIB, Outcome, Plan, Report, Target, size_text, today, whole};
use gpu_hip_ffi::{Hip, HipBackend, reports_no_device, result, sys};
use gpu_rt::runtime::{Arg, Runtime, RuntimeConfig};

const D0: DeviceId = DeviceId(0);

/// A non-blocking stream of device 0, destroyed on drop.
struct RawStream {
    hip: &'static Hip,
    raw: sys::hipStream_t,
}

impl RawStream {
    fn new(hip: &'static Hip) -> Outcome<Self> {
        let raw = result::stream::create(hip, sys::hipStreamNonBlocking)?;
        Ok(Self { hip, raw })
    }

    fn synchronize(&self) -> Outcome<()> {
        // SAFETY: the stream lives until `self` drops.
        Ok(unsafe { result::stream::synchronize(self.hip, self.raw) }?)
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: the stream was created by `new` and is destroyed once, here.
        let _ = unsafe { result::stream::destroy(self.hip, self.raw) };
    }
}

/// Case 1: device memory cache hit against the warm default pool.
fn device_alloc_free(rt: &Runtime<HipBackend>, plan: Plan, report: &mut Report) -> Outcome<()> {
    let hip = rt.backend().library();
    let stream = RawStream::new(hip)?;
    let pool = result::device::default_memory_pool(hip, 0)?;
    // SAFETY: device 0's default pool, which lives as long as the device's state.
    unsafe { result::memory::set_pool_release_threshold(hip, pool, u64::MAX) }?;
    for size in [256, 64 * KIB, MIB] {
        let [ours, pool] = plan.interleaved(
            51,
            1000,
            [
                &mut whole(|calls| {
                    for _ in 0..calls {
                        let buffer = rt.alloc(D0, MemoryKind::Device, black_box(size))?;
                        rt.free(black_box(buffer))?;
                    }
                    Ok(())
                }),
                &mut whole(|calls| {
                    for _ in 0..calls {
                        // SAFETY: a live stream of device 0, which is current.
                        let address = unsafe {
                            result::memory::alloc_async(hip, black_box(size), stream.raw)
                        }?;
                        // SAFETY: the allocation just made, unused, freed in the same order.
                        unsafe { result::memory::free_async(hip, black_box(address), stream.raw) }?;
                    }
                    stream.synchronize()
                }),
            ],
        )?;
        report.row(
            "1",
            format!("alloc + free, device, {} (cache hit)", size_text(size)),
            ours,
            "hipMallocAsync + hipFreeAsync, warm default pool (threshold max), sync per batch",
            pool,
            None,
            Target::FasterBy(10.0),
        );
    }
    Ok(())
}

/// Locked ranges, unlocked when dropped (also on an error path).
struct LockedRanges<'a> {
    rt: &'a Runtime<HipBackend>,
    starts: Vec<usize>,
}

impl Drop for LockedRanges<'_> {
    fn drop(&mut self) {
        for &start in &self.starts {
            let _ = self.rt.unlock_range(start);
        }
    }
}

/// Case 3: "is this range pinned, and where?" with 4,096 locked regions, against
/// hipPointerGetAttributes on the same addresses.
fn pinned_lookup(rt: &Runtime<HipBackend>, plan: Plan, report: &mut Report) -> Outcome<()> {
    let hip = rt.backend().library();
    let regions = plan.pick(4096, 64);
    const REGION: usize = 32 * KIB;
    const STRIDE: usize = 64 * KIB;
    const QUERY_LEN: usize = 64;
    let backing = vec![1u8; regions * STRIDE + STRIDE];
    let base = (backing.as_ptr() as usize).next_multiple_of(STRIDE);
    let mut locked = LockedRanges {
        rt,
        starts: Vec::with_capacity(regions),
    };
    for index in 0..regions {
        let region = base + index * STRIDE;
        rt.lock_range(region, REGION)?;
        locked.starts.push(region);
    }
    // A fixed walk over the regions (a multiplicative step), at an offset inside each.
    let queries: Vec<usize> = (0..4096usize)
        .map(|i| base + (i * 2_654_435_761) % regions * STRIDE + (i * 97) % (REGION - QUERY_LEN))
        .collect();
    let lookup = |query: usize| -> Outcome<usize> {
        Ok(result::memory::attributes_of(hip, query)?.devicePointer as usize)
    };
    for &query in queries.iter().take(64) {
        let ours = rt.pinned_address(query, QUERY_LEN, D0)?;
        let theirs = lookup(query)?;
        if ours != Some(theirs) {
            return Err(
                format!("pinned_address({query:#x}) = {ours:x?}, HIP's {theirs:#x}").into(),
            );
        }
    }
    let ours_next = RefCell::new(0usize);
    let hip_next = RefCell::new(0usize);
    let take = |next: &RefCell<usize>| {
        let mut next = next.borrow_mut();
        let query = queries[*next % queries.len()];
        *next += 1;
        black_box(query)
    };
    let [ours, theirs] = plan.interleaved(
        31,
        queries.len(),
        [
            &mut whole(|calls| {
                for _ in 0..calls {
                    black_box(rt.pinned_address(take(&ours_next), QUERY_LEN, D0)?);
                }
                Ok(())
            }),
            &mut whole(|calls| {
                for _ in 0..calls {
                    black_box(lookup(take(&hip_next))?);
                }
                Ok(())
            }),
        ],
    )?;
    report.row(
        "3",
        format!("pinned_address(ptr, 64, device 0), {regions} locked regions"),
        ours,
        "hipPointerGetAttributes, same registered regions and addresses",
        theirs,
        None,
        Target::FasterBy(4.0),
    );
    drop(locked);
    drop(backing);
    Ok(())
}

/// Launches per timed batch: short enough that no launch waits for the GPU.
const HOST_BATCH: usize = 64;

/// Case 7: fill_u32 on a tiny buffer, each launch after the previous token, against
/// hipModuleLaunchKernel of the same function on one stream; the host's cost per launch.
fn kernel_launch(rt: &Runtime<HipBackend>, plan: Plan, report: &mut Report) -> Outcome<()> {
    let hip = rt.backend().library();
    const WORDS: u32 = 256;
    let buffer = rt.alloc(D0, MemoryKind::Device, WORDS as usize * 4)?;
    let dims = LaunchDims::linear(1, WORDS);
    let stream = RawStream::new(hip)?;
    let fill = rt.kernel(D0, "fill_u32")?;
    let args = [
        Arg::Span(buffer.all()),
        Arg::U32(7),
        Arg::U64(u64::from(WORDS)),
    ];
    let function = rt.backend().kernel(D0, "fill_u32")?.raw();
    let mut destination = buffer.address() as u64;
    let mut value: u32 = 7;
    let mut count = u64::from(WORDS);
    let params: [*mut c_void; 3] = [
        (&mut destination as *mut u64).cast(),
        (&mut value as *mut u32).cast(),
        (&mut count as *mut u64).cast(),
    ];
    let shape = result::module::LaunchShape {
        grid: [1, 1, 1],
        block: [WORDS, 1, 1],
        shared_bytes: 0,
    };
    let chain = RefCell::new(Vec::<Token>::with_capacity(1));
    let [ours, raw] = plan.interleaved(
        201,
        HOST_BATCH,
        [
            &mut |calls| {
                let start = Instant::now();
                for _ in 0..calls {
                    let mut chain = chain.borrow_mut();
                    // SAFETY: the kernel touches its count of words of its span, which fit.
                    let token = unsafe { fill.launch(dims, &args, &mut chain) }?;
                    chain.push(token);
                }
                let enqueued = start.elapsed();
                chain
                    .take()
                    .into_iter()
                    .try_for_each(|token| rt.wait(token))?;
                Ok(enqueued)
            },
            &mut |calls| {
                let start = Instant::now();
                for _ in 0..calls {
                    let mut params = params;
                    // SAFETY: the backend's fill_u32 (its module lives as long as the backend)
                    // on a live stream of device 0, with one pointer per parameter; it writes
                    // `WORDS` words of the live buffer.
                    unsafe {
                        result::module::launch(
                            hip,
                            function,
                            shape,
                            stream.raw,
                            params.as_mut_ptr(),
                        )
                    }?;
                }
                let enqueued = start.elapsed();
                stream.synchronize()?;
                Ok(enqueued)
            },
        ],
    )?;
    report.row(
        "7",
        "kernel launch after the previous token, host cost per launch",
        ours,
        "hipModuleLaunchKernel of the same function, one stream",
        raw,
        None,
        Target::WithinPercent(10.0),
    );
    rt.free(buffer)?;
    Ok(())
}

/// A case: its title and the function that measures it.
type Case = (
    &'static str,
    fn(&Runtime<HipBackend>, Plan, &mut Report) -> Outcome<()>,
);

const CASES: [Case; 3] = [
    ("device alloc+free cache hit", device_alloc_free),
    ("pinned lookup with 4,096 locked regions", pinned_lookup),
    ("kernel launch", kernel_launch),
];

fn run(backend: HipBackend, plan: Plan) -> Outcome<bool> {
    let hip = backend.library();
    let rt = Runtime::shared(Arc::new(backend), RuntimeConfig::default())?;
    result::device::set_current(hip, 0)?;
    let version = result::device::runtime_version(hip)?;
    let header = format!(
        "# HIP backend hardware benchmark\n\n\
         device 0: {} ({} devices); HIP runtime version {version} ({}); date {}; commit {}\n\
         mode: {}; figures are medians over batches of the per-call time; speed-up = \
         HIP / ours (above 1: ours is faster)\n",
        rt.device_info(D0)?.name,
        rt.device_count(),
        if cfg!(feature = "nvidia") {
            "HIP on NVIDIA: the gpu-hip-ffi shim over CUDA 11.8's runtime"
        } else {
            "ROCm"
        },
        today(),
        std::env::var("GIT_COMMIT").unwrap_or_else(|_| "unknown".into()),
        if plan.full {
            "full (--bench)"
        } else {
            "smoke run without --bench: figures are not meaningful"
        },
    );
    let mut report = Report::default();
    for (index, (title, case)) in CASES.iter().enumerate() {
        eprintln!("[hw_hip] case {}/{}: {title}", index + 1, CASES.len());
        if let Err(error) = case(&rt, plan, &mut report) {
            report.failed = true;
            report.notes.push(format!("{title} FAILED: {error}"));
        }
    }
    if let Err(error) = rt.shutdown() {
        report.failed = true;
        report.notes.push(format!("shutdown FAILED: {error}"));
    }
    report.publish(&header)
}

fn main() -> ExitCode {
    let plan = Plan {
        full: std::env::args().any(|argument| argument == "--bench"),
    };
    let backend = match HipBackend::new() {
        Ok(backend) => backend,
        Err(error)
            if matches!(error, Error::DriverLibraryNotFound { .. })
                || reports_no_device(&error) =>
        {
            println!("backend hip: skipped: no HIP library/no device");
            eprintln!("({error})");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("backend hip: opening the backend failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    match run(backend, plan) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("backend hip: {error}");
            ExitCode::FAILURE
        }
    }
}
