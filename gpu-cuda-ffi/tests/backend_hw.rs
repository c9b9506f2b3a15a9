//! The CUDA backend on real hardware: every trait method at least once, with the calling
//! thread's current context checked after each call, a launch from threads with no context or
//! another context current, the runtime under a context the program created itself, then the
//! backend-generic conformance suite. Without a driver library (or
//! without a device) each test says it skipped and passes.

use core::ptr;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, FillValue, KernelArg, LaunchDims};
use gpu_core::{ByteRange, DeviceId, DriverError, Error};
use gpu_cuda_ffi::{CudaBackend, CudaStream, Driver, check, reports_no_device, sys};
use gpu_rt::runtime::{Arg, DeviceGuard, Runtime};
use gpu_testkit::conformance::run_and_print;

/// The backend, or `None` after printing why the test is skipped.
fn open() -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(backend) => Some(backend),
        Err(Error::DriverLibraryNotFound { .. }) => {
            eprintln!("backend cuda: skipped: no CUDA driver");
            None
        }
        Err(error) if reports_no_device(&error) => {
            eprintln!("backend cuda: skipped: no device ({error})");
            None
        }
        Err(other) => panic!("opening the CUDA backend failed: {other}"),
    }
}

/// The calling thread's current context, read from the driver directly.
fn current_context(backend: &CudaBackend) -> sys::CUcontext {
    context_of_thread(backend.driver())
}

/// The calling thread's current context, as `driver` reports it.
fn context_of_thread(driver: &Driver) -> sys::CUcontext {
    let get = driver.cuCtxGetCurrent().unwrap();
    let mut context = ptr::null_mut();
    // SAFETY: a valid out-parameter.
    assert_eq!(unsafe { get(&mut context) }, sys::CUDA_SUCCESS);
    context
}

/// Evaluates a backend call and checks that the thread's current context is what it was.
macro_rules! kept {
    ($backend:expr, $call:expr) => {{
        let before = current_context($backend);
        let result = $call;
        assert_eq!(
            current_context($backend),
            before,
            "{} changed the current context",
            stringify!($call)
        );
        result
    }};
}

/// The driver's error `name` (code `code`) from `call`.
fn driver(call: &'static str, name: &'static str, code: i64) -> Error {
    Error::Driver(DriverError {
        backend: "cuda",
        call,
        name,
        code,
    })
}

const D0: DeviceId = DeviceId(0);

fn devices_and_current_device(b: &CudaBackend, start: Option<DeviceId>) {
    let count = kept!(b, b.device_count());
    assert!(count >= 1);
    assert_eq!(b.name(), "cuda");
    let info = kept!(b, b.device_info(D0)).unwrap();
    eprintln!("device 0 of {count}: {info:?}");
    assert!(info.total_memory > 0 && info.unified_addressing);
    assert!(info.allocator.device.available && info.allocator.host_register);
    assert!(info.workgroup.default_per_block <= info.workgroup.max_per_block_opt_in);
    assert_eq!(
        kept!(b, b.device_info(DeviceId(count as u32))),
        Err(Error::UnknownDevice {
            device: DeviceId(count as u32),
            device_count: count
        })
    );
    assert_eq!(kept!(b, b.current_device()), Ok(start));
    b.set_current_device(None).unwrap();
    assert!(current_context(b).is_null());
    assert_eq!(b.current_device(), Ok(None));
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(current_context(b), b.primary_context(D0).unwrap());
    assert_eq!(b.current_device(), Ok(Some(D0)));
    assert_eq!(
        b.set_current_device(Some(DeviceId(count as u32))),
        Err(Error::UnknownDevice {
            device: DeviceId(count as u32),
            device_count: count
        })
    );
    b.set_current_device(start).unwrap();
    assert_eq!(b.current_device(), Ok(start));
}

/// Device memory filled on `stream` reads back through a host copy.
///
/// # Safety
/// `[address, address + bytes)` is a live allocation of `b` that nothing else uses meanwhile.
unsafe fn round_trip(b: &CudaBackend, stream: CudaStream, address: usize, bytes: usize, value: u8) {
    let mut host = vec![!value; bytes];
    // SAFETY: the caller's allocation; `host` is untouched until the synchronise below.
    kept!(b, unsafe { b.fill(stream, address, value, bytes) }).unwrap();
    // SAFETY: as above.
    kept!(b, unsafe {
        b.copy(stream, host.as_mut_ptr() as usize, address, bytes)
    })
    .unwrap();
    kept!(b, b.stream_synchronize(stream)).unwrap();
    assert!(
        host.iter().all(|&byte| byte == value),
        "round trip of {value:#x}"
    );
}

fn memory(b: &CudaBackend, stream: CudaStream) {
    let caps = b.device_info(D0).unwrap().allocator;
    let size = 1 << 20;
    for kind in MemoryKind::CACHED {
        if !caps.support(kind).available {
            continue;
        }
        for after in [None, Some(stream)] {
            let address = kept!(b, b.allocate(D0, kind, size)).unwrap().unwrap();
            // SAFETY: a fresh allocation of `size` bytes, used by nothing else.
            unsafe { round_trip(b, stream, address, size, 0x3c) };
            kept!(b, b.free(D0, kind, address, after)).unwrap();
        }
        assert_eq!(
            kept!(b, b.allocate(D0, kind, 0)),
            Err(Error::ZeroSize {
                what: "allocation size"
            })
        );
    }
    // Out of memory is `None`, not an error (never tried for managed memory, which can hang
    // the GPU when asked for more than it has).
    let huge = 1usize << 50;
    assert_eq!(kept!(b, b.allocate(D0, MemoryKind::Device, huge)), Ok(None));
    assert_eq!(
        kept!(b, b.allocate(D0, MemoryKind::HostPinned, huge)),
        Ok(None)
    );

    // Stream-ordered device memory, freed both ways, and the kinds without a stream-ordered form.
    assert!(caps.device.stream_ordered, "an H100/H200 has memory pools");
    for after in [Some(stream), None] {
        let address = kept!(b, b.allocate_on_stream(stream, MemoryKind::Device, size))
            .unwrap()
            .unwrap();
        // SAFETY: a fresh stream-ordered allocation of `size` bytes on this very stream.
        unsafe { round_trip(b, stream, address, size, 0xa7) };
        kept!(b, b.free(D0, MemoryKind::Device, address, after)).unwrap();
    }
    assert_eq!(
        kept!(b, b.allocate_on_stream(stream, MemoryKind::Device, huge)),
        Ok(None)
    );
    assert_eq!(
        kept!(b, b.allocate_on_stream(stream, MemoryKind::Managed, size)),
        Err(Error::KindUnsupported {
            device: D0,
            kind: MemoryKind::Managed
        })
    );
    kept!(b, b.stream_synchronize(stream)).unwrap();
}

fn host_registration(b: &CudaBackend, stream: CudaStream) {
    let count = b.device_count();
    let mut host = vec![0u8; 3 << 20];
    let len = 1 << 20;
    // An unaligned start: the driver registers (and reports) exactly this range.
    let start = host.as_mut_ptr() as usize + 100;
    let range = ByteRange::new(start, len).unwrap();
    let mut device_ptrs = vec![0usize; count];
    kept!(b, b.host_register(range, &mut device_ptrs)).unwrap();
    assert!(device_ptrs.iter().all(|&address| address != 0));

    let already = Err(driver(
        "cuMemHostRegister",
        "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        712,
    ));
    let mut scratch = vec![0usize; count];
    assert_eq!(kept!(b, b.host_register(range, &mut scratch)), already);
    let inside = ByteRange::new(start + 4096, 4096).unwrap();
    assert_eq!(kept!(b, b.host_register(inside, &mut scratch)), already);
    let straddling = ByteRange::new(start + len - 4096, 8192).unwrap();
    assert_eq!(kept!(b, b.host_register(straddling, &mut scratch)), already);

    let mut found = vec![0usize; count];
    assert_eq!(
        kept!(b, b.host_pinned_extent(start + 5000, &mut found)),
        Ok(Some(range))
    );
    assert_eq!(found, device_ptrs);
    assert_eq!(
        kept!(b, b.host_pinned_extent(start + len + 4096, &mut found)),
        Ok(None),
        "heap memory past the registered range"
    );
    let on_stack = 0u64;
    assert_eq!(
        kept!(
            b,
            b.host_pinned_extent(&on_stack as *const u64 as usize, &mut found)
        ),
        Ok(None)
    );
    let too_many = vec![0usize; count + 1];
    assert_eq!(
        kept!(b, b.host_pinned_extent(start, &mut too_many.clone())),
        Err(Error::UnknownDevice {
            device: DeviceId(count as u32),
            device_count: count
        })
    );

    // The device reads the registered memory through the address the backend gave.
    let device_memory = b.allocate(D0, MemoryKind::Device, 4096).unwrap().unwrap();
    // SAFETY: a live 4 KiB allocation.
    kept!(b, unsafe { b.fill(stream, device_memory, 0x5c, 4096) }).unwrap();
    // SAFETY: the device's address of the first 4 KiB of the registered range (inside `host`,
    // untouched until the synchronise below), and the allocation just filled.
    kept!(b, unsafe {
        b.copy(stream, device_ptrs[0], device_memory, 4096)
    })
    .unwrap();
    kept!(b, b.stream_synchronize(stream)).unwrap();
    assert!(host[100..4196].iter().all(|&byte| byte == 0x5c));
    assert_eq!(host[99], 0);
    b.free(D0, MemoryKind::Device, device_memory, None).unwrap();

    // Refused before the driver: a pointer inside the range, and one no longer registered.
    assert_eq!(
        kept!(b, b.host_unregister(start + 5000)),
        Err(Error::NotEntryStart {
            ptr: start + 5000,
            entry: range
        })
    );
    kept!(b, b.host_unregister(start)).unwrap();
    assert_eq!(
        kept!(b, b.host_unregister(start)),
        Err(Error::NotLocked { ptr: start })
    );
    assert_eq!(kept!(b, b.host_pinned_extent(start, &mut found)), Ok(None));

    // Memory pinned by someone else (here cuMemHostAlloc) is found with its whole extent.
    let pinned = b
        .allocate(D0, MemoryKind::HostPinned, len)
        .unwrap()
        .unwrap();
    assert_eq!(
        kept!(b, b.host_pinned_extent(pinned + 777, &mut found)),
        Ok(Some(ByteRange::new(pinned, len).unwrap()))
    );
    assert!(found.iter().all(|&address| address != 0));
    b.free(D0, MemoryKind::HostPinned, pinned, None).unwrap();
    drop(host);
}

fn streams_and_events(b: &CudaBackend) {
    let (first, second) = (
        kept!(b, b.stream_create(D0)).unwrap(),
        kept!(b, b.stream_create(D0)).unwrap(),
    );
    let event = kept!(b, b.event_create(D0)).unwrap();
    assert_eq!(kept!(b, b.event_query(event)), Ok(true), "never recorded");
    // A long fill on the first stream; the second waits for it, then copies the result out.
    let size = 64 << 20;
    let device_memory = b.allocate(D0, MemoryKind::Device, size).unwrap().unwrap();
    let pinned = b
        .allocate(D0, MemoryKind::HostPinned, size)
        .unwrap()
        .unwrap();
    // SAFETY: a live device allocation of `size` bytes.
    kept!(b, unsafe { b.fill(first, device_memory, 0x11, size) }).unwrap();
    kept!(b, b.event_record(event, first)).unwrap();
    kept!(b, b.stream_wait_event(second, event)).unwrap();
    // SAFETY: two live allocations of `size` bytes; the host reads `pinned` only after the
    // synchronise below.
    kept!(b, unsafe { b.copy(second, pinned, device_memory, size) }).unwrap();
    kept!(b, b.stream_synchronize(second)).unwrap();
    // SAFETY: `pinned` is a live host allocation of `size` bytes, and its copy has finished.
    let landed = unsafe { core::slice::from_raw_parts(pinned as *const u8, size) };
    assert!(landed.iter().all(|&byte| byte == 0x11));
    assert_eq!(kept!(b, b.event_query(event)), Ok(true));
    kept!(b, b.event_synchronize(event)).unwrap();
    kept!(b, b.device_synchronize(D0)).unwrap();
    b.free(D0, MemoryKind::Device, device_memory, None).unwrap();
    b.free(D0, MemoryKind::HostPinned, pinned, None).unwrap();
    kept!(b, b.event_destroy(event)).unwrap();
    kept!(b, b.stream_destroy(first)).unwrap();
    // Destroyed handles are refused before the driver, which would be handed dangling ones.
    assert!(matches!(
        kept!(b, b.event_query(event)),
        Err(Error::StaleHandle { what: "event", .. })
    ));
    assert!(matches!(
        kept!(b, b.stream_wait_event(second, event)),
        Err(Error::StaleHandle { what: "event", .. })
    ));
    assert!(matches!(
        kept!(b, b.stream_synchronize(first)),
        Err(Error::StaleHandle { what: "stream", .. })
    ));
    assert!(matches!(
        b.free(D0, MemoryKind::Device, device_memory, None),
        Err(Error::UnknownAddress { .. })
    ));
    kept!(b, b.stream_destroy(second)).unwrap();
}

/// `count` little-endian u32 words copied out of device memory.
///
/// # Safety
/// `[address, address + 4 * count)` is a live allocation of `b`.
unsafe fn read_words(
    b: &CudaBackend,
    stream: CudaStream,
    address: usize,
    count: usize,
) -> Vec<u32> {
    let mut words = vec![0u32; count];
    // SAFETY: the caller's allocation; `words` is untouched until the synchronise below.
    kept!(b, unsafe {
        b.copy(stream, words.as_mut_ptr() as usize, address, count * 4)
    })
    .unwrap();
    b.stream_synchronize(stream).unwrap();
    words
}

fn kernels(b: &CudaBackend, stream: CudaStream) {
    // fill_u32 over more words than threads, leaving the word after the count alone.
    let count = 1_000_003usize;
    let data = b
        .allocate(D0, MemoryKind::Device, (count + 1) * 4)
        .unwrap()
        .unwrap();
    // SAFETY: the whole live allocation.
    unsafe { b.fill(stream, data, 0xee, (count + 1) * 4) }.unwrap();
    let fill = kept!(b, b.kernel(D0, "fill_u32")).unwrap();
    let args = [
        KernelArg::Ptr(data),
        KernelArg::U32(0xc0ff_ee01),
        KernelArg::U64(count as u64),
    ];
    // SAFETY: the kernel writes `count` words of the `count + 1` allocated at `data`.
    kept!(b, unsafe {
        b.launch(stream, fill, LaunchDims::linear(64, 256), &args)
    })
    .unwrap();
    // SAFETY: the live allocation of `count + 1` words.
    let words = unsafe { read_words(b, stream, data, count + 1) };
    assert!(words[..count].iter().all(|&word| word == 0xc0ff_ee01));
    assert_eq!(words[count], 0xeeee_eeee);
    assert_eq!(
        // SAFETY: refused before the driver for its missing argument (and its pointer is live).
        kept!(b, unsafe {
            b.launch(stream, fill, LaunchDims::linear(1, 32), &args[..2])
        }),
        Err(Error::KernelArgumentMismatch {
            kernel: "fill_u32",
            expected: "(Ptr dst, U32 value, U64 count)"
        })
    );
    assert_eq!(
        kept!(b, b.kernel(D0, "no_such_kernel")),
        Err(Error::UnknownKernel {
            backend: "cuda",
            name: "no_such_kernel".into()
        })
    );
    assert_eq!(kept!(b, b.kernel(D0, "fill_u32")), Ok(fill), "cached");
    b.free(D0, MemoryKind::Device, data, None).unwrap();

    // axpy_f32: y = 2x + y, exact in f32 for these values.
    let n = 10_000usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let ys = vec![1.0f32; n];
    let (x, y) = (
        b.allocate(D0, MemoryKind::Device, 4 * n).unwrap().unwrap(),
        b.allocate(D0, MemoryKind::Device, 4 * n).unwrap().unwrap(),
    );
    // SAFETY: live allocations of `n` floats each; `xs` and `ys` outlive the synchronise in
    // `read_words` below.
    unsafe {
        b.copy(stream, x, xs.as_ptr() as usize, 4 * n).unwrap();
        b.copy(stream, y, ys.as_ptr() as usize, 4 * n).unwrap();
    }
    let axpy = kept!(b, b.kernel(D0, "axpy_f32")).unwrap();
    let args = [
        KernelArg::F32(2.0),
        KernelArg::Ptr(x),
        KernelArg::Ptr(y),
        KernelArg::U64(n as u64),
    ];
    // SAFETY: the kernel reads `n` floats at `x` and updates `n` at `y`, both live.
    kept!(b, unsafe {
        b.launch(stream, axpy, LaunchDims::linear(8, 128), &args)
    })
    .unwrap();
    // SAFETY: the live allocation of `n` words at `y`.
    let result = unsafe { read_words(b, stream, y, n) };
    for (i, word) in result.iter().enumerate() {
        assert_eq!(
            f32::from_bits(*word),
            2.0 * i as f32 + 1.0,
            "axpy element {i}"
        );
    }
    b.free(D0, MemoryKind::Device, x, None).unwrap();
    b.free(D0, MemoryKind::Device, y, None).unwrap();

    // workgroup_reverse_u32 with the most dynamic workgroup memory a block can have: refused
    // by the driver until the kernel opts in, then correct in every workgroup.
    let limits = b.device_info(D0).unwrap().workgroup;
    let words_per_group = limits.max_per_block() / 4;
    let dynamic_bytes = 4 * words_per_group;
    assert!(dynamic_bytes > 48 << 10 && dynamic_bytes > limits.default_per_block);
    let groups = 4u32;
    let total = (groups * words_per_group) as usize;
    let input: Vec<u32> = (0..total as u32).collect();
    let data = b
        .allocate(D0, MemoryKind::Device, 4 * total)
        .unwrap()
        .unwrap();
    // SAFETY: a live allocation of `total` words; `input` outlives the copy (synchronised by
    // `read_words` below).
    unsafe { b.copy(stream, data, input.as_ptr() as usize, 4 * total) }.unwrap();
    let reverse = kept!(b, b.kernel(D0, "workgroup_reverse_u32")).unwrap();
    let dims = LaunchDims {
        grid: [groups, 1, 1],
        block: [256, 1, 1],
        dynamic_workgroup_bytes: dynamic_bytes,
    };
    let args = [KernelArg::Ptr(data), KernelArg::U32(words_per_group)];
    // Back to the default limit (an earlier round may have opted in: the attribute stays on
    // the cached function).
    kept!(
        b,
        b.kernel_allow_workgroup_bytes(reverse, limits.default_per_block)
    )
    .unwrap();
    assert_eq!(
        // SAFETY: `groups` workgroups of `words_per_group` words: exactly the allocation.
        kept!(b, unsafe { b.launch(stream, reverse, dims, &args) }),
        Err(driver("cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE", 1)),
        "a launch above the default limit before opting in"
    );
    // Its buffer is all dynamic: no static shared memory counts against the limit.
    assert_eq!(kept!(b, b.kernel_static_workgroup_bytes(reverse)), Ok(0));
    kept!(b, b.kernel_allow_workgroup_bytes(reverse, dynamic_bytes)).unwrap();
    // SAFETY: as above.
    kept!(b, unsafe { b.launch(stream, reverse, dims, &args) }).unwrap();
    // SAFETY: the live allocation of `total` words.
    let output = unsafe { read_words(b, stream, data, total) };
    for g in 0..groups {
        for i in 0..words_per_group {
            let at = (g * words_per_group + i) as usize;
            let expected = g * words_per_group + (words_per_group - 1 - i) + 1;
            assert_eq!(output[at], expected, "workgroup {g} word {i}");
        }
    }
    assert!(matches!(
        kept!(b, b.kernel_allow_workgroup_bytes(reverse, u32::MAX)),
        Err(Error::LimitExceeded { .. })
    ));
    b.free(D0, MemoryKind::Device, data, None).unwrap();
}

/// A program's own module (the library's PTX, loaded as a foreign image: the symbol `fill_u32`
/// is `(u32 *dst, u32 value, u64 count)`), launched with its own parameter array as MLIR's
/// `mgpuLaunchKernel` passes it; 16- and 32-bit fills; the module unloaded.
fn module_images(b: &CudaBackend, stream: CudaStream) {
    let words = 4099usize;
    let data = b
        .allocate(D0, MemoryKind::Device, (words + 1) * 4)
        .unwrap()
        .unwrap();
    // SAFETY: (fills) inside the live allocation of `words + 1` words.
    unsafe { b.fill_elements(stream, data, FillValue::U16(0xbeef), (words + 1) * 2) }.unwrap();
    // SAFETY: the embedded PTX ends with a NUL and lives as long as the program.
    let module = kept!(b, unsafe {
        b.module_load(D0, gpu_cuda_ffi::kernels::PTX.as_ptr().cast())
    })
    .unwrap();
    let fill = kept!(b, b.module_kernel(module, c"fill_u32")).unwrap();
    // fill_u32(unsigned *dst, unsigned value, unsigned long long count), as the driver says.
    assert_eq!(kept!(b, b.kernel_param_sizes(fill)), Ok(vec![8, 4, 8]));
    let (mut dst, mut value, mut count) = (data as u64, 0x1234_5678u32, words as u64);
    let mut params: [*mut core::ffi::c_void; 3] = [
        (&raw mut dst).cast(),
        (&raw mut value).cast(),
        (&raw mut count).cast(),
    ];
    // SAFETY: one pointer per parameter, each to a value of its type; the kernel writes
    // `words` words of the allocation.
    kept!(b, unsafe {
        b.launch_packed(
            stream,
            fill,
            LaunchDims::linear(17, 256),
            params.as_mut_ptr(),
        )
    })
    .unwrap();
    // SAFETY: the live allocation of `words + 1` words.
    let read = unsafe { read_words(b, stream, data, words + 1) };
    assert!(read[..words].iter().all(|&word| word == 0x1234_5678));
    assert_eq!(
        read[words], 0xbeef_beef,
        "the 16-bit fill, past the kernel's count"
    );
    // SAFETY: as above.
    unsafe { b.fill_elements(stream, data, FillValue::U32(7), words + 1) }.unwrap();
    // SAFETY: as above.
    let read = unsafe { read_words(b, stream, data, words + 1) };
    assert!(read.iter().all(|&word| word == 7));
    assert_eq!(
        // SAFETY: refused before the driver (no parameter table for a module's kernel).
        kept!(b, unsafe {
            b.launch(stream, fill, LaunchDims::linear(1, 1), &[])
        }),
        Err(Error::KernelArgumentMismatch {
            kernel: "(a kernel of a loaded module)",
            expected: "the module's own parameter array (launch_packed)"
        })
    );
    assert!(matches!(
        kept!(b, b.module_kernel(module, c"no_such_kernel")),
        Err(Error::Driver(DriverError {
            call: "cuModuleGetFunction",
            ..
        }))
    ));
    kept!(b, b.module_unload(module)).unwrap();
    // The module and its kernel are stale now, refused before the driver.
    assert!(matches!(
        kept!(b, b.module_kernel(module, c"fill_u32")),
        Err(Error::StaleHandle { what: "module", .. })
    ));
    // SAFETY: refused before anything is enqueued.
    let launched = kept!(b, unsafe {
        b.launch_packed(stream, fill, LaunchDims::linear(1, 1), params.as_mut_ptr())
    });
    assert!(matches!(
        launched,
        Err(Error::StaleHandle { what: "kernel", .. })
    ));
    b.free(D0, MemoryKind::Device, data, None).unwrap();
}

#[test]
fn every_method_works_and_keeps_the_current_context() {
    let Some(backend) = open() else { return };
    let b = &backend;
    eprintln!("{b:?}, driver {}", b.driver().driver_version());
    // Once with no context current (every call pushes and pops), once with device 0's
    // primary context current (the runtime's guard did it: no call switches).
    for start in [None, Some(D0)] {
        b.set_current_device(start).unwrap();
        devices_and_current_device(b, start);
        let stream = kept!(b, b.stream_create(D0)).unwrap();
        memory(b, stream);
        host_registration(b, stream);
        streams_and_events(b);
        kernels(b, stream);
        module_images(b, stream);
        kept!(b, b.stream_destroy(stream)).unwrap();
        assert_eq!(b.current_device(), Ok(start));
        eprintln!("all methods passed with {start:?} current");
    }
    b.set_current_device(None).unwrap();
}

/// A context the test creates itself on device 0 (not the primary context), as a program that
/// embeds the runtime may have current; destroyed when dropped.
struct ForeignContext {
    raw: sys::CUcontext,
    destroy: sys::PFN_cuCtxDestroy,
}

impl ForeignContext {
    /// Creates the context, which the driver makes current on the calling thread; `None`
    /// (after saying why) when the driver is older than cuCtxCreate's bound ABI (CUDA 12.5).
    fn create(backend: &CudaBackend) -> Option<Self> {
        let driver = backend.driver();
        let create = match driver.cuCtxCreate() {
            Ok(create) => create,
            Err(Error::DriverSymbolMissing { .. }) => {
                eprintln!(
                    "foreign context: skipped: driver {} has no cuCtxCreate_v4",
                    driver.driver_version()
                );
                return None;
            }
            Err(other) => panic!("looking up cuCtxCreate failed: {other}"),
        };
        let destroy = driver.cuCtxDestroy().unwrap();
        let device_get = driver.cuDeviceGet().unwrap();
        let mut ordinal: sys::CUdevice = 0;
        // SAFETY: a valid out-parameter; ordinal 0 exists (the backend opened it).
        check("cuDeviceGet", unsafe { device_get(&mut ordinal, 0) }).unwrap();
        let mut raw = ptr::null_mut();
        // No execution affinity, no CIG: a plain context, as cuCtxCreate_v2 made one.
        let mut params = sys::CUctxCreateParams::default();
        // SAFETY: valid out-parameter and parameter block, a device ordinal the driver gave.
        check("cuCtxCreate", unsafe {
            create(&mut raw, &mut params, 0, ordinal)
        })
        .unwrap();
        Some(Self { raw, destroy })
    }
}

impl Drop for ForeignContext {
    fn drop(&mut self) {
        // SAFETY: the context was created by `create` and is destroyed once, here; the runtime
        // that used it has been shut down.
        let destroyed = unsafe { (self.destroy)(self.raw) };
        if !std::thread::panicking() {
            assert_eq!(destroyed, sys::CUDA_SUCCESS, "cuCtxDestroy");
        }
    }
}

#[test]
fn a_foreign_current_context_is_put_back_after_runtime_calls() {
    let Some(backend) = open() else { return };
    let Some(foreign) = ForeignContext::create(&backend) else {
        return;
    };
    assert_eq!(
        current_context(&backend),
        foreign.raw,
        "cuCtxCreate made it current"
    );
    assert_ne!(foreign.raw, backend.primary_context(D0).unwrap());
    // No device id names it, so the old guard (which saved `current_device`) failed here.
    assert_eq!(
        backend.current_device(),
        Err(Error::ForeignContext { backend: "cuda" })
    );
    let saved = backend.save_current().unwrap();
    assert_eq!(saved.raw(), foreign.raw);
    assert!(!backend.is_current(saved, D0));

    let rt = Runtime::new(backend).unwrap();
    let b = rt.backend();
    {
        let guard = DeviceGuard::new(b, D0).unwrap();
        assert_eq!(current_context(b), b.primary_context(D0).unwrap());
        guard.restore().unwrap();
        assert_eq!(current_context(b), foreign.raw, "the guard's restore");
    }
    let words = 1024usize;
    let buffer = rt.alloc(D0, MemoryKind::Device, 4 * words).unwrap();
    assert_eq!(current_context(b), foreign.raw, "alloc");
    let filled = rt.fill(D0, buffer.all(), 0xee, &mut vec![]).unwrap();
    assert_eq!(current_context(b), foreign.raw, "fill");
    // SAFETY: the kernel touches its count of words of its spans, which fit.
    let launched = unsafe {
        rt.launch(
            D0,
            "fill_u32",
            LaunchDims::linear(4, 64),
            &[
                Arg::Span(buffer.all()),
                Arg::U32(0x0102_0304),
                Arg::U64(words as u64),
            ],
            &mut vec![filled],
        )
    }
    .unwrap();
    assert_eq!(current_context(b), foreign.raw, "launch");
    let mut back = vec![0u8; 4 * words];
    rt.download(D0, &mut back, buffer.all(), &mut vec![launched])
        .unwrap();
    assert_eq!(current_context(b), foreign.raw, "download");
    assert!(
        back.chunks_exact(4)
            .all(|word| word == 0x0102_0304u32.to_le_bytes())
    );
    rt.free(buffer).unwrap();
    let driver = b.driver();
    let report = rt.shutdown().unwrap();
    assert!(report.program.unwaited.is_empty());
    assert_eq!(context_of_thread(driver), foreign.raw, "shutdown");
    eprintln!("foreign context: put back after every runtime call");
    drop(foreign);
}

/// Launches fill_u32 through the backend on the calling thread over a device 0 buffer filled
/// with another pattern first, reads the words back on the host, and checks that neither the
/// launch nor the calls around it changed the thread's current context. `situation` says
/// which context the caller had current, for the messages.
fn fill_through_the_backend(b: &CudaBackend, situation: &str) {
    let before = current_context(b);
    let words = 4099usize;
    let value = 0x5eed_1234u32;
    let stream = b.stream_create(D0).unwrap();
    let data = b
        .allocate(D0, MemoryKind::Device, 4 * words)
        .unwrap()
        .unwrap();
    // SAFETY: the whole live allocation.
    unsafe { b.fill(stream, data, 0xee, 4 * words) }.unwrap();
    let fill = b.kernel(D0, "fill_u32").unwrap();
    let args = [
        KernelArg::Ptr(data),
        KernelArg::U32(value),
        KernelArg::U64(words as u64),
    ];
    // SAFETY: the kernel writes `words` words at `data`: the whole live allocation.
    kept!(b, unsafe {
        b.launch(stream, fill, LaunchDims::linear(4, 256), &args)
    })
    .unwrap();
    // SAFETY: the live allocation of `words` words.
    let back = unsafe { read_words(b, stream, data, words) };
    assert!(
        back.iter().all(|&word| word == value),
        "{situation}: fill_u32 left a word other than {value:#x}"
    );
    b.free(D0, MemoryKind::Device, data, None).unwrap();
    b.stream_destroy(stream).unwrap();
    assert_eq!(
        current_context(b),
        before,
        "{situation}: the thread's current context changed"
    );
}

#[test]
fn a_launch_works_with_no_context_current_and_with_another_context_current() {
    let Some(backend) = open() else { return };
    let b = &backend;
    // Each situation on a thread of its own, which starts with no context current.
    std::thread::scope(|threads| {
        threads.spawn(|| {
            assert!(current_context(b).is_null(), "a new thread has no context");
            fill_through_the_backend(b, "no context current");
            assert!(current_context(b).is_null());
        });
        if b.device_count() >= 2 {
            threads.spawn(|| {
                let device_1 = DeviceId(1);
                b.set_current_device(Some(device_1)).unwrap();
                let other = b.primary_context(device_1).unwrap();
                assert_eq!(current_context(b), other);
                fill_through_the_backend(b, "device 1's primary context current");
                assert_eq!(current_context(b), other);
                b.set_current_device(None).unwrap();
            });
        } else {
            eprintln!("launch under device 1's primary context: skipped: one device");
        }
        threads.spawn(|| {
            let Some(foreign) = ForeignContext::create(b) else {
                return;
            };
            assert_eq!(
                current_context(b),
                foreign.raw,
                "cuCtxCreate made it current"
            );
            fill_through_the_backend(b, "a context the test created current");
            assert_eq!(current_context(b), foreign.raw);
            drop(foreign);
        });
    });
    eprintln!("launch with no context or another context current: ran");
}

#[test]
fn conformance_suite_passes_on_hardware() {
    // Held for the whole suite so that the primary contexts survive between cases (each case
    // opens its own backend; a context is destroyed when its last holder releases it).
    let Some(held) = open() else { return };
    let failed = run_and_print("cuda", &CudaBackend::new);
    assert_eq!(failed, 0, "{failed} case(s) failed");
    drop(held);
}

/// A program's kernel that stores through a null pointer: an illegal address, which loses the
/// device (CUDA's sticky `CUDA_ERROR_ILLEGAL_ADDRESS`).
const WRITE_NULL_PTX: &[u8] = b".version 8.0\n.target sm_80\n.address_size 64\n\
.visible .entry write_null()\n{\n  .reg .b64 %rd<2>;\n  .reg .b32 %r<2>;\n  \
mov.u64 %rd1, 0;\n  mov.u32 %r1, 42;\n  st.global.u32 [%rd1], %r1;\n  ret;\n}\n\0";

/// The failure model on real hardware: a kernel's illegal address on the last device loses
/// every device (CUDA's sticky error is the process's: on two H200s, device 0's next
/// allocation failed with `CUDA_ERROR_ILLEGAL_ADDRESS`, and after a primary context reset even
/// retaining the context again did), so the runtime marks them all lost at once, naming the
/// fault, and `reset_device` is refused as unsupported rather than leaving the backend with a
/// destroyed context. The fault is deliberate, so compute-sanitizer reports it, and it ends the
/// process's use of CUDA: runs only with `GPU_FAULT_TEST=1`, in a process of its own.
#[test]
fn a_kernel_fault_loses_every_device_of_the_process() {
    if std::env::var_os("GPU_FAULT_TEST").is_none() {
        eprintln!("fault test: skipped (set GPU_FAULT_TEST=1: it faults a device on purpose)");
        return;
    }
    let Some(backend) = open() else { return };
    let rt = Runtime::new(backend).unwrap();
    let devices: Vec<DeviceId> = (0..rt.device_count() as u32).map(DeviceId).collect();
    let bad = *devices.last().unwrap();
    // Every device works before the fault.
    for &device in &devices {
        fill_and_read(&rt, device, 5).unwrap();
    }
    // SAFETY: a NUL-terminated PTX image, static.
    let module = unsafe { rt.load_module(bad, WRITE_NULL_PTX.as_ptr().cast()) }.unwrap();
    let kernel = rt.module_kernel(module, bad, c"write_null").unwrap();
    // SAFETY: the kernel takes no parameters; its fault is the point of the test.
    let faulted =
        unsafe { kernel.launch_packed(LaunchDims::linear(1, 1), ptr::null_mut(), &mut vec![]) };
    let lost = rt.wait(faulted.unwrap()).unwrap_err();
    let names_the_fault = |error: &Error| {
        matches!(error, Error::DeviceLost { cause, .. }
            if matches!(**cause, Error::Driver(DriverError { code: 700 | 719, .. })))
    };
    assert!(names_the_fault(&lost), "{lost}");
    eprintln!("fault test: {bad}: {lost}");
    for &device in &devices {
        assert!(rt.device_lost(device).is_some(), "{device} not marked lost");
        let refused = fill_and_read(&rt, device, 9).unwrap_err();
        assert!(names_the_fault(&refused), "{device}: {refused}");
        let reset = rt.reset_device(device);
        assert!(matches!(reset, Err(Error::Unsupported { .. })), "{reset:?}");
    }
    eprintln!("fault test: every device lost, refused before the driver, reset refused");
    // Shutdown goes on past the lost devices' failures; none is of another kind.
    let report = rt.shutdown_report();
    assert!(report.into_result().is_ok());
}

/// Allocates 1 MiB on `device`, fills it with `fill_u32` and checks every byte on the host.
fn fill_and_read(rt: &Runtime<CudaBackend>, device: DeviceId, value: u8) -> Result<(), Error> {
    let buffer = rt.alloc(device, MemoryKind::Device, 1 << 20)?;
    let fill_u32 = rt.kernel(device, "fill_u32")?;
    let word = u32::from_ne_bytes([value; 4]);
    let args = [Arg::Span(buffer.all()), Arg::U32(word), Arg::U64(1 << 18)];
    // SAFETY: fill_u32 writes 2^18 words: the whole buffer.
    let filled = unsafe { fill_u32.launch(LaunchDims::linear(256, 256), &args, &mut vec![]) }?;
    let mut back = vec![0u8; 1 << 20];
    rt.download(device, &mut back, buffer.all(), &mut vec![filled])?;
    assert!(back.iter().all(|&b| b == value), "{device}: wrong bytes");
    Ok(())
}
