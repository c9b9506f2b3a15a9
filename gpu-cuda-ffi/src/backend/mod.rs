//! The CUDA backend: `gpu_core::backend::Backend` on the driver API, with each device's primary
//! context retained once at open and every device-bound call bracketed in that context.
//!
//! Every method that needs a context runs inside a `ContextScope`: if the device's primary
//! context is already current (the runtime's device guard made it so) nothing changes;
//! otherwise the context is pushed and popped around the driver calls, so the calling thread's
//! current context (none, another device's, or one the program created itself) is the same
//! after the call as before it, also on error paths.
//!
//! Every handle the backend hands out carries its key in the backend's live handles
//! ([`HandleKey`]: a slot of its own and the slot's generation, never reused), and the backend
//! keeps the live ones ([`LiveHandles`]: streams, events, and modules, the program's and each
//! device's kernel library; a kernel is live while its module is). A method that takes a handle
//! checks it first (one atomic on the handle's slot) and holds it for the length of its
//! driver calls, so a destroyed, unloaded, reset or foreign handle is [`Error::StaleHandle`]
//! and never reaches the driver, and a destroy waits for the calls in flight on its handle. The
//! addresses it allocated and the host ranges it registered are kept too ([`LiveAllocations`],
//! [`LiveRegistrations`]): `free` and `host_unregister` refuse anything else before the driver.

mod caps;
mod context;
pub mod kernels;

use core::ffi::{CStr, c_int, c_void};
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::live::{
    FreeStep, HandleKey, Live, LiveAllocations, LiveHandles, LiveRegistrations, check_allocation,
    check_stream_allocation, enable_peer_access, kernel_name, library_arguments, library_functions,
    none_on_code, workgroup_bytes_attribute,
};
use gpu_core::backend::{
    Backend, DeviceInfo, FillValue, KernelArg, LaunchDims, check_device_slots, check_same_device,
};
use gpu_core::{ByteRange, DeviceId, Error, Result};

use crate::driver::Driver;
use crate::result::module::LaunchShape;
use crate::result::{self, BACKEND, driver_error};
use crate::sys;

use context::{ContextScope, device_of_context};

// Device addresses (CUdeviceptr) are 64-bit and the backend stores them as usize: the CUDA
// driver exists only for 64-bit platforms.
const _: () = assert!(size_of::<usize>() == size_of::<sys::CUdeviceptr>());

/// A driver code as the toolkit's errors carry it.
const fn code(code: sys::CUresult) -> i64 {
    code as i64
}

/// An in-order queue of work on one device: a non-blocking `CUstream` (or an adopted one), its
/// device, and its key in the backend's live streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaStream {
    raw: sys::CUstream,
    device: DeviceId,
    key: HandleKey<CudaStream>,
}

/// A completion marker: a `CUevent` created without timing, its device, and its key in the
/// backend's live events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaEvent {
    raw: sys::CUevent,
    device: DeviceId,
    key: HandleKey<CudaEvent>,
}

/// A kernel loaded on one device: of the standard library, or of a module the program loaded;
/// live while that module is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaKernel {
    function: sys::CUfunction,
    device: DeviceId,
    /// The key of its module (the device's library module for a library kernel).
    module: HandleKey<CudaModule>,
    /// Index into the library table (name and parameters); `None` for a module's kernel,
    /// whose parameters nothing here knows.
    library_index: Option<usize>,
}

/// A module image loaded on one device (`CUmodule`), from [`Backend::module_load`], and its
/// key in the backend's live modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaModule {
    raw: sys::CUmodule,
    device: DeviceId,
    key: HandleKey<CudaModule>,
}

// SAFETY: (all four handles) the values are opaque driver handles, never dereferenced by this
// crate. The CUDA driver API is thread-safe: a stream, event or function may be used from any
// thread, provided its context is current there, which every method ensures with a
// `ContextScope` on the handle's device.
unsafe impl Send for CudaStream {}
// SAFETY: see above.
unsafe impl Sync for CudaStream {}
// SAFETY: see above.
unsafe impl Send for CudaEvent {}
// SAFETY: see above.
unsafe impl Sync for CudaEvent {}
// SAFETY: see above.
unsafe impl Send for CudaKernel {}
// SAFETY: see above.
unsafe impl Sync for CudaKernel {}
// SAFETY: see above (a module is a handle like the others).
unsafe impl Send for CudaModule {}
// SAFETY: see above.
unsafe impl Sync for CudaModule {}

/// Whatever context was current on a thread when [`Backend::save_current`] looked: a device's
/// primary context, none (null), or a context the program created itself, which the backend
/// does not own and no [`DeviceId`] can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SavedContext(sys::CUcontext);

// SAFETY: a `CUcontext` is an opaque, process-wide driver handle that this crate never
// dereferences. Since CUDA 4.0 a context is not bound to the thread that created it: any
// thread may make it current (cuCtxSetCurrent), which is all `restore_current` does with it.
// Whether the context still exists is its owner's business (a destroyed one is the driver's
// `CUDA_ERROR_INVALID_CONTEXT`), not a property of the thread holding the value.
unsafe impl Send for SavedContext {}

impl SavedContext {
    /// The context handle (null when no context was current).
    pub fn raw(&self) -> sys::CUcontext {
        self.0
    }
}

impl CudaStream {
    /// The driver's stream handle (valid until the stream is destroyed).
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> DeviceId {
        self.device
    }
}

impl CudaEvent {
    /// The driver's event handle (valid until the event is destroyed).
    pub fn raw(&self) -> sys::CUevent {
        self.raw
    }

    /// The device the event belongs to.
    pub fn device(&self) -> DeviceId {
        self.device
    }
}

impl CudaKernel {
    /// The driver's function handle (valid while the backend lives).
    pub fn raw(&self) -> sys::CUfunction {
        self.function
    }

    /// The device the kernel is loaded on.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The kernel's name in the standard library (a module's kernel says so instead).
    pub fn name(&self) -> &'static str {
        kernel_name(self.library_index)
    }
}

/// The kernel library loaded on one device: the module (live in the backend's modules while it
/// is loaded) and one function per library entry.
struct LoadedLibrary {
    module: CudaModule,
    functions: Vec<sys::CUfunction>,
}

/// One device as opened: its ordinal, retained primary context, default memory pool (where
/// stream-ordered allocation is used), description, and kernel library once loaded.
struct DeviceState {
    ordinal: sys::CUdevice,
    /// Retained at open; retained again after a reset (which destroys the old one).
    context: AtomicPtr<sys::CUctx_st>,
    /// The default pool, with its release threshold raised to the maximum at open (and again
    /// after a reset); null where the device has no stream-ordered allocation.
    pool: AtomicPtr<sys::CUmemPoolHandle_st>,
    info: DeviceInfo,
    /// Loaded at the first [`Backend::kernel`] call for the device.
    library: Mutex<Option<LoadedLibrary>>,
}

impl DeviceState {
    /// The primary context, as retained now.
    fn context(&self) -> sys::CUcontext {
        self.context.load(Ordering::Acquire)
    }

    /// The default pool, where the device has stream-ordered allocation.
    fn pool(&self) -> Option<sys::CUmemoryPool> {
        let pool = self.pool.load(Ordering::Acquire);
        (!pool.is_null()).then_some(pool)
    }
}

/// The CUDA backend over the driver API.
///
/// Opening retains each device's primary context (the one the CUDA runtime API and libraries
/// such as PyTorch use, so their pointers and streams mix with ours); dropping releases them.
/// Creating a context costs about 112 ms per device, so open once.
pub struct CudaBackend {
    driver: &'static Driver,
    devices: Vec<DeviceState>,
    /// The streams it created or adopted and has not destroyed.
    streams: LiveHandles<CudaStream>,
    /// The events it created and has not destroyed.
    events: LiveHandles<CudaEvent>,
    /// The modules loaded and not unloaded: the program's, and each device's kernel library.
    modules: LiveHandles<CudaModule>,
    /// The memory it allocated and has not freed.
    allocations: LiveAllocations,
    /// The host ranges it registered and has not unregistered.
    registrations: LiveRegistrations,
}

// SAFETY: the raw handles inside (contexts, pools, modules, functions) are opaque driver
// handles, used only through the thread-safe driver API with the owning context current; the
// per-device library slot is behind a mutex.
unsafe impl Send for CudaBackend {}
// SAFETY: see above.
unsafe impl Sync for CudaBackend {}

impl core::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("driver_version", &self.driver.driver_version())
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

impl CudaBackend {
    /// Opens every device of the process-wide driver ([`Driver::global`]).
    ///
    /// # Errors
    /// As [`CudaBackend::with_driver`], and the loader's errors
    /// ([`Error::DriverLibraryNotFound`], [`Error::DriverSymbolMissing`]) without a driver.
    pub fn new() -> Result<Self> {
        Self::with_driver(Driver::global()?)
    }

    /// Initialises `driver` (cuInit), retains each device's primary context, reads each
    /// device's description, and raises each default memory pool's release threshold to the
    /// maximum so that freed stream-ordered memory stays cached in the pool.
    ///
    /// # Errors
    /// [`Error::Driver`] with `CUDA_ERROR_NO_DEVICE` when the driver reports no device (from
    /// cuInit or, if cuInit succeeds, from cuDeviceGetCount), and any driver failure while
    /// opening; nothing stays retained after an error.
    pub fn with_driver(driver: &'static Driver) -> Result<Self> {
        result::device::init(driver, 0)?;
        let count = result::device::count(driver)?;
        if count <= 0 {
            return Err(Error::Driver(driver_error(
                "cuDeviceGetCount",
                sys::CUDA_ERROR_NO_DEVICE,
            )));
        }
        let pool_entry_points = driver.cuMemAllocFromPoolAsync().is_ok()
            && driver.cuMemFreeAsync().is_ok()
            && driver.cuDeviceGetDefaultMemPool().is_ok()
            && driver.cuMemPoolSetAttribute().is_ok();
        // Devices join as they are opened, so an error below drops (and releases) those opened.
        let mut backend = Self::with_devices(driver, Vec::with_capacity(count as usize));
        for index in 0..count {
            let state = open_device(driver, index, pool_entry_points)?;
            backend.devices.push(state);
            let state = backend.devices.last_mut().expect("just pushed");
            if state.info.allocator.device.stream_ordered {
                let pool = configure_default_pool(driver, state)?;
                state.pool = AtomicPtr::new(pool);
            }
        }
        Ok(backend)
    }

    /// A backend of `devices`, with nothing live yet.
    fn with_devices(driver: &'static Driver, devices: Vec<DeviceState>) -> Self {
        Self {
            driver,
            devices,
            streams: LiveHandles::new(BACKEND, "stream"),
            events: LiveHandles::new(BACKEND, "event"),
            modules: LiveHandles::new(BACKEND, "module"),
            allocations: LiveAllocations::new(),
            registrations: LiveRegistrations::new(),
        }
    }

    /// The loaded driver.
    pub fn driver(&self) -> &'static Driver {
        self.driver
    }

    /// The primary context of `device` (retained while the backend lives).
    ///
    /// # Errors
    /// [`Error::UnknownDevice`] for a device the backend does not have.
    pub fn primary_context(&self, device: DeviceId) -> Result<sys::CUcontext> {
        Ok(self.device(device)?.context())
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

    /// Makes `device`'s context current until the returned scope ends.
    fn enter(&self, device: DeviceId) -> Result<ContextScope<'static>> {
        ContextScope::enter(self.driver, self.device(device)?.context())
    }

    /// Writes each device's address for the pinned host address `host` into `device_ptrs`
    /// (cuMemHostGetDevicePointer in each device's context).
    fn device_addresses(&self, host: usize, device_ptrs: &mut [usize]) -> Result<()> {
        for (index, slot) in device_ptrs.iter_mut().enumerate() {
            let _scope = self.enter(DeviceId(index as u32))?;
            *slot = result::memory::host_device_pointer(self.driver, host)? as usize;
        }
        Ok(())
    }

    /// The function `library_index` of `device`'s kernel library and the library module's
    /// key, loading the module on first use.
    fn library_function(
        &self,
        device: DeviceId,
        library_index: usize,
    ) -> Result<(HandleKey<CudaModule>, sys::CUfunction)> {
        let state = self.device(device)?;
        let mut slot = state
            .library
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(loaded) = slot.as_ref() {
            return Ok((loaded.module.key, loaded.functions[library_index]));
        }
        // Looked up before loading (and cached from then on), so that unloading on an error
        // path cannot fail for a missing symbol (which would leak the module and report the
        // lookup instead of the error).
        self.driver.cuModuleUnload()?;
        let _scope = self.enter(device)?;
        // SAFETY: the embedded PTX ends with a NUL and lives as long as the program.
        let module =
            unsafe { result::module::load_data(self.driver, kernels::PTX.as_ptr().cast()) }?;
        let functions = library_functions(
            module,
            // SAFETY: the module was just loaded in the current context.
            |module, symbol| unsafe { result::module::function(self.driver, module, symbol) },
            // SAFETY: the module was just loaded and nothing else refers to it.
            |module| drop(unsafe { result::module::unload(self.driver, module) }),
        )?;
        let module = self.register_module(module, device);
        let function = functions[library_index];
        *slot = Some(LoadedLibrary { module, functions });
        Ok((module.key, function))
    }

    /// `kernel`'s module, live, held until the guard drops: a kernel of an unloaded module (or
    /// of a library from before its device's reset) is [`Error::StaleHandle`] naming a kernel.
    fn live_kernel(&self, kernel: CudaKernel) -> Result<Live<'_, CudaModule>> {
        self.modules.get_as(kernel.module, "kernel")
    }

    /// Records a module just loaded on `device` as live.
    fn register_module(&self, raw: sys::CUmodule, device: DeviceId) -> CudaModule {
        self.modules
            .register(device, |key| CudaModule { raw, device, key })
    }

    /// Records a stream of `device` as live.
    fn register_stream(&self, raw: sys::CUstream, device: DeviceId) -> CudaStream {
        self.streams
            .register(device, |key| CudaStream { raw, device, key })
    }
}

/// Reads device `index`'s description and retains its primary context.
fn open_device(driver: &Driver, index: c_int, pool_entry_points: bool) -> Result<DeviceState> {
    let ordinal = result::device::get(driver, index)?;
    let name = result::device::name(driver, ordinal)?;
    let total_memory = result::device::total_memory(driver, ordinal)?;
    let info = caps::describe_device(name, total_memory, pool_entry_points, |attribute| {
        result::device::attribute(driver, attribute, ordinal)
    })?;
    let context = result::context::retain_primary(driver, ordinal)?;
    Ok(DeviceState {
        ordinal,
        context: AtomicPtr::new(context),
        pool: AtomicPtr::new(ptr::null_mut()),
        info,
        library: Mutex::new(None),
    })
}

/// The device's default memory pool, with its release threshold raised to the maximum so that
/// memory freed in stream order stays in the pool instead of going back to the system at each
/// synchronisation (0.61 us for a warm alloc+free pair against 55 us for cuMemAlloc+cuMemFree).
fn configure_default_pool(driver: &Driver, state: &DeviceState) -> Result<sys::CUmemoryPool> {
    let _scope = ContextScope::enter(driver, state.context())?;
    let pool = result::device::default_memory_pool(driver, state.ordinal)?;
    // SAFETY: the device's default pool, which lives as long as its context.
    unsafe { result::memory::set_pool_release_threshold(driver, pool, u64::MAX) }?;
    Ok(pool)
}

/// `Some(address)` for an allocation, `None` for `CUDA_ERROR_OUT_OF_MEMORY`, else the error.
fn allocation_outcome(allocated: Result<sys::CUdeviceptr>) -> Result<Option<usize>> {
    none_on_code(allocated, code(sys::CUDA_ERROR_OUT_OF_MEMORY))
        .map(|address| address.map(|address| address as usize))
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        for state in self.devices.iter_mut().rev() {
            let loaded = state
                .library
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(loaded) = loaded
                && let Ok(_scope) = ContextScope::enter(self.driver, state.context())
            {
                // SAFETY: the module was loaded in this context and its functions are not used
                // after the backend is gone (the trait's handles do not outlive it).
                let _ = unsafe { result::module::unload(self.driver, loaded.module.raw) };
            }
            // SAFETY: the backend retained this device's primary context once at open, and
            // nothing of it is used through the backend any more.
            let _ = unsafe { result::context::release_primary(self.driver, state.ordinal) };
        }
    }
}

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
    /// and the default pool's release threshold is raised again. Every stream, event, module
    /// and allocation of the device is gone, and its handles stale; peer access to and from it
    /// too.
    fn reset_device(&self, device: DeviceId) -> Result<()> {
        let state = self.device(device)?;
        let mut library = state
            .library
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: the trait's contract: nothing of the device is used after its reset; its
        // handles go stale below.
        unsafe { result::context::reset_primary(self.driver, state.ordinal) }?;
        *library = None;
        drop(library);
        self.streams.forget_device(device);
        self.events.forget_device(device);
        self.modules.forget_device(device);
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
}

impl CudaBackend {
    /// The one cuLaunchKernel of both launch forms.
    ///
    /// # Safety
    /// As [`Backend::launch_packed`].
    unsafe fn launch_with(
        &self,
        stream: CudaStream,
        kernel: CudaKernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        check_same_device(stream.device, kernel.device)?;
        let (stream, _module) = (self.streams.get(stream.key)?, self.live_kernel(kernel)?);
        // The launch keeps its scope. cuda.h (13.0) lets cuLaunchKernel take the context from
        // the stream only for a context-less CUkernel: "the context to launch the kernel on
        // will either be taken from the specified stream \p hStream or the current context in
        // case of NULL stream". `kernel.function` is a CUfunction of a module loaded into the
        // device's primary context (cuModuleGetFunction), for which the header states no such
        // rule, and it lists CUDA_ERROR_INVALID_CONTEXT, "most frequently" meaning "no context
        // bound to the current thread". Launching CUkernel handles (cuLibraryLoadData +
        // cuLibraryGetKernel) instead would make the scope unnecessary here.
        let _scope = self.enter(stream.device)?;
        let shape = LaunchShape {
            grid: dims.grid,
            block: dims.block,
            shared_bytes: dims.dynamic_workgroup_bytes,
        };
        // SAFETY: a function of a live module and a live stream of the device (both held), whose
        // context is current; the caller's promise for the parameters and the memory the
        // kernel reaches.
        unsafe { result::module::launch(self.driver, kernel.function, shape, stream.raw, params) }
    }
}

#[cfg(test)]
mod tests;
