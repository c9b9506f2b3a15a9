//! Streams as HSA user-mode queues: creating or adopting a queue, destroying it once idle, and
//! waiting for a stream's work (its chain, and an event record after it) or a whole device's.

use core::ptr;
use std::sync::{Arc, Mutex};

use gpu_core::{DeviceId, Error, Result};

use super::stream::StreamState;
use super::{HsaBackend, HsaStream, lock};
use crate::result::hsa;
use crate::sys;

impl HsaBackend {
    /// [`Backend::stream_create`](gpu_core::backend::Backend::stream_create): a new
    /// single-producer queue on the device's agent.
    pub(super) fn create_queue(&self, device: DeviceId) -> Result<HsaStream> {
        let state = self.device(device)?;
        let mut queue = ptr::null_mut();
        // SAFETY: an agent the runtime reported; no callback, no service queues (nulls), the
        // default segment sizes; `queue` is valid for writes.
        hsa!(
            self.hsa,
            hsa_queue_create(
                state.agent,
                state.queue_slots,
                sys::HSA_QUEUE_TYPE_SINGLE,
                None,
                ptr::null_mut(),
                u32::MAX,
                u32::MAX,
                &mut queue
            )
        )?;
        Ok(self.add_stream(queue, device, false))
    }

    /// [`Backend::adopt_stream`](gpu_core::backend::Backend::adopt_stream): a program's queue,
    /// never destroyed by the backend.
    ///
    /// # Safety
    /// The trait's: `raw` is a live `hsa_queue_t *` of the device's agent, alive for as long
    /// as the backend may enqueue on it.
    pub(super) unsafe fn adopt_queue(&self, device: DeviceId, raw: usize) -> Result<HsaStream> {
        self.device(device)?;
        if raw == 0 {
            return Err(Error::NullPointer {
                what: "adopted HSA queue",
            });
        }
        Ok(self.add_stream(raw as *mut sys::hsa_queue_t, device, true))
    }

    /// A stream of `device` on `queue`, with nothing enqueued yet, in the tables.
    fn add_stream(
        &self,
        queue: *mut sys::hsa_queue_t,
        device: DeviceId,
        adopted: bool,
    ) -> HsaStream {
        let mut tables = lock(&self.tables);
        let serial = tables.serial();
        tables.streams.insert(
            serial,
            Arc::new(Mutex::new(StreamState {
                queue,
                device,
                adopted,
                chain: Default::default(),
                record_after_chain: false,
            })),
        );
        HsaStream { serial, device }
    }

    /// [`Backend::stream_destroy`](gpu_core::backend::Backend::stream_destroy): waits for the
    /// stream's work, destroys the queue unless adopted, and forgets the stream.
    pub(super) fn destroy_queue(&self, stream: HsaStream) -> Result<()> {
        let state = self.stream_state(stream)?;
        let mut state = lock(&state);
        self.drain(&mut state)?;
        if !state.adopted {
            self.wait_queue_idle(state.queue)?;
            // SAFETY: a queue the backend created, drained and idle, destroyed once: the
            // stream's mutex is held until the stream leaves the tables below.
            hsa!(self.hsa, hsa_queue_destroy(state.queue))?;
        }
        lock(&self.tables).streams.remove(&stream.serial);
        Ok(())
    }

    /// Waits for everything enqueued on `stream` so far.
    pub(super) fn wait_stream(&self, stream: HsaStream) -> Result<()> {
        let state = self.stream_state(stream)?;
        self.drain(&mut lock(&state))
    }

    /// Waits for every stream of `device`.
    pub(super) fn wait_device(&self, device: DeviceId) -> Result<()> {
        self.device(device)?;
        let streams: Vec<_> = lock(&self.tables).streams.values().cloned().collect();
        for state in streams {
            let mut state = lock(&state);
            if state.device == device {
                self.drain(&mut state)?;
            }
        }
        Ok(())
    }

    /// Waits for the stream's operations and an event record submitted after them (through a
    /// marker that completes after it), then retires them all.
    pub(super) fn drain(&self, state: &mut StreamState) -> Result<()> {
        if state.record_after_chain {
            self.enqueue_barrier(state, None)?;
        }
        if let Some(last) = state.chain.back() {
            self.wait_signal(last.signal)?;
        }
        self.reclaim(state)
    }

    /// Waits until the packet processor has taken every packet of `queue` (event packets
    /// outside the chain included), as HSA requires before a queue is destroyed.
    pub(super) fn wait_queue_idle(&self, queue: *mut sys::hsa_queue_t) -> Result<()> {
        let written = self.hsa.hsa_queue_load_write_index_relaxed()?;
        let read = self.hsa.hsa_queue_load_read_index_scacquire()?;
        // SAFETY: a live queue of the backend.
        while unsafe { read(queue) } < unsafe { written(queue) } {
            std::thread::yield_now();
        }
        Ok(())
    }
}
