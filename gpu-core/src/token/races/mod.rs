//! The happens-before race checker: reads any sequence of trace operations, one at a time,
//! and reports cross-stream memory races between operations with footprints.
//!
//! Ordering (see `clock`): stream order, event record/wait, the host's waits (stream, event,
//! device; a synchronous `mem_free`), legacy default-stream semantics, per-thread default
//! streams, and the allocators' own edges (a driver allocation reusing a stream-ordered free
//! comes after it; a sub-allocator's block comes back after the work of the streams it was
//! marked used on). Reports ([`RaceKind`]): a block reused on a stream not ordered after its
//! last use; a free not ordered after a use; a use after a free; unordered write/write and
//! write/read of the same bytes. Each names both operations.
//!
//! Memory is bounded by the streams alive, the events recorded and alive, the allocations and
//! blocks alive with the runs of their bytes accessed, and the last
//! [`RaceChecker::REMEMBERED_FREES`] frees; not by the trace's length. The shadow keeps the
//! last write and the reads since it per run of bytes (FastTrack's rule): the first race on
//! some bytes is always found, a later one against an access that an earlier race already
//! involved may not be.

mod clock;
mod heap;
mod report;
mod shadow;
#[cfg(test)]
mod tests;

use alloc::vec::Vec;

use hashbrown::HashMap;

pub use report::{Namer, Race, RaceCall, RaceKind, RaceNames, RaceOp};

use crate::id::{DeviceId, StreamId};
use crate::token::trace::{AddressRange, SiteId, StreamKind, TraceOp};
use clock::Clocks;
use heap::{Block, Heap};
use shadow::{Conflict, Shadow, Stamp};

/// Checks a trace for races one operation at a time ([`step`](RaceChecker::step)).
///
/// Until the first memory operation (an access, an allocation or free, a block operation) it
/// keeps only the streams alive with their device and kind, so a trace without footprints
/// costs a map update per stream created or destroyed: the ordering before the first access
/// orders no access (a wait on an event recorded then, a host wait then, come before every
/// access of the stream they order).
#[derive(Debug)]
pub struct RaceChecker {
    /// The streams alive before the first memory operation, each with its device, kind and
    /// the number of the declaration that set its kind last; `None` once checking.
    waiting: Option<HashMap<u32, Waiting>>,
    /// Declarations of streams seen before the first memory operation (numbers them).
    declarations: usize,
    clocks: Clocks,
    shadow: Shadow,
    heap: Heap,
    conflicts: Vec<Conflict>,
}

/// A stream declared before the first memory operation: its device and kind, and the number of
/// the declaration that set its kind last (they are created in that order when checking begins,
/// as they were declared, so the legacy default stream of a device is the one declared last
/// whatever the streams' ids).
#[derive(Clone, Copy, Debug)]
struct Waiting {
    device: DeviceId,
    kind: StreamKind,
    declared: usize,
}

impl Default for RaceChecker {
    fn default() -> Self {
        Self::new()
    }
}

/// Every race in `ops`, in order of the later operation's position (its index).
pub fn check_races(ops: &[TraceOp]) -> Vec<Race> {
    let mut checker = RaceChecker::new();
    let mut races = Vec::new();
    for (position, op) in ops.iter().enumerate() {
        checker.step(position, op, &mut |race| races.push(race));
    }
    races
}

impl RaceChecker {
    /// How many frees are remembered for "use after free".
    pub const REMEMBERED_FREES: usize = Heap::REMEMBERED_FREES;

    /// A checker that has seen nothing.
    pub fn new() -> Self {
        RaceChecker {
            waiting: Some(HashMap::new()),
            declarations: 0,
            clocks: Clocks::default(),
            shadow: Shadow::default(),
            heap: Heap::default(),
            conflicts: Vec::new(),
        }
    }

    /// Before the first memory operation: notes the streams' lives, and returns whether
    /// checking has begun (at `op`, if it is a memory operation).
    fn begun(&mut self, op: &TraceOp) -> bool {
        let Some(waiting) = &mut self.waiting else {
            return true;
        };
        let declared = self.declarations;
        self.declarations += 1;
        match *op {
            TraceOp::CreateStream { stream, device } => {
                let kind = StreamKind::Blocking;
                waiting.insert(
                    stream.0,
                    Waiting {
                        device,
                        kind,
                        declared,
                    },
                );
            }
            TraceOp::DefaultStream { stream, device } => {
                waiting.entry(stream.0).or_insert(Waiting {
                    device,
                    kind: StreamKind::Legacy,
                    declared,
                });
            }
            TraceOp::SetStreamKind { stream, kind } => {
                if let Some(entry) = waiting.get_mut(&stream.0) {
                    entry.kind = kind;
                    entry.declared = declared;
                }
                return false;
            }
            TraceOp::DestroyStream { stream } => {
                waiting.remove(&stream.0);
            }
            TraceOp::Access { .. }
            | TraceOp::Alloc { .. }
            | TraceOp::Free { .. }
            | TraceOp::BlockAlloc { .. }
            | TraceOp::BlockFree { .. }
            | TraceOp::BlockUse { .. } => {
                let mut streams: Vec<_> = waiting.drain().collect();
                // In the order they were declared, so slots and each device's legacy default
                // stream depend neither on the map's order nor on the streams' ids.
                streams.sort_unstable_by_key(|&(_, w)| w.declared);
                self.waiting = None;
                for (id, w) in streams {
                    self.clocks.create(StreamId(id), w.device, w.kind);
                }
                if let TraceOp::Access { stream, .. } = *op {
                    // Its operation (the line's launch, copy, ...) came before checking began.
                    self.clocks.enqueue(stream);
                }
                return true;
            }
            _ => {}
        }
        false
    }

    /// How many things the checker holds now: stream slots, recorded events, allocations,
    /// blocks, freed ranges and runs of accessed bytes.
    pub fn held(&self) -> usize {
        let waiting = self.waiting.as_ref().map_or(0, HashMap::len);
        waiting + self.clocks.slots() + self.clocks.events() + self.heap.held() + self.shadow.runs()
    }

    /// Checks the next operation, at `position` (positions must increase from one call to the
    /// next), passing each race found to `found`.
    pub fn step(&mut self, position: usize, op: &TraceOp, found: &mut impl FnMut(Race)) {
        if !self.begun(op) {
            return;
        }
        match *op {
            TraceOp::CreateStream { stream, device } => {
                self.clocks.create(stream, device, StreamKind::Blocking)
            }
            TraceOp::DefaultStream { stream, device } => {
                self.clocks.create(stream, device, StreamKind::Legacy)
            }
            TraceOp::SetStreamKind { stream, kind } => self.clocks.set_kind(stream, kind),
            TraceOp::DestroyStream { stream } => self.clocks.destroy(stream),
            TraceOp::DestroyEvent { event } => self.clocks.destroy_event(event),
            TraceOp::Record { event, stream } => self.clocks.record(event, stream),
            TraceOp::Wait { stream, event } => self.clocks.wait(stream, event),
            TraceOp::SynchronizeStream { stream } => self.clocks.synchronize_stream(stream),
            TraceOp::SynchronizeEvent { event } => self.clocks.synchronize_event(event),
            TraceOp::SynchronizeDevice { device } => self.clocks.synchronize_device(Some(device)),
            TraceOp::Launch { stream, .. } | TraceOp::PeerCopy { stream, .. } => {
                self.clocks.enqueue(stream);
            }
            TraceOp::Access {
                stream,
                call,
                range,
                mode,
                site,
            } => {
                let slot = self.clocks.slot(stream);
                let epoch = clock::component(self.clocks.clock(slot), slot);
                let later = RaceOp {
                    position,
                    call: RaceCall::Access(call),
                    stream: Some(stream),
                    mode: Some(mode),
                    site,
                };
                for (freed, overlap) in self.heap.freed_in(range) {
                    self.conflicts.push(Conflict {
                        kind: RaceKind::UseAfterFree,
                        earlier: freed.op,
                        range: overlap,
                    });
                }
                let stamp = Stamp {
                    slot,
                    epoch,
                    op: later,
                };
                let clock = self.clocks.clock(slot);
                self.shadow
                    .access(range, mode, stamp, clock, &mut self.conflicts);
                self.report(later, found);
            }
            TraceOp::Alloc {
                range,
                stream,
                site,
            } => {
                match stream {
                    Some(stream) => {
                        let later = self.op(position, RaceCall::Alloc, Some(stream), site);
                        self.hand_out(range, stream, later, found);
                    }
                    None => {
                        self.heap.unfree(range);
                    }
                }
                self.shadow.clear(range);
                self.heap.allocations.insert(range.start, range.end());
            }
            TraceOp::Free {
                address,
                stream,
                site,
            } => {
                let Some(end) = self.heap.allocations.remove(&address) else {
                    return;
                };
                let range = AddressRange::new(address, end - address);
                let op = self.op(position, RaceCall::Free, stream, site);
                let pending = match stream {
                    Some(stream) => {
                        let (slot, _) = self.clocks.enqueue(stream);
                        let clock = self.clocks.clock(slot);
                        self.shadow.unordered_before(
                            range,
                            slot,
                            clock,
                            RaceKind::FreeWhileInUse,
                            &mut self.conflicts,
                        );
                        let pending = clock.to_vec();
                        self.report(op, found);
                        Some(pending)
                    }
                    None => {
                        // `cuMemFree` waits for the device first.
                        self.clocks.synchronize_device(None);
                        None
                    }
                };
                self.shadow.clear(range);
                self.heap.drop_blocks(range);
                self.heap.free(range, op, pending);
            }
            TraceOp::BlockAlloc {
                allocator,
                range,
                stream,
                site,
            } => {
                let later = self.op(
                    position,
                    RaceCall::BlockAlloc(allocator),
                    Some(stream),
                    site,
                );
                self.hand_out(range, stream, later, found);
                self.heap.blocks.insert(
                    range.start,
                    Block {
                        end: range.end(),
                        used: Vec::new(),
                    },
                );
            }
            TraceOp::BlockUse {
                address, stream, ..
            } => {
                let slot = self.clocks.slot(stream);
                if let Some(block) = self.heap.blocks.get_mut(&address)
                    && !block.used.contains(&slot)
                {
                    block.used.push(slot);
                }
            }
            TraceOp::BlockFree {
                allocator,
                address,
                stream,
                site,
            } => {
                let Some(block) = self.heap.blocks.remove(&address) else {
                    return;
                };
                let range = AddressRange::new(address, block.end - address);
                let mut pending: Option<clock::Clock> = None;
                for &slot in &block.used {
                    clock::join(pending.get_or_insert_default(), self.clocks.clock(slot));
                }
                let op = self.op(position, RaceCall::BlockFree(allocator), Some(stream), site);
                self.heap.free(range, op, pending);
            }
            TraceOp::CreateEvent { .. }
            | TraceOp::QueryStream { .. }
            | TraceOp::QueryEvent { .. }
            | TraceOp::Exit => {}
        }
    }

    /// `range` is handed out on `stream` (by `later`, a stream-ordered allocation of the
    /// driver or a sub-allocator's block): after what its allocator orders a reuse after (the
    /// driver: the stream-ordered free; a sub-allocator: the work of the streams the block was
    /// marked used on, enqueued before its free), and after every earlier access of its bytes,
    /// else a [`RaceKind::Reuse`]. Its bytes' accesses are forgotten.
    fn hand_out(
        &mut self,
        range: AddressRange,
        stream: StreamId,
        later: RaceOp,
        found: &mut impl FnMut(Race),
    ) {
        let (slot, _) = self.clocks.enqueue(stream);
        for freed in self.heap.unfree(range) {
            if let Some(pending) = freed.pending {
                self.clocks.join_into(slot, &pending);
            }
        }
        self.shadow.unordered_before(
            range,
            slot,
            self.clocks.clock(slot),
            RaceKind::Reuse,
            &mut self.conflicts,
        );
        self.report(later, found);
        self.shadow.clear(range);
    }

    /// Forgets a stream the caller no longer names (its name may go to another stream): as if
    /// destroyed.
    pub fn forget_stream(&mut self, stream: StreamId) {
        match &mut self.waiting {
            Some(waiting) => {
                waiting.remove(&stream.0);
            }
            None => self.clocks.destroy(stream),
        }
    }

    fn op(
        &self,
        position: usize,
        call: RaceCall,
        stream: Option<StreamId>,
        site: Option<SiteId>,
    ) -> RaceOp {
        RaceOp {
            position,
            call,
            stream,
            mode: None,
            site,
        }
    }

    /// Reports the conflicts found for `later`.
    fn report(&mut self, later: RaceOp, found: &mut impl FnMut(Race)) {
        for conflict in self.conflicts.drain(..) {
            found(Race {
                kind: conflict.kind,
                earlier: conflict.earlier,
                later,
                range: conflict.range,
            });
        }
    }
}
