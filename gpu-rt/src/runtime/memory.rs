//! One device's memory as the runtime keeps it: the caching allocator, the events it records at
//! frees and the frees the driver refused, each device behind a lock of its own.
//!
//! An allocation hit or a free takes only its device's lock, never the runtime's state: the
//! state is locked, after the memory, only when the allocator needs a stream's driver handle.

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::alloc_trace::DeviceTrace;
use super::drivers::{AllocatorEvents, Segments};
use super::events::EventPool;
use super::guard::with_device;
use super::lock::{BackoffGuard, BackoffMutex};
use super::streams::StreamTable;
use gpu_core::allocator::{
    AllocRequest, Allocation, AllocatorConfig, AllocatorStats, BlockHandle, DeviceAllocator,
    MemoryKind, Order, Release,
};
use gpu_core::backend::{Backend, DeviceInfo};
use gpu_core::error::{ByteRange, Error, Result};
use gpu_core::id::{DeviceId, StreamId};

/// A device's memory, locked.
pub(crate) type MemoryGuard<'a, B> = BackoffGuard<'a, DeviceMemory<B>>;

/// The memory of one device.
pub(crate) struct DeviceMemory<B: Backend> {
    allocator: DeviceAllocator,
    /// Events the allocator records at frees (on the using stream's device, which may be
    /// another device's).
    pub(crate) events: AllocatorEvents<B::Event>,
    /// Frees the driver failed, with the streams that used the memory: retried by `trim`
    /// (the buffer that held the handle is gone).
    deferred_frees: Vec<(BlockHandle, Vec<StreamId>)>,
    /// Streams of other programs adopted on this device: (raw driver handle, id). A program
    /// uses a few (PyTorch: its default stream and its pools), so a scan is the fastest lookup.
    adopted: Vec<(usize, StreamId)>,
    /// Live allocations handed out by address (to programs that free by address, such as
    /// PyTorch): address -> (handle, size asked for).
    by_address: hashbrown::HashMap<usize, (BlockHandle, usize)>,
    /// The allocation trace being recorded (`Runtime::record_allocations`), device memory only.
    pub(crate) trace: Option<DeviceTrace>,
    /// The devices with peer access to this one's memory: granted on every piece mapped into
    /// a growable segment.
    pub(crate) vm_peers: Vec<DeviceId>,
}

impl<B: Backend> DeviceMemory<B> {
    /// The memory of every device in `infos`, each behind its own lock.
    pub(crate) fn for_devices(
        infos: &[DeviceInfo],
        config: AllocatorConfig,
        events: &Arc<EventPool<B::Event>>,
    ) -> Vec<BackoffMutex<Self>> {
        infos
            .iter()
            .enumerate()
            .map(|(index, info)| {
                BackoffMutex::new(Self::new(
                    DeviceId(index as u32),
                    info,
                    config,
                    Arc::clone(events),
                ))
            })
            .collect()
    }

    /// Empty memory of `device`, recording its events with drivers events from `events`.
    pub(crate) fn new(
        device: DeviceId,
        info: &DeviceInfo,
        config: AllocatorConfig,
        events: Arc<EventPool<B::Event>>,
    ) -> Self {
        Self {
            allocator: DeviceAllocator::new(device, info.allocator, config),
            events: AllocatorEvents::new(events),
            deferred_frees: Vec::new(),
            adopted: Vec::new(),
            by_address: hashbrown::HashMap::new(),
            trace: None,
            vm_peers: Vec::new(),
        }
    }

    /// Replaces this device's memory with empty memory after a reset of the device, which
    /// freed its segments: nothing is freed again. Its events of other devices (recorded on
    /// their streams, for blocks they used) go back to the pool; its own device's died with it.
    pub(crate) fn reset(&mut self, device: DeviceId, fresh: Self) {
        let mut old = core::mem::replace(self, fresh);
        self.trace = old.trace.as_ref().map(DeviceTrace::fresh);
        self.vm_peers = core::mem::take(&mut old.vm_peers);
        old.events.give_back(Some(device));
    }

    /// Grants `peer` access again to every piece mapped into this device's (`owner`'s)
    /// growable segments, where `peer` is one of the devices with peer access to it: a reset
    /// of `peer` took its access away with its peer links, which the runtime turned on again.
    /// Every range is tried; the first failure is returned.
    pub(crate) fn grant_mapped_again(
        &self,
        backend: &B,
        owner: DeviceId,
        peer: DeviceId,
    ) -> Result<()> {
        if !self.vm_peers.contains(&peer) {
            return Ok(());
        }
        let mut first = Ok(());
        for kind in MemoryKind::CACHED {
            for (address, size) in self.allocator.mapped_ranges(kind) {
                let granted = with_device(backend, owner, || {
                    backend.vm_set_access(owner, address, size, peer)
                });
                first = first.and(granted);
            }
        }
        first
    }

    /// Forgets `device`'s streams and events after a reset of that device (this memory is
    /// another device's): the blocks freed on its streams become usable by every stream, and
    /// the fences on its events count as passed (the work they stood for is gone).
    pub(crate) fn forget_device(
        &mut self,
        backend: &B,
        streams: &StreamTable<B::Stream>,
        device: DeviceId,
    ) {
        let of_device = streams.of_device(device);
        let (allocator, mut driver) = self.parts(backend, streams);
        for stream in of_device {
            allocator.retire_stream(&mut driver, stream);
        }
        self.events.forget_device(device);
    }

    /// The allocator with its driver: the backend, the runtime's streams, these events.
    fn parts<'a>(
        &'a mut self,
        backend: &'a B,
        streams: &'a StreamTable<B::Stream>,
    ) -> (&'a mut DeviceAllocator, Segments<'a, B>) {
        let driver = Segments {
            backend,
            streams,
            events: &mut self.events,
            peers: &self.vm_peers,
        };
        (&mut self.allocator, driver)
    }

    /// Serves `request` from the cache or the driver.
    #[inline]
    pub(crate) fn allocate(
        &mut self,
        backend: &B,
        streams: &StreamTable<B::Stream>,
        request: &AllocRequest<'_>,
    ) -> Result<Allocation> {
        let device = self.allocator.device();
        let (allocator, mut driver) = self.parts(backend, streams);
        let allocation = allocator.allocate(&mut driver, request)?;
        let buffer = ByteRange::new(allocation.address, request.size);
        // The backend hears of the buffer (a checking backend bounds accesses by it); one it
        // refuses is given back, so a failed call changes nothing.
        match buffer.map_or(Ok(()), |buffer| backend.note_buffer(device, buffer, true)) {
            Ok(()) => {
                if let Some(trace) = &mut self.trace
                    && request.kind == MemoryKind::Device
                {
                    let stream = match request.order {
                        Order::Stream { stream, .. } => Some(stream),
                        Order::Synchronous => None,
                    };
                    trace.alloc(allocation.handle, stream, request.size);
                }
                Ok(allocation)
            }
            Err(e) => {
                let _ = allocator.free(&mut driver, allocation.handle, Release::Idle);
                Err(e)
            }
        }
    }

    /// Frees `handle`, the buffer `[address, address + size)`, ordered after the work of
    /// every stream in `uses`. A free the driver fails is kept and retried by the next trim
    /// (and at teardown, once every stream is idle).
    #[inline]
    pub(crate) fn free(
        &mut self,
        backend: &B,
        streams: &StreamTable<B::Stream>,
        handle: BlockHandle,
        (address, size): (usize, usize),
        uses: &[StreamId],
    ) -> Result<()> {
        let device = self.allocator.device();
        let noted = ByteRange::new(address, size)
            .map_or(Ok(()), |buffer| backend.note_buffer(device, buffer, false));
        if let Some(trace) = &mut self.trace {
            trace.free(handle, uses);
        }
        self.free_once(backend, streams, handle, uses)
            .inspect_err(|_| self.deferred_frees.push((handle, uses.to_vec())))?;
        noted
    }

    // Always inlined: a free is the allocation hit's other half, and as a call it cost a
    // frame and its result through memory (about 50 instructions of the pair's 340).
    #[inline(always)]
    fn free_once(
        &mut self,
        backend: &B,
        streams: &StreamTable<B::Stream>,
        handle: BlockHandle,
        uses: &[StreamId],
    ) -> Result<()> {
        let (allocator, mut driver) = self.parts(backend, streams);
        let release = match uses.split_first() {
            None => Release::Idle,
            Some((&first, others)) => {
                for &stream in others {
                    allocator.mark_used_on(handle, stream)?;
                }
                Release::OnStream(first)
            }
        };
        allocator.free(&mut driver, handle, release)
    }

    /// The id of the adopted stream with raw handle `raw`, if adopted.
    #[inline]
    pub(crate) fn adopted_stream(&self, raw: usize) -> Option<StreamId> {
        self.adopted
            .iter()
            .find(|&&(adopted, _)| adopted == raw)
            .map(|&(_, stream)| stream)
    }

    /// Remembers that raw handle `raw` is adopted as `stream`.
    pub(crate) fn note_adopted(&mut self, raw: usize, stream: StreamId) {
        self.adopted.push((raw, stream));
    }

    /// Serves `request` and remembers the allocation by its address.
    #[inline]
    pub(crate) fn allocate_by_address(
        &mut self,
        backend: &B,
        streams: &StreamTable<B::Stream>,
        request: &AllocRequest<'_>,
    ) -> Result<usize> {
        let allocation = self.allocate(backend, streams, request)?;
        self.by_address
            .insert(allocation.address, (allocation.handle, request.size));
        Ok(allocation.address)
    }

    /// Frees the allocation at `address` (made with `size` bytes) in the order of `stream`.
    /// An unknown address or another size is refused with nothing changed; once checked, the
    /// address is no longer the caller's, even if the driver fails the free (it is retried by
    /// the next trim).
    #[inline]
    pub(crate) fn free_by_address(
        &mut self,
        backend: &B,
        streams: &StreamTable<B::Stream>,
        device: DeviceId,
        (address, size): (usize, usize),
        stream: StreamId,
    ) -> Result<()> {
        let handle = self.live_by_address(device, (address, size))?;
        self.by_address.remove(&address);
        self.free(backend, streams, handle, (address, size), &[stream])
    }

    /// The block of the live allocation at `address`, made with `size` bytes; an unknown
    /// address or another size is an error (nothing changes).
    pub(crate) fn live_by_address(
        &self,
        device: DeviceId,
        (address, size): (usize, usize),
    ) -> Result<BlockHandle> {
        let &(handle, allocated) = self
            .by_address
            .get(&address)
            .ok_or_else(|| Error::UnknownAddress { device, address })?;
        if size != allocated {
            return Err(Error::FreeSizeMismatch {
                address,
                given: size,
                allocated,
            });
        }
        Ok(handle)
    }

    /// Records that the live allocation at `address` is also used by work on `stream` (as
    /// PyTorch's `record_stream`): its free is ordered after that work too. An unknown address
    /// is an error (nothing changes).
    pub(crate) fn mark_used_by_address(
        &mut self,
        device: DeviceId,
        address: usize,
        stream: StreamId,
    ) -> Result<()> {
        let &(handle, _) = self
            .by_address
            .get(&address)
            .ok_or_else(|| Error::UnknownAddress { device, address })?;
        self.allocator.mark_used_on(handle, stream)?;
        if let Some(trace) = &mut self.trace {
            trace.use_on(handle, stream);
        }
        Ok(())
    }

    /// Whether `address` is a live allocation handed out by address.
    pub(crate) fn holds_address(&self, address: usize) -> bool {
        self.by_address.contains_key(&address)
    }

    /// Frees every allocation still held by address, as if no work used it: for teardown,
    /// once every stream has been synchronised (the next trim carries the frees out).
    pub(crate) fn release_by_address(&mut self) {
        let live = self
            .by_address
            .drain()
            .map(|(_, (handle, _))| (handle, Vec::new()));
        self.deferred_frees.extend(live);
    }

    /// Retries the frees that failed, then gives cached memory back to the driver; returns
    /// the bytes released. Frees that fail again stay for the next trim.
    pub(crate) fn trim(&mut self, backend: &B, streams: &StreamTable<B::Stream>) -> Result<usize> {
        let mut first_error = Ok(());
        for (handle, uses) in core::mem::take(&mut self.deferred_frees) {
            if let Err(e) = self.free_once(backend, streams, handle, &uses) {
                self.deferred_frees.push((handle, uses));
                first_error = first_error.and(Err(e));
            }
        }
        first_error?;
        let (allocator, mut driver) = self.parts(backend, streams);
        allocator.trim(&mut driver)
    }

    /// Takes every stream in `streams` as idle (all synchronised, about to be destroyed): what
    /// was freed on them, and what waits on events recorded on them, is known complete and
    /// usable by every stream, and the fences' events go back.
    pub(crate) fn all_streams_idle(&mut self, backend: &B, streams: &StreamTable<B::Stream>) {
        let (allocator, mut driver) = self.parts(backend, streams);
        allocator.all_streams_idle(&mut driver);
    }

    /// The allocator's figures for each cached kind.
    pub(crate) fn stats(&self) -> impl Iterator<Item = (MemoryKind, AllocatorStats)> + '_ {
        MemoryKind::CACHED
            .into_iter()
            .map(|kind| (kind, self.allocator_stats(kind)))
    }

    /// The allocator's figures for `kind`.
    pub(crate) fn allocator_stats(&self, kind: MemoryKind) -> AllocatorStats {
        self.allocator.stats(kind)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::host::{HostBackend, HostConfig};
    use crate::runtime::Runtime;
    use gpu_core::allocator::MemoryKind;
    use gpu_core::id::DeviceId;

    /// An allocation hit and its free take only their own device's memory lock: they finish
    /// while another thread holds the runtime's state and device 0's memory.
    #[test]
    fn a_hit_takes_neither_the_state_nor_another_devices_memory() {
        let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap();
        let device = DeviceId(1);
        rt.free(rt.alloc(device, MemoryKind::Device, 4096).unwrap())
            .unwrap();
        let hits = |rt: &Runtime<HostBackend>| {
            rt.stats()
                .allocator
                .iter()
                .find(|&&(d, kind, _)| d == device && kind == MemoryKind::Device)
                .map_or(0, |(_, _, figures)| figures.hits)
        };
        let hits_before = hits(&rt);
        std::thread::scope(|scope| {
            let state = rt.state.lock();
            let other_device = rt.memory[0].lock();
            let (done_tx, done_rx) = mpsc::channel();
            let rt = &rt;
            scope.spawn(move || {
                let outcome = rt
                    .alloc(device, MemoryKind::Device, 4096)
                    .and_then(|buffer| rt.free(buffer));
                done_tx.send(outcome).ok();
            });
            // Not a timing assertion: a hit that waited for either lock would never finish.
            let outcome = done_rx.recv_timeout(Duration::from_secs(60));
            drop((state, other_device));
            assert_eq!(
                outcome,
                Ok(Ok(())),
                "the hit waited for a lock it does not need"
            );
        });
        assert_eq!(hits(&rt), hits_before + 1);
    }
}
