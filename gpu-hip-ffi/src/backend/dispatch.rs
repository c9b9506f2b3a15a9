//! `impl Backend for HipBackend` and its `Drop`: each method's contract as HIP meets it (its
//! docs), carried out by the module of its concern, and the kernel libraries unloaded at the end.

use core::ffi::{CStr, c_int, c_void};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};
use gpu_core::backend::live::library_arguments;
use gpu_core::backend::{Access, Backend, DeviceInfo, FillValue, KernelArg, LaunchDims};
use gpu_core::{ByteRange, DeviceId, Result};

use super::current::{DeviceScope, no_device_chosen, set_no_device_chosen};
use super::{HipBackend, HipEvent, HipGraph, HipKernel, HipModule, HipStream, SavedDevice};
use crate::result::{self, BACKEND};

// For the docs' links only (the errors they name are the concern modules').
#[cfg(doc)]
use gpu_core::Error;

impl Drop for HipBackend {
    fn drop(&mut self) {
        for index in (0..self.devices.len()).rev() {
            if let Ok(_scope) = DeviceScope::enter(self.hip, index as c_int) {
                self.clear_mappings(DeviceId(index as u32));
            }
        }
        for (index, state) in self.devices.iter_mut().enumerate().rev() {
            let loaded = state
                .library
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(loaded) = loaded
                && let Ok(_scope) = DeviceScope::enter(self.hip, index as c_int)
            {
                // SAFETY: the module was loaded on this device and its functions are not used
                // after the backend is gone (the trait's handles do not outlive it).
                let _ = unsafe { result::module::unload(self.hip, loaded.module.raw) };
            }
        }
    }
}

impl Backend for HipBackend {
    type Stream = HipStream;
    type Event = HipEvent;
    type Kernel = HipKernel;
    type Module = HipModule;
    // Every method makes its device current itself (`DeviceScope`) and puts the caller's back.
    const SCOPES_ITS_CALLS: bool = true;
    // As CUDA's (on NVIDIA it is CUDA underneath; ROCm ends the process on a GPU memory fault).
    const DEVICE_LOSS_ENDS_THE_PROCESS: bool = true;
    type SavedCurrent = SavedDevice;
    type Graph = HipGraph;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device_info(&self, device: DeviceId) -> Result<DeviceInfo> {
        Ok(self.device(device)?.info.clone())
    }

    /// hipGetDevice's device; `None` after `set_current_device(None)` on this thread, until a
    /// device is chosen again.
    fn current_device(&self) -> Result<Option<DeviceId>> {
        self.save_current()
            .map(|saved| saved.0.map(|ordinal| DeviceId(ordinal as u32)))
    }

    /// hipSetDevice (`None`: marks the thread as having chosen no device; HIP's device stays).
    fn set_current_device(&self, device: Option<DeviceId>) -> Result<()> {
        match device {
            Some(device) => self.restore_current(SavedDevice(Some(self.device(device)?.ordinal))),
            None => self.restore_current(SavedDevice(None)),
        }
    }

    /// hipGetDevice, or `None` when the thread's last choice was "no device".
    fn save_current(&self) -> Result<SavedDevice> {
        if no_device_chosen() {
            Ok(SavedDevice(None))
        } else {
            result::device::current(self.hip).map(|ordinal| SavedDevice(Some(ordinal)))
        }
    }

    /// hipSetDevice with the saved ordinal, or the "no device" mark.
    fn restore_current(&self, saved: SavedDevice) -> Result<()> {
        match saved.0 {
            Some(ordinal) => {
                result::device::set_current(self.hip, ordinal)?;
                set_no_device_chosen(false);
            }
            None => set_no_device_chosen(true),
        }
        Ok(())
    }

    fn is_current(&self, saved: SavedDevice, device: DeviceId) -> bool {
        self.devices
            .get(device.index())
            .is_some_and(|state| saved.0 == Some(state.ordinal))
    }

    /// Device: hipMalloc; managed: hipMallocManaged with `hipMemAttachGlobal`; pinned host:
    /// hipHostMalloc with `Portable | Mapped`. The
    /// address is recorded for `free`.
    fn allocate(&self, device: DeviceId, kind: MemoryKind, bytes: usize) -> Result<Option<usize>> {
        self.allocate_memory(device, kind, bytes)
    }

    /// Device memory only: hipMallocAsync from the device's default pool (release threshold at
    /// the maximum). Other kinds, and devices without pools, are [`Error::KindUnsupported`].
    /// The address is recorded for `free`.
    fn allocate_on_stream(
        &self,
        stream: HipStream,
        kind: MemoryKind,
        bytes: usize,
    ) -> Result<Option<usize>> {
        self.allocate_in_stream_order(stream, kind, bytes)
    }

    /// Device memory with `after`: hipFreeAsync on that stream; without: hipFree. Managed and
    /// pinned host memory: synchronise `after`, then hipFree / hipHostFree. Only memory this
    /// backend allocated (of `kind`, on `device`) and has not freed reaches HIP: anything else
    /// is [`Error::UnknownAddress`]; a failed free leaves the memory recorded.
    fn free(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<HipStream>,
    ) -> Result<()> {
        self.free_memory(device, kind, address, after)
    }

    /// No HIP call: tells gpu-recorder, when it records the process (HIP on NVIDIA runs on
    /// CUDA's driver, which loads it), that a runtime's allocator handed the buffer out or took
    /// it back ([`gpu_ffi_loader::recorder::note_buffer`]). Without the recorder: one atomic
    /// load and a branch. Never fails.
    // Inlined into the runtime's allocation hit (another crate): a call frame would cost more
    // than the check.
    #[inline]
    fn note_buffer(&self, _device: DeviceId, range: ByteRange, live: bool) -> Result<()> {
        gpu_ffi_loader::recorder::note_buffer(range, live);
        Ok(())
    }

    /// True while gpu-recorder records the process
    /// ([`gpu_ffi_loader::recorder::footprints_wanted`]: one atomic load once looked up).
    #[inline]
    fn footprints_wanted(&self) -> bool {
        gpu_ffi_loader::recorder::footprints_wanted()
    }

    /// Passes the launch's footprint on to gpu-recorder with the raw function and stream
    /// ([`gpu_ffi_loader::recorder::note_launch_footprint`]); the handles are checked by the
    /// launch that follows (an announcement for a launch that fails is dropped).
    fn note_launch_footprint(
        &self,
        stream: HipStream,
        kernel: HipKernel,
        ranges: &[(ByteRange, Access)],
    ) {
        let (function, stream) = (kernel.function as usize, stream.raw as usize);
        gpu_ffi_loader::recorder::note_launch_footprint(function, stream, ranges);
    }

    /// hipMemGetAllocationGranularity (minimum) of device memory, asked at open; `None` where
    /// HIP has no answer (no virtual memory management) and for other kinds.
    fn vm_granularity(&self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        self.granularity(device, kind)
    }

    /// hipMemAddressReserve of `wanted` bytes, else of `needed` (out of address space:
    /// `None`), recorded for `vm_release`; a size off the granularity is
    /// [`Error::MisalignedSegment`].
    fn vm_reserve(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        wanted: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        self.reserve((device, kind), (wanted, needed))
    }

    /// hipMemCreate and hipMemMap per granularity piece, then hipMemSetAccess for the device;
    /// out of memory is `false` with nothing left mapped.
    fn vm_map(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        self.map((device, kind), (address, size))
    }

    /// hipMemSetAccess of a range mapped throughout on `device` for `peer`.
    fn vm_set_access(
        &self,
        device: DeviceId,
        address: usize,
        size: usize,
        peer: DeviceId,
    ) -> Result<()> {
        self.grant(device, (address, size), peer)
    }

    /// hipStreamSynchronize of `after`, then hipMemUnmap and hipMemRelease per piece.
    fn vm_unmap(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<HipStream>,
    ) -> Result<()> {
        self.unmap((device, kind), (address, size), after)
    }

    /// hipMemAddressFree of a whole range from `vm_reserve`, nothing of it mapped.
    fn vm_release(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        self.release((device, kind), (address, size))
    }

    /// hipHostRegister with `Portable | Mapped` (with device 0 current; registration is
    /// process-wide), then hipHostGetDevicePointer with each device current for
    /// `device_ptrs[d]`. If an address lookup fails, the range is unregistered again.
    fn host_register(&self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        self.register_host_range(range, device_ptrs)
    }

    /// hipHostUnregister of exactly `start`, a range this backend registered: a pointer inside
    /// one is [`Error::NotEntryStart`], and one in none (never registered here, or unregistered
    /// already) [`Error::NotLocked`], both before HIP.
    fn host_unregister(&self, start: usize) -> Result<()> {
        self.unregister_host_range(start)
    }

    /// One hipDrvPointerGetAttributes for the memory type and the allocation's range: host
    /// memory HIP knows is pinned (hipHostRegister or hipHostMalloc, by anyone). Unknown memory
    /// (`hipErrorInvalidValue`), device and managed memory are `None`.
    fn host_pinned_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        self.pinned_host_extent(ptr, device_ptrs)
    }

    fn stream_create(&self, device: DeviceId) -> Result<HipStream> {
        self.create_stream(device)
    }

    /// Wraps the raw `hipStream_t` with its device, with no HIP call: HIP cannot check a
    /// handle without dereferencing it. `0` (the null stream) and `hipStreamPerThread` name the
    /// default streams of `device`, which every method makes current. The handle is live (each
    /// adoption a handle of its own) until the stream is destroyed or the device reset.
    unsafe fn adopt_stream(&self, device: DeviceId, raw: usize) -> Result<HipStream> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.adopt_raw_stream(device, raw) }
    }

    /// hipStreamDestroy, once no call of another thread uses the stream any more; the handle is
    /// stale from the moment the call begins (live again if HIP refuses).
    fn stream_destroy(&self, stream: HipStream) -> Result<()> {
        self.destroy_stream(stream)
    }

    fn stream_synchronize(&self, stream: HipStream) -> Result<()> {
        self.synchronize_stream(stream)
    }

    fn event_create(&self, device: DeviceId) -> Result<HipEvent> {
        self.create_event(device)
    }

    /// hipEventDestroy, once no call of another thread uses the event any more; the handle is
    /// stale from the moment the call begins (live again if HIP refuses).
    fn event_destroy(&self, event: HipEvent) -> Result<()> {
        self.destroy_event(event)
    }

    /// hipEventRecord; an event of another device is [`Error::WrongDevice`] before HIP.
    fn event_record(&self, event: HipEvent, stream: HipStream) -> Result<()> {
        self.record_event(event, stream)
    }

    fn stream_wait_event(&self, stream: HipStream, event: HipEvent) -> Result<()> {
        self.wait_for_event(stream, event)
    }

    /// hipEventQuery: `hipSuccess` is true, `hipErrorNotReady` false.
    fn event_query(&self, event: HipEvent) -> Result<bool> {
        self.event_done(event)
    }

    fn event_synchronize(&self, event: HipEvent) -> Result<()> {
        self.wait_event(event)
    }

    /// hipDeviceSynchronize with the device current.
    fn device_synchronize(&self, device: DeviceId) -> Result<()> {
        let _scope = self.enter(device)?;
        result::device::synchronize(self.hip)
    }

    /// hipDeviceReset with the device current, then the device's set-up again: the kernel
    /// library is forgotten (its module died with the device's state; the next `kernel` call
    /// loads it again) and the default pool's release threshold is raised again. Every stream,
    /// event, module and allocation of the device is gone, and its handles stale.
    fn reset_device(&self, device: DeviceId) -> Result<()> {
        self.reset_and_set_up(device)
    }

    /// hipDeviceCanAccessPeer (false for a device and itself).
    fn peer_access_possible(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        self.can_reach_peer(device, peer)
    }

    /// hipDeviceEnablePeerAccess with `device` current (already enabled, by us or by another
    /// user of the device such as PyTorch, is success), then hipMemPoolSetAccess on `peer`'s
    /// default pool for `device` where the backend uses that pool: stream-ordered memory is
    /// outside device peer access (measured with CUDA on two H100s, which is what HIP on
    /// NVIDIA runs on). If the pool refuses, the peer access this call enabled is disabled
    /// again.
    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        self.open_peer_access(device, peer)
    }

    /// hipMemcpyAsync with `hipMemcpyDefault`: HIP finds each side's memory from its address
    /// (unified addressing).
    ///
    /// # Safety
    /// The trait's: HIP checks nothing about the caller's host memory.
    unsafe fn copy(&self, stream: HipStream, dst: usize, src: usize, bytes: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.copy_on_stream(stream, dst, src, bytes) }
    }

    /// hipMemcpyPeerAsync with each side's device, on the stream's device.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn copy_peer(
        &self,
        stream: HipStream,
        dst: usize,
        dst_device: DeviceId,
        src: usize,
        src_device: DeviceId,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.copy_between_devices(stream, dst, dst_device, src, src_device, bytes) }
    }

    /// hipMemsetD8Async.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn fill(&self, stream: HipStream, dst: usize, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.fill_bytes(stream, dst, value, bytes) }
    }

    /// The library module is loaded on the device at the first call (hipModuleLoadData of the
    /// first image the device accepts) and kept; later calls only look it up.
    fn kernel(&self, device: DeviceId, name: &str) -> Result<HipKernel> {
        self.library_kernel(device, name)
    }

    /// hipMemsetD8Async, hipMemsetD16Async or hipMemsetD32Async, by the value's width.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn fill_elements(
        &self,
        stream: HipStream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.fill_elements_on_stream(stream, dst, value, count) }
    }

    /// hipModuleLoadData with the device current (a code object for its architecture).
    ///
    /// # Safety
    /// The trait's.
    unsafe fn module_load(&self, device: DeviceId, image: *const c_void) -> Result<HipModule> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.load_module_image(device, image) }
    }

    /// hipModuleUnload, once no call of another thread uses the module or one of its kernels
    /// any more; the module and its kernels are stale from the moment the call begins (live
    /// again if HIP refuses).
    fn module_unload(&self, module: HipModule) -> Result<()> {
        self.unload_module(module)
    }

    /// hipModuleGetFunction.
    fn module_kernel(&self, module: HipModule, name: &CStr) -> Result<HipKernel> {
        self.module_kernel_named(module, name)
    }

    /// hipFuncGetAttribute(`HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`).
    fn kernel_static_workgroup_bytes(&self, kernel: HipKernel) -> Result<u32> {
        self.static_workgroup_bytes(kernel)
    }

    /// hipFuncSetAttribute(`hipFuncAttributeMaxDynamicSharedMemorySize`) on the module's
    /// function; nothing at or below the device's default limit, which every kernel has.
    fn kernel_allow_workgroup_bytes(&self, kernel: HipKernel, bytes: u32) -> Result<()> {
        self.allow_workgroup_bytes(kernel, bytes)
    }

    /// hipModuleLaunchKernel, after checking the arguments against the kernel's parameters
    /// ([`Error::KernelArgumentMismatch`]; a module's kernel has no table to check against and
    /// is refused: launch it with [`Backend::launch_packed`]) and that kernel and stream share
    /// a device ([`Error::WrongDevice`]).
    ///
    /// # Safety
    /// The trait's: the standard library's kernels reach as far from each pointer argument as
    /// their count arguments and the grid say, and nothing checks that against the memory.
    unsafe fn launch(
        &self,
        stream: HipStream,
        kernel: HipKernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        let mut values = library_arguments(kernel.library_index, args)?;
        let mut pointers = values.pointers();
        // SAFETY: the caller's promise for the memory; the parameter array was just packed
        // from arguments checked against the kernel's parameters.
        unsafe { self.launch_with(stream, kernel, dims, pointers.as_mut_ptr()) }
    }

    /// hipModuleLaunchKernel with the caller's parameter array, after checking that kernel and
    /// stream share a device ([`Error::WrongDevice`]).
    ///
    /// # Safety
    /// The trait's.
    unsafe fn launch_packed(
        &self,
        stream: HipStream,
        kernel: HipKernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.launch_with(stream, kernel, dims, params) }
    }

    /// hipGraphCreate, a node per operation after its dependencies' nodes, then
    /// hipGraphInstantiateWithFlags, with the device current; a failure anywhere destroys what
    /// was built. Launch nodes take library kernels of `device` only, their arguments checked
    /// as for `launch`.
    fn graph_instantiate(
        &self,
        device: DeviceId,
        graph: &GraphDesc<HipKernel>,
    ) -> Result<HipGraph> {
        self.instantiate_graph(device, graph)
    }

    /// hipGraphLaunch; a graph of another device than the stream's is [`Error::WrongDevice`],
    /// one whose kernels' module was unloaded [`Error::StaleHandle`], both before HIP.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn graph_launch(&self, stream: HipStream, graph: HipGraph) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.launch_graph(stream, graph) }
    }

    /// hipGraphExecKernelNodeSetParams, hipGraphExecMemcpyNodeSetParams1D or
    /// hipGraphExecMemsetNodeSetParams, by the node's kind.
    fn graph_set_node(&self, graph: HipGraph, node: NodeId, op: &NodeOp<HipKernel>) -> Result<()> {
        self.set_graph_node(graph, node, op)
    }

    /// hipGraphExecDestroy and hipGraphDestroy, once no call of another thread uses the graph;
    /// the handle is stale from then on, also if HIP refuses.
    fn graph_destroy(&self, graph: HipGraph) -> Result<()> {
        self.destroy_graph(graph)
    }
}
