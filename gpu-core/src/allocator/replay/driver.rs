//! The replay's driver: segments from an address counter under an optional cap, and work that
//! has always completed (every event is complete when asked, waits and synchronisations return).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::allocator::{MemoryKind, SegmentDriver};
use crate::error::Result;
use crate::id::{DeviceId, EventId, StreamId};

/// Where the replay driver's addresses start, and their alignment.
const BASE: usize = 1 << 20;
const ALIGNMENT: usize = 4096;

/// A [`SegmentDriver`] without a device: it hands out address ranges (reusing returned ones of
/// the same size) while the bytes it holds stay within `cap`, reports out of memory beyond, and
/// takes all work as complete at once.
#[derive(Clone, Debug)]
pub struct ReplayDriver {
    granularity: Option<usize>,
    cap: usize,
    held: usize,
    next_address: usize,
    returned: BTreeMap<usize, Vec<usize>>,
    next_event: u32,
}

impl ReplayDriver {
    /// A driver that holds at most `cap` bytes (`usize::MAX`: no cap).
    pub fn new(cap: usize) -> Self {
        Self {
            granularity: None,
            cap,
            held: 0,
            next_address: BASE,
            returned: BTreeMap::new(),
            next_event: 0,
        }
    }

    /// The same driver with virtual memory management of `granularity` (a power of two), for
    /// growable segments: reserved ranges take address space only, mapped pieces count
    /// against the cap.
    pub fn with_granularity(mut self, granularity: usize) -> Self {
        self.granularity = Some(granularity);
        self
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Counts `size` more bytes held, within the cap.
    fn hold(&mut self, size: usize) -> bool {
        let fits = size <= self.cap - self.held;
        if fits {
            self.held += size;
        }
        fits
    }

    /// A fresh address range of `size` bytes.
    fn bump(&mut self, size: usize) -> Option<usize> {
        let address = self.next_address;
        let span = size.checked_next_multiple_of(ALIGNMENT)?;
        self.next_address = address.checked_add(span)?;
        Some(address)
    }

    fn take(&mut self, size: usize) -> Option<usize> {
        if size > self.cap - self.held {
            return None;
        }
        let address = match self.returned.get_mut(&size).and_then(Vec::pop) {
            Some(address) => address,
            None => self.bump(size)?,
        };
        self.held += size;
        Some(address)
    }
}

impl SegmentDriver for ReplayDriver {
    fn allocate(&mut self, _: DeviceId, _: MemoryKind, size: usize) -> Result<Option<usize>> {
        Ok(self.take(size))
    }

    fn allocate_on_stream(
        &mut self,
        _: DeviceId,
        _: MemoryKind,
        size: usize,
        _: StreamId,
    ) -> Result<Option<usize>> {
        Ok(self.take(size))
    }

    fn free(
        &mut self,
        _: DeviceId,
        _: MemoryKind,
        address: usize,
        size: usize,
        _: Option<StreamId>,
    ) -> Result<()> {
        self.held -= size;
        self.returned.entry(size).or_default().push(address);
        Ok(())
    }

    fn record_event(&mut self, _: DeviceId, _: StreamId) -> Result<EventId> {
        self.next_event = self.next_event.wrapping_add(1);
        Ok(EventId(self.next_event))
    }

    fn event_completed(&mut self, _: DeviceId, _: EventId) -> Result<bool> {
        Ok(true)
    }

    fn wait_event(&mut self, _: DeviceId, _: StreamId, _: EventId) -> Result<()> {
        Ok(())
    }

    fn wait_event_on_host(&mut self, _: DeviceId, _: EventId) -> Result<()> {
        Ok(())
    }

    fn release_event(&mut self, _: DeviceId, _: EventId) {}

    fn synchronize(&mut self, _: DeviceId) -> Result<()> {
        Ok(())
    }

    fn map_granularity(&mut self, _: DeviceId, _: MemoryKind) -> Option<usize> {
        self.granularity
    }

    fn reserve_range(
        &mut self,
        _: DeviceId,
        _: MemoryKind,
        wanted: usize,
        _: usize,
    ) -> Result<Option<(usize, usize)>> {
        // Aligned to the granularity, as a driver's reservations are.
        let alignment = self.granularity.unwrap_or(ALIGNMENT);
        let Some(start) = self.next_address.checked_next_multiple_of(alignment) else {
            return Ok(None);
        };
        self.next_address = start;
        Ok(self.bump(wanted).map(|address| (address, wanted)))
    }

    fn map(&mut self, _: DeviceId, _: MemoryKind, _: usize, size: usize) -> Result<bool> {
        Ok(self.hold(size))
    }

    fn unmap(
        &mut self,
        _: DeviceId,
        _: MemoryKind,
        _: usize,
        size: usize,
        _: Option<StreamId>,
    ) -> Result<()> {
        self.held -= size;
        Ok(())
    }

    fn release_range(&mut self, _: DeviceId, _: MemoryKind, _: usize, _: usize) -> Result<()> {
        Ok(())
    }
}
