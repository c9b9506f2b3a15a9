//! Stress and soak over any backend: many threads on the runtimes of one backend, each running
//! a random mix of every kind of call on data it owns and verifies, with faults injected at
//! random points where the backend can, and samples of the process's memory, the runtime's
//! bookkeeping and the driver's live objects while it runs.
//!
//! Each thread owns up to [`MAX_OWNED`] buffers of every kind and size class, with a host copy
//! of what each must hold, and a host arena of which it locks overlapping and nested ranges. Its
//! operations: allocate (synchronously or in stream order) and free, fill, copy between any two
//! of its buffers (host to device, device to host, device to device, device to peer device),
//! upload from its arena (pinned or not) and from memory locked for the copy, launch
//! `fill_u32` and `workgroup_reverse_u32`, fork and join tokens, wait, lock and unlock arena
//! ranges (predicting nested, new and refused locks), trim, and verify a buffer's bytes
//! against the host copy. A call that fails must fail with an injected fault
//! ([`Probe::is_injected`]); any other error, or a wrong byte, is a failure of the run.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;
use gpu_core::seeded::SplitMix64;
use gpu_core::token::Token;
use gpu_rt::host::{HostBackend, HostErrorCode};
use gpu_rt::runtime::{Arg, Buffer, LiveObjects, RecordingBackend, Runtime, RuntimeStats};

/// Buffers a thread owns at most.
pub const MAX_OWNED: usize = 8;
/// Bytes of each thread's host arena (locked in ranges, uploaded from).
const ARENA: usize = 256 << 10;
/// Failures each thread describes (later ones are only counted).
const FAILURES_KEPT: usize = 16;

/// How a stress run is shaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StressConfig {
    /// Threads, each with its own data (thread `i` uses runtime `i % runtimes`).
    pub threads: usize,
    /// How long the threads run.
    pub duration: Duration,
    /// Seed of every random choice (thread `i` derives its own from it).
    pub seed: u64,
    /// The largest buffer a thread allocates, in bytes (a few are this large, most are small).
    pub largest: usize,
    /// How often the sampler records the footprint (`None`: no sampling).
    pub sample_every: Option<Duration>,
    /// Arms a fault about every this many driver calls, where the backend can inject them
    /// (`None`: no faults).
    pub fault_every: Option<u64>,
    /// Whether threads sometimes trim the caches (a program that never does is the harder soak:
    /// only the allocator's own reclaiming keeps its memory and events bounded).
    pub trims: bool,
}

impl Default for StressConfig {
    /// 16 threads for two seconds, buffers up to 1 MiB, samples every 100 ms, no faults.
    fn default() -> Self {
        Self {
            threads: 16,
            duration: Duration::from_secs(2),
            seed: 1,
            largest: 1 << 20,
            sample_every: Some(Duration::from_millis(100)),
            fault_every: None,
            trims: true,
        }
    }
}

/// What a stress run asks of its backend beyond the [`Backend`] trait: each method has a
/// default for backends that cannot do it.
pub trait Probe: Sync {
    /// Objects the driver holds for its callers now, if the backend counts them.
    fn live(&self) -> Option<LiveObjects> {
        None
    }

    /// Makes the `n`th driver call from now fail; `false` if the backend cannot inject faults.
    fn arm_fault(&self, _n: u64) -> bool {
        false
    }

    /// Disarms faults that have not fired.
    fn disarm_faults(&self) {}

    /// Faults injected so far.
    fn faults_injected(&self) -> u64 {
        0
    }

    /// Whether `error` is an injected fault.
    fn is_injected(&self, _error: &Error) -> bool {
        false
    }
}

/// A probe that knows nothing: no live counts, no faults.
pub struct NoProbe;

impl Probe for NoProbe {}

impl Probe for HostBackend {
    fn live(&self) -> Option<LiveObjects> {
        let stats = self.stats();
        Some(LiveObjects {
            streams: stats.streams,
            events: stats.events,
            allocations: stats.allocations,
            registrations: stats.registered_ranges,
        })
    }

    fn arm_fault(&self, n: u64) -> bool {
        self.fail_nth_call(n);
        true
    }

    fn disarm_faults(&self) {
        self.clear_faults();
    }

    fn faults_injected(&self) -> u64 {
        self.stats().faults_injected
    }

    fn is_injected(&self, error: &Error) -> bool {
        HostErrorCode::of(error) == Some(HostErrorCode::InjectedFault)
    }
}

impl<B: Backend> Probe for RecordingBackend<B> {
    fn live(&self) -> Option<LiveObjects> {
        Some(RecordingBackend::live(self))
    }
}

/// Operations a run carried out, by kind (successful ones, unless named otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Allocations (synchronous and stream-ordered).
    pub allocs: u64,
    /// Of those, stream-ordered ones.
    pub stream_ordered_allocs: u64,
    /// Buffers freed (explicitly or by drop).
    pub frees: u64,
    /// Fills.
    pub fills: u64,
    /// Copies between two buffers of one device, or host and device.
    pub copies: u64,
    /// Copies between device memory of two devices.
    pub peer_copies: u64,
    /// Uploads from the host arena or from memory locked for the copy.
    pub uploads: u64,
    /// Kernel launches.
    pub launches: u64,
    /// Forks.
    pub forks: u64,
    /// Joins.
    pub joins: u64,
    /// Synchronous waits on tokens.
    pub waits: u64,
    /// Locks of arena ranges that pinned memory (new entries).
    pub locks: u64,
    /// Locks inside an entry (counted, no driver call).
    pub nested_locks: u64,
    /// Locks refused as overlapping an entry, as predicted.
    pub refused_locks: u64,
    /// Unlocks.
    pub unlocks: u64,
    /// Trims of the caches.
    pub trims: u64,
    /// Buffers whose every byte was read back and matched.
    pub verified: u64,
    /// Bytes so verified.
    pub verified_bytes: u64,
    /// Calls that failed with an injected fault.
    pub faulted: u64,
}

impl OpCounts {
    /// Every operation counted (verifications included, faulted calls not).
    pub fn total(&self) -> u64 {
        self.allocs
            + self.frees
            + self.fills
            + self.copies
            + self.peer_copies
            + self.uploads
            + self.launches
            + self.forks
            + self.joins
            + self.waits
            + self.locks
            + self.nested_locks
            + self.refused_locks
            + self.unlocks
            + self.trims
            + self.verified
    }

    fn add(&mut self, other: &OpCounts) {
        macro_rules! add_fields {
            ($($field:ident),*) => { $(self.$field += other.$field;)* };
        }
        add_fields!(
            allocs,
            stream_ordered_allocs,
            frees,
            fills,
            copies,
            peer_copies,
            uploads,
            launches,
            forks,
            joins,
            waits,
            locks,
            nested_locks,
            refused_locks,
            unlocks,
            trims,
            verified,
            verified_bytes,
            faulted
        );
    }
}

/// One sample of what a run holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Time since the start.
    pub at: Duration,
    /// The process's resident memory in KiB (`None` where `/proc/self/status` is missing).
    pub rss_kib: Option<u64>,
    /// The first runtime's counters and bookkeeping sizes.
    pub stats: RuntimeStats,
    /// Driver objects held, if the probe counts them.
    pub live: Option<LiveObjects>,
}

/// A sampled quantity that must stay bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    /// What it counts.
    pub name: &'static str,
    /// Its value in the sample.
    pub value: u64,
    /// How far it may rise by chance (the run's random sizes and timing) without growing.
    pub noise: u64,
    /// A pool that keeps its peak (streams, events): it creeps up as rarer peaks of use occur,
    /// so only a jump counts as growth (what is in use is sampled beside it).
    pub pooled: bool,
}

impl Sample {
    /// The quantities that must stay bounded.
    pub fn bounded(&self) -> Vec<Quantity> {
        const BYTES: u64 = 8 << 20;
        const COUNT: u64 = 32;
        let allocator = |pick: fn(&gpu_core::allocator::AllocatorStats) -> usize| {
            self.stats
                .allocator
                .iter()
                .map(|(_, _, s)| pick(s) as u64)
                .sum::<u64>()
        };
        let planner = &self.stats.planner;
        const POOL: bool = true;
        let mut named = vec![
            (
                "resident KiB",
                self.rss_kib.unwrap_or(0),
                BYTES >> 10,
                !POOL,
            ),
            (
                "planner token slots",
                planner.token_slots as u64,
                COUNT,
                !POOL,
            ),
            (
                "planner live tokens",
                planner.live_tokens as u64,
                COUNT,
                !POOL,
            ),
            ("planner streams", planner.streams as u64, COUNT, POOL),
            ("planner events", planner.events as u64, COUNT, POOL),
            (
                "unwaited tokens named",
                planner.unwaited_named as u64,
                COUNT,
                !POOL,
            ),
            (
                "allocator reserved bytes",
                allocator(|s| s.reserved),
                BYTES,
                !POOL,
            ),
            (
                "allocator segments",
                allocator(|s| s.segments),
                COUNT,
                !POOL,
            ),
            (
                "allocator pending bytes",
                allocator(|s| s.pending),
                BYTES,
                !POOL,
            ),
            (
                "allocator events in use",
                self.stats.allocator_events_in_use as u64,
                COUNT,
                !POOL,
            ),
            (
                "lock table entries",
                self.stats.locks.entries as u64,
                COUNT,
                !POOL,
            ),
        ];
        if let Some(live) = self.live {
            named.extend([
                ("driver streams", live.streams as u64, COUNT, POOL),
                ("driver events", live.events as u64, COUNT, POOL),
                ("driver allocations", live.allocations as u64, COUNT, !POOL),
                (
                    "driver registrations",
                    live.registrations as u64,
                    COUNT,
                    !POOL,
                ),
            ]);
        }
        named
            .into_iter()
            .map(|(name, value, noise, pooled)| Quantity {
                name,
                value,
                noise,
                pooled,
            })
            .collect()
    }
}

/// What a stress run did and found.
#[derive(Clone, Debug, Default)]
pub struct StressReport {
    /// Operations of all threads.
    pub counts: OpCounts,
    /// Operations per thread.
    pub per_thread: Vec<u64>,
    /// How long the threads ran.
    pub elapsed: Duration,
    /// Footprint samples, in time order.
    pub samples: Vec<Sample>,
    /// Unexpected errors and wrong data (the first few of each thread).
    pub failures: Vec<String>,
    /// Failures in all (described or not).
    pub failure_count: u64,
    /// Faults the backend injected.
    pub faults_injected: u64,
}

impl StressReport {
    /// Operations per second per thread.
    pub fn ops_per_thread_per_second(&self) -> f64 {
        let threads = self.per_thread.len().max(1) as f64;
        self.counts.total() as f64 / threads / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Each bounded quantity's highest value in the first half of the run (after the first
    /// sample, a warm-up) and in the second half, in the order of [`Sample::bounded`]. Empty
    /// with fewer than five samples.
    pub fn halves(&self) -> Vec<(Quantity, u64)> {
        let samples = self.samples.get(1..).unwrap_or_default();
        if samples.len() < 4 {
            return Vec::new();
        }
        let (first, second) = samples.split_at(samples.len() / 2);
        let maxima = |part: &[Sample]| {
            let mut max = part[0].bounded();
            for sample in part {
                for (slot, quantity) in max.iter_mut().zip(sample.bounded()) {
                    slot.value = slot.value.max(quantity.value);
                }
            }
            max
        };
        maxima(first)
            .into_iter()
            .zip(maxima(second))
            .map(|(early, late)| (early, late.value))
            .collect()
    }

    /// The quantities that look like growth without bound, each with its first-half and
    /// second-half maxima: a second-half maximum above the first-half one by more than half
    /// plus the quantity's noise (a jump), or, for what is not a pool, a last quarter whose
    /// every sample lies above the second quarter's maximum by more than the noise (a creep the
    /// level never falls back from).
    pub fn growth(&self) -> Vec<(Quantity, u64)> {
        let samples = self.samples.get(1..).unwrap_or_default();
        let quarter = samples.len() / 4;
        let creeps = |index: usize, noise: u64| {
            if quarter == 0 {
                return false;
            }
            let value = |sample: &Sample| sample.bounded()[index].value;
            let second = samples[quarter..2 * quarter].iter().map(value).max();
            let last = samples[samples.len() - quarter..].iter().map(value).min();
            matches!((second, last), (Some(second), Some(last)) if last > second + noise)
        };
        self.halves()
            .into_iter()
            .enumerate()
            .filter(|(index, (early, late))| {
                *late > early.value + early.value / 2 + early.noise
                    || (!early.pooled && creeps(*index, early.noise))
            })
            .map(|(_, halves)| halves)
            .collect()
    }
}

/// Runs `config.threads` threads of the mix on `runtimes` (thread `i` on runtime
/// `i % runtimes.len()`: one runtime shared by all, or one each), with `probe` for faults and
/// live counts. Returns once every thread has ended and released all it held.
pub fn run<B: Backend>(
    runtimes: &[Runtime<B>],
    probe: &dyn Probe,
    config: &StressConfig,
) -> Result<StressReport> {
    if runtimes.is_empty() || config.threads == 0 {
        return Err(Error::ZeroSize {
            what: "stress threads or runtimes",
        });
    }
    if config.largest < 64 {
        return Err(Error::ZeroSize {
            what: "stress buffer size (at least 64 bytes)",
        });
    }
    let stop = &AtomicBool::new(false);
    let started = Instant::now();
    let faults_before = probe.faults_injected();
    let (threads, samples) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..config.threads)
            .map(|index| {
                let runtime = &runtimes[index % runtimes.len()];
                let seed = config.seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                scope.spawn(move || Thread::new(runtime, probe, config, seed).run(started, stop))
            })
            .collect();
        let injector = config
            .fault_every
            .map(|every| scope.spawn(move || inject_faults(probe, every, config.seed, stop)));
        let samples = sample(&runtimes[0], probe, config, started, stop);
        let threads: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::Release);
        if let Some(injector) = injector {
            let _ = injector.join();
        }
        probe.disarm_faults();
        (threads, samples)
    });
    let mut report = StressReport {
        elapsed: started.elapsed(),
        samples,
        faults_injected: probe.faults_injected() - faults_before,
        ..StressReport::default()
    };
    for (index, thread) in threads.into_iter().enumerate() {
        match thread {
            Ok(done) => {
                report.counts.add(&done.counts);
                report.per_thread.push(done.counts.total());
                report.failure_count += done.failure_count;
                report.failures.extend(done.failures);
            }
            Err(_) => {
                report.per_thread.push(0);
                report.failure_count += 1;
                report.failures.push(format!("thread {index} panicked"));
            }
        }
    }
    Ok(report)
}

/// Arms one fault at a time, a random number of calls ahead, until `stop`.
fn inject_faults(probe: &dyn Probe, every: u64, seed: u64, stop: &AtomicBool) {
    let mut rng = SplitMix64::new(seed ^ 0xFA17);
    while !stop.load(Ordering::Acquire) {
        let before = probe.faults_injected();
        if !probe.arm_fault(1 + rng.below(2 * every.max(1) as usize) as u64) {
            return;
        }
        while probe.faults_injected() == before && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Samples until the threads are past the run's duration (then once more, at the end).
fn sample<B: Backend>(
    runtime: &Runtime<B>,
    probe: &dyn Probe,
    config: &StressConfig,
    started: Instant,
    stop: &AtomicBool,
) -> Vec<Sample> {
    let Some(every) = config.sample_every else {
        return Vec::new();
    };
    let take = || Sample {
        at: started.elapsed(),
        rss_kib: resident_kib(),
        stats: runtime.stats(),
        live: probe.live(),
    };
    let mut samples = vec![take()];
    while started.elapsed() < config.duration && !stop.load(Ordering::Acquire) {
        std::thread::sleep(every.min(config.duration.saturating_sub(started.elapsed())));
        samples.push(take());
    }
    samples
}

/// The process's resident memory in KiB, from `/proc/self/status` (Linux).
pub fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A buffer a thread owns: what it must hold, and the token of the last work on it.
struct Owned<'rt, B: Backend> {
    buffer: Buffer<'rt, B>,
    expect: Vec<u8>,
    token: Option<Token>,
}

/// A range of the arena this thread locked, and how many times.
struct ArenaLock {
    start: usize,
    len: usize,
    count: usize,
}

/// What one thread ends with.
struct Done {
    counts: OpCounts,
    failures: Vec<String>,
    failure_count: u64,
}

struct Thread<'a, B: Backend> {
    rt: &'a Runtime<B>,
    probe: &'a dyn Probe,
    config: &'a StressConfig,
    rng: SplitMix64,
    owned: Vec<Owned<'a, B>>,
    arena: Vec<u8>,
    locks: Vec<ArenaLock>,
    counts: OpCounts,
    failures: Vec<String>,
    failure_count: u64,
}

impl<'a, B: Backend> Thread<'a, B> {
    fn new(rt: &'a Runtime<B>, probe: &'a dyn Probe, config: &'a StressConfig, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let arena = (0..ARENA).map(|_| rng.next_u64() as u8).collect();
        Self {
            rt,
            probe,
            config,
            rng,
            owned: Vec::new(),
            arena,
            locks: Vec::new(),
            counts: OpCounts::default(),
            failures: Vec::new(),
            failure_count: 0,
        }
    }

    fn run(mut self, started: Instant, stop: &AtomicBool) -> Done {
        while started.elapsed() < self.config.duration && !stop.load(Ordering::Acquire) {
            self.step();
        }
        self.release_all();
        Done {
            counts: self.counts,
            failures: self.failures,
            failure_count: self.failure_count,
        }
    }

    /// One operation, picked at random (allocation when the thread owns nothing).
    fn step(&mut self) {
        if self.owned.is_empty() {
            return self.alloc();
        }
        match self.rng.below(100) {
            0..=9 => self.alloc(),
            10..=16 => self.free(),
            17..=28 => self.fill(),
            29..=42 => self.copy(),
            43..=50 => self.upload(),
            51..=60 => self.launch(),
            61..=67 => self.fork_join(),
            68..=72 => self.wait(),
            73..=80 => self.lock(),
            81..=86 => self.unlock(),
            87 => self.trim(),
            _ => self.verify(),
        }
    }

    // ----- outcomes -----

    /// The value of `result`, or `None` after noting its error (an injected fault is counted;
    /// any other error is a failure).
    fn ok<T>(&mut self, what: &str, result: Result<T>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) if self.probe.is_injected(&e) => {
                self.counts.faulted += 1;
                None
            }
            Err(e) => {
                self.fail(format!("{what}: unexpected error: {e}"));
                None
            }
        }
    }

    fn fail(&mut self, why: String) {
        self.failure_count += 1;
        if self.failures.len() < FAILURES_KEPT {
            self.failures.push(why);
        }
    }

    /// Waits for tokens a failed call left unconsumed.
    fn settle(&mut self, tokens: Vec<Token>) {
        for token in tokens {
            let waited = self.rt.wait(token);
            if self.ok("wait after a failure", waited).is_some() {
                self.counts.waits += 1;
            }
        }
    }

    /// Ends an operation on buffers `picked` whose tokens went into `after`: on success each
    /// gets a branch of `token`; on failure the tokens left in `after` are waited for, and a
    /// buffer whose token the failed call consumed (its last work is no longer ordered for
    /// this thread) or whose bytes it may have changed part-way is freed.
    fn finish(&mut self, what: &str, picked: &[usize], after: Vec<Token>, result: Result<Token>) {
        let Some(token) = self.ok(what, result) else {
            let consumed = after.is_empty();
            self.settle(after);
            if consumed {
                self.drop_owned(picked);
            }
            return;
        };
        if picked.len() == 1 {
            self.owned[picked[0]].token = Some(token);
            return;
        }
        let forked = self.rt.fork(token, picked.len());
        match self.ok("fork after an operation", forked) {
            Some(branches) => {
                self.counts.forks += 1;
                for (&index, branch) in picked.iter().zip(branches) {
                    self.owned[index].token = Some(branch);
                }
            }
            None => self.drop_owned(picked),
        }
    }

    /// Frees the buffers at `indices` (their pending work orders the free).
    fn drop_owned(&mut self, indices: &[usize]) {
        let mut sorted = indices.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        for index in sorted {
            let owned = self.owned.swap_remove(index);
            self.release(owned);
        }
    }

    fn release(&mut self, owned: Owned<'a, B>) {
        let Owned { buffer, token, .. } = owned;
        let freed = if self.rng.chance(2) {
            self.rt.free(buffer)
        } else {
            drop(buffer);
            Ok(())
        };
        if self.ok("free", freed).is_some() {
            self.counts.frees += 1;
        }
        // The free is ordered after the work; waiting afterwards checks that is so.
        self.settle(token.into_iter().collect());
    }

    fn release_all(&mut self) {
        while let Some(owned) = self.owned.pop() {
            self.release(owned);
        }
        while let Some(lock) = self.locks.pop() {
            let ptr = self.arena.as_ptr() as usize + lock.start;
            for _ in 0..lock.count {
                // An injected fault on the last unlock leaves the entry: try until it goes.
                for _ in 0..8 {
                    let unlocked = self.rt.unlock_range(ptr);
                    if self.ok("unlock at the end", unlocked).is_some() {
                        self.counts.unlocks += 1;
                        break;
                    }
                }
            }
        }
    }

    // ----- choices -----

    fn device(&mut self) -> DeviceId {
        DeviceId(self.rng.below(self.rt.device_count()) as u32)
    }

    /// The device that runs work on `owned` (its own for device memory, any for host kinds).
    fn device_for(&mut self, index: usize) -> DeviceId {
        let buffer = &self.owned[index].buffer;
        if buffer.kind() == MemoryKind::Device {
            buffer.device()
        } else {
            self.device()
        }
    }

    /// A size: mostly small, some mid-size, a few up to `largest`.
    fn size(&mut self) -> usize {
        let largest = self.config.largest;
        let bound = match self.rng.below(20) {
            0 => largest,
            1..=4 => (largest / 16).max(64),
            _ => 4096.min(largest),
        };
        64 + self.rng.below(bound - 63)
    }

    /// A random non-empty `[offset, offset + len)` inside `size` bytes, at most `most` long.
    fn range(&mut self, size: usize, most: usize) -> (usize, usize) {
        let len = 1 + self.rng.below(size.min(most));
        (self.rng.below(size - len + 1), len)
    }

    fn pick(&mut self) -> usize {
        self.rng.below(self.owned.len())
    }

    fn take_token(&mut self, index: usize) -> Vec<Token> {
        self.owned[index].token.take().into_iter().collect()
    }

    // ----- operations -----

    fn alloc(&mut self) {
        if self.owned.len() >= MAX_OWNED {
            return self.free();
        }
        let device = self.device();
        let Ok(info) = self.rt.device_info(device) else {
            return self.fail(format!("device_info({device}) failed"));
        };
        let caps = info.allocator;
        let kinds: Vec<(MemoryKind, bool)> = [
            (MemoryKind::Device, caps.device),
            (MemoryKind::Managed, caps.managed),
            (MemoryKind::HostPinned, caps.host_pinned),
        ]
        .into_iter()
        .filter(|(_, support)| support.available)
        .map(|(kind, support)| (kind, support.stream_ordered))
        .collect();
        if kinds.is_empty() {
            return self.fail(format!("{device} offers no memory kind"));
        }
        let (kind, ordered) = kinds[self.rng.below(kinds.len())];
        let size = self.size();
        let rt = self.rt;
        let (buffer, token) = if ordered && self.rng.chance(2) {
            let allocated = rt.alloc_after(device, kind, size, &mut Vec::new());
            let Some((buffer, token)) = self.ok("stream-ordered allocation", allocated) else {
                return;
            };
            self.counts.stream_ordered_allocs += 1;
            (buffer, Some(token))
        } else {
            let Some(buffer) = self.ok("allocation", rt.alloc(device, kind, size)) else {
                return;
            };
            (buffer, None)
        };
        self.counts.allocs += 1;
        let value = self.rng.next_u64() as u8;
        let fill_on = if kind == MemoryKind::Device {
            device
        } else {
            self.device()
        };
        let mut after: Vec<Token> = token.into_iter().collect();
        let filled = rt.fill(fill_on, buffer.all(), value, &mut after);
        self.owned.push(Owned {
            buffer,
            expect: vec![value; size],
            token: None,
        });
        let index = self.owned.len() - 1;
        if filled.is_ok() {
            self.counts.fills += 1;
        }
        // Until the fill succeeds the bytes are unknown.
        self.finish_or_forget("fill of a new buffer", index, after, filled);
    }

    fn free(&mut self) {
        let index = self.pick();
        let owned = self.owned.swap_remove(index);
        self.release(owned);
    }

    fn fill(&mut self) {
        let index = self.pick();
        let device = self.device_for(index);
        let size = self.owned[index].buffer.size();
        let (offset, len) = self.range(size, size);
        let value = self.rng.next_u64() as u8;
        let mut after = self.take_token(index);
        let filled = match self.owned[index].buffer.span(offset, len) {
            Ok(span) => self.rt.fill(device, span, value, &mut after),
            Err(e) => Err(e),
        };
        if filled.is_ok() {
            self.counts.fills += 1;
            self.owned[index].expect[offset..offset + len].fill(value);
        }
        self.finish("fill", &[index], after, filled);
    }

    fn copy(&mut self) {
        if self.owned.len() < 2 {
            return self.alloc();
        }
        let dst = self.pick();
        let src = (dst + 1 + self.rng.below(self.owned.len() - 1)) % self.owned.len();
        let on_device = |b: &Buffer<'_, B>| (b.kind() == MemoryKind::Device).then(|| b.device());
        let (dst_buffer, src_buffer) = (&self.owned[dst].buffer, &self.owned[src].buffer);
        let (dst_device, src_device) = (on_device(dst_buffer), on_device(src_buffer));
        let (dst_size, src_size) = (dst_buffer.size(), src_buffer.size());
        let peer = matches!((dst_device, src_device), (Some(a), Some(b)) if a != b);
        let device = match dst_device.or(src_device) {
            Some(device) => device,
            None => self.device(),
        };
        let (at, len) = self.range(dst_size, src_size);
        let from = self.rng.below(src_size - len + 1);
        let mut after = self.take_token(dst);
        after.extend(self.take_token(src));
        let (dst_owned, src_owned) = (&self.owned[dst], &self.owned[src]);
        let copied = dst_owned
            .buffer
            .span(at, len)
            .and_then(|d| Ok((d, src_owned.buffer.span(from, len)?)))
            .and_then(|(d, s)| self.rt.copy(device, d, s, &mut after));
        if copied.is_ok() {
            if peer {
                self.counts.peer_copies += 1;
            } else {
                self.counts.copies += 1;
            }
            let bytes = self.owned[src].expect[from..from + len].to_vec();
            self.owned[dst].expect[at..at + len].copy_from_slice(&bytes);
        }
        self.finish("copy", &[dst, src], after, copied);
    }

    /// Uploads part of the arena (through the lock table's fast path when that part is
    /// locked), or of memory locked for this one copy.
    fn upload(&mut self) {
        let index = self.pick();
        let device = self.device_for(index);
        let size = self.owned[index].buffer.size();
        let (at, len) = self.range(size, ARENA);
        let mut after = self.take_token(index);
        let rt = self.rt;
        let (copied, source) = if self.rng.chance(3) {
            let mut memory: Vec<u8> = (0..len).map(|_| self.rng.next_u64() as u8).collect();
            let source = memory.clone();
            (
                self.copy_locked(index, device, at, &mut memory, &mut after),
                source,
            )
        } else {
            let from = self.rng.below(ARENA - len + 1);
            let source = &self.arena[from..from + len];
            let result = self.owned[index]
                .buffer
                .span(at, len)
                .and_then(|span| rt.upload(device, span, source, &mut after));
            (result, source.to_vec())
        };
        if copied.is_ok() {
            self.counts.uploads += 1;
            self.owned[index].expect[at..at + len].copy_from_slice(&source);
        }
        self.finish_or_forget("upload", index, after, copied);
    }

    /// [`Thread::finish`] for an operation that may fail part-way: on failure the buffer's
    /// bytes are unknown, so it is freed.
    fn finish_or_forget(
        &mut self,
        what: &str,
        index: usize,
        after: Vec<Token>,
        result: Result<Token>,
    ) {
        if result.is_ok() {
            return self.finish(what, &[index], after, result);
        }
        let _ = self.ok(what, result);
        self.settle(after);
        self.drop_owned(&[index]);
    }

    /// Pins `memory` for one copy into buffer `index` at `at`, then unpins it (which waits
    /// for the copy).
    fn copy_locked(
        &mut self,
        index: usize,
        device: DeviceId,
        at: usize,
        memory: &mut [u8],
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        let len = memory.len();
        let locked = self.rt.lock_host(memory)?;
        let copied = self.owned[index]
            .buffer
            .span(at, len)
            .and_then(|dst| self.rt.copy(device, dst, locked.span(0, len)?, after));
        let unlocked = locked.unlock();
        match (copied, unlocked) {
            (Ok(token), Ok(())) => Ok(token),
            (Ok(token), Err(e)) => {
                // The copy ran (unlock waited for it) but the unpin failed: wait the token too.
                after.push(token);
                Err(e)
            }
            (Err(e), _) => Err(e),
        }
    }

    fn launch(&mut self) {
        let candidates: Vec<usize> = (0..self.owned.len())
            .filter(|&i| {
                matches!(
                    self.owned[i].buffer.kind(),
                    MemoryKind::Device | MemoryKind::Managed
                )
            })
            .collect();
        if candidates.is_empty() {
            return self.fill();
        }
        let index = candidates[self.rng.below(candidates.len())];
        let device = self.device_for(index);
        let size = self.owned[index].buffer.size();
        let words = size / 4;
        if words == 0 {
            return self.fill();
        }
        let mut after = self.take_token(index);
        let launched = if self.rng.chance(2) {
            self.launch_fill(index, device, words, &mut after)
        } else {
            self.launch_reverse(index, device, words, &mut after)
        };
        if launched.is_ok() {
            self.counts.launches += 1;
        }
        self.finish("launch", &[index], after, launched);
    }

    /// `fill_u32` over some words of buffer `index`; the host copy follows on success.
    fn launch_fill(
        &mut self,
        index: usize,
        device: DeviceId,
        words: usize,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        let count = 1 + self.rng.below(words);
        let first = self.rng.below(words - count + 1);
        let value = self.rng.next_u64() as u32;
        let rt = self.rt;
        let owned = &mut self.owned[index];
        let span = owned.buffer.span(first * 4, count * 4)?;
        let kernel = rt.kernel(device, "fill_u32")?;
        let args = [Arg::Span(span), Arg::U32(value), Arg::U64(count as u64)];
        let grid = count.div_ceil(256).min(64) as u32;
        // SAFETY: fill_u32 writes `count` words from the span's start: the span's length.
        let token = unsafe { kernel.launch(LaunchDims::linear(grid, 256), &args, after) }?;
        for word in owned.expect[first * 4..(first + count) * 4].chunks_exact_mut(4) {
            word.copy_from_slice(&value.to_ne_bytes());
        }
        Ok(token)
    }

    /// `workgroup_reverse_u32` over groups of words of buffer `index` (some above the default
    /// workgroup limit, which needs the opt-in); the host copy follows on success.
    fn launch_reverse(
        &mut self,
        index: usize,
        device: DeviceId,
        words: usize,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        let per_group = [16usize, 256, 4096, 16384][self.rng.below(4)].min(words);
        let groups = (words / per_group).min(8);
        let rt = self.rt;
        let owned = &mut self.owned[index];
        let span = owned.buffer.span(0, groups * per_group * 4)?;
        let kernel = rt.kernel(device, "workgroup_reverse_u32")?;
        let dims = LaunchDims {
            dynamic_workgroup_bytes: (per_group * 4) as u32,
            ..LaunchDims::linear(groups as u32, 128)
        };
        let args = [Arg::Span(span), Arg::U32(per_group as u32)];
        // SAFETY: group g touches words [g * per_group, (g + 1) * per_group) of the span, which
        // holds `groups * per_group` words.
        let token = unsafe { kernel.launch(dims, &args, after) }?;
        for group in owned.expect[..groups * per_group * 4].chunks_exact_mut(per_group * 4) {
            let old: Vec<u32> = group
                .chunks_exact(4)
                .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            for (i, word) in group.chunks_exact_mut(4).enumerate() {
                let value = old[per_group - 1 - i].wrapping_add(1);
                word.copy_from_slice(&value.to_ne_bytes());
            }
        }
        Ok(token)
    }

    /// Forks a buffer's token into 2..=4 branches, waits for some, joins the rest back.
    fn fork_join(&mut self) {
        let index = self.pick();
        let Some(token) = self.owned[index].token.take() else {
            return self.fill();
        };
        let count = 2 + self.rng.below(3);
        let Some(branches) = self.ok("fork", self.rt.fork(token, count)) else {
            return self.drop_owned(&[index]);
        };
        self.counts.forks += 1;
        let mut keep = Vec::new();
        for branch in branches {
            if keep.is_empty() || self.rng.chance(2) {
                keep.push(branch);
            } else {
                let waited = self.rt.wait(branch);
                if self.ok("wait on a branch", waited).is_some() {
                    self.counts.waits += 1;
                }
            }
        }
        let joined = self.rt.join(&mut keep);
        if joined.is_ok() {
            self.counts.joins += 1;
        }
        self.finish("join", &[index], keep, joined);
    }

    fn wait(&mut self) {
        let index = self.pick();
        let Some(token) = self.owned[index].token.take() else {
            return self.verify();
        };
        let waited = self.rt.wait(token);
        if self.ok("wait", waited).is_some() {
            self.counts.waits += 1;
        } else {
            // A failed wait still consumed the token; the data's order is no longer known.
            self.drop_owned(&[index]);
        }
    }

    /// Locks a random arena range, predicting from the thread's own entries whether it nests,
    /// is refused as overlapping, or pins anew (arenas of threads never overlap).
    fn lock(&mut self) {
        let (start, len) = self.range(ARENA, 64 << 10);
        let inside = self
            .locks
            .iter()
            .position(|l| l.start <= start && start + len <= l.start + l.len);
        let overlaps = self
            .locks
            .iter()
            .any(|l| start < l.start + l.len && l.start < start + len);
        let ptr = self.arena.as_ptr() as usize + start;
        let locked = self.rt.lock_range(ptr, len);
        match (locked, inside, overlaps) {
            (Ok(_), Some(entry), _) => {
                self.locks[entry].count += 1;
                self.counts.nested_locks += 1;
            }
            (Ok(_), None, false) => {
                self.locks.push(ArenaLock {
                    start,
                    len,
                    count: 1,
                });
                self.counts.locks += 1;
            }
            (Err(Error::LockOverlap { .. }), None, true) => self.counts.refused_locks += 1,
            (Err(e), None, false) if self.probe.is_injected(&e) => self.counts.faulted += 1,
            (result, inside, overlaps) => self.fail(format!(
                "lock of arena [{start}, {}): expected {}, got {:?}",
                start + len,
                match (inside, overlaps) {
                    (Some(_), _) => "a nested lock",
                    (None, true) => "LockOverlap",
                    (None, false) => "a new pin",
                },
                result.map(drop)
            )),
        }
    }

    /// Unlocks one lock of a random entry through a random pointer inside it.
    fn unlock(&mut self) {
        if self.locks.is_empty() {
            return self.lock();
        }
        let entry = self.rng.below(self.locks.len());
        let inner = self.rng.below(self.locks[entry].len);
        let ptr = self.arena.as_ptr() as usize + self.locks[entry].start + inner;
        let unlocked = self.rt.unlock_range(ptr);
        if self.ok("unlock", unlocked).is_some() {
            self.counts.unlocks += 1;
            self.locks[entry].count -= 1;
            if self.locks[entry].count == 0 {
                self.locks.swap_remove(entry);
            }
        }
    }

    fn trim(&mut self) {
        if self.config.trims && self.rng.chance(8) {
            let trimmed = self.rt.trim();
            if self.ok("trim", trimmed).is_some() {
                self.counts.trims += 1;
            }
        } else {
            self.verify();
        }
    }

    /// Reads a buffer back (after its last work) and compares every byte with the host copy.
    fn verify(&mut self) {
        let index = self.pick();
        let device = self.device_for(index);
        let mut after = self.take_token(index);
        let size = self.owned[index].buffer.size();
        let mut read = vec![0u8; size];
        let rt = self.rt;
        let owned = &self.owned[index];
        let result = if owned.buffer.kind() == MemoryKind::Device {
            rt.download(device, &mut read, owned.buffer.all(), &mut after)
        } else {
            after
                .drain(..)
                .try_for_each(|token| rt.wait(token))
                // SAFETY: the buffer's last work has completed and this thread enqueues none.
                .and_then(|()| unsafe { owned.buffer.read_host(0, &mut read) })
        };
        if self.ok("read back", result).is_none() {
            self.settle(after);
            return self.drop_owned(&[index]);
        }
        let owned = &self.owned[index];
        match read.iter().zip(&owned.expect).position(|(a, b)| a != b) {
            None => {
                self.counts.verified += 1;
                self.counts.verified_bytes += size as u64;
            }
            Some(at) => {
                let why = format!(
                    "{:?} buffer of {size} bytes on {}: byte {at} is {}, expected {}",
                    owned.buffer.kind(),
                    owned.buffer.device(),
                    read[at],
                    owned.expect[at]
                );
                self.fail(why);
                // Reset the host copy so one corruption is reported once.
                self.owned[index].expect = read;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of samples whose planner token slots and planner streams (a pool) follow
    /// `slots` and `streams`.
    fn report(slots: &[usize], streams: &[usize]) -> StressReport {
        let samples = slots
            .iter()
            .zip(streams)
            .map(|(&token_slots, &streams)| {
                let mut sample = Sample::default();
                sample.stats.planner.token_slots = token_slots;
                sample.stats.planner.streams = streams;
                sample
            })
            .collect();
        StressReport {
            samples,
            ..StressReport::default()
        }
    }

    fn grown(report: &StressReport) -> Vec<&'static str> {
        report.growth().iter().map(|(q, _)| q.name).collect()
    }

    #[test]
    fn growth_names_jumps_and_creeps_but_not_noise_or_a_pool_keeping_its_peak() {
        let flat = [0, 100, 120, 90, 110, 100, 95, 120, 105];
        assert_eq!(grown(&report(&flat, &flat)), Vec::<&str>::new());
        // A creep (no jump: 240 is under 1.5 x 160 + 32): every sample of the last quarter
        // above the second quarter's maximum by more than the noise.
        let creep = [0, 100, 120, 140, 160, 180, 200, 220, 240];
        assert_eq!(grown(&report(&creep, &flat)), vec!["planner token slots"]);
        // The same creep in a pool is its peak rising: not growth; a jump is.
        assert_eq!(grown(&report(&flat, &creep)), Vec::<&str>::new());
        let jump = [0, 100, 100, 100, 100, 100, 100, 100, 300];
        assert_eq!(grown(&report(&flat, &jump)), vec!["planner streams"]);
        // Too few samples to tell.
        assert_eq!(grown(&report(&creep[..4], &jump[..4])), Vec::<&str>::new());
    }
}
