//! What every case stands on: a fresh backend wrapped for recording with a runtime over it,
//! the verdicts short of passing, `ensure!`, and the check that nothing was left behind.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;

use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;
use gpu_core::token::UnwaitedKind;
use gpu_rt::runtime::{LiveObjects, RecordingBackend, Runtime, RuntimeConfig};

/// A case's verdict short of passing: skipped or failed, with the reason.
pub(super) enum Stop {
    Skip(String),
    Fail(String),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Fail(format!("unexpected error: {e}"))
    }
}

pub(super) type CaseResult = core::result::Result<(), Stop>;

macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err(Stop::Fail(format!($($message)+)));
        }
    };
}
pub(super) use ensure;

/// Opens a backend for one case.
pub type Open<'a, B> = &'a dyn Fn() -> Result<B>;

/// A backend wrapped for checking, and a runtime over it.
pub(super) struct Harness<B: Backend> {
    pub(super) backend: Arc<RecordingBackend<B>>,
    pub(super) runtime: Runtime<RecordingBackend<B>>,
}

impl<B: Backend> Harness<B> {
    pub(super) fn open(open: Open<'_, B>) -> Result<Self> {
        let config = RuntimeConfig {
            staging_chunk: 64 << 10,
            ..RuntimeConfig::default()
        };
        Self::open_with(open, config)
    }

    pub(super) fn open_with(open: Open<'_, B>, config: RuntimeConfig) -> Result<Self> {
        let backend = Arc::new(RecordingBackend::new(open()?));
        let runtime = Runtime::shared(Arc::clone(&backend), config)?;
        Ok(Self { backend, runtime })
    }

    /// Shuts the runtime down and checks nothing was left behind.
    pub(super) fn close(self) -> CaseResult {
        self.close_allowing(&[])
    }

    /// As [`Harness::close`], where tokens that ended unwaited in one of the `allowed` ways
    /// (a failed operation's, discarded with its work) are expected.
    pub(super) fn close_allowing(self, allowed: &[UnwaitedKind]) -> CaseResult {
        let Harness { backend, runtime } = self;
        let report = runtime.shutdown()?;
        ensure!(
            report
                .program
                .unwaited
                .iter()
                .all(|token| allowed.contains(&token.kind)),
            "tokens ended unwaited: {:?}",
            report.program.unwaited
        );
        check_clean(&backend)
    }
}

/// No object left in the backend, and no defect in the recorded trace.
pub(super) fn check_clean<B: Backend>(backend: &RecordingBackend<B>) -> CaseResult {
    let live = backend.live();
    ensure!(
        live == LiveObjects::default(),
        "left behind at shutdown: {live:?}"
    );
    let defects = backend.defects();
    ensure!(
        defects.is_empty(),
        "trace defects at the backend boundary: {defects:?}"
    );
    Ok(())
}

pub(super) fn two_devices<B: Backend>(
    runtime: &Runtime<B>,
) -> core::result::Result<(DeviceId, DeviceId), Stop> {
    if runtime.device_count() < 2 {
        return Err(Stop::Skip("one device".to_string()));
    }
    Ok((DeviceId(0), DeviceId(1)))
}

/// Fills `span` of `buffer` on `device`, downloads it and checks every byte.
pub(super) fn fill_and_verify<B: Backend>(
    runtime: &Runtime<B>,
    device: DeviceId,
    span: gpu_rt::runtime::Span<'_>,
    value: u8,
) -> CaseResult {
    let filled = runtime.fill(device, span, value, &mut vec![])?;
    let mut back = vec![!value; span.len()];
    runtime.download(device, &mut back, span, &mut vec![filled])?;
    let wrong = back.iter().position(|&b| b != value);
    ensure!(
        wrong.is_none(),
        "byte {wrong:?} of {} not filled with {value}",
        span.len()
    );
    Ok(())
}
