//! Tests of the backend without a GPU. A fake driver stands in for CUDA: its entry points write
//! made-up handles and addresses into their out-parameters and never dereference anything they
//! are given, so the backend's checks before the driver (live handles, allocated addresses,
//! registered ranges) can be exercised on any machine.

use super::*;

use core::ffi::{c_char, c_uint, c_void};
use core::ptr::NonNull;
use core::sync::atomic::AtomicUsize;
use std::sync::OnceLock;

use gpu_core::allocator::{AllocatorCapabilities, KindSupport};
use gpu_core::workgroup::WorkgroupLimits;

use crate::driver::ResolveEntryPoint;

const D0: DeviceId = DeviceId(0);

/// The one context of the fake driver: always current, and the fake device's primary context.
const FAKE_CONTEXT: sys::CUcontext = ptr::without_provenance_mut(0xc0);

/// A stream handle the fake cuStreamDestroy refuses (`CUDA_ERROR_INVALID_VALUE`).
const UNDESTROYABLE: usize = 0xbad;

/// A fresh made-up handle or address, never null, never dereferenced.
fn fake_address() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0x10_0000);
    NEXT.fetch_add(0x100, Ordering::Relaxed)
}

/// Writes `value` through an out-parameter the backend passed.
///
/// # Safety
/// `out` is valid for writes of a `T`.
unsafe fn put<T>(out: *mut T, value: T) -> sys::CUresult {
    // SAFETY: the caller's promise.
    unsafe { out.write(value) };
    sys::CUDA_SUCCESS
}

/// A fake entry point that takes arguments of these types and succeeds.
macro_rules! succeeds {
    ($($name:ident($($argument:ty),*);)*) => {
        $(unsafe extern "C" fn $name($(_: $argument),*) -> sys::CUresult {
            sys::CUDA_SUCCESS
        })*
    };
}

succeeds! {
    ok_handle(*mut c_void);
    ok_device(sys::CUdevice);
    ok_free_async(sys::CUdeviceptr, sys::CUstream);
    ok_event_stream(sys::CUevent, sys::CUstream);
    ok_wait(sys::CUstream, sys::CUevent, c_uint);
    ok_memset(sys::CUdeviceptr, u8, usize, sys::CUstream);
    ok_register(*mut c_void, usize, c_uint);
    ok_free(sys::CUdeviceptr);
    ok_launch(
        sys::CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, sys::CUstream,
        *mut *mut c_void, *mut *mut c_void
    );
}

unsafe extern "C" fn version(out: *mut c_int) -> sys::CUresult {
    // SAFETY: the driver layer passes an out-parameter valid for writes.
    unsafe { put(out, 13000) }
}

unsafe extern "C" fn current_context(out: *mut sys::CUcontext) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, FAKE_CONTEXT) }
}

unsafe extern "C" fn retain_context(out: *mut sys::CUcontext, _: sys::CUdevice) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, FAKE_CONTEXT) }
}

unsafe extern "C" fn create_handle<T>(out: *mut *mut T, _: c_uint) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, ptr::without_provenance_mut(fake_address())) }
}

unsafe extern "C" fn destroy_stream(stream: sys::CUstream) -> sys::CUresult {
    if stream.addr() == UNDESTROYABLE {
        sys::CUDA_ERROR_INVALID_VALUE
    } else {
        sys::CUDA_SUCCESS
    }
}

unsafe extern "C" fn load_module(out: *mut sys::CUmodule, _: *const c_void) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, ptr::without_provenance_mut(fake_address())) }
}

unsafe extern "C" fn module_function(
    out: *mut sys::CUfunction,
    _: sys::CUmodule,
    _: *const c_char,
) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, ptr::without_provenance_mut(fake_address())) }
}

unsafe extern "C" fn function_attribute(
    out: *mut c_int,
    _: sys::CUfunction_attribute,
    _: sys::CUfunction,
) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, 0) }
}

/// Every fake function has fill_u32's parameters: a pointer, a 32-bit and a 64-bit value.
const FAKE_PARAMS: [(usize, usize); 3] = [(0, 8), (8, 4), (16, 8)];

unsafe extern "C" fn param_info(
    _: sys::CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> sys::CUresult {
    let Some(&(at, bytes)) = FAKE_PARAMS.get(index) else {
        return sys::CUDA_ERROR_INVALID_VALUE;
    };
    // SAFETY: as for `version`, both outputs.
    unsafe {
        put(offset, at);
        put(size, bytes)
    }
}

unsafe extern "C" fn alloc(out: *mut sys::CUdeviceptr, _: usize) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, fake_address() as sys::CUdeviceptr) }
}

unsafe extern "C" fn alloc_host(out: *mut *mut c_void, _: usize, _: c_uint) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, ptr::without_provenance_mut(fake_address())) }
}

/// The fake cuMemFreeHost always refuses, for the tests of a failed free.
unsafe extern "C" fn refuse_free_host(_: *mut c_void) -> sys::CUresult {
    sys::CUDA_ERROR_INVALID_VALUE
}

/// cuPointerGetAttribute(MEMPOOL_HANDLE): no pool (the backend asks nothing else).
unsafe extern "C" fn pointer_attribute(
    out: *mut c_void,
    _: sys::CUpointer_attribute,
    _: sys::CUdeviceptr,
) -> sys::CUresult {
    // SAFETY: the backend passes room for a CUmemoryPool.
    unsafe { put(out.cast::<sys::CUmemoryPool>(), ptr::null_mut()) }
}

unsafe extern "C" fn host_device_pointer(
    out: *mut sys::CUdeviceptr,
    host: *mut c_void,
    _: c_uint,
) -> sys::CUresult {
    // SAFETY: as for `version`.
    unsafe { put(out, host.addr() as sys::CUdeviceptr) }
}

/// The fake driver's entry points.
struct FakeDriver;

impl ResolveEntryPoint for FakeDriver {
    fn resolve(&self, symbol: &CStr, _: c_int) -> Result<Option<NonNull<c_void>>> {
        let address = match symbol.to_bytes() {
            b"cuDriverGetVersion" => version as sys::PFN_cuDriverGetVersion as *mut c_void,
            b"cuCtxGetCurrent" => current_context as sys::PFN_cuCtxGetCurrent as *mut c_void,
            b"cuDevicePrimaryCtxRetain" => {
                retain_context as sys::PFN_cuDevicePrimaryCtxRetain as *mut c_void
            }
            b"cuDevicePrimaryCtxRelease" | b"cuDevicePrimaryCtxReset" => {
                ok_device as sys::PFN_cuDevicePrimaryCtxReset as *mut c_void
            }
            b"cuStreamCreate" => create_handle::<sys::CUstream_st> as sys::PFN_cuStreamCreate as _,
            b"cuStreamDestroy" => destroy_stream as sys::PFN_cuStreamDestroy as *mut c_void,
            b"cuEventCreate" => create_handle::<sys::CUevent_st> as sys::PFN_cuEventCreate as _,
            b"cuStreamSynchronize"
            | b"cuEventDestroy"
            | b"cuEventQuery"
            | b"cuEventSynchronize"
            | b"cuModuleUnload"
            | b"cuMemHostUnregister" => {
                ok_handle as unsafe extern "C" fn(*mut c_void) -> sys::CUresult as *mut c_void
            }
            b"cuEventRecord" => ok_event_stream as sys::PFN_cuEventRecord as *mut c_void,
            b"cuStreamWaitEvent" => ok_wait as sys::PFN_cuStreamWaitEvent as *mut c_void,
            b"cuModuleLoadData" => load_module as sys::PFN_cuModuleLoadData as *mut c_void,
            b"cuModuleGetFunction" => {
                module_function as sys::PFN_cuModuleGetFunction as *mut c_void
            }
            b"cuFuncGetAttribute" => {
                function_attribute as sys::PFN_cuFuncGetAttribute as *mut c_void
            }
            b"cuFuncGetParamInfo" => param_info as sys::PFN_cuFuncGetParamInfo as *mut c_void,
            b"cuLaunchKernel" => ok_launch as sys::PFN_cuLaunchKernel as *mut c_void,
            b"cuMemsetD8Async" => ok_memset as sys::PFN_cuMemsetD8Async as *mut c_void,
            b"cuMemAlloc" => alloc as sys::PFN_cuMemAlloc as *mut c_void,
            b"cuMemFree" => ok_free as sys::PFN_cuMemFree as *mut c_void,
            b"cuMemFreeAsync" => ok_free_async as sys::PFN_cuMemFreeAsync as *mut c_void,
            b"cuMemHostAlloc" => alloc_host as sys::PFN_cuMemHostAlloc as *mut c_void,
            b"cuMemFreeHost" => refuse_free_host as sys::PFN_cuMemFreeHost as *mut c_void,
            b"cuPointerGetAttribute" => {
                pointer_attribute as sys::PFN_cuPointerGetAttribute as *mut c_void
            }
            b"cuMemHostRegister" => ok_register as sys::PFN_cuMemHostRegister as *mut c_void,
            b"cuMemHostGetDevicePointer" => {
                host_device_pointer as sys::PFN_cuMemHostGetDevicePointer as *mut c_void
            }
            other => {
                match graphs::fake_entry_point(other).or_else(|| vm::fake_entry_point(other)) {
                    Some(address) => address,
                    None => return Ok(None),
                }
            }
        };
        Ok(NonNull::new(address))
    }
}

/// The fake driver, loaded once.
fn fake_driver() -> &'static Driver {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    DRIVER.get_or_init(|| Driver::with_resolver(Box::new(FakeDriver), None).unwrap())
}

/// A backend over the fake driver with one device (no memory pools).
fn fake_backend() -> CudaBackend {
    let info = DeviceInfo {
        name: "fake".into(),
        total_memory: 1 << 30,
        allocator: AllocatorCapabilities {
            device: KindSupport::SYNCHRONOUS,
            managed: KindSupport::NONE,
            host_pinned: KindSupport::SYNCHRONOUS,
            host_register: true,
        },
        workgroup: WorkgroupLimits {
            default_per_block: 48 << 10,
            max_per_block_opt_in: 48 << 10,
            per_multiprocessor: 64 << 10,
            reserved_per_block: 0,
        },
        unified_addressing: true,
        pageable_memory_access: false,
    };
    let device = DeviceState {
        ordinal: 0,
        context: AtomicPtr::new(FAKE_CONTEXT),
        pool: AtomicPtr::new(ptr::null_mut()),
        info,
        library: Mutex::new(None),
        vm_granularity: None,
    };
    CudaBackend::with_devices(fake_driver(), vec![device])
}

fn stale<V>(what: &'static str, key: HandleKey<V>) -> Error {
    Error::StaleHandle {
        backend: "cuda",
        what,
        id: key.id(),
    }
}

fn args(address: usize) -> [KernelArg; 3] {
    [
        KernelArg::Ptr(address),
        KernelArg::U32(7),
        KernelArg::U64(1),
    ]
}

#[test]
fn a_destroyed_stream_or_event_is_a_typed_error_before_the_driver() {
    let b = fake_backend();
    let (stream, other) = (b.stream_create(D0).unwrap(), b.stream_create(D0).unwrap());
    let event = b.event_create(D0).unwrap();
    let fill = b.kernel(D0, "fill_u32").unwrap();
    let memory = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let dims = LaunchDims::linear(1, 1);
    // Live: every call reaches the (fake) driver.
    assert_eq!(b.stream_synchronize(stream), Ok(()));
    assert_eq!(b.event_record(event, stream), Ok(()));
    assert_eq!(b.stream_wait_event(other, event), Ok(()));
    assert_eq!(b.event_query(event), Ok(true));
    // SAFETY: the fake driver touches no memory.
    assert_eq!(unsafe { b.fill(stream, memory, 1, 64) }, Ok(()));
    // SAFETY: as above.
    let called = unsafe { b.launch(stream, fill, dims, &args(memory)) };
    assert_eq!(called, Ok(()));

    assert_eq!(b.stream_destroy(stream), Ok(()));
    let gone = Err(stale("stream", stream.key));
    assert_eq!(b.stream_synchronize(stream), gone);
    assert_eq!(b.stream_destroy(stream), gone, "destroyed twice");
    assert_eq!(b.event_record(event, stream), gone);
    assert_eq!(b.stream_wait_event(stream, event), gone);
    assert_eq!(
        b.allocate_on_stream(stream, MemoryKind::Device, 64),
        gone.clone().map(|()| None)
    );
    // SAFETY: refused before anything is enqueued.
    unsafe {
        assert_eq!(b.fill(stream, memory, 1, 64), gone);
        assert_eq!(b.copy(stream, memory, memory + 32, 32), gone);
        assert_eq!(b.copy_peer(stream, memory, D0, memory + 32, D0, 32), gone);
        assert_eq!(b.fill_elements(stream, memory, FillValue::U32(1), 16), gone);
        assert_eq!(b.launch(stream, fill, dims, &args(memory)), gone);
        assert_eq!(b.launch_packed(stream, fill, dims, ptr::null_mut()), gone);
    }
    // A free after a stale stream is refused and leaves the memory allocated.
    assert_eq!(b.free(D0, MemoryKind::Device, memory, Some(stream)), gone);
    assert!(b.allocations.contains(D0, MemoryKind::Device, memory));

    assert_eq!(b.event_destroy(event), Ok(()));
    let gone = Err(stale("event", event.key));
    assert_eq!(b.event_query(event), gone.clone().map(|()| false));
    assert_eq!(b.event_synchronize(event), gone);
    assert_eq!(b.event_record(event, other), gone);
    assert_eq!(b.stream_wait_event(other, event), gone);
    assert_eq!(b.event_destroy(event), gone);
    assert_eq!(
        b.stream_synchronize(other),
        Ok(()),
        "the other stream is live"
    );
}

#[test]
fn a_stream_the_driver_refuses_to_destroy_stays_live() {
    let b = fake_backend();
    // SAFETY: the fake driver dereferences no stream.
    let stream = unsafe { b.adopt_stream(D0, UNDESTROYABLE) }.unwrap();
    assert_eq!(
        b.stream_destroy(stream),
        Err(Error::Driver(driver_error(
            "cuStreamDestroy",
            sys::CUDA_ERROR_INVALID_VALUE
        )))
    );
    assert_eq!(b.stream_synchronize(stream), Ok(()));
}

#[test]
fn unloading_a_module_makes_it_and_its_kernels_stale() {
    let b = fake_backend();
    let image = c"a module image";
    // SAFETY: the fake driver reads no image.
    let module = unsafe { b.module_load(D0, image.as_ptr().cast()) }.unwrap();
    let kernel = b.module_kernel(module, c"k").unwrap();
    let stream = b.stream_create(D0).unwrap();
    let dims = LaunchDims::linear(1, 1);
    assert_eq!(b.kernel_static_workgroup_bytes(kernel), Ok(0));
    // Asked parameter by parameter until the driver says there is none more.
    assert_eq!(b.kernel_param_sizes(kernel), Ok(vec![8, 4, 8]));
    // SAFETY: the fake driver runs nothing.
    let called = unsafe { b.launch_packed(stream, kernel, dims, ptr::null_mut()) };
    assert_eq!(called, Ok(()));

    assert_eq!(b.module_unload(module), Ok(()));
    assert_eq!(
        b.module_kernel(module, c"k"),
        Err(stale("module", module.key))
    );
    assert_eq!(b.module_unload(module), Err(stale("module", module.key)));
    let gone = Err(stale("kernel", module.key));
    assert_eq!(
        b.kernel_static_workgroup_bytes(kernel),
        gone.clone().map(|()| 0)
    );
    assert_eq!(b.kernel_allow_workgroup_bytes(kernel, 1 << 10), gone);
    assert_eq!(b.kernel_param_sizes(kernel), gone.clone().map(|()| vec![]));
    // SAFETY: refused before anything is enqueued.
    let called = unsafe { b.launch_packed(stream, kernel, dims, ptr::null_mut()) };
    assert_eq!(called, gone);
}

#[test]
fn a_reset_makes_every_handle_and_allocation_of_the_device_stale() {
    let b = fake_backend();
    let stream = b.stream_create(D0).unwrap();
    let event = b.event_create(D0).unwrap();
    let fill = b.kernel(D0, "fill_u32").unwrap();
    assert_eq!(
        b.kernel(D0, "fill_u32"),
        Ok(fill),
        "the library is loaded once"
    );
    let memory = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    assert_eq!(b.reset_device(D0), Ok(()));
    assert_eq!(
        b.stream_synchronize(stream),
        Err(stale("stream", stream.key))
    );
    assert_eq!(b.event_synchronize(event), Err(stale("event", event.key)));
    assert_eq!(
        b.kernel_static_workgroup_bytes(fill),
        Err(stale("kernel", fill.module))
    );
    assert_eq!(
        b.free(D0, MemoryKind::Device, memory, None),
        Err(Error::UnknownAddress {
            device: D0,
            address: memory
        })
    );
    // The library is loaded afresh, with new handles.
    let again = b.kernel(D0, "fill_u32").unwrap();
    assert_ne!(again, fill);
    assert_eq!(b.kernel_static_workgroup_bytes(again), Ok(0));
}

#[test]
fn a_handle_of_another_backend_is_stale_here() {
    let (one, two) = (fake_backend(), fake_backend());
    let stream = one.stream_create(D0).unwrap();
    let event = one.event_create(D0).unwrap();
    assert_eq!(
        two.stream_synchronize(stream),
        Err(stale("stream", stream.key))
    );
    assert_eq!(two.event_query(event), Err(stale("event", event.key)));
    assert_eq!(one.stream_synchronize(stream), Ok(()));
}

#[test]
fn only_memory_this_backend_allocated_is_freed() {
    let b = fake_backend();
    let memory = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let unknown = |device, address| Err(Error::UnknownAddress { device, address });
    assert_eq!(
        b.free(D0, MemoryKind::Device, memory + 8, None),
        unknown(D0, memory + 8)
    );
    assert_eq!(
        b.free(D0, MemoryKind::Managed, memory, None),
        unknown(D0, memory)
    );
    assert_eq!(
        b.free(DeviceId(1), MemoryKind::Device, memory, None),
        Err(Error::UnknownDevice {
            device: DeviceId(1),
            device_count: 1
        })
    );
    assert_eq!(b.free(D0, MemoryKind::Device, memory, None), Ok(()));
    assert_eq!(
        b.free(D0, MemoryKind::Device, memory, None),
        unknown(D0, memory),
        "twice"
    );
    // In a stream's order too.
    let stream = b.stream_create(D0).unwrap();
    let memory = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    assert_eq!(b.free(D0, MemoryKind::Device, memory, Some(stream)), Ok(()));
    assert!(b.allocations.is_empty());
    // A free the driver refuses (the fake cuMemFreeHost refuses all) leaves the memory live.
    let pinned = b.allocate(D0, MemoryKind::HostPinned, 64).unwrap().unwrap();
    let refused = Err(Error::Driver(driver_error(
        "cuMemFreeHost",
        sys::CUDA_ERROR_INVALID_VALUE,
    )));
    assert_eq!(b.free(D0, MemoryKind::HostPinned, pinned, None), refused);
    assert!(b.allocations.contains(D0, MemoryKind::HostPinned, pinned));
}

#[test]
fn only_ranges_this_backend_registered_are_unregistered() {
    let b = fake_backend();
    let range = ByteRange::new(0x7000_0100, 1 << 20).unwrap();
    let mut device_ptrs = [0usize];
    assert_eq!(b.host_register(range, &mut device_ptrs), Ok(()));
    assert_eq!(device_ptrs, [range.start]);
    assert_eq!(
        b.host_unregister(range.start + 5000),
        Err(Error::NotEntryStart {
            ptr: range.start + 5000,
            entry: range
        })
    );
    assert_eq!(
        b.host_unregister(0x1000),
        Err(Error::NotLocked { ptr: 0x1000 })
    );
    assert_eq!(b.host_unregister(range.start), Ok(()));
    assert_eq!(
        b.host_unregister(range.start),
        Err(Error::NotLocked { ptr: range.start })
    );
}
/// The trait requires these; raw pointers inside would otherwise forbid them.
fn assert_thread_safe<T: Send + Sync>() {}

/// The trait requires a saved context to be `Send` (not `Sync`).
fn assert_send<T: Send>() {}

#[test]
fn handles_and_backend_are_send_and_sync() {
    assert_thread_safe::<CudaStream>();
    assert_thread_safe::<CudaEvent>();
    assert_thread_safe::<CudaKernel>();
    assert_thread_safe::<CudaBackend>();
    assert_send::<SavedContext>();
}

#[test]
fn out_of_memory_is_none_and_other_codes_are_driver_errors() {
    let failed = |call, code| Error::Driver(driver_error(call, code));
    assert_eq!(allocation_outcome(Ok(0x1000)), Ok(Some(0x1000)));
    assert_eq!(
        allocation_outcome(Err(failed("cuMemAlloc", sys::CUDA_ERROR_OUT_OF_MEMORY))),
        Ok(None)
    );
    assert_eq!(
        allocation_outcome(Err(failed("cuMemHostAlloc", sys::CUDA_ERROR_INVALID_VALUE))),
        Err(failed("cuMemHostAlloc", sys::CUDA_ERROR_INVALID_VALUE))
    );
}

mod graphs;
mod recorder;
mod vm;
