//! The pure modules' small driver traits, implemented over a [`Backend`]: the allocator's
//! [`SegmentDriver`] and the lock table's [`PinDriver`]. Each backend call that names a device
//! runs under the device guard.

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::guard::with_device;
use super::streams::StreamTable;
use gpu_core::allocator::{MemoryKind, SegmentDriver};
use gpu_core::backend::Backend;
use gpu_core::error::{ByteRange, Error, Result};
use gpu_core::id::{DeviceId, EventId, StreamId};
use gpu_core::lock_table::PinDriver;

/// Events the allocator records at frees, pooled per device and named by slab index.
pub(crate) struct AllocatorEvents<E> {
    /// `slots[id]`: the event's device and driver handle (none once a reset of its device
    /// destroyed it: the id is never handed out again).
    slots: Vec<(DeviceId, Option<E>)>,
    /// Per device, ids ready for reuse.
    free: Vec<Vec<EventId>>,
    /// Events created so far (pool misses).
    pub(crate) created: u64,
}

impl<E: Copy> AllocatorEvents<E> {
    pub(crate) fn new(device_count: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: (0..device_count).map(|_| Vec::new()).collect(),
            created: 0,
        }
    }

    /// Events recorded and not yet back in the pool.
    pub(crate) fn in_use(&self) -> usize {
        let live = self.slots.iter().filter(|(_, e)| e.is_some()).count();
        live - self.free.iter().map(Vec::len).sum::<usize>()
    }

    /// Every event, for shutdown.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (DeviceId, E)> + '_ {
        self.free.iter_mut().for_each(Vec::clear);
        self.slots
            .drain(..)
            .filter_map(|(device, event)| Some((device, event?)))
    }

    /// Forgets every event of `device`, which a reset destroyed (none may be in use: their
    /// streams were retired first).
    pub(crate) fn forget_device(&mut self, device: DeviceId) {
        if let Some(pool) = self.free.get_mut(device.index()) {
            pool.clear();
        }
        for (of, event) in &mut self.slots {
            if *of == device {
                *event = None;
            }
        }
    }
}

/// The allocator's driver: segments and events on one backend, with the runtime's streams.
pub(crate) struct Segments<'a, B: Backend> {
    pub(crate) backend: &'a B,
    pub(crate) streams: &'a StreamTable<B::Stream>,
    pub(crate) events: &'a mut AllocatorEvents<B::Event>,
}

impl<B: Backend> Segments<'_, B> {
    fn event(&self, event: EventId) -> Result<B::Event> {
        self.events
            .slots
            .get(event.index())
            .and_then(|&(_, e)| e)
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
        let after = match after.map(|stream| self.streams.get(stream)).transpose()? {
            // A segment whose lane is another device's stream (its last use was a peer copy
            // there): the driver frees in the order of the memory's own device's streams only,
            // so the host waits for that stream, and the memory is freed in the order of one
            // of its own device's streams (stream-ordered memory goes back to its pool as
            // such: cuMemFree of pool memory left compute-sanitizer reporting it leaked),
            // or at once if the device has none.
            Some((stream_device, handle)) if stream_device != device => {
                with_device(self.backend, stream_device, || {
                    self.backend.stream_synchronize(handle)
                })?;
                self.streams.any_on(device)
            }
            other => other.map(|(_, handle)| handle),
        };
        with_device(self.backend, device, || {
            self.backend.free(device, kind, address, after)
        })
    }

    /// Records on `stream` an event of the stream's own device (the memory's device may be
    /// another: a buffer used by a peer copy is freed on the copying device's stream).
    fn record_event(&mut self, _memory_device: DeviceId, stream: StreamId) -> Result<EventId> {
        let (device, stream) = self.streams.get(stream)?;
        let backend = self.backend;
        let events = &mut *self.events;
        with_device(backend, device, || {
            let pool = events
                .free
                .get_mut(device.index())
                .ok_or_else(|| Error::UnknownDevice {
                    device,
                    device_count: backend.device_count(),
                })?;
            let id = match pool.pop() {
                Some(id) => id,
                None => {
                    let event = backend.event_create(device)?;
                    events.created += 1;
                    events.slots.push((device, Some(event)));
                    EventId((events.slots.len() - 1) as u32)
                }
            };
            let Some(event) = events.slots[id.index()].1 else {
                return Err(Error::UnknownEvent { event: id });
            };
            match backend.event_record(event, stream) {
                Ok(()) => Ok(id),
                Err(e) => {
                    events.free[device.index()].push(id);
                    Err(e)
                }
            }
        })
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

    /// Pools `event` with its own device's events: the one it was recorded for may be another
    /// (the memory's device), and reusing it there would record it on a foreign stream.
    fn release_event(&mut self, _memory_device: DeviceId, event: EventId) {
        let Some(&(device, Some(_))) = self.events.slots.get(event.index()) else {
            return;
        };
        if let Some(pool) = self.events.free.get_mut(device.index()) {
            pool.push(event);
        }
    }

    fn synchronize(&mut self, device: DeviceId) -> Result<()> {
        with_device(self.backend, device, || {
            self.backend.device_synchronize(device)
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
