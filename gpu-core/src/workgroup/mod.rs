//! The workgroup (shared) memory planner: lays out a kernel's workgroup buffers and says how
//! many bytes a launch needs and whether the kernel must opt in above the default limit.
//!
//! Workgroup memory (CUDA "shared memory", address space 3) is allocated once per workgroup
//! for the whole kernel and shared by its threads (docs/workgroup.md). The planner works in
//! two steps: [`WorkgroupPlanner::plan`] places the buffers whose size is known up front (the
//! static part, declared by the kernel itself), then [`StaticPlan::for_launch`] places the
//! launch-sized buffers after them (the dynamic part, given to the launch). A kernel that takes
//! all its workgroup memory from the launch declares every buffer launch-sized. Rules:
//! - buffers live at the same time never share a byte; buffers whose live ranges are disjoint
//!   may (the kernel needs a barrier between them); a buffer without a live range is live
//!   throughout;
//! - every offset is a multiple of its buffer's alignment (a power of two);
//! - with every buffer live at once and no stagger, the total is at most the sum of the sizes
//!   each rounded up to its alignment: no waste beyond alignment;
//! - an optional bank stagger keeps that many bytes free after every buffer, up to the next
//!   buffer of its part, so the starts of buffers live together fall on different banks;
//! - the static part fits the default per-block limit (ptxas refuses more: "uses too much
//!   shared data (0xc010 bytes, 0xc000 max)"; the driver's PTX JIT accepts more, but
//!   launch-sized buffers work on both paths), and the whole layout fits
//!   [`WorkgroupLimits::max_per_block`]; above the default, the layout names the opt-in value
//!   to set before launch (on an H100 with driver 580: a dynamic part above
//!   `default - static` fails to launch without it, and `static + value` may not pass the
//!   opt-in maximum);
//! - private (per-thread) buffers, bad alignments and reversed live ranges are typed errors
//!   naming the buffer; over-limit errors name the largest buffers and the numbers.
//!
//! Placement is a greedy first fit, like the arena planners of TFLite and IREE: buffers go in
//! order of alignment, then size (both descending), each at the lowest aligned offset free of
//! the already placed buffers it is live with. That order is what bounds the total by the sum
//! of aligned sizes.

#[cfg(feature = "model")]
pub mod model;

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::error::{Error, Result};

/// The device's workgroup-memory limits in bytes, queried from the driver (never hard-coded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkgroupLimits {
    /// Most bytes a block may use without opting in (CUDA:
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK`); also the most a kernel may declare
    /// statically.
    pub default_per_block: u32,
    /// Most bytes a block may use after opting in (CUDA:
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`).
    pub max_per_block_opt_in: u32,
    /// Bytes per multiprocessor, shared by its resident blocks (CUDA:
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR`).
    pub per_multiprocessor: u32,
    /// Bytes the system keeps for each resident block on top of its own (CUDA:
    /// `CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK`).
    pub reserved_per_block: u32,
}

impl WorkgroupLimits {
    /// The most bytes one block can use: the opt-in maximum, and no more than a multiprocessor
    /// holds next to the block's reserved bytes.
    pub fn max_per_block(&self) -> u32 {
        self.max_per_block_opt_in.min(
            self.per_multiprocessor
                .saturating_sub(self.reserved_per_block),
        )
    }
}

/// The address space a buffer was declared in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressSpace {
    /// Workgroup (shared) memory: one copy per workgroup, shared by its threads.
    Workgroup,
    /// Private memory: one copy per thread (an alloca); never placed by this planner.
    Private,
}

/// The kernel phases during which a buffer holds data, `first` to `last` inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveRange {
    /// First phase the buffer is live in.
    pub first: u32,
    /// Last phase the buffer is live in (inclusive).
    pub last: u32,
}

/// How a buffer's size becomes known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferSize {
    /// Known when planning, in bytes; part of the static layout.
    Static(u32),
    /// Given by each launch to [`StaticPlan::for_launch`]; placed after the static part.
    AtLaunch,
}

/// One buffer a kernel asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkgroupBuffer {
    /// Name used in errors.
    pub name: String,
    /// Size, or that the launch gives it.
    pub size: BufferSize,
    /// Alignment in bytes; a power of two.
    pub align: u32,
    /// Address space the buffer was declared in; only [`AddressSpace::Workgroup`] is planned.
    pub space: AddressSpace,
    /// Phases the buffer is live in; `None` means the whole kernel.
    pub live: Option<LiveRange>,
}

impl WorkgroupBuffer {
    /// A workgroup buffer of `size` bytes known now, live for the whole kernel.
    pub fn fixed(name: impl Into<String>, size: u32, align: u32) -> Self {
        Self {
            name: name.into(),
            size: BufferSize::Static(size),
            align,
            space: AddressSpace::Workgroup,
            live: None,
        }
    }

    /// A workgroup buffer whose size each launch gives, live for the whole kernel.
    pub fn launch_sized(name: impl Into<String>, align: u32) -> Self {
        Self {
            size: BufferSize::AtLaunch,
            ..Self::fixed(name, 0, align)
        }
    }

    /// The same buffer, live only from phase `first` to phase `last` inclusive.
    pub fn live_during(self, first: u32, last: u32) -> Self {
        Self {
            live: Some(LiveRange { first, last }),
            ..self
        }
    }
}

/// Whether two buffers hold data in a common phase (`None` is live throughout).
pub(crate) fn live_together(a: Option<LiveRange>, b: Option<LiveRange>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.first <= b.last && b.first <= a.last,
        _ => true,
    }
}

/// `value` rounded up to a multiple of `align` (a power of two), saturating at the top.
pub(crate) fn align_up(value: u64, align: u64) -> u64 {
    value.saturating_add(align - 1) & !(align - 1)
}

/// The largest alignment among the launch-sized buffers (1 if none): where the static part
/// ends, so the dynamic part starts aligned.
pub(crate) fn launch_align(buffers: &[WorkgroupBuffer]) -> u64 {
    buffers
        .iter()
        .filter(|buffer| buffer.size == BufferSize::AtLaunch)
        .map(|buffer| u64::from(buffer.align))
        .max()
        .unwrap_or(1)
}

/// Plans workgroup memory for one device: its limits and the bank stagger to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkgroupPlanner {
    limits: WorkgroupLimits,
    bank_stagger: u32,
}

impl WorkgroupPlanner {
    /// A planner for a device with these limits, without bank stagger.
    pub fn new(limits: WorkgroupLimits) -> Self {
        Self {
            limits,
            bank_stagger: 0,
        }
    }

    /// The same planner, keeping `bytes` free after every buffer so that buffers live together
    /// start on different banks (32 banks of 4 bytes on NVIDIA GPUs; IREE pads 16 bytes). The
    /// stagger only shows where it is not a multiple of the next buffer's alignment.
    pub fn with_bank_stagger(self, bytes: u32) -> Self {
        Self {
            bank_stagger: bytes,
            ..self
        }
    }

    /// Checks every buffer and places the static ones from offset 0.
    ///
    /// Fails, naming the first offending buffer in the order given, on a private buffer, an
    /// alignment that is not a power of two or a live range that ends before it starts; then
    /// if the static part is over [`WorkgroupLimits::max_per_block`] or over the default
    /// per-block limit (ptxas refuses more statically declared memory; the opt-in raises only
    /// the dynamic part).
    pub fn plan(&self, buffers: &[WorkgroupBuffer]) -> Result<StaticPlan> {
        for (index, buffer) in buffers.iter().enumerate() {
            check_buffer(index, buffer)?;
        }
        let mut offsets = vec![0; buffers.len()];
        let mut requests = static_requests(buffers);
        let static_end = place(&mut requests, 0, self.bank_stagger, &mut offsets);
        let static_bytes = align_up(static_end, launch_align(buffers));
        let over = |what, limit, hint| {
            over_limit(
                what,
                static_bytes,
                limit,
                buffers,
                &requests,
                &offsets,
                hint,
            )
        };
        if static_bytes > u64::from(self.limits.max_per_block()) {
            return Err(over(
                "workgroup memory per block",
                self.limits.max_per_block(),
                SHARE_OR_SHRINK,
            ));
        }
        if static_bytes > u64::from(self.limits.default_per_block) {
            return Err(over(
                "statically declared workgroup memory per block",
                self.limits.default_per_block,
                "the opt-in raises only the launch-sized (dynamic) part: make the largest \
                 static buffers launch-sized",
            ));
        }
        Ok(StaticPlan {
            buffers: buffers.to_vec(),
            planner: *self,
            offsets,
            static_bytes,
        })
    }
}

const SHARE_OR_SHRINK: &str = "give buffers that are not used at the same time disjoint live \
                               ranges so they share bytes, or shrink the largest";

/// Fails if `buffer` cannot go into workgroup memory as described.
fn check_buffer(index: usize, buffer: &WorkgroupBuffer) -> Result<()> {
    let buffer_name = || buffer.name.clone();
    if buffer.space == AddressSpace::Private {
        return Err(Error::PrivateBufferInWorkgroup {
            buffer: buffer_name(),
            index,
        });
    }
    if !buffer.align.is_power_of_two() {
        return Err(Error::WorkgroupAlignment {
            buffer: buffer_name(),
            index,
            align: buffer.align,
        });
    }
    if let Some(LiveRange { first, last }) = buffer.live
        && first > last
    {
        return Err(Error::WorkgroupLiveRange {
            buffer: buffer_name(),
            index,
            first,
            last,
        });
    }
    Ok(())
}

/// The static part of a plan: every buffer checked, the static ones placed. Keep it per
/// kernel and call [`StaticPlan::for_launch`] for each launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticPlan {
    buffers: Vec<WorkgroupBuffer>,
    planner: WorkgroupPlanner,
    /// Offset of each buffer; those of launch-sized buffers are filled per launch.
    offsets: Vec<u64>,
    static_bytes: u64,
}

impl StaticPlan {
    /// Bytes of the static part: the static buffers, rounded up to the largest alignment of a
    /// launch-sized buffer so the dynamic part starts aligned. Launch-sized buffers start here.
    pub fn static_bytes(&self) -> u32 {
        to_u32(self.static_bytes)
    }

    /// The final layout for a launch giving `sizes` to the launch-sized buffers, in the order
    /// they were given to [`WorkgroupPlanner::plan`].
    ///
    /// Fails if the number of sizes differs from the number of launch-sized buffers, or if
    /// the layout is over [`WorkgroupLimits::max_per_block`]. The plan itself never changes.
    pub fn for_launch(&self, sizes: &[u32]) -> Result<WorkgroupLayout> {
        let launch_sized: Vec<usize> = (0..self.buffers.len())
            .filter(|&index| self.buffers[index].size == BufferSize::AtLaunch)
            .collect();
        if sizes.len() != launch_sized.len() {
            return Err(Error::LaunchSizeCount {
                buffers: launch_sized
                    .iter()
                    .map(|&index| self.buffers[index].name.clone())
                    .collect(),
                given: sizes.len(),
            });
        }
        let mut offsets = self.offsets.clone();
        let mut requests: Vec<Request> = launch_sized
            .iter()
            .zip(sizes)
            .map(|(&index, &size)| Request::new(index, &self.buffers[index], size))
            .collect();
        let end = place(
            &mut requests,
            self.static_bytes,
            self.planner.bank_stagger,
            &mut offsets,
        );
        let limits = self.planner.limits;
        if end > u64::from(limits.max_per_block()) {
            requests.extend(static_requests(&self.buffers));
            return Err(over_limit(
                "workgroup memory per block",
                end,
                limits.max_per_block(),
                &self.buffers,
                &requests,
                &offsets,
                SHARE_OR_SHRINK,
            ));
        }
        let total = to_u32(end);
        let dynamic_bytes = total - to_u32(self.static_bytes);
        Ok(WorkgroupLayout {
            offsets: offsets.into_iter().map(to_u32).collect(),
            static_bytes: to_u32(self.static_bytes),
            dynamic_bytes,
            opt_in: (total > limits.default_per_block).then_some(dynamic_bytes),
        })
    }
}

/// A launch-ready layout. Offsets count from the start of the kernel's static workgroup array
/// (on NVIDIA GPUs the reserved bytes of the block come before it): the static part is
/// `[0, static_bytes)` and the dynamic part, which the launch provides (CUDA's
/// `extern __shared__` array), follows it directly when both arrays are aligned to their
/// largest buffer alignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkgroupLayout {
    /// Offset of each buffer, in the order given to the planner. A launch-sized buffer sits
    /// `offset - static_bytes` bytes into the dynamic part.
    pub offsets: Vec<u32>,
    /// Bytes the kernel declares statically.
    pub static_bytes: u32,
    /// Bytes to pass as the launch's dynamic workgroup-memory size.
    pub dynamic_bytes: u32,
    /// `Some(value)` when the block uses more than the device's default per-block limit: before
    /// launch, raise the kernel's maximum dynamic workgroup memory to `value` (CUDA:
    /// `cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value)`; HIP:
    /// `hipFuncSetAttribute(f, hipFuncAttributeMaxDynamicSharedMemorySize, value)`).
    pub opt_in: Option<u32>,
}

impl WorkgroupLayout {
    /// Bytes the block uses: static plus dynamic.
    pub fn total_bytes(&self) -> u32 {
        self.static_bytes + self.dynamic_bytes
    }
}

/// A value already checked against a `u32` limit.
fn to_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// One buffer to place.
struct Request {
    index: usize,
    size: u64,
    align: u64,
    live: Option<LiveRange>,
}

impl Request {
    fn new(index: usize, buffer: &WorkgroupBuffer, size: u32) -> Self {
        Self {
            index,
            size: u64::from(size),
            align: u64::from(buffer.align),
            live: buffer.live,
        }
    }
}

/// The buffers whose size is known when planning.
fn static_requests(buffers: &[WorkgroupBuffer]) -> Vec<Request> {
    buffers
        .iter()
        .enumerate()
        .filter_map(|(index, buffer)| match buffer.size {
            BufferSize::Static(size) => Some(Request::new(index, buffer, size)),
            BufferSize::AtLaunch => None,
        })
        .collect()
}

/// A placed buffer as later placements see it: its bytes plus the stagger after them.
struct Placed {
    start: u64,
    padded_end: u64,
    live: Option<LiveRange>,
}

/// Places `requests` first fit from `base`, writes each offset into `offsets[index]`, and
/// returns the region's end: the last byte used plus one, and at least `base`. Sorts
/// `requests` into placement order.
fn place(requests: &mut [Request], base: u64, stagger: u32, offsets: &mut [u64]) -> u64 {
    requests.sort_unstable_by(|a, b| {
        b.align
            .cmp(&a.align)
            .then(b.size.cmp(&a.size))
            .then(a.index.cmp(&b.index))
    });
    // Sorted by start, so a scan can stop at the first gap that fits.
    let mut placed: Vec<Placed> = Vec::with_capacity(requests.len());
    let mut end = base;
    for request in requests.iter() {
        let padded_len = request.size.saturating_add(u64::from(stagger));
        let mut start = align_up(base, request.align);
        for other in placed.iter().filter(|other| {
            other.padded_end > other.start && live_together(other.live, request.live)
        }) {
            if start.saturating_add(padded_len) <= other.start {
                break;
            }
            start = start.max(align_up(other.padded_end, request.align));
        }
        let at = placed.partition_point(|other| other.start <= start);
        placed.insert(
            at,
            Placed {
                start,
                padded_end: start.saturating_add(padded_len),
                live: request.live,
            },
        );
        offsets[request.index] = start;
        end = end.max(start.saturating_add(request.size));
    }
    end
}

/// At most this many buffers are named in an over-limit error, largest first.
const NAMED_IN_ERROR: usize = 8;

/// The over-limit error for `required` bytes, naming the largest of the placed `requests`.
fn over_limit(
    what: &'static str,
    required: u64,
    limit: u32,
    buffers: &[WorkgroupBuffer],
    requests: &[Request],
    offsets: &[u64],
    hint: &str,
) -> Error {
    let mut largest: Vec<&Request> = requests.iter().filter(|r| r.size > 0).collect();
    largest.sort_unstable_by(|a, b| b.size.cmp(&a.size).then(a.index.cmp(&b.index)));
    let mut detail: Vec<String> = largest
        .iter()
        .take(NAMED_IN_ERROR)
        .map(|r| {
            format!(
                "`{}` (#{}) {} bytes at offset {}",
                buffers[r.index].name, r.index, r.size, offsets[r.index]
            )
        })
        .collect();
    if largest.len() > NAMED_IN_ERROR {
        detail.push(format!(
            "and {} smaller buffer(s)",
            largest.len() - NAMED_IN_ERROR
        ));
    }
    detail.push(String::from(hint));
    Error::LimitExceeded {
        what,
        required: usize::try_from(required).unwrap_or(usize::MAX),
        limit: usize::try_from(limit).unwrap_or(usize::MAX),
        detail,
    }
}

#[cfg(test)]
mod tests;
