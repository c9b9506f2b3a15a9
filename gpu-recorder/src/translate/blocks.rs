//! Sub-allocators' block events in the translation: the allocator each names, PyTorch's frees
//! that wait for the streams a block was used on, and which allocations are carved into blocks.
//!
//! PyTorch's caching allocator (`torch`, through the recorder's tracker shim) reports a free
//! when it is requested (`FREE_REQUESTED`); for a block marked used on other streams
//! (`record_stream`) it then records an event on each of them, and hands the block out again
//! only once the host saw them complete. So a `torch` free is held until the freeing thread's
//! next call other than an event's creation or record (or until any block event, or the exit):
//! each event recorded meanwhile by that thread names a stream the block was used on
//! (`block_use`), then the free is written (`block_free`), and the checker orders the block's
//! next hand-out after those streams' work. NVTX regions (`nvtx`) and our runtime's buffers
//! (`gpurt_region`, from its backends' `note_buffer`) name no stream and are comments: they
//! narrow footprints only.

use core::fmt::Write as _;
use std::collections::BTreeSet;

use super::{StreamKey, Translator, holding};
use crate::call::{Call, Kind, Outcome};

/// A `torch` free waiting for its thread's event records.
#[derive(Clone, Debug)]
pub(super) struct Deferred {
    /// The free as the hook reported it.
    free: Call,
    /// The block's stream.
    own: StreamKey,
    /// The streams written as `block_use` so far.
    used: Vec<StreamKey>,
}

/// The allocator a block event names: its function's name before `_block_`.
pub(super) fn allocator_of(call: &Call) -> &'static str {
    let name = call.function;
    name.find("_block_").map_or(name, |at| &name[..at])
}

fn is_block_event(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::BlockAlloc { .. } | Kind::BlockFree { .. } | Kind::BlockUse { .. }
    )
}

impl Translator {
    /// Before `call`: settles the frees of PyTorch's allocator held back. Returns true when
    /// `call` itself was such a free, now held.
    pub(super) fn settle_blocks(&mut self, call: &Call, out: &mut String) -> bool {
        if is_block_event(call.kind) {
            self.close_deferred(None, out);
            if let Kind::BlockFree { stream, .. } = call.kind
                && allocator_of(call) == "torch"
            {
                let own = StreamKey::of(call, stream);
                self.deferred.push(Deferred {
                    free: call.clone(),
                    own,
                    used: Vec::new(),
                });
                return true;
            }
            return false;
        }
        if !self.deferred.iter().any(|d| d.free.thread == call.thread) {
            return false;
        }
        match call.kind {
            Kind::EventRecord { stream, .. } if matches!(call.outcome, Outcome::Returned(0)) => {
                let key = StreamKey::of(call, stream);
                let mut uses = Vec::new();
                for deferred in &mut self.deferred {
                    if deferred.free.thread == call.thread
                        && deferred.own != key
                        && !deferred.used.contains(&key)
                    {
                        deferred.used.push(key);
                        let mut used = deferred.free.clone();
                        used.function = "torch_block_use";
                        used.context = call.context;
                        if let Kind::BlockFree { address, .. } = deferred.free.kind {
                            used.kind = Kind::BlockUse { stream, address };
                        }
                        uses.push(used);
                    }
                }
                for used in uses {
                    self.succeeded(&used, out);
                }
            }
            Kind::EventRecord { .. } | Kind::EventCreate { .. } | Kind::Note => {}
            _ => self.close_deferred(Some(call.thread), out),
        }
        false
    }

    /// Writes the held frees of `thread` (of every thread for `None`).
    pub(super) fn close_deferred(&mut self, thread: Option<u64>, out: &mut String) {
        if self.deferred.is_empty() {
            return;
        }
        let (closing, kept): (Vec<_>, Vec<_>) = core::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| thread.is_none_or(|thread| d.free.thread == thread));
        self.deferred = kept;
        for deferred in closing {
            self.succeeded(&deferred.free, out);
        }
    }

    /// A block event's line: NVTX regions and our runtime's buffers name no stream, so theirs
    /// is a comment (the region only narrows footprints: the checker sees the accesses of its
    /// bytes, and the driver calls that order them, not a hand-out).
    pub(super) fn block_line(&mut self, call: &Call, stream: u64, text: &str, out: &mut String) {
        if matches!(allocator_of(call), "nvtx" | "gpurt_region") {
            let _ = writeln!(out, "# {text}  ({} tid={})", call.function, call.thread);
        } else {
            self.block(call, stream, text, out);
        }
    }

    /// A block was handed out at `address`: the allocation it is cut from is carved.
    pub(super) fn carve(&mut self, address: u64) {
        if let Some((start, _)) = self.allocation_of(address) {
            self.carved.insert(start);
        }
    }

    /// The footprint of a launch parameter word: the block handed out that holds it; else,
    /// in an allocation carved into blocks, none (a word pointing between live blocks is a
    /// stale pointer the kernel does not follow: PyTorch's reduction kernels carry such words
    /// in their parameter structs, and counting them as accesses reported hundreds of false
    /// uses after free per training run); else the whole allocation alive that holds it.
    pub(super) fn footprint_of(&self, word: u64) -> Option<(u64, u64)> {
        if let Some(block) = holding(&self.blocks, word) {
            return Some(block);
        }
        let (start, len) = self.allocation_of(word)?;
        (!self.carved.contains(&start)).then_some((start, len))
    }
}

/// The allocations carved into blocks, by first byte.
pub(super) type Carved = BTreeSet<u64>;
