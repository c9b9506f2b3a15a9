//! The HSA backend on a hardware machine, for `cargo xtask test-hw`: on an AMD GPU, fills with
//! unaligned edges and a kernel checked through copies, peer copies where there are two GPUs
//! that reach each other, then the backend-generic conformance suite; elsewhere each test reports why it skipped (no library, or no device: hsa_init's
//! OUT_OF_RESOURCES without /dev/kfd). Each line starts on a line of its own, where the runner
//! looks for it (the harness has printed "test NAME ... ").
#![deny(clippy::undocumented_unsafe_blocks)]

mod common;

use gpu_core::Error;
use gpu_hsa_ffi::{HsaBackend, reports_no_device};
use gpu_testkit::conformance::run_and_print;

/// The backend, or `None` after printing why the test is skipped.
fn open() -> Option<HsaBackend> {
    match HsaBackend::new() {
        Ok(backend) => Some(backend),
        Err(error @ Error::DriverLibraryNotFound { .. }) => {
            eprintln!("\nbackend hsa: skipped: no HSA library ({error})");
            None
        }
        Err(error) if reports_no_device(&error) => {
            eprintln!("\nbackend hsa: skipped: no device ({error})");
            None
        }
        Err(other) => panic!("opening the HSA backend failed: {other}"),
    }
}

#[test]
fn fills_copies_and_a_kernel_round_trip_through_device_memory() {
    let Some(backend) = open() else { return };
    eprintln!("{backend:?}");
    common::round_trip(&backend);
}

#[test]
fn peer_copies_between_two_devices_round_trip() {
    let Some(backend) = open() else { return };
    common::peer_round_trip(&backend);
}

#[test]
fn conformance_suite_passes_on_hardware() {
    let Some(held) = open() else { return };
    let failed = run_and_print("hsa", &HsaBackend::new);
    assert_eq!(failed, 0, "{failed} case(s) failed");
    drop(held);
}
