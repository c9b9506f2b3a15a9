//! How a stress run is shaped: threads, duration, seed, buffer sizes, sampling, faults and
//! trims ([`StressConfig`]), and how many buffers a thread owns at most.

use std::time::Duration;

/// Buffers a thread owns at most.
pub const MAX_OWNED: usize = 8;

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
