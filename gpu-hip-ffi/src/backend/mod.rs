//! The HIP backend: `gpu_core::backend::Backend` on the HIP runtime API, with every
//! device-bound call made with its device current and the caller's device put back after.
//!
//! Every method that acts on a device runs inside a `DeviceScope` (module `current`): if the
//! device is already current (the runtime's device guard made it so) nothing changes; otherwise
//! hipSetDevice
//! switches to it and back around the HIP calls, so the calling thread's current device is the
//! same after the call as before it, also on error paths (hipSetDevice is per thread: the IREE
//! multi-device bug was a missing restore).
//!
//! Every handle the backend hands out carries a number never used before in the process
//! ([`HandleId`]), and the backend keeps the live ones ([`LiveHandles`]: streams, events, and
//! modules, the program's and each device's kernel library; a kernel is live while its module
//! is). A method that takes a handle looks it up first and holds it for the length of its HIP
//! calls, so a destroyed, unloaded, reset or foreign handle is [`Error::StaleHandle`] and never
//! reaches HIP, and a destroy waits for the calls in flight on its handle. The addresses it
//! allocated and the host ranges it registered are kept too ([`LiveAllocations`],
//! [`LiveRegistrations`]): `free` and `host_unregister` refuse anything else before HIP.
//!
//! [`HandleId`]: gpu_core::backend::live::HandleId

mod caps;
mod copies;
mod current;
mod devices;
mod events;
mod handles;
mod kernels;
mod memory;
mod modules;
mod peers;
mod reset;
mod streams;

use core::ffi::{CStr, c_int, c_void};
use core::sync::atomic::AtomicPtr;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::live::{LiveAllocations, LiveHandles, LiveRegistrations, library_arguments};
use gpu_core::backend::{Backend, DeviceInfo, FillValue, KernelArg, LaunchDims};
use gpu_core::{ByteRange, DeviceId, Error, Result};

use crate::library::Hip;
use crate::result::{self, BACKEND, driver_error};
use crate::sys;

use current::{DeviceScope, no_device_chosen, set_no_device_chosen};
use devices::{DeviceState, configure_default_pool, open_device};
pub use handles::{HipEvent, HipKernel, HipModule, HipStream, SavedDevice};

/// A HIP code as the toolkit's errors carry it.
const fn code(code: sys::hipError_t) -> i64 {
    code as i64
}

/// The HIP backend over the HIP runtime API (ROCm's libamdhip64 on AMD GPUs; on NVIDIA GPUs
/// the `nvidia` feature's shim, which exports the same functions over the CUDA runtime).
pub struct HipBackend {
    hip: &'static Hip,
    devices: Vec<DeviceState>,
    /// The streams it created or adopted and has not destroyed.
    streams: LiveHandles<HipStream>,
    /// The events it created and has not destroyed.
    events: LiveHandles<HipEvent>,
    /// The modules loaded and not unloaded: the program's, and each device's kernel library.
    modules: LiveHandles<HipModule>,
    /// The memory it allocated and has not freed.
    allocations: LiveAllocations,
    /// The host ranges it registered and has not unregistered.
    registrations: LiveRegistrations,
}

// SAFETY: the raw handles inside (pools, modules, functions) are opaque HIP handles, used only
// through the thread-safe HIP runtime; the per-device library slot is behind a mutex.
unsafe impl Send for HipBackend {}
// SAFETY: see above.
unsafe impl Sync for HipBackend {}

impl core::fmt::Debug for HipBackend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HipBackend")
            .field(
                "devices",
                &self
                    .devices
                    .iter()
                    .map(|device| &device.info.name)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl HipBackend {
    /// Opens every device of the process-wide HIP library ([`Hip::global`]).
    ///
    /// # Errors
    /// As [`HipBackend::with_library`], and the loader's errors
    /// ([`Error::DriverLibraryNotFound`], [`Error::DriverSymbolMissing`]) without the library.
    pub fn new() -> Result<Self> {
        Self::with_library(Hip::global()?)
    }

    /// Counts the devices (hipGetDeviceCount, which needs no hipInit and reports
    /// `hipErrorNoDevice` on a machine without one; ROCm 5.2.3's hipInit says
    /// `hipErrorInvalidDevice` there instead), initialises HIP, reads each device's
    /// description, and raises each default memory pool's release threshold to the maximum so
    /// that memory freed in stream order stays cached in the pool.
    ///
    /// # Errors
    /// [`Error::Driver`] with `hipErrorNoDevice` when HIP reports no device, and any HIP
    /// failure while opening.
    pub fn with_library(hip: &'static Hip) -> Result<Self> {
        let count = result::device::count(hip)?;
        if count <= 0 {
            return Err(Error::Driver(driver_error(
                "hipGetDeviceCount",
                sys::hipErrorNoDevice,
            )));
        }
        result::device::init(hip, 0)?;
        let pool_entry_points = hip.hipMallocAsync().is_ok()
            && hip.hipFreeAsync().is_ok()
            && hip.hipDeviceGetDefaultMemPool().is_ok()
            && hip.hipMemPoolSetAttribute().is_ok();
        let mut devices = Vec::with_capacity(count as usize);
        for ordinal in 0..count {
            let mut state = open_device(hip, ordinal, pool_entry_points)?;
            if state.info.allocator.device.stream_ordered {
                state.pool = AtomicPtr::new(configure_default_pool(hip, ordinal)?);
            }
            devices.push(state);
        }
        Ok(Self::with_devices(hip, devices))
    }

    /// A backend of `devices`, with nothing live yet.
    fn with_devices(hip: &'static Hip, devices: Vec<DeviceState>) -> Self {
        Self {
            hip,
            devices,
            streams: LiveHandles::new(BACKEND, "stream"),
            events: LiveHandles::new(BACKEND, "event"),
            modules: LiveHandles::new(BACKEND, "module"),
            allocations: LiveAllocations::new(),
            registrations: LiveRegistrations::new(),
        }
    }

    /// The loaded HIP library.
    pub fn library(&self) -> &'static Hip {
        self.hip
    }

    /// The opened device `device`.
    fn device(&self, device: DeviceId) -> Result<&DeviceState> {
        self.devices
            .get(device.index())
            .ok_or(Error::UnknownDevice {
                device,
                device_count: self.devices.len(),
            })
    }

    /// Makes `device` current until the returned scope ends.
    fn enter(&self, device: DeviceId) -> Result<DeviceScope<'static>> {
        DeviceScope::enter(self.hip, self.device(device)?.ordinal)
    }
}

impl Drop for HipBackend {
    fn drop(&mut self) {
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
}

#[cfg(test)]
mod tests;
