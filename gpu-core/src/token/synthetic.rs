//! Synthetic recorder-style traces of a long-running program, for the checker's memory test
//! and its end-to-end benchmark: any length, the same objects alive whatever the length.
//!
//! The program has two devices (one context each) and four threads. It declares the legacy
//! and per-thread default streams before their first use; keeps pools of streams and events
//! (created on first use, re-recorded many times, alive at exit, as PyTorch's are); creates
//! and destroys short-lived events whose handle values come back (as the driver reuses
//! them) and short-lived streams whose handles are always new (one per execution, as MLIR's
//! runtime wrappers create them); waits across devices; ends with `exit`. Some lines end with
//! a `# tid=... cuXxx` comment and some are `# captured: ...` comment lines. The trace is
//! clean: its only findings are the pools alive at exit.

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

const DEVICES: u64 = 2;
const THREADS: u64 = 4;
const POOL_STREAMS: usize = 16;
const POOL_EVENTS: usize = 32;
const SHORT_EVENTS: usize = 48;
const SHORT_STREAMS: usize = 8;

/// A long-running program's trace, produced one line at a time.
pub struct SyntheticTrace {
    rng: u64,
    calls_left: u64,
    /// Lines written but not yet handed out, in order (a call and the creations it needs).
    pending: VecDeque<String>,
    defaults_declared: [bool; (DEVICES * (1 + THREADS)) as usize],
    pool_streams: [bool; DEVICES as usize * POOL_STREAMS],
    pool_events: [bool; DEVICES as usize * POOL_EVENTS],
    /// Short-lived events alive, by handle, oldest first.
    short_events: VecDeque<u64>,
    /// Handles of destroyed short-lived events, handed out again.
    free_event_handles: Vec<u64>,
    next_event_handle: u64,
    /// Short-lived streams alive, by handle, with their device, oldest first.
    short_streams: VecDeque<(u64, u64)>,
    next_stream_handle: u64,
    ended: bool,
}

impl SyntheticTrace {
    /// The most objects alive at once in any such trace (default streams included), whatever
    /// its length.
    pub const MAX_ALIVE: usize = (DEVICES * (1 + THREADS)) as usize
        + DEVICES as usize * (POOL_STREAMS + POOL_EVENTS)
        + SHORT_EVENTS
        + SHORT_STREAMS;

    /// A trace of `calls` calls and a few more (to destroy the short-lived objects before
    /// `exit`), drawn from `seed`.
    pub fn new(seed: u64, calls: u64) -> Self {
        SyntheticTrace {
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
            calls_left: calls,
            pending: VecDeque::new(),
            defaults_declared: [false; (DEVICES * (1 + THREADS)) as usize],
            pool_streams: [false; DEVICES as usize * POOL_STREAMS],
            pool_events: [false; DEVICES as usize * POOL_EVENTS],
            short_events: VecDeque::new(),
            free_event_handles: Vec::new(),
            next_event_handle: 0x5600_1000,
            short_streams: VecDeque::new(),
            next_stream_handle: 0x7f10_0000,
            ended: false,
        }
    }

    /// Writes the next line (without its line break) into `line`, which is cleared first;
    /// `false` once the trace has ended.
    pub fn next_line(&mut self, line: &mut String) -> bool {
        line.clear();
        if self.pending.is_empty() && self.calls_left > 0 {
            self.random_call();
        }
        if let Some(pending) = self.pending.pop_front() {
            if !pending.starts_with('#') {
                self.calls_left = self.calls_left.saturating_sub(1);
            }
            *line = pending;
            return true;
        }
        // Destroy the short-lived objects, then exit once.
        if let Some(handle) = self.short_events.pop_front() {
            let _ = write!(line, "event_destroy 0x{handle:x}");
        } else if let Some((handle, _)) = self.short_streams.pop_front() {
            let _ = write!(line, "stream_destroy 0x{handle:x}");
        } else if !self.ended {
            self.ended = true;
            line.push_str("exit");
        } else {
            return false;
        }
        true
    }

    fn random(&mut self, below: u64) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % below
    }

    /// Writes one call of the mix into `pending`, after the creations it needs.
    fn random_call(&mut self) {
        let thread = self.random(THREADS);
        let device = thread % DEVICES;
        let mut call = String::new();
        let roll = self.random(100);
        match roll {
            0..=44 => {
                let stream = self.any_stream(device, thread);
                let _ = write!(call, "launch {stream} {device}");
            }
            45..=56 => {
                let event = self.pool_event(device);
                let stream = self.pool_stream(device);
                let _ = write!(call, "event_record {event} {stream}");
            }
            57..=68 => {
                let waiter = self.random(DEVICES);
                let event = self.pool_event(device);
                let stream = self.pool_stream(waiter);
                let _ = write!(call, "stream_wait_event {stream} {event}");
            }
            69..=73 => {
                let event = self.pool_event(device);
                let _ = write!(call, "event_query {event}");
            }
            74..=75 => {
                let event = self.pool_event(device);
                let _ = write!(call, "event_synchronize {event}");
            }
            76..=77 => {
                let stream = self.any_stream(device, thread);
                let _ = write!(call, "stream_query {stream}");
            }
            78 => {
                let stream = self.any_stream(device, thread);
                let _ = write!(call, "stream_synchronize {stream}");
            }
            79..=92 => self.short_event_call(device, &mut call),
            _ => self.short_stream_call(device, &mut call),
        }
        match self.random(16) {
            0 => {
                let _ = write!(call, "   # tid={} cuLaunchKernel", 4100 + thread);
            }
            1 => self
                .pending
                .push_back(String::from("# captured: cuLaunchKernel stream=0x7f0000a0")),
            _ => {}
        }
        self.pending.push_back(call);
    }

    /// A stream of `device` for work: a pool stream mostly, sometimes a default stream.
    fn any_stream(&mut self, device: u64, thread: u64) -> String {
        match self.random(10) {
            0 => self.default_stream(device, None),
            1 => self.default_stream(device, Some(thread)),
            _ => self.pool_stream(device),
        }
    }

    fn default_stream(&mut self, device: u64, thread: Option<u64>) -> String {
        let context = 0x55d0_c000 + device * 0x1000;
        let (slot, name) = match thread {
            None => (device, format!("legacy.{context:x}")),
            Some(t) => (
                DEVICES + device * THREADS + t,
                format!("ptds.{context:x}.{}", 4100 + t),
            ),
        };
        // The recorder declares one before its first use; now and then again (harmless).
        let again = self.random(97) == 0;
        let declared = &mut self.defaults_declared[slot as usize];
        if !*declared || again {
            *declared = true;
            self.pending
                .push_back(format!("stream_default {name} {device}"));
        }
        name
    }

    fn pool_stream(&mut self, device: u64) -> String {
        let index = device as usize * POOL_STREAMS + self.random(POOL_STREAMS as u64) as usize;
        let name = format!("0x7f00{:04x}", index * 0x40);
        if !core::mem::replace(&mut self.pool_streams[index], true) {
            self.pending
                .push_back(format!("stream_create {name} {device}"));
        }
        name
    }

    /// A pool event of `device`: created on first use and recorded at once, so that every
    /// wait on it follows a record.
    fn pool_event(&mut self, device: u64) -> String {
        let index = device as usize * POOL_EVENTS + self.random(POOL_EVENTS as u64) as usize;
        let name = format!("0x5500{:04x}", index * 0x20);
        if !core::mem::replace(&mut self.pool_events[index], true) {
            let stream = self.pool_stream(device);
            self.pending
                .push_back(format!("event_create {name} {device}"));
            self.pending
                .push_back(format!("event_record {name} {stream}"));
        }
        name
    }

    /// A short-lived event's life, one call at a time: created (with a reused handle when
    /// one is free) and recorded, waited on, destroyed.
    fn short_event_call(&mut self, device: u64, call: &mut String) {
        let full = self.short_events.len() >= SHORT_EVENTS;
        if full || (!self.short_events.is_empty() && self.random(3) == 0) {
            if let Some(handle) = self.short_events.pop_front() {
                self.free_event_handles.push(handle);
                let _ = write!(call, "event_destroy 0x{handle:x}");
            }
            return;
        }
        if !self.short_events.is_empty() && self.random(2) == 0 {
            let index = self.random(self.short_events.len() as u64) as usize;
            let handle = self.short_events[index];
            let waiter = self.random(DEVICES);
            let stream = self.pool_stream(waiter);
            let _ = write!(call, "stream_wait_event {stream} 0x{handle:x}");
            return;
        }
        let handle = match self.free_event_handles.pop() {
            Some(handle) => handle,
            None => {
                self.next_event_handle += 0x10;
                self.next_event_handle
            }
        };
        self.short_events.push_back(handle);
        self.pending
            .push_back(format!("event_create 0x{handle:x} {device}"));
        let stream = self.pool_stream(device);
        let _ = write!(call, "event_record 0x{handle:x} {stream}");
    }

    /// A short-lived stream's life: created with a handle never seen before, launched on,
    /// destroyed.
    fn short_stream_call(&mut self, device: u64, call: &mut String) {
        let full = self.short_streams.len() >= SHORT_STREAMS;
        if full || (!self.short_streams.is_empty() && self.random(4) == 0) {
            if let Some((handle, _)) = self.short_streams.pop_front() {
                let _ = write!(call, "stream_destroy 0x{handle:x}");
            }
            return;
        }
        if !self.short_streams.is_empty() && self.random(2) == 0 {
            let index = self.random(self.short_streams.len() as u64) as usize;
            let (handle, stream_device) = self.short_streams[index];
            let _ = write!(call, "launch 0x{handle:x} {stream_device}");
            return;
        }
        self.next_stream_handle += 0x30;
        let handle = self.next_stream_handle;
        self.short_streams.push_back((handle, device));
        self.pending
            .push_back(format!("stream_create 0x{handle:x} {device}"));
        let _ = write!(call, "launch 0x{handle:x} {device}");
    }
}
