//! The stress driver on the host backend: 16 threads on one runtime over two devices, with and
//! without injected faults; every result verified, nothing left behind at shutdown.

use std::sync::Arc;
use std::time::Duration;

use gpu_rt::host::{HostBackend, HostConfig};
use gpu_rt::runtime::{LiveObjects, RecordingBackend, Runtime, RuntimeConfig};
use gpu_testkit::stress::{self, StressConfig, StressReport};

fn config(seconds: f64, faults: Option<u64>) -> StressConfig {
    StressConfig {
        threads: 16,
        duration: Duration::from_secs_f64(seconds),
        seed: 7,
        largest: 256 << 10,
        sample_every: Some(Duration::from_millis(50)),
        fault_every: faults,
        trims: true,
    }
}

fn assert_clean_run(report: &StressReport) {
    assert_eq!(report.failures, Vec::<String>::new(), "{:?}", report.counts);
    assert_eq!(report.failure_count, 0);
    let c = &report.counts;
    for (name, count) in [
        ("allocs", c.allocs),
        ("frees", c.frees),
        ("fills", c.fills),
        ("copies", c.copies),
        ("peer copies", c.peer_copies),
        ("uploads", c.uploads),
        ("launches", c.launches),
        ("forks", c.forks),
        ("joins", c.joins),
        ("waits", c.waits),
        ("locks", c.locks),
        ("nested locks", c.nested_locks),
        ("refused locks", c.refused_locks),
        ("unlocks", c.unlocks),
        ("verified", c.verified),
    ] {
        assert!(count > 0, "no {name} in {c:?}");
    }
    assert!(report.per_thread.iter().all(|&ops| ops > 0), "{report:?}");
}

#[test]
fn sixteen_threads_on_two_host_devices_verify_everything_and_leave_nothing() {
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(2)));
    let runtime = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let report = stress::run(
        std::slice::from_ref(&runtime),
        &*backend,
        &config(1.5, None),
    )
    .unwrap();
    println!("{:?}", report.counts);
    assert_clean_run(&report);
    assert_eq!(report.counts.faulted, 0);
    let shutdown = runtime.shutdown().unwrap();
    assert_eq!(shutdown.program.unwaited_count(), 0, "{shutdown:?}");
    assert_eq!(stress::Probe::live(&*backend), Some(LiveObjects::default()));
}

#[test]
fn injected_faults_under_load_are_typed_errors_and_leak_nothing() {
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(2)));
    let runtime = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let report = stress::run(
        std::slice::from_ref(&runtime),
        &*backend,
        &config(2.0, Some(200)),
    )
    .unwrap();
    println!(
        "{:?} faults injected {}",
        report.counts, report.faults_injected
    );
    assert_clean_run(&report);
    assert!(report.faults_injected >= 10, "{report:?}");
    assert!(report.counts.faulted > 0);
    runtime.shutdown().unwrap();
    assert_eq!(stress::Probe::live(&*backend), Some(LiveObjects::default()));
}

#[test]
fn the_stream_and_event_calls_of_sixteen_threads_form_a_trace_without_defects() {
    let backend = Arc::new(RecordingBackend::new(HostBackend::new(
        HostConfig::with_devices(2),
    )));
    let runtime = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let report = stress::run(
        std::slice::from_ref(&runtime),
        &*backend,
        &config(0.5, None),
    )
    .unwrap();
    assert_clean_run(&report);
    runtime.shutdown().unwrap();
    assert_eq!(backend.live(), LiveObjects::default());
    assert_eq!(backend.defects(), vec![]);
}

#[test]
fn separate_runtimes_on_one_backend_run_the_same_mix() {
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(2)));
    let runtimes: Vec<_> = (0..4)
        .map(|_| Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap())
        .collect();
    let config = StressConfig {
        threads: 4,
        ..config(0.5, None)
    };
    let report = stress::run(&runtimes, &*backend, &config).unwrap();
    assert_eq!(report.failures, Vec::<String>::new());
    assert_eq!(report.per_thread.len(), 4);
    drop(runtimes);
    assert_eq!(stress::Probe::live(&*backend), Some(LiveObjects::default()));
}
