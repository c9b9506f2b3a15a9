//! The pure modules' small driver traits, implemented over a [`Backend`]: the allocator's
//! [`SegmentDriver`] and the lock table's [`PinDriver`]. Each backend call that names a device
//! runs under the device guard.

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::events::EventPool;
use super::guard::with_device;
use super::streams::StreamTable;
use gpu_core::allocator::{MemoryKind, SegmentDriver};
use gpu_core::backend::Backend;
use gpu_core::error::{ByteRange, Error, Result};
use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::lock_table::PinDriver;

/// The events an allocator recorded at frees and still waits on, named by slab index; their
/// driver events come from, and go back to, the runtime's per-device [`EventPool`].
pub(crate) struct AllocatorEvents<E> {
    /// `slots[id]`: the event's device and driver handle while the allocator holds it.
    slots: Vec<Option<(DeviceId, E)>>,
    /// Ids of empty slots, for reuse.
    free_ids: Vec<EventId>,
    pool: Arc<EventPool<E>>,
    /// Events taken from the pool so far.
    pub(crate) acquired: u64,
}

impl<E: Copy> AllocatorEvents<E> {
    pub(crate) fn new(pool: Arc<EventPool<E>>) -> Self {
        Self {
            slots: Vec::new(),
            free_ids: Vec::new(),
            pool,
            acquired: 0,
        }
    }

    /// Events recorded and not yet given back.
    pub(crate) fn in_use(&self) -> usize {
        self.slots.len() - self.free_ids.len()
    }

    /// Gives every event back to the pool (for shutdown, and when a reset replaced this
    /// memory: the allocator that waited on them is gone). Those of `lost`, a device a reset
    /// destroyed the events of, are dropped instead.
    pub(crate) fn give_back(&mut self, lost: Option<DeviceId>) {
        self.free_ids.clear();
        for (device, event) in self.slots.drain(..).flatten() {
            if Some(device) != lost {
                self.pool.put(device, event);
            }
        }
    }

    /// Forgets every event of `device`, which a reset destroyed (none may be waited on: their
    /// streams were retired first).
    pub(crate) fn forget_device(&mut self, device: DeviceId) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.is_some_and(|(of, _)| of == device) {
                *slot = None;
                self.free_ids.push(EventId(index as u32));
            }
        }
    }

    fn hold(&mut self, device: DeviceId, event: E) -> EventId {
        self.acquired += 1;
        match self.free_ids.pop() {
            Some(id) => {
                self.slots[id.index()] = Some((device, event));
                id
            }
            None => {
                self.slots.push(Some((device, event)));
                EventId((self.slots.len() - 1) as u32)
            }
        }
    }

    fn release(&mut self, id: EventId) {
        if let Some((device, event)) = self.slots.get_mut(id.index()).and_then(Option::take) {
            self.free_ids.push(id);
            self.pool.put(device, event);
        }
    }
}

/// The allocator's driver: segments and events on one backend, with the runtime's streams.
pub(crate) struct Segments<'a, B: Backend> {
    pub(crate) backend: &'a B,
    pub(crate) streams: &'a StreamTable<B::Stream>,
    pub(crate) events: &'a mut AllocatorEvents<B::Event>,
    /// The devices granted access to every piece mapped into a growable segment.
    pub(crate) peers: &'a [DeviceId],
}

impl<B: Backend> Segments<'_, B> {
    /// The stream of `device` in whose order memory of `device` last used on `after` goes
    /// back. A stream of another device (the memory's last use was a peer copy there): the
    /// driver frees in the order of the memory's own device's streams only, so the host waits
    /// for that stream, and the memory goes back in the order of one of its own device's
    /// streams (stream-ordered memory goes back to its pool as such: cuMemFree of pool memory
    /// left compute-sanitizer reporting it leaked), or at once if the device has none.
    fn release_order(
        &self,
        device: DeviceId,
        after: Option<StreamId>,
    ) -> Result<Option<B::Stream>> {
        Ok(
            match after.map(|stream| self.streams.get(stream)).transpose()? {
                Some((stream_device, handle)) if stream_device != device => {
                    with_device(self.backend, stream_device, || {
                        self.backend.stream_synchronize(handle)
                    })?;
                    self.streams.any_on(device)
                }
                other => other.map(|(_, handle)| handle),
            },
        )
    }

    fn event(&self, event: EventId) -> Result<B::Event> {
        self.events
            .slots
            .get(event.index())
            .copied()
            .flatten()
            .map(|(_, e)| e)
            .ok_or_else(|| Error::UnknownEvent { event })
    }
}

impl<B: Backend> SegmentDriver for Segments<'_, B> {
    fn allocate(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
    ) -> Result<Option<usize>> {
        with_device(self.backend, device, || {
            self.backend.allocate(device, kind, size)
        })
    }

    fn allocate_on_stream(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
        stream: StreamId,
    ) -> Result<Option<usize>> {
        let (_, handle) = self.streams.get(stream)?;
        with_device(self.backend, device, || {
            self.backend.allocate_on_stream(handle, kind, size)
        })
    }

    fn free(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        _size: usize,
        after: Option<StreamId>,
    ) -> Result<()> {
        let after = self.release_order(device, after)?;
        with_device(self.backend, device, || {
            self.backend.free(device, kind, address, after)
        })
    }

    /// Records on `stream` an event of the stream's own device (the memory's device may be
    /// another: a buffer used by a peer copy is freed on the copying device's stream).
    fn record_event(&mut self, _memory_device: DeviceId, stream: StreamId) -> Result<EventId> {
        let (device, stream) = self.streams.get(stream)?;
        let event = self.events.pool.take(self.backend, device)?;
        match with_device(self.backend, device, || {
            self.backend.event_record(event, stream)
        }) {
            Ok(()) => Ok(self.events.hold(device, event)),
            Err(e) => {
                self.events.pool.put(device, event);
                Err(e)
            }
        }
    }

    fn event_completed(&mut self, _device: DeviceId, event: EventId) -> Result<bool> {
        self.backend.event_query(self.event(event)?)
    }

    fn wait_event(&mut self, device: DeviceId, stream: StreamId, event: EventId) -> Result<()> {
        let (stream, event) = (self.streams.get(stream)?.1, self.event(event)?);
        with_device(self.backend, device, || {
            self.backend.stream_wait_event(stream, event)
        })
    }

    fn wait_event_on_host(&mut self, _device: DeviceId, event: EventId) -> Result<()> {
        self.backend.event_synchronize(self.event(event)?)
    }

    /// Gives `event` back to the pool of its own device: the one it was recorded for may be
    /// another (the memory's device), and reusing it there would record it on a foreign stream.
    fn release_event(&mut self, _memory_device: DeviceId, event: EventId) {
        self.events.release(event);
    }

    fn synchronize(&mut self, device: DeviceId) -> Result<()> {
        with_device(self.backend, device, || {
            self.backend.device_synchronize(device)
        })
    }

    fn map_granularity(&mut self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        self.backend.vm_granularity(device, kind)
    }

    fn reserve_range(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        wanted: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        with_device(self.backend, device, || {
            self.backend.vm_reserve(device, kind, wanted, needed)
        })
    }

    fn map(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        with_device(self.backend, device, || {
            if !self.backend.vm_map(device, kind, address, size)? {
                return Ok(false);
            }
            // Peer access is granted per mapping: the peers the runtime enabled get it here.
            let granted = self
                .peers
                .iter()
                .try_for_each(|&peer| self.backend.vm_set_access(device, address, size, peer));
            match granted {
                Ok(()) => Ok(true),
                Err(error) => {
                    let _ = self.backend.vm_unmap(device, kind, address, size, None);
                    Err(error)
                }
            }
        })
    }

    fn unmap(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<StreamId>,
    ) -> Result<()> {
        // As for a free: the tail of a growable segment last used by a peer copy on another
        // device's stream (the driver takes only the memory's own device's streams).
        let after = self.release_order(device, after)?;
        with_device(self.backend, device, || {
            self.backend.vm_unmap(device, kind, address, size, after)
        })
    }

    fn release_range(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        with_device(self.backend, device, || {
            self.backend.vm_release(device, kind, address, size)
        })
    }
}

/// The lock table's driver: host registration on one backend, shared by all its devices.
pub(crate) struct HostPins<B: Backend> {
    pub(crate) backend: Arc<B>,
}

impl<B: Backend> PinDriver for HostPins<B> {
    fn pin(&mut self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        self.backend.host_register(range, device_ptrs)
    }

    fn unpin(&mut self, start: usize) -> Result<()> {
        self.backend.host_unregister(start)
    }

    fn pinned_extent(
        &mut self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        self.backend.host_pinned_extent(ptr, device_ptrs)
    }
}
