//! Reference models for the allocator's property tests, fuzz target and benchmarks: a fake
//! driver that models streams' progress, a harness that checks every safety rule, and a seeded
//! trace generator of mixed allocation workloads.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{DriverError, Error, Result};
use crate::id::{DeviceId, EventId, StreamId};

use super::{
    AllocPath, AllocRequest, AllocatorCapabilities, AllocatorConfig, BlockHandle, DeviceAllocator,
    MemoryKind, Release, SegmentDriver,
};

/// Every kind.
const ALL_KINDS: [MemoryKind; 3] = MemoryKind::CACHED;
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
struct ModelEvent {
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
    segments: BTreeMap<usize, (usize, MemoryKind)>,
    in_use: usize,
    streams: BTreeMap<u32, ModelStream>,
    events: BTreeMap<u32, ModelEvent>,
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
            segments: BTreeMap::new(),
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

    /// The highest free place for `size` bytes between `FAKE_FLOOR` and `FAKE_TOP`, a gap below
    /// each live segment (so no two are adjacent) and touched by no pending work (an earlier segment's, freed in
    /// stream order); `None` when the capacity or the address space has no room.
    fn hand_out(&mut self, kind: MemoryKind, size: usize) -> Option<usize> {
        if self.capacity - self.in_use < size {
            return None;
        }
        let span = size.checked_next_multiple_of(FAKE_ALIGNMENT)?;
        let mut ceiling = FAKE_TOP;
        let mut below = self.segments.iter().rev().peekable();
        let address = loop {
            let floor = below.peek().map_or(FAKE_FLOOR, |&(&start, &(len, _))| {
                start + len.next_multiple_of(FAKE_ALIGNMENT)
            });
            let Some(address) = ceiling.checked_sub(span).filter(|&a| a >= floor) else {
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
        self.in_use += size;
        self.segments.insert(address, (size, kind));
        Some(address)
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
}

// ----- the checking harness -----

/// One step of a generated operation sequence; indices pick among live allocations and
/// streams modulo their counts, so any values are valid.
#[derive(Clone, Debug)]
pub enum Step {
    /// Allocate: `kind` picks among the three kinds, `stream` `None` is synchronous, `deps`
    /// events recorded on the streams in `deps` (by index) are the request's dependencies.
    Allocate {
        /// Picks the kind.
        kind: u8,
        /// Bytes.
        size: usize,
        /// Alignment (any value: bad ones must be refused).
        alignment: usize,
        /// The stream, or synchronous.
        stream: Option<u8>,
        /// Streams to record dependency events on.
        deps: Vec<u8>,
    },
    /// Enqueue work using a live allocation on a stream (another stream than its own is first
    /// ordered after its own and marked with `mark_used_on`).
    Use {
        /// Picks the allocation.
        pick: usize,
        /// Picks the stream.
        stream: u8,
    },
    /// Free a live allocation: on its own stream, or (`idle`) after all its work completed.
    Free {
        /// Picks the allocation.
        pick: usize,
        /// Free as idle.
        idle: bool,
    },
    /// Complete some work on a stream.
    Progress {
        /// Picks the stream.
        stream: u8,
        /// Pieces of work.
        count: u8,
    },
    /// Make the driver's call `after + 1` from now fail.
    FailSoon {
        /// Calls to let through first.
        after: u8,
    },
    /// Return cached memory to the driver.
    Trim,
    /// Let all work finish, then retire a stream (its number stays in use afterwards, as a
    /// new stream would).
    Retire {
        /// Picks the stream.
        stream: u8,
    },
}

/// A live allocation in the harness.
#[derive(Clone, Copy, Debug)]
struct Live {
    handle: BlockHandle,
    address: usize,
    size: usize,
    kind: MemoryKind,
    /// The stream it was handed to (`None`: synchronous).
    home: Option<StreamId>,
    /// The first other stream that used it.
    other_user: Option<StreamId>,
}

/// Drives a [`DeviceAllocator`] over a [`FakeDriver`] and checks after every step: no two
/// live blocks overlap; each lies inside a segment the driver handed out; no block is handed
/// to a stream (or the host) while work not ordered before it may use it; driver paths match
/// the capabilities; the allocator's invariants and statistics hold, also after injected
/// failures; and at the end, after freeing everything and trimming, the driver got back
/// exactly what it gave, events included.
pub struct Harness {
    /// The allocator under test.
    pub allocator: DeviceAllocator,
    /// The fake driver.
    pub driver: FakeDriver,
    streams: u8,
    live: Vec<Live>,
    /// How often each path served a request, by name; also how many steps failed with an
    /// injected driver error ("injected failure") or out of memory ("out of memory").
    pub paths: BTreeMap<&'static str, u64>,
}

impl Harness {
    /// A harness over `streams` streams (at least one) and a device of `capacity` bytes.
    pub fn new(
        capabilities: AllocatorCapabilities,
        config: AllocatorConfig,
        streams: u8,
        capacity: usize,
    ) -> Self {
        Self {
            allocator: DeviceAllocator::new(DeviceId(0), capabilities, config),
            driver: FakeDriver::new(capacity),
            streams: streams.max(1),
            live: Vec::new(),
            paths: BTreeMap::new(),
        }
    }

    fn stream(&self, index: u8) -> StreamId {
        StreamId(u32::from(index % self.streams))
    }

    /// Runs one step and checks everything; the first broken rule, described.
    pub fn step(&mut self, step: &Step) -> core::result::Result<(), String> {
        let before: Vec<_> = ALL_KINDS.iter().map(|&k| self.allocator.stats(k)).collect();
        let failure_planned = self.driver.fail_at.is_some_and(|n| n > self.driver.calls);
        let outcome = match step {
            Step::Allocate {
                kind,
                size,
                alignment,
                stream,
                deps,
            } => self.allocate(*kind, *size, *alignment, *stream, deps),
            Step::Use { pick, stream } => self.use_block(*pick, *stream),
            Step::Free { pick, idle } => self.free(*pick, *idle),
            Step::Progress { stream, count } => {
                self.driver
                    .progress(self.stream(*stream), usize::from(*count));
                Ok(())
            }
            Step::FailSoon { after } => {
                self.driver.fail_at = Some(self.driver.calls + u64::from(*after) + 1);
                Ok(())
            }
            Step::Retire { stream } => {
                let stream = self.stream(*stream);
                self.driver.finish_all();
                self.allocator.retire_stream(&mut self.driver, stream);
                Ok(())
            }
            Step::Trim => self
                .allocator
                .trim(&mut self.driver)
                .map(|_| ())
                .map_err(|e| format!("{e}")),
        };
        let injected =
            failure_planned && self.driver.fail_at.is_some_and(|n| n <= self.driver.calls);
        if let Err(message) = outcome {
            if !(injected && message.contains("INJECTED_FAILURE")) {
                return Err(message);
            }
            *self.paths.entry("injected failure").or_default() += 1;
            for (kind, old) in ALL_KINDS.iter().zip(&before) {
                let now = self.allocator.stats(*kind);
                if (now.allocated, now.requested) != (old.allocated, old.requested) {
                    return Err(format!("a failed step changed the {kind} bytes handed out"));
                }
            }
        }
        self.check()
    }

    fn allocate(
        &mut self,
        kind: u8,
        size: usize,
        alignment: usize,
        stream: Option<u8>,
        deps: &[u8],
    ) -> core::result::Result<(), String> {
        let kind = ALL_KINDS[usize::from(kind % 3)];
        let home = stream.map(|s| self.stream(s));
        let events: Vec<EventId> = deps
            .iter()
            .map(|&d| self.driver.record_user_event(self.stream(d)))
            .collect();
        let mut request = AllocRequest::new(kind, size).aligned(alignment);
        if let Some(home) = home {
            request = request.on_stream(home, &events);
        }
        let result = self.allocator.allocate(&mut self.driver, &request);
        for event in &events {
            self.driver.events.remove(&event.0);
        }
        let support = self.allocator.capabilities().support(kind);
        let allocation = match result {
            Ok(allocation) => allocation,
            Err(Error::KindUnsupported { .. }) if !support.available => return Ok(()),
            Err(Error::InvalidAlignment { limit, .. })
                if limit >= super::SMALL_SEGMENT
                    && (!alignment.is_power_of_two() || alignment > limit) =>
            {
                return Ok(());
            }
            Err(Error::ZeroSize { .. }) if size == 0 => return Ok(()),
            Err(Error::LimitExceeded { .. })
                if size > support.max_size || size > usize::MAX / 2 =>
            {
                return Ok(());
            }
            Err(Error::OutOfMemory { requested, .. }) if requested == size => {
                *self.paths.entry("out of memory").or_default() += 1;
                return Ok(());
            }
            Err(e) => return Err(format!("{e}")),
        };
        let name = match allocation.path {
            AllocPath::Cached => "cached",
            AllocPath::CachedFromStream { waited: false, .. } => "other stream, complete",
            AllocPath::CachedFromStream { waited: true, .. } => "other stream, waited",
            AllocPath::DriverStreamOrdered => "stream-ordered",
            AllocPath::DriverSynchronous => "synchronous",
            AllocPath::Fallback => "fallback",
        };
        *self.paths.entry(name).or_default() += 1;
        let expected_driver_path = match (home, support.stream_ordered) {
            (None, _) => AllocPath::DriverSynchronous,
            (Some(_), true) => AllocPath::DriverStreamOrdered,
            (Some(_), false) => AllocPath::Fallback,
        };
        let driver_path = matches!(
            allocation.path,
            AllocPath::DriverStreamOrdered | AllocPath::DriverSynchronous | AllocPath::Fallback
        );
        if driver_path && allocation.path != expected_driver_path {
            return Err(format!(
                "{:?} taken for {home:?} with capabilities {support:?}",
                allocation.path
            ));
        }
        if allocation.size != size || allocation.address % request.alignment.max(1) != 0 {
            return Err(format!(
                "{allocation:?} does not honour size {size} and alignment {alignment}"
            ));
        }
        if !self.driver.inside_segment(kind, allocation.address, size) {
            return Err(format!(
                "{allocation:?} lies outside every {kind} segment the driver handed out"
            ));
        }
        if let Some(other) = self.live.iter().find(|l| {
            l.address < allocation.address + size && allocation.address < l.address + l.size
        }) {
            return Err(format!("{allocation:?} overlaps the live {other:?}"));
        }
        if let Some((stream, position)) = self.driver.unordered_use(allocation.address, size, home)
        {
            return Err(format!(
                "{allocation:?} handed to {home:?} while work {position} of stream {stream} may still use it"
            ));
        }
        self.live.push(Live {
            handle: allocation.handle,
            address: allocation.address,
            size,
            kind,
            home,
            other_user: None,
        });
        Ok(())
    }

    fn use_block(&mut self, pick: usize, stream: u8) -> core::result::Result<(), String> {
        if self.live.is_empty() {
            return Ok(());
        }
        let index = pick % self.live.len();
        let stream = self.stream(stream);
        let live = self.live[index];
        if live.home != Some(stream) {
            if let Some(home) = live.home {
                let event = self.driver.record_user_event(home);
                self.driver.user_wait(stream, event);
                self.driver.events.remove(&event.0);
            }
            self.allocator
                .mark_used_on(live.handle, stream)
                .map_err(|e| format!("{e}"))?;
            self.live[index].other_user.get_or_insert(stream);
        }
        self.driver.enqueue(stream, live.address, live.size);
        Ok(())
    }

    fn free(&mut self, pick: usize, idle: bool) -> core::result::Result<(), String> {
        if self.live.is_empty() {
            return Ok(());
        }
        let index = pick % self.live.len();
        let live = self.live[index];
        let release = match (idle, live.home.or(live.other_user)) {
            (false, Some(stream)) => Release::OnStream(stream),
            _ => {
                self.driver.finish_touching(live.address, live.size);
                Release::Idle
            }
        };
        self.allocator
            .free(&mut self.driver, live.handle, release)
            .map_err(|e| format!("{e}"))?;
        self.live.swap_remove(index);
        if self
            .allocator
            .free(&mut self.driver, live.handle, release)
            .is_ok()
        {
            return Err(format!("{:?} freed twice", live.handle));
        }
        Ok(())
    }

    /// Checks the allocator's invariants, its statistics against the live set and the driver,
    /// and the driver's record of misuse.
    pub fn check(&self) -> core::result::Result<(), String> {
        self.allocator.check_consistency()?;
        if let Some(violation) = self.driver.violations.first() {
            return Err(violation.clone());
        }
        for kind in ALL_KINDS {
            let stats = self.allocator.stats(kind);
            let requested: usize = self
                .live
                .iter()
                .filter(|l| l.kind == kind)
                .map(|l| l.size)
                .sum();
            if stats.requested != requested || stats.reserved != self.driver.live_bytes(kind) {
                return Err(format!(
                    "{kind}: stats say {} requested and {} reserved; the model {} and the driver {}",
                    stats.requested,
                    stats.reserved,
                    requested,
                    self.driver.live_bytes(kind)
                ));
            }
        }
        Ok(())
    }

    /// Frees everything, lets all work finish, trims, and checks the driver got back exactly
    /// what it gave (segments and events).
    pub fn finish(&mut self) -> core::result::Result<(), String> {
        self.driver.fail_at = None;
        while !self.live.is_empty() {
            self.free(0, false)?;
        }
        self.driver.finish_all();
        self.allocator
            .trim(&mut self.driver)
            .map_err(|e| format!("{e}"))?;
        self.check()?;
        if !self.driver.live_segments().is_empty() {
            return Err(format!(
                "after trim the driver still has {:?} out",
                self.driver.live_segments()
            ));
        }
        if self.driver.allocator_events() != 0 {
            return Err(format!(
                "{} events recorded by the allocator were never released",
                self.driver.allocator_events()
            ));
        }
        Ok(())
    }
}

// ----- the seeded trace generator -----

/// One operation of a generated workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes as allocation number `id`, for use on `stream`.
    Allocate {
        /// Number of the allocation (dense, from 0).
        id: usize,
        /// Bytes.
        size: usize,
        /// Stream number.
        stream: u32,
    },
    /// Free allocation number `id`.
    Free {
        /// Number of the allocation.
        id: usize,
    },
}

/// A small deterministic generator (xorshift64*), so traces are identical everywhere.
#[derive(Clone, Debug)]
pub struct TraceRng(u64);

impl TraceRng {
    /// A generator from a seed (zero is replaced by a fixed constant).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..bound` (`bound > 0`).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }
}

/// A mixed workload like a training step's: mostly small tensors (256 B .. 64 KiB, sizes not
/// multiples of 512), some mid-size (1 .. 8 MiB) and a few large (16 .. 96 MiB) ones, on
/// `streams` streams, with frees out of order (a random live allocation, more often an old
/// one), live memory drifting between bursts. Ends with everything freed.
pub fn mixed_trace(seed: u64, operations: usize, streams: u32) -> Vec<TraceOp> {
    let mut rng = TraceRng::new(seed);
    let mut trace = Vec::with_capacity(operations + operations / 2);
    let mut live: Vec<usize> = Vec::new();
    let mut next_id = 0;
    let streams = u64::from(streams.max(1));
    for step in 0..operations {
        let phase = (step / 512) % 4;
        let target_live = [48u64, 160, 96, 240][phase];
        let allocate = live.is_empty()
            || (live.len() as u64) < target_live && rng.below(100) < 70
            || rng.below(100) < 35;
        if allocate {
            let kind = rng.below(1000);
            let size = if kind < 900 {
                256 + rng.below(64 << 10) as usize
            } else if kind < 985 {
                (1 << 20) + rng.below(7 << 20) as usize
            } else {
                (16 << 20) + rng.below(80 << 20) as usize
            };
            let stream = rng.below(streams) as u32;
            trace.push(TraceOp::Allocate {
                id: next_id,
                size,
                stream,
            });
            live.push(next_id);
            next_id += 1;
        } else {
            let skew =
                rng.below(live.len() as u64) * rng.below(live.len() as u64) / live.len() as u64;
            let id = live.swap_remove(skew as usize);
            trace.push(TraceOp::Free { id });
        }
    }
    while let Some(id) = live.pop() {
        trace.push(TraceOp::Free { id });
    }
    trace
}

/// Bytes live at the busiest point of a trace (requested sizes).
pub fn peak_live_bytes(trace: &[TraceOp]) -> usize {
    let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
    let (mut live, mut peak) = (0usize, 0usize);
    for op in trace {
        match *op {
            TraceOp::Allocate { id, size, .. } => {
                sizes.insert(id, size);
                live += size;
                peak = peak.max(live);
            }
            TraceOp::Free { id } => live -= sizes.remove(&id).unwrap_or(0),
        }
    }
    peak
}

/// Which streams a trace uses.
pub fn trace_streams(trace: &[TraceOp]) -> BTreeSet<u32> {
    trace
        .iter()
        .filter_map(|op| match op {
            TraceOp::Allocate { stream, .. } => Some(*stream),
            TraceOp::Free { .. } => None,
        })
        .collect()
}

/// Capabilities with every cached kind available, stream-ordered where `stream_ordered` says.
pub fn capabilities(stream_ordered: [bool; 3], managed: bool) -> AllocatorCapabilities {
    let support = |ordered: bool| super::KindSupport {
        available: true,
        stream_ordered: ordered,
        max_size: usize::MAX,
    };
    AllocatorCapabilities {
        device: support(stream_ordered[0]),
        managed: if managed {
            support(stream_ordered[1])
        } else {
            super::KindSupport::NONE
        },
        host_pinned: support(stream_ordered[2]),
        host_register: true,
    }
}

/// Runs a trace on a [`DeviceAllocator`] over a [`FakeDriver`] (device memory, each
/// allocation on its stream, freed on it) and returns the allocator's statistics.
pub fn run_trace(trace: &[TraceOp], config: AllocatorConfig) -> Result<super::AllocatorStats> {
    let mut driver = FakeDriver::new(usize::MAX / 2);
    let mut allocator = DeviceAllocator::new(DeviceId(0), capabilities([true; 3], true), config);
    let mut handles: BTreeMap<usize, (BlockHandle, StreamId)> = BTreeMap::new();
    for op in trace {
        match *op {
            TraceOp::Allocate { id, size, stream } => {
                let stream = StreamId(stream);
                let request = AllocRequest::new(MemoryKind::Device, size).on_stream(stream, &[]);
                let allocation = allocator.allocate(&mut driver, &request)?;
                handles.insert(id, (allocation.handle, stream));
            }
            TraceOp::Free { id } => {
                if let Some((handle, stream)) = handles.remove(&id) {
                    allocator.free(&mut driver, handle, Release::OnStream(stream))?;
                }
            }
        }
    }
    Ok(allocator.stats(MemoryKind::Device))
}
