//! The allocator policy and the caching sub-allocator (docs/allocator.md): which path serves each
//! request (cached block, stream-ordered driver call, or wait-then-synchronous fallback).
//!
//! [`DeviceAllocator`] is the single-threaded core for one device: one cache per memory kind
//! (device, managed, host-pinned), each with per-stream size-class bins over segments obtained
//! through [`SegmentDriver`]. The caller's own host memory is not allocated here: it is pinned
//! in place through the lock interval table ([`crate::lock_table`]).

mod bins;
mod cache;
mod driver;
#[cfg(feature = "model")]
pub mod model;
mod policy;
mod stats;
#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use crate::id::{DeviceId, EventId, StreamId};

pub use crate::id::MemoryKind;

pub use driver::SegmentDriver;
pub use policy::{
    AllocatorCapabilities, AllocatorConfig, KindSupport, LARGE_SEGMENT, MIN_ALIGNMENT, ROUNDING,
    SMALL_REQUEST_LIMIT, SMALL_SEGMENT,
};
pub use stats::AllocatorStats;

use cache::KindCache;

/// When the memory must be usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order<'a> {
    /// At once, by the host and by any stream, with no ordering needed.
    Synchronous,
    /// By work enqueued on `stream` after the call, which must also be ordered after every event
    /// in `after` (the request's dependencies).
    Stream {
        /// The stream that will use the memory.
        stream: StreamId,
        /// Events the use must follow.
        after: &'a [EventId],
    },
}

/// One allocation request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocRequest<'a> {
    /// The kind of memory.
    pub kind: MemoryKind,
    /// Bytes wanted.
    pub size: usize,
    /// Required alignment of the address: a power of two.
    pub alignment: usize,
    /// When the memory must be usable.
    pub order: Order<'a>,
}

impl<'a> AllocRequest<'a> {
    /// A synchronous request for `size` bytes of `kind` at the default alignment
    /// ([`MIN_ALIGNMENT`]).
    pub const fn new(kind: MemoryKind, size: usize) -> Self {
        Self {
            kind,
            size,
            alignment: MIN_ALIGNMENT,
            order: Order::Synchronous,
        }
    }

    /// The same request with another alignment.
    pub const fn aligned(mut self, alignment: usize) -> Self {
        self.alignment = alignment;
        self
    }

    /// The same request, stream-ordered on `stream` after the events `after`.
    pub const fn on_stream(mut self, stream: StreamId, after: &'a [EventId]) -> Self {
        self.order = Order::Stream { stream, after };
        self
    }
}

/// Which path served a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocPath {
    /// A cached block freed on the same stream, or one no work can still be using.
    Cached,
    /// A cached block freed on another stream: its free was already complete (`waited ==
    /// false`), or the requesting stream was made to wait on one event.
    CachedFromStream {
        /// The stream the block was freed on.
        from: StreamId,
        /// Whether the requesting stream was made to wait.
        waited: bool,
    },
    /// A new segment from the driver's stream-ordered call.
    DriverStreamOrdered,
    /// A new segment from the driver's synchronous call, for a synchronous request.
    DriverSynchronous,
    /// A stream-ordered request for a kind without a stream-ordered form: the host waited for
    /// the request's dependencies, then the driver allocated synchronously.
    Fallback,
}

/// A handle to one live allocation; give it back to [`DeviceAllocator::free`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockHandle {
    kind: MemoryKind,
    slot: u32,
    generation: u32,
}

impl BlockHandle {
    /// The kind of memory the handle names.
    pub const fn kind(&self) -> MemoryKind {
        self.kind
    }
}

/// A served request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Give this back to free the memory.
    pub handle: BlockHandle,
    /// The address (device address for device and managed memory, host address otherwise).
    pub address: usize,
    /// Bytes usable at `address` (at least the request's size).
    pub size: usize,
    /// Which path served the request.
    pub path: AllocPath,
}

/// How freed memory is ordered against the work that used it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// No work can still use the memory (the caller waited for it).
    Idle,
    /// All work using the memory was enqueued on this stream (or ordered before its latest
    /// work), apart from streams named with [`DeviceAllocator::mark_used_on`].
    OnStream(StreamId),
}

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
        let (slot, generation, address, path) = self.caches[request.kind.cache_index()].allocate(
            driver,
            &shape,
            request.order,
            support.stream_ordered,
            &self.config,
        )?;
        Ok(Allocation {
            handle: BlockHandle {
                kind: request.kind,
                slot,
                generation,
            },
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
        self.caches[handle.kind.cache_index()].free(
            driver,
            handle.slot,
            handle.generation,
            release,
            &config,
        )
    }

    /// Records that the allocation is also used by work on `stream` (as PyTorch's
    /// `recordStream`): when freed, it is reused only after that work has completed.
    pub fn mark_used_on(&mut self, handle: BlockHandle, stream: StreamId) -> Result<()> {
        self.caches[handle.kind.cache_index()].mark_used_on(handle.slot, handle.generation, stream)
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
