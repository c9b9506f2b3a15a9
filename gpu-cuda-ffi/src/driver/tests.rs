//! Tests of the loader without a GPU: fake resolvers and fake cuGetProcAddress functions stand
//! in for the driver, and real loading is tried on names that are absent or not a driver.

use super::*;

use core::ffi::{c_char, c_uint};
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use gpu_core::DriverError;

use crate::result::check;

/// An address that stands for "found" where nothing will call it.
const NEVER_CALLED: *mut c_void = ptr::without_provenance_mut(0x1000);

/// A fake cuDriverGetVersion reporting `VERSION`.
unsafe extern "C" fn reports_version<const VERSION: c_int>(version: *mut c_int) -> sys::CUresult {
    // SAFETY: the loader passes a valid out-parameter.
    unsafe { *version = VERSION };
    sys::CUDA_SUCCESS
}

/// A fake cuDriverGetVersion that fails.
unsafe extern "C" fn version_fails(_: *mut c_int) -> sys::CUresult {
    sys::CUDA_ERROR_NOT_INITIALIZED
}

/// A fake cuMemHostRegister that finds the range registered already.
unsafe extern "C" fn already_registered(_: *mut c_void, _: usize, _: c_uint) -> sys::CUresult {
    sys::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
}

type Requests = Arc<Mutex<Vec<(String, c_int)>>>;

/// Records every request; has cuDriverGetVersion, cuMemHostRegister and the names in `present`;
/// fails the lookup of the names in `failing`.
struct FakeResolver {
    driver_version: sys::PFN_cuDriverGetVersion,
    present: HashSet<&'static str>,
    failing: HashSet<&'static str>,
    requests: Requests,
}

impl ResolveEntryPoint for FakeResolver {
    fn resolve(&self, symbol: &CStr, abi_version: c_int) -> Result<Option<NonNull<c_void>>, Error> {
        let name = symbol.to_str().expect("entry point names are ASCII");
        self.requests
            .lock()
            .unwrap()
            .push((name.to_string(), abi_version));
        if self.failing.contains(name) {
            return Err(Error::Driver(driver_error(
                "cuGetProcAddress",
                sys::CUDA_ERROR_INVALID_VALUE,
            )));
        }
        let address = match name {
            "cuDriverGetVersion" => self.driver_version as *mut c_void,
            "cuMemHostRegister" => already_registered as sys::PFN_cuMemHostRegister as *mut c_void,
            _ if self.present.contains(name) => NEVER_CALLED,
            _ => return Ok(None),
        };
        Ok(NonNull::new(address))
    }
}

fn fake_driver(
    driver_version: sys::PFN_cuDriverGetVersion,
    present: &[&'static str],
    failing: &[&'static str],
) -> (Result<Driver, Error>, Requests) {
    let requests = Requests::default();
    let resolver = FakeResolver {
        driver_version,
        present: present.iter().copied().collect(),
        failing: failing.iter().copied().collect(),
        requests: Arc::clone(&requests),
    };
    (Driver::with_resolver(Box::new(resolver), None), requests)
}

fn taken(requests: &Requests) -> Vec<(String, c_int)> {
    std::mem::take(&mut *requests.lock().unwrap())
}

fn request(name: &str, abi_version: c_int) -> (String, c_int) {
    (name.to_string(), abi_version)
}

fn missing(symbol: &'static str) -> Error {
    Error::DriverSymbolMissing {
        backend: "cuda",
        symbol,
    }
}

#[test]
fn versioned_function_is_requested_by_base_name_at_its_abi_version_and_works() {
    let (driver, requests) = fake_driver(reports_version::<13000>, &[], &[]);
    let driver = driver.unwrap();
    assert_eq!(driver.driver_version(), 13000);
    assert_eq!(taken(&requests), [request("cuDriverGetVersion", 2020)]);

    // cuda.h's cuMemHostRegister is cuMemHostRegister_v2, the ABI of CUDA 6.5.
    let register = driver.cuMemHostRegister().unwrap();
    assert_eq!(taken(&requests), [request("cuMemHostRegister", 6050)]);
    // SAFETY: the fake ignores its arguments.
    let code = unsafe { register(ptr::null_mut(), 4096, 0) };
    assert_eq!(
        check("cuMemHostRegister", code),
        Err(Error::Driver(DriverError {
            backend: "cuda",
            call: "cuMemHostRegister",
            name: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
            code: 712,
        }))
    );
}

#[test]
fn functions_cuda_13_reused_the_name_of_are_requested_at_the_old_abi() {
    let everything = ["cuCtxGetDevice", "cuCtxSynchronize", "cuEventElapsedTime"];
    let (driver, requests) = fake_driver(reports_version::<13000>, &everything, &[]);
    let driver = driver.unwrap();
    taken(&requests);
    driver.cuCtxGetDevice().unwrap();
    driver.cuCtxSynchronize().unwrap();
    driver.cuEventElapsedTime().unwrap();
    assert_eq!(
        taken(&requests),
        [
            // Asked at 13000 these would return cuCtxGetDevice_v2 and cuCtxSynchronize_v2,
            // which take a context argument the declared signatures lack.
            request("cuCtxGetDevice", 2000),
            request("cuCtxSynchronize", 2000),
            // cuda.h binds cuEventElapsedTime to cuEventElapsedTime_v2.
            request("cuEventElapsedTime", 12080),
        ]
    );
}

#[test]
fn found_and_missing_entry_points_are_each_looked_up_once() {
    let (driver, requests) = fake_driver(reports_version::<13000>, &["cuInit"], &[]);
    let driver = driver.unwrap();
    taken(&requests);
    for _ in 0..3 {
        driver.cuInit().unwrap();
        driver.cuMemHostRegister().unwrap();
        assert_eq!(
            driver.cuMemAllocAsync().unwrap_err(),
            missing("cuMemAllocAsync")
        );
    }
    assert_eq!(
        taken(&requests),
        [
            request("cuInit", 2000),
            request("cuMemHostRegister", 6050),
            request("cuMemAllocAsync", 11020),
        ]
    );
}

#[test]
fn older_driver_lacks_only_the_newer_abis_and_is_not_asked_for_them() {
    let (driver, requests) = fake_driver(
        reports_version::<12040>,
        &["cuEventElapsedTime", "cuMemAllocAsync"],
        &[],
    );
    let driver = driver.unwrap();
    taken(&requests);
    assert_eq!(
        driver.cuEventElapsedTime().unwrap_err(),
        missing("cuEventElapsedTime")
    );
    assert_eq!(taken(&requests), []);
    driver.cuMemAllocAsync().unwrap();
    driver.cuMemHostRegister().unwrap();
    assert_eq!(
        taken(&requests),
        [
            request("cuMemAllocAsync", 11020),
            request("cuMemHostRegister", 6050)
        ]
    );
}

#[test]
fn missing_entry_points_lists_exactly_the_abis_newer_than_the_driver_or_absent() {
    let all_but_two: Vec<&'static str> = ENTRY_POINTS
        .iter()
        .map(|entry| entry.name)
        .filter(|&name| name != "cuMemPoolTrimTo" && name != "cuLaunchKernel")
        .collect();
    let (driver, requests) = fake_driver(reports_version::<12040>, &all_but_two, &[]);
    let driver = driver.unwrap();
    taken(&requests);
    assert_eq!(
        driver.missing_entry_points(),
        Ok(vec![
            "cuCtxCreate",
            "cuMemPoolTrimTo",
            "cuEventElapsedTime",
            "cuLaunchKernel"
        ])
    );
    // cuDriverGetVersion was cached at load, and cuCtxCreate (bound at 12.5) and
    // cuEventElapsedTime are newer than 12.4, so never asked for.
    assert_eq!(taken(&requests).len(), ENTRY_POINTS.len() - 3);
    assert_eq!(driver.missing_entry_points().map(|m| m.len()), Ok(4));
    assert_eq!(taken(&requests), []);

    let (driver, _) = fake_driver(reports_version::<13000>, &[], &["cuInit"]);
    assert!(matches!(
        driver.unwrap().missing_entry_points(),
        Err(Error::Driver(e)) if e.call == "cuGetProcAddress"
    ));
}

#[test]
fn a_failed_lookup_is_reported_and_asked_again_next_time() {
    let (driver, requests) = fake_driver(reports_version::<13000>, &[], &["cuStreamCreate"]);
    let driver = driver.unwrap();
    taken(&requests);
    for _ in 0..2 {
        let error = driver.cuStreamCreate().unwrap_err();
        assert!(
            matches!(&error, Error::Driver(e) if e.call == "cuGetProcAddress"
                && e.name == "CUDA_ERROR_INVALID_VALUE"),
            "{error:?}"
        );
    }
    assert_eq!(
        taken(&requests),
        [
            request("cuStreamCreate", 2000),
            request("cuStreamCreate", 2000)
        ]
    );
}

#[test]
fn driver_version_failure_is_a_typed_error() {
    let (driver, _) = fake_driver(version_fails, &[], &[]);
    assert_eq!(
        driver.unwrap_err(),
        Error::Driver(driver_error(
            "cuDriverGetVersion",
            sys::CUDA_ERROR_NOT_INITIALIZED
        ))
    );
    let (driver, _) = fake_driver(reports_version::<13000>, &[], &["cuDriverGetVersion"]);
    assert!(matches!(driver.unwrap_err(), Error::Driver(e) if e.call == "cuGetProcAddress"));
}

#[test]
fn entry_point_table_is_consistent() {
    let mut names = HashSet::new();
    for entry in ENTRY_POINTS {
        assert_eq!(entry.symbol.to_str(), Ok(entry.name));
        assert!(names.insert(entry.name), "{} listed twice", entry.name);
        let suffix = entry.name.rsplit_once("_v").map(|(_, suffix)| suffix);
        assert!(
            !suffix.is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())),
            "{} is not a base name",
            entry.name
        );
        assert!(
            (2000..=sys::CUDA_VERSION as c_int).contains(&entry.abi_version),
            "{}",
            entry.name
        );
    }
    assert_eq!(
        ENTRY_POINTS[Slot::cuMemHostRegister as usize].name,
        "cuMemHostRegister"
    );
}

thread_local! {
    /// What the fake cuGetProcAddress functions were asked, on this test's thread.
    static LOOKUPS: RefCell<Vec<(String, c_int, sys::cuuint64_t)>> = const { RefCell::new(Vec::new()) };
}

/// The fake driver's answer for `symbol`: (result, address, status).
fn fake_lookup(
    symbol: *const c_char,
    abi_version: c_int,
    flags: sys::cuuint64_t,
) -> (
    sys::CUresult,
    *mut c_void,
    sys::CUdriverProcAddressQueryResult,
) {
    // SAFETY: the resolver passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    LOOKUPS.with_borrow_mut(|lookups| {
        lookups.push((
            String::from_utf8_lossy(name).into_owned(),
            abi_version,
            flags,
        ))
    });
    match name {
        b"cuInit" => (
            sys::CUDA_SUCCESS,
            NEVER_CALLED,
            sys::CU_GET_PROC_ADDRESS_SUCCESS,
        ),
        b"cuTooNew" => (
            sys::CUDA_SUCCESS,
            ptr::null_mut(),
            sys::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
        ),
        b"cuBroken" => (
            sys::CUDA_ERROR_INVALID_VALUE,
            ptr::null_mut(),
            sys::CU_GET_PROC_ADDRESS_SUCCESS,
        ),
        _ => (
            sys::CUDA_SUCCESS,
            ptr::null_mut(),
            sys::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
        ),
    }
}

/// cuGetProcAddress_v2 of the fake driver.
unsafe extern "C" fn fake_get_proc_address_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    abi_version: c_int,
    flags: sys::cuuint64_t,
    status: *mut sys::CUdriverProcAddressQueryResult,
) -> sys::CUresult {
    let (code, address, found) = fake_lookup(symbol, abi_version, flags);
    // SAFETY: the resolver passes valid out-parameters.
    unsafe {
        *pfn = address;
        *status = found;
    }
    code
}

/// cuGetProcAddress of the fake pre-12.0 driver: no status, CUDA_ERROR_NOT_FOUND when absent.
unsafe extern "C" fn fake_get_proc_address_v1(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    abi_version: c_int,
    flags: sys::cuuint64_t,
) -> sys::CUresult {
    let (code, address, found) = fake_lookup(symbol, abi_version, flags);
    // SAFETY: the resolver passes a valid out-parameter.
    unsafe { *pfn = address };
    if found == sys::CU_GET_PROC_ADDRESS_SUCCESS {
        code
    } else {
        sys::CUDA_ERROR_NOT_FOUND
    }
}

#[test]
fn cu_get_proc_address_answers_become_found_missing_or_errors() {
    for get_proc_address in [
        GetProcAddress::WithStatus(fake_get_proc_address_v2),
        GetProcAddress::WithoutStatus(fake_get_proc_address_v1),
    ] {
        LOOKUPS.with_borrow_mut(Vec::clear);
        assert_eq!(
            get_proc_address.resolve(c"cuInit", 2000),
            Ok(NonNull::new(NEVER_CALLED))
        );
        assert_eq!(get_proc_address.resolve(c"cuTooNew", 12080), Ok(None));
        assert_eq!(get_proc_address.resolve(c"cuAbsent", 11020), Ok(None));
        assert_eq!(
            get_proc_address.resolve(c"cuBroken", 4000),
            Err(Error::Driver(driver_error(
                "cuGetProcAddress",
                sys::CUDA_ERROR_INVALID_VALUE
            )))
        );
        let legacy = sys::CU_GET_PROC_ADDRESS_LEGACY_STREAM as sys::cuuint64_t;
        assert_eq!(
            LOOKUPS.take(),
            [
                ("cuInit".to_string(), 2000, legacy),
                ("cuTooNew".to_string(), 12080, legacy),
                ("cuAbsent".to_string(), 11020, legacy),
                ("cuBroken".to_string(), 4000, legacy),
            ]
        );
    }
}

#[test]
fn a_missing_library_is_a_typed_error_naming_what_was_tried() {
    let names = [
        "libgpu-runtime-test-absent.so.1",
        "libgpu-runtime-test-absent.so",
    ];
    // SAFETY: neither file exists.
    let error = unsafe { Driver::load_from(&names) }.unwrap_err();
    let Error::DriverLibraryNotFound {
        backend,
        tried,
        message,
    } = &error
    else {
        panic!("unexpected error {error:?}");
    };
    assert_eq!(*backend, "cuda");
    assert_eq!(tried, &names);
    assert!(
        message.contains(names[0]) && message.contains(names[1]),
        "{message}"
    );
    assert!(error.to_string().contains("install the driver"), "{error}");

    // SAFETY: no file is opened.
    let error = unsafe { Driver::load_from(&[]) }.unwrap_err();
    assert!(
        matches!(&error, Error::DriverLibraryNotFound { tried, .. } if tried.is_empty()),
        "{error:?}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_library_without_cu_get_proc_address_is_a_typed_error() {
    // SAFETY: the C library is loaded in every process already, and it has no cuGetProcAddress.
    let error = unsafe { Driver::load_from(&["libc.so.6"]) }.unwrap_err();
    assert_eq!(error, missing("cuGetProcAddress"));
}
