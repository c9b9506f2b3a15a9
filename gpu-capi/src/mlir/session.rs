//! How each call reaches the runtime: the calling thread's default device (made current once
//! per thread), the process session with the failure printed and recorded, and the exit hook.

use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use gpu_runtime::DeviceId;

use crate::shared::{self, CapiError, ClientBackend, Session, guarded, with_session};

thread_local! {
    /// The device `mgpuSetDefaultDevice` chose on this thread (upstream's is thread-local too).
    static DEFAULT_DEVICE: Cell<u32> = const { Cell::new(0) };
    /// The session (by its generation) and device this layer last made current on this
    /// thread (generation 0: none yet).
    static MADE_CURRENT: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

/// Set once the exit hook has shut the runtime down: later calls do nothing.
static EXITED: AtomicBool = AtomicBool::new(false);

pub(super) fn device() -> DeviceId {
    DeviceId(DEFAULT_DEVICE.with(Cell::get))
}

/// Makes the default device current on the calling thread, once per thread and device (as the
/// CUDA runtime API's cudaSetDevice does), so that each backend call finds its device's
/// context current instead of pushing and popping it around every call (upstream's wrappers
/// push and pop on each). A program that switches the thread's context itself between calls
/// only costs those calls the push and pop again.
pub(super) fn make_current<B: ClientBackend>(session: &Session<B>) -> Result<(), CapiError> {
    let wanted = (session.generation().raw(), device().0);
    if MADE_CURRENT.with(Cell::get) != wanted {
        session
            .runtime()
            .backend()
            .set_current_device(Some(DeviceId(wanted.1)))?;
        MADE_CURRENT.with(|made| made.set(wanted));
    }
    Ok(())
}

/// Runs `body` on the process session; a failure is printed with `call`'s name, set as the
/// thread's last error, and turned into `failed`.
pub(super) fn mlir_call<T>(
    call: &'static str,
    failed: T,
    body: impl FnOnce(shared::AnySession) -> Result<T, CapiError>,
) -> T {
    if EXITED.load(Ordering::Acquire) {
        // The exit hook shut the runtime down; what the program's own destructors still call
        // (MLIR's module unload) has nothing left to act on, and must not open a new runtime.
        return failed;
    }
    guarded(failed, || {
        with_session(|session| {
            // Registered once the runtime (and so the driver) is open: exit hooks run in
            // reverse order, so this one runs before the driver's own (CUDA deinitialises in
            // one) and before those of tools attached to it (a sanitizer's leak check).
            static REGISTER: Once = Once::new();
            REGISTER.call_once(|| {
                // SAFETY: registering a plain `extern "C" fn()` with the C library.
                unsafe { atexit(at_exit) };
            });
            body(session)
        })
        .inspect_err(|error| eprintln!("{call}: {error}"))
    })
}

unsafe extern "C" {
    fn atexit(hook: extern "C" fn()) -> core::ffi::c_int;
}

/// Runs an operation written once over `B` on the session's backend.
macro_rules! on_session {
    ($call:expr, $failed:expr, |$s:ident| $body:expr) => {
        $crate::mlir::session::mlir_call($call, $failed, |session| {
            $crate::shared::session::dispatch!(session, $s => {
                $crate::mlir::session::make_current($s).and_then(|()| $body)
            })
        })
    };
}
pub(super) use on_session;

/// Makes `device` the default for this thread's later calls (allocations, copies, launches).
#[unsafe(no_mangle)]
pub extern "C" fn mgpuSetDefaultDevice(device: i32) {
    guarded((), || {
        let index = u32::try_from(device).map_err(|_| CapiError::InvalidArgument {
            what: "device",
            detail: format!("{device} is negative"),
        });
        match index {
            Ok(index) => {
                DEFAULT_DEVICE.with(|d| d.set(index));
                Ok(())
            }
            Err(error) => {
                eprintln!("mgpuSetDefaultDevice: {error}");
                Err(error)
            }
        }
    })
}

/// At process exit (registered with `atexit` at the first call, so it runs while the driver
/// is still loaded): shuts the runtime down, reclaiming what the program left (streams it
/// never destroyed, MLIR's join inputs), and prints what was found, with the checker's verdict
/// on the trace when `GPU_RUNTIME_TRACE` was set. Calls after it (the program's destructors
/// unload its modules) do nothing.
extern "C" fn at_exit() {
    EXITED.store(true, Ordering::Release);
    // On a thread of its own: this thread's thread-local storage (the last error, the host
    // backend's current device) is already torn down when exit hooks run.
    let shutdown = std::thread::Builder::new()
        .name("gpu-runtime exit".into())
        .spawn(shared::shutdown)
        .map_err(drop)
        .and_then(|thread| thread.join().map_err(drop));
    match shutdown {
        Ok(Ok(report)) => {
            let shutdown = &report.shutdown;
            eprintln!(
                "gpu-runtime (mlir): shut down on {}: {} streams the program left reclaimed, \
                 {} unwaited token(s), {} cached bytes and {} pinned range(s) given back",
                report.backend,
                report.released_objects,
                shutdown.program.unwaited.len(),
                shutdown.trimmed_bytes,
                shutdown.unpinned_ranges,
            );
            if let Some(failure) = &report.failure {
                eprintln!("gpu-runtime (mlir): the shutdown reported: {failure}");
            }
            if let Some(trace) = &report.trace {
                eprintln!(
                    "gpu-runtime (mlir): trace of {} calls written to {}: {} defect(s)",
                    trace.calls,
                    trace.path.display(),
                    trace.defects.len()
                );
                for defect in &trace.defects {
                    eprintln!("  {defect}");
                }
            }
        }
        // Shut down already (gpurt_shutdown): nothing left to do.
        Ok(Err(CapiError::NotOpen)) => {}
        Ok(Err(error)) => eprintln!("gpu-runtime (mlir): shutdown at exit failed: {error}"),
        Err(()) => eprintln!("gpu-runtime (mlir): shutdown at exit could not run or panicked"),
    }
}
