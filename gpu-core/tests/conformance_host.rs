//! The conformance suite on the host backend, with two simulated devices (so the two-device
//! cases run) and with one (so they are skipped, not failed), and with the device's
//! stream-ordered allocation switched off (so the allocator's fallback path is exercised).

use gpu_core::allocator::KindSupport;
use gpu_core::conformance::{CaseReport, Outcome, run_all};
use gpu_core::host::{HostBackend, HostConfig, HostDeviceConfig};

fn assert_all_passed(reports: &[CaseReport], skipped_allowed: &[&str]) {
    for report in reports {
        println!("{report}");
    }
    for report in reports {
        match &report.outcome {
            Outcome::Passed => {}
            Outcome::Skipped(_) if skipped_allowed.contains(&report.name) => {}
            other => panic!("{}: {other:?}", report.name),
        }
    }
}

#[test]
fn conformance_on_two_host_devices() {
    let open = || Ok(HostBackend::new(HostConfig::with_devices(2)));
    assert_all_passed(&run_all(&open), &[]);
}

#[test]
fn conformance_on_one_host_device_skips_the_two_device_cases() {
    let open = || Ok(HostBackend::new(HostConfig::with_devices(1)));
    let reports = run_all(&open);
    assert_all_passed(&reports, &["cross_device_order_and_data"]);
    let skipped = reports
        .iter()
        .find(|r| r.name == "cross_device_order_and_data");
    assert_eq!(
        skipped.map(|r| &r.outcome),
        Some(&Outcome::Skipped("one device".into()))
    );
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
        Ok(HostBackend::new(config))
    };
    assert_all_passed(&run_all(&open), &[]);
}
