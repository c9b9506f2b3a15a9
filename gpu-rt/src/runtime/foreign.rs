//! Memory in the order of other programs' streams (a framework such as PyTorch hands its own
//! streams to a pluggable allocator): adopted streams, allocation and free by address.

use std::sync::PoisonError;

use super::Runtime;
use super::memory::DeviceMemory;
use gpu_core::allocator::{AllocRequest, MemoryKind};
use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::id::{DeviceId, StreamId};

impl<B: Backend> Runtime<B> {
    /// Allocates `size` bytes of `kind` on `device` for work that another program (a
    /// framework such as PyTorch) enqueues on its own stream `stream` after this call, and
    /// returns the address; free it with [`Runtime::free_on_foreign_stream`].
    ///
    /// `stream` is the driver's raw handle (CUDA: a `CUstream`, `0` for the legacy default
    /// stream; host backend: [`crate::host::HostStream::raw`]). The first use of a handle on a
    /// device adopts it ([`Backend::adopt_stream`]): it gets a lane of its own in the
    /// allocator, which the runtime never destroys. A block freed on a stream is reused on the
    /// same stream at once; on another stream only once an event recorded on the first has
    /// completed, or after making the new stream wait on it (never a device synchronisation).
    /// A miss climbs the allocator's out-of-memory ladder before [`Error::OutOfMemory`].
    /// Safe to call from any thread; takes only `device`'s memory lock on a hit.
    ///
    /// # Safety
    /// `stream` must be a live stream of `device` (or a default-stream handle of the driver)
    /// that stays alive until the runtime shuts down, as [`Backend::adopt_stream`] requires.
    #[inline]
    pub unsafe fn alloc_on_foreign_stream(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        size: usize,
        stream: usize,
    ) -> Result<usize> {
        let mut memory = self.memory(device)?;
        // SAFETY: the caller's promise, passed on.
        let stream = unsafe { self.adopted(&mut memory, device, stream) }?;
        memory.allocate_by_address(
            &self.backend,
            &self.streams,
            &AllocRequest::new(kind, size).on_stream(stream, &[]),
        )
    }

    /// Frees the allocation at `address` on `device` (made by
    /// [`Runtime::alloc_on_foreign_stream`] with `size` bytes) in the order of the raw stream
    /// `stream`: all work that uses the memory was enqueued on that stream before this call.
    /// An address that is no live allocation of `device` is [`Error::UnknownAddress`] (a
    /// double free too), another size [`Error::FreeSizeMismatch`]; both change nothing.
    ///
    /// # Safety
    /// As for [`Runtime::alloc_on_foreign_stream`].
    #[inline]
    pub unsafe fn free_on_foreign_stream(
        &self,
        device: DeviceId,
        address: usize,
        size: usize,
        stream: usize,
    ) -> Result<()> {
        let mut memory = self.memory(device)?;
        if memory.adopted_stream(stream).is_none() {
            // A free refused for its address adopts no stream either: it changes nothing.
            memory.live_by_address(device, (address, size))?;
        }
        // SAFETY: the caller's promise, passed on.
        let stream = unsafe { self.adopted(&mut memory, device, stream) }?;
        memory.free_by_address(
            &self.backend,
            &self.streams,
            device,
            (address, size),
            stream,
        )
    }

    /// Records that the allocation at `address` on `device` (from
    /// [`Runtime::alloc_on_foreign_stream`]) is also used by work enqueued on the raw stream
    /// `stream` (PyTorch's `record_stream`): when it is freed, the block is reused only after
    /// that work too (an event recorded on `stream` at the free). An address that is no live
    /// allocation of `device` is [`Error::UnknownAddress`] and changes nothing.
    ///
    /// # Safety
    /// As for [`Runtime::alloc_on_foreign_stream`].
    pub unsafe fn mark_used_on_foreign_stream(
        &self,
        device: DeviceId,
        address: usize,
        stream: usize,
    ) -> Result<()> {
        let mut memory = self.memory(device)?;
        if !memory.holds_address(address) {
            // Refused before adopting anything: the call changes nothing.
            return Err(Error::UnknownAddress { device, address });
        }
        // SAFETY: the caller's promise, passed on.
        let stream = unsafe { self.adopted(&mut memory, device, stream) }?;
        memory.mark_used_by_address(device, address, stream)
    }

    /// The id of raw stream `raw` of `device`, adopting it at its first use. Adopting locks
    /// the state after the memory (the one lock order) and works on a poisoned runtime too,
    /// as allocation does.
    ///
    /// # Safety
    /// As for [`Runtime::alloc_on_foreign_stream`].
    #[inline]
    unsafe fn adopted(
        &self,
        memory: &mut DeviceMemory<B>,
        device: DeviceId,
        raw: usize,
    ) -> Result<StreamId> {
        if let Some(stream) = memory.adopted_stream(raw) {
            return Ok(stream);
        }
        // SAFETY: the caller's promise, passed on.
        let handle = unsafe { self.backend.adopt_stream(device, raw) }?;
        let stream = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .adopt_stream(device, handle)?;
        memory.note_adopted(raw, stream);
        Ok(stream)
    }
}
