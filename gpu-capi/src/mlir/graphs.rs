//! The graph mode of the MLIR drop-in (`GPU_RUNTIME_MLIR_GRAPHS=1`, off by default): the
//! asynchronous calls between two host synchronisations, deferred, and replayed as one graph.
//!
//! The mode is fixed when the session opens, and each call reads it from a flag outside the
//! objects' lock ([`MlirObjects::graph_mode`](super::objects::MlirObjects::graph_mode)): with the
//! mode off, a call takes the lock once, for its own work, as if the mode did not exist.
//!
//! While the mode is on, the session's objects hold a [`Deferred`] log. The stream-ordered
//! copies, memsets and kernel launches, event records, event waits, event destructions and
//! frees on a stream are checked at the call exactly as without the mode (a refusal is reported
//! there and logs nothing), then appended to the log instead of being issued. Anything that
//! makes the host wait for or observe the device, or that the log cannot hold, ends the
//! sequence first (a *flush*): stream and event synchronisation, stream destruction, work on
//! the null stream (it is synchronous), frees on the null stream, host (un)registration, module
//! loading and unloading, and the launches the log cannot hold (see below). Allocations are not
//! deferred: `mgpuMemAlloc` returns its pointer at the call, as the kernels' arguments carry
//! it, allocated in the stream's order after the work issued so far (the deferred work on the
//! stream runs after it).
//!
//! A launch is logged with the value of each parameter copied at the call, which needs their sizes:
//! `mgpuModuleLoad` reads them from the module's PTX `.entry` declarations (`ptx`; MLIR's lowering
//! hands it PTX), and for a binary module `mgpuModuleGetFunction` asks the driver
//! (`Kernel::param_sizes`). A value of 8 bytes that lies in an allocation of `mgpuMemAlloc` is
//! passed as a span of it, other ones as plain 4- or 8-byte values. A launch of a function whose
//! sizes are unknown (a driver that cannot tell), with a parameter of another size, whose kernel is
//! not resolved on the device yet, or asking for dynamic workgroup memory above the default 48 KiB
//! (opted in, or refused, at the call) ends the sequence and is issued as without the mode. A
//! launch the runtime refuses when it is issued or recorded is reported at the synchronisation.
//!
//! What the mode keeps of the driver's semantics:
//! - A pageable source (memory outside every allocation of `mgpuMemAlloc`, not registered) is
//!   read at the call, as the driver reads pageable memory: it is copied into pinned staging the
//!   log owns (one buffer per position in the sequence, kept across sequences, so a replayed
//!   graph finds the same addresses). Before staging is written again, the work that last used
//!   it is waited for. Registered memory is used in place.
//! - A copy into pageable memory is a copy into staging, copied out to the program's memory
//!   when the sequence ends, before the synchronisation that ended it returns (the program can
//!   only observe it after one); a later copy of the sequence that reads those bytes, and a
//!   memset of pageable memory, end the sequence first.
//! - A freed allocation leaves the allocation map at the call (a later call naming it is
//!   refused as without the mode) but is freed only after the sequence's work (outside the
//!   graph, which borrows memory allocated before it). After a replay whose destinations were
//!   copied out, the frees are made in reverse order, so the allocator's cache hands the next
//!   occurrence the same blocks and its graph needs no update.
//!
//! At a flush the sequence's *key* is computed: each operation's kind, stream and event (by order
//! of first appearance in the sequence), device, byte count or element width and count, whether
//! each end of a copy is staged, and a launch's function and shape; the key fixes the graph's nodes
//! and edges (an operation runs after its stream's previous one and the records its stream waited
//! for). A key seen for the first time is remembered (a bounded list of
//! [`SEEN_KEYS`](super::graph_log::SEEN_KEYS)) and its sequence issued call by call, through the
//! same code as without the mode; a key seen before is replayed as a graph: instantiated the second
//! time it occurs, kept in a bounded cache of [`CACHED_GRAPHS`](super::graph_log::CACHED_GRAPHS)
//! (the least recently used goes), and on later occurrences launched again after updating in place
//! ([`Graph::set_copy`](gpu_runtime::runtime::Graph::set_copy),
//! [`Graph::set_fill`](gpu_runtime::runtime::Graph::set_fill),
//! [`Graph::set_launch`](gpu_runtime::runtime::Graph::set_launch)) only the nodes whose addresses
//! or values changed. The replay runs after everything the sequence's streams and waited-for events
//! were ordered after, and becomes the tail of each of its streams and the record of each event
//! recorded in it (coarser than the calls' own order, never looser). The trace sees a replay as one
//! stream operation.
//!
//! A sequence of fewer than two copies and memsets (a replay of one node saves nothing), one on
//! several devices, and any failure to record, update or launch its graph, is issued call by call
//! instead (a failure to launch waits for the replay's dependencies first, so nothing is
//! reordered). Errors of the issued calls are printed with the call's name; the first is reported
//! by the synchronisation that ended the sequence, or, when another call ended it (a launch, a copy
//! on the null stream, ...), set as the thread's last error while that call goes on. Deferred work
//! never synchronised is dropped at shutdown (nothing could observe it); staging, cached graphs and
//! held allocations are released then.

use hashbrown::HashMap;

use gpu_runtime::DeviceId;
use gpu_runtime::backend::graph::{NodeId, NodeOp};
use gpu_runtime::runtime::Runtime;
use gpu_runtime::token::TraceOp;

use crate::shared::status::set_last_error;
use crate::shared::{CapiError, ClientBackend, Session};

use super::core_ops::{event_id, stream_id};
use super::graph_log::{Deferred, Key, KeyOp, Launch, MIN_NODES, Node, Op, Transfer, arg_value};
use super::graph_replay::{after_issue, issue, replay};
use super::objects::{Allocations, Objects};

/// Whether `[address, address + len)` is pageable host memory: in no allocation of
/// `mgpuMemAlloc` and not registered (pinned) for `device`.
fn pageable<B: ClientBackend>(
    runtime: &Runtime<B>,
    buffers: &Allocations<B>,
    (address, len): (usize, usize),
    device: DeviceId,
) -> bool {
    let allocated = buffers
        .range(..=address)
        .next_back()
        .is_some_and(|(&start, buffer)| address - start < buffer.size());
    !allocated && !matches!(runtime.pinned_address(address, len, device), Ok(Some(_)))
}

/// Whether `[a, a + a_len)` and `[b, b + b_len)` share a byte.
fn overlap(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

/// What a deferring call found.
pub(super) enum Deferral {
    /// The mode is off: the caller issues the call itself.
    Off,
    /// Logged (or refused, with the error the call reports).
    Done(Result<(), CapiError>),
}

/// Refuses a stream the log would name that is not live (the null stream never reaches here).
fn live_stream<B: ClientBackend>(objects: &Objects<B>, stream: u64) -> Result<(), CapiError> {
    Ok(objects.streams.get(stream).map(drop)?)
}

/// Refuses an event that is not live, or that this sequence destroyed.
fn live_event<B: ClientBackend>(
    objects: &Objects<B>,
    log: &Deferred<B>,
    event: u64,
) -> Result<(), CapiError> {
    objects.events.get(event)?;
    log.check_event(event)
}

/// How the program's trace notes a deferred call (as the call notes itself without the mode;
/// a free is not noted).
fn traced(op: &Op) -> Option<TraceOp> {
    let device = Some(super::session::device());
    Some(match *op {
        Op::Copy { stream, .. } | Op::Fill { stream, .. } | Op::Launch { stream, .. } => {
            TraceOp::Launch {
                stream: stream_id(stream),
                device,
            }
        }
        Op::Record { event, stream } => TraceOp::Record {
            event: event_id(event),
            stream: stream_id(stream),
        },
        Op::Wait { stream, event } => TraceOp::Wait {
            stream: stream_id(stream),
            event: event_id(event),
        },
        Op::DestroyEvent { event } => TraceOp::DestroyEvent {
            event: event_id(event),
        },
        Op::Free { .. } => return None,
    })
}

/// What a deferring call's body decided.
pub(super) enum Logged {
    /// The call is in the log.
    Yes,
    /// The call cannot join the sequence: it ends (flushed), and the caller issues the call.
    EndsSequence,
}

/// Runs `body` on the objects and the log, when the mode is on; `stream` is checked first
/// (live). A refusal is the call's; [`Logged::EndsSequence`] flushes and hands the call back.
/// With the mode off, the objects are not locked.
pub(super) fn with_log<B: ClientBackend>(
    session: &'static Session<B>,
    stream: Option<u64>,
    body: impl FnOnce(&mut Objects<B>, &mut Deferred<B>) -> Result<Logged, CapiError>,
) -> Deferral {
    if !session.mlir.graph_mode() {
        return Deferral::Off;
    }
    let mut objects = session.mlir.lock();
    let Some(mut log) = objects.graphs.take() else {
        return Deferral::Off;
    };
    let logged = log.ops.len();
    let done = stream
        .map_or(Ok(()), |stream| live_stream(&objects, stream))
        .and_then(|()| body(&mut objects, &mut log));
    if let Some(op) = log.ops.get(logged) {
        log.stats.deferred += 1;
        // The program's trace notes the call where it was made, as without the mode.
        if let Some(traced) = traced(op) {
            objects.note(|| traced);
        }
    }
    objects.graphs = Some(log);
    drop(objects);
    match done {
        Ok(Logged::Yes) => Deferral::Done(Ok(())),
        Ok(Logged::EndsSequence) => {
            flush_before(session);
            Deferral::Off
        }
        Err(error) => Deferral::Done(Err(error)),
    }
}

/// Logs an event record, wait or destruction (`op`) after checking its handles in the order
/// the call checks them without the mode (a record: the event, then the stream; a wait: the
/// stream, then the event).
pub(super) fn defer_event_op<B: ClientBackend>(session: &'static Session<B>, op: Op) -> Deferral {
    with_log(session, None, |objects, log| {
        match op {
            Op::Record { event, stream } => {
                live_event(objects, log, event)?;
                live_stream(objects, stream)?;
            }
            Op::Wait { stream, event } => {
                live_stream(objects, stream)?;
                live_event(objects, log, event)?;
            }
            Op::DestroyEvent { event } => {
                live_event(objects, log, event)?;
                log.doomed.push(event);
            }
            _ => {}
        }
        log.ops.push(op);
        Ok(Logged::Yes)
    })
}

/// Logs a free of `ptr` on `stream` after checking both: the allocation leaves the map now
/// and is freed after the sequence's work.
pub(super) fn defer_free<B: ClientBackend>(
    session: &'static Session<B>,
    ptr: usize,
    stream: u64,
    not_allocated: impl FnOnce(&Allocations<B>, usize) -> CapiError,
) -> Deferral {
    with_log(session, Some(stream), |objects, log| {
        if ptr == 0 {
            return Ok(Logged::Yes); // as upstream: freeing null does nothing
        }
        let buffer = objects
            .buffers
            .remove(&ptr)
            .ok_or_else(|| not_allocated(&objects.buffers, ptr))?;
        log.freed.push((ptr, buffer));
        log.ops.push(Op::Free { stream, ptr });
        Ok(Logged::Yes)
    })
}

/// Logs a copy or memset (`work`; a launch ends the sequence instead) on `stream` once
/// `check` accepts its ranges (the call's own checks). A memset of pageable memory ends the
/// sequence too (a later copy would read its source at the call, before the memset ran).
pub(super) fn defer_work<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
    work: NodeOp<()>,
    check: impl FnOnce(&Allocations<B>) -> Result<(), CapiError>,
) -> Deferral {
    let (runtime, device) = (session.runtime(), super::session::device());
    with_log(session, Some(stream), |objects, log| {
        check(&objects.buffers)?;
        match work {
            NodeOp::Copy { dst, src, bytes } => {
                log_copy(objects, log, (runtime, device), stream, (dst, src, bytes))
            }
            NodeOp::Fill { dst, value, count } => {
                let bytes = count * value.width();
                if pageable(runtime, &objects.buffers, (dst, bytes), device) {
                    return Ok(Logged::EndsSequence);
                }
                let fill = Op::Fill {
                    device,
                    stream,
                    dst,
                    value,
                    count,
                };
                log.ops.push(fill);
                Ok(Logged::Yes)
            }
            NodeOp::Launch { .. } => Ok(Logged::EndsSequence),
        }
    })
}

/// Logs a copy of `bytes` from `src` to `dst`: a pageable source is copied into staging now;
/// a pageable destination gets staging, copied out when the sequence ends. A pageable source
/// that an earlier copy of the sequence writes ends the sequence instead.
fn log_copy<B: ClientBackend>(
    objects: &Objects<B>,
    log: &mut Deferred<B>,
    (runtime, device): (&'static Runtime<B>, DeviceId),
    stream: u64,
    (dst, src, bytes): (usize, usize, usize),
) -> Result<Logged, CapiError> {
    let host_src = pageable(runtime, &objects.buffers, (src, bytes), device);
    let written = |op: &Op| {
        matches!(op, Op::Copy { copy, .. }
            if copy.staged_dst.is_some() && overlap(copy.dst, copy.bytes, src, bytes))
    };
    if host_src && log.ops.iter().any(written) {
        return Ok(Logged::EndsSequence);
    }
    let host_dst = pageable(runtime, &objects.buffers, (dst, bytes), device);
    let src = match host_src {
        true => {
            let staging = log.stage(runtime, device, bytes)?;
            // SAFETY: `src` is the program's host memory of `bytes` bytes (the ABI's
            // contract for a copy's source, read at the call as the driver reads pageable
            // memory); the staging is pinned host memory of at least `bytes` bytes that no
            // work uses now (`stage` waited for it).
            unsafe { core::ptr::copy_nonoverlapping(src as *const u8, staging as *mut u8, bytes) };
            staging
        }
        false => src,
    };
    let staged_dst = match host_dst {
        true => Some(log.stage(runtime, device, bytes)?),
        false => None,
    };
    let copy = Transfer {
        dst,
        src,
        bytes,
        host_src,
        staged_dst,
    };
    log.ops.push(Op::Copy {
        device,
        stream,
        copy,
    });
    Ok(Logged::Yes)
}

/// The key of `ops` and their graph's nodes with the nodes each runs after; `None` when the
/// sequence has fewer than [`MIN_NODES`] copies and memsets, or spans several devices.
fn graph_of<B: ClientBackend>(ops: &[Op], launches: &[Launch<B>]) -> Option<(Key, Vec<Node>)> {
    let mut streams: HashMap<u64, u32> = HashMap::new();
    let mut events: HashMap<u64, u32> = HashMap::new();
    let local = |map: &mut HashMap<u64, u32>, handle: u64| {
        let next = map.len() as u32;
        *map.entry(handle).or_insert(next)
    };
    let mut frontier: HashMap<u64, Vec<NodeId>> = HashMap::new();
    let mut recorded: HashMap<u64, Vec<NodeId>> = HashMap::new();
    let (mut key, mut nodes, mut device) = (Vec::new(), Vec::new(), None);
    for op in ops {
        let mut launch = None;
        if let Op::Copy { device: d, .. }
        | Op::Fill { device: d, .. }
        | Op::Launch { device: d, .. } = *op
            && *device.get_or_insert(d) != d
        {
            return None;
        }
        let (node, stream) = match *op {
            Op::Copy { stream, copy, .. } => {
                key.push(KeyOp::Copy {
                    stream: local(&mut streams, stream),
                    bytes: copy.bytes,
                    host_dst: copy.staged_dst.is_some(),
                    host_src: copy.host_src,
                });
                let (dst, src, bytes) = (copy.target(), copy.src, copy.bytes);
                (NodeOp::Copy { dst, src, bytes }, stream)
            }
            Op::Fill {
                stream,
                dst,
                value,
                count,
                ..
            } => {
                let width = value.width();
                key.push(KeyOp::Fill {
                    stream: local(&mut streams, stream),
                    width,
                    count,
                });
                (NodeOp::Fill { dst, value, count }, stream)
            }
            Op::Launch {
                stream,
                function,
                dims,
                index,
                ..
            } => {
                key.push(KeyOp::Launch {
                    stream: local(&mut streams, stream),
                    function,
                    grid: dims.grid,
                    block: dims.block,
                    shared: dims.dynamic_workgroup_bytes,
                });
                let args = launches.get(index)?.1.iter().map(arg_value).collect();
                launch = Some(index);
                let node = NodeOp::Launch {
                    kernel: (),
                    dims,
                    args,
                };
                (node, stream)
            }
            Op::Record { event, stream } => {
                key.push(KeyOp::Record {
                    event: local(&mut events, event),
                    stream: local(&mut streams, stream),
                });
                let at = frontier.get(&stream).cloned().unwrap_or_default();
                recorded.insert(event, at);
                continue;
            }
            Op::Wait { stream, event } => {
                key.push(KeyOp::Wait {
                    stream: local(&mut streams, stream),
                    event: local(&mut events, event),
                });
                if let Some(at) = recorded.get(&event) {
                    frontier.entry(stream).or_default().extend(at);
                }
                continue;
            }
            Op::DestroyEvent { .. } | Op::Free { .. } => continue,
        };
        let after = frontier.remove(&stream).unwrap_or_default();
        frontier.insert(stream, vec![NodeId(nodes.len() as u32)]);
        nodes.push((node, after, launch));
    }
    // One node replayed is one call still, and no cheaper than the call itself.
    if nodes.len() < MIN_NODES {
        return None;
    }
    Some((device?, key)).zip(Some(nodes))
}

/// Ends the current sequence before a call that is not a synchronisation, which then goes on:
/// a failure of the sequence's calls (printed with their names when issued) becomes the
/// thread's last error, as it would have been at its own call without the mode.
pub(super) fn flush_before<B: ClientBackend>(session: &'static Session<B>) {
    if let Err(error) = flush(session) {
        set_last_error(&error);
    }
}

/// Ends the current sequence: replays it as a graph when its key was seen before, else
/// issues its calls in order. Returns the first failure of the issued calls. With the mode
/// off, there is none, and the objects are not locked.
pub(super) fn flush<B: ClientBackend>(session: &'static Session<B>) -> Result<(), CapiError> {
    if !session.mlir.graph_mode() {
        return Ok(());
    }
    let mut objects = session.mlir.lock();
    let Some(log) = objects.graphs.as_mut() else {
        return Ok(());
    };
    if log.ops.is_empty() {
        return Ok(());
    }
    let ops = core::mem::take(&mut log.ops);
    let freed = core::mem::take(&mut log.freed);
    log.doomed.clear();
    log.staged = 0;
    let launches = core::mem::take(&mut log.launches);
    let planned = graph_of(&ops, &launches);
    let mut freed = Some(freed);
    if let Some((key, nodes)) = planned
        && let Ok(replayed) = replay(
            session,
            &mut objects,
            (&ops, &launches),
            key,
            &nodes,
            &mut freed,
        )
    {
        return replayed;
    }
    let freed = freed.unwrap_or_default();
    if let Some(log) = objects.graphs.as_mut() {
        log.stats.issued += 1;
    }
    // The calls are issued through the code that serves them without the mode, unlocked; the
    // program's trace already noted them at their calls.
    for (ptr, buffer) in freed {
        objects.buffers.insert(ptr, buffer);
    }
    let trace = objects.trace.take();
    drop(objects);
    let issued = issue(session, &ops, &launches);
    let mut objects = session.mlir.lock();
    objects.trace = trace;
    let copied_out = after_issue(session.runtime(), &mut objects, &ops);
    issued.and(copied_out)
}

/// Turns the mode on or off (for tests): its flag and its log; turning it off releases the
/// log as shutdown does (the unsynchronised sequence dropped).
#[cfg(test)]
pub(super) fn set_mode<B: ClientBackend>(
    mlir: &super::objects::MlirObjects<B>,
    runtime: &Runtime<B>,
    on: bool,
) -> Result<(), CapiError> {
    let mut objects = mlir.lock();
    mlir.set_graph_mode(on);
    match (on, objects.graphs.take()) {
        (true, log) => {
            objects.graphs = Some(log.unwrap_or_else(|| Box::new(Deferred::new())));
            Ok(())
        }
        (false, Some(log)) => (*log).release(runtime),
        (false, None) => Ok(()),
    }
}
