//! Planning cost of the workgroup planner for 4, 32 and 256 buffers, all live at once or with
//! live ranges, against the model's plain sequential layout (the baseline: no sharing, no
//! gap search) on the same buffers.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpu_core::workgroup::model::{resolved_sizes, sequential_layout};
use gpu_core::workgroup::{WorkgroupBuffer, WorkgroupLimits, WorkgroupPlanner};

/// Limits no benchmark layout reaches, so every plan is laid out in full.
const UNLIMITED: WorkgroupLimits = WorkgroupLimits {
    default_per_block: u32::MAX,
    max_per_block_opt_in: u32::MAX,
    per_multiprocessor: u32::MAX,
    reserved_per_block: 0,
};

/// `count` buffers of 16 B to 4 KiB with mixed alignments, every fourth one launch-sized
/// (each launch gives it 1 KiB); with `phases`, each live over a few of `count / 4` phases.
fn kernel(count: usize, phases: bool) -> (Vec<WorkgroupBuffer>, Vec<u32>) {
    let mut seed = 0x2545_f491_u32;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    let phase_count = (count as u32 / 4).max(1);
    let mut launch_sizes = Vec::new();
    let buffers = (0..count)
        .map(|i| {
            let align = [4, 8, 16, 128][(next() % 4) as usize];
            let buffer = if i % 4 == 3 {
                launch_sizes.push(1024);
                WorkgroupBuffer::launch_sized(format!("b{i}"), align)
            } else {
                WorkgroupBuffer::fixed(format!("b{i}"), 16 + next() % 4080, align)
            };
            if phases {
                let first = next() % phase_count;
                buffer.live_during(first, first + next() % 3)
            } else {
                buffer
            }
        })
        .collect();
    (buffers, launch_sizes)
}

fn planning(c: &mut Criterion) {
    let planner = WorkgroupPlanner::new(UNLIMITED);
    let mut group = c.benchmark_group("workgroup_plan");
    for phases in [false, true] {
        let live = if phases { "live_ranges" } else { "all_live" };
        for count in [4, 32, 256] {
            let (buffers, launch_sizes) = kernel(count, phases);
            group.bench_with_input(
                BenchmarkId::new(format!("first_fit/{live}"), count),
                &buffers,
                |b, buffers| {
                    b.iter(|| {
                        let plan = planner.plan(black_box(buffers)).unwrap();
                        plan.for_launch(black_box(&launch_sizes)).unwrap()
                    })
                },
            );
            group.bench_with_input(
                BenchmarkId::new(format!("sequential_baseline/{live}"), count),
                &buffers,
                |b, buffers| {
                    b.iter(|| {
                        let sizes = resolved_sizes(black_box(buffers), black_box(&launch_sizes));
                        sequential_layout(buffers, &sizes, 0)
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, planning);
criterion_main!(benches);
