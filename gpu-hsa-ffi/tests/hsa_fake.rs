//! The HSA backend run for real against a CPU stand-in for libhsa-runtime64
//! (tests/fake_hsa/fake_hsa.c, compiled here with the system C compiler): its agents (a CPU and
//! two GPUs), pools,
//! signals, queues with a packet-processor thread, DMA copies and the standard kernels follow
//! HSA's semantics on the CPU. This executes every HSA call of the backend, the ring writing,
//! the signal chain and the events, peer copies between the two GPUs (and peer access refused
//! once the stand-in unlinks them), then the conformance suite and a one-second stress run of
//! eight threads, and checks that nothing the backend created is left alive. It proves the backend's logic against the HSA
//! semantics as the stand-in models them, not against ROCm (see the README).
//!
//! Without a C compiler the test says so and passes, unless `GPU_REQUIRE_HSA=1` (CI).
#![deny(clippy::undocumented_unsafe_blocks)]

mod common;

use core::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

use std::sync::Arc;
use std::time::Duration;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_core::{DeviceId, Error};
use gpu_hsa_ffi::{Hsa, HsaBackend, sys};
use gpu_rt::runtime::{LiveObjects, RecordingBackend, Runtime, RuntimeConfig};
use gpu_testkit::conformance::run_and_print;
use gpu_testkit::stress::{self, StressConfig};

unsafe extern "C" {
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
}

/// glibc's RTLD_NOW | RTLD_NOLOAD: the handle of a library already loaded.
const LOADED_NOW: c_int = 0x2 | 0x4;

/// Compiles the stand-in into the test's scratch folder; `None` (with a note) without a C
/// compiler where that is allowed.
fn build_fake() -> Option<PathBuf> {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake_hsa/fake_hsa.c");
    let library = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libfake_hsa.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O1", "-pthread", "-o"])
        .arg(&library)
        .arg(&source)
        .status();
    match built {
        Ok(status) if status.success() => Some(library),
        other => {
            assert!(
                std::env::var_os("GPU_REQUIRE_HSA").is_none_or(|v| v != "1"),
                "GPU_REQUIRE_HSA=1 but the HSA stand-in did not build with {compiler}: {other:?}"
            );
            eprintln!("skipped: {compiler} did not build the HSA stand-in ({other:?})");
            None
        }
    }
}

/// The address of `name`, a function the loaded stand-in exports for the test.
fn fake_function(library: &Path, name: &core::ffi::CStr) -> *mut c_void {
    let path = std::ffi::CString::new(library.to_str().unwrap()).unwrap();
    // SAFETY: NOLOAD only finds a library already loaded; both names are NUL-terminated.
    let address = unsafe {
        let handle = dlopen(path.as_ptr(), LOADED_NOW);
        assert!(!handle.is_null(), "the stand-in is loaded");
        dlsym(handle, name.as_ptr())
    };
    assert!(!address.is_null(), "the stand-in exports {name:?}");
    address
}

/// Signals, queues, allocations, locks, executables and readers the stand-in has alive.
fn live_objects(library: &Path) -> i64 {
    let live = fake_function(library, c"fake_hsa_live");
    // SAFETY: `fake_hsa_live` takes nothing and returns a long.
    unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> i64>(live)() }
}

/// Links or unlinks the stand-in's two GPUs (whether each may reach the other's device pool).
fn set_peer_link(library: &Path, linked: bool) {
    let set = fake_function(library, c"fake_hsa_set_peer_link");
    // SAFETY: `fake_hsa_set_peer_link` takes an int and returns nothing.
    unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int)>(set)(linked.into()) }
}

#[test]
fn the_backend_runs_the_round_trip_conformance_and_stress_on_the_stand_in_and_leaks_nothing() {
    let Some(library) = build_fake() else { return };
    // SAFETY: the stand-in exports the bound functions with the bindings' signatures.
    let hsa: &'static Hsa = Box::leak(Box::new(
        unsafe { Hsa::load_from(&[library.to_str().unwrap()]) }.unwrap(),
    ));
    assert_eq!(hsa.missing_entry_points(), Vec::<&str>::new());

    let backend = HsaBackend::with_library(hsa).unwrap();
    assert_eq!(backend.device_count(), 2);
    let info = backend.device_info(gpu_core::DeviceId(0)).unwrap();
    assert_eq!(info.name, "fake-gfx90a");
    assert_eq!(info.total_memory, 1 << 30);
    assert_eq!(info.workgroup.max_per_block_opt_in, 65536);
    common::round_trip(&backend);
    common::peer_round_trip(&backend);
    drop(backend);
    assert_eq!(
        live_objects(&library),
        0,
        "the round trip left objects alive"
    );

    // Without the link between the GPUs: no peer access either way, enabling it and peer
    // copies are refused, and device memory is still allocated (opened to no peer).
    set_peer_link(&library, false);
    let unlinked = HsaBackend::with_library(hsa).unwrap();
    let (d0, d1) = (DeviceId(0), DeviceId(1));
    let refused = |result: gpu_core::Result<()>| match result {
        Err(Error::Driver(e)) => e.code == i64::from(sys::HSA_STATUS_ERROR_INVALID_AGENT),
        _ => false,
    };
    for (device, peer) in [(d0, d1), (d1, d0)] {
        assert_eq!(unlinked.peer_access_possible(device, peer), Ok(false));
        assert!(refused(unlinked.enable_peer_access(device, peer)));
        let (memory, other) = (
            unlinked.allocate(device, MemoryKind::Device, 4096),
            unlinked.allocate(peer, MemoryKind::Device, 4096),
        );
        let (memory, other) = (memory.unwrap().unwrap(), other.unwrap().unwrap());
        let stream = unlinked.stream_create(device).unwrap();
        // SAFETY: refused before anything is enqueued.
        assert!(refused(unsafe {
            unlinked.copy_peer(stream, other, peer, memory, device, 4096)
        }));
        unlinked.stream_destroy(stream).unwrap();
        unlinked
            .free(device, MemoryKind::Device, memory, None)
            .unwrap();
        unlinked
            .free(peer, MemoryKind::Device, other, None)
            .unwrap();
    }
    drop(unlinked);
    set_peer_link(&library, true);
    assert_eq!(
        live_objects(&library),
        0,
        "the unlinked backend left objects alive"
    );

    let failed = run_and_print("hsa (CPU stand-in)", &|| HsaBackend::with_library(hsa));
    assert_eq!(
        failed, 0,
        "{failed} conformance case(s) failed on the stand-in"
    );
    assert_eq!(
        live_objects(&library),
        0,
        "the conformance suite left objects alive"
    );

    // Eight threads on one runtime over both devices for a second: every result verified,
    // nothing left in the backend, no defect in the stream/event trace, nothing in the stand-in.
    let recording = Arc::new(RecordingBackend::new(
        HsaBackend::with_library(hsa).unwrap(),
    ));
    let runtime = Runtime::shared(Arc::clone(&recording), RuntimeConfig::default()).unwrap();
    let config = StressConfig {
        threads: 8,
        duration: Duration::from_secs(1),
        seed: 11,
        largest: 256 << 10,
        sample_every: None,
        fault_every: None,
        trims: true,
    };
    let report = stress::run(std::slice::from_ref(&runtime), &*recording, &config).unwrap();
    eprintln!("stress on the stand-in: {:?}", report.counts);
    assert_eq!(report.failures, Vec::<String>::new(), "{:?}", report.counts);
    assert!(report.counts.verified > 0 && report.counts.launches > 0 && report.counts.copies > 0);
    runtime.shutdown().unwrap();
    assert_eq!(recording.live(), LiveObjects::default());
    assert_eq!(recording.defects(), vec![]);
    drop(recording);
    assert_eq!(
        live_objects(&library),
        0,
        "the stress run left objects alive"
    );

    // Every backend gave its hsa_init reference back.
    let shut_down = hsa.hsa_shut_down().unwrap();
    assert_eq!(
        // SAFETY: no arguments; the stand-in refuses when nothing is initialised.
        unsafe { shut_down() },
        sys::HSA_STATUS_ERROR_NOT_INITIALIZED
    );
}
