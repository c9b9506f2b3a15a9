//! Reference model of the workgroup planner, shared by the property tests and the fuzz target:
//! a plain sequential planner (no sharing, no gap filling) and a brute-force layout checker.
//!
//! [`check_planner`] runs the real planner and holds its answer against the model: a layout
//! must pass every rule, checked pair by pair, and be no larger than the sequential one (the
//! planner places in the same order and only ever finds lower offsets); a refusal must be the
//! right error, and an over-limit refusal is allowed only where the sequential layout is over
//! the limit too.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{
    AddressSpace, BufferSize, LiveRange, WorkgroupBuffer, WorkgroupLayout, WorkgroupLimits,
    WorkgroupPlanner, align_up, launch_align, live_together,
};
use crate::error::Error;

/// Runs the planner (bank stagger `bank_stagger`, then one launch with `launch_sizes`) and
/// checks its answer against the model. Returns the layout when the planner gave one, or what
/// was wrong.
pub fn check_planner(
    buffers: &[WorkgroupBuffer],
    limits: WorkgroupLimits,
    bank_stagger: u32,
    launch_sizes: &[u32],
) -> Result<Option<WorkgroupLayout>, String> {
    let planner = WorkgroupPlanner::new(limits).with_bank_stagger(bank_stagger);
    let planned = planner.plan(buffers);
    if let Some(expected) = expected_buffer_error(buffers) {
        return match planned {
            Err(error) if error == expected => Ok(None),
            other => Err(format!("expected {expected:?}, planner gave {other:?}")),
        };
    }
    let launch_sized: Vec<&WorkgroupBuffer> = buffers
        .iter()
        .filter(|buffer| buffer.size == BufferSize::AtLaunch)
        .collect();
    let static_limit = limits.default_per_block.min(limits.max_per_block());
    let sizes = resolved_sizes(buffers, launch_sizes);
    let sequential = sequential_layout(buffers, &sizes, bank_stagger);
    let plan = match planned {
        Ok(plan) => plan,
        Err(Error::LimitExceeded { .. }) if sequential.static_bytes > u64::from(static_limit) => {
            return Ok(None);
        }
        Err(error) => {
            return Err(format!(
                "planner refused with {error:?}, but the sequential static part of {} bytes \
                 fits {static_limit}",
                sequential.static_bytes
            ));
        }
    };
    let launched = plan.for_launch(launch_sizes);
    if launch_sizes.len() != launch_sized.len() {
        let expected = Error::LaunchSizeCount {
            buffers: launch_sized.iter().map(|b| b.name.clone()).collect(),
            given: launch_sizes.len(),
        };
        return match launched {
            Err(error) if error == expected => Ok(None),
            other => Err(format!("expected {expected:?}, for_launch gave {other:?}")),
        };
    }
    let layout = match launched {
        Ok(layout) => layout,
        Err(Error::LimitExceeded { .. })
            if sequential.total > u64::from(limits.max_per_block()) =>
        {
            return Ok(None);
        }
        Err(error) => {
            return Err(format!(
                "for_launch refused with {error:?}, but the sequential layout of {} bytes fits {}",
                sequential.total,
                limits.max_per_block()
            ));
        }
    };
    check_layout(buffers, &sizes, limits, bank_stagger, &layout)?;
    let total = u64::from(layout.static_bytes) + u64::from(layout.dynamic_bytes);
    if total > sequential.total {
        return Err(format!(
            "layout of {total} bytes is larger than the sequential one of {}",
            sequential.total
        ));
    }
    Ok(Some(layout))
}

/// The error for the first buffer that cannot go into workgroup memory, if any.
pub fn expected_buffer_error(buffers: &[WorkgroupBuffer]) -> Option<Error> {
    buffers.iter().enumerate().find_map(|(index, buffer)| {
        let name = buffer.name.clone();
        if buffer.space == AddressSpace::Private {
            Some(Error::PrivateBufferInWorkgroup {
                buffer: name,
                index,
            })
        } else if buffer.align == 0 || buffer.align & (buffer.align - 1) != 0 {
            Some(Error::WorkgroupAlignment {
                buffer: name,
                index,
                align: buffer.align,
            })
        } else {
            match buffer.live {
                Some(LiveRange { first, last }) if first > last => {
                    Some(Error::WorkgroupLiveRange {
                        buffer: name,
                        index,
                        first,
                        last,
                    })
                }
                _ => None,
            }
        }
    })
}

/// Each buffer's size in bytes: its static size, or the launch's size for it in order (0 when
/// the launch gave too few).
pub fn resolved_sizes(buffers: &[WorkgroupBuffer], launch_sizes: &[u32]) -> Vec<u64> {
    let mut given = launch_sizes.iter();
    buffers
        .iter()
        .map(|buffer| match buffer.size {
            BufferSize::Static(size) => u64::from(size),
            BufferSize::AtLaunch => given.next().copied().map_or(0, u64::from),
        })
        .collect()
}

/// Sizes of the two parts of a layout, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartSizes {
    /// End of the static part (where launch-sized buffers start).
    pub static_bytes: u64,
    /// End of the whole layout.
    pub total: u64,
}

/// The plain planner: each part's buffers one after another (in the real planner's order:
/// alignment, then size, descending), each `bank_stagger` bytes after the previous one,
/// nothing shared.
pub fn sequential_layout(
    buffers: &[WorkgroupBuffer],
    sizes: &[u64],
    bank_stagger: u32,
) -> PartSizes {
    let part_end = |launch_sized: bool, base: u64| {
        let mut part: Vec<usize> = (0..buffers.len())
            .filter(|&i| (buffers[i].size == BufferSize::AtLaunch) == launch_sized)
            .collect();
        part.sort_by_key(|&i| {
            (
                core::cmp::Reverse(buffers[i].align),
                core::cmp::Reverse(sizes[i]),
                i,
            )
        });
        let (mut next, mut end) = (base, base);
        for i in part {
            let start = align_up(next, u64::from(buffers[i].align));
            end = end.max(start.saturating_add(sizes[i]));
            next = start
                .saturating_add(sizes[i])
                .saturating_add(u64::from(bank_stagger));
        }
        end
    };
    let static_bytes = align_up(part_end(false, 0), launch_align(buffers));
    PartSizes {
        static_bytes,
        total: part_end(true, static_bytes),
    }
}

/// Checks `layout` for buffers of `sizes` against every rule, comparing buffers pair by pair.
/// Returns the first broken rule.
pub fn check_layout(
    buffers: &[WorkgroupBuffer],
    sizes: &[u64],
    limits: WorkgroupLimits,
    bank_stagger: u32,
    layout: &WorkgroupLayout,
) -> Result<(), String> {
    if layout.offsets.len() != buffers.len() {
        return Err(format!(
            "{} offsets for {} buffers",
            layout.offsets.len(),
            buffers.len()
        ));
    }
    let static_bytes = u64::from(layout.static_bytes);
    let total = static_bytes + u64::from(layout.dynamic_bytes);
    if layout.static_bytes > limits.default_per_block {
        return Err(format!(
            "static part of {static_bytes} bytes is over the default limit {}",
            limits.default_per_block
        ));
    }
    if total > u64::from(limits.max_per_block()) {
        return Err(format!(
            "{total} bytes are over the per-block maximum {}",
            limits.max_per_block()
        ));
    }
    let opt_in = (total > u64::from(limits.default_per_block)).then_some(layout.dynamic_bytes);
    if layout.opt_in != opt_in {
        return Err(format!("opt-in {:?}, expected {opt_in:?}", layout.opt_in));
    }
    let is_launch_sized = |i: usize| buffers[i].size == BufferSize::AtLaunch;
    let (mut static_end, mut launch_end) = (0, static_bytes);
    for (i, buffer) in buffers.iter().enumerate() {
        let (offset, end) = (u64::from(layout.offsets[i]), extent(layout, sizes, i).1);
        if offset % u64::from(buffer.align) != 0 {
            return Err(format!(
                "`{}` at {offset} is not aligned to {}",
                buffer.name, buffer.align
            ));
        }
        let (part_start, part_end) = if is_launch_sized(i) {
            launch_end = launch_end.max(end);
            (static_bytes, total)
        } else {
            static_end = static_end.max(end);
            (0, static_bytes)
        };
        if offset < part_start || end > part_end {
            return Err(format!(
                "`{}` at [{offset}, {end}) lies outside its part [{part_start}, {part_end})",
                buffer.name
            ));
        }
    }
    if static_bytes != align_up(static_end, launch_align(buffers)) || total != launch_end {
        return Err(format!(
            "parts of {static_bytes} and {total} bytes, but the buffers end at {static_end} \
             and {launch_end}"
        ));
    }
    for i in 0..buffers.len() {
        for j in i + 1..buffers.len() {
            if sizes[i] == 0
                || sizes[j] == 0
                || is_launch_sized(i) != is_launch_sized(j)
                || !live_together(buffers[i].live, buffers[j].live)
            {
                continue;
            }
            let (start_i, end_i) = extent(layout, sizes, i);
            let (start_j, end_j) = extent(layout, sizes, j);
            let stagger = u64::from(bank_stagger);
            if start_i < end_j + stagger && start_j < end_i + stagger {
                return Err(format!(
                    "`{}` [{start_i}, {end_i}) and `{}` [{start_j}, {end_j}) are live together \
                     but overlap once each keeps {stagger} bytes of stagger after it",
                    buffers[i].name, buffers[j].name
                ));
            }
        }
    }
    Ok(())
}

/// Where buffer `i` lies in `layout`: `[start, end)`.
fn extent(layout: &WorkgroupLayout, sizes: &[u64], i: usize) -> (u64, u64) {
    let start = u64::from(layout.offsets[i]);
    (start, start + sizes[i])
}
