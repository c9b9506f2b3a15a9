//! `impl Backend for HsaBackend` and its `Drop`: each method's contract as HSA meets it (its
//! docs), carried out by the module of its concern, and the teardown of everything left.

use core::ffi::{CStr, c_void};
use std::sync::PoisonError;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, DeviceInfo, FillValue, KernelArg, LaunchDims};
use gpu_core::{ByteRange, DeviceId, Error, Result};

use super::devices::{set_thread_device, thread_device};
use super::executable::Executable;
use super::kernels;
use super::pools::{CopyAgents, free_pool_memory};
use super::{HsaBackend, HsaEvent, HsaKernel, HsaModule, HsaStream, SavedDevice, lock};
use crate::result::{BACKEND, hsa};

impl Drop for HsaBackend {
    fn drop(&mut self) {
        let tables = core::mem::take(
            self.tables
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (_, state) in tables.streams {
            let mut state = lock(&state);
            let _ = self.drain(&mut state);
            if !state.adopted {
                let _ = self.wait_queue_idle(state.queue);
                // SAFETY: a queue the backend created, taken out of the tables so destroyed
                // once, after the drain and wait above.
                let _ = hsa!(self.hsa, hsa_queue_destroy(state.queue));
            }
            for op in core::mem::take(&mut state.chain) {
                free_pool_memory(self.hsa, op.scratch);
                // SAFETY: a signal the backend created, taken out of the chain so destroyed
                // once, after the drain above waited for the operations that read it (teardown
                // is best effort: a failed drain is not reported, and the signal goes anyway).
                let _ = hsa!(self.hsa, hsa_signal_destroy(op.signal));
            }
        }
        let mut records = tables.records;
        let signals = tables
            .free_signals
            .into_iter()
            .chain(records.take_all())
            .chain(tables.events.values().filter_map(|event| event.current));
        for signal in signals {
            // SAFETY: free, superseded and current record signals the backend created, each in
            // one list once; every stream was drained above, so no queue waits for them.
            let _ = hsa!(self.hsa, hsa_signal_destroy(signal));
        }
        for loaded in tables.modules.into_values() {
            loaded.destroy(self.hsa);
        }
        let libraries: Vec<Executable> = self
            .devices
            .iter_mut()
            .filter_map(|device| {
                let slot = device.library.get_mut();
                slot.unwrap_or_else(PoisonError::into_inner).take()
            })
            .map(|library| library.executable)
            .collect();
        for executable in libraries {
            executable.destroy(self.hsa);
        }
        // `_runtime` drops after this: hsa_shut_down once nothing of the backend is left.
    }
}

impl Backend for HsaBackend {
    type Stream = HsaStream;
    type Event = HsaEvent;
    type Kernel = HsaKernel;
    type Module = HsaModule;
    // No method depends on a current device: each names its device through its handles.
    const SCOPES_ITS_CALLS: bool = true;
    // ROCr ends the process on a GPU memory fault by default, and has no per-agent reset.
    const DEVICE_LOSS_ENDS_THE_PROCESS: bool = true;
    type SavedCurrent = SavedDevice;
    // No graphs: HSA has no graph object; every graph call is the trait's `Unsupported`.
    type Graph = core::convert::Infallible;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device_info(&self, device: DeviceId) -> Result<DeviceInfo> {
        Ok(self.device(device)?.info.clone())
    }

    /// The device the thread chose last through an HSA backend (HSA has no current device).
    fn current_device(&self) -> Result<Option<DeviceId>> {
        Ok(thread_device())
    }

    fn set_current_device(&self, device: Option<DeviceId>) -> Result<()> {
        if let Some(device) = device {
            self.device(device)?;
        }
        set_thread_device(device);
        Ok(())
    }

    fn save_current(&self) -> Result<SavedDevice> {
        Ok(SavedDevice(thread_device()))
    }

    fn restore_current(&self, saved: SavedDevice) -> Result<()> {
        set_thread_device(saved.0);
        Ok(())
    }

    fn is_current(&self, saved: SavedDevice, device: DeviceId) -> bool {
        device.index() < self.devices.len() && saved.0 == Some(device)
    }

    /// Device: hsa_amd_memory_pool_allocate from the agent's coarse-grained pool; pinned host:
    /// from the CPU's fine-grained pool. Then hsa_amd_agents_allow_access: pinned host memory
    /// for every GPU, device memory for the other GPUs that may reach the pool, where any (so
    /// their copies and kernels reach it: this is the backend's peer access).
    /// Managed memory is [`Error::KindUnsupported`].
    fn allocate(&self, device: DeviceId, kind: MemoryKind, bytes: usize) -> Result<Option<usize>> {
        self.allocate_memory(device, kind, bytes)
    }

    /// HSA has no stream-ordered allocation: every kind is [`Error::KindUnsupported`] (the
    /// capabilities say so, and the runtime does not ask).
    fn allocate_on_stream(
        &self,
        stream: HsaStream,
        kind: MemoryKind,
        _bytes: usize,
    ) -> Result<Option<usize>> {
        self.device(stream.device)?;
        Err(Error::KindUnsupported {
            device: stream.device,
            kind,
        })
    }

    /// hsa_amd_memory_pool_free, after `after`'s work where given (HSA frees at once).
    fn free(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<HsaStream>,
    ) -> Result<()> {
        self.free_memory(device, kind, address, after)
    }

    /// hsa_amd_memory_lock for every GPU agent; the one agent address it returns is each
    /// device's address, and the backend keeps it with the range until the exact start is
    /// unlocked.
    fn host_register(&self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        self.lock_host(range, device_ptrs)
    }

    /// hsa_amd_memory_unlock of exactly `start`, a start the backend locked: anything else is
    /// [`Error::NotEntryStart`] (inside a locked range) or [`Error::NotLocked`] before HSA.
    fn host_unregister(&self, start: usize) -> Result<()> {
        self.unlock_host(start)
    }

    /// A range the backend locked answers from its own table (the agent address kept at
    /// lock time); anything else takes one hsa_amd_pointer_info: locked host memory (by anyone)
    /// and memory of a CPU pool are pinned. The agent address of the extent's start goes to
    /// every device slot.
    fn host_pinned_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        self.pinned_host_extent(ptr, device_ptrs)
    }

    /// hsa_queue_create on the device's agent (single producer: the stream's mutex
    /// serialises its packets).
    fn stream_create(&self, device: DeviceId) -> Result<HsaStream> {
        self.create_queue(device)
    }

    /// Wraps a program's `hsa_queue_t *` of `device`'s agent; the backend enqueues on it
    /// (reserving slots atomically, as any producer of a multi-producer queue must) and never
    /// destroys it.
    unsafe fn adopt_stream(&self, device: DeviceId, raw: usize) -> Result<HsaStream> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.adopt_queue(device, raw) }
    }

    /// Waits for the stream's work (HSA destroys only an idle queue), then hsa_queue_destroy;
    /// an adopted queue is only forgotten.
    fn stream_destroy(&self, stream: HsaStream) -> Result<()> {
        self.destroy_queue(stream)
    }

    /// Waits for the completion signal of the stream's last operation.
    fn stream_synchronize(&self, stream: HsaStream) -> Result<()> {
        self.wait_stream(stream)
    }

    /// An event with no record (complete); its signals come with its records.
    fn event_create(&self, device: DeviceId) -> Result<HsaEvent> {
        self.create_event(device)
    }

    /// Forgets the event; its last record's signal is reused once that record has completed
    /// and no queue waits for it any more.
    fn event_destroy(&self, event: HsaEvent) -> Result<()> {
        self.destroy_event(event)
    }

    /// A record completes a signal of its own (at 1 from the free list): a barrier-AND packet
    /// after the work before it (after a marker packet when the stream's last operation was a
    /// copy, which the queue does not order). With nothing pending on the stream the event is
    /// complete at once. The event's previous record signal is superseded.
    fn event_record(&self, event: HsaEvent, stream: HsaStream) -> Result<()> {
        self.record_event(event, stream)
    }

    /// Nothing when the event's last record has completed (or there is none); otherwise a
    /// barrier-AND packet on the stream's queue waiting for that record's signal, as an
    /// operation of the stream's chain.
    fn stream_wait_event(&self, stream: HsaStream, event: HsaEvent) -> Result<()> {
        self.wait_for_event(stream, event)
    }

    fn event_query(&self, event: HsaEvent) -> Result<bool> {
        self.event_done(event)
    }

    /// hsa_signal_wait_scacquire on the last record's signal until it is below 1.
    fn event_synchronize(&self, event: HsaEvent) -> Result<()> {
        self.wait_event(event)
    }

    /// Waits for every stream of the device (HSA has no device-wide wait).
    fn device_synchronize(&self, device: DeviceId) -> Result<()> {
        self.wait_device(device)
    }

    /// Unsupported: HSA has no per-process reset of one agent (ROCr recovers a GPU only by
    /// tearing the runtime down); the device stays as it is.
    fn reset_device(&self, device: DeviceId) -> Result<()> {
        self.device(device)?;
        Err(Error::Unsupported {
            backend: "hsa",
            what: "resetting one device (ROCr has no per-agent reset)",
        })
    }

    /// Whether `peer`'s device pool may be reached by `device`'s agent
    /// (hsa_amd_agent_memory_pool_get_info's `HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS` is not
    /// `NEVER_ALLOWED`, read at open); false for a device and itself.
    fn peer_access_possible(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        self.reaches(device, peer)
    }

    /// Nothing to enable: every device allocation is opened at allocation
    /// (hsa_amd_agents_allow_access) to each other GPU that may reach its pool, which covers
    /// memory allocated before this call and after it. So this only checks the pair, and
    /// changes nothing: [`Backend::peer_access_possible`] false (the pool is `NEVER_ALLOWED`
    /// for `device`'s agent, or `device` is `peer`) is an `HSA_STATUS_ERROR_INVALID_AGENT`
    /// error, anything else success, as often as asked.
    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        self.check_peer_access(device, peer)
    }

    /// hsa_amd_memory_async_copy after the stream's previous operation, each side named by
    /// its agent (hsa_amd_pointer_info: a GPU's pool memory is that GPU's, the rest the CPU's).
    ///
    /// # Safety
    /// The trait's; HSA copies only memory it knows (pool, locked), not pageable memory.
    unsafe fn copy(&self, stream: HsaStream, dst: usize, src: usize, bytes: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.copy_on_stream(stream, CopyAgents::FromAddresses, dst, src, bytes) }
    }

    /// As [`Backend::copy`], with each side's agent named: `dst_device`'s and `src_device`'s
    /// GPU agents, the addresses as given (no hsa_amd_pointer_info). Device memory is opened
    /// to every peer that may reach it at allocation, so the copy needs nothing enabled. HSA
    /// has no staged copy: each agent must reach both buffers, so two devices that cannot
    /// reach each other both ways ([`Backend::peer_access_possible`]) are refused with the
    /// `HSA_STATUS_ERROR_INVALID_AGENT` error of [`Backend::enable_peer_access`] before
    /// anything is enqueued.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn copy_peer(
        &self,
        stream: HsaStream,
        dst: usize,
        dst_device: DeviceId,
        src: usize,
        src_device: DeviceId,
        bytes: usize,
    ) -> Result<()> {
        let agents = self.peer_copy_agents(dst_device, src_device)?;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.copy_on_stream(stream, agents, dst, src, bytes) }
    }

    /// As [`Backend::fill_elements`] with bytes.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn fill(&self, stream: HsaStream, dst: usize, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.fill_elements(stream, dst, FillValue::U8(value), bytes) }
    }

    /// The aligned words by the `fill_u32` kernel, the one to three bytes before and after
    /// them copied from a host buffer holding the pattern (`backend/fill.rs` splits the range).
    ///
    /// # Safety
    /// The trait's.
    unsafe fn fill_elements(
        &self,
        stream: HsaStream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.fill_on_stream(stream, dst, value, count) }
    }

    /// Reads the code object (its size from its ELF header) into an executable for the
    /// device's agent.
    ///
    /// # Safety
    /// The trait's: `image` is a complete AMDGPU code object.
    unsafe fn module_load(&self, device: DeviceId, image: *const c_void) -> Result<HsaModule> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.load_module(device, image) }
    }

    /// Destroys the module's executable and reader.
    fn module_unload(&self, module: HsaModule) -> Result<()> {
        self.unload_module(module)
    }

    /// The kernel's `NAME.kd` symbol in the module's executable.
    fn module_kernel(&self, module: HsaModule, name: &CStr) -> Result<HsaKernel> {
        self.module_kernel_named(module, name)
    }

    /// The library executable is loaded on the device at the first call (the first code
    /// object its agent accepts) and kept.
    fn kernel(&self, device: DeviceId, name: &str) -> Result<HsaKernel> {
        self.library_kernel_named(device, name)
    }

    /// The kernel symbol's group segment size (`HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE`,
    /// read when the kernel was looked up).
    fn kernel_static_workgroup_bytes(&self, kernel: HsaKernel) -> Result<u32> {
        self.device(kernel.device)?;
        Ok(kernel.object.group_size)
    }

    /// Nothing to opt in on AMD GPUs: every kernel may use the device's whole workgroup
    /// memory; more than that (with the kernel's static part) is [`Error::LimitExceeded`].
    fn kernel_allow_workgroup_bytes(&self, kernel: HsaKernel, bytes: u32) -> Result<()> {
        self.allow_workgroup_bytes(kernel, bytes)
    }

    /// An AQL kernel-dispatch packet with the arguments in a kernarg-pool buffer. A library
    /// kernel's arguments are checked against its parameters
    /// ([`Error::KernelArgumentMismatch`]); a module's kernel takes them as given, laid out by
    /// their kinds, and they must fit its kernarg segment.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn launch(
        &self,
        stream: HsaStream,
        kernel: HsaKernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        kernels::check_arguments(kernel, args)?;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.enqueue_dispatch(stream, kernel, dims, args) }
    }

    /// A library kernel's parameter array is read by its parameter table; a module's kernel
    /// has no table here (HSA keeps parameter types in the code object's metadata), so it is
    /// [`Error::Unsupported`]: launch it with [`Backend::launch`].
    ///
    /// # Safety
    /// The trait's.
    unsafe fn launch_packed(
        &self,
        stream: HsaStream,
        kernel: HsaKernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's promise: one pointer per parameter, to a value of its type.
        let args = unsafe { kernels::packed_arguments(kernel, params)? };
        // SAFETY: the caller's promise, passed on.
        unsafe { self.enqueue_dispatch(stream, kernel, dims, &args) }
    }
}
