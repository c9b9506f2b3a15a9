//! The heap each pure part needs per item (lock-table entry, live token, cached block, planned
//! workgroup buffer), counted by a global allocator that tracks live and peak bytes, so an
//! embedded user can budget; CI runs it on i686, where pointers are 32 bits as on bare metal.
//!
//! Prints the figures the README quotes (`cargo test -p gpu-core --test heap_per_item
//! --target i686-unknown-linux-gnu -- --nocapture`) and fails when an item costs more than
//! its budget for the pointer width, or when the cost per item is not flat in the item count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use gpu_core::allocator::replay::ReplayDriver;
use gpu_core::allocator::{
    AllocRequest, AllocatorCapabilities, AllocatorConfig, DeviceAllocator, KindSupport, MemoryKind,
    Release,
};
use gpu_core::lock_table::{LockTable, PinDriver};
use gpu_core::token::{OpId, Planner, Token};
use gpu_core::workgroup::{WorkgroupBuffer, WorkgroupLimits, WorkgroupPlanner};
use gpu_core::{ByteRange, DeviceId, Error, Result, StreamId};

/// The system allocator, counting the bytes live and the most live since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's promise for `layout`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with `layout`, that is from the system
        // allocator: the caller's promise, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Heap bytes that `work` leaves live and the most it had live at once, above what was live
/// before it.
fn heap_of<T>(work: impl FnOnce() -> T) -> (T, usize, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let value = work();
    let after = LIVE.load(Ordering::Relaxed);
    (
        value,
        after.saturating_sub(before),
        PEAK.load(Ordering::Relaxed) - before,
    )
}

/// A pin driver that allocates nothing on the heap: device addresses equal host ones. (The
/// allocator's segments come from the replay's driver, which allocates nothing on the heap
/// until a segment is returned.)
struct NullDriver;

impl PinDriver for NullDriver {
    fn pin(&mut self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        device_ptrs.fill(range.start);
        Ok(())
    }

    fn unpin(&mut self, _start: usize) -> Result<()> {
        Ok(())
    }

    fn pinned_extent(&mut self, _: usize, _: &mut [usize]) -> Result<Option<ByteRange>> {
        Ok(None)
    }
}

/// Heap a table of `devices` devices holds for `entries` disjoint locked ranges, per entry.
fn lock_table_entry(devices: usize, entries: usize) -> usize {
    let mut driver = NullDriver;
    let mut table = LockTable::new(devices).unwrap();
    let ((), held, _) = heap_of(|| {
        for i in 0..entries {
            table
                .lock(&mut driver, 0x1000_0000 + i * 8192, 4096)
                .unwrap();
        }
    });
    held / entries
}

/// Heap a planner holds for `count` live fork branches of one token, per branch (the caller's
/// list of branch tokens reserved beforehand, so not counted).
fn token_branch(count: usize) -> usize {
    let mut planner = Planner::new(1);
    let token = planner.run(OpId(0), DeviceId(0), &mut Vec::new()).unwrap();
    let mut branches: Vec<Token> = Vec::with_capacity(count);
    let ((), held, _) = heap_of(|| planner.fork(token, count, &mut branches).unwrap());
    held / count
}

/// Heap a planner holds for `count` independent operations left unwaited (each a live token
/// holding a stream of its own), in all.
fn token_operations(count: usize) -> usize {
    let mut planner = Planner::new(1);
    let mut tokens: Vec<Token> = Vec::with_capacity(count);
    let ((), held, _) = heap_of(|| {
        for op in 0..count {
            let token = planner.run(OpId(op as u32), DeviceId(0), &mut Vec::new());
            tokens.push(token.unwrap());
        }
        planner.drain_steps().for_each(drop);
    });
    held
}

fn device_only() -> AllocatorCapabilities {
    let support = KindSupport {
        available: true,
        stream_ordered: true,
        max_size: usize::MAX,
    };
    AllocatorCapabilities {
        device: support,
        managed: KindSupport::NONE,
        host_pinned: KindSupport::NONE,
        host_register: false,
    }
}

/// Heap an allocator holds for `count` live 4 KiB blocks carved from its segments, per block.
fn allocator_block(count: usize) -> usize {
    let mut driver = ReplayDriver::new(usize::MAX);
    let mut allocator =
        DeviceAllocator::new(DeviceId(0), device_only(), AllocatorConfig::default());
    // The first request creates the lane's bins; count only what the blocks add.
    let first = allocator
        .allocate(&mut driver, &AllocRequest::new(MemoryKind::Device, 4096))
        .unwrap();
    let request = AllocRequest::new(MemoryKind::Device, 4096);
    let (blocks, held, _) = heap_of(|| {
        (0..count)
            .map(|_| allocator.allocate(&mut driver, &request).unwrap().handle)
            .collect::<Vec<_>>()
    });
    let handles = blocks.capacity() * size_of_val(&blocks[0]);
    for handle in blocks.into_iter().chain([first.handle]) {
        allocator.free(&mut driver, handle, Release::Idle).unwrap();
    }
    (held - handles) / count
}

/// Heap an allocator holds before any request, and once one request has created the bins of
/// one stream's free lists.
fn allocator_fixed() -> (usize, usize) {
    let mut driver = ReplayDriver::new(usize::MAX);
    let (mut allocator, empty, _) =
        heap_of(|| DeviceAllocator::new(DeviceId(0), device_only(), AllocatorConfig::default()));
    let request = AllocRequest::new(MemoryKind::Device, 4096).on_stream(StreamId(0), &[]);
    let (_, lane, _) = heap_of(|| allocator.allocate(&mut driver, &request).unwrap());
    (empty, lane)
}

/// Heap a plan of `count` workgroup buffers holds, per buffer, and the most planning it had
/// live at once, per buffer (the buffers' names, 11 bytes each, are copied into the plan).
fn workgroup_buffer(count: usize) -> (usize, usize) {
    let limits = WorkgroupLimits {
        default_per_block: u32::MAX,
        max_per_block_opt_in: u32::MAX,
        per_multiprocessor: u32::MAX,
        reserved_per_block: 0,
    };
    let buffers: Vec<WorkgroupBuffer> = (0..count as u32)
        .map(|i| WorkgroupBuffer::fixed(format!("buffer_{i:04}"), 64, 16).live_during(i, i + 1))
        .collect();
    let planner = WorkgroupPlanner::new(limits);
    let (plan, held, peak) = heap_of(|| planner.plan(&buffers).unwrap());
    assert_eq!(
        plan.static_bytes(),
        128,
        "two buffers live at a time, 64 bytes each"
    );
    (held / count, peak / count)
}

/// Budgets for this pointer width, in bytes: the figures the README quotes, with a fifth of
/// room.
struct Budget {
    lock_entry: usize,
    lock_entry_per_device: usize,
    token_branch: usize,
    stream: usize,
    stream_per_stream: usize,
    cached_block: usize,
    allocator_empty: usize,
    allocator_lane: usize,
    workgroup_buffer: usize,
}

const BUDGET_32: Budget = Budget {
    lock_entry: 52,
    lock_entry_per_device: 6,
    token_branch: 52,
    stream: 200,
    stream_per_stream: 4,
    cached_block: 124,
    allocator_empty: 50_000,
    allocator_lane: 18_000,
    workgroup_buffer: 72,
};
const BUDGET_64: Budget = Budget {
    lock_entry: 98,
    lock_entry_per_device: 10,
    token_branch: 58,
    stream: 236,
    stream_per_stream: 4,
    cached_block: 154,
    allocator_empty: 50_000,
    allocator_lane: 18_000,
    workgroup_buffer: 90,
};

/// Runs `measure` at `n` and `2 n` items and checks the cost per item is the same within a
/// quarter (amortised growth of the containers), so the figure does not depend on the count.
fn flat(what: &str, measure: impl Fn(usize) -> usize, n: usize) -> usize {
    let (small, large) = (measure(n), measure(2 * n));
    assert!(
        small * 4 <= large * 5 && large * 4 <= small * 5,
        "{what}: {small} B per item at {n}, {large} B at {}",
        2 * n
    );
    small.max(large)
}

/// Fits the heap of `count` streams, `fixed * count + pair * count^2`, from `n` and `2 n`
/// streams, and checks the fit predicts `4 n` within a tenth: each stream's vector clock has an
/// entry for every stream made before it, so the heap grows with the square of the streams.
fn quadratic(what: &str, total: impl Fn(usize) -> usize, n: usize) -> (usize, usize) {
    let (one, two) = (
        total(n) as f64 / n as f64,
        total(2 * n) as f64 / (2 * n) as f64,
    );
    let pair = (two - one) / n as f64;
    let fixed = one - pair * n as f64;
    let predicted = 4.0 * n as f64 * (fixed + pair * 4.0 * n as f64);
    let four = total(4 * n) as f64;
    assert!(
        (four - predicted).abs() <= four / 10.0,
        "{what}: {four} B at {} streams, the fit {fixed:.0} + {pair:.2} x streams predicts {predicted:.0}",
        4 * n
    );
    (fixed.round() as usize, pair.round() as usize)
}

#[test]
fn heap_per_item_stays_within_the_budget_of_this_pointer_width() {
    let budget = if usize::BITS == 32 {
        BUDGET_32
    } else {
        BUDGET_64
    };
    let entry = flat("lock entry", |n| lock_table_entry(1, n), 4096);
    let entry_4 = flat("lock entry, 4 devices", |n| lock_table_entry(4, n), 4096);
    let per_device = (entry_4 - entry) / 3;
    let branch = flat("fork branch", token_branch, 4096);
    let (stream, stream_per_stream) = quadratic("streams", token_operations, 128);
    let block = flat("cached block", allocator_block, 4096);
    let (allocator_empty, lane) = allocator_fixed();
    let (buffer, buffer_peak) = workgroup_buffer(256);
    println!("heap per item, {}-bit pointers (bytes):", usize::BITS);
    println!("  lock table entry, one device: {entry}; each further device: {per_device}");
    println!("  live token (fork branch): {branch}");
    println!(
        "  stream in use (an unwaited operation on its own): {stream} + {stream_per_stream} x streams in use"
    );
    println!(
        "  cached 4 KiB block: {block}; allocator: {allocator_empty} empty, +{lane} for a stream's free lists"
    );
    println!("  planned workgroup buffer: {buffer} kept, {buffer_peak} at the peak of planning");
    println!(
        "  sizes: Error {}, Result<Token> {}, Token {}",
        size_of::<Error>(),
        size_of::<Result<Token>>(),
        size_of::<Token>()
    );
    for (what, measured, limit) in [
        ("lock table entry", entry, budget.lock_entry),
        (
            "lock table entry per device",
            per_device,
            budget.lock_entry_per_device,
        ),
        ("fork branch", branch, budget.token_branch),
        ("stream in use", stream, budget.stream),
        (
            "stream in use, per stream",
            stream_per_stream,
            budget.stream_per_stream,
        ),
        ("cached block", block, budget.cached_block),
        ("empty allocator", allocator_empty, budget.allocator_empty),
        ("a stream's free lists", lane, budget.allocator_lane),
        ("workgroup buffer", buffer, budget.workgroup_buffer),
    ] {
        assert!(
            measured <= limit,
            "{what}: {measured} B per item, budget {limit}"
        );
    }
}
