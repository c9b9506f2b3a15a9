//! `impl Backend for HostBackend`: each method of the trait as the host backend meets it,
//! on the tables, streams and memory that `host/mod.rs` and its other modules keep.

use super::*;
use gpu_core::backend::Access;
use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};

impl Backend for HostBackend {
    type Stream = HostStream;
    type Event = HostEvent;
    type Kernel = HostKernel;
    type Module = HostModule;
    type SavedCurrent = Option<DeviceId>;
    type Graph = HostGraph;

    fn name(&self) -> &'static str {
        "host"
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device_info(&self, device: DeviceId) -> Result<DeviceInfo> {
        self.calls.enter(CallKind::DeviceInfo)?;
        let config = self.device_config(device)?;
        Ok(DeviceInfo {
            name: config.name.clone(),
            total_memory: config.memory_capacity,
            allocator: config.allocator,
            workgroup: config.workgroup,
            unified_addressing: true,
            pageable_memory_access: false,
        })
    }

    fn current_device(&self) -> Result<Option<DeviceId>> {
        self.calls.enter(CallKind::CurrentDevice)?;
        Ok(self.current.get())
    }

    fn set_current_device(&self, device: Option<DeviceId>) -> Result<()> {
        self.calls.enter(CallKind::SetCurrentDevice)?;
        self.make_current(device)
    }

    fn save_current(&self) -> Result<Option<DeviceId>> {
        self.calls.enter(CallKind::SaveCurrent)?;
        Ok(self.current.get())
    }

    fn restore_current(&self, saved: Option<DeviceId>) -> Result<()> {
        self.calls.enter(CallKind::RestoreCurrent)?;
        self.make_current(saved)
    }

    fn is_current(&self, saved: Option<DeviceId>, device: DeviceId) -> bool {
        saved == Some(device)
    }

    fn allocate(&self, device: DeviceId, kind: MemoryKind, bytes: usize) -> Result<Option<usize>> {
        let call = self.calls.enter(CallKind::Allocate)?;
        check_device(self, device)?;
        self.usable(device, call)?;
        self.allocate_checked(device, kind, bytes, false, call)
    }

    fn allocate_on_stream(
        &self,
        stream: HostStream,
        kind: MemoryKind,
        bytes: usize,
    ) -> Result<Option<usize>> {
        let call = self.calls.enter(CallKind::AllocateOnStream)?;
        let shared = self.current_stream(stream, call)?;
        // Host memory is usable at once, so it is usable in the stream's order too.
        self.allocate_checked(shared.device, kind, bytes, true, call)
    }

    fn free(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<HostStream>,
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::Free)?;
        check_device(self, device)?;
        self.current.require(device, call)?;
        let stream = after.map(|s| self.stream(s, call)).transpose()?;
        if stream.as_ref().is_some_and(|s| s.device != device) {
            return Err(HostErrorCode::InvalidHandle.error(call));
        }
        let block = lock(&self.memory).release(device, kind, address, call)?;
        // Queued work holds the block too; it is returned to the host once all let go.
        if let Some(stream) = stream {
            stream.enqueue(WorkOp::Free { address }, Payload::Hold(alloc::vec![block]));
        }
        Ok(())
    }

    /// Modelled for every kind the device has: reserved ranges are host memory the host
    /// commits when touched, mapped from their start in pieces of [`HOST_VM_GRANULARITY`]
    /// counted against the device's capacity; accesses beyond the mapped part are refused as
    /// beyond an allocation.
    ///
    /// [`HOST_VM_GRANULARITY`]: super::HOST_VM_GRANULARITY
    fn vm_granularity(&self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        let config = self.device_config(device).ok()?;
        config
            .allocator
            .support(kind)
            .available
            .then_some(super::HOST_VM_GRANULARITY)
    }

    fn vm_reserve(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        wanted: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        let call = self.calls.enter(CallKind::Allocate)?;
        check_device(self, device)?;
        self.usable(device, call)?;
        if self.vm_granularity(device, kind).is_none() {
            return Err(HostErrorCode::NotSupported.error(call));
        }
        lock(&self.memory).reserve(device, kind, (wanted, needed))
    }

    fn vm_map(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        let call = self.calls.enter(CallKind::Allocate)?;
        check_device(self, device)?;
        self.usable(device, call)?;
        lock(&self.memory).map(device, kind, (address, size), call)
    }

    /// Recorded: a plain copy on a stream of `peer` reaches a reserved range's mapped pieces
    /// only where they were granted to it (unmapping a piece takes its grants away, and so
    /// does a reset of the peer, as a driver's might). The range must be mapped on `device`
    /// (`HOST_INVALID_VALUE` otherwise).
    fn vm_set_access(
        &self,
        device: DeviceId,
        address: usize,
        size: usize,
        peer: DeviceId,
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::Allocate)?;
        check_device(self, device)?;
        check_device(self, peer)?;
        lock(&self.memory).grant(device, (address, size), peer, call)
    }

    fn vm_unmap(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<HostStream>,
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::Free)?;
        check_device(self, device)?;
        self.current.require(device, call)?;
        if let Some(stream) = after {
            // Unmapping is not stream-ordered: the stream's queued work finishes first.
            let stream = self.stream(stream, call)?;
            if stream.device != device {
                return Err(HostErrorCode::InvalidHandle.error(call));
            }
            stream.tail().wait()?;
        }
        lock(&self.memory).unmap(device, kind, (address, size), call)
    }

    fn vm_release(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::Free)?;
        check_device(self, device)?;
        lock(&self.memory).release_range(device, kind, (address, size), call)
    }

    /// Recorded, and every later copy, fill and launch argument in that memory is checked
    /// against its buffer. Not counted as a call (nor failed by fault injection): an
    /// annotation, not a driver call.
    fn note_buffer(&self, device: DeviceId, range: ByteRange, live: bool) -> Result<()> {
        check_device(self, device)?;
        lock(&self.memory).note_buffer(range, live, "note_buffer")
    }

    /// Whether [`HostBackend::want_footprints`] asked for them.
    fn footprints_wanted(&self) -> bool {
        self.footprints.wanted()
    }

    /// Logs the footprint for [`HostBackend::take_footprints`]; checks nothing.
    fn note_launch_footprint(
        &self,
        stream: HostStream,
        kernel: HostKernel,
        ranges: &[(ByteRange, Access)],
    ) {
        self.footprints.note(stream, kernel, ranges);
    }

    fn host_register(&self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()> {
        let call = self.calls.enter(CallKind::HostRegister)?;
        let slots = self.device_slots(device_ptrs, call)?;
        lock(&self.memory).register(range, call)?;
        // Every device reaches host memory at its host address.
        slots.fill(range.start);
        Ok(())
    }

    fn host_unregister(&self, start: usize) -> Result<()> {
        let call = self.calls.enter(CallKind::HostUnregister)?;
        lock(&self.memory).unregister(start, call)
    }

    fn host_pinned_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>> {
        let call = self.calls.enter(CallKind::HostPinnedExtent)?;
        let slots = self.device_slots(device_ptrs, call)?;
        let extent = lock(&self.memory).pinned_extent(ptr);
        if let Some(extent) = extent {
            slots.fill(extent.start);
        }
        Ok(extent)
    }

    fn stream_create(&self, device: DeviceId) -> Result<HostStream> {
        let call = self.calls.enter(CallKind::StreamCreate)?;
        check_device(self, device)?;
        self.usable(device, call)?;
        let handle = HostStream::fresh();
        let shared = Arc::new(StreamShared::new(
            handle,
            device,
            self.health[device.index()].clone(),
        ));
        let worker = {
            let (shared, log) = (shared.clone(), self.log.clone());
            std::thread::Builder::new()
                .name(format!("host-stream-{}", device.index()))
                .spawn(move || run_worker(shared, log))
                .map_err(|_| HostErrorCode::OperatingSystem.error(call))?
        };
        let mut table = lock(&self.streams);
        table.reap();
        table.live.insert(handle, StreamEntry { shared, worker });
        Ok(handle)
    }

    /// Checks that `raw` numbers a live stream of `device` (else `HOST_INVALID_HANDLE`); not a
    /// driver call (no call is counted and no current device is needed), as wrapping a
    /// `CUstream` is none.
    unsafe fn adopt_stream(&self, device: DeviceId, raw: usize) -> Result<HostStream> {
        check_device(self, device)?;
        let stream = HostStream::from_raw(raw);
        let shared = self.stream(stream, "adopt_stream")?;
        if shared.device != device {
            // What CUDA reports for a stream of another device's context.
            return Err(HostErrorCode::InvalidHandle.error("adopt_stream"));
        }
        Ok(stream)
    }

    fn stream_destroy(&self, stream: HostStream) -> Result<()> {
        let call = self.calls.enter(CallKind::StreamDestroy)?;
        // Destroying works on a lost device too, so that its owner can clean up.
        let shared = self.stream(stream, call)?;
        self.current.require(shared.device, call)?;
        let mut table = lock(&self.streams);
        let entry = table
            .live
            .remove(&shared.handle)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))?;
        entry.shared.close();
        table.draining.push(entry);
        table.reap();
        Ok(())
    }

    fn stream_synchronize(&self, stream: HostStream) -> Result<()> {
        let call = self.calls.enter(CallKind::StreamSynchronize)?;
        self.current_stream(stream, call)?.tail().wait()
    }

    fn event_create(&self, device: DeviceId) -> Result<HostEvent> {
        let call = self.calls.enter(CallKind::EventCreate)?;
        check_device(self, device)?;
        self.usable(device, call)?;
        let event = HostEvent::fresh();
        lock(&self.events).insert(event, EventSlot { device, last: None });
        Ok(event)
    }

    fn event_destroy(&self, event: HostEvent) -> Result<()> {
        let call = self.calls.enter(CallKind::EventDestroy)?;
        let mut events = lock(&self.events);
        let slot = events
            .get(&event)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))?;
        self.current.require(slot.device, call)?;
        events.remove(&event);
        Ok(())
    }

    fn event_record(&self, event: HostEvent, stream: HostStream) -> Result<()> {
        let call = self.calls.enter(CallKind::EventRecord)?;
        let shared = self.current_stream(stream, call)?;
        let mut events = lock(&self.events);
        let slot = events
            .get_mut(&event)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))?;
        if slot.device != shared.device {
            return Err(HostErrorCode::InvalidHandle.error(call));
        }
        slot.last = Some(shared.enqueue(WorkOp::Record { event }, Payload::None));
        Ok(())
    }

    fn stream_wait_event(&self, stream: HostStream, event: HostEvent) -> Result<()> {
        let call = self.calls.enter(CallKind::StreamWaitEvent)?;
        let shared = self.current_stream(stream, call)?;
        let events = lock(&self.events);
        let slot = events
            .get(&event)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))?;
        shared.enqueue(WorkOp::Wait { event }, Payload::Wait(slot.last.clone()));
        Ok(())
    }

    fn event_query(&self, event: HostEvent) -> Result<bool> {
        let call = self.calls.enter(CallKind::EventQuery)?;
        self.event_of_usable_device(event, call)?
            .map_or(Ok(true), |point| point.query())
    }

    fn event_synchronize(&self, event: HostEvent) -> Result<()> {
        let call = self.calls.enter(CallKind::EventSynchronize)?;
        self.event_of_usable_device(event, call)?
            .map_or(Ok(()), |point| point.wait())
    }

    fn device_synchronize(&self, device: DeviceId) -> Result<()> {
        let call = self.calls.enter(CallKind::DeviceSynchronize)?;
        check_device(self, device)?;
        self.usable(device, call)?;
        let (live, draining): (Vec<_>, Vec<_>) = {
            let table = lock(&self.streams);
            let of_device = |e: &StreamEntry| e.shared.device == device;
            (
                table
                    .live
                    .values()
                    .filter(|e| of_device(e))
                    .map(|e| e.shared.tail())
                    .collect(),
                table
                    .draining
                    .iter()
                    .filter(|e| of_device(e))
                    .map(|e| e.shared.tail())
                    .collect(),
            )
        };
        // Destroyed streams are waited for, but their errors surface only through events.
        for point in &draining {
            point.reached();
        }
        live.iter().try_for_each(|point| point.wait())
    }

    /// Tears down everything of `device`: its streams (their queued work still runs), events,
    /// allocations (returned once queued work lets go), loaded kernels and peer access both
    /// ways, then makes it usable again. Host registrations are the backend's and stay.
    fn reset_device(&self, device: DeviceId) -> Result<()> {
        self.calls.enter(CallKind::ResetDevice)?;
        check_device(self, device)?;
        {
            let mut table = lock(&self.streams);
            let handles: Vec<HostStream> = table
                .live
                .iter()
                .filter(|(_, entry)| entry.shared.device == device)
                .map(|(&handle, _)| handle)
                .collect();
            for handle in handles {
                if let Some(entry) = table.live.remove(&handle) {
                    entry.shared.close();
                    table.draining.push(entry);
                }
            }
            table.reap();
        }
        lock(&self.events).retain(|_, slot| slot.device != device);
        lock(&self.memory).release_device(device);
        lock(&self.kernels).unload_device(device);
        self.forget_graphs(device);
        let count = self.devices.len();
        for other in 0..count {
            self.peer_access[device.index() * count + other].store(false, Ordering::Release);
            self.peer_access[other * count + device.index()].store(false, Ordering::Release);
        }
        self.health[device.index()].restore();
        Ok(())
    }

    fn peer_access_possible(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        self.calls.enter(CallKind::PeerAccessPossible)?;
        let linked =
            |d: DeviceId| check_device(self, d).map(|()| self.devices[d.index()].peer_link);
        Ok(device != peer && linked(device)? && linked(peer)?)
    }

    /// Refused (`HOST_PEER_ACCESS_UNSUPPORTED`) between devices without a link and for a
    /// device and itself.
    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        let call = self.calls.enter(CallKind::EnablePeerAccess)?;
        check_device(self, device)?;
        check_device(self, peer)?;
        self.usable(device, call)?;
        if device == peer
            || !self.devices[device.index()].peer_link
            || !self.devices[peer.index()].peer_link
        {
            return Err(HostErrorCode::PeerAccessUnsupported.error(call));
        }
        self.peer_access[device.index() * self.devices.len() + peer.index()]
            .store(true, Ordering::Release);
        Ok(())
    }

    /// # Safety
    /// As the trait's, but only for memory that is not an allocation of this backend (the
    /// caller's host memory, registered or not): a null, overflowing or partly allocated range
    /// is refused, and an allocation is held until the copy has run. The host must still not
    /// race with the copy on the bytes it touches.
    unsafe fn copy(&self, stream: HostStream, dst: usize, src: usize, bytes: usize) -> Result<()> {
        self.enqueue_plain_copy(stream, dst, src, bytes, false)
    }

    /// # Safety
    /// As for `copy`, and nothing writes the source until the copy has run (a source sharing
    /// a byte with the destination is refused).
    unsafe fn copy_from_read_only(
        &self,
        stream: HostStream,
        dst: usize,
        src: usize,
        bytes: usize,
    ) -> Result<()> {
        self.enqueue_plain_copy(stream, dst, src, bytes, true)
    }

    /// # Safety
    /// As for `copy`.
    unsafe fn copy_peer(
        &self,
        stream: HostStream,
        dst: usize,
        dst_device: DeviceId,
        src: usize,
        src_device: DeviceId,
        bytes: usize,
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::CopyPeer)?;
        check_device(self, dst_device)?;
        check_device(self, src_device)?;
        let shared = self.current_stream(stream, call)?;
        let item = self.prepare_copy([dst, src, bytes], false, call, |allocation, what, _| {
            let named = if what == "destination" {
                dst_device
            } else {
                src_device
            };
            allocation.device == named
        })?;
        shared.enqueue_items([item]);
        Ok(())
    }

    /// # Safety
    /// As for `copy`: only a range outside this backend's allocations must be kept valid by
    /// the caller; the host must still not race with the fill.
    unsafe fn fill(&self, stream: HostStream, dst: usize, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller's promise, for the same bytes.
        unsafe { self.fill_elements(stream, dst, FillValue::U8(value), bytes) }
    }

    /// # Safety
    /// As for `fill`. A destination not aligned to the element width is the driver's invalid
    /// value, as on CUDA.
    unsafe fn fill_elements(
        &self,
        stream: HostStream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::Fill)?;
        let shared = self.current_stream(stream, call)?;
        shared.enqueue_items([self.prepare_fill(dst, value, count, call)?]);
        Ok(())
    }

    /// Unsupported: the host backend runs kernels written in Rust and registered by name, and
    /// cannot compile a foreign module image (PTX, cubin), which only a GPU driver can.
    unsafe fn module_load(&self, device: DeviceId, _image: *const c_void) -> Result<HostModule> {
        check_device(self, device)?;
        Err(Error::Unsupported {
            backend: "host",
            what: "loading a module image (PTX or cubin: only a GPU driver compiles those)",
        })
    }

    fn module_unload(&self, module: HostModule) -> Result<()> {
        match module {}
    }

    fn module_kernel(&self, module: HostModule, _name: &CStr) -> Result<HostKernel> {
        match module {}
    }

    fn kernel(&self, device: DeviceId, name: &str) -> Result<HostKernel> {
        let call = self.calls.enter(CallKind::KernelLoad)?;
        check_device(self, device)?;
        self.usable(device, call)?;
        lock(&self.kernels).load(device, name)
    }

    fn kernel_static_workgroup_bytes(&self, kernel: HostKernel) -> Result<u32> {
        let call = self.calls.enter(CallKind::KernelStaticWorkgroupBytes)?;
        Ok(lock(&self.kernels)
            .get(kernel, call)?
            .static_workgroup_bytes)
    }

    fn kernel_allow_workgroup_bytes(&self, kernel: HostKernel, bytes: u32) -> Result<()> {
        let call = self.calls.enter(CallKind::KernelAllowWorkgroupBytes)?;
        let mut kernels = lock(&self.kernels);
        let loaded = kernels.get_mut(kernel, call)?;
        self.current.require(loaded.device, call)?;
        let limits = self.devices[loaded.device.index()].workgroup;
        if bytes
            > limits
                .max_per_block()
                .saturating_sub(loaded.static_workgroup_bytes)
        {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        loaded.allowed_workgroup_bytes = Some(bytes);
        Ok(())
    }

    /// # Safety
    /// As the trait's, but only for pointer arguments into registered host ranges: a kernel
    /// reaches nothing but the allocations and registered ranges its pointer arguments lie in
    /// ([`KernelContext::view`] refuses the rest), and allocations are held until it has run.
    /// The host must still not race with the kernel on the bytes it touches.
    unsafe fn launch(
        &self,
        stream: HostStream,
        kernel: HostKernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        let call = self.calls.enter(CallKind::Launch)?;
        let shared = self.current_stream(stream, call)?;
        let item = self.prepare_launch(shared.device, kernel, dims, args, call)?;
        shared.wait_for_room(self.launch_queue_depth);
        shared.enqueue_items([item]);
        Ok(())
    }

    /// Unsupported: the host backend's kernels take typed arguments ([`KernelArg`]), which a
    /// raw parameter array does not describe.
    unsafe fn launch_packed(
        &self,
        _stream: HostStream,
        _kernel: HostKernel,
        _dims: LaunchDims,
        _params: *mut *mut c_void,
    ) -> Result<()> {
        Err(Error::Unsupported {
            backend: "host",
            what: "launching with a raw parameter array (its kernels take typed arguments)",
        })
    }

    fn graph_instantiate(
        &self,
        device: DeviceId,
        graph: &GraphDesc<HostKernel>,
    ) -> Result<HostGraph> {
        self.instantiate_graph(device, graph)
    }

    /// # Safety
    /// As for `copy`, `fill` and `launch`, node by node: each node is checked as its call
    /// would be, and nothing is queued if one is refused.
    unsafe fn graph_launch(&self, stream: HostStream, graph: HostGraph) -> Result<()> {
        self.launch_graph(stream, graph)
    }

    fn graph_set_node(
        &self,
        graph: HostGraph,
        node: NodeId,
        op: &NodeOp<HostKernel>,
    ) -> Result<()> {
        self.set_graph_node(graph, node, op)
    }

    fn graph_destroy(&self, graph: HostGraph) -> Result<()> {
        self.destroy_graph(graph)
    }
}
