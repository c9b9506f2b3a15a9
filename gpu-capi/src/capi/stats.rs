//! The runtime's counters as C structs: `gpurt_stats_t` (pools, planning, the allocator summed
//! over devices and kinds, the lock table, the handles live now) and `gpurt_vm_stats_t` (the
//! allocator's growable segments: memory mapped and address space reserved).
//!
//! `gpurt_stats_t` keeps its layout for the programs built against it: counters added later
//! come in structs of their own, each with a function of its own.

use gpu_runtime::allocator::AllocatorStats;

use crate::shared::{ClientBackend, GpurtStatus, Session, dispatch, status_of, with_session};

use super::args::{out_param, write_out};

/// The runtime's counters: pools, planning, the allocator (summed over devices and kinds) and
/// the lock table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtStats {
    /// Streams handed out by the pools.
    pub stream_acquires: u64,
    /// Streams the driver had to create.
    pub streams_created: u64,
    /// Events handed out by the pools.
    pub event_acquires: u64,
    /// Events the driver had to create.
    pub events_created: u64,
    /// Operations planned.
    pub operations: u64,
    /// Waits the plan inserted between streams.
    pub waits: u64,
    /// Bytes the allocator holds from the driver.
    pub reserved_bytes: u64,
    /// Bytes handed out and not yet freed.
    pub allocated_bytes: u64,
    /// Bytes in free cached blocks, ready for reuse.
    pub cached_bytes: u64,
    /// Allocations served from the cache.
    pub allocation_hits: u64,
    /// Allocations that needed memory from the driver.
    pub allocation_misses: u64,
    /// Segments obtained from the driver.
    pub segment_allocations: u64,
    /// Segments given back to the driver.
    pub segment_frees: u64,
    /// The allocator's driver calls of every kind.
    pub allocator_driver_calls: u64,
    /// Host ranges locked or registered now.
    pub locked_ranges: u64,
    /// Bytes of those.
    pub locked_bytes: u64,
    /// Locks of `gpurt_lock` (and of MLIR's host registrations) held now, over all ranges.
    pub raw_locks: u64,
    /// Locks registrations (`gpurt_host_register`) hold now, over all ranges: only
    /// `gpurt_host_unregister` releases them.
    pub registered_locks: u64,
    /// Locks served by a range already pinned (no driver call).
    pub nested_locks: u64,
    /// Driver pins made.
    pub driver_pins: u64,
    /// Driver unpins made.
    pub driver_unpins: u64,
    /// Memory handles live now.
    pub live_memory: u64,
    /// Kernel handles live now.
    pub live_kernels: u64,
}

fn stats<B: ClientBackend>(s: &Session<B>) -> GpurtStats {
    let figures = s.runtime().stats();
    let total =
        figures
            .allocator
            .iter()
            .fold(AllocatorStats::default(), |mut sum, (_, _, kind)| {
                sum.reserved += kind.reserved;
                sum.allocated += kind.allocated;
                sum.cached += kind.cached;
                sum.hits += kind.hits + kind.cross_stream_hits;
                sum.misses += kind.misses;
                sum.segment_allocations += kind.segment_allocations;
                sum.segment_frees += kind.segment_frees;
                sum.driver_calls += kind.driver_calls;
                sum
            });
    GpurtStats {
        stream_acquires: figures.stream_acquires,
        streams_created: figures.streams_created,
        event_acquires: figures.event_acquires,
        events_created: figures.events_created,
        operations: figures.operations,
        waits: figures.waits,
        reserved_bytes: total.reserved as u64,
        allocated_bytes: total.allocated as u64,
        cached_bytes: total.cached as u64,
        allocation_hits: total.hits,
        allocation_misses: total.misses,
        segment_allocations: total.segment_allocations,
        segment_frees: total.segment_frees,
        allocator_driver_calls: total.driver_calls,
        locked_ranges: figures.locks.entries as u64,
        locked_bytes: figures.locks.bytes_locked as u64,
        raw_locks: figures.locks.held.raw as u64,
        registered_locks: figures.locks.held.guards as u64,
        nested_locks: figures.locks.nested_locks,
        driver_pins: figures.locks.driver_pins,
        driver_unpins: figures.locks.driver_unpins,
        live_memory: s.capi.memory.len() as u64,
        live_kernels: s.capi.kernels.len() as u64,
    }
}

/// The allocator's growable segments (`GPU_RUNTIME_GROWABLE_SEGMENTS=1`, where the backend has
/// virtual memory management), summed over devices and kinds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtVmStats {
    /// Bytes of physical memory mapped into growable segments now (counted in `reserved_bytes`
    /// of `gpurt_stats_t` too).
    pub mapped_bytes: u64,
    /// Address space reserved for growable segments now (mapped or not); it goes back only
    /// when a segment has nothing mapped any more.
    pub address_space_bytes: u64,
    /// Pieces of physical memory mapped so far.
    pub maps: u64,
    /// Pieces unmapped so far (free tails given back).
    pub unmaps: u64,
}

fn vm_stats<B: ClientBackend>(s: &Session<B>) -> GpurtVmStats {
    let figures = s.runtime().stats();
    figures
        .allocator
        .iter()
        .fold(GpurtVmStats::default(), |mut sum, (_, _, kind)| {
            sum.mapped_bytes += kind.mapped as u64;
            sum.address_space_bytes += kind.address_space as u64;
            sum.maps += kind.maps;
            sum.unmaps += kind.unmaps;
            sum
        })
}

/// Writes the allocator's growable-segment counters to `*stats` (all zero without growable
/// segments).
///
/// Thread safety: any thread; a snapshot (other threads' calls may change it at once).
///
/// # Safety
/// `stats` points to writable memory for a `gpurt_vm_stats_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_allocator_vm_stats(stats: *mut GpurtVmStats) -> GpurtStatus {
    status_of(|| {
        let out = out_param(stats, "vm stats out-parameter")?;
        let figures = with_session(|s| dispatch!(s, s => Ok(self::vm_stats(s))))?;
        write_out(out, figures);
        Ok(())
    })
}

/// Writes the runtime's counters to `*stats`.
///
/// Thread safety: any thread; a snapshot (other threads' calls may change it at once).
///
/// # Safety
/// `stats` points to writable memory for a `gpurt_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_stats(stats: *mut GpurtStats) -> GpurtStatus {
    status_of(|| {
        let out = out_param(stats, "stats out-parameter")?;
        let figures = with_session(|s| dispatch!(s, s => Ok(self::stats(s))))?;
        write_out(out, figures);
        Ok(())
    })
}
