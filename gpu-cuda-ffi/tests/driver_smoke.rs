//! The loader against a real CUDA driver, where one is installed: every entry point resolves at
//! its ABI version (or is newer than the driver), and real calls behave as their bindings say.
//! Without a driver library it checks the typed error and says it skipped the rest.

use core::ffi::{CStr, c_char, c_int, c_uint, c_void};
use core::ptr;

use gpu_core::{DriverError, Error};
use gpu_cuda_ffi::{Driver, ENTRY_POINTS, LIBRARY_NAMES, check, reports_no_device, sys};

/// Calls a driver function through its accessor and checks the result, naming the call.
macro_rules! call {
    ($driver:expr, $name:ident($($argument:expr),* $(,)?)) => {{
        let function = $driver.$name().expect(concat!(stringify!($name), " resolves"));
        // SAFETY: each call site passes arguments valid for the function's contract.
        check(stringify!($name), unsafe { function($($argument),*) })
    }};
}

#[test]
fn real_driver_resolves_its_entry_points_and_reports_typed_errors() {
    let driver = match Driver::load() {
        Ok(driver) => driver,
        Err(Error::DriverLibraryNotFound { tried, .. }) => {
            assert_eq!(tried, LIBRARY_NAMES);
            eprintln!("skipped: no CUDA driver library (tried {tried:?})");
            return;
        }
        Err(other) => panic!("loading the CUDA driver failed: {other}"),
    };
    let version = driver.driver_version();
    let missing = driver.missing_entry_points().unwrap();
    let too_new: Vec<&str> = ENTRY_POINTS
        .iter()
        .filter(|entry| entry.abi_version > version)
        .map(|entry| entry.name)
        .collect();
    eprintln!("CUDA driver {version}; entry points it lacks: {missing:?}");
    assert_eq!(
        missing, too_new,
        "only ABIs newer than the driver may be missing"
    );

    // What the loader's design rests on: asked for a version above the driver's,
    // cuGetProcAddress refuses; asked for CUDA 13.0, it returns cuCtxGetDevice_v2 (which takes a
    // context) under the name cuda.h gives the one-argument function.
    let get_proc_address = driver.cuGetProcAddress().unwrap();
    let lookup = |symbol: &CStr, abi_version: c_int| {
        let (mut address, mut status) = (ptr::null_mut(), sys::CU_GET_PROC_ADDRESS_SUCCESS);
        let legacy = sys::CU_GET_PROC_ADDRESS_LEGACY_STREAM as sys::cuuint64_t;
        // SAFETY: a NUL-terminated name and valid out-parameters.
        let code = unsafe {
            get_proc_address(
                symbol.as_ptr(),
                &mut address,
                abi_version,
                legacy,
                &mut status,
            )
        };
        check("cuGetProcAddress", code).map(|()| address)
    };
    assert!(matches!(
        lookup(c"cuInit", version + 10),
        Err(Error::Driver(DriverError {
            name: "CUDA_ERROR_INVALID_VALUE",
            ..
        }))
    ));
    if version >= 13000 {
        let declared = driver.cuCtxGetDevice().unwrap() as *mut c_void;
        assert_eq!(lookup(c"cuCtxGetDevice", 2000), Ok(declared));
        assert_ne!(lookup(c"cuCtxGetDevice", 13000), Ok(declared));
    }

    match call!(driver, cuInit(0)) {
        Err(error) if reports_no_device(&error) => {
            eprintln!("skipped the device calls: {error}");
            return;
        }
        result => result.unwrap(),
    }
    let mut count: c_int = 0;
    call!(driver, cuDeviceGetCount(&mut count)).unwrap();
    assert!(count >= 1);
    let mut device = 0;
    call!(driver, cuDeviceGet(&mut device, 0)).unwrap();
    let mut name = [0 as c_char; 256];
    call!(driver, cuDeviceGetName(name.as_mut_ptr(), 256, device)).unwrap();
    // SAFETY: the driver wrote a NUL-terminated name into the buffer.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy();
    let mut total = 0usize;
    call!(driver, cuDeviceTotalMem(&mut total, device)).unwrap();
    assert!(total > 0);
    eprintln!("device 0 of {count}: {name}, {total} bytes");

    let mut context = ptr::null_mut();
    call!(driver, cuDevicePrimaryCtxRetain(&mut context, device)).unwrap();
    call!(driver, cuCtxSetCurrent(context)).unwrap();
    // The one-argument ABI cuda.h declares, not CUDA 13's two-argument cuCtxGetDevice_v2.
    let mut current = -1;
    call!(driver, cuCtxGetDevice(&mut current)).unwrap();
    assert_eq!(current, device);
    call!(driver, cuCtxSynchronize()).unwrap();

    // Registering a range twice names the driver's code; so does unregistering twice.
    let mut host = vec![0u8; 1 << 20];
    let (start, len) = (host.as_mut_ptr().cast::<c_void>(), host.len());
    call!(driver, cuMemHostRegister(start, len, 0)).unwrap();
    assert_eq!(
        call!(driver, cuMemHostRegister(start, len, 0)),
        Err(Error::Driver(DriverError {
            backend: "cuda",
            call: "cuMemHostRegister",
            name: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
            code: 712,
        }))
    );
    call!(driver, cuMemHostUnregister(start)).unwrap();
    assert!(matches!(
        call!(driver, cuMemHostUnregister(start)),
        Err(Error::Driver(DriverError {
            code: 713,
            name: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
            ..
        }))
    ));

    // A round trip through device memory on a non-blocking stream, with a fill and events.
    let mut stream = ptr::null_mut();
    call!(
        driver,
        cuStreamCreate(&mut stream, sys::CU_STREAM_NON_BLOCKING)
    )
    .unwrap();
    let mut device_memory = 0;
    call!(driver, cuMemAlloc(&mut device_memory, len)).unwrap();
    let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    call!(
        driver,
        cuMemcpyHtoDAsync(device_memory, pattern.as_ptr().cast(), len, stream)
    )
    .unwrap();
    call!(driver, cuMemsetD8Async(device_memory, 0xAB, 16, stream)).unwrap();
    let (mut start_event, mut end_event) = (ptr::null_mut(), ptr::null_mut());
    call!(
        driver,
        cuEventCreate(&mut start_event, sys::CU_EVENT_DEFAULT)
    )
    .unwrap();
    call!(driver, cuEventCreate(&mut end_event, sys::CU_EVENT_DEFAULT)).unwrap();
    call!(driver, cuEventRecord(start_event, stream)).unwrap();
    call!(
        driver,
        cuMemcpyDtoHAsync(host.as_mut_ptr().cast(), device_memory, len, stream)
    )
    .unwrap();
    call!(driver, cuEventRecord(end_event, stream)).unwrap();
    call!(driver, cuStreamSynchronize(stream)).unwrap();
    call!(driver, cuEventQuery(end_event)).unwrap();
    assert!(host[..16].iter().all(|&b| b == 0xAB));
    assert_eq!(host[16..], pattern[16..]);
    if !missing.contains(&"cuEventElapsedTime") {
        let mut milliseconds = -1.0f32;
        call!(
            driver,
            cuEventElapsedTime(&mut milliseconds, start_event, end_event)
        )
        .unwrap();
        assert!(milliseconds >= 0.0);
    }

    // Stream-ordered allocation, where the driver has it.
    if !missing.contains(&"cuMemAllocAsync") {
        let mut ordered = 0;
        call!(driver, cuMemAllocAsync(&mut ordered, 4096, stream)).unwrap();
        call!(driver, cuMemsetD32Async(ordered, 7 as c_uint, 1024, stream)).unwrap();
        call!(driver, cuMemFreeAsync(ordered, stream)).unwrap();
        call!(driver, cuStreamSynchronize(stream)).unwrap();
    }

    call!(driver, cuEventDestroy(start_event)).unwrap();
    call!(driver, cuEventDestroy(end_event)).unwrap();
    call!(driver, cuMemFree(device_memory)).unwrap();
    call!(driver, cuStreamDestroy(stream)).unwrap();
    call!(driver, cuDevicePrimaryCtxRelease(device)).unwrap();
}
