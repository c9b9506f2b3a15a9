//! Vector clocks of points on streams: what each stream's tail, and each fork event's record,
//! is ordered after, so the planner never issues a wait the plan already implies.

use alloc::vec::Vec;

use crate::id::StreamId;

/// How many raised entries a [`Clock`] lists above its base point before it gives the base up.
const RAISED_CAPACITY: usize = 8;

/// The vector clock of a point (a stream's tail, or a fork event's record): `entries[s]` is
/// the last position of stream `s` ordered before (or at) the point.
///
/// Where it knows, the clock also says how it was built: as the clock of an earlier `base`
/// point, raised only at the streams in `raised` and at its owner's own entry (the owner is
/// the stream the point is on). A stream already ordered after `base` merges such a clock
/// by those few entries instead of all of them: in a fan-in of n branches that each waited
/// for one fork event, each merge costs a few entries, not one per stream in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Clock {
    pub(super) entries: Vec<u64>,
    /// A point (stream, position) whose clock this one equals apart from `raised` and the
    /// owner's entry; `None` when unknown.
    pub(super) base: Option<(StreamId, u64)>,
    pub(super) raised: [StreamId; RAISED_CAPACITY],
    pub(super) raised_len: u8,
}

impl Clock {
    /// The clock of a stream's first point (nothing before it).
    pub(super) fn new(streams: usize) -> Self {
        Clock {
            entries: alloc::vec![0; streams],
            base: None,
            raised: [StreamId(0); RAISED_CAPACITY],
            raised_len: 0,
        }
    }

    #[inline]
    pub(super) fn known(&self, stream: StreamId) -> u64 {
        self.entries.get(stream.index()).copied().unwrap_or(0)
    }

    /// Becomes a copy of `from` (a fork event taking its stream's clock).
    pub(super) fn copy_from(&mut self, from: &Clock) {
        self.entries.clear();
        self.entries.extend_from_slice(&from.entries);
        self.base = from.base;
        self.raised = from.raised;
        self.raised_len = from.raised_len;
    }

    /// Raises this clock, the one of `owner`'s tail, to also cover the point `from` of stream
    /// `from_owner` (a wait of `owner` on that point).
    pub(super) fn merge(&mut self, owner: StreamId, from: &Clock, from_owner: StreamId) {
        if from.known(owner) >= self.known(owner) {
            // The point already follows the tail, so its clock covers this one: take it whole
            // (entries past `from`'s length are zero here, since `from` covers them).
            if self.entries.len() < from.entries.len() {
                self.entries.resize(from.entries.len(), 0);
            }
            self.entries[..from.entries.len()].copy_from_slice(&from.entries);
            self.base = Some((from_owner, from.known(from_owner)));
            self.raised_len = 0;
            return;
        }
        if let Some((stream, position)) = from.base
            && self.known(stream) >= position
        {
            // The tail already follows `from`'s base: only its raised entries can be new.
            let raised = &from.raised[..from.raised_len as usize];
            for &stream in raised.iter().chain(core::iter::once(&from_owner)) {
                self.raise(stream, from.known(stream));
            }
            return;
        }
        if self.entries.len() < from.entries.len() {
            self.entries.resize(from.entries.len(), 0);
        }
        for (mine, theirs) in self.entries.iter_mut().zip(&from.entries) {
            *mine = (*mine).max(*theirs);
        }
        self.base = None;
    }

    /// Raises one entry, noting it above the base (or giving the base up when full).
    fn raise(&mut self, stream: StreamId, position: u64) {
        if self.known(stream) >= position {
            return;
        }
        if self.entries.len() <= stream.index() {
            self.entries.resize(stream.index() + 1, 0);
        }
        self.entries[stream.index()] = position;
        if self.base.is_some() {
            if (self.raised_len as usize) < RAISED_CAPACITY {
                self.raised[self.raised_len as usize] = stream;
                self.raised_len += 1;
            } else {
                self.base = None;
            }
        }
    }
}
