//! The conformance suite on the host backend, with two simulated devices (so the two-device
//! cases run) and with one (so they are skipped, not failed), and with the device's
//! stream-ordered allocation switched off (so the allocator's fallback path is exercised), and
//! with two devices that cannot have peer access.

use gpu_core::allocator::KindSupport;
use gpu_rt::host::{HostBackend, HostConfig, HostDeviceConfig, HostErrorCode};
use gpu_testkit::conformance::{CaseReport, Outcome, run_all};

/// The growable-segment cases, which a 32-bit process may skip: its address space can run out
/// of the 1 GiB ranges they reserve while the tests' runtimes live at once.
const GROWABLE_CASES: [&str; 2] = ["growable_segments", "growable_segments_across_peers"];

fn assert_all_passed(reports: &[CaseReport], skipped_allowed: &[&str]) {
    for report in reports {
        println!("{report}");
    }
    let address_space_skip = |report: &CaseReport, why: &str| {
        cfg!(target_pointer_width = "32")
            && GROWABLE_CASES.contains(&report.name)
            && why.contains("no address space")
    };
    for report in reports {
        match &report.outcome {
            Outcome::Passed => {}
            Outcome::Skipped(why) if address_space_skip(report, why) => {}
            Outcome::Skipped(_) if skipped_allowed.contains(&report.name) => {}
            other => panic!("{}: {other:?}", report.name),
        }
    }
}

/// A host backend of `config` with a kernel named `fault` that fails as a GPU kernel's illegal
/// address does (so the sticky-fault case runs).
fn with_fault_kernel(config: HostConfig) -> HostBackend {
    let backend = HostBackend::new(config);
    backend.register_kernel("fault", |_, _| {
        Err(HostErrorCode::IllegalAddress.error("launch"))
    });
    backend
}

#[test]
fn conformance_on_two_host_devices() {
    let open = || Ok(with_fault_kernel(HostConfig::with_devices(2)));
    assert_all_passed(&run_all(&open), &[]);
}

/// Without a kernel that faults, the sticky-fault case is skipped, saying why.
#[test]
fn without_a_faulting_kernel_the_sticky_case_is_skipped() {
    let open = || Ok(HostBackend::new(HostConfig::with_devices(2)));
    let reports = run_all(&open);
    let sticky = "a_sticky_fault_loses_only_its_device";
    assert_all_passed(&reports, &[sticky]);
    let skipped = reports.iter().find(|r| r.name == sticky);
    assert_eq!(
        skipped.map(|r| &r.outcome),
        Some(&Outcome::Skipped("no kernel named fault".into()))
    );
}

#[test]
fn conformance_on_one_host_device_skips_the_two_device_cases() {
    let open = || Ok(HostBackend::new(HostConfig::with_devices(1)));
    let reports = run_all(&open);
    let two_device_cases = [
        "cross_device_order_and_data",
        "peer_copies_of_every_memory_form",
        "growable_segments_across_peers",
        "a_sticky_fault_loses_only_its_device",
    ];
    assert_all_passed(&reports, &two_device_cases);
    for name in two_device_cases {
        let skipped = reports.iter().find(|r| r.name == name);
        assert_eq!(
            skipped.map(|r| &r.outcome),
            Some(&Outcome::Skipped("one device".into())),
            "{name}"
        );
    }
}

/// Two devices with no link between them (a PCIe box without peer access): every copy between
/// them is staged, and still correct.
#[test]
fn conformance_on_two_host_devices_without_peer_access() {
    let open = || {
        let mut config = HostConfig::with_devices(2);
        config.devices[1].peer_link = false;
        Ok(with_fault_kernel(config))
    };
    assert_all_passed(&run_all(&open), &[]);
}

#[test]
fn conformance_without_stream_ordered_allocation() {
    let open = || {
        let mut config = HostConfig::with_devices(2);
        for device in &mut config.devices {
            device.allocator = gpu_core::allocator::AllocatorCapabilities {
                device: KindSupport::SYNCHRONOUS,
                managed: KindSupport::NONE,
                ..HostDeviceConfig::ALL_CAPABILITIES
            };
        }
        Ok(with_fault_kernel(config))
    };
    assert_all_passed(&run_all(&open), &[]);
}
