//! The stream operations every path issues through: an operation in a stream's order, event
//! records and waits, frees, copies and memsets, with no graph mode (which issues through them).

use std::sync::MutexGuard;

use gpu_runtime::backend::FillValue;
use gpu_runtime::id::{EventId, StreamId};
use gpu_runtime::runtime::{Runtime, Span};
use gpu_runtime::token::{Token, TraceOp};
use gpu_runtime::{DeviceId, Error};

use crate::shared::{CapiError, ClientBackend, Session};

use super::objects::{Allocations, Objects, Stream};
use super::session::device;

/// What an operation takes from a stream: its queued waits and its tail.
impl Stream {
    /// Moves its dependencies (the queued waits, then the tail) to the end of `after`.
    pub(super) fn take_into(&mut self, after: &mut Vec<Token>) {
        after.append(&mut self.waits);
        after.extend(self.tail.take());
    }

    /// Gives back what [`Stream::take_into`] moved to `after` when the operation was refused
    /// (the runtime leaves a refused operation's dependencies untouched), emptying `after`.
    pub(super) fn give_back(&mut self, after: &mut Vec<Token>) {
        self.tail = after.pop();
        self.waits.append(after);
    }

    /// Its dependencies as one token (the only one, several joined, or none), through
    /// `spare`'s room (left empty). A refused join gives them back.
    pub(super) fn take_point<B: ClientBackend>(
        &mut self,
        runtime: &Runtime<B>,
        spare: &mut Vec<Token>,
    ) -> Result<Option<Token>, Error> {
        self.take_into(spare);
        if spare.len() < 2 {
            return Ok(spare.pop());
        }
        match runtime.join(spare) {
            Ok(point) => Ok(Some(point)),
            Err(error) => {
                self.give_back(spare);
                Err(error)
            }
        }
    }
}

/// Forks `token` into two with `fork` (the runtime's `fork_into` or `fork_detached_into`),
/// through `spare`'s room (left empty), so nothing is allocated.
pub(super) fn fork_two(
    spare: &mut Vec<Token>,
    token: Token,
    fork: impl FnOnce(Token, &mut Vec<Token>) -> Result<(), Error>,
) -> Result<[Token; 2], Error> {
    let forked = fork(token, spare).map(|()| match (spare.pop(), spare.pop()) {
        (Some(second), Some(first)) => [first, second],
        _ => unreachable!("a fork into two"),
    });
    spare.clear();
    forked
}

/// Refuses `stream` unless it is null or live (for calls that do nothing else with it, or
/// check it before other work).
pub(super) fn check_stream<B: ClientBackend>(
    session: &Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    session.mlir.lock().check_stream(stream)
}

/// Runs one operation on `stream` (null: no stream, and the caller waits for it) under one
/// lock of the objects: a stream that is not live is refused first, then `check` refuses bad
/// arguments against the allocations, then `work` gets the allocations and the dependencies
/// and returns the new token. A refusal of any leaves the stream as it was.
pub(super) fn on_stream<B: ClientBackend, T>(
    session: &'static Session<B>,
    stream: u64,
    check: impl FnOnce(&Allocations<B>) -> Result<(), CapiError>,
    work: impl FnOnce(&mut Allocations<B>, &mut Vec<Token>) -> Result<(Token, T), CapiError>,
) -> Result<T, CapiError> {
    on_locked_stream(session, session.mlir.lock(), stream, check, work)
}

/// [`on_stream`] with the objects already locked by the caller.
pub(super) fn on_locked_stream<B: ClientBackend, T>(
    session: &'static Session<B>,
    mut objects: MutexGuard<'_, Objects<B>>,
    stream: u64,
    check: impl FnOnce(&Allocations<B>) -> Result<(), CapiError>,
    work: impl FnOnce(&mut Allocations<B>, &mut Vec<Token>) -> Result<(Token, T), CapiError>,
) -> Result<T, CapiError> {
    let Objects {
        streams,
        buffers,
        spare: after,
        ..
    } = &mut *objects;
    // The stream is looked up once: its entry is held while the operation runs.
    let mut entry = match stream {
        0 => None,
        _ => Some(streams.get_mut(stream)?),
    };
    if let Some(entry) = entry.as_deref_mut() {
        entry.take_into(after);
    }
    let done = check(buffers).and_then(|()| work(buffers, after));
    let (token, value) = match done {
        Ok(done) => done,
        Err(error) => {
            if let Some(entry) = entry {
                entry.give_back(after);
            }
            after.clear();
            return Err(error);
        }
    };
    after.clear();
    let Some(entry) = entry else {
        drop(objects);
        session.runtime().wait(token)?;
        return Ok(value);
    };
    entry.tail = Some(token);
    entry.idle = false;
    objects.note(|| TraceOp::Launch {
        stream: stream_id(stream),
        device: Some(device()),
    });
    Ok(value)
}

/// Ends every token with `end`, even after a failure, and reports the first failure.
pub(super) fn end_all(
    tokens: impl IntoIterator<Item = Token>,
    mut end: impl FnMut(Token) -> Result<(), Error>,
) -> Result<(), CapiError> {
    let mut first = Ok(());
    for token in tokens {
        let ended = end(token);
        if first.is_ok() {
            first = ended;
        }
    }
    Ok(first?)
}

/// Makes `stream`'s next operation wait for `event`'s record (a branch of it; nothing when
/// the event was never recorded or is done).
pub(super) fn stream_wait_event_now<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
    event: u64,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    let mut objects = session.mlir.lock();
    let Objects {
        streams,
        events,
        spare,
        ..
    } = &mut *objects;
    let entry = streams.get_mut(stream)?;
    let recorded = events.get_mut(event)?;
    if let Some(token) = recorded.take() {
        // Never recorded, or done: nothing to wait for. Else the event keeps one branch and
        // the stream waits on the other.
        let id = token.id();
        let [keep, branch] = match fork_two(spare, token, |t, b| runtime.fork_into(t, 2, b)) {
            Ok(branches) => branches,
            Err(error) => {
                *recorded = Some(Token::from_id(id));
                return Err(error.into());
            }
        };
        *recorded = Some(keep);
        entry.waits.push(branch);
        entry.idle = false;
    }
    objects.note(|| TraceOp::Wait {
        stream: stream_id(stream),
        event: event_id(event),
    });
    Ok(())
}

/// Destroys `event`, releasing its branch; a failure to release it is reported, the event is
/// destroyed all the same.
pub(super) fn event_destroy_now<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
) -> Result<(), CapiError> {
    let token = {
        let mut objects = session.mlir.lock();
        let token = objects.events.remove(event)?;
        objects.note(|| TraceOp::DestroyEvent {
            event: event_id(event),
        });
        token
    };
    let runtime = session.runtime();
    end_all(token, |token| runtime.release(token))
}

/// Records `event` at `stream`'s tail. A refusal by the runtime gives the stream its
/// dependencies back; the event's previous record is released last, once the new one is in
/// place (a failure to release it is reported, the record stands).
pub(super) fn event_record_now<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
    stream: u64,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    let mut objects = session.mlir.lock();
    let Objects {
        streams,
        events,
        spare,
        idle,
        ..
    } = &mut *objects;
    let recorded = events.get_mut(event)?;
    // A null stream (no MLIR stream) is refused here, before anything changes.
    let entry = streams.get_mut(stream)?;
    let (for_event, for_stream) = match entry.take_point(runtime, spare)? {
        Some(point) => {
            let id = point.id();
            match fork_two(spare, point, |t, b| runtime.fork_detached_into(t, 2, b)) {
                Ok([for_event, for_stream]) => (Some(for_event), Some(for_stream)),
                Err(error) => {
                    entry.tail = Some(Token::from_id(id));
                    return Err(error.into());
                }
            }
        }
        None => (None, None),
    };
    let old = core::mem::replace(recorded, for_event);
    let went_idle = for_stream.is_some() && !entry.idle;
    entry.idle |= for_stream.is_some();
    entry.tail = for_stream;
    if went_idle {
        idle.push_back(stream);
    }
    objects.note(|| TraceOp::Record {
        event: event_id(event),
        stream: stream_id(stream),
    });
    drop(objects);
    end_all(old, |token| runtime.release(token))
}

/// A handle's name in the program's trace (the low bits of its serial number).
pub(super) fn stream_id(handle: u64) -> StreamId {
    StreamId(handle as u32)
}

/// An event handle's name in the program's trace.
pub(super) fn event_id(handle: u64) -> EventId {
    EventId(handle as u32)
}

/// Why `ptr`, given to free, is not the start of a live allocation of `mgpuMemAlloc`.
pub(super) fn not_allocated<B: ClientBackend>(buffers: &Allocations<B>, ptr: usize) -> CapiError {
    let inside = buffers
        .range(..ptr)
        .next_back()
        .filter(|(start, buffer)| ptr - **start < buffer.size());
    CapiError::InvalidArgument {
        what: "pointer to free",
        detail: match inside {
            Some((start, _)) => {
                format!("{ptr:#x} lies inside the allocation at {start:#x}; free its start")
            }
            None => format!("{ptr:#x} is no allocation of mgpuMemAlloc (or was freed already)"),
        },
    }
}

/// Frees an allocation of `mgpuMemAlloc` after `stream`'s work (at once with no stream), the
/// stream and the pointer checked first: `mgpuMemFree` without the graph mode (which issues a
/// deferred free through it).
pub(super) fn mem_free_now<B: ClientBackend>(
    session: &'static Session<B>,
    ptr: usize,
    stream: u64,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    let mut objects = session.mlir.lock();
    let Objects {
        streams,
        buffers,
        spare,
        ..
    } = &mut *objects;
    let entry = match stream {
        0 => None,
        _ => Some(streams.get_mut(stream)?),
    };
    if ptr == 0 {
        return Ok(()); // as upstream: freeing null does nothing
    }
    let Some(buffer) = buffers.remove(&ptr) else {
        return Err(not_allocated(buffers, ptr));
    };
    let Some(entry) = entry else {
        return Ok(runtime.free(buffer)?);
    };
    let tail = match entry.take_point(runtime, spare) {
        Ok(tail) => tail,
        Err(error) => {
            buffers.insert(ptr, buffer);
            return Err(error.into());
        }
    };
    let freed = match &tail {
        Some(tail) => runtime.free_after(buffer, tail),
        None => runtime.free(buffer),
    };
    entry.tail = tail;
    Ok(freed?)
}

/// Copies `bytes` from `src` to `dst` on `device` in `stream`'s order, once `check` accepts
/// the ranges (the graph mode issues a deferred copy through it, checked at its call).
pub(super) fn copy_on<B: ClientBackend>(
    session: &'static Session<B>,
    device: DeviceId,
    stream: u64,
    (dst, src, bytes): (usize, usize, usize),
    check: impl FnOnce(&Allocations<B>) -> Result<(), CapiError>,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    // SAFETY: the program's own pointers, valid until the copy completes (the ABI's contract:
    // MLIR orders its frees after the stream); the ranges are checked before the copy runs.
    let (to, from) = unsafe { (Span::from_raw(dst, bytes), Span::from_raw(src, bytes)) };
    on_stream(session, stream, check, |_, after| {
        Ok((runtime.copy(device, to, from, after)?, ()))
    })
}

/// Sets `count` elements at `dst` to `value` on `device` in `stream`'s order, once `check`
/// accepts the range (the graph mode issues a deferred memset through it).
pub(super) fn fill_on<B: ClientBackend>(
    session: &'static Session<B>,
    device: DeviceId,
    stream: u64,
    (dst, value, count): (usize, FillValue, usize),
    check: impl FnOnce(&Allocations<B>) -> Result<(), CapiError>,
) -> Result<(), CapiError> {
    let runtime = session.runtime();
    // SAFETY: as in `copy_on`.
    let to = unsafe { Span::from_raw(dst, count * value.width()) };
    on_stream(session, stream, check, |_, after| {
        Ok((runtime.fill_elements(device, to, value, after)?, ()))
    })
}
