//! What a stress run asks of its backend beyond the `Backend` trait ([`Probe`]): live driver
//! objects and injected faults, for the host backend and any recording backend.

use gpu_core::backend::Backend;
use gpu_core::error::Error;
use gpu_rt::host::{HostBackend, HostErrorCode};
use gpu_rt::runtime::{LiveObjects, RecordingBackend};

/// What a stress run asks of its backend beyond the [`Backend`] trait: each method has a
/// default for backends that cannot do it.
pub trait Probe: Sync {
    /// Objects the driver holds for its callers now, if the backend counts them.
    fn live(&self) -> Option<LiveObjects> {
        None
    }

    /// Makes the `n`th driver call from now fail; `false` if the backend cannot inject faults.
    fn arm_fault(&self, _n: u64) -> bool {
        false
    }

    /// Disarms faults that have not fired.
    fn disarm_faults(&self) {}

    /// Faults injected so far.
    fn faults_injected(&self) -> u64 {
        0
    }

    /// Whether `error` is an injected fault.
    fn is_injected(&self, _error: &Error) -> bool {
        false
    }
}

/// A probe that knows nothing: no live counts, no faults.
pub struct NoProbe;

impl Probe for NoProbe {}

impl Probe for HostBackend {
    fn live(&self) -> Option<LiveObjects> {
        let stats = self.stats();
        Some(LiveObjects {
            streams: stats.streams,
            events: stats.events,
            allocations: stats.allocations,
            registrations: stats.registered_ranges,
        })
    }

    fn arm_fault(&self, n: u64) -> bool {
        self.fail_nth_call(n);
        true
    }

    fn disarm_faults(&self) {
        self.clear_faults();
    }

    fn faults_injected(&self) -> u64 {
        self.stats().faults_injected
    }

    fn is_injected(&self, error: &Error) -> bool {
        HostErrorCode::of(error) == Some(HostErrorCode::InjectedFault)
    }
}

impl<B: Backend> Probe for RecordingBackend<B> {
    fn live(&self) -> Option<LiveObjects> {
        Some(RecordingBackend::live(self))
    }
}
