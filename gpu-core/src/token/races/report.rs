//! What the race checker reports: the two operations of a race (where, what, on which
//! stream, from which call site) and the kind of race, written with the caller's names.

use core::fmt;

use crate::id::StreamId;
use crate::token::trace::{AccessMode, AddressRange, AllocatorId, CallKind, SiteId};

/// The kind of operation named in a race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaceCall {
    /// A stream operation with a footprint (`launch`, `copy`, `fill`, `peer_copy`).
    Access(CallKind),
    /// `mem_alloc`.
    Alloc,
    /// `mem_free`.
    Free,
    /// `block_alloc` of a sub-allocator.
    BlockAlloc(AllocatorId),
    /// `block_free` of a sub-allocator.
    BlockFree(AllocatorId),
}

/// One of the two operations of a race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaceOp {
    /// Its position (what the checker was given: an index, or a line number).
    pub position: usize,
    /// What it is.
    pub call: RaceCall,
    /// Its stream (none for a synchronous allocation or free).
    pub stream: Option<StreamId>,
    /// How it touches the bytes (accesses only).
    pub mode: Option<AccessMode>,
    /// Its call site, if the trace says.
    pub site: Option<SiteId>,
}

/// What the two operations of a race do wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaceKind {
    /// The earlier operation writes, the later one writes the same bytes, unordered.
    WriteWrite,
    /// The earlier operation writes, the later one reads the same bytes, unordered.
    WriteRead,
    /// The earlier operation reads, the later one writes the same bytes, unordered.
    ReadWrite,
    /// The later operation hands the bytes out again (a sub-allocator's block, or the
    /// driver's stream-ordered allocation) on a stream not ordered after the earlier one, their
    /// last use.
    Reuse,
    /// The later operation touches bytes the earlier one freed (and nothing allocated since).
    UseAfterFree,
    /// The later operation, a stream-ordered free, is not ordered after the earlier one, a use
    /// of the bytes: the memory may go while it is still in use.
    FreeWhileInUse,
}

/// A race: two operations, the bytes they share, and what is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Race {
    /// What is wrong.
    pub kind: RaceKind,
    /// The operation that came first in the trace.
    pub earlier: RaceOp,
    /// The operation at which the race shows (reported there).
    pub later: RaceOp,
    /// The bytes both touch.
    pub range: AddressRange,
}

/// Writes a name given an id (the caller's own names).
pub type Namer<'a, T> = dyn FnMut(&mut fmt::Formatter<'_>, T) -> fmt::Result + 'a;

/// The caller's names for what a race report names.
pub struct RaceNames<'a, 'b> {
    /// Streams.
    pub stream: &'a mut Namer<'b, StreamId>,
    /// Call sites.
    pub site: &'a mut Namer<'b, SiteId>,
    /// Sub-allocators.
    pub allocator: &'a mut Namer<'b, AllocatorId>,
    /// Positions (line numbers).
    pub position: &'a mut Namer<'b, usize>,
}

impl Race {
    /// Writes the message without its position, naming with `names`.
    pub fn describe(
        &self,
        f: &mut fmt::Formatter<'_>,
        names: &mut RaceNames<'_, '_>,
    ) -> fmt::Result {
        let range = self.range;
        describe_op(f, &self.later, names)?;
        match self.kind {
            RaceKind::WriteWrite | RaceKind::ReadWrite => write!(f, " writes {range}")?,
            RaceKind::WriteRead => write!(f, " reads {range}")?,
            RaceKind::Reuse => write!(f, " hands out {range} again")?,
            RaceKind::UseAfterFree => write!(f, " touches {range}")?,
            RaceKind::FreeWhileInUse => write!(f, " frees {range}")?,
        }
        let (relation, what) = match self.kind {
            RaceKind::WriteWrite => ("unordered with the write by", "write/write race"),
            RaceKind::WriteRead => ("unordered with the write by", "write/read race"),
            RaceKind::ReadWrite => ("unordered with the access by", "read/write race"),
            RaceKind::Reuse => (
                "on a stream not ordered after its last use by",
                "block reused across streams without an ordering edge",
            ),
            RaceKind::UseAfterFree => ("after it was freed by", "use after free"),
            RaceKind::FreeWhileInUse => (
                "before its use by",
                "free not ordered after a use on another stream",
            ),
        };
        write!(f, ", {relation} ")?;
        describe_op(f, &self.earlier, names)?;
        write!(f, " at ")?;
        (names.position)(f, self.earlier.position)?;
        write!(f, " ({what})")
    }
}

fn describe_op(
    f: &mut fmt::Formatter<'_>,
    op: &RaceOp,
    names: &mut RaceNames<'_, '_>,
) -> fmt::Result {
    match op.call {
        RaceCall::Access(call) => write!(f, "`{}`", call.name())?,
        RaceCall::Alloc => write!(f, "`mem_alloc`")?,
        RaceCall::Free => write!(f, "`mem_free`")?,
        RaceCall::BlockAlloc(allocator) | RaceCall::BlockFree(allocator) => {
            let call = if matches!(op.call, RaceCall::BlockAlloc(_)) {
                "block_alloc"
            } else {
                "block_free"
            };
            write!(f, "`{call}` of ")?;
            (names.allocator)(f, allocator)?;
        }
    }
    if let Some(stream) = op.stream {
        write!(f, " on ")?;
        (names.stream)(f, stream)?;
    }
    if let Some(site) = op.site {
        write!(f, " (")?;
        (names.site)(f, site)?;
        write!(f, ")")?;
    }
    Ok(())
}
