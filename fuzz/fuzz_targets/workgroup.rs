//! Fuzzes the workgroup planner: arbitrary buffers, live ranges, limits, stagger and launch
//! sizes, each answer checked against the reference model (`workgroup::model`).
#![no_main]

use arbitrary::Arbitrary;
use gpu_core::workgroup::model::check_planner;
use gpu_core::workgroup::{AddressSpace, BufferSize, LiveRange, WorkgroupBuffer, WorkgroupLimits};

/// One buffer, with fields shaped so that valid buffers are common but any value can occur.
#[derive(Arbitrary, Debug)]
struct Buffer {
    /// `None`: launch-sized.
    size: Option<u16>,
    /// Shifts the size left by 16 bits, for layouts far over any limit.
    huge: bool,
    /// Below 240: alignment `1 << (align_code % 32)`; otherwise `raw_align`.
    align_code: u8,
    raw_align: u32,
    /// 255: private.
    space_code: u8,
    live: Option<(u8, u8)>,
}

#[derive(Arbitrary, Debug)]
struct Case {
    buffers: Vec<Buffer>,
    launch_sizes: Vec<u16>,
    limits: WorkgroupLimitsInput,
    stagger: u8,
}

#[derive(Arbitrary, Debug)]
struct WorkgroupLimitsInput {
    default_per_block: u32,
    max_per_block_opt_in: u32,
    per_multiprocessor: u32,
    reserved_per_block: u32,
    /// Shifts every limit right by 12 bits, so small layouts meet them.
    small: bool,
}

fn buffer(index: usize, b: &Buffer) -> WorkgroupBuffer {
    WorkgroupBuffer {
        name: format!("b{index}"),
        size: b.size.map_or(BufferSize::AtLaunch, |size| {
            BufferSize::Static(u32::from(size) << if b.huge { 16 } else { 0 })
        }),
        align: if b.align_code < 240 {
            1 << (b.align_code % 32)
        } else {
            b.raw_align
        },
        space: if b.space_code == 255 {
            AddressSpace::Private
        } else {
            AddressSpace::Workgroup
        },
        live: b.live.map(|(first, last)| LiveRange {
            first: u32::from(first),
            last: u32::from(last),
        }),
    }
}

libfuzzer_sys::fuzz_target!(|case: Case| {
    let buffers: Vec<WorkgroupBuffer> = case
        .buffers
        .iter()
        .take(64)
        .enumerate()
        .map(|(index, b)| buffer(index, b))
        .collect();
    let shift = if case.limits.small { 12 } else { 0 };
    let limits = WorkgroupLimits {
        default_per_block: case.limits.default_per_block >> shift,
        max_per_block_opt_in: case.limits.max_per_block_opt_in >> shift,
        per_multiprocessor: case.limits.per_multiprocessor >> shift,
        reserved_per_block: case.limits.reserved_per_block >> shift,
    };
    let launch_sizes: Vec<u32> = case
        .launch_sizes
        .iter()
        .take(64)
        .map(|&s| u32::from(s))
        .collect();
    if let Err(broken) = check_planner(&buffers, limits, u32::from(case.stagger), &launch_sizes) {
        panic!("{broken}\n{case:?}");
    }
});
