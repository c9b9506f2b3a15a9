//! Property tests of the workgroup planner against its reference model (`workgroup::model`):
//! random buffers, live ranges, limits and launches, every answer checked pair by pair.

use gpu_core::Error;
use gpu_core::workgroup::model::check_planner;
use gpu_core::workgroup::{
    AddressSpace, BufferSize, LiveRange, WorkgroupBuffer, WorkgroupLimits, WorkgroupPlanner,
};
use proptest::prelude::*;

/// An H200's limits (real limits come from the device).
const H200: WorkgroupLimits = WorkgroupLimits {
    default_per_block: 48 * 1024,
    max_per_block_opt_in: 232_448,
    per_multiprocessor: 228 * 1024,
    reserved_per_block: 1024,
};

/// Limits no test layout reaches.
const UNLIMITED: WorkgroupLimits = WorkgroupLimits {
    default_per_block: u32::MAX,
    max_per_block_opt_in: u32::MAX,
    per_multiprocessor: u32::MAX,
    reserved_per_block: 0,
};

/// A power-of-two alignment from 1 to 256.
fn alignment() -> impl Strategy<Value = u32> {
    (0..=8u32).prop_map(|shift| 1 << shift)
}

/// Any buffer description, now and then a bad one (private, odd alignment, reversed range).
fn any_buffer() -> impl Strategy<Value = WorkgroupBuffer> {
    (
        prop_oneof![4 => (0..=20_000u32).prop_map(BufferSize::Static), 1 => Just(BufferSize::AtLaunch)],
        prop_oneof![60 => alignment(), 1 => prop_oneof![Just(0u32), Just(3), Just(48)]],
        prop_oneof![80 => Just(AddressSpace::Workgroup), 1 => Just(AddressSpace::Private)],
        prop_oneof![
            15 => Just(None),
            45 => (0..8u32, 0..4u32)
                .prop_map(|(first, len)| Some(LiveRange { first, last: first + len })),
            1 => (1..8u32).prop_map(|first| Some(LiveRange { first, last: first - 1 })),
        ],
    )
        .prop_map(|(size, align, space, live)| WorkgroupBuffer {
            name: String::new(),
            size,
            align,
            space,
            live,
        })
}

/// Names buffers by position, so errors can be told apart.
fn named(mut buffers: Vec<WorkgroupBuffer>) -> Vec<WorkgroupBuffer> {
    for (i, buffer) in buffers.iter_mut().enumerate() {
        buffer.name = format!("b{i}");
    }
    buffers
}

/// The H200's limits, or arbitrary ones (some inconsistent, some tiny).
fn any_limits() -> impl Strategy<Value = WorkgroupLimits> {
    prop_oneof![
        Just(H200),
        (0..=100_000u32, 0..=250_000u32, 0..=250_000u32, 0..=4096u32).prop_map(
            |(default_per_block, max_per_block_opt_in, per_multiprocessor, reserved_per_block)| {
                WorkgroupLimits {
                    default_per_block,
                    max_per_block_opt_in,
                    per_multiprocessor,
                    reserved_per_block,
                }
            }
        ),
    ]
}

/// A kernel's buffers, a launch for them (now and then with a wrong number of sizes), limits
/// and a bank stagger.
fn any_case() -> impl Strategy<Value = (Vec<WorkgroupBuffer>, Vec<u32>, WorkgroupLimits, u32)> {
    prop::collection::vec(any_buffer(), 0..16)
        .prop_map(named)
        .prop_flat_map(|buffers| {
            let launch_sized = buffers
                .iter()
                .filter(|b| b.size == BufferSize::AtLaunch)
                .count();
            let count = prop_oneof![10 => Just(launch_sized), 1 => 0..=launch_sized + 1];
            let sizes = count.prop_flat_map(|n| prop::collection::vec(0..=60_000u32, n));
            let stagger = prop_oneof![Just(0u32), 0..=64u32];
            (Just(buffers), sizes, any_limits(), stagger)
        })
}

/// Valid buffers, all live at once, with static sizes; `multiple` makes each size a multiple
/// of its alignment.
fn all_live_static(multiple: bool) -> impl Strategy<Value = Vec<WorkgroupBuffer>> {
    prop::collection::vec((0..=5_000u32, alignment()), 0..24).prop_map(move |specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (size, align))| {
                let size = if multiple { size / align * align } else { size };
                WorkgroupBuffer::fixed(format!("b{i}"), size, align)
            })
            .collect()
    })
}

fn aligned_size(buffer: &WorkgroupBuffer) -> u64 {
    match buffer.size {
        BufferSize::Static(size) => u64::from(size).next_multiple_of(u64::from(buffer.align)),
        BufferSize::AtLaunch => unreachable!("static buffers only"),
    }
}

fn static_size(buffer: &WorkgroupBuffer) -> u64 {
    match buffer.size {
        BufferSize::Static(size) => u64::from(size),
        BufferSize::AtLaunch => unreachable!("static buffers only"),
    }
}

proptest! {
    /// Any input: the layout passes every rule (alignment, no overlap among buffers live
    /// together, stagger kept, parts in place, limits, opt-in) and is no larger than the
    /// sequential model's; a refusal is the error the model expects.
    #[test]
    fn planner_agrees_with_the_model((buffers, sizes, limits, stagger) in any_case()) {
        if let Err(broken) = check_planner(&buffers, limits, stagger, &sizes) {
            prop_assert!(false, "{}", broken);
        }
    }

    /// Every buffer live at once, no stagger: no waste beyond alignment.
    #[test]
    fn all_live_layout_wastes_nothing_beyond_alignment(buffers in all_live_static(false)) {
        let layout = check_planner(&buffers, UNLIMITED, 0, &[]).unwrap().unwrap();
        let total = u64::from(layout.total_bytes());
        prop_assert!(total >= buffers.iter().map(static_size).sum::<u64>());
        prop_assert!(total <= buffers.iter().map(aligned_size).sum::<u64>());
    }

    /// Every buffer live at once, sizes multiples of their alignments: the total is exactly
    /// the sum of the sizes, so the plan fits a limit exactly when that sum does.
    #[test]
    fn all_live_aligned_sizes_pack_without_gaps(
        buffers in all_live_static(true),
        limit in 0..=60_000u32,
    ) {
        let sum: u64 = buffers.iter().map(static_size).sum();
        let layout = check_planner(&buffers, UNLIMITED, 0, &[]).unwrap().unwrap();
        prop_assert_eq!(u64::from(layout.total_bytes()), sum);
        let limits = WorkgroupLimits {
            default_per_block: limit,
            max_per_block_opt_in: limit,
            per_multiprocessor: limit,
            reserved_per_block: 0,
        };
        let planned = WorkgroupPlanner::new(limits).plan(&buffers);
        if sum <= u64::from(limit) {
            prop_assert!(planned.is_ok());
        } else {
            let refused_with_sum = matches!(
                planned,
                Err(Error::LimitExceeded { required, limit: l, .. })
                    if required as u64 == sum && l == limit as usize
            );
            prop_assert!(refused_with_sum);
        }
    }

    /// A layout fits limits equal to its own sizes and no smaller ones, and needs the opt-in
    /// exactly when its total is above the default.
    #[test]
    fn limits_hold_exactly_at_the_boundary((buffers, sizes, _, stagger) in any_case()) {
        let Ok(Some(layout)) = check_planner(&buffers, UNLIMITED, stagger, &sizes) else {
            return Ok(());
        };
        let (static_bytes, total) = (layout.static_bytes, layout.total_bytes());
        let launch = |default_per_block, max_per_block_opt_in| {
            let limits = WorkgroupLimits {
                default_per_block,
                max_per_block_opt_in,
                per_multiprocessor: max_per_block_opt_in,
                reserved_per_block: 0,
            };
            WorkgroupPlanner::new(limits)
                .with_bank_stagger(stagger)
                .plan(&buffers)
                .and_then(|plan| plan.for_launch(&sizes))
        };
        prop_assert_eq!(launch(total, total), Ok(layout.clone()));
        if static_bytes < total {
            let opted_in = launch(total - 1, total).unwrap();
            prop_assert_eq!(opted_in.opt_in, Some(layout.dynamic_bytes));
            prop_assert_eq!(opted_in.offsets, layout.offsets.clone());
        }
        if total > 0 {
            let refused = matches!(
                launch(static_bytes, total - 1),
                Err(Error::LimitExceeded { required, limit, .. })
                    if required == total as usize && limit == (total - 1) as usize
            );
            prop_assert!(refused);
        }
        if static_bytes > 0 {
            let refused = matches!(
                launch(static_bytes - 1, total),
                Err(Error::LimitExceeded { required, limit, .. })
                    if required == static_bytes as usize && limit == (static_bytes - 1) as usize
            );
            prop_assert!(refused);
        }
    }

    /// Buffers live in pairwise disjoint phases all start at 0: the total is the largest.
    #[test]
    fn buffers_never_live_together_share_one_region(buffers in all_live_static(false)) {
        let buffers: Vec<WorkgroupBuffer> = buffers
            .into_iter()
            .enumerate()
            .map(|(phase, buffer)| buffer.live_during(phase as u32, phase as u32))
            .collect();
        let layout = check_planner(&buffers, UNLIMITED, 16, &[]).unwrap().unwrap();
        prop_assert!(layout.offsets.iter().all(|&offset| offset == 0));
        let largest = buffers.iter().map(static_size).max().unwrap_or(0);
        prop_assert_eq!(u64::from(layout.total_bytes()), largest);
    }
}
