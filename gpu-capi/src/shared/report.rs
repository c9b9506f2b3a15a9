//! What shutting a session down found: the [`SessionReport`] the shutdown returns, and the
//! [`TraceExport`] of a recorded trace written then (with the checker's verdict on it).

use std::path::PathBuf;

use gpu_runtime::runtime::ShutdownReport;
use gpu_runtime::token::{TraceOp, parse_trace, write_trace};

use super::status::CapiError;

/// What shutting the process-wide runtime down found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionReport {
    /// The backend the runtime ran on (`"cuda"`, `"host"`).
    pub backend: &'static str,
    /// Objects callers still held handles to (buffers, registrations, kernels), released now.
    pub released_objects: usize,
    /// The runtime's own report: unwaited tokens, bytes trimmed, ranges unpinned (all zero when
    /// the runtime's shutdown failed).
    pub shutdown: ShutdownReport,
    /// The trace written, when `GPU_RUNTIME_TRACE` was set at open.
    pub trace: Option<TraceExport>,
    /// The first failure: the runtime's shutdown (work that failed and was never waited for,
    /// say) or writing the trace. The runtime is closed all the same.
    pub failure: Option<CapiError>,
}

/// A recorded trace written at shutdown, and the checker's verdict on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceExport {
    /// Where it was written.
    pub path: PathBuf,
    /// Stream/event calls in it.
    pub calls: usize,
    /// The checker's defects, each described with its line in the file.
    pub defects: Vec<String>,
}

impl TraceExport {
    /// Writes `ops` to `path` in the trace format and checks the written text.
    pub(crate) fn write(path: PathBuf, ops: &[TraceOp]) -> Result<Self, CapiError> {
        let text = write_trace(ops);
        std::fs::write(&path, &text).map_err(|e| CapiError::InvalidArgument {
            what: "GPU_RUNTIME_TRACE",
            detail: format!("cannot write the trace to {}: {e}", path.display()),
        })?;
        // The written text is checked, so defects name the lines a reader of the file sees.
        let parsed = parse_trace(&text)?;
        let defects = parsed
            .check()
            .iter()
            .map(|defect| parsed.describe(defect).to_string())
            .collect();
        Ok(Self {
            path,
            calls: ops.len(),
            defects,
        })
    }
}
