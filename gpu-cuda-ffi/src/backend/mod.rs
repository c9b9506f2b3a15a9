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
//! keeps the live ones ([`LiveHandles`]: streams, events, graphs, and modules, the program's and
//! each device's kernel library; a kernel is live while its module is). A method that takes a handle
//! checks it first (one atomic on the handle's slot) and holds it for the length of its
//! driver calls, so a destroyed, unloaded, reset or foreign handle is [`Error::StaleHandle`]
//! and never reaches the driver, and a destroy waits for the calls in flight on its handle. The
//! addresses it allocated and the host ranges it registered are kept too ([`LiveAllocations`],
//! [`LiveRegistrations`]): `free` and `host_unregister` refuse anything else before the driver.
//! So are the address ranges it reserved and the physical memory it mapped into them (the
//! allocator's growable segments, `vm`), given back at a device's reset and at drop.

mod caps;
mod context;
mod dispatch;
mod graphs;
pub mod kernels;
mod vm;

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
pub use graphs::CudaGraph;

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
    /// The granularity of device memory's virtual memory management, where the device and the
    /// driver have it (read at open).
    vm_granularity: Option<usize>,
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
    /// The graphs instantiated and not destroyed.
    graphs: LiveHandles<graphs::GraphState>,
    /// The memory it allocated and has not freed.
    allocations: LiveAllocations,
    /// The host ranges it registered and has not unregistered.
    registrations: LiveRegistrations,
    /// The address ranges it reserved and the pieces of device memory mapped into them.
    mappings: vm::Mappings,
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
            graphs: LiveHandles::new(BACKEND, "graph"),
            allocations: LiveAllocations::new(),
            registrations: LiveRegistrations::new(),
            mappings: vm::Mappings::new(),
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
    let vm_granularity = ContextScope::enter(driver, context)
        .ok()
        .and_then(|_scope| vm::device_granularity(driver, ordinal));
    Ok(DeviceState {
        ordinal,
        context: AtomicPtr::new(context),
        pool: AtomicPtr::new(ptr::null_mut()),
        info,
        library: Mutex::new(None),
        vm_granularity,
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
        for (index, state) in self.devices.iter().enumerate().rev() {
            if let Ok(_scope) = ContextScope::enter(self.driver, state.context()) {
                self.clear_mappings(DeviceId(index as u32), state);
            }
        }
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
