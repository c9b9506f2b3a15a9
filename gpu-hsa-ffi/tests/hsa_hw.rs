//! The HSA runtime on a hardware machine, for `cargo xtask test-hw`: says whether the backend
//! ran or why it was skipped. Only initialisation and the GPU agents exist so far, so on an AMD
//! machine it initialises, counts the agents and still reports "skipped" (the HSA backend is not
//! written); elsewhere it reports the missing library or device. Each line starts on a line of
//! its own, where the runner looks for it (the harness has printed "test NAME ... ").

use gpu_core::Error;
use gpu_hsa_ffi::{HsaRuntime, reports_no_device};

#[test]
fn hsa_reports_what_it_can_run_here() {
    match HsaRuntime::new() {
        Ok(runtime) => eprintln!(
            "\nbackend hsa: skipped: the HSA backend is not written (hsa_init succeeded, {} GPU \
             agents)",
            runtime.gpu_agents().len()
        ),
        Err(error @ Error::DriverLibraryNotFound { .. }) => {
            eprintln!("\nbackend hsa: skipped: no HSA library ({error})");
        }
        Err(error) if reports_no_device(&error) => {
            eprintln!("\nbackend hsa: skipped: no device ({error})");
        }
        Err(other) => panic!("initialising HSA failed: {other}"),
    }
}
