//! How the graph mode ends a sequence (`mlir::graphs`): replayed as an instantiated graph
//! with the streams' and events' tokens moved past it, or issued call by call.

use gpu_runtime::DeviceId;
use gpu_runtime::backend::FillValue;
use gpu_runtime::backend::graph::{NodeId, NodeOp};
use std::ffi::c_void;

use gpu_runtime::runtime::{Arg, Buffer, Graph, Runtime, Span};
use gpu_runtime::token::Token;

use crate::shared::{CapiError, ClientBackend, Session};

use super::core_ops::{
    copy_on, event_destroy_now, event_record_now, fill_on, mem_free_now, on_stream,
    stream_wait_event_now,
};
use super::graph_log::{Key, Launch, Node, Op};
use super::objects::Objects;

/// The sequence cannot be replayed as a graph: it is issued call by call (nothing of it ran,
/// and the tokens it would have waited for are as before or waited for).
pub(super) struct Fallback;

/// Allocations a sequence freed, by address.
pub(super) type Freed<B> = Vec<(usize, Buffer<'static, B>)>;

/// The stream an operation runs on, if any.
fn stream_of(op: &Op) -> Option<u64> {
    match *op {
        Op::Copy { stream, .. }
        | Op::Fill { stream, .. }
        | Op::Launch { stream, .. }
        | Op::Record { stream, .. }
        | Op::Wait { stream, .. }
        | Op::Free { stream, .. } => Some(stream),
        Op::DestroyEvent { .. } => None,
    }
}

/// A raw span of the graph's memory.
fn raw(address: usize, len: usize) -> Span<'static> {
    // SAFETY: the sequence's addresses: the program's allocations (freed only after the
    // replays that use them: frees are ordered after the replay's token), staging the log owns
    // (replaced only once no work uses it), or the program's memory, valid by the ABI's
    // contract until the work completes.
    unsafe { Span::from_raw(address, len) }
}

/// Records and instantiates the graph of `nodes` on `device`, with the nodes' parameters
/// (a launch's kernel and arguments in `launches`).
fn record<B: ClientBackend>(
    runtime: &'static Runtime<B>,
    device: DeviceId,
    nodes: &[Node],
    launches: &[Launch<B>],
) -> Result<Graph<'static, B>, Fallback> {
    let mut recorder = runtime.record_graph(device).map_err(|_| Fallback)?;
    for (node, after, launch) in nodes {
        let added = match (node, launch.and_then(|index| launches.get(index))) {
            (&NodeOp::Copy { dst, src, bytes }, _) => {
                recorder.copy(raw(dst, bytes), raw(src, bytes), after)
            }
            (&NodeOp::Fill { dst, value, count }, _) => {
                recorder.fill(raw(dst, count * value.width()), value, after)
            }
            // SAFETY: the program's launch as it made it (`mgpuLaunchKernel`'s contract: the
            // memory the kernel reaches stays valid until it has run; the sequence's frees
            // are ordered after the replay).
            (&NodeOp::Launch { dims, .. }, Some((kernel, args))) => unsafe {
                recorder.launch(kernel, dims, args, after)
            },
            (NodeOp::Launch { .. }, None) => return Err(Fallback),
        };
        added.map_err(|_| Fallback)?;
    }
    recorder.instantiate().map_err(|_| Fallback)
}

/// Makes the cached graph of `key` (or a new one, for a key seen before) ready with `nodes`'
/// parameters; `Fallback` for a key seen for the first time or a failure.
fn ready<B: ClientBackend>(
    runtime: &'static Runtime<B>,
    objects: &mut Objects<B>,
    key: Key,
    (nodes, launches): (&[Node], &[Launch<B>]),
) -> Result<(), Fallback> {
    let log = objects.graphs.as_mut().ok_or(Fallback)?;
    if let Some(cached) = log.lookup(&key) {
        let (graph, params) = cached.parts();
        let mut updated = 0;
        let mut failed = false;
        for (index, ((node, _, launch), now)) in nodes.iter().zip(params.iter_mut()).enumerate() {
            if node == now {
                continue;
            }
            let id = NodeId(index as u32);
            let set = match (node, launch.and_then(|index| launches.get(index))) {
                (&NodeOp::Copy { dst, src, bytes }, _) => {
                    graph.set_copy(id, raw(dst, bytes), raw(src, bytes))
                }
                (&NodeOp::Fill { dst, value, count }, _) => {
                    graph.set_fill(id, raw(dst, count * value.width()), value)
                }
                // SAFETY: as in `record`.
                (&NodeOp::Launch { dims, .. }, Some((kernel, args))) => unsafe {
                    graph.set_launch(id, kernel, dims, args)
                },
                (NodeOp::Launch { .. }, None) => Err(gpu_runtime::Error::GraphNodeKind {
                    node: id.0,
                    recorded: now.kind(),
                    given: "launch",
                }),
            };
            if set.is_err() {
                failed = true;
                break;
            }
            *now = node.clone();
            updated += 1;
        }
        log.stats.updates += updated;
        if failed {
            log.stats.failures += 1;
            log.evict_last();
            return Err(Fallback);
        }
        return Ok(());
    }
    if !log.seen_before(&key) {
        return Err(Fallback);
    }
    match record(runtime, key.0, nodes, launches) {
        Ok(graph) => {
            log.stats.instantiated += 1;
            log.insert(
                key,
                graph,
                nodes.iter().map(|(node, ..)| node.clone()).collect(),
            );
            Ok(())
        }
        Err(_) => {
            log.stats.failures += 1;
            Err(Fallback)
        }
    }
}

/// Waits on the host for `tokens` (the dependencies of a replay that did not happen), so the
/// sequence issued instead may drop them.
fn wait_all<B: ClientBackend>(runtime: &Runtime<B>, tokens: &mut Vec<Token>) {
    for token in tokens.drain(..) {
        if let Err(error) = runtime.wait(token) {
            eprintln!("gpu-runtime (mlir graphs): {error}");
        }
    }
}

/// Replays `ops` as the graph of `key` (its `nodes` with their dependencies): the replay runs
/// after the tokens of every stream the sequence names and of the events it waits for that
/// it did not record, and becomes the tail of those streams and the record of the events it
/// recorded; `freed` is freed after it, and host destinations are copied out once it is done.
/// `Fallback` leaves `ops` to be issued (and `freed` in place); otherwise the first failure
/// once the replay was launched.
pub(super) fn replay<B: ClientBackend>(
    session: &'static Session<B>,
    objects: &mut Objects<B>,
    (ops, launches): (&[Op], &[Launch<B>]),
    key: Key,
    nodes: &[Node],
    freed: &mut Option<Freed<B>>,
) -> Result<Result<(), CapiError>, Fallback> {
    let runtime = session.runtime();
    ready(runtime, objects, key, (nodes, launches))?;
    let mut touched: Vec<u64> = Vec::new();
    for stream in ops.iter().filter_map(stream_of) {
        if !touched.contains(&stream) {
            touched.push(stream);
        }
    }
    // The events waited for before the sequence records them: each keeps one branch.
    let mut after = Vec::new();
    let mut recorded: Vec<u64> = Vec::new();
    let mut forked: Vec<u64> = Vec::new();
    for op in ops {
        match *op {
            Op::Record { event, .. } => recorded.push(event),
            Op::Wait { event, .. } if !recorded.contains(&event) && !forked.contains(&event) => {
                forked.push(event);
                let slot = objects.events.get_mut(event).map_err(|_| Fallback)?;
                let Some(token) = slot.take() else { continue };
                let id = token.id();
                let mut branches = Vec::with_capacity(2);
                if runtime.fork_into(token, 2, &mut branches).is_err() || branches.len() != 2 {
                    *slot = Some(Token::from_id(id));
                    wait_all(runtime, &mut branches);
                    wait_all(runtime, &mut after);
                    return Err(Fallback);
                }
                after.extend(branches.pop());
                *slot = branches.pop();
            }
            _ => {}
        }
    }
    for &stream in &touched {
        let Ok(entry) = objects.streams.get_mut(stream) else {
            wait_all(runtime, &mut after);
            return Err(Fallback);
        };
        after.append(&mut entry.waits);
        after.extend(entry.tail.take());
    }
    let launched = objects
        .graphs
        .as_ref()
        .and_then(|log| log.last())
        .map(|graph| graph.launch(&mut after));
    let done = match launched {
        Some(Ok(done)) => done,
        Some(Err(_)) | None => {
            wait_all(runtime, &mut after);
            if let Some(log) = objects.graphs.as_mut() {
                log.stats.failures += 1;
            }
            return Err(Fallback);
        }
    };
    let mut first: Result<(), CapiError> = Ok(());
    let mut note = |result: Result<(), CapiError>| {
        if first.is_ok() {
            first = result;
        }
    };
    let freed = freed.take().unwrap_or_default();
    finish(session, objects, ops, (&touched, freed), done, &mut note);
    if let Some(log) = objects.graphs.as_mut() {
        log.stats.replays += 1;
    }
    Ok(first)
}

/// Moves the streams and events of a replayed sequence (`touched` its streams) past its token
/// `done`, frees what it freed after it, releases the events it destroyed, notes the staging
/// busy, and copies host destinations out.
fn finish<B: ClientBackend>(
    session: &'static Session<B>,
    objects: &mut Objects<B>,
    ops: &[Op],
    (touched, freed): (&[u64], Freed<B>),
    done: Token,
    note: &mut impl FnMut(Result<(), CapiError>),
) {
    let runtime = session.runtime();
    let destroyed: Vec<u64> = ops
        .iter()
        .filter_map(|op| match *op {
            Op::DestroyEvent { event } => Some(event),
            _ => None,
        })
        .collect();
    let mut live_records: Vec<u64> = Vec::new();
    for op in ops {
        if let Op::Record { event, .. } = *op
            && !destroyed.contains(&event)
            && !live_records.contains(&event)
        {
            live_records.push(event);
        }
    }
    let copy_outs = ops
        .iter()
        .any(|op| matches!(op, Op::Copy { copy, .. } if copy.staged_dst.is_some()));
    let mut branches = Vec::new();
    if copy_outs {
        // The program's memory is written once the replay is done: waited for here, so the
        // streams and events it ends need no token (and no staging is busy), and its frees
        // are plain ones (the cache hands the same blocks to the next occurrence).
        note(runtime.wait(done).map_err(Into::into));
        for (_, buffer) in freed.into_iter().rev() {
            note(runtime.free(buffer).map_err(Into::into));
        }
    } else {
        for (_, buffer) in freed {
            note(runtime.free_after(buffer, &done).map_err(Into::into));
        }
        let count = touched.len() + live_records.len() + 1;
        let id = done.id();
        branches.reserve(count);
        if let Err(error) = runtime.fork_into(done, count, &mut branches) {
            // Done on the host instead: the streams and events need no token then.
            note(Err(error.into()));
            note(runtime.wait(Token::from_id(id)).map_err(Into::into));
        }
    }
    let mut branches = branches.into_iter();
    for &stream in touched {
        let idle = ops
            .iter()
            .rev()
            .find(|op| stream_of(op) == Some(stream))
            .is_some_and(|op| matches!(op, Op::Record { .. }));
        if let Ok(entry) = objects.streams.get_mut(stream) {
            entry.tail = branches.next();
            let went_idle = idle && !entry.idle && entry.tail.is_some();
            entry.idle = idle && entry.tail.is_some();
            if went_idle {
                objects.idle.push_back(stream);
            }
        }
    }
    for event in live_records {
        if let Ok(slot) = objects.events.get_mut(event) {
            let old = core::mem::replace(slot, branches.next());
            if let Some(old) = old {
                note(runtime.release(old).map_err(Into::into));
            }
        }
    }
    for event in destroyed {
        if let Ok(Some(token)) = objects.events.remove(event) {
            note(runtime.release(token).map_err(Into::into));
        }
    }
    if let (Some(busy), Some(log)) = (branches.next(), objects.graphs.as_mut()) {
        log.busy().push(busy);
    }
    if copy_outs {
        copy_out(ops);
    }
}

/// Copies each pageable destination of `ops` out of its staging.
///
/// Only once the work that wrote the staging is done.
fn copy_out(ops: &[Op]) {
    for op in ops {
        if let Op::Copy { copy, .. } = op
            && let Some(staging) = copy.staged_dst
        {
            let (dst, bytes) = (copy.dst, copy.bytes);
            // SAFETY: the work that wrote `bytes` bytes of staging is done (the callers wait
            // for it); `dst` is the program's host memory of `bytes` bytes, by the ABI's
            // contract for a copy's destination.
            unsafe { core::ptr::copy_nonoverlapping(staging as *const u8, dst as *mut u8, bytes) };
        }
    }
}

/// A launch argument's value as the program passed it: its bytes first in an 8-byte slot.
fn packed(arg: &Arg<'_>) -> [u8; 8] {
    let mut slot = [0u8; 8];
    match *arg {
        Arg::U32(value) => slot[..4].copy_from_slice(&value.to_ne_bytes()),
        Arg::F32(value) => slot[..4].copy_from_slice(&value.to_ne_bytes()),
        Arg::U64(value) => slot = value.to_ne_bytes(),
        Arg::Span(span) => slot = (span.address() as u64).to_ne_bytes(),
    }
    slot
}

/// The name of the call an operation came from, for its failures.
fn call_name(op: &Op) -> &'static str {
    match op {
        Op::Copy { .. } => "mgpuMemcpy",
        Op::Fill {
            value: FillValue::U16(_),
            ..
        } => "mgpuMemset16",
        Op::Fill { .. } => "mgpuMemset32",
        Op::Launch { .. } => "mgpuLaunchKernel",
        Op::Record { .. } => "mgpuEventRecord",
        Op::Wait { .. } => "mgpuStreamWaitEvent",
        Op::DestroyEvent { .. } => "mgpuEventDestroy",
        Op::Free { .. } => "mgpuMemFree",
    }
}

/// Issues `ops` in order through the code that serves them without the mode (the objects
/// unlocked); each failure is printed with its call's name, and the first returned.
pub(super) fn issue<B: ClientBackend>(
    session: &'static Session<B>,
    ops: &[Op],
    launches: &[Launch<B>],
) -> Result<(), CapiError> {
    let mut first = Ok(());
    for op in ops {
        let done = match *op {
            Op::Copy {
                device,
                stream,
                copy,
            } => {
                let ends = (copy.target(), copy.src, copy.bytes);
                copy_on(session, device, stream, ends, |_| Ok(()))
            }
            Op::Fill {
                device,
                stream,
                dst,
                value,
                count,
            } => fill_on(session, device, stream, (dst, value, count), |_| Ok(())),
            Op::Launch {
                stream,
                dims,
                index,
                ..
            } => match launches.get(index) {
                Some((kernel, args)) => {
                    // The program's parameter array again, from the values copied at the call.
                    let mut values: Vec<[u8; 8]> = args.iter().map(packed).collect();
                    let mut params: Vec<*mut c_void> =
                        values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
                    on_stream(
                        session,
                        stream,
                        |_| Ok(()),
                        |_, after| {
                            let params = params.as_mut_ptr();
                            // SAFETY: one pointer per parameter, each to its value as the
                            // program passed it (copied at the call), alive across the call;
                            // the memory the kernel reaches is `mgpuLaunchKernel`'s contract.
                            let launched = unsafe { kernel.launch_packed(dims, params, after) };
                            Ok((launched?, ()))
                        },
                    )
                }
                None => Ok(()),
            },
            Op::Record { event, stream } => event_record_now(session, event, stream),
            Op::Wait { stream, event } => stream_wait_event_now(session, stream, event),
            Op::DestroyEvent { event } => event_destroy_now(session, event),
            Op::Free { stream, ptr } => mem_free_now(session, ptr, stream),
        };
        if let Err(error) = done {
            eprintln!("{}: {error}", call_name(op));
            if first.is_ok() {
                first = Err(error);
            }
        }
    }
    first
}

/// After `ops` were issued: the streams that copied into staging for pageable destinations
/// are waited for and the staging copied out (so no write into pageable memory is in flight
/// after a sequence); the staging the others read stays busy until their streams' work is done
/// (one branch of each such stream's tail; waited for on the host when it cannot be forked).
/// Returns the first failure to wait.
pub(super) fn after_issue<B: ClientBackend>(
    runtime: &Runtime<B>,
    objects: &mut Objects<B>,
    ops: &[Op],
) -> Result<(), CapiError> {
    let (mut written, mut read): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    for op in ops {
        if let Op::Copy { stream, copy, .. } = *op {
            if copy.staged_dst.is_some() && !written.contains(&stream) {
                written.push(stream);
            } else if copy.host_src && !read.contains(&stream) {
                read.push(stream);
            }
        }
    }
    let mut first = Ok(());
    for stream in &written {
        let tail = objects
            .streams
            .get_mut(*stream)
            .ok()
            .and_then(|s| s.tail.take());
        if let Some(Err(error)) = tail.map(|tail| runtime.wait(tail)) {
            first = first.and(Err(error.into()));
        }
    }
    if !written.is_empty() {
        copy_out(ops);
    }
    let mut busy = Vec::new();
    for stream in read.iter().filter(|s| !written.contains(s)) {
        let Ok(entry) = objects.streams.get_mut(*stream) else {
            continue;
        };
        let Some(tail) = entry.tail.take() else {
            continue;
        };
        let id = tail.id();
        let mut branches = Vec::with_capacity(2);
        match runtime.fork_into(tail, 2, &mut branches) {
            Ok(()) => {
                busy.extend(branches.pop());
                entry.tail = branches.pop();
            }
            Err(_) => {
                if let Err(error) = runtime.wait(Token::from_id(id)) {
                    first = first.and(Err(error.into()));
                }
            }
        }
    }
    if let Some(log) = objects.graphs.as_mut() {
        log.busy().append(&mut busy);
    }
    first
}
