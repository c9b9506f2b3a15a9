//! The checking harness: generated steps (allocate, use, free, progress) run against a
//! [`DeviceAllocator`] over the fake driver, checking every safety rule after each.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::fake::FakeDriver;
use crate::allocator::{
    AllocPath, AllocRequest, AllocatorCapabilities, AllocatorConfig, BlockHandle, DeviceAllocator,
    MemoryKind, Release, SMALL_SEGMENT,
};
use crate::error::Error;
use crate::id::{DeviceId, EventId, StreamId};

/// Every kind.
const ALL_KINDS: [MemoryKind; 3] = MemoryKind::CACHED;

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
/// live blocks overlap; each lies inside a segment the driver handed out (or in mapped memory,
/// still, after every step); no block is handed
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
                if limit >= SMALL_SEGMENT
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
            AllocPath::SegmentGrown => "segment grown",
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
        // A trim or a miss may unmap a growable segment's free tail, never a live block.
        if let Some(lost) = self
            .live
            .iter()
            .find(|l| !self.driver.inside_segment(l.kind, l.address, l.size))
        {
            return Err(format!("the live {lost:?} lost its memory"));
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
        if !self.driver.reserved_ranges().is_empty() {
            return Err(format!(
                "after trim the driver still has ranges reserved: {:?}",
                self.driver.reserved_ranges()
            ));
        }
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
