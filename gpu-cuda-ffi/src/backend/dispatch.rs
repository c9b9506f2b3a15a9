//! `impl Backend for CudaBackend`: each method of the trait as the driver API meets it, in
//! the device's primary context, with the handles checked in the backend's registries.

use super::*;
use gpu_core::backend::Access;
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};

impl Backend for CudaBackend {
    type Stream = CudaStream;
    type Event = CudaEvent;
    type Kernel = CudaKernel;
    type Module = CudaModule;
    // Every method enters its device's context itself (`ContextScope`) and leaves the
    // caller's current again.
    const SCOPES_ITS_CALLS: bool = true;
    // A sticky error poisons every context of the process (measured: see the trait).
    const DEVICE_LOSS_ENDS_THE_PROCESS: bool = true;
    type SavedCurrent = SavedContext;
    type Graph = CudaGraph;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device_info(&self, device: DeviceId) -> Result<DeviceInfo> {
        Ok(self.device(device)?.info.clone())
    }

    /// The device whose primary context is current on the calling thread; `None` when no
    /// context is current. A context the program created itself is [`Error::ForeignContext`]:
    /// `Option<DeviceId>` cannot name it, and a guard that restored `None` would lose it.
    fn current_device(&self) -> Result<Option<DeviceId>> {
        let current = result::context::current(self.driver)?;
        device_of_context(self.devices.iter().map(|state| state.context()), current)
    }

    /// cuCtxSetCurrent with the device's primary context (`None`: with no context).
    fn set_current_device(&self, device: Option<DeviceId>) -> Result<()> {
        let context = match device {
            Some(device) => self.device(device)?.context(),
            None => ptr::null_mut(),
        };
        // SAFETY: null, or a primary context the backend holds retained.
        unsafe { result::context::set_current(self.driver, context) }
    }

    /// cuCtxGetCurrent: the context on top of the calling thread's context stack, whoever
    /// owns it (null when none).
    fn save_current(&self) -> Result<SavedContext> {
        result::context::current(self.driver).map(SavedContext)
    }

    /// cuCtxSetCurrent with the saved context: replaces the top of the calling thread's context
    /// stack, as `set_current_device` did, so the stack is as it was before the switch.
    fn restore_current(&self, saved: SavedContext) -> Result<()> {
        // SAFETY: null, one of the backend's primary contexts, or a context its owner keeps
        // alive while it may be restored (the trait's contract for `restore_current`).
        unsafe { result::context::set_current(self.driver, saved.0) }
    }

    /// Whether the saved context is `device`'s primary context (an index and a comparison).
    fn is_current(&self, saved: SavedContext, device: DeviceId) -> bool {
        self.devices
            .get(device.index())
            .is_some_and(|state| state.context() == saved.0)
    }

    /// Device: cuMemAlloc; managed: cuMemAllocManaged with `ATTACH_GLOBAL`; pinned host:
    /// cuMemHostAlloc with `PORTABLE | DEVICEMAP`.
    /// The address is recorded for `free`.
    fn allocate(&self, device: DeviceId, kind: MemoryKind, bytes: usize) -> Result<Option<usize>> {
        check_allocation(&self.device(device)?.info, device, kind, bytes)?;
        let _scope = self.enter(device)?;
        let driver = self.driver;
        let allocated = allocation_outcome(match kind {
            MemoryKind::Device => result::memory::alloc(driver, bytes),
            MemoryKind::Managed => {
                result::memory::alloc_managed(driver, bytes, sys::CU_MEM_ATTACH_GLOBAL)
            }
            MemoryKind::HostPinned => {
                let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
                result::memory::alloc_host(driver, bytes, flags)
                    .map(|host| host as sys::CUdeviceptr)
            }
        });
        self.allocations.record(device, kind, allocated)
    }

    /// Device memory only: cuMemAllocFromPoolAsync from the device's default pool (release
    /// threshold at the maximum). Other kinds are [`Error::KindUnsupported`]. The address is
    /// recorded for `free`.
    fn allocate_on_stream(
        &self,
        stream: CudaStream,
        kind: MemoryKind,
        bytes: usize,
    ) -> Result<Option<usize>> {
        let stream = self.streams.get(stream.key)?;
        let device = stream.device;
        let pool = self.device(device)?.pool();
        check_stream_allocation(device, kind, pool.is_some(), bytes)?;
        let pool = pool.expect("checked");
        let _scope = self.enter(device)?;
        // SAFETY: the device's default pool, and a live stream of the device (held), whose
        // context is current.
        let allocated = allocation_outcome(unsafe {
            result::memory::alloc_from_pool_async(self.driver, bytes, pool, stream.raw)
        });
        self.allocations.record(device, kind, allocated)
    }

    /// Device memory with `after`: cuMemFreeAsync on that stream (stream-ordered, for memory
    /// from either allocation path); without: cuMemFree, or for memory of a pool
    /// (`CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE` set) cuMemFreeAsync on the legacy default
    /// stream: cuMemFree of pool memory that was opened to a peer (cuMemPoolSetAccess) is
    /// reported leaked by compute-sanitizer (measured on two H100s,
    /// `hw-results/2026-11-25-2xH100-peer-probe`). Managed and pinned host memory:
    /// synchronise `after`, then cuMemFree / cuMemFreeHost. Only memory this backend allocated
    /// (of `kind`, on `device`) and has not freed reaches the driver: anything else is
    /// [`Error::UnknownAddress`]; a failed free leaves the memory recorded.
    fn free(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<CudaStream>,
    ) -> Result<()> {
        self.device(device)?;
        self.allocations.release(device, kind, address, || {
            let after = after
                .map(|stream| self.streams.get(stream.key))
                .transpose()?;
            let _scope = self.enter(device)?;
            let (driver, device_address) = (self.driver, address as sys::CUdeviceptr);
            // Each arm frees `address`: live memory of this kind that this backend allocated on
            // the device, just taken out of its allocations (so no other free reaches it), that
            // the caller no longer uses but by `after`'s work (the trait's contract).
            match FreeStep::of(kind, after.as_deref()) {
                // SAFETY: device memory as said above, freed in the order of `stream`, a live
                // stream of the device (held) whose context is current.
                FreeStep::InStreamOrder(stream) => unsafe {
                    result::memory::free_async(driver, device_address, stream.raw)
                },
                FreeStep::Now => {
                    let pool = result::memory::memory_pool_of(driver, device_address)?;
                    if pool.is_null() {
                        // SAFETY: device memory of no pool as said above, unused by any work.
                        unsafe { result::memory::free(driver, device_address) }
                    } else {
                        // SAFETY: pool memory as said above, unused by any work, freed in the
                        // order of the legacy default stream (null) of the current context.
                        unsafe {
                            result::memory::free_async(driver, device_address, ptr::null_mut())
                        }
                    }
                }
                FreeStep::AfterSynchronizing { after, pinned } => {
                    if let Some(stream) = after {
                        // SAFETY: a live stream of the device (held), whose context is current.
                        unsafe { result::stream::synchronize(driver, stream.raw) }?;
                    }
                    if pinned {
                        // SAFETY: pinned host memory as said above, unused now that `after`'s
                        // work has finished.
                        unsafe { result::memory::free_host(driver, address as *mut c_void) }
                    } else {
                        // SAFETY: managed memory as said above, unused now that `after`'s work
                        // has finished.
                        unsafe { result::memory::free(driver, device_address) }
                    }
                }
            }
        })
    }

    /// cuMemGetAllocationGranularity (minimum) of device memory, read at open, where the
    /// device reports `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` and the driver
    /// has the entry points; `None` for other kinds.
    fn vm_granularity(&self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        self.granularity(device, kind)
    }

    /// cuMemAddressReserve of `wanted` bytes, else of `needed` (out of address space: `None`),
    /// recorded for `vm_release`. A size not a multiple of the granularity is
    /// [`Error::MisalignedSegment`]; a kind without virtual memory [`Error::KindUnsupported`].
    fn vm_reserve(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        wanted: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        self.reserve_range((device, kind), wanted, needed)
    }

    /// One cuMemCreate and cuMemMap per granularity piece (its handle kept for the unmap),
    /// then cuMemSetAccess for the device. Out of memory is `false`, with the pieces mapped so
    /// far unmapped and released again. A range outside the backend's reservations, or over a
    /// mapped piece, is [`Error::UnknownAddress`] before the driver.
    fn vm_map(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        self.map_range((device, kind), address, size)
    }

    /// cuMemSetAccess of a range mapped throughout on `device` for `peer`'s location.
    fn vm_set_access(
        &self,
        device: DeviceId,
        address: usize,
        size: usize,
        peer: DeviceId,
    ) -> Result<()> {
        self.grant_peer(device, (address, size), peer)
    }

    /// cuStreamSynchronize of `after` (a stream of `device`), then cuMemUnmap and cuMemRelease
    /// of each piece; the range must be whole pieces this backend mapped
    /// ([`Error::UnknownAddress`] otherwise).
    fn vm_unmap(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<CudaStream>,
    ) -> Result<()> {
        self.unmap_range((device, kind), (address, size), after)
    }

    /// cuMemAddressFree of a whole range from `vm_reserve`, nothing of it mapped.
    fn vm_release(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        self.release_range((device, kind), address, size)
    }

    /// No driver call: tells gpu-recorder, when it records the process, that a runtime's
    /// allocator handed the buffer out or took it back, so that a launch's footprint is the
    /// buffer, not its whole segment ([`gpu_ffi_loader::recorder::note_buffer`]). Without the
    /// recorder: one atomic load and a branch. Never fails.
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
        stream: CudaStream,
        kernel: CudaKernel,
        ranges: &[(ByteRange, Access)],
    ) {
        let (function, stream) = (kernel.function as usize, stream.raw as usize);
        gpu_ffi_loader::recorder::note_launch_footprint(function, stream, ranges);
    }

    /// cuMemHostRegister with `PORTABLE | DEVICEMAP` (in device 0's context: registration needs
    /// a context, and is process-wide), then cuMemHostGetDevicePointer in each device's context
    /// for `device_ptrs[d]`. If an address lookup fails, the range is unregistered again.
    fn host_register(&self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        check_device_slots(self.devices.len(), device_ptrs)?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // Looked up, and device 0's context entered, before registering: undoing the
        // registration on the error path below can then neither fail for a missing symbol nor
        // for entering the context, which would leave the range registered after an error.
        self.driver.cuMemHostUnregister()?;
        let _scope = self.enter(DeviceId(0))?;
        let host = range.start as *mut c_void;
        // SAFETY: the trait's contract: the caller's host range stays allocated until it is
        // unregistered.
        unsafe { result::memory::host_register(self.driver, host, range.len, flags) }?;
        if let Err(error) = self.device_addresses(range.start, device_ptrs) {
            // SAFETY: the range was registered just above and nothing has used it yet.
            let _ = unsafe { result::memory::host_unregister(self.driver, host) };
            return Err(error);
        }
        self.registrations.record(range);
        Ok(())
    }

    /// cuMemHostUnregister of exactly `start`, a range this backend registered: a pointer
    /// inside one is [`Error::NotEntryStart`], and one in none (never registered here, or
    /// unregistered already) [`Error::NotLocked`], both before the driver.
    fn host_unregister(&self, start: usize) -> Result<()> {
        self.registrations.release(start, || {
            let _scope = self.enter(DeviceId(0))?;
            // SAFETY: a range this backend registered (just taken out of its registrations);
            // the trait's contract: no work still to run uses it.
            unsafe { result::memory::host_unregister(self.driver, start as *mut c_void) }
        })
    }

    /// One cuPointerGetAttributes for the memory type and the allocation's range: host memory
    /// the driver knows is pinned (cuMemHostRegister or cuMemHostAlloc, by anyone); the range is
    /// the registered one exactly, unaligned start included. Unknown memory (the driver reports
    /// no type), device and managed memory are `None`.
    fn host_pinned_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        check_device_slots(self.devices.len(), device_ptrs)?;
        let range = {
            let _scope = self.enter(DeviceId(0))?;
            // What cuPointerGetAttribute (singular) and older drivers say for unknown memory.
            none_on_code(
                result::memory::range_of(self.driver, ptr as sys::CUdeviceptr),
                code(sys::CUDA_ERROR_INVALID_VALUE),
            )?
        };
        let Some(range) = range.filter(|range| range.memory_type == sys::CU_MEMORYTYPE_HOST) else {
            return Ok(None);
        };
        let Some(extent) = ByteRange::new(range.start as usize, range.size) else {
            return Ok(None);
        };
        self.device_addresses(extent.start, device_ptrs)?;
        Ok(Some(extent))
    }

    fn stream_create(&self, device: DeviceId) -> Result<CudaStream> {
        let _scope = self.enter(device)?;
        let raw = result::stream::create(self.driver, sys::CU_STREAM_NON_BLOCKING)?;
        Ok(self.register_stream(raw, device))
    }

    /// Wraps the raw `CUstream` with its device, with no driver call: the driver cannot check
    /// a handle without dereferencing it. `0` (the legacy default stream), `CU_STREAM_LEGACY`
    /// and `CU_STREAM_PER_THREAD` name the default streams of whichever context is current
    /// at each call, which every method makes `device`'s primary context. The handle is live
    /// (each adoption a handle of its own) until the stream is destroyed or the device reset.
    unsafe fn adopt_stream(&self, device: DeviceId, raw: usize) -> Result<CudaStream> {
        self.device(device)?;
        Ok(self.register_stream(raw as sys::CUstream, device))
    }

    /// cuStreamDestroy, once no call of another thread uses the stream any more; the handle is
    /// stale from the moment the call begins (live again if the driver refuses).
    fn stream_destroy(&self, stream: CudaStream) -> Result<()> {
        self.streams
            .destroy(stream.key, std::thread::yield_now, |stream| {
                let _scope = self.enter(stream.device)?;
                // SAFETY: a live stream of the device, just taken out of the live streams after
                // the last call using it returned, so nothing uses it again.
                unsafe { result::stream::destroy(self.driver, stream.raw) }
            })
    }

    fn stream_synchronize(&self, stream: CudaStream) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let _scope = self.enter(stream.device)?;
        // SAFETY: a live stream of the device (held), whose context is current.
        unsafe { result::stream::synchronize(self.driver, stream.raw) }
    }

    fn event_create(&self, device: DeviceId) -> Result<CudaEvent> {
        let _scope = self.enter(device)?;
        let raw = result::event::create(self.driver, sys::CU_EVENT_DISABLE_TIMING)?;
        Ok(self
            .events
            .register(device, |key| CudaEvent { raw, device, key }))
    }

    /// cuEventDestroy, once no call of another thread uses the event any more; the handle is
    /// stale from the moment the call begins (live again if the driver refuses).
    fn event_destroy(&self, event: CudaEvent) -> Result<()> {
        self.events
            .destroy(event.key, std::thread::yield_now, |event| {
                let _scope = self.enter(event.device)?;
                // SAFETY: a live event of the device, just taken out of the live events after the
                // last call using it returned, so nothing uses it again.
                unsafe { result::event::destroy(self.driver, event.raw) }
            })
    }

    /// cuEventRecord; an event of another device is [`Error::WrongDevice`] before the driver
    /// (which would say "invalid resource handle").
    fn event_record(&self, event: CudaEvent, stream: CudaStream) -> Result<()> {
        check_same_device(stream.device, event.device)?;
        let (stream, event) = (self.streams.get(stream.key)?, self.events.get(event.key)?);
        let _scope = self.enter(stream.device)?;
        // SAFETY: a live event and a live stream of the device (both held), whose context is
        // current.
        unsafe { result::event::record(self.driver, event.raw, stream.raw) }
    }

    fn stream_wait_event(&self, stream: CudaStream, event: CudaEvent) -> Result<()> {
        let (stream, event) = (self.streams.get(stream.key)?, self.events.get(event.key)?);
        let _scope = self.enter(stream.device)?;
        // SAFETY: a live stream of the device, whose context is current, and a live event of
        // any (both held).
        unsafe { result::stream::wait_event(self.driver, stream.raw, event.raw, 0) }
    }

    /// cuEventQuery: `CUDA_SUCCESS` is true, `CUDA_ERROR_NOT_READY` false.
    fn event_query(&self, event: CudaEvent) -> Result<bool> {
        let event = self.events.get(event.key)?;
        let _scope = self.enter(event.device)?;
        // SAFETY: a live event of the device (held).
        unsafe { result::event::query(self.driver, event.raw) }
    }

    fn event_synchronize(&self, event: CudaEvent) -> Result<()> {
        let event = self.events.get(event.key)?;
        let _scope = self.enter(event.device)?;
        // SAFETY: a live event of the device (held).
        unsafe { result::event::synchronize(self.driver, event.raw) }
    }

    /// cuCtxSynchronize in the device's primary context.
    fn device_synchronize(&self, device: DeviceId) -> Result<()> {
        let _scope = self.enter(device)?;
        result::context::synchronize(self.driver)
    }

    /// cuDevicePrimaryCtxReset, then the device's set-up again: the kernel library is
    /// forgotten (its module died with the context; the next `kernel` call loads it again)
    /// and the default pool's release threshold is raised again. Every stream, event, module,
    /// graph and allocation of the device is gone, and its handles stale; peer access to and
    /// from it too.
    fn reset_device(&self, device: DeviceId) -> Result<()> {
        let state = self.device(device)?;
        let mut library = state
            .library
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // What is still mapped or reserved goes back first: the reset would leave the
        // reservations, and the driver's handles of physical memory, behind.
        if let Ok(_scope) = self.enter(device) {
            self.clear_mappings(device, state);
        }
        // SAFETY: the trait's contract: nothing of the device is used after its reset; its
        // handles go stale below.
        unsafe { result::context::reset_primary(self.driver, state.ordinal) }?;
        *library = None;
        drop(library);
        self.streams.forget_device(device);
        self.events.forget_device(device);
        self.modules.forget_device(device);
        // The reset destroyed the graphs' instantiations with the context.
        self.graphs.forget_device(device);
        self.allocations.forget_device(device);
        // The reset destroyed the context this backend retained (calls in it say
        // CUDA_ERROR_CONTEXT_IS_DESTROYED, seen on two H200s): give that retain back and
        // retain the device's primary context afresh.
        // SAFETY: the backend retained this device's primary context once, at open.
        let _ = unsafe { result::context::release_primary(self.driver, state.ordinal) };
        let context = result::context::retain_primary(self.driver, state.ordinal)?;
        state.context.store(context, Ordering::Release);
        if state.info.allocator.device.stream_ordered {
            let pool = configure_default_pool(self.driver, state)?;
            state.pool.store(pool, Ordering::Release);
        }
        Ok(())
    }

    /// cuDeviceCanAccessPeer (false for a device and itself).
    fn peer_access_possible(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        let (from, to) = (self.device(device)?.ordinal, self.device(peer)?.ordinal);
        if device == peer {
            return Ok(false);
        }
        result::device::can_access_peer(self.driver, from, to)
    }

    /// cuCtxEnablePeerAccess in `device`'s primary context (already enabled, by us or by
    /// another user of the primary context such as PyTorch, is success), then
    /// cuMemPoolSetAccess on `peer`'s default pool for `device`: the stream-ordered memory is
    /// outside context peer access (a plain copy of it on `device`'s stream is refused without
    /// it, measured on two H100s). If the pool refuses, the context access this call enabled
    /// is disabled again.
    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        let peer_state = self.device(peer)?;
        let ordinal = self.device(device)?.ordinal;
        // Looked up first (and cached), so that undoing cannot fail for a missing symbol.
        self.driver.cuCtxDisablePeerAccess()?;
        let _scope = self.enter(device)?;
        let driver = self.driver;
        let peer_context = peer_state.context();
        enable_peer_access(
            || {
                // SAFETY: the peer's primary context, which the backend holds retained.
                let enabled =
                    unsafe { result::context::enable_peer_access(driver, peer_context, 0) };
                none_on_code(enabled, code(sys::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED))
                    .map(|newly| newly.is_some())
            },
            || {
                let pool = peer_state.pool()?;
                let access = sys::CUmemAccessDesc {
                    location: sys::CUmemLocation {
                        type_: sys::CU_MEM_LOCATION_TYPE_DEVICE,
                        id: ordinal,
                    },
                    flags: sys::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                };
                // SAFETY: the peer's default pool, which lives as long as its context.
                Some(unsafe { result::memory::set_pool_access(driver, pool, &[access]) })
            },
            || {
                // SAFETY: this context enabled access to the peer's context just above, and no
                // work has used it yet.
                let _ = unsafe { result::context::disable_peer_access(driver, peer_context) };
            },
        )
    }

    /// cuMemcpyPeerAsync with each side's primary context.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn copy_peer(
        &self,
        stream: CudaStream,
        dst: usize,
        dst_device: DeviceId,
        src: usize,
        src_device: DeviceId,
        bytes: usize,
    ) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let dst_context = self.device(dst_device)?.context();
        let src_context = self.device(src_device)?.context();
        let _scope = self.enter(stream.device)?;
        // SAFETY: the caller's promise for both ranges; both contexts are primary contexts the
        // backend holds, and the stream is live (held) and of the current one.
        unsafe {
            result::memory::copy_peer_async(
                self.driver,
                dst as sys::CUdeviceptr,
                dst_context,
                src as sys::CUdeviceptr,
                src_context,
                bytes,
                stream.raw,
            )
        }
    }

    /// cuMemcpyAsync: with unified addressing (every 64-bit device CUDA 12 and 13 support) the
    /// driver finds each side's memory from its address.
    ///
    /// # Safety
    /// The trait's: the driver checks nothing about the caller's host memory.
    unsafe fn copy(&self, stream: CudaStream, dst: usize, src: usize, bytes: usize) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let _scope = self.enter(stream.device)?;
        // SAFETY: the caller's promise for both ranges; the stream is live (held) and of the
        // current context.
        unsafe {
            result::memory::copy_async(
                self.driver,
                dst as sys::CUdeviceptr,
                src as sys::CUdeviceptr,
                bytes,
                stream.raw,
            )
        }
    }

    /// cuMemsetD8Async.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn fill(&self, stream: CudaStream, dst: usize, value: u8, bytes: usize) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let _scope = self.enter(stream.device)?;
        // SAFETY: the caller's promise for the range; the stream is live (held) and of the
        // current context.
        unsafe {
            result::memory::set_d8_async(
                self.driver,
                dst as sys::CUdeviceptr,
                value,
                bytes,
                stream.raw,
            )
        }
    }

    /// The library module is loaded on the device at the first call (cuModuleLoadData of the
    /// embedded PTX, JIT-compiled by the driver) and kept; later calls only look it up.
    fn kernel(&self, device: DeviceId, name: &str) -> Result<CudaKernel> {
        let library_index = kernels::find(name)?;
        let (module, function) = self.library_function(device, library_index)?;
        Ok(CudaKernel {
            function,
            device,
            module,
            library_index: Some(library_index),
        })
    }

    /// cuMemsetD8Async, cuMemsetD16Async or cuMemsetD32Async, by the value's width.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn fill_elements(
        &self,
        stream: CudaStream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let _scope = self.enter(stream.device)?;
        let (driver, dst, raw) = (self.driver, dst as sys::CUdeviceptr, stream.raw);
        // The stream is live (held) and of the current context.
        match value {
            // SAFETY: the caller's promise for `count` bytes at `dst`; the stream as said above.
            FillValue::U8(v) => unsafe { result::memory::set_d8_async(driver, dst, v, count, raw) },
            // SAFETY: the caller's promise for `count` 16-bit elements at `dst`; the stream as
            // said above.
            FillValue::U16(v) => unsafe {
                result::memory::set_d16_async(driver, dst, v, count, raw)
            },
            // SAFETY: the caller's promise for `count` 32-bit elements at `dst`; the stream as
            // said above.
            FillValue::U32(v) => unsafe {
                result::memory::set_d32_async(driver, dst, v, count, raw)
            },
        }
    }

    /// cuModuleLoadData in the device's primary context (PTX is JIT-compiled by the driver at
    /// its default, highest, optimisation level).
    ///
    /// # Safety
    /// The trait's.
    unsafe fn module_load(&self, device: DeviceId, image: *const c_void) -> Result<CudaModule> {
        if image.is_null() {
            return Err(Error::NullPointer {
                what: "module image",
            });
        }
        let _scope = self.enter(device)?;
        // SAFETY: the caller's promise for the image.
        let raw = unsafe { result::module::load_data(self.driver, image) }?;
        Ok(self.register_module(raw, device))
    }

    /// cuModuleUnload, once no call of another thread uses the module or one of its kernels
    /// any more; the module and its kernels are stale from the moment the call begins (live
    /// again if the driver refuses).
    fn module_unload(&self, module: CudaModule) -> Result<()> {
        self.modules
            .destroy(module.key, std::thread::yield_now, |module| {
                let _scope = self.enter(module.device)?;
                // SAFETY: a live module of the device, just taken out of the live modules after
                // the last call using it or its kernels returned, so nothing uses them again.
                unsafe { result::module::unload(self.driver, module.raw) }
            })
    }

    /// cuModuleGetFunction; a name the module lacks is the driver's `CUDA_ERROR_NOT_FOUND`.
    /// cuFuncGetParamInfo for each parameter until the driver says there is none more.
    fn kernel_param_sizes(&self, kernel: CudaKernel) -> Result<Vec<usize>> {
        let _module = self.live_kernel(kernel)?;
        let mut sizes = Vec::new();
        loop {
            // SAFETY: a function of a live module (held).
            let info =
                unsafe { result::module::param_info(self.driver, kernel.function, sizes.len()) }?;
            match info {
                Some((_, size)) => sizes.push(size),
                None => break,
            }
        }
        Ok(sizes)
    }

    fn module_kernel(&self, module: CudaModule, name: &CStr) -> Result<CudaKernel> {
        let module = self.modules.get(module.key)?;
        let _scope = self.enter(module.device)?;
        // SAFETY: a live module of the device (held).
        let function = unsafe { result::module::function(self.driver, module.raw, name) }?;
        Ok(CudaKernel {
            function,
            device: module.device,
            module: module.key,
            library_index: None,
        })
    }

    /// cuFuncGetAttribute(`SHARED_SIZE_BYTES`).
    fn kernel_static_workgroup_bytes(&self, kernel: CudaKernel) -> Result<u32> {
        let _module = self.live_kernel(kernel)?;
        let _scope = self.enter(kernel.device)?;
        // SAFETY: a function of a live module of the device (held).
        let bytes = unsafe {
            result::module::function_attribute(
                self.driver,
                sys::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                kernel.function,
            )
        }?;
        Ok(u32::try_from(bytes).unwrap_or(0))
    }

    /// cuFuncSetAttribute(`MAX_DYNAMIC_SHARED_SIZE_BYTES`).
    fn kernel_allow_workgroup_bytes(&self, kernel: CudaKernel, bytes: u32) -> Result<()> {
        let value = workgroup_bytes_attribute(bytes, kernel.library_index)?;
        let _module = self.live_kernel(kernel)?;
        let _scope = self.enter(kernel.device)?;
        // SAFETY: a function of a live module of the device (held).
        unsafe {
            result::module::set_function_attribute(
                self.driver,
                kernel.function,
                sys::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                value,
            )
        }
    }

    /// cuLaunchKernel, after checking the arguments against the kernel's parameters
    /// ([`Error::KernelArgumentMismatch`]; a module's kernel has no table to check against and
    /// is refused: launch it with [`Backend::launch_packed`]) and that kernel and stream share
    /// a device ([`Error::WrongDevice`]).
    ///
    /// # Safety
    /// The trait's: the standard library's kernels reach as far from each pointer argument as
    /// their count arguments and the grid say, and nothing checks that against the memory.
    unsafe fn launch(
        &self,
        stream: CudaStream,
        kernel: CudaKernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        let mut values = library_arguments(kernel.library_index, args)?;
        let mut pointers = values.pointers();
        // SAFETY: the caller's promise for the memory; the parameter array was just packed
        // from arguments checked against the kernel's parameters.
        unsafe { self.launch_with(stream, kernel, dims, pointers.as_mut_ptr()) }
    }

    /// cuLaunchKernel with the caller's parameter array, after checking that kernel and stream
    /// share a device ([`Error::WrongDevice`]).
    ///
    /// # Safety
    /// The trait's.
    unsafe fn launch_packed(
        &self,
        stream: CudaStream,
        kernel: CudaKernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.launch_with(stream, kernel, dims, params) }
    }

    /// cuGraphCreate, a node per operation after its dependencies' nodes, then
    /// cuGraphInstantiateWithFlags, in the device's primary context; a failure anywhere
    /// destroys what was built. Launch nodes take library kernels of `device` only, their
    /// arguments checked as for `launch`.
    fn graph_instantiate(
        &self,
        device: DeviceId,
        graph: &GraphDesc<CudaKernel>,
    ) -> Result<CudaGraph> {
        self.instantiate_graph(device, graph)
    }

    /// cuGraphLaunch; a graph of another device than the stream's is [`Error::WrongDevice`],
    /// one whose kernels' module was unloaded [`Error::StaleHandle`], both before the driver.
    ///
    /// # Safety
    /// The trait's.
    unsafe fn graph_launch(&self, stream: CudaStream, graph: CudaGraph) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.launch_graph(stream, graph) }
    }

    /// cuGraphExecKernelNodeSetParams, cuGraphExecMemcpyNodeSetParams or
    /// cuGraphExecMemsetNodeSetParams, by the node's kind.
    fn graph_set_node(
        &self,
        graph: CudaGraph,
        node: NodeId,
        op: &NodeOp<CudaKernel>,
    ) -> Result<()> {
        self.set_graph_node(graph, node, op)
    }

    /// cuGraphExecDestroy and cuGraphDestroy, once no call of another thread uses the graph;
    /// the handle is stale from then on, also if the driver refuses.
    fn graph_destroy(&self, graph: CudaGraph) -> Result<()> {
        self.destroy_graph(graph)
    }
}
