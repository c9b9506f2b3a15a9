//! Streams and events: an MLIR stream as the token at its tail plus queued event waits, an
//! event as a branch of a recorded tail, and the calls that create, order and wait for them.

use std::ffi::c_void;

use gpu_runtime::runtime::Runtime;
use gpu_runtime::token::{Token, TraceOp};

use crate::shared::{CapiError, ClientBackend, Session};

use super::core_ops::{
    end_all, event_destroy_now, event_id, event_record_now, stream_id, stream_wait_event_now,
};
use super::graph_log::Op;
use super::graphs::{self, Deferral};
use super::objects::{Objects, Stream};
use super::session::{device, on_session};

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
