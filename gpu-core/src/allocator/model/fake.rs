//! The fake driver: segments handed out in a bounded address range, and streams, events and
//! waits modelled so that a use of memory before its free has completed is seen.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::allocator::{AllocatorCapabilities, KindSupport, MemoryKind, SegmentDriver};
use crate::error::{DriverError, Error, Result};
use crate::id::{DeviceId, EventId, StreamId};

/// Alignment of the addresses the fake driver hands out, and the gap it leaves between segments.
const FAKE_ALIGNMENT: usize = 4096;
/// The fake driver's segments end at most here: at the top of the address space whatever the
/// pointer width, so the allocator's address arithmetic meets it on 32-bit targets too (the
/// last page stays unused, so a segment's end is representable, as on every real driver).
const FAKE_TOP: usize = usize::MAX - (FAKE_ALIGNMENT - 1);
/// The fake driver's segments start at least here.
const FAKE_FLOOR: usize = 0x100_0000;

/// One piece of work enqueued on a modelled stream.
#[derive(Clone, Debug)]
struct Work {
    /// The byte range it touches.
    range: (usize, usize),
    /// Positions on other streams it waits for: (stream, ops that must have completed).
    waits_for: BTreeMap<u32, usize>,
}

/// One modelled stream: work in order, how much has completed, and what it has waited on.
#[derive(Clone, Debug, Default)]
struct ModelStream {
    work: Vec<Work>,
    completed: usize,
    /// For each other stream, how many of its ops are ordered before this stream's next work.
    knows: BTreeMap<u32, usize>,
}

#[derive(Clone, Debug)]
pub(super) struct ModelEvent {
    stream: u32,
    /// For its own stream and each stream that one had waited on: the ops it covers (also
    /// what a stream waiting on it learns).
    clock: BTreeMap<u32, usize>,
    /// Recorded by the allocator (and so to be released by it).
    owned_by_allocator: bool,
}

/// A fake [`SegmentDriver`]: hands out non-overlapping address ranges from the top of the
/// address space down, reusing a returned range once no pending work touches it, models
/// streams, events and the progress of work on them, can fail its Nth call, and records every
/// misuse it sees.
#[derive(Clone, Debug)]
pub struct FakeDriver {
    /// Calls made so far.
    pub calls: u64,
    /// The call number (1-based) that fails with an injected driver error.
    pub fail_at: Option<u64>,
    /// Bytes the fake device has (all kinds together); beyond it allocations report out of
    /// memory.
    pub capacity: usize,
    /// Misuses seen (a free that matches no segment, memory freed while work may use it, an
    /// unknown event): each described.
    pub violations: Vec<String>,
    /// Segments obtained by synchronous calls.
    pub synchronous_allocations: u64,
    /// Segments obtained by stream-ordered calls.
    pub stream_ordered_allocations: u64,
    /// The mapping granularity the fake offers (`None`: no virtual memory management).
    pub granularity: Option<usize>,
    /// The largest range `reserve_range` gives (`None`: what is asked for), as a driver short
    /// of address space would.
    pub max_reservation: Option<usize>,
    /// Segments, and the mapped pieces of reserved ranges (adjacent pieces joined).
    segments: BTreeMap<usize, (usize, MemoryKind)>,
    /// Reserved address ranges: start -> (size, kind).
    reservations: BTreeMap<usize, (usize, MemoryKind)>,
    in_use: usize,
    streams: BTreeMap<u32, ModelStream>,
    pub(super) events: BTreeMap<u32, ModelEvent>,
    next_event: u32,
}

impl FakeDriver {
    /// A fake with `capacity` bytes and no failure planned.
    pub fn new(capacity: usize) -> Self {
        Self {
            calls: 0,
            fail_at: None,
            capacity,
            violations: Vec::new(),
            synchronous_allocations: 0,
            stream_ordered_allocations: 0,
            granularity: None,
            max_reservation: None,
            segments: BTreeMap::new(),
            reservations: BTreeMap::new(),
            in_use: 0,
            streams: BTreeMap::new(),
            events: BTreeMap::new(),
            next_event: 0,
        }
    }

    /// Segments handed out and not returned: start -> (size, kind).
    pub fn live_segments(&self) -> &BTreeMap<usize, (usize, MemoryKind)> {
        &self.segments
    }

    /// Address ranges reserved and not released: start -> (size, kind).
    pub fn reserved_ranges(&self) -> &BTreeMap<usize, (usize, MemoryKind)> {
        &self.reservations
    }

    /// Bytes of `kind` handed out and not returned.
    pub fn live_bytes(&self, kind: MemoryKind) -> usize {
        self.segments
            .values()
            .filter(|(_, k)| *k == kind)
            .map(|(size, _)| size)
            .sum()
    }

    /// Events the allocator recorded and has not released.
    pub fn allocator_events(&self) -> usize {
        self.events
            .values()
            .filter(|e| e.owned_by_allocator)
            .count()
    }

    /// Whether `[start, start + len)` lies inside one live segment of `kind`.
    pub fn inside_segment(&self, kind: MemoryKind, start: usize, len: usize) -> bool {
        self.segments
            .range(..=start)
            .next_back()
            .is_some_and(|(&base, &(size, k))| k == kind && start + len <= base + size)
    }

    /// Enqueues work touching `[start, start + len)` on `stream`.
    pub fn enqueue(&mut self, stream: StreamId, start: usize, len: usize) {
        let s = self.streams.entry(stream.0).or_default();
        let waits_for = s.knows.clone();
        s.work.push(Work {
            range: (start, start + len),
            waits_for,
        });
    }

    /// Records an event for the caller's own use (not counted as a driver call of the
    /// allocator's, never failing).
    pub fn record_user_event(&mut self, stream: StreamId) -> EventId {
        self.new_event(stream, false)
    }

    /// Makes `stream` wait on `event` (the caller's own ordering, never failing).
    pub fn user_wait(&mut self, stream: StreamId, event: EventId) {
        self.apply_wait(stream, event);
    }

    /// Completes up to `count` pieces of work on `stream`, as far as their waits allow.
    pub fn progress(&mut self, stream: StreamId, count: usize) {
        for _ in 0..count {
            if !self.complete_next(stream.0) {
                break;
            }
        }
    }

    /// Completes all work on every stream.
    pub fn finish_all(&mut self) {
        loop {
            let streams: Vec<u32> = self.streams.keys().copied().collect();
            let mut any = false;
            for stream in streams {
                while self.complete_next(stream) {
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Completes every piece of work touching `[start, start + len)` (and what it waits for).
    pub fn finish_touching(&mut self, start: usize, len: usize) {
        while let Some((stream, _)) = self.pending_touching(start, start + len, None) {
            if !self.complete_next(stream) {
                self.finish_all();
            }
        }
    }

    /// A piece of work, not complete and not ordered before `user`'s next work (`None`: the
    /// host, which needs it complete), that touches `[start, end)`: its stream and position.
    pub fn unordered_use(
        &self,
        start: usize,
        len: usize,
        user: Option<StreamId>,
    ) -> Option<(u32, usize)> {
        self.pending_touching(start, start + len, user)
    }

    fn pending_touching(
        &self,
        start: usize,
        end: usize,
        user: Option<StreamId>,
    ) -> Option<(u32, usize)> {
        let knows = user.and_then(|u| self.streams.get(&u.0)).map(|s| &s.knows);
        for (&stream, s) in &self.streams {
            if user.is_some_and(|u| u.0 == stream) {
                continue;
            }
            let ordered = knows.and_then(|k| k.get(&stream)).copied().unwrap_or(0);
            for (position, work) in s.work.iter().enumerate().skip(s.completed.max(ordered)) {
                if work.range.0 < end && start < work.range.1 {
                    return Some((stream, position));
                }
            }
        }
        None
    }

    fn complete_next(&mut self, stream: u32) -> bool {
        let Some(s) = self.streams.get(&stream) else {
            return false;
        };
        let Some(work) = s.work.get(s.completed) else {
            return false;
        };
        let ready = work.waits_for.iter().all(|(other, &needed)| {
            self.streams
                .get(other)
                .is_some_and(|o| o.completed >= needed)
        });
        if ready && let Some(s) = self.streams.get_mut(&stream) {
            s.completed += 1;
        }
        ready
    }

    fn new_event(&mut self, stream: StreamId, owned_by_allocator: bool) -> EventId {
        let s = self.streams.entry(stream.0).or_default();
        let position = s.work.len();
        let mut clock = s.knows.clone();
        clock.insert(stream.0, position);
        let id = self.next_event;
        self.next_event += 1;
        self.events.insert(
            id,
            ModelEvent {
                stream: stream.0,
                clock,
                owned_by_allocator,
            },
        );
        EventId(id)
    }

    /// An event completes once its stream's work before it has completed and so has everything
    /// that stream had waited on (a wait is itself work on the stream).
    fn event_done(&self, event: &ModelEvent) -> bool {
        event.clock.iter().all(|(stream, &position)| {
            self.streams
                .get(stream)
                .is_some_and(|s| s.completed >= position)
        })
    }

    fn apply_wait(&mut self, stream: StreamId, event: EventId) {
        let Some(clock) = self.events.get(&event.0).map(|e| e.clock.clone()) else {
            self.violations.push(format!("wait on unknown {event}"));
            return;
        };
        let s = self.streams.entry(stream.0).or_default();
        for (other, position) in clock {
            if other != stream.0 {
                let known = s.knows.entry(other).or_insert(0);
                *known = (*known).max(position);
            }
        }
    }

    /// Counts a call; fails it if it is the planned one.
    fn call(&mut self, name: &'static str) -> Result<()> {
        self.calls += 1;
        if self.fail_at == Some(self.calls) {
            return Err(Error::Driver(DriverError {
                backend: "fake",
                call: name,
                name: "INJECTED_FAILURE",
                code: -1,
            }));
        }
        Ok(())
    }

    /// The highest free place for `size` bytes of `kind` between `FAKE_FLOOR` and `FAKE_TOP`
    /// (see [`FakeDriver::place`]), handed out; `None` when the capacity or the address space
    /// has no room.
    fn hand_out(&mut self, kind: MemoryKind, size: usize) -> Option<usize> {
        if self.capacity - self.in_use < size {
            return None;
        }
        let address = self.place(size)?;
        self.in_use += size;
        self.segments.insert(address, (size, kind));
        Some(address)
    }

    /// The highest free place for `size` bytes between `FAKE_FLOOR` and `FAKE_TOP`, a gap below
    /// each live segment and reserved range (so no two are adjacent) and touched by no pending
    /// work (an earlier segment's, freed in stream order).
    fn place(&self, size: usize) -> Option<usize> {
        let span = size.checked_next_multiple_of(FAKE_ALIGNMENT)?;
        let reserved = |start: usize| {
            self.reservations
                .range(..=start)
                .next_back()
                .is_some_and(|(&base, &(len, _))| start < base + len)
        };
        let taken: BTreeMap<usize, usize> = self
            .segments
            .iter()
            .filter(|&(&start, _)| !reserved(start))
            .chain(&self.reservations)
            .map(|(&start, &(len, _))| (start, len))
            .collect();
        let mut ceiling = FAKE_TOP;
        let mut below = taken.iter().rev().peekable();
        loop {
            let floor = below.peek().map_or(FAKE_FLOOR, |&(&start, &len)| {
                start + len.next_multiple_of(FAKE_ALIGNMENT)
            });
            let Some(address) = ceiling.checked_sub(span).filter(|&a| a >= floor) else {
                ceiling = below.next()?.0 - FAKE_ALIGNMENT;
                continue;
            };
            match self.pending_touching(address, address + span, None) {
                None => return Some(address),
                Some((stream, position)) => {
                    let busy = self.streams[&stream].work[position].range.0;
                    ceiling = busy - busy % FAKE_ALIGNMENT;
                }
            }
        }
    }

    /// The reserved range holding `[address, address + size)`, with its kind.
    fn reservation_of(&self, address: usize, size: usize) -> Option<(usize, usize, MemoryKind)> {
        self.reservations
            .range(..=address)
            .next_back()
            .filter(|&(&base, &(len, _))| address + size <= base + len)
            .map(|(&base, &(len, kind))| (base, len, kind))
    }
}

impl SegmentDriver for FakeDriver {
    fn allocate(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        size: usize,
    ) -> Result<Option<usize>> {
        self.call("allocate")?;
        let address = self.hand_out(kind, size);
        self.synchronous_allocations += u64::from(address.is_some());
        Ok(address)
    }

    fn allocate_on_stream(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        size: usize,
        _stream: StreamId,
    ) -> Result<Option<usize>> {
        self.call("allocate_on_stream")?;
        let address = self.hand_out(kind, size);
        self.stream_ordered_allocations += u64::from(address.is_some());
        Ok(address)
    }

    fn free(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<StreamId>,
    ) -> Result<()> {
        self.call("free")?;
        if self.segments.get(&address) != Some(&(size, kind)) {
            self.violations.push(format!(
                "free of {address:#x} ({size} bytes, {kind}) matches no segment"
            ));
            return Ok(());
        }
        if let Some((stream, position)) = self.pending_touching(address, address + size, after) {
            self.violations.push(format!(
                "segment {address:#x} freed after {after:?} while work {position} of stream {stream} may use it"
            ));
        }
        self.segments.remove(&address);
        self.in_use -= size;
        Ok(())
    }

    fn record_event(&mut self, _device: DeviceId, stream: StreamId) -> Result<EventId> {
        self.call("record_event")?;
        Ok(self.new_event(stream, true))
    }

    fn event_completed(&mut self, _device: DeviceId, event: EventId) -> Result<bool> {
        self.call("event_completed")?;
        match self.events.get(&event.0) {
            Some(e) => Ok(self.event_done(e)),
            None => {
                self.violations.push(format!("query of unknown {event}"));
                Ok(false)
            }
        }
    }

    fn wait_event(&mut self, _device: DeviceId, stream: StreamId, event: EventId) -> Result<()> {
        self.call("wait_event")?;
        self.apply_wait(stream, event);
        Ok(())
    }

    fn wait_event_on_host(&mut self, _device: DeviceId, event: EventId) -> Result<()> {
        self.call("wait_event_on_host")?;
        let Some(e) = self.events.get(&event.0).cloned() else {
            self.violations
                .push(format!("host wait on unknown {event}"));
            return Ok(());
        };
        while !self.event_done(&e) {
            if !self.complete_next(e.stream) {
                self.finish_all();
            }
        }
        Ok(())
    }

    fn release_event(&mut self, _device: DeviceId, event: EventId) {
        self.calls += 1;
        match self.events.remove(&event.0) {
            Some(e) if e.owned_by_allocator => {}
            _ => self.violations.push(format!(
                "release of {event}, which the allocator did not record"
            )),
        }
    }

    fn synchronize(&mut self, _device: DeviceId) -> Result<()> {
        self.call("synchronize")?;
        self.finish_all();
        Ok(())
    }

    fn map_granularity(&mut self, _device: DeviceId, _kind: MemoryKind) -> Option<usize> {
        self.granularity
    }

    fn reserve_range(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        size: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        self.call("reserve_range")?;
        let size = match self.max_reservation {
            Some(most) if most < needed => return Ok(None),
            Some(most) => size.min(most),
            None => size,
        };
        // Aligned to the granularity, as a driver's reservations are.
        let alignment = self.granularity.unwrap_or(FAKE_ALIGNMENT);
        let address = size
            .checked_add(alignment)
            .and_then(|span| self.place(span))
            .map(|address| address.next_multiple_of(alignment));
        if let Some(address) = address {
            self.reservations.insert(address, (size, kind));
        }
        Ok(address.map(|address| (address, size)))
    }

    fn map(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        self.call("map")?;
        let inside = self.reservation_of(address, size);
        let granular = self
            .granularity
            .is_some_and(|g| address.is_multiple_of(g) && size.is_multiple_of(g));
        let mapped_already = self
            .segments
            .range(..address + size)
            .next_back()
            .is_some_and(|(&start, &(len, _))| address < start + len);
        if !inside.is_some_and(|(_, _, k)| k == kind) || !granular || mapped_already {
            self.violations.push(format!(
                "map of {address:#x} ({size} bytes, {kind}) outside a reserved range, not \
                 granular or over a mapped piece"
            ));
            return Ok(false);
        }
        if self.capacity - self.in_use < size {
            return Ok(false);
        }
        self.in_use += size;
        // Joined to the piece it extends, so a block across two maps lies in one piece.
        let joined = self
            .segments
            .range(..address)
            .next_back()
            .filter(|&(&start, &(len, _))| start + len == address)
            .map(|(&start, &(len, _))| (start, len));
        match joined {
            Some((start, len)) => self.segments.insert(start, (len + size, kind)),
            None => self.segments.insert(address, (size, kind)),
        };
        Ok(true)
    }

    fn unmap(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<StreamId>,
    ) -> Result<()> {
        self.call("unmap")?;
        let piece = self
            .segments
            .range(..=address)
            .next_back()
            .map(|(&start, &(len, k))| (start, len, k));
        let Some((start, len, _)) =
            piece.filter(|&(start, len, k)| k == kind && address + size == start + len)
        else {
            self.violations.push(format!(
                "unmap of {address:#x} ({size} bytes) is not the tail of a mapped piece"
            ));
            return Ok(());
        };
        if let Some((stream, position)) = self.pending_touching(address, address + size, after) {
            self.violations.push(format!(
                "{address:#x} unmapped after {after:?} while work {position} of stream {stream} may use it"
            ));
        }
        // The driver waits for `after`'s work before unmapping, so the addresses may be mapped
        // again at once: model that work as done.
        self.finish_touching(address, size);
        if address == start {
            self.segments.remove(&start);
        } else {
            self.segments.insert(start, (len - size, kind));
        }
        self.in_use -= size;
        Ok(())
    }

    fn release_range(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        self.call("release_range")?;
        let still_mapped = self
            .segments
            .range(address..address + size)
            .next()
            .is_some();
        if self.reservations.get(&address) != Some(&(size, kind)) || still_mapped {
            self.violations.push(format!(
                "release of range {address:#x} ({size} bytes): not reserved, or still mapped"
            ));
            return Ok(());
        }
        self.reservations.remove(&address);
        Ok(())
    }
}

/// Capabilities with every cached kind available, stream-ordered where `stream_ordered` says.
pub fn capabilities(stream_ordered: [bool; 3], managed: bool) -> AllocatorCapabilities {
    let support = |ordered: bool| KindSupport {
        available: true,
        stream_ordered: ordered,
        max_size: usize::MAX,
    };
    AllocatorCapabilities {
        device: support(stream_ordered[0]),
        managed: if managed {
            support(stream_ordered[1])
        } else {
            KindSupport::NONE
        },
        host_pinned: support(stream_ordered[2]),
        host_register: true,
    }
}
