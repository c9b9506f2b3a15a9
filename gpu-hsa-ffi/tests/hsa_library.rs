//! The real HSA runtime library without an AMD GPU (no /dev/kfd): it loads, every bound
//! function resolves, initialisation is a typed error, and calls before initialisation fail
//! with HSA's own status, never a crash.
//!
//! Where the library is not installed the tests say so and pass, unless `GPU_REQUIRE_HSA=1`
//! (CI installs ROCm's runtime from Debian and sets it), which makes a missing library a failure.

use core::ffi::{CStr, c_void};
use core::ptr;

use gpu_core::{DriverError, Error};
use gpu_hsa_ffi::{ENTRY_POINTS, Hsa, HsaBackend, HsaRuntime, reports_no_device, status_name, sys};

/// The loaded library, or `None` (with a note) where it is absent and not required.
fn library() -> Option<&'static Hsa> {
    match Hsa::global() {
        Ok(hsa) => Some(hsa),
        Err(error @ Error::DriverLibraryNotFound { .. }) => {
            assert!(
                std::env::var_os("GPU_REQUIRE_HSA").is_none_or(|v| v != "1"),
                "GPU_REQUIRE_HSA=1 but the HSA library did not load: {error}"
            );
            eprintln!("skipped: {error}");
            None
        }
        Err(other) => panic!("unexpected loader error: {other}"),
    }
}

/// Whether this machine has no AMD GPU driver interface.
fn no_kfd() -> bool {
    !std::path::Path::new("/dev/kfd").exists()
}

#[test]
fn the_library_loads_and_every_bound_function_resolves() {
    let Some(hsa) = library() else { return };
    assert_eq!(hsa.missing_entry_points(), Vec::<&str>::new());
    assert!(
        ENTRY_POINTS.len() >= 34,
        "{} entry points",
        ENTRY_POINTS.len()
    );
    let status_string = hsa.hsa_status_string().unwrap();
    let mut text = ptr::null();
    // SAFETY: `text` is valid for writes; works before hsa_init.
    let code = unsafe { status_string(sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES, &mut text) };
    if code == sys::HSA_STATUS_SUCCESS {
        // SAFETY: HSA wrote a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        assert!(!text.is_empty());
    }
}

#[test]
fn without_kfd_initialisation_is_a_typed_no_device_error() {
    let Some(hsa) = library() else { return };
    if !no_kfd() {
        eprintln!("skipped: /dev/kfd exists");
        return;
    }
    let no_device = Error::Driver(DriverError {
        backend: "hsa",
        call: "hsa_init",
        name: "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
        code: 0x1008,
    });
    for _ in 0..2 {
        let error = HsaRuntime::with_library(hsa).unwrap_err();
        assert_eq!(error, no_device);
        assert!(reports_no_device(&error));
        // The backend opens through the runtime: the same error, and nothing left initialised
        // (the next attempt fails the same way instead of finding a runtime).
        let error = HsaBackend::with_library(hsa).unwrap_err();
        assert_eq!(error, no_device);
        assert!(reports_no_device(&error));
    }
}

#[test]
fn without_kfd_every_call_before_initialisation_fails_with_an_hsa_status() {
    let Some(hsa) = library() else { return };
    if !no_kfd() {
        eprintln!("skipped: /dev/kfd exists");
        return;
    }
    unsafe extern "C" fn never(_: sys::hsa_agent_t, _: *mut c_void) -> sys::hsa_status_t {
        panic!("no agent exists before hsa_init")
    }
    let mut word: u64 = 0;
    let host = (&mut word as *mut u64).cast::<c_void>();
    let mut agent_ptr = ptr::null_mut();
    let mut signal = sys::hsa_signal_t::default();
    let mut major: u16 = 0;
    let mut info = sys::hsa_amd_pointer_info_t {
        size: size_of::<sys::hsa_amd_pointer_info_t>() as u32,
        ..Default::default()
    };
    // SAFETY: every pointer argument is valid for what the function reads or writes; the
    // runtime refuses before initialisation and touches nothing.
    let codes: Vec<(&str, sys::hsa_status_t)> = unsafe {
        vec![
            ("hsa_shut_down", hsa.hsa_shut_down().unwrap()()),
            (
                "hsa_system_get_info",
                hsa.hsa_system_get_info().unwrap()(
                    sys::HSA_SYSTEM_INFO_VERSION_MAJOR,
                    (&mut major as *mut u16).cast(),
                ),
            ),
            (
                "hsa_iterate_agents",
                hsa.hsa_iterate_agents().unwrap()(Some(never), ptr::null_mut()),
            ),
            (
                "hsa_signal_create",
                hsa.hsa_signal_create().unwrap()(1, 0, ptr::null(), &mut signal),
            ),
            (
                "hsa_amd_memory_lock",
                hsa.hsa_amd_memory_lock().unwrap()(host, 8, ptr::null_mut(), 0, &mut agent_ptr),
            ),
            (
                "hsa_amd_memory_unlock",
                hsa.hsa_amd_memory_unlock().unwrap()(host),
            ),
            (
                "hsa_amd_pointer_info",
                hsa.hsa_amd_pointer_info().unwrap()(
                    host,
                    &mut info,
                    None,
                    ptr::null_mut(),
                    ptr::null_mut(),
                ),
            ),
        ]
    };
    for (call, code) in codes {
        assert_eq!(
            status_name(code),
            "HSA_STATUS_ERROR_NOT_INITIALIZED",
            "{call} returned {code:#x}"
        );
    }
    assert_eq!(signal.handle, 0, "no signal was created");
    assert!(agent_ptr.is_null(), "nothing was locked");
}
