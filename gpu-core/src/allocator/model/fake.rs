//! The fake driver: segments and reservations (mapped in pieces) handed out in a bounded address
//! range, and streams, events and waits modelled so that a use of memory before its free has
//! completed is seen.

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

/// A fake [`SegmentDriver`]: hands out non-overlapping address ranges (segments and
/// reservations) from the top of the address space down, reusing a returned range once no
/// pending work touches it, maps and unmaps pieces inside reservations when given a
/// granularity, models streams, events and the progress of work on them, can fail its Nth
/// call, and records every misuse it sees.
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
    /// The virtual-memory granularity it reports for every kind; `None` (the default): no
    /// virtual memory.
    pub granularity: Option<usize>,
    /// Reservations made.
    pub reservations_made: u64,
    /// Successful map calls.
    pub maps: u64,
    segments: BTreeMap<usize, (usize, MemoryKind)>,
    /// Reserved ranges: start -> (size, kind).
    reservations: BTreeMap<usize, (usize, MemoryKind)>,
    /// Mapped pieces inside reservations: start -> (size, kind); never overlapping.
    mapped: BTreeMap<usize, (usize, MemoryKind)>,
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
            reservations_made: 0,
            maps: 0,
            segments: BTreeMap::new(),
            reservations: BTreeMap::new(),
            mapped: BTreeMap::new(),
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

    /// Reservations made and not released: start -> (size, kind).
    pub fn live_reservations(&self) -> &BTreeMap<usize, (usize, MemoryKind)> {
        &self.reservations
    }

    /// Bytes of `kind` handed out and not returned: segments and mapped pieces.
    pub fn live_bytes(&self, kind: MemoryKind) -> usize {
        self.segments
            .values()
            .chain(self.mapped.values())
            .filter(|(_, k)| *k == kind)
            .map(|(size, _)| size)
            .sum()
    }

    /// Bytes of `kind` mapped inside reservations.
    pub fn mapped_bytes(&self, kind: MemoryKind) -> usize {
        sum_of(&self.mapped, kind)
    }

    /// Bytes of address space of `kind` reserved.
    pub fn reserved_address_space(&self, kind: MemoryKind) -> usize {
        sum_of(&self.reservations, kind)
    }

    /// Events the allocator recorded and has not released.
    pub fn allocator_events(&self) -> usize {
        self.events
            .values()
            .filter(|e| e.owned_by_allocator)
            .count()
    }

    /// Whether `[start, start + len)` lies inside one live segment of `kind`, or wholly in
    /// mapped pieces of `kind`.
    pub fn inside_segment(&self, kind: MemoryKind, start: usize, len: usize) -> bool {
        let in_segment = self
            .segments
            .range(..=start)
            .next_back()
            .is_some_and(|(&base, &(size, k))| k == kind && start + len <= base + size);
        in_segment || self.all_mapped(Some(kind), start, start + len)
    }

    /// Whether every byte of `[start, end)` is mapped (in pieces of `kind`, if given).
    fn all_mapped(&self, kind: Option<MemoryKind>, start: usize, end: usize) -> bool {
        let mut covered = start;
        let first = self.mapped.range(..=start).next_back().map(|(&a, _)| a);
        for (&base, &(size, k)) in self.mapped.range(first.unwrap_or(start)..) {
            if covered >= end || base > covered || kind.is_some_and(|kind| kind != k) {
                break;
            }
            covered = covered.max(base + size);
        }
        covered >= end
    }

    /// Whether any byte of `[start, end)` is mapped.
    fn any_mapped(&self, start: usize, end: usize) -> bool {
        let below = self.mapped.range(..start).next_back();
        below.is_some_and(|(&base, &(size, _))| base + size > start)
            || self.mapped.range(start..end).next().is_some()
    }

    /// The reservation holding all of `[start, end)`.
    fn reservation_of(&self, start: usize, end: usize) -> Option<(usize, MemoryKind)> {
        self.reservations
            .range(..=start)
            .next_back()
            .filter(|&(&base, &(size, _))| end <= base + size)
            .map(|(&base, &(_, kind))| (base, kind))
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

    /// The highest free place for `size` bytes between `FAKE_FLOOR` and `FAKE_TOP`, a gap below
    /// each live segment (so no two are adjacent) and touched by no pending work (an earlier segment's, freed in
    /// stream order); `None` when the capacity or the address space has no room.
    fn hand_out(&mut self, kind: MemoryKind, size: usize) -> Option<usize> {
        if self.capacity - self.in_use < size {
            return None;
        }
        let address = self.place(size, FAKE_ALIGNMENT)?;
        self.in_use += size;
        self.segments.insert(address, (size, kind));
        Some(address)
    }

    /// The highest free place, aligned to `align` (a multiple of the fake's alignment), for a
    /// range of `size` bytes (a segment's or a reservation's), as [`FakeDriver::hand_out`]
    /// describes.
    fn place(&self, size: usize, align: usize) -> Option<usize> {
        let span = size.checked_next_multiple_of(FAKE_ALIGNMENT)?;
        let mut ceiling = FAKE_TOP;
        let mut taken: BTreeMap<usize, (usize, MemoryKind)> = self.segments.clone();
        taken.extend(self.reservations.iter().map(|(&a, &r)| (a, r)));
        let mut below = taken.iter().rev().peekable();
        let address = loop {
            let floor = below.peek().map_or(FAKE_FLOOR, |&(&start, &(len, _))| {
                start + len.next_multiple_of(FAKE_ALIGNMENT)
            });
            let Some(address) = ceiling
                .checked_sub(span)
                .map(|a| a - a % align)
                .filter(|&a| a >= floor)
            else {
                ceiling = below.next()?.0 - FAKE_ALIGNMENT;
                continue;
            };
            match self.pending_touching(address, address + span, None) {
                None => break address,
                Some((stream, position)) => {
                    let busy = self.streams[&stream].work[position].range.0;
                    ceiling = busy - busy % FAKE_ALIGNMENT;
                }
            }
        };
        Some(address)
    }

    /// Records a misuse if work not ordered before `after`'s next work may still touch
    /// `[start, end)`, which is being given back (`what`).
    fn check_unused(&mut self, what: &str, start: usize, end: usize, after: Option<StreamId>) {
        if let Some((stream, position)) = self.pending_touching(start, end, after) {
            self.violations.push(format!(
                "{start:#x} {what} after {after:?} while work {position} of stream {stream} may use it"
            ));
        }
    }

    /// Checks a virtual-memory call's range against the granularity; the misuse, if any.
    fn misaligned(&self, call: &str, address: usize, size: usize) -> Option<String> {
        let granularity = self.granularity?;
        (size == 0 || !address.is_multiple_of(granularity) || !size.is_multiple_of(granularity))
            .then(|| format!("{call} of {address:#x} ({size} bytes) is not in whole granules"))
    }
}

/// Bytes of `kind` in `ranges`.
fn sum_of(ranges: &BTreeMap<usize, (usize, MemoryKind)>, kind: MemoryKind) -> usize {
    ranges
        .values()
        .filter(|(_, k)| *k == kind)
        .map(|(size, _)| size)
        .sum()
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
        self.check_unused("segment freed", address, address + size, after);
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

    fn granularity(&mut self, _device: DeviceId, _kind: MemoryKind) -> Result<Option<usize>> {
        Ok(self.granularity)
    }

    fn reserve(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        size: usize,
    ) -> Result<Option<usize>> {
        self.call("reserve")?;
        if let Some(misuse) = self.misaligned("reserve", 0, size) {
            self.violations.push(misuse);
            return Ok(None);
        }
        let align = self
            .granularity
            .unwrap_or(FAKE_ALIGNMENT)
            .max(FAKE_ALIGNMENT);
        let Some(address) = self.place(size, align) else {
            return Ok(None);
        };
        self.reservations.insert(address, (size, kind));
        self.reservations_made += 1;
        Ok(Some(address))
    }

    fn map(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        self.call("map")?;
        let end = address.saturating_add(size);
        let misuse = self.misaligned("map", address, size).or_else(|| {
            match self.reservation_of(address, end) {
                Some((_, k)) if k == kind => None,
                _ => Some(format!(
                    "map of {address:#x} ({size} bytes, {kind}) is not inside one {kind} reservation"
                )),
            }
        });
        let misuse = misuse.or_else(|| {
            self.any_mapped(address, end)
                .then(|| format!("map of {address:#x} ({size} bytes) over mapped bytes"))
        });
        if let Some(misuse) = misuse {
            self.violations.push(misuse);
            return Ok(false);
        }
        if self.capacity - self.in_use < size {
            return Ok(false);
        }
        self.check_unused("mapped", address, end, None);
        self.in_use += size;
        self.mapped.insert(address, (size, kind));
        self.maps += 1;
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
        let end = address.saturating_add(size);
        let misuse = self.misaligned("unmap", address, size).or_else(|| {
            (!self.all_mapped(Some(kind), address, end)).then(|| {
                format!("unmap of {address:#x} ({size} bytes, {kind}) covers unmapped bytes")
            })
        });
        if let Some(misuse) = misuse {
            self.violations.push(misuse);
            return Ok(());
        }
        self.check_unused("unmapped", address, end, after);
        // The driver waits for `after`'s work before the memory goes: model it as done.
        self.finish_touching(address, size);
        // Cut the pieces at both ends, then drop those inside.
        for cut in [address, end] {
            if let Some((&base, &(len, k))) = self.mapped.range(..cut).next_back()
                && base + len > cut
            {
                self.mapped.insert(base, (cut - base, k));
                self.mapped.insert(cut, (base + len - cut, k));
            }
        }
        let inside: Vec<usize> = self.mapped.range(address..end).map(|(&a, _)| a).collect();
        for piece in inside {
            self.mapped.remove(&piece);
        }
        self.in_use -= size;
        Ok(())
    }

    fn release_reservation(
        &mut self,
        _device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        self.call("release_reservation")?;
        if self.reservations.get(&address) != Some(&(size, kind)) {
            self.violations.push(format!(
                "release of {address:#x} ({size} bytes, {kind}) matches no reservation"
            ));
        } else if self.any_mapped(address, address + size) {
            self.violations.push(format!(
                "reservation {address:#x} released with bytes still mapped"
            ));
        } else {
            self.reservations.remove(&address);
        }
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
