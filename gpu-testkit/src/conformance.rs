//! The backend-generic conformance suite: the behaviour every backend must show through the
//! runtime, written once and run on the host backend in CI and on real drivers by test-hw.
//!
//! Each case opens a fresh backend (through the caller's `open`), wraps it in a
//! [`RecordingBackend`] and checks, besides its own rules, that at the end no stream, event,
//! allocation or host registration is left and the recorded trace has no defect. Cases that
//! need two devices are skipped on a one-device backend.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;
use gpu_core::token::Token;
use gpu_core::workgroup::{WorkgroupBuffer, WorkgroupPlanner};
use gpu_rt::runtime::{
    Arg, Buffer, LiveObjects, PeerLink, RecordingBackend, Runtime, RuntimeConfig,
};

/// How one case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// Not applicable to this backend (the reason says why, e.g. "one device").
    Skipped(String),
    /// A check failed (the message says which and with what values).
    Failed(String),
}

/// One case's name and outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name.
    pub name: &'static str,
    /// How it ended.
    pub outcome: Outcome,
}

impl fmt::Display for CaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Passed => write!(f, "passed   {}", self.name),
            Outcome::Skipped(why) => write!(f, "skipped  {} ({why})", self.name),
            Outcome::Failed(why) => write!(f, "FAILED   {}: {why}", self.name),
        }
    }
}

/// A case's verdict short of passing: skipped or failed, with the reason.
enum Stop {
    Skip(String),
    Fail(String),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Fail(format!("unexpected error: {e}"))
    }
}

type CaseResult = core::result::Result<(), Stop>;

macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err(Stop::Fail(format!($($message)+)));
        }
    };
}

/// Opens a backend for one case.
pub type Open<'a, B> = &'a dyn Fn() -> Result<B>;

/// A backend wrapped for checking, and a runtime over it.
struct Harness<B: Backend> {
    backend: Arc<RecordingBackend<B>>,
    runtime: Runtime<RecordingBackend<B>>,
}

impl<B: Backend> Harness<B> {
    fn open(open: Open<'_, B>) -> Result<Self> {
        let config = RuntimeConfig {
            staging_chunk: 64 << 10,
            ..RuntimeConfig::default()
        };
        Self::open_with(open, config)
    }

    fn open_with(open: Open<'_, B>, config: RuntimeConfig) -> Result<Self> {
        let backend = Arc::new(RecordingBackend::new(open()?));
        let runtime = Runtime::shared(Arc::clone(&backend), config)?;
        Ok(Self { backend, runtime })
    }

    /// Shuts the runtime down and checks nothing was left behind.
    fn close(self) -> CaseResult {
        let Harness { backend, runtime } = self;
        let report = runtime.shutdown()?;
        ensure!(
            report.program.unwaited.is_empty(),
            "tokens ended unwaited: {:?}",
            report.program.unwaited
        );
        check_clean(&backend)
    }
}

/// No object left in the backend, and no defect in the recorded trace.
fn check_clean<B: Backend>(backend: &RecordingBackend<B>) -> CaseResult {
    let live = backend.live();
    ensure!(
        live == LiveObjects::default(),
        "left behind at shutdown: {live:?}"
    );
    let defects = backend.defects();
    ensure!(
        defects.is_empty(),
        "trace defects at the backend boundary: {defects:?}"
    );
    Ok(())
}

fn two_devices<B: Backend>(
    runtime: &Runtime<B>,
) -> core::result::Result<(DeviceId, DeviceId), Stop> {
    if runtime.device_count() < 2 {
        return Err(Stop::Skip("one device".to_string()));
    }
    Ok((DeviceId(0), DeviceId(1)))
}

/// Runs every case on backends from `open`, in order.
pub fn run_all<B: Backend>(open: Open<'_, B>) -> Vec<CaseReport> {
    type Case<B> = fn(Open<'_, B>) -> CaseResult;
    let cases: [(&'static str, Case<B>); 12] = [
        (
            "devices_report_capabilities",
            devices_report_capabilities::<B>,
        ),
        (
            "allocation_kinds_and_errors",
            allocation_kinds_and_errors::<B>,
        ),
        (
            "lock_rules_through_the_runtime",
            lock_rules_through_the_runtime::<B>,
        ),
        (
            "cross_stream_order_and_data",
            cross_stream_order_and_data::<B>,
        ),
        (
            "cross_device_order_and_data",
            cross_device_order_and_data::<B>,
        ),
        (
            "peer_copies_of_every_memory_form",
            peer_copies_of_every_memory_form::<B>,
        ),
        (
            "kernels_compute_and_opt_in",
            kernels_compute_and_opt_in::<B>,
        ),
        (
            "library_launches_are_checked",
            library_launches_are_checked::<B>,
        ),
        ("current_device_restored", current_device_restored::<B>),
        ("pools_are_reused", pools_are_reused::<B>),
        ("scenario_leaves_nothing", scenario_leaves_nothing::<B>),
        (
            "every_driver_failure_is_clean",
            every_driver_failure_is_clean::<B>,
        ),
    ];
    cases
        .into_iter()
        .map(|(name, case)| {
            let outcome = match catch_unwind(AssertUnwindSafe(|| case(open))) {
                Ok(Ok(())) => Outcome::Passed,
                Ok(Err(Stop::Skip(why))) => Outcome::Skipped(why),
                Ok(Err(Stop::Fail(why))) => Outcome::Failed(why),
                Err(panic) => Outcome::Failed(format!("panicked: {}", panic_message(&panic))),
            };
            CaseReport { name, outcome }
        })
        .collect()
}

/// Runs every case ([`run_all`]) on backend `name`, prints each report and then, on a line of
/// its own, the hardware runner's summary (`backend NAME: ran (N conformance cases passed, M
/// skipped)`), and returns how many cases failed.
pub fn run_and_print<B: Backend>(name: &str, open: Open<'_, B>) -> usize {
    let reports = run_all(open);
    for report in &reports {
        std::eprintln!("{report}");
    }
    let count =
        |matching: fn(&Outcome) -> bool| reports.iter().filter(|r| matching(&r.outcome)).count();
    let failed = count(|o| matches!(o, Outcome::Failed(_)));
    let skipped = count(|o| matches!(o, Outcome::Skipped(_)));
    if failed == 0 {
        std::eprintln!(
            "\nbackend {name}: ran ({} conformance cases passed, {skipped} skipped)",
            reports.len() - skipped
        );
    }
    failed
}

fn panic_message(panic: &Box<dyn core::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

fn devices_report_capabilities<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    ensure!(h.runtime.device_count() >= 1, "no device");
    for d in 0..h.runtime.device_count() {
        let info = h.runtime.device_info(DeviceId(d as u32))?;
        let limits = info.workgroup;
        ensure!(
            limits.default_per_block <= limits.max_per_block_opt_in,
            "device {d}: default workgroup limit {} above the opt-in maximum {}",
            limits.default_per_block,
            limits.max_per_block_opt_in
        );
        ensure!(
            info.allocator.device.available,
            "device {d} reports no device memory"
        );
    }
    let count = h.runtime.device_count();
    let err = h.runtime.device_info(DeviceId(count as u32)).err();
    ensure!(
        err == Some(Error::UnknownDevice {
            device: DeviceId(count as u32),
            device_count: count
        }),
        "an unknown device gave {err:?}"
    );
    h.close()
}

/// Fills `span` of `buffer` on `device`, downloads it and checks every byte.
fn fill_and_verify<B: Backend>(
    runtime: &Runtime<B>,
    device: DeviceId,
    span: gpu_rt::runtime::Span<'_>,
    value: u8,
) -> CaseResult {
    let filled = runtime.fill(device, span, value, &mut vec![])?;
    let mut back = vec![!value; span.len()];
    runtime.download(device, &mut back, span, &mut vec![filled])?;
    let wrong = back.iter().position(|&b| b != value);
    ensure!(
        wrong.is_none(),
        "byte {wrong:?} of {} not filled with {value}",
        span.len()
    );
    Ok(())
}

fn allocation_kinds_and_errors<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let device = DeviceId(0);
    let caps = rt.device_info(device)?.allocator;
    for kind in MemoryKind::CACHED {
        if !caps.support(kind).available {
            let err = rt.alloc(device, kind, 256).err();
            ensure!(
                matches!(err, Some(Error::KindUnsupported { .. })),
                "{kind} is not available, yet allocating it gave {err:?}"
            );
            continue;
        }
        for size in [1, 4096, 1 << 20] {
            let buffer = rt.alloc(device, kind, size)?;
            ensure!(
                buffer.size() == size,
                "asked {size} bytes of {kind}, got {}",
                buffer.size()
            );
            fill_and_verify(rt, device, buffer.all(), 0x5a)?;
        }
        let err = rt.alloc(device, kind, 0).err();
        ensure!(
            matches!(err, Some(Error::ZeroSize { .. })),
            "zero bytes of {kind} gave {err:?}"
        );
    }
    let (buffer, token) = rt.alloc_after(device, MemoryKind::Device, 4096, &mut vec![])?;
    fill_and_verify(rt, device, buffer.all(), 3)?;
    rt.wait(token)?;
    let outside = buffer.span(4000, 200).err();
    ensure!(
        outside
            == Some(Error::OutOfBounds {
                offset: 4000,
                len: 200,
                size: 4096
            }),
        "a span past the end gave {outside:?}"
    );
    drop(buffer);
    h.close()
}

fn lock_rules_through_the_runtime<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let memory = vec![0u8; 64 << 10];
    let base = memory.as_ptr() as usize;
    let registrations = || h.backend.live().registrations;
    rt.lock_range(base, 16 << 10)?;
    rt.lock_range(base + 1024, 1024)?;
    ensure!(
        registrations() == 1,
        "a nested lock registered again ({} registrations)",
        registrations()
    );
    let overlap = rt.lock_range(base + (8 << 10), 16 << 10).err();
    ensure!(
        matches!(overlap, Some(Error::LockOverlap { .. })),
        "an overlapping lock gave {overlap:?}"
    );
    rt.lock_range(base + (16 << 10), 4096)?;
    ensure!(
        registrations() == 2,
        "adjacent ranges must stay separate entries"
    );
    for device in 0..rt.device_count() {
        let device = DeviceId(device as u32);
        ensure!(
            rt.pinned_address(base + 100, 100, device)?.is_some(),
            "a pinned range missed"
        );
        ensure!(
            rt.pinned_address(base + (16 << 10) - 8, 16, device)?
                .is_none(),
            "a span over two entries hit"
        );
    }
    let unknown = rt.unlock_range(base + (40 << 10)).err();
    ensure!(
        unknown
            == Some(Error::NotLocked {
                ptr: base + (40 << 10)
            }),
        "unlocking unknown memory gave {unknown:?}"
    );
    rt.unlock_range(base + 5000)?;
    rt.unlock_range(base + 5000)?;
    rt.unlock_range(base + (16 << 10))?;
    ensure!(
        registrations() == 0,
        "{} registrations left after the last unlocks",
        registrations()
    );
    drop(memory);
    h.close()
}

/// A large fill on one stream, an independent fill on another, then a copy that depends on
/// both: the copy must see the first fill's bytes in full.
fn cross_stream_order_and_data<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let size = 8 << 20;
    let (a, b) = (
        rt.alloc(d, MemoryKind::Device, size)?,
        rt.alloc(d, MemoryKind::Device, size)?,
    );
    let fill_a = rt.fill(d, a.all(), 0x11, &mut vec![])?;
    let fill_b = rt.fill(d, b.all(), 0x22, &mut vec![])?;
    let copied = rt.copy(d, b.all(), a.all(), &mut vec![fill_a, fill_b])?;
    let mut back = vec![0u8; size];
    rt.download(d, &mut back, b.all(), &mut vec![copied])?;
    let wrong = back.iter().position(|&x| x != 0x11);
    ensure!(
        wrong.is_none(),
        "byte {wrong:?} of the copy does not hold the first stream's fill"
    );
    drop((a, b));
    h.close()
}

fn cross_device_order_and_data<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let (d0, d1) = two_devices(rt)?;
    let size = 4 << 20;
    let on0 = rt.alloc(d0, MemoryKind::Device, size)?;
    let on1 = rt.alloc(d1, MemoryKind::Device, size)?;
    let filled = rt.fill(d0, on0.all(), 0x77, &mut vec![])?;
    let copied = rt.copy(d1, on1.all(), on0.all(), &mut vec![filled])?;
    let mut back = vec![0u8; size];
    rt.download(d1, &mut back, on1.all(), &mut vec![copied])?;
    let wrong = back.iter().position(|&x| x != 0x77);
    ensure!(
        wrong.is_none(),
        "byte {wrong:?} on device 1 does not hold device 0's fill"
    );
    let refused = rt.fill(d1, on0.all(), 0, &mut vec![]).err();
    ensure!(
        refused
            == Some(Error::WrongDevice {
                expected: d1,
                found: d0
            }),
        "device 0 memory used on device 1 gave {refused:?}"
    );
    drop((on0, on1));
    h.close()
}

/// Copies between two devices' memory, synchronous and stream-ordered allocations on either
/// side, on either device's stream, with peer access off and on: every byte arrives, and the
/// runtime's peer links agree with what the backend says is possible. On CUDA a plain copy of
/// another device's stream-ordered memory is refused without peer access: this is the case
/// that found it.
fn peer_copies_of_every_memory_form<B: Backend>(open: Open<'_, B>) -> CaseResult {
    for peer_access in [false, true] {
        let config = RuntimeConfig {
            peer_access,
            ..RuntimeConfig::default()
        };
        let h = Harness::open_with(open, config)?;
        let rt = &h.runtime;
        let (d0, d1) = two_devices(rt)?;
        let possible = rt.backend().peer_access_possible(d0, d1)?;
        let link = rt.peer_link(d0, d1)?.clone();
        let expected = match (possible, peer_access) {
            (false, _) => PeerLink::Impossible,
            (true, false) => PeerLink::OptedOut,
            (true, true) => PeerLink::Enabled,
        };
        ensure!(
            link == expected,
            "peer link {link:?}, expected {expected:?}"
        );
        let size = 1 << 20;
        let mut value = 0u8;
        for (from, to) in [(d0, d1), (d1, d0)] {
            for (ordered_src, ordered_dst) in
                [(false, false), (true, false), (false, true), (true, true)]
            {
                for on in [from, to] {
                    value += 1;
                    let allocate = |device, ordered| -> Result<Buffer<'_, RecordingBackend<B>>> {
                        if ordered {
                            let (buffer, token) =
                                rt.alloc_after(device, MemoryKind::Device, size, &mut vec![])?;
                            rt.wait(token)?;
                            Ok(buffer)
                        } else {
                            rt.alloc(device, MemoryKind::Device, size)
                        }
                    };
                    let (src, dst) = (allocate(from, ordered_src)?, allocate(to, ordered_dst)?);
                    let filled = rt.fill(from, src.all(), value, &mut vec![])?;
                    let copied = rt.copy(on, dst.all(), src.all(), &mut vec![filled])?;
                    let mut back = vec![0u8; size];
                    rt.download(to, &mut back, dst.all(), &mut vec![copied])?;
                    let wrong = back.iter().position(|&x| x != value);
                    ensure!(
                        wrong.is_none(),
                        "peer access {peer_access}: {from} -> {to} on {on} (stream-ordered \
                         source {ordered_src}, destination {ordered_dst}): byte {wrong:?} wrong"
                    );
                }
            }
        }
        let stats = rt.stats();
        ensure!(
            stats.peer_copies_direct + stats.peer_copies_staged == 16,
            "peer copies counted {} direct + {} staged, not 16",
            stats.peer_copies_direct,
            stats.peer_copies_staged
        );
        h.close()?;
    }
    Ok(())
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn kernels_compute_and_opt_in<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let n = 10_000usize;
    let (x, y) = (
        rt.alloc(d, MemoryKind::Device, 4 * n)?,
        rt.alloc(d, MemoryKind::Device, 4 * n)?,
    );
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let up_x = rt.upload(d, x.all(), &f32_bytes(&xs), &mut vec![])?;
    // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
    let fill = unsafe {
        rt.launch(
            d,
            "fill_u32",
            LaunchDims::linear(40, 256),
            &[
                Arg::Span(y.all()),
                Arg::U32(2.0f32.to_bits()),
                Arg::U64(n as u64),
            ],
            &mut vec![],
        )
    }?;
    // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
    let axpy = unsafe {
        rt.launch(
            d,
            "axpy_f32",
            LaunchDims::linear(40, 256),
            &[
                Arg::F32(3.0),
                Arg::Span(x.all()),
                Arg::Span(y.all()),
                Arg::U64(n as u64),
            ],
            &mut vec![up_x, fill],
        )
    }?;
    let mut back = vec![0u8; 4 * n];
    rt.download(d, &mut back, y.all(), &mut vec![axpy])?;
    for (i, chunk) in back.chunks_exact(4).enumerate() {
        let got = f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        ensure!(got == 3.0 * i as f32 + 2.0, "axpy element {i}: {got}");
    }

    // A workgroup buffer planned above the default limit, when the device can opt in.
    let limits = rt.device_info(d)?.workgroup;
    let words = if limits.max_per_block() > limits.default_per_block {
        (limits.default_per_block / 4) + 1024
    } else {
        limits.default_per_block / 8
    };
    let plan = WorkgroupPlanner::new(limits)
        .plan(&[WorkgroupBuffer::launch_sized("staging", 16)])?
        .for_launch(&[words * 4])?;
    let groups = 4u32;
    let data = rt.alloc(d, MemoryKind::Device, (groups * words * 4) as usize)?;
    let input: Vec<u8> = (0..groups * words).flat_map(|w| w.to_le_bytes()).collect();
    let up = rt.upload(d, data.all(), &input, &mut vec![])?;
    let dims = LaunchDims {
        grid: [groups, 1, 1],
        block: [256, 1, 1],
        dynamic_workgroup_bytes: plan.dynamic_bytes,
    };
    // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
    let reversed = unsafe {
        rt.launch(
            d,
            "workgroup_reverse_u32",
            dims,
            &[Arg::Span(data.all()), Arg::U32(words)],
            &mut vec![up],
        )
    }?;
    let mut out = vec![0u8; input.len()];
    rt.download(d, &mut out, data.all(), &mut vec![reversed])?;
    for g in 0..groups {
        for i in 0..words {
            let at = ((g * words + i) * 4) as usize;
            let got = u32::from_le_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]]);
            let expected = g * words + (words - 1 - i) + 1;
            ensure!(
                got == expected,
                "workgroup {g} word {i}: {got}, expected {expected}"
            );
        }
    }
    drop((x, y, data));
    h.close()
}

/// Launches of the standard library that are wrong (arguments of the wrong number or kinds,
/// counts reaching past a span or past the dynamic workgroup memory, shapes no device runs)
/// are typed errors before anything is queued, whatever the backend: the buffer after the one
/// given keeps its bytes, and the device runs the next launch.
fn library_launches_are_checked<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let (buffer, neighbour) = (
        rt.alloc(d, MemoryKind::Device, 4096)?,
        rt.alloc(d, MemoryKind::Device, 4096)?,
    );
    fill_and_verify(rt, d, neighbour.all(), 0x11)?;
    let span = Arg::Span(buffer.all());
    let linear = LaunchDims::linear(4, 64);
    let fill = |value: u64, count: u64| [span, Arg::U64(value), Arg::U64(count)];
    type Expect = fn(&Error) -> bool;
    let mismatch: Expect = |e| matches!(e, Error::KernelArgumentMismatch { .. });
    let shape: Expect = |e| matches!(e, Error::LaunchShape { .. });
    let cases: [(&str, &str, LaunchDims, &[Arg<'_>], Expect); 6] = [
        (
            "fill_u32",
            "two arguments",
            linear,
            &[span, Arg::U32(1)],
            mismatch,
        ),
        ("fill_u32", "a U64 value", linear, &fill(1, 1024), mismatch),
        (
            "fill_u32",
            "2,048 words on 4 KiB",
            linear,
            &[span, Arg::U32(1), Arg::U64(2048)],
            |e| {
                matches!(
                    e,
                    Error::KernelReach {
                        argument: Some(0),
                        given: 4096,
                        reach: 8192,
                        ..
                    }
                )
            },
        ),
        (
            "fill_u32",
            "grid 0",
            LaunchDims::linear(0, 64),
            &[span, Arg::U32(1), Arg::U64(1024)],
            shape,
        ),
        (
            "fill_u32",
            "4,096 threads",
            LaunchDims::linear(1, 4096),
            &[span, Arg::U32(1), Arg::U64(1024)],
            shape,
        ),
        (
            "workgroup_reverse_u32",
            "16 words and no workgroup memory",
            LaunchDims::linear(1, 64),
            &[span, Arg::U32(16)],
            |e| {
                matches!(
                    e,
                    Error::KernelReach {
                        argument: None,
                        reach: 64,
                        ..
                    }
                )
            },
        ),
    ];
    for (name, what, dims, args, expected) in cases {
        // SAFETY: each launch is refused before anything is queued (what the case checks).
        let refused = unsafe { rt.launch(d, name, dims, args, &mut vec![]) };
        ensure!(
            refused.as_ref().err().is_some_and(expected),
            "{name} with {what} gave {refused:?}"
        );
    }
    let args = [span, Arg::U32(0x2222_2222), Arg::U64(1024)];
    // SAFETY: 1,024 words: the whole 4 KiB span.
    let filled = unsafe { rt.launch(d, "fill_u32", linear, &args, &mut vec![]) }?;
    let mut back = vec![0u8; 4096];
    rt.download(d, &mut back, buffer.all(), &mut vec![filled])?;
    ensure!(
        back.iter().all(|&b| b == 0x22),
        "the launch after the refusals did not fill its span"
    );
    rt.download(d, &mut back, neighbour.all(), &mut vec![])?;
    ensure!(
        back.iter().all(|&b| b == 0x11),
        "a refused launch wrote the neighbouring buffer"
    );
    drop((buffer, neighbour));
    h.close()
}

/// Every public call, from a thread whose current device is `start`, leaves it so.
fn current_device_restored<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let last = DeviceId(h.runtime.device_count() as u32 - 1);
    for start in [None, Some(last)] {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    h.backend.set_current_device(start)?;
                    calls_keep_device(&h, start)
                })
                .join()
                .unwrap_or_else(|_| Err(Stop::Fail("a thread panicked".to_string())))
        })?;
    }
    h.close()
}

fn calls_keep_device<B: Backend>(h: &Harness<B>, start: Option<DeviceId>) -> CaseResult {
    let rt = &h.runtime;
    let check = |call: &str| -> CaseResult {
        let now = h.backend.current_device()?;
        ensure!(
            now == start,
            "{call} left {now:?} current instead of {start:?}"
        );
        Ok(())
    };
    for device in (0..rt.device_count()).map(|d| DeviceId(d as u32)) {
        let buffer = rt.alloc(device, MemoryKind::Device, 4096)?;
        check("alloc")?;
        let filled = rt.fill(device, buffer.all(), 1, &mut vec![])?;
        check("fill")?;
        let mut branches = rt.fork(filled, 2)?;
        check("fork")?;
        ensure!(
            branches.len() == 2,
            "a fork in 2 gave {} tokens",
            branches.len()
        );
        let mut back = vec![0u8; 4096];
        rt.download(device, &mut back, buffer.all(), &mut branches.split_off(1))?;
        check("download")?;
        // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
        let launched = unsafe {
            rt.launch(
                device,
                "fill_u32",
                LaunchDims::linear(1, 64),
                &[Arg::Span(buffer.all()), Arg::U32(0), Arg::U64(1024)],
                &mut branches,
            )
        }?;
        check("launch")?;
        rt.wait(launched)?;
        check("wait")?;
        // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
        let failed = unsafe {
            rt.launch(
                device,
                "no_such_kernel",
                LaunchDims::linear(1, 1),
                &[],
                &mut vec![],
            )
        };
        ensure!(
            matches!(failed, Err(Error::UnknownKernel { .. })),
            "an unknown kernel name gave {failed:?}, not Error::UnknownKernel"
        );
        check("a failed launch")?;
        rt.free(buffer)?;
        check("free")?;
    }
    rt.trim()?;
    check("trim")
}

fn pools_are_reused<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let buffer = rt.alloc(d, MemoryKind::Device, 4096)?;
    let mut created = (0, 0);
    for round in 0..20 {
        let a = rt.fill(d, buffer.span(0, 2048)?, 1, &mut vec![])?;
        let b = rt.fill(d, buffer.span(2048, 2048)?, 2, &mut vec![])?;
        let joined = rt.join(&mut vec![a, b])?;
        rt.wait(joined)?;
        let stats = rt.stats();
        if round == 2 {
            created = (stats.streams_created, stats.events_created);
        } else if round > 2 {
            let now = (stats.streams_created, stats.events_created);
            ensure!(
                now == created,
                "round {round}: pools missed, created (streams, events) {created:?} -> {now:?}"
            );
        }
    }
    ensure!(
        rt.stats().pool_calls_saved() > 0,
        "the pools saved no driver call"
    );
    drop(buffer);
    h.close()
}

/// The representative program: every kind of call the runtime makes, on every device.
fn scenario<B: Backend>(rt: &Runtime<B>) -> Result<()> {
    let mut host = vec![7u8; 200_000];
    let devices: Vec<DeviceId> = (0..rt.device_count().min(2))
        .map(|d| DeviceId(d as u32))
        .collect();
    let mut tokens: Vec<Token> = Vec::new();
    let mut buffers = Vec::new();
    for &d in &devices {
        let buffer = rt.alloc(d, MemoryKind::Device, host.len())?;
        tokens.push(rt.upload(d, buffer.all(), &host, &mut vec![])?);
        buffers.push(buffer);
    }
    let joined = rt.join(&mut tokens)?;
    let mut branches = rt.fork(joined, devices.len())?;
    let mut results = Vec::new();
    for (&d, buffer) in devices.iter().zip(&buffers) {
        let branch = branches.pop().ok_or(Error::ZeroSize { what: "branch" })?;
        // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
        let scaled = unsafe {
            rt.launch(
                d,
                "fill_u32",
                LaunchDims::linear(8, 128),
                &[
                    Arg::Span(buffer.span(0, 4096)?),
                    Arg::U32(9),
                    Arg::U64(1024),
                ],
                &mut vec![branch],
            )
        }?;
        results.push(scaled);
    }
    let last = *devices.last().ok_or(Error::ZeroSize { what: "devices" })?;
    let locked = rt.lock_host(&mut host)?;
    let copied = rt.copy(
        last,
        buffers[buffers.len() - 1].span(0, 4096)?,
        buffers[0].span(0, 4096)?,
        &mut results,
    )?;
    let mut back = vec![0u8; 4096];
    rt.download(last, &mut back, locked.span(0, 4096)?, &mut vec![copied])?;
    locked.unlock()?;
    for buffer in buffers {
        rt.free(buffer)?;
    }
    rt.trim()?;
    Ok(())
}

fn scenario_leaves_nothing<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    scenario(&h.runtime)?;
    h.close()
}

/// For every driver call N that the scenario and the shutdown after it make, a run in which
/// call N fails: a typed error or a success, never a panic, and nothing left behind.
fn every_driver_failure_is_clean<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let counted = Harness::open(open)?;
    let before = counted.backend.calls();
    scenario(&counted.runtime)?;
    let Harness { backend, runtime } = counted;
    runtime.shutdown()?;
    let calls = backend.calls() - before;
    check_clean(&backend)?;
    let mut failures_seen = 0;
    for n in 1..=calls {
        let h = Harness::open(open)?;
        let start = h.backend.calls();
        h.backend.fail_call(start + n);
        if scenario(&h.runtime).is_err() {
            failures_seen += 1;
        }
        let Harness { backend, runtime } = h;
        // Shutdown may itself report the failure (a poisoned runtime, a refused destroy that
        // the retry then did); what matters is that nothing is left behind.
        let _ = runtime.shutdown();
        check_clean(&backend).map_err(|stop| match stop {
            Stop::Fail(why) => Stop::Fail(format!("failing call {n} of {calls}: {why}")),
            skip => skip,
        })?;
    }
    ensure!(
        failures_seen > 0,
        "no injected failure surfaced as an error in {calls} calls"
    );
    Ok(())
}
