//! What a stress run reports: operations by kind ([`OpCounts`]), samples of the footprint
//! ([`Sample`], the [`Quantity`]s that must stay bounded), and growth between run halves.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use std::time::Duration;

use gpu_core::allocator::{AllocatorStats, SMALL_SEGMENT};
use gpu_rt::runtime::{LiveObjects, RuntimeStats};

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

    pub(super) fn add(&mut self, other: &OpCounts) {
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
    /// One allocator figure summed over every device and cached kind.
    pub fn allocator_total(&self, pick: fn(&AllocatorStats) -> usize) -> u64 {
        self.stats
            .allocator
            .iter()
            .map(|(_, _, s)| pick(s) as u64)
            .sum()
    }

    /// The quantities that must stay bounded.
    pub fn bounded(&self) -> Vec<Quantity> {
        const BYTES: u64 = 8 << 20;
        const COUNT: u64 = 32;
        let allocator = |pick| self.allocator_total(pick);
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

/// What the allocator held against its bound without trims, over a run's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservedBound {
    /// The highest sampled reserved total (all devices and kinds).
    pub reserved: u64,
    /// The sum of the pools' live peaks (`peak_allocated`) in the last sample.
    pub live_peak: u64,
    /// The highest sampled total of pending frees.
    pub pending_peak: u64,
    /// The bound: [`RESERVED_BOUND_FACTOR`] times (live peak plus pending peak), plus one
    /// small segment per pool (docs/allocator.md, "Bounded without trims").
    pub bound: u64,
}

/// The soak's bound on reserved memory without trims, as a multiple of live plus pending
/// peaks: the free space stranded between live blocks, in runs too small for the requests that
/// came, stays below what is live or pending (measured: 0.8 to 1.1 times on the host backend's
/// 16-thread mix, docs/allocator.md).
pub const RESERVED_BOUND_FACTOR: u64 = 2;

impl ReservedBound {
    /// Whether the highest reserved total kept within the bound.
    pub fn holds(&self) -> bool {
        self.reserved <= self.bound
    }
}

impl StressReport {
    /// The allocator's reserved bytes against its bound without trims; `None` without samples.
    pub fn reserved_bound(&self) -> Option<ReservedBound> {
        let last = self.samples.last()?;
        let peak = |pick| {
            self.samples
                .iter()
                .map(|s| s.allocator_total(pick))
                .max()
                .unwrap_or(0)
        };
        let live_peak = last.allocator_total(|s| s.peak_allocated);
        let pending_peak = peak(|s| s.pending);
        let pools = last.stats.allocator.len() as u64;
        Some(ReservedBound {
            reserved: peak(|s| s.reserved),
            live_peak,
            pending_peak,
            bound: RESERVED_BOUND_FACTOR * (live_peak + pending_peak)
                + pools * SMALL_SEGMENT as u64,
        })
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
