//! Lock table against the baseline of docs/lock-table.md (`BTreeMap<usize, Entry>` keyed by
//! start, `range(..=p).next_back()`), same workloads, same run:
//! - lookups of (ptr, len) at random interior addresses, 80% hits, over 16 / 4,096 / 65,536
//!   disjoint page-aligned regions of 4 KiB to 4 MiB, bare table and thread-safe form;
//! - nested re-lock of a range inside an entry;
//! - lock + unlock of a new range (driver cost excluded: a driver that does nothing).

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use gpu_core::DeviceId;
use gpu_core::lock_table::model::HostAddressPins;
use gpu_core::lock_table::{LockTable, SharedLockTable};
use gpu_core::seeded::SplitMix64 as Rng;

const PAGE: usize = 4096;
const QUERIES: usize = 1 << 14;
const SIZES: [usize; 3] = [16, 4096, 65536];

/// The baseline's entry.
struct Entry {
    len: usize,
    count: usize,
    device_ptr: usize,
}

/// The baseline: what libomptarget's std::set does, in Rust.
#[derive(Default)]
struct BTreeTable {
    map: BTreeMap<usize, Entry>,
}

impl BTreeTable {
    fn containing(&mut self, ptr: usize, len: usize) -> Option<(&usize, &mut Entry)> {
        let (start, entry) = self.map.range_mut(..=ptr).next_back()?;
        (ptr - start + len <= entry.len).then_some((start, entry))
    }

    fn lookup(&mut self, ptr: usize, len: usize) -> Option<usize> {
        self.containing(ptr, len)
            .map(|(start, e)| e.device_ptr + (ptr - start))
    }

    fn lock(&mut self, ptr: usize, len: usize) -> bool {
        if let Some((_, entry)) = self.containing(ptr, len) {
            entry.count += 1;
            return true;
        }
        let before = self.map.range(..=ptr).next_back();
        if before.is_some_and(|(s, e)| s + e.len > ptr) {
            return false;
        }
        if self.map.range(ptr..ptr + len).next().is_some() {
            return false;
        }
        self.map.insert(
            ptr,
            Entry {
                len,
                count: 1,
                device_ptr: ptr,
            },
        );
        true
    }

    fn unlock(&mut self, ptr: usize) {
        let start = *self.containing(ptr, 1).expect("locked").0;
        let entry = self.map.get_mut(&start).expect("locked");
        entry.count -= 1;
        if entry.count == 0 {
            self.map.remove(&start);
        }
    }
}

/// Regions of 4 KiB .. 4 MiB with gaps of the same sizes between them, and queries: 80%
/// inside a region, 20% inside a gap.
struct Workload {
    regions: Vec<(usize, usize)>,
    gaps: Vec<(usize, usize)>,
    queries: Vec<(usize, usize)>,
}

impl Workload {
    fn new(count: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut next = 1 << 32;
        let (mut regions, mut gaps) = (Vec::new(), Vec::new());
        for _ in 0..count {
            let gap = (1 + rng.below(1024)) * PAGE;
            gaps.push((next, gap));
            next += gap;
            let len = (1 + rng.below(1024)) * PAGE;
            regions.push((next, len));
            next += len;
        }
        let queries = (0..QUERIES)
            .map(|_| {
                let (start, len) = if rng.below(10) < 8 {
                    regions[rng.below(count)]
                } else {
                    gaps[rng.below(count)]
                };
                let offset = rng.below(len - 64);
                let max = (len - offset).min(64 * 1024);
                (start + offset, 1 + rng.below(max))
            })
            .collect();
        Self {
            regions,
            gaps,
            queries,
        }
    }

    fn table(&self) -> LockTable {
        let mut table = LockTable::new(1).unwrap();
        for &(start, len) in &self.regions {
            table.lock(&mut HostAddressPins, start, len).unwrap();
        }
        table
    }

    fn shared(&self) -> SharedLockTable<HostAddressPins> {
        let shared = SharedLockTable::new(HostAddressPins, 1).unwrap();
        for &(start, len) in &self.regions {
            shared.lock(start, len).unwrap();
        }
        shared
    }

    fn btree(&self) -> BTreeTable {
        let mut table = BTreeTable::default();
        for &(start, len) in &self.regions {
            assert!(table.lock(start, len));
        }
        table
    }

    /// Ranges inside a region (for nested re-locks).
    fn inside(&self) -> Vec<(usize, usize)> {
        let mut rng = Rng::new(7);
        (0..QUERIES)
            .map(|_| {
                let (start, len) = self.regions[rng.below(self.regions.len())];
                let offset = rng.below(len / 2);
                (start + offset, 1 + rng.below(len / 2))
            })
            .collect()
    }

    /// Page ranges inside gaps (for new locks that overlap nothing).
    fn new_ranges(&self) -> Vec<(usize, usize)> {
        let mut rng = Rng::new(11);
        (0..QUERIES)
            .map(|_| {
                let (start, len) = self.gaps[rng.below(self.gaps.len())];
                (start + PAGE * rng.below(len / PAGE), PAGE)
            })
            .collect()
    }
}

/// Times `op` as the `side` of the `count`-region case, one prepared input per iteration,
/// taken in a cycle.
fn bench_side<R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    side: &str,
    count: usize,
    inputs: &[(usize, usize)],
    mut op: impl FnMut(usize, usize) -> R,
) {
    group.bench_function(BenchmarkId::new(side, count), |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) & (QUERIES - 1);
            let (p, l) = inputs[i];
            black_box(op(p, l))
        })
    });
}

fn lookups(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup");
    for count in SIZES {
        let work = Workload::new(count, 42);
        let table = work.table();
        let shared = work.shared();
        let mut btree = work.btree();
        let device = DeviceId(0);
        let hits = work
            .queries
            .iter()
            .filter(|&&(p, l)| table.lookup(p, l, device).unwrap().is_some())
            .count();
        assert!((hits * 100 / QUERIES).abs_diff(80) <= 3, "about 80% hits");
        bench_side(&mut group, "table", count, &work.queries, |p, l| {
            table.lookup(p, l, device)
        });
        bench_side(&mut group, "shared", count, &work.queries, |p, l| {
            shared.lookup(p, l, device)
        });
        bench_side(&mut group, "btreemap", count, &work.queries, |p, l| {
            btree.lookup(p, l)
        });
    }
    group.finish();
}

fn nested_relock(c: &mut Criterion) {
    let mut group = c.benchmark_group("nested_relock");
    for count in SIZES {
        let work = Workload::new(count, 42);
        let inside = work.inside();
        let mut table = work.table();
        let shared = work.shared();
        let mut btree = work.btree();
        bench_side(&mut group, "table", count, &inside, |p, l| {
            table.lock(&mut HostAddressPins, p, l).unwrap()
        });
        bench_side(&mut group, "shared", count, &inside, |p, l| {
            shared.lock(p, l).unwrap()
        });
        bench_side(&mut group, "btreemap", count, &inside, |p, l| {
            btree.lock(p, l)
        });
    }
    group.finish();
}

fn lock_unlock_new(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock_unlock_new");
    for count in SIZES {
        let work = Workload::new(count, 42);
        let fresh = work.new_ranges();
        let mut table = work.table();
        let shared = work.shared();
        let mut btree = work.btree();
        bench_side(&mut group, "table", count, &fresh, |p, l| {
            table.lock(&mut HostAddressPins, p, l).unwrap();
            table.unlock(&mut HostAddressPins, p).unwrap()
        });
        bench_side(&mut group, "shared", count, &fresh, |p, l| {
            shared.lock(p, l).unwrap();
            shared.unlock(p).unwrap()
        });
        bench_side(&mut group, "btreemap", count, &fresh, |p, l| {
            assert!(btree.lock(p, l));
            btree.unlock(p)
        });
    }
    group.finish();
}

criterion_group!(benches, lookups, nested_relock, lock_unlock_new);
criterion_main!(benches);
