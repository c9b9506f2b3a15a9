//! The chain of completion signals: each operation of a stream completes a signal of its own
//! that the next one can wait for, and a signal is reused once nothing can read it any more.

use core::ptr;

use gpu_core::Result;

use super::packets::{self, barrier_and_packets};
use super::pools::free_pool_memory;
use super::stream::{Op, Packet, Producer, StreamState};
use super::{HsaBackend, lock};
use crate::result::hsa;
use crate::sys;

impl HsaBackend {
    /// Whether `signal` has reached 0 or below (every operation it counts has completed).
    pub(super) fn signal_done(&self, signal: sys::hsa_signal_t) -> Result<bool> {
        let load = self.hsa.hsa_signal_load_scacquire()?;
        // SAFETY: a live signal of the backend.
        Ok(unsafe { load(signal) } <= 0)
    }

    /// Blocks until `signal` is below 1.
    pub(super) fn wait_signal(&self, signal: sys::hsa_signal_t) -> Result<()> {
        let wait = self.hsa.hsa_signal_wait_scacquire()?;
        loop {
            // SAFETY: a live signal of the backend; the wait may return early (spuriously or
            // at the timeout), so the value is checked again.
            let value = unsafe {
                wait(
                    signal,
                    sys::HSA_SIGNAL_CONDITION_LT,
                    1,
                    u64::MAX,
                    sys::HSA_WAIT_STATE_BLOCKED,
                )
            };
            if value < 1 {
                return Ok(());
            }
        }
    }

    /// A completion signal at 1 for a new operation: a free one, or a new one.
    pub(super) fn fresh_signal(&self) -> Result<sys::hsa_signal_t> {
        let store = self.hsa.hsa_signal_store_screlease()?;
        if let Some(signal) = lock(&self.tables).free_signals.pop() {
            // SAFETY: a live signal no operation reads any more.
            unsafe { store(signal, 1) };
            return Ok(signal);
        }
        let mut signal = sys::hsa_signal_t::default();
        // SAFETY: no consumer list (0 agents, null); `signal` is valid for writes.
        hsa!(self.hsa, hsa_signal_create(1, 0, ptr::null(), &mut signal))?;
        Ok(signal)
    }

    /// Frees what a retired operation held: its host buffer, its signal for reuse, and its
    /// hold on the record signal it waited for.
    fn recycle(&self, op: Op) {
        free_pool_memory(self.hsa, op.scratch);
        let mut tables = lock(&self.tables);
        tables.free_signals.push(op.signal);
        if let Some(record) = op.waits_on
            && let Some(free) = tables.records.end_wait(record)
        {
            tables.free_signals.push(free);
        }
    }

    /// Retires the stream's operations whose signals nothing reads any more, and frees the
    /// superseded record signals whose records have completed.
    pub(super) fn reclaim(&self, state: &mut StreamState) -> Result<()> {
        let load = self.hsa.hsa_signal_load_scacquire()?;
        let retired = state.retire(|op| {
            // SAFETY: the signals of the stream's chain are live signals of the backend.
            unsafe { load(op.signal) <= 0 }
        });
        for op in retired {
            self.recycle(op);
        }
        let mut tables = lock(&self.tables);
        let free = tables.records.collect(|signal| {
            // SAFETY: superseded record signals stay live signals of the backend until freed.
            unsafe { load(signal) <= 0 }
        });
        tables.free_signals.extend(free);
        Ok(())
    }

    /// An event no longer names `signal`, its previous record's (recorded again, or destroyed):
    /// free now if that record has completed and nothing waits for it, else later.
    pub(super) fn supersede(&self, signal: Option<sys::hsa_signal_t>) -> Result<()> {
        let Some(signal) = signal else { return Ok(()) };
        let done = self.signal_done(signal)?;
        let mut tables = lock(&self.tables);
        if let Some(free) = tables.records.supersede(signal, done) {
            tables.free_signals.push(free);
        }
        Ok(())
    }

    /// Enqueues one operation: `enqueue` gets the signals it must wait for (the previous
    /// operation's, where queue order does not already cover it) and its own completion signal,
    /// and submits it. On success the operation joins the chain; on failure its signal,
    /// `scratch` and its hold on `waits_on` are given back and the stream is as it was.
    pub(super) fn enqueue_op(
        &self,
        state: &mut StreamState,
        on_queue: bool,
        scratch: Option<usize>,
        waits_on: Option<sys::hsa_signal_t>,
        enqueue: impl FnOnce(&[sys::hsa_signal_t], sys::hsa_signal_t) -> Result<()>,
    ) -> Result<()> {
        let signal = match self.reclaim(state).and_then(|()| self.fresh_signal()) {
            Ok(signal) => signal,
            Err(error) => {
                free_pool_memory(self.hsa, scratch);
                let mut tables = lock(&self.tables);
                if let Some(free) = waits_on.and_then(|record| tables.records.end_wait(record)) {
                    tables.free_signals.push(free);
                }
                return Err(error);
            }
        };
        let op = Op {
            signal,
            on_queue,
            scratch,
            waits_on,
        };
        let dependencies = state.dependencies(on_queue);
        match enqueue(&dependencies, signal) {
            Ok(()) => {
                state.chain.push_back(op);
                state.record_after_chain = false;
                Ok(())
            }
            Err(error) => {
                self.recycle(op);
                Err(error)
            }
        }
    }

    /// Enqueues barrier-AND packets on the stream's queue waiting for `record` (an event
    /// record's signal, already counted as waited on) and whatever the chain requires,
    /// completing an operation of the chain.
    pub(super) fn enqueue_barrier(
        &self,
        state: &mut StreamState,
        record: Option<sys::hsa_signal_t>,
    ) -> Result<()> {
        let producer = Producer::new(self.hsa)?;
        let queue = state.queue;
        self.enqueue_op(state, true, None, record, |dependencies, signal| {
            let mut all: Vec<_> = record.into_iter().collect();
            all.extend_from_slice(dependencies);
            let packets = barrier_packets(&all, Some(signal));
            // SAFETY: a live queue of the backend; the signals live until the chain retires
            // the operation, after the packets have been processed.
            unsafe { producer.submit(queue, &packets) };
            Ok(())
        })
    }
}

/// Barrier-AND packets for `dependencies`, completing `completion`, ready to submit.
pub(super) fn barrier_packets(
    dependencies: &[sys::hsa_signal_t],
    completion: Option<sys::hsa_signal_t>,
) -> Vec<Packet> {
    let header = packets::header(sys::HSA_PACKET_TYPE_BARRIER_AND);
    barrier_and_packets(dependencies, completion)
        .iter()
        .map(|packet| Packet::new(packet, header, 0))
        .collect()
}
