//! The translation of recorded driver calls into trace lines (`Translator`): names for the
//! default streams, what stream capture hides, memory footprints, failed calls and the end.
//!
//! Pure: it sees only [`Call`]s, in the order the recorder serialised them, and writes text.
//! Rules (the README's "Check your own program" explains them to users):
//! - a stream or event is named by its handle (`0x7f..`); the null stream is the context's legacy
//!   default stream `legacy.CTX`, or with a per-thread function (`_ptsz`) the thread's
//!   `ptds.CTX.TID`; the handles `CU_STREAM_LEGACY` (1) and `CU_STREAM_PER_THREAD` (2) name them
//!   too. Each is declared with `stream_default` just before its first use;
//! - a call that failed did nothing: it is a comment. Destroys are written before they run (the
//!   handle may be reused as soon as they return) and a failure is noted after them;
//! - while a stream captures into a graph, calls on it (and on streams that joined the capture
//!   by waiting on an event recorded in it) are not executed: comments (`# captured: ...`);
//! - footprints: allocations and frees are `mem_alloc`/`mem_free` (frees written when entered,
//!   with the stream for the stream-ordered forms); copies are `copy` with `r:` the source and
//!   `w:` the destination, each where it is device memory or inside an allocation seen (pageable
//!   host memory is left out: its copies are staged by the driver), fills `fill` with `w:`; synchronous ones run on the null stream, and a
//!   synchronous copy to the host (`cuMemcpyDtoH*`, or a generic `cuMemcpy` from an allocation
//!   to outside every allocation) is followed by the host's wait for that stream. A launch's
//!   parameter word that lies inside an allocation seen so far counts as `rw:` of that whole
//!   allocation (conservative), or of the block of our allocator that holds it. A call recorded without its footprint (0 bytes, no address: the
//!   fixtures from before footprints) is written as it was: `launch`, or a comment;
//! - sub-allocators report their blocks (`gpu_recorder_block`): `block_alloc`/`block_free`/
//!   `block_use` of the allocator the event names (`gpurt`, `torch`, `nvtx`, `gpurt_region`;
//!   PyTorch's frees wait for the events it records for them, NVTX regions and our runtime's
//!   buffers are comments: `blocks`). A launch's word inside a block counts
//!   as that block; in an allocation carved into blocks but in none of them, as nothing (a
//!   stale pointer the kernel does not follow);
//! - `cuCtxSynchronize` and `cuCtxSynchronize_v2` (what `cudaDeviceSynchronize` calls in CUDA
//!   13) are `device_synchronize` of the current context's device;
//! - a stream created with `CU_STREAM_NON_BLOCKING` is declared so (`stream_kind`);
//! - other memory and context calls are comments; after [`Translator::exit`] every call is one.

use core::fmt::Write as _;
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::call::{Call, Kind, Outcome};

/// `CUDA_ERROR_NOT_READY`: what a query returns for pending work (not a failure).
const NOT_READY: u32 = 600;
/// `CU_STREAM_LEGACY`: the legacy default stream, whatever the function.
const STREAM_LEGACY: u64 = 1;
/// `CU_STREAM_PER_THREAD`: the calling thread's default stream, whatever the function.
const STREAM_PER_THREAD: u64 = 2;
/// `CU_STREAM_NON_BLOCKING`: a created stream that does not synchronise with the legacy one.
const STREAM_NON_BLOCKING: u32 = 1;

/// A stream as the trace names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum StreamKey {
    /// A stream somebody created: its handle.
    Handle(u64),
    /// A context's legacy default stream.
    Legacy { context: u64 },
    /// A thread's per-thread default stream in a context.
    PerThread { context: u64, thread: u64 },
}

impl StreamKey {
    fn of(call: &Call, handle: u64) -> Self {
        match handle {
            0 if call.per_thread() => Self::per_thread(call),
            0 | STREAM_LEGACY => Self::Legacy {
                context: call.context,
            },
            STREAM_PER_THREAD => Self::per_thread(call),
            handle => Self::Handle(handle),
        }
    }

    fn per_thread(call: &Call) -> Self {
        Self::PerThread {
            context: call.context,
            thread: call.thread,
        }
    }

    fn is_default(self) -> bool {
        !matches!(self, Self::Handle(_))
    }
}

impl core::fmt::Display for StreamKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Handle(handle) => write!(f, "{handle:#x}"),
            Self::Legacy { context } => write!(f, "legacy.{context:#x}"),
            Self::PerThread { context, thread } => write!(f, "ptds.{context:#x}.{thread}"),
        }
    }
}

/// Turns calls into trace lines, one call at a time, keeping what the lines depend on: the
/// default streams declared so far, the streams capturing (each with the stream whose capture
/// it belongs to), the events last recorded during a capture and the allocations alive.
#[derive(Debug, Default)]
pub struct Translator {
    declared: HashSet<StreamKey>,
    capture_of: HashMap<StreamKey, StreamKey>,
    captured_events: HashMap<u64, StreamKey>,
    /// The allocations alive: start address to length.
    allocations: BTreeMap<u64, u64>,
    /// The blocks sub-allocators have handed out and not taken back: start address to length.
    blocks: BTreeMap<u64, u64>,
    /// The allocations blocks were cut from.
    carved: blocks::Carved,
    /// PyTorch's frees held until their thread's event records are seen.
    deferred: Vec<blocks::Deferred>,
    /// The ranges of the launch being written (kept to reuse its memory).
    ranges: Vec<footprints::Range>,
    /// The launch footprints announced by each thread, waiting for their launches.
    announced: footprints::Pending,
    /// The announced footprint of the call being translated (a launch), if any.
    launch_footprint: Option<Vec<footprints::Range>>,
    exited: bool,
}

impl Translator {
    /// A translator at the start of a process.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the lines for `call` to `out` (each ends with a newline).
    pub fn translate(&mut self, call: &Call, out: &mut String) {
        if self.exited {
            let _ = writeln!(out, "# after exit: {call}");
            return;
        }
        if self.announce(call) {
            return;
        }
        self.launch_footprint = self.take_announced(call);
        if self.settle_blocks(call, out) {
            return;
        }
        let code = match call.outcome {
            Outcome::Entered => None,
            Outcome::Returned(code) => Some(code),
        };
        match call.kind {
            Kind::StreamDestroy { stream } => {
                let key = StreamKey::of(call, stream);
                match code {
                    // A default stream cannot be reused: written once the driver accepted it.
                    None if key.is_default() => {}
                    Some(0) if !key.is_default() => {}
                    None | Some(0) => {
                        self.forget_capture(key);
                        self.declare(call, key, out);
                        line(call, format_args!("stream_destroy {key}"), out);
                    }
                    Some(code) => failed(call, code, !key.is_default(), out),
                }
            }
            Kind::EventDestroy { event } => match code {
                None => {
                    self.captured_events.remove(&event);
                    line(call, format_args!("event_destroy {event:#x}"), out);
                }
                Some(0) => {}
                Some(code) => failed(call, code, true, out),
            },
            // A free with its address is written when entered, before the address can be
            // handed out again; without one (recorded before footprints) as it was.
            Kind::Free { address } | Kind::FreeAsync { address, .. } if address != 0 => {
                match code {
                    None => self.free(call, address, out),
                    Some(0) => {}
                    Some(code) => failed(call, code, true, out),
                }
            }
            // Anything else is recorded once it returned.
            _ => match code {
                None => {}
                Some(code) if code == 0 || (code == NOT_READY && is_query(call.kind)) => {
                    self.succeeded(call, out);
                }
                Some(code) => failed(call, code, false, out),
            },
        }
    }

    /// Appends `exit`: the process ends here; later calls become comments.
    pub fn exit(&mut self, out: &mut String) {
        if !self.exited {
            self.close_deferred(None, out);
            self.exited = true;
            out.push_str("exit\n");
        }
    }

    fn succeeded(&mut self, call: &Call, out: &mut String) {
        let device = call.device.unwrap_or(0);
        match call.kind {
            Kind::StreamCreate { stream, flags } => {
                line(
                    call,
                    format_args!("stream_create {stream:#x} {device}"),
                    out,
                );
                if flags & STREAM_NON_BLOCKING != 0 {
                    line(
                        call,
                        format_args!("stream_kind {stream:#x} nonblocking"),
                        out,
                    );
                }
            }
            Kind::EventCreate { event } => {
                self.captured_events.remove(&event);
                line(call, format_args!("event_create {event:#x} {device}"), out);
            }
            Kind::EventRecord { event, stream } => {
                let key = StreamKey::of(call, stream);
                let text = format_args!("event_record {event:#x} {key}");
                if let Some(&origin) = self.capture_of.get(&key) {
                    self.captured_events.insert(event, origin);
                    captured(call, text, out);
                } else {
                    self.captured_events.remove(&event);
                    self.declare(call, key, out);
                    line(call, text, out);
                }
            }
            Kind::StreamWaitEvent { stream, event } => {
                let key = StreamKey::of(call, stream);
                let text = format_args!("stream_wait_event {key} {event:#x}");
                if self.capture_of.contains_key(&key) {
                    captured(call, text, out);
                } else if let Some(&origin) = self.captured_events.get(&event) {
                    // Waiting on an event recorded during a capture joins that capture.
                    self.capture_of.insert(key, origin);
                    let _ = writeln!(
                        out,
                        "# {key} joins the capture of {origin}: its calls are captured"
                    );
                    captured(call, text, out);
                } else {
                    self.declare(call, key, out);
                    line(call, text, out);
                }
            }
            Kind::StreamSynchronize { stream } => {
                self.on_stream(call, stream, "stream_synchronize", out);
            }
            Kind::StreamQuery { stream } => self.on_stream(call, stream, "stream_query", out),
            Kind::Work { stream } => self.on_stream(call, stream, "launch", out),
            Kind::EventSynchronize { event } => {
                self.on_event(call, event, "event_synchronize", out)
            }
            Kind::EventQuery { event } => self.on_event(call, event, "event_query", out),
            Kind::BeginCapture { stream } => {
                let key = StreamKey::of(call, stream);
                self.capture_of.insert(key, key);
                let _ = writeln!(
                    out,
                    "# {key} begins capturing into a graph: its calls are captured, not run \
                     ({} tid={})",
                    call.function, call.thread
                );
            }
            Kind::EndCapture { stream } => {
                let key = StreamKey::of(call, stream);
                let origin = self.capture_of.get(&key).copied().unwrap_or(key);
                self.capture_of.retain(|_, of| *of != origin);
                self.captured_events.retain(|_, of| *of != origin);
                let _ = writeln!(
                    out,
                    "# the capture of {origin} ends ({} tid={})",
                    call.function, call.thread
                );
            }
            Kind::Launch { stream, .. } => {
                // The footprint, in a buffer kept between launches (no allocation per launch):
                // the one our runtime announced, else from the parameters.
                let mut ranges = core::mem::take(&mut self.ranges);
                ranges.clear();
                if let Some(announced) = self.launch_footprint.take() {
                    ranges.extend(announced);
                } else {
                    for &word in &call.args {
                        if let Some((start, len)) = self.footprint_of(word)
                            && !ranges.iter().any(|&(_, known, _)| known == start)
                        {
                            ranges.push((footprints::Access::ReadWrite, start, len));
                        }
                    }
                }
                let key = StreamKey::of(call, stream);
                let footprint = Footprint(&ranges);
                self.on_key(call, key, format_args!("launch {key}{footprint}"), out);
                self.ranges = ranges;
            }
            Kind::Copy {
                stream,
                dst,
                src,
                bytes,
            } => {
                let text = self.copy_text(call, dst, src, bytes);
                self.on_stream_with(call, stream, &text, out);
            }
            Kind::Fill { stream, dst, bytes } => {
                let text = format!("fill w:{dst:#x}+{bytes}");
                let text = if bytes == 0 { "launch" } else { &text };
                self.on_stream_with(call, stream, text, out);
            }
            Kind::CopySync { dst, src, bytes } if bytes != 0 => {
                let text = self.copy_text(call, dst, src, bytes);
                self.on_stream_with(call, 0, &text, out);
                // A copy to the host returns once it completed: the host waited for the stream.
                // The generic `cuMemcpy` is one when it reads an allocation the recorder saw
                // and writes outside them all (else it is not counted as a wait).
                let to_host = call.function.starts_with("cuMemcpyDtoH")
                    || (call.function.starts_with("cuMemcpy_") || call.function == "cuMemcpy")
                        && self.allocation_of(src).is_some()
                        && self.allocation_of(dst).is_none();
                if to_host {
                    self.on_stream(call, 0, "stream_synchronize", out);
                }
            }
            Kind::FillSync { dst, bytes } if bytes != 0 => {
                let text = format!("fill w:{dst:#x}+{bytes}");
                self.on_stream_with(call, 0, &text, out);
            }
            Kind::Alloc { address, bytes } if address != 0 && bytes != 0 => {
                self.allocations.insert(address, bytes);
                line(call, format_args!("mem_alloc {address:#x}+{bytes}"), out);
            }
            Kind::AllocAsync {
                stream,
                address,
                bytes,
            } => {
                let key = StreamKey::of(call, stream);
                if address == 0 || bytes == 0 {
                    self.on_stream(call, stream, "launch", out);
                } else if self.capture_of.contains_key(&key) {
                    captured(
                        call,
                        format_args!("mem_alloc {address:#x}+{bytes} {key}"),
                        out,
                    );
                } else {
                    self.allocations.insert(address, bytes);
                    self.declare(call, key, out);
                    line(
                        call,
                        format_args!("mem_alloc {address:#x}+{bytes} {key}"),
                        out,
                    );
                }
            }
            // Recorded before footprints: as it was.
            Kind::FreeAsync { stream, .. } => self.on_stream(call, stream, "launch", out),
            Kind::BlockAlloc {
                stream,
                address,
                bytes,
            } => {
                if bytes != 0 {
                    self.blocks.insert(address, bytes);
                    self.carve(address);
                }
                let allocator = blocks::allocator_of(call);
                let text = format!("block_alloc {allocator} {address:#x}+{bytes}");
                self.block_line(call, stream, &text, out);
            }
            Kind::BlockFree { stream, address } => {
                self.blocks.remove(&address);
                let allocator = blocks::allocator_of(call);
                let text = format!("block_free {allocator} {address:#x}");
                self.block_line(call, stream, &text, out);
            }
            Kind::BlockUse { stream, address } => {
                let allocator = blocks::allocator_of(call);
                let text = format!("block_use {allocator} {address:#x}");
                self.block(call, stream, &text, out);
            }
            Kind::StreamDestroy { .. } | Kind::EventDestroy { .. } => {}
            // The host waits for the context's device (`cudaDeviceSynchronize`).
            Kind::Note
                if matches!(call.function, "cuCtxSynchronize" | "cuCtxSynchronize_v2")
                    && call.device.is_some() =>
            {
                line(call, format_args!("device_synchronize {device}"), out);
            }
            Kind::CopySync { .. }
            | Kind::FillSync { .. }
            | Kind::Alloc { .. }
            | Kind::Free { .. }
            | Kind::Note => {
                let _ = writeln!(out, "# {call}");
            }
        }
    }

    /// A block event, `text` with its stream after it: a line, or a comment while the stream
    /// captures.
    fn block(&mut self, call: &Call, stream: u64, text: &str, out: &mut String) {
        let key = StreamKey::of(call, stream);
        self.on_key(call, key, format_args!("{text} {key}"), out);
    }

    /// A copy's line, less its stream: `copy` with `r:` its source and `w:` its destination,
    /// each where it is device memory by the function (`HtoD`'s destination, `DtoH`'s source,
    /// both of `DtoD` and peer copies) or lies inside an allocation seen (pinned host memory, any
    /// side of a generic `cuMemcpy*`); `launch` with neither (or no length).
    fn copy_text(&self, call: &Call, dst: u64, src: u64, bytes: u64) -> String {
        let name = call.function;
        let both = name.contains("DtoD") || name.contains("Peer");
        let src_device = both || name.contains("DtoH");
        let dst_device = both || name.contains("HtoD");
        let mut text = String::from("launch");
        if bytes == 0 {
            return text;
        }
        if src_device || self.allocation_of(src).is_some() {
            let _ = write!(text, " r:{src:#x}+{bytes}");
        }
        if dst_device || self.allocation_of(dst).is_some() {
            let _ = write!(text, " w:{dst:#x}+{bytes}");
        }
        if text.len() > "launch".len() {
            text.replace_range(.."launch".len(), "copy");
        }
        text
    }

    /// An allocation is freed: it, and any block cut from it, are no footprints now.
    fn forget_allocation(&mut self, address: u64) {
        if let Some(len) = self.allocations.remove(&address) {
            self.carved.remove(&address);
            let end = address.saturating_add(len);
            let inside: Vec<u64> = self.blocks.range(address..end).map(|(&at, _)| at).collect();
            for block in inside {
                self.blocks.remove(&block);
            }
        }
    }

    /// The allocation alive that holds `address`: its start and length.
    fn allocation_of(&self, address: u64) -> Option<(u64, u64)> {
        holding(&self.allocations, address)
    }

    /// A free, when entered: `mem_free ADDR [STREAM]`, or a comment while its stream captures.
    fn free(&mut self, call: &Call, address: u64, out: &mut String) {
        match call.kind {
            Kind::FreeAsync { stream, .. } => {
                let key = StreamKey::of(call, stream);
                if self.capture_of.contains_key(&key) {
                    captured(call, format_args!("mem_free {address:#x} {key}"), out);
                } else {
                    self.forget_allocation(address);
                    self.declare(call, key, out);
                    line(call, format_args!("mem_free {address:#x} {key}"), out);
                }
            }
            _ => {
                self.forget_allocation(address);
                line(call, format_args!("mem_free {address:#x}"), out);
            }
        }
    }

    /// A call naming one stream: a line, or a comment while that stream captures.
    fn on_stream(&mut self, call: &Call, stream: u64, verb: &str, out: &mut String) {
        let key = StreamKey::of(call, stream);
        self.on_key(call, key, format_args!("{verb} {key}"), out);
    }

    /// A call naming one stream, its line `VERB STREAM REST` where `text` is `VERB REST`: a
    /// line, or a comment while that stream captures.
    fn on_stream_with(&mut self, call: &Call, stream: u64, text: &str, out: &mut String) {
        let key = StreamKey::of(call, stream);
        let (verb, rest) = text.split_at(text.find(' ').unwrap_or(text.len()));
        self.on_key(call, key, format_args!("{verb} {key}{rest}"), out);
    }

    /// The line `text` of a call on stream `key`: a line, or a comment while it captures.
    fn on_key(
        &mut self,
        call: &Call,
        key: StreamKey,
        text: core::fmt::Arguments<'_>,
        out: &mut String,
    ) {
        if self.capture_of.contains_key(&key) {
            captured(call, text, out);
        } else {
            self.declare(call, key, out);
            line(call, text, out);
        }
    }

    /// A host call naming one event: a line, or a comment if the event was last recorded
    /// during a capture (it was never recorded for real).
    fn on_event(&mut self, call: &Call, event: u64, verb: &str, out: &mut String) {
        let text = format_args!("{verb} {event:#x}");
        if self.captured_events.contains_key(&event) {
            captured(call, text, out);
        } else {
            line(call, text, out);
        }
    }

    /// Declares a default stream before its first use.
    fn declare(&mut self, call: &Call, key: StreamKey, out: &mut String) {
        if key.is_default() && self.declared.insert(key) {
            let device = call.device.unwrap_or(0);
            let _ = writeln!(out, "stream_default {key} {device}");
        }
    }

    /// A destroyed stream leaves any capture.
    fn forget_capture(&mut self, key: StreamKey) {
        self.capture_of.remove(&key);
    }
}

/// A launch's footprint as its line writes it: ` rw:START+LEN` (or `r:`, `w:`) per range.
struct Footprint<'a>(&'a [footprints::Range]);

impl core::fmt::Display for Footprint<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0
            .iter()
            .try_for_each(|(access, start, len)| write!(f, " {}:{start:#x}+{len}", access.prefix()))
    }
}

/// The range of `ranges` (start to length) that holds `address`.
fn holding(ranges: &BTreeMap<u64, u64>, address: u64) -> Option<(u64, u64)> {
    let (&start, &len) = ranges.range(..=address).next_back()?;
    (address - start < len).then_some((start, len))
}

fn is_query(kind: Kind) -> bool {
    matches!(kind, Kind::StreamQuery { .. } | Kind::EventQuery { .. })
}

/// A trace line with the function and thread as a trailing comment.
fn line(call: &Call, text: core::fmt::Arguments<'_>, out: &mut String) {
    let _ = writeln!(out, "{text}  # {} tid={}", call.function, call.thread);
}

/// A call made while its stream captures: a comment.
fn captured(call: &Call, text: core::fmt::Arguments<'_>, out: &mut String) {
    let _ = writeln!(
        out,
        "# captured: {text}  ({} tid={})",
        call.function, call.thread
    );
}

/// A call that failed: a comment. `written_before` says its line was already written (a
/// destroy, recorded before it ran).
fn failed(call: &Call, code: u32, written_before: bool, out: &mut String) {
    let what = if written_before {
        "the call above failed"
    } else {
        "failed"
    };
    let _ = writeln!(out, "# {what} with CUresult {code}: {call}");
}

mod blocks;
mod footprints;
#[cfg(test)]
mod tests;
