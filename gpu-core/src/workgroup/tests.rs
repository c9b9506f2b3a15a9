//! The workgroup planner's rules, one test each: placement, sharing by live range, alignment,
//! stagger, the default and opt-in limits, launch-sized buffers, and the typed errors.

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use super::*;

/// An H200's limits (tests only; real limits come from the device).
const H200: WorkgroupLimits = WorkgroupLimits {
    default_per_block: 48 * 1024,
    max_per_block_opt_in: 232_448,
    per_multiprocessor: 228 * 1024,
    reserved_per_block: 1024,
};

fn layout(buffers: &[WorkgroupBuffer], launch_sizes: &[u32]) -> WorkgroupLayout {
    WorkgroupPlanner::new(H200)
        .plan(buffers)
        .unwrap()
        .for_launch(launch_sizes)
        .unwrap()
}

fn limit_error(result: Result<impl core::fmt::Debug>) -> (&'static str, usize, usize, Vec<String>) {
    match result {
        Err(Error::LimitExceeded {
            what,
            required,
            limit,
            detail,
        }) => (what, required, limit, detail),
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[test]
fn h200_limits_allow_the_opt_in_maximum() {
    assert_eq!(H200.max_per_block(), 232_448);
}

#[test]
fn multiprocessor_capacity_caps_the_per_block_maximum() {
    let limits = WorkgroupLimits {
        per_multiprocessor: 100_000,
        ..H200
    };
    assert_eq!(limits.max_per_block(), 100_000 - 1024);
    let plan = WorkgroupPlanner::new(limits)
        .plan(&[WorkgroupBuffer::launch_sized("big", 16)])
        .unwrap();
    let (what, required, limit, _) = limit_error(plan.for_launch(&[99_000]));
    assert_eq!(
        (what, required, limit),
        ("workgroup memory per block", 99_000, 98_976)
    );
}

#[test]
fn no_buffers_need_no_bytes() {
    let layout = layout(&[], &[]);
    assert_eq!(layout.offsets, Vec::<u32>::new());
    assert_eq!((layout.total_bytes(), layout.opt_in), (0, None));
}

#[test]
fn buffers_live_together_go_back_to_back_largest_alignment_first() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("bytes", 17, 1),
            WorkgroupBuffer::fixed("vec4s", 16, 16),
        ],
        &[],
    );
    // vec4s first: the 17 bytes after it waste nothing, the other way round wastes 15.
    assert_eq!(layout.offsets, vec![16, 0]);
    assert_eq!((layout.static_bytes, layout.dynamic_bytes), (33, 0));
    assert_eq!(layout.opt_in, None);
}

#[test]
fn equal_alignments_go_largest_first() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("small", 100, 4),
            WorkgroupBuffer::fixed("large", 300, 4),
        ],
        &[],
    );
    assert_eq!(layout.offsets, vec![300, 0]);
    assert_eq!(layout.total_bytes(), 400);
}

#[test]
fn buffers_with_disjoint_live_ranges_share_bytes() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("load", 1000, 4).live_during(0, 0),
            WorkgroupBuffer::fixed("reduce", 800, 4).live_during(1, 1),
            WorkgroupBuffer::fixed("store", 600, 4).live_during(2, 3),
        ],
        &[],
    );
    assert_eq!(layout.offsets, vec![0, 0, 0]);
    assert_eq!(layout.total_bytes(), 1000);
}

#[test]
fn buffers_live_in_a_common_phase_do_not_share() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("a", 1000, 4).live_during(0, 1),
            WorkgroupBuffer::fixed("b", 800, 4).live_during(1, 2),
            WorkgroupBuffer::fixed("c", 600, 4).live_during(2, 2),
        ],
        &[],
    );
    // b overlaps a in phase 1; c overlaps only b, so it reuses a's bytes.
    assert_eq!(layout.offsets, vec![0, 1000, 0]);
    assert_eq!(layout.total_bytes(), 1800);
}

#[test]
fn buffer_without_live_range_is_live_in_every_phase() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("always", 100, 4),
            WorkgroupBuffer::fixed("late", 100, 4).live_during(7, 9),
        ],
        &[],
    );
    assert_eq!(layout.offsets, vec![0, 100]);
}

#[test]
fn first_fit_reuses_the_gap_of_a_dead_buffer() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("early", 256, 4).live_during(0, 0),
            WorkgroupBuffer::fixed("both", 256, 4).live_during(0, 1),
            WorkgroupBuffer::fixed("late", 128, 4).live_during(1, 1),
        ],
        &[],
    );
    assert_eq!(layout.offsets, vec![0, 256, 0]);
    assert_eq!(layout.total_bytes(), 512);
}

#[test]
fn bank_stagger_moves_starts_onto_different_banks() {
    let buffers = [
        WorkgroupBuffer::fixed("a", 4096, 16).live_during(0, 4),
        WorkgroupBuffer::fixed("b", 4096, 16).live_during(0, 4),
        WorkgroupBuffer::fixed("c", 4096, 16).live_during(0, 4),
        WorkgroupBuffer::fixed("later", 4096, 16).live_during(5, 5),
    ];
    let layout = WorkgroupPlanner::new(H200)
        .with_bank_stagger(16)
        .plan(&buffers)
        .unwrap()
        .for_launch(&[])
        .unwrap();
    assert_eq!(layout.offsets, vec![0, 4112, 8224, 0]);
    let banks: Vec<u32> = layout.offsets[..3].iter().map(|o| o % 128 / 4).collect();
    assert_eq!(banks, vec![0, 4, 8]);
    // A buffer live apart from the others still shares their bytes; no stagger after the
    // last buffer.
    assert_eq!(layout.total_bytes(), 8224 + 4096);
}

#[test]
fn bank_stagger_is_kept_after_a_buffer_filling_a_gap() {
    let layout = WorkgroupPlanner::new(H200)
        .with_bank_stagger(16)
        .plan(&[
            WorkgroupBuffer::fixed("early", 64, 16).live_during(0, 0),
            WorkgroupBuffer::fixed("both", 64, 16).live_during(0, 1),
            WorkgroupBuffer::fixed("late", 72, 8).live_during(1, 1),
        ])
        .unwrap()
        .for_launch(&[])
        .unwrap();
    // `late` would fit the 80 bytes before `both` only without the 16 bytes of stagger.
    assert_eq!(layout.offsets, vec![0, 80, 160]);
}

#[test]
fn bank_stagger_rounds_up_to_the_next_alignment() {
    let layout = WorkgroupPlanner::new(H200)
        .with_bank_stagger(16)
        .plan(&[
            WorkgroupBuffer::fixed("a", 4096, 128),
            WorkgroupBuffer::fixed("b", 4096, 128),
        ])
        .unwrap()
        .for_launch(&[])
        .unwrap();
    assert_eq!(layout.offsets, vec![0, 4096 + 128]);
}

#[test]
fn launch_sized_buffers_follow_the_static_part_aligned() {
    let plan = WorkgroupPlanner::new(H200)
        .plan(&[
            WorkgroupBuffer::fixed("table", 100, 4),
            WorkgroupBuffer::launch_sized("rows", 16),
            WorkgroupBuffer::launch_sized("flags", 8),
        ])
        .unwrap();
    assert_eq!(plan.static_bytes(), 112);
    let layout = plan.for_launch(&[64, 40]).unwrap();
    assert_eq!(layout.offsets, vec![0, 112, 176]);
    assert_eq!((layout.static_bytes, layout.dynamic_bytes), (112, 104));
    // The same plan serves another launch.
    let layout = plan.for_launch(&[8, 0]).unwrap();
    assert_eq!(layout.offsets, vec![0, 112, 112]);
    assert_eq!(layout.dynamic_bytes, 8);
}

#[test]
fn launch_sized_buffers_share_bytes_by_live_range() {
    let layout = layout(
        &[
            WorkgroupBuffer::launch_sized("first", 4).live_during(0, 0),
            WorkgroupBuffer::launch_sized("second", 4).live_during(1, 1),
        ],
        &[1000, 2000],
    );
    assert_eq!(layout.offsets, vec![0, 0]);
    assert_eq!((layout.static_bytes, layout.dynamic_bytes), (0, 2000));
}

#[test]
fn zero_size_buffers_take_no_bytes() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("empty", 0, 64),
            WorkgroupBuffer::fixed("data", 100, 4),
            WorkgroupBuffer::launch_sized("none_this_time", 4),
        ],
        &[0],
    );
    assert_eq!(layout.offsets, vec![0, 0, 100]);
    assert_eq!(layout.total_bytes(), 100);
}

#[test]
fn opt_in_is_needed_above_the_default_limit_with_the_dynamic_size() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("static", 16 * 1024, 16),
            WorkgroupBuffer::launch_sized("dynamic", 16),
        ],
        &[48 * 1024],
    );
    assert_eq!(layout.total_bytes(), 64 * 1024);
    assert_eq!(layout.opt_in, Some(48 * 1024));
}

#[test]
fn no_opt_in_at_exactly_the_default_limit() {
    let layout = layout(
        &[
            WorkgroupBuffer::fixed("static", 16 * 1024, 16),
            WorkgroupBuffer::launch_sized("dynamic", 16),
        ],
        &[32 * 1024],
    );
    assert_eq!(layout.total_bytes(), 48 * 1024);
    assert_eq!(layout.opt_in, None);
}

#[test]
fn the_opt_in_maximum_itself_fits() {
    let layout = layout(&[WorkgroupBuffer::launch_sized("all", 16)], &[232_448]);
    assert_eq!(layout.opt_in, Some(232_448));
}

#[test]
fn launch_over_the_maximum_names_the_buffers_and_numbers() {
    let plan = WorkgroupPlanner::new(H200)
        .plan(&[
            WorkgroupBuffer::fixed("lut", 1024, 16),
            WorkgroupBuffer::launch_sized("tile_a", 16),
            WorkgroupBuffer::launch_sized("tile_b", 16),
        ])
        .unwrap();
    let result = plan.for_launch(&[200 * 1024, 40 * 1024]);
    let message = result.as_ref().unwrap_err().to_string();
    let (what, required, limit, detail) = limit_error(result);
    assert_eq!(what, "workgroup memory per block");
    assert_eq!((required, limit), (1024 + 240 * 1024, 232_448));
    assert_eq!(detail[0], "`tile_a` (#1) 204800 bytes at offset 1024");
    assert_eq!(detail[1], "`tile_b` (#2) 40960 bytes at offset 205824");
    assert_eq!(detail[2], "`lut` (#0) 1024 bytes at offset 0");
    assert!(detail[3].contains("disjoint live ranges"));
    assert!(message.contains("246784 needed, limit 232448"), "{message}");
    // The failed launch changed nothing.
    assert_eq!(plan.for_launch(&[1024, 1024]).unwrap().dynamic_bytes, 2048);
}

#[test]
fn static_part_over_the_default_limit_must_become_launch_sized() {
    let (what, required, limit, detail) = limit_error(
        WorkgroupPlanner::new(H200).plan(&[WorkgroupBuffer::fixed("big", 64 * 1024, 16)]),
    );
    assert_eq!(what, "statically declared workgroup memory per block");
    assert_eq!((required, limit), (64 * 1024, 48 * 1024));
    assert_eq!(detail[0], "`big` (#0) 65536 bytes at offset 0");
    assert!(detail[1].contains("make the largest static buffers launch-sized"));
}

#[test]
fn static_part_over_the_maximum_is_refused_first() {
    let (what, required, limit, _) = limit_error(
        WorkgroupPlanner::new(H200).plan(&[WorkgroupBuffer::fixed("huge", 300_000, 16)]),
    );
    assert_eq!(
        (what, required, limit),
        ("workgroup memory per block", 300_000, 232_448)
    );
}

#[test]
fn over_limit_error_names_the_eight_largest_buffers() {
    let buffers: Vec<WorkgroupBuffer> = (0..20u32)
        .map(|i| WorkgroupBuffer::fixed(alloc::format!("b{i}"), 4096 + i, 1))
        .collect();
    let (_, required, _, detail) = limit_error(WorkgroupPlanner::new(H200).plan(&buffers));
    assert_eq!(required, 20 * 4096 + (0..20).sum::<usize>());
    assert_eq!(detail.len(), 10);
    assert!(detail[0].starts_with("`b19` (#19) 4115 bytes"));
    assert!(detail[7].starts_with("`b12` (#12)"));
    assert_eq!(detail[8], "and 12 smaller buffer(s)");
}

#[test]
fn private_buffer_is_refused_with_what_to_do() {
    let buffers = [
        WorkgroupBuffer::fixed("tile", 256, 16),
        WorkgroupBuffer {
            space: AddressSpace::Private,
            ..WorkgroupBuffer::fixed("scratch", 64, 4)
        },
    ];
    let error = WorkgroupPlanner::new(H200).plan(&buffers).unwrap_err();
    assert_eq!(
        error,
        Error::PrivateBufferInWorkgroup {
            buffer: "scratch".into(),
            index: 1
        }
    );
    let message = error.to_string();
    assert!(message.contains("`scratch` (#1)"), "{message}");
    assert!(
        message.contains("declare it as a workgroup buffer"),
        "{message}"
    );
    assert!(message.contains("keep it private"), "{message}");
}

#[test]
fn alignment_must_be_a_power_of_two() {
    for align in [0, 3, 24] {
        let error = WorkgroupPlanner::new(H200)
            .plan(&[WorkgroupBuffer::launch_sized("odd", align)])
            .unwrap_err();
        assert_eq!(
            error,
            Error::WorkgroupAlignment {
                buffer: "odd".into(),
                index: 0,
                align
            }
        );
        assert!(error.to_string().contains("power of two"));
    }
}

#[test]
fn live_range_must_not_end_before_it_starts() {
    let error = WorkgroupPlanner::new(H200)
        .plan(&[WorkgroupBuffer::fixed("backwards", 8, 4).live_during(3, 2)])
        .unwrap_err();
    assert_eq!(
        error,
        Error::WorkgroupLiveRange {
            buffer: "backwards".into(),
            index: 0,
            first: 3,
            last: 2
        }
    );
    assert!(error.to_string().contains("from phase 3 to phase 2"));
}

#[test]
fn the_first_offending_buffer_is_named() {
    let error = WorkgroupPlanner::new(H200)
        .plan(&[
            WorkgroupBuffer::fixed("fine", 8, 4),
            WorkgroupBuffer::fixed("backwards", 8, 4).live_during(1, 0),
            WorkgroupBuffer::fixed("odd", 8, 5),
        ])
        .unwrap_err();
    assert!(matches!(error, Error::WorkgroupLiveRange { index: 1, .. }));
}

#[test]
fn launch_gives_one_size_per_launch_sized_buffer() {
    let plan = WorkgroupPlanner::new(H200)
        .plan(&[
            WorkgroupBuffer::launch_sized("rows", 4),
            WorkgroupBuffer::fixed("lut", 64, 4),
            WorkgroupBuffer::launch_sized("cols", 4),
        ])
        .unwrap();
    let error = plan.for_launch(&[16]).unwrap_err();
    assert_eq!(
        error,
        Error::LaunchSizeCount {
            buffers: vec!["rows".into(), "cols".into()],
            given: 1
        }
    );
    assert!(
        error
            .to_string()
            .contains("2 launch-sized buffer(s) (rows, cols)")
    );
    // The larger launch-sized buffer goes first.
    assert_eq!(plan.for_launch(&[16, 32]).unwrap().offsets, vec![96, 0, 64]);
}
