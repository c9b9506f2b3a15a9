//! Streams and events: an MLIR stream as the token at its tail plus queued event waits, an
//! event as a branch of a recorded tail, and the calls that create, order and wait for them.

use std::ffi::c_void;
use std::sync::MutexGuard;

use gpu_runtime::Error;
use gpu_runtime::id::{EventId, StreamId};
use gpu_runtime::runtime::Runtime;
use gpu_runtime::token::{Token, TraceOp};

use crate::shared::{CapiError, ClientBackend, Session};

use super::graphs::{self, Deferral, Op};
use super::objects::{Allocations, Objects, Stream};
use super::session::{device, on_session};

/// What an operation takes from a stream: its queued waits and its tail.
impl Stream {
    /// Moves its dependencies (the queued waits, then the tail) to the end of `after`.
    fn take_into(&mut self, after: &mut Vec<Token>) {
        after.append(&mut self.waits);
        after.extend(self.tail.take());
    }

    /// Gives back what [`Stream::take_into`] moved to `after` when the operation was refused
    /// (the runtime leaves a refused operation's dependencies untouched), emptying `after`.
    fn give_back(&mut self, after: &mut Vec<Token>) {
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
fn fork_two(
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

/// The streams of a session: checks, and the idle ones dropped once done.
impl<B: ClientBackend> Objects<B> {
    /// Refuses a stream handle that is neither null (no stream: the call is synchronous) nor a
    /// live stream of this session.
    pub(super) fn check_stream(&self, handle: u64) -> Result<(), CapiError> {
        match handle {
            0 => Ok(()),
            _ => Ok(self.streams.get(handle).map(drop)?),
        }
    }

    /// Drops the branches of idle streams (join inputs the program never uses again) whose
    /// work is done, oldest first: every one a synchronisation has already covered, asking
    /// the driver nothing; and while more than [`IDLE_UNASKED`] are idle, the oldest other one
    /// if its event has completed (one query). A stream still running goes back to the front;
    /// one whose query failed keeps its branch (the failure is seen through the event's own
    /// branch, or at shutdown) and leaves the queue.
    fn prune_idle(&mut self, runtime: &Runtime<B>) {
        while let Some(oldest) = self.idle.pop_front() {
            let Some(stream) = self.streams.get_mut(oldest).ok().filter(|s| s.idle) else {
                continue;
            };
            let Some(tail) = stream.tail.take() else {
                stream.idle = false;
                continue;
            };
            let covered = runtime.completed(&tail).unwrap_or(false);
            if !covered && self.idle.len() < IDLE_UNASKED {
                stream.tail = Some(tail);
                self.idle.push_front(oldest);
                return;
            }
            let id = tail.id();
            match runtime.wait_if_done(tail) {
                Ok(None) => stream.idle = false,
                Ok(Some(pending)) => {
                    stream.tail = Some(pending);
                    self.idle.push_front(oldest);
                    return;
                }
                // The runtime hands a token back unchanged when it cannot tell.
                Err(_) => {
                    stream.tail = Some(Token::from_id(id));
                    stream.idle = false;
                    return;
                }
            }
            if !covered {
                // One query per stream creation at most.
                return;
            }
        }
    }
}

/// How many idle streams may wait, unasked, for a synchronisation to cover them before each
/// stream creation asks the driver about the oldest: a program that synchronises at least
/// once per this many join inputs never pays a query, one that never does holds about this
/// many more branches than it would asking at every creation.
pub(super) const IDLE_UNASKED: usize = 16;

/// A handle's name in the program's trace (the low bits of its serial number).
pub(super) fn stream_id(handle: u64) -> StreamId {
    StreamId(handle as u32)
}

/// An event handle's name in the program's trace.
pub(super) fn event_id(handle: u64) -> EventId {
    EventId(handle as u32)
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
fn end_all(
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

fn stream_create<B: ClientBackend>(session: &'static Session<B>) -> Result<u64, CapiError> {
    let mut objects = session.mlir.lock();
    objects.prune_idle(session.runtime());
    let handle = objects.streams.insert(Stream::default())?;
    objects.note(|| TraceOp::CreateStream {
        stream: stream_id(handle),
        device: device(),
    });
    Ok(handle)
}

fn stream_destroy<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    let flushed = graphs::flush(session);
    stream_destroy_now(session, stream).and(flushed)
}

/// Destroys `stream`; its pending work goes on (CUDA allows destroying a busy stream) and its
/// tokens are released without a wait, as the program chose not to wait for them. A failure
/// to release one is reported; the stream is destroyed all the same.
pub(super) fn stream_destroy_now<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    let entry = objects.streams.remove(stream)?;
    objects.note(|| TraceOp::DestroyStream {
        stream: stream_id(stream),
    });
    drop(objects);
    let runtime = session.runtime();
    end_all(entry.tail.into_iter().chain(entry.waits), |token| {
        runtime.release(token)
    })
}

fn stream_synchronize<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    let flushed = graphs::flush(session);
    stream_synchronize_now(session, stream).and(flushed)
}

/// Waits for everything on `stream` (nothing for the null stream); every token is waited for,
/// and the first failure reported.
pub(super) fn stream_synchronize_now<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
) -> Result<(), CapiError> {
    let mut objects = session.mlir.lock();
    // One dependency (the tail, as a rule) is waited for with the spare `Vec` left in place;
    // several take it along.
    let (several, last) = match stream {
        0 => (Vec::new(), None),
        _ => {
            let Objects { streams, spare, .. } = &mut *objects;
            let entry = streams.get_mut(stream)?;
            entry.idle = false;
            entry.take_into(spare);
            let taken = match spare.len() {
                0 | 1 => (Vec::new(), spare.pop()),
                _ => (core::mem::take(spare), None),
            };
            objects.note(|| TraceOp::SynchronizeStream {
                stream: stream_id(stream),
            });
            taken
        }
    };
    drop(objects);
    let runtime = session.runtime();
    end_all(several.into_iter().chain(last), |token| runtime.wait(token))
}

fn stream_wait_event<B: ClientBackend>(
    session: &'static Session<B>,
    stream: u64,
    event: u64,
) -> Result<(), CapiError> {
    match graphs::defer_event_op(session, Op::Wait { stream, event }) {
        Deferral::Done(done) => done,
        Deferral::Off => stream_wait_event_now(session, stream, event),
    }
}

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

fn event_create<B: ClientBackend>(session: &'static Session<B>) -> Result<u64, CapiError> {
    let mut objects = session.mlir.lock();
    let handle = objects.events.insert(None)?;
    objects.note(|| TraceOp::CreateEvent {
        event: event_id(handle),
        device: device(),
    });
    Ok(handle)
}

fn event_destroy<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
) -> Result<(), CapiError> {
    match graphs::defer_event_op(session, Op::DestroyEvent { event }) {
        Deferral::Done(done) => done,
        Deferral::Off => event_destroy_now(session, event),
    }
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

fn event_synchronize<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
) -> Result<(), CapiError> {
    let flushed = graphs::flush(session);
    event_synchronize_now(session, event).and(flushed)
}

pub(super) fn event_synchronize_now<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
) -> Result<(), CapiError> {
    let token = {
        let mut objects = session.mlir.lock();
        let token = objects.events.get_mut(event)?.take();
        objects.note(|| TraceOp::SynchronizeEvent {
            event: event_id(event),
        });
        token
    };
    let runtime = session.runtime();
    end_all(token, |token| runtime.wait(token))
}

fn event_record<B: ClientBackend>(
    session: &'static Session<B>,
    event: u64,
    stream: u64,
) -> Result<(), CapiError> {
    match graphs::defer_event_op(session, Op::Record { event, stream }) {
        Deferral::Done(done) => done,
        Deferral::Off => event_record_now(session, event, stream),
    }
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

// ----- the exported ABI -----

/// Creates a stream (no driver call: its work runs on pooled driver streams).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuStreamCreate() -> *mut c_void {
    on_session!("mgpuStreamCreate", 0, |s| stream_create(s)) as *mut c_void
}

/// Destroys a stream; work on it goes on, and its driver stream goes back to the pool.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuStreamDestroy(stream: *mut c_void) {
    on_session!("mgpuStreamDestroy", (), |s| stream_destroy(
        s,
        stream as u64
    ))
}

/// Blocks until the work on `stream` (and the waits queued on it) has finished.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuStreamSynchronize(stream: *mut c_void) {
    on_session!("mgpuStreamSynchronize", (), |s| stream_synchronize(
        s,
        stream as u64
    ))
}

/// Makes later work on `stream` wait for `event`'s last record.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuStreamWaitEvent(stream: *mut c_void, event: *mut c_void) {
    on_session!("mgpuStreamWaitEvent", (), |s| stream_wait_event(
        s,
        stream as u64,
        event as u64
    ))
}

/// Creates an event (no driver call: a recorded one uses a pooled driver event).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuEventCreate() -> *mut c_void {
    on_session!("mgpuEventCreate", 0, |s| event_create(s)) as *mut c_void
}

/// Destroys an event; its driver event goes back to the pool once nothing waits on it.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuEventDestroy(event: *mut c_void) {
    on_session!("mgpuEventDestroy", (), |s| event_destroy(s, event as u64))
}

/// Blocks until `event`'s last record has completed.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuEventSynchronize(event: *mut c_void) {
    on_session!("mgpuEventSynchronize", (), |s| event_synchronize(
        s,
        event as u64
    ))
}

/// Records `event` at `stream`'s tail.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuEventRecord(event: *mut c_void, stream: *mut c_void) {
    on_session!("mgpuEventRecord", (), |s| event_record(
        s,
        event as u64,
        stream as u64
    ))
}
