//! The allocator policy and the caching sub-allocator (docs/allocator.md): which path serves each
//! request (cached block, stream-ordered driver call, or wait-then-synchronous fallback).
//!
//! [`DeviceAllocator`] is the single-threaded core for one device: one cache per memory kind
//! (device, managed, host-pinned), each with per-stream size-class bins over segments obtained
//! through [`SegmentDriver`]. The caller's own host memory is not allocated here: it is pinned
//! in place through the lock interval table ([`crate::lock_table`]).
//!
//! [`DeviceAllocator`] is here; one concern a module below it: `request` (what a caller asks
//! and gets back), `policy` (capabilities, tunables, request shapes), `driver` (what the
//! allocator asks of a driver), `cache` (the per-kind caching sub-allocator), `stats`, and
//! `replay` (what-if replay of allocation traces through the policy, without a device).

mod cache;
mod driver;
#[cfg(feature = "model")]
pub mod model;
mod policy;
pub mod replay;
mod request;
mod stats;
#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use crate::id::{DeviceId, StreamId};

pub use crate::id::MemoryKind;

pub use driver::SegmentDriver;
pub use policy::{
    AllocatorCapabilities, AllocatorConfig, KindSupport, LARGE_SEGMENT, MIN_ALIGNMENT, ROUNDING,
    SMALL_REQUEST_LIMIT, SMALL_SEGMENT,
};
pub use request::{AllocPath, AllocRequest, Allocation, BlockHandle, Order, Release};
pub use stats::AllocatorStats;

use cache::KindCache;

/// The allocator of one device: the policy plus one cache per cached memory kind.
pub struct DeviceAllocator {
    device: DeviceId,
    capabilities: AllocatorCapabilities,
    config: AllocatorConfig,
    caches: [KindCache; 3],
}

impl DeviceAllocator {
    /// An empty allocator for `device` with the backend's `capabilities`.
    pub fn new(
        device: DeviceId,
        capabilities: AllocatorCapabilities,
        config: AllocatorConfig,
    ) -> Self {
        Self {
            device,
            capabilities,
            config,
            caches: MemoryKind::CACHED.map(|kind| KindCache::new(device, kind)),
        }
    }

    /// The device this allocator serves.
    pub const fn device(&self) -> DeviceId {
        self.device
    }

    /// The capabilities it decides from.
    pub const fn capabilities(&self) -> &AllocatorCapabilities {
        &self.capabilities
    }

    /// Serves a request.
    ///
    /// Impossible requests (size zero, a bad alignment, a kind the device lacks, a size above
    /// the kind's limit) fail with a typed error before any driver call. A failed call leaves
    /// the allocator as it was, except that the out-of-memory ladder may have returned cached
    /// memory to the driver.
    #[inline]
    pub fn allocate<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        request: &AllocRequest<'_>,
    ) -> Result<Allocation> {
        let support = self.capabilities.support(request.kind);
        if !support.available {
            return Err(Error::KindUnsupported {
                device: self.device,
                kind: request.kind,
            });
        }
        let shape = policy::shape(
            request.size,
            request.alignment,
            support.max_size,
            &self.config,
        )?;
        let (key, address, path) = self.caches[request.kind.cache_index()].allocate(
            driver,
            &shape,
            request.order,
            support.stream_ordered,
            &self.config,
        )?;
        Ok(Allocation {
            handle: BlockHandle::new(request.kind, key),
            address,
            size: shape.size,
            path,
        })
    }

    /// Frees an allocation. With [`Release::OnStream`], the block is at once reusable on that
    /// stream, and on other streams only once ordered after the free; blocks marked as used on
    /// other streams return to the cache when those uses have completed.
    #[inline]
    pub fn free<D: SegmentDriver>(
        &mut self,
        driver: &mut D,
        handle: BlockHandle,
        release: Release,
    ) -> Result<()> {
        let config = self.config;
        self.caches[handle.kind().cache_index()].free(
            driver,
            handle.key.slot(),
            handle.key.generation(),
            release,
            &config,
        )
    }

    /// Records that the allocation is also used by work on `stream` (as PyTorch's
    /// `recordStream`): when freed, it is reused only after that work has completed.
    pub fn mark_used_on(&mut self, handle: BlockHandle, stream: StreamId) -> Result<()> {
        self.caches[handle.kind().cache_index()].mark_used_on(
            handle.key.slot(),
            handle.key.generation(),
            stream,
        )
    }

    /// Takes every stream that used this memory as idle (the caller has synchronised them all,
    /// as a runtime does at shutdown): every fence and every free pending on another stream's
    /// event is complete, without asking the driver, and their blocks go back to the cache.
    pub fn all_streams_idle<D: SegmentDriver>(&mut self, driver: &mut D) {
        for cache in &mut self.caches {
            cache.complete_everything(driver);
        }
    }

    /// Forgets `stream` before it is destroyed; all its work must have completed (synchronise
    /// it first). Its cached blocks become usable by every stream and the events recorded on it
    /// are released, so nothing refers to the stream any more; its number may be reused.
    pub fn retire_stream<D: SegmentDriver>(&mut self, driver: &mut D, stream: StreamId) {
        for cache in &mut self.caches {
            cache.retire_stream(driver, stream);
        }
    }

    /// Returns cached memory to the driver: every segment that is wholly free, after reclaiming
    /// frees that have completed. Returns the number of bytes released.
    pub fn trim<D: SegmentDriver>(&mut self, driver: &mut D) -> Result<usize> {
        let mut released = 0;
        for cache in &mut self.caches {
            released += cache.trim(driver)?;
        }
        Ok(released)
    }

    /// The mapped part of each growable segment of `kind`: start and size, in no set order.
    pub fn mapped_ranges(&self, kind: MemoryKind) -> alloc::vec::Vec<(usize, usize)> {
        self.caches[kind.cache_index()].mapped_ranges().collect()
    }

    /// Statistics of one memory kind.
    pub fn stats(&self, kind: MemoryKind) -> AllocatorStats {
        self.caches[kind.cache_index()].stats().clone()
    }

    /// Checks the caches' invariants and that their statistics match their blocks.
    #[cfg(any(test, feature = "model"))]
    pub fn check_consistency(&self) -> core::result::Result<(), alloc::string::String> {
        self.caches
            .iter()
            .try_for_each(KindCache::check_consistency)
    }
}
