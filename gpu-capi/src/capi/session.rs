//! The runtime's lifetime and what a C program asks of it outside any object: `gpurt_open`,
//! `gpurt_shutdown` (and its report), the last error, status names and the device count.

use std::ffi::c_char;

use crate::shared::{
    self, BackendChoice, CapiError, GpurtStatus, OpenOptions, dispatch, status_of, with_session,
};

use super::args::{optional_str, out_param, write_out};

/// What `gpurt_shutdown` found.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtReport {
    /// Objects the program still held handles to (buffers, registrations, kernels), released
    /// by the shutdown.
    pub released_objects: u64,
    /// Tokens that ended without a wait (an error they carried would be lost).
    pub unwaited_tokens: u64,
    /// Bytes of cached memory given back to the driver.
    pub trimmed_bytes: u64,
    /// Host ranges still locked or registered, unpinned by the shutdown.
    pub unpinned_ranges: u64,
    /// 1 when a trace was written (`GPU_RUNTIME_TRACE` was set at open), else 0.
    pub trace_written: u32,
    /// Stream/event calls in the trace.
    pub trace_calls: u64,
    /// Defects the trace checker found in the trace (each printed on stderr).
    pub trace_defects: u64,
}

/// Opens the process-wide runtime now, on `backend` (`"cuda"`, `"hip"`, `"host"`), or when
/// `backend` is NULL on the one `GPU_RUNTIME_BACKEND` names (unset or empty: the best present).
/// Any other call opens it lazily the same way, so calling this is optional; it lets a program
/// pick the backend and see a failure early. Opening when a runtime is open already succeeds if
/// `backend` is NULL or names the open one's backend, and fails with
/// `GPURT_STATUS_INVALID_ARGUMENT` otherwise.
///
/// Thread safety: any thread; concurrent opens open one runtime.
///
/// # Safety
/// `backend` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_open(backend: *const c_char) -> GpurtStatus {
    status_of(|| {
        // SAFETY: `gpurt_open`'s contract: `backend` is NULL or a NUL-terminated string.
        let name = unsafe { optional_str(backend, "backend name") }?;
        let mut options = OpenOptions::from_env()?;
        if let Some(name) = name {
            options.backend = BackendChoice::parse(name)?;
        }
        let asked = options.backend;
        let (open, _) = shared::open(options)?;
        match name {
            Some(name) if asked != BackendChoice::Best && name != open => {
                Err(CapiError::InvalidArgument {
                    what: "backend name",
                    detail: format!(
                        "the runtime is already open on `{open}`; shut it down before opening `{name}`"
                    ),
                })
            }
            _ => Ok(()),
        }
    })
}

/// Shuts the process-wide runtime down: waits for calls in flight and for all work, releases
/// every object the program still holds (buffers, registrations, kernels: their handles become
/// invalid), gives all memory, streams, events and pins back to the driver, writes the trace
/// when `GPU_RUNTIME_TRACE` was set at open (printing the checker's verdict on stderr), and
/// fills `*report` (which may be NULL). A later call opens a new runtime.
/// `GPURT_STATUS_NOT_OPEN` when no runtime is open. A failure on the way (work that failed and
/// was never waited for, a trace file that cannot be written) is returned, with `*report` still
/// filled (its runtime figures zero when the runtime's own shutdown failed): the runtime is
/// closed either way.
///
/// Thread safety: any thread; waits for the calls other threads have in flight.
///
/// # Safety
/// `report` is NULL or points to writable memory for a `gpurt_report`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_shutdown(report: *mut GpurtReport) -> GpurtStatus {
    status_of(|| {
        // Checked before the runtime shuts down: a refused call changes nothing.
        let report = if report.is_null() {
            None
        } else {
            Some(out_param(report, "report out-parameter")?)
        };
        let found = shared::shutdown()?;
        let mut out = GpurtReport {
            released_objects: found.released_objects as u64,
            unwaited_tokens: found.shutdown.program.unwaited.len() as u64,
            trimmed_bytes: found.shutdown.trimmed_bytes as u64,
            unpinned_ranges: found.shutdown.unpinned_ranges as u64,
            ..GpurtReport::default()
        };
        if let Some(trace) = &found.trace {
            for defect in &trace.defects {
                eprintln!("gpu-runtime: {}: {defect}", trace.path.display());
            }
            eprintln!(
                "gpu-runtime: trace of {} stream/event calls written to {}: {} defect(s)",
                trace.calls,
                trace.path.display(),
                trace.defects.len()
            );
            out.trace_written = 1;
            out.trace_calls = trace.calls as u64;
            out.trace_defects = trace.defects.len() as u64;
        }
        if let Some(report) = report {
            write_out(report, out);
        }
        found.failure.map_or(Ok(()), Err)
    })
}

/// The message of the calling thread's last failure ("" if it has none): a NUL-terminated
/// string owned by the library, valid until the thread's next failing call. Never NULL.
///
/// Thread safety: any thread; each thread has its own last error.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_last_error() -> *const c_char {
    shared::status::with_last_error(|message| message.as_ptr())
}

/// Writes how many devices the runtime drives to `*count`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `count` points to writable memory for a `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_device_count(count: *mut usize) -> GpurtStatus {
    status_of(|| {
        let out = out_param(count, "device count out-parameter")?;
        let devices = with_session(|s| dispatch!(s, s => Ok(s.runtime().device_count())))?;
        write_out(out, devices);
        Ok(())
    })
}

/// The name of a status code (`"GPURT_STATUS_OK"`, ...), or `"unknown status"` for a value
/// that is none. A static string. Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_status_name(status: i32) -> *const c_char {
    GpurtStatus::from_code(status)
        .map_or(c"unknown status", GpurtStatus::name)
        .as_ptr()
}
