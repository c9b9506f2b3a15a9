//! What a failed call says across the C boundary: the status code every exported function
//! returns, the calling thread's last error message, and the guard that catches panics.
//!
//! [`CapiError`] is the one error of this crate: the core's [`Error`] plus the failures only a
//! client layer has (bad handles, a backend the build or the machine lacks, a caught panic).
//! Every client ABI runs its exported functions through [`guarded`] (or [`status_of`]), which
//! catches a panic before it reaches the boundary, records the message for
//! `gpurt_last_error`, and hands back a status or the ABI's failure value.

use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use gpu_runtime::error::Error;

use super::handle::{HandleError, HandleKind};

/// Status code of every C API call: `GPURT_STATUS_OK` (0) or the kind of failure. The message
/// of the calling thread's last failure is in `gpurt_last_error()`.
///
/// Values only ever go from the library to the caller, so a value the caller makes up never
/// reaches Rust as this type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpurtStatus {
    /// The call succeeded.
    Ok = 0,
    /// A pointer argument was null where an address or an out-parameter is needed.
    NullPointer = 1,
    /// A size, length or count of zero where at least one is needed.
    ZeroSize = 2,
    /// An argument outside what the call accepts (an enum value, an alignment, a range that
    /// runs past the top of the address space, a backend name, a launch shape no device runs:
    /// a grid or workgroup dimension of zero, more than 1024 threads per workgroup).
    InvalidArgument = 3,
    /// A range runs past the end of its buffer or registered memory, or two lengths differ.
    OutOfBounds = 4,
    /// A device index the runtime does not have.
    UnknownDevice = 5,
    /// Memory of one device handed to an operation on another.
    WrongDevice = 6,
    /// A handle or token that is unknown, already released or consumed, of another kind, or
    /// from a runtime that was shut down.
    InvalidHandle = 7,
    /// Ranges that must not overlap do: a lock or registration overlapping a locked range
    /// without lying inside it, or a copy whose source and destination share bytes.
    Overlap = 8,
    /// An unlock or lookup names memory that no locked range contains.
    NotLocked = 9,
    /// The device's memory of that kind is exhausted even after every reclaim step.
    OutOfMemory = 10,
    /// The host ran out of memory for the library's own bookkeeping.
    HostOutOfMemory = 11,
    /// The device or backend does not support what was asked (a memory kind, say).
    Unsupported = 12,
    /// No kernel of that name in the backend's kernel library.
    UnknownKernel = 13,
    /// Launch arguments that do not match the kernel's parameters (number or kinds), or whose
    /// counts make a standard library kernel reach past a span it was given or past the
    /// launch's dynamic workgroup memory; checked at launch, before anything is queued.
    KernelArguments = 14,
    /// A limit exceeded (a device's workgroup memory, the branches of one fork).
    LimitExceeded = 15,
    /// A driver call failed; the message names the call and the driver's code.
    Driver = 16,
    /// The backend asked for is not built into this library or not present on this machine.
    BackendUnavailable = 17,
    /// An earlier driver failure left stream order unknown: the runtime refuses new work (shut
    /// it down and open a new one).
    RuntimePoisoned = 18,
    /// No runtime is open (a shutdown without an open one).
    NotOpen = 19,
    /// The call panicked inside the library; the panic was caught at the boundary.
    Panic = 20,
    /// Any other failure; the message says what.
    Other = 21,
    /// An unlock (`gpurt_unlock`) names a locked range whose locks all belong to registrations
    /// (`gpurt_host_register`): only `gpurt_host_unregister` releases those, so the range stays
    /// as it was.
    PinOwned = 22,
}

impl GpurtStatus {
    /// Every status, in code order.
    const ALL: [GpurtStatus; 23] = [
        GpurtStatus::Ok,
        GpurtStatus::NullPointer,
        GpurtStatus::ZeroSize,
        GpurtStatus::InvalidArgument,
        GpurtStatus::OutOfBounds,
        GpurtStatus::UnknownDevice,
        GpurtStatus::WrongDevice,
        GpurtStatus::InvalidHandle,
        GpurtStatus::Overlap,
        GpurtStatus::NotLocked,
        GpurtStatus::OutOfMemory,
        GpurtStatus::HostOutOfMemory,
        GpurtStatus::Unsupported,
        GpurtStatus::UnknownKernel,
        GpurtStatus::KernelArguments,
        GpurtStatus::LimitExceeded,
        GpurtStatus::Driver,
        GpurtStatus::BackendUnavailable,
        GpurtStatus::RuntimePoisoned,
        GpurtStatus::NotOpen,
        GpurtStatus::Panic,
        GpurtStatus::Other,
        GpurtStatus::PinOwned,
    ];

    /// The status with code `code`, if there is one.
    pub fn from_code(code: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|status| *status as i32 == code)
    }

    /// The status's name as the header spells it.
    pub fn name(self) -> &'static CStr {
        match self {
            GpurtStatus::Ok => c"GPURT_STATUS_OK",
            GpurtStatus::NullPointer => c"GPURT_STATUS_NULL_POINTER",
            GpurtStatus::ZeroSize => c"GPURT_STATUS_ZERO_SIZE",
            GpurtStatus::InvalidArgument => c"GPURT_STATUS_INVALID_ARGUMENT",
            GpurtStatus::OutOfBounds => c"GPURT_STATUS_OUT_OF_BOUNDS",
            GpurtStatus::UnknownDevice => c"GPURT_STATUS_UNKNOWN_DEVICE",
            GpurtStatus::WrongDevice => c"GPURT_STATUS_WRONG_DEVICE",
            GpurtStatus::InvalidHandle => c"GPURT_STATUS_INVALID_HANDLE",
            GpurtStatus::Overlap => c"GPURT_STATUS_OVERLAP",
            GpurtStatus::NotLocked => c"GPURT_STATUS_NOT_LOCKED",
            GpurtStatus::OutOfMemory => c"GPURT_STATUS_OUT_OF_MEMORY",
            GpurtStatus::HostOutOfMemory => c"GPURT_STATUS_HOST_OUT_OF_MEMORY",
            GpurtStatus::Unsupported => c"GPURT_STATUS_UNSUPPORTED",
            GpurtStatus::UnknownKernel => c"GPURT_STATUS_UNKNOWN_KERNEL",
            GpurtStatus::KernelArguments => c"GPURT_STATUS_KERNEL_ARGUMENTS",
            GpurtStatus::LimitExceeded => c"GPURT_STATUS_LIMIT_EXCEEDED",
            GpurtStatus::Driver => c"GPURT_STATUS_DRIVER",
            GpurtStatus::BackendUnavailable => c"GPURT_STATUS_BACKEND_UNAVAILABLE",
            GpurtStatus::RuntimePoisoned => c"GPURT_STATUS_RUNTIME_POISONED",
            GpurtStatus::NotOpen => c"GPURT_STATUS_NOT_OPEN",
            GpurtStatus::Panic => c"GPURT_STATUS_PANIC",
            GpurtStatus::Other => c"GPURT_STATUS_OTHER",
            GpurtStatus::PinOwned => c"GPURT_STATUS_PIN_OWNED",
        }
    }
}

/// Every failure of this crate's calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapiError {
    /// The runtime (or an argument check that mirrors it) refused the call.
    Core(Error),
    /// A handle of `kind` of this session that names no live object: already released (or
    /// never issued).
    StaleHandle {
        /// The kind the call expects.
        kind: HandleKind,
        /// The handle's value.
        handle: u64,
    },
    /// A handle of `kind` issued by an earlier session of the library: the runtime it belonged
    /// to was shut down, which released its object.
    EarlierSession {
        /// The kind the call expects.
        kind: HandleKind,
        /// The handle's value.
        handle: u64,
    },
    /// A handle of one kind given where another is expected.
    WrongHandleKind {
        /// The kind the call expects.
        expected: HandleKind,
        /// The kind of the handle given, if it names a kind at all.
        found: Option<HandleKind>,
        /// The handle's value.
        handle: u64,
    },
    /// An argument outside what the call accepts.
    InvalidArgument {
        /// What the argument is.
        what: &'static str,
        /// The value given and what is accepted.
        detail: String,
    },
    /// The backend asked for is not built in or not usable here.
    BackendUnavailable {
        /// The backend's name.
        backend: &'static str,
        /// Why not.
        reason: String,
    },
    /// A call that needs an open runtime found none.
    NotOpen,
    /// A call panicked; the panic was caught before the boundary.
    Panicked {
        /// The panic's message.
        message: String,
    },
}

impl From<Error> for CapiError {
    fn from(error: Error) -> Self {
        CapiError::Core(error)
    }
}

/// The one place handle errors become the crate's: a null handle is the core's null pointer
/// (named after its kind), running out of serial numbers or of host memory the core's limit
/// and out-of-memory errors, and the rest the invalid-handle errors below.
impl From<HandleError> for CapiError {
    fn from(error: HandleError) -> Self {
        match error {
            HandleError::Null { kind } => Error::NullPointer {
                what: kind.null_name(),
            }
            .into(),
            HandleError::WrongKind {
                expected,
                found,
                handle,
            } => CapiError::WrongHandleKind {
                expected,
                found,
                handle,
            },
            HandleError::Stale { kind, handle } => CapiError::StaleHandle { kind, handle },
            HandleError::EarlierSession { kind, handle } => {
                CapiError::EarlierSession { kind, handle }
            }
            HandleError::SerialsExhausted {
                what,
                serial,
                limit,
            } => Error::LimitExceeded {
                what,
                required: usize::try_from(serial).unwrap_or(usize::MAX),
                limit: usize::try_from(limit).unwrap_or(usize::MAX),
                detail: vec!["handle serial numbers are never reused in a process".into()],
            }
            .into(),
            HandleError::HostOutOfMemory => Error::HostOutOfMemory {
                what: "a handle table entry",
            }
            .into(),
        }
    }
}

impl CapiError {
    /// The status code callers switch on.
    pub fn status(&self) -> GpurtStatus {
        match self {
            CapiError::Core(error) => core_status(error),
            CapiError::StaleHandle { .. }
            | CapiError::EarlierSession { .. }
            | CapiError::WrongHandleKind { .. } => GpurtStatus::InvalidHandle,
            CapiError::InvalidArgument { .. } => GpurtStatus::InvalidArgument,
            CapiError::BackendUnavailable { .. } => GpurtStatus::BackendUnavailable,
            CapiError::NotOpen => GpurtStatus::NotOpen,
            CapiError::Panicked { .. } => GpurtStatus::Panic,
        }
    }
}

/// The status of a core error.
fn core_status(error: &Error) -> GpurtStatus {
    use GpurtStatus as S;
    match error {
        Error::NullPointer { .. } => S::NullPointer,
        Error::ZeroSize { .. } => S::ZeroSize,
        Error::AddressOverflow { .. }
        | Error::InvalidAlignment { .. }
        | Error::WorkgroupAlignment { .. }
        | Error::WorkgroupLiveRange { .. }
        | Error::PrivateBufferInWorkgroup { .. }
        | Error::TraceSyntax { .. }
        | Error::FreeSizeMismatch { .. }
        | Error::LaunchShape { .. }
        | Error::UnknownGraphNode { .. }
        | Error::GraphNodeKind { .. }
        | Error::UnknownGraphBlock { .. }
        | Error::GraphBlockConflict { .. } => S::InvalidArgument,
        Error::OutOfBounds { .. } => S::OutOfBounds,
        Error::UnknownDevice { .. } => S::UnknownDevice,
        Error::WrongDevice { .. } => S::WrongDevice,
        Error::UnknownAllocation { .. }
        | Error::UnknownAddress { .. }
        | Error::TokenConsumed { .. }
        | Error::TokenUnknown { .. }
        | Error::TokenForeign { .. }
        | Error::UnknownStream { .. }
        | Error::UnknownEvent { .. }
        | Error::StaleHandle { .. } => S::InvalidHandle,
        Error::LockOverlap { .. }
        | Error::ExternalPinTooSmall { .. }
        | Error::CopyOverlap { .. } => S::Overlap,
        Error::NotLocked { .. } | Error::NotEntryStart { .. } => S::NotLocked,
        Error::PinOwned { .. } => S::PinOwned,
        Error::OutOfMemory { .. } => S::OutOfMemory,
        Error::HostOutOfMemory { .. } => S::HostOutOfMemory,
        Error::KindUnsupported { .. } | Error::Unsupported { .. } => S::Unsupported,
        Error::UnknownKernel { .. } => S::UnknownKernel,
        Error::KernelArgumentMismatch { .. }
        | Error::KernelReach { .. }
        | Error::LaunchSizeCount { .. } => S::KernelArguments,
        Error::LimitExceeded { .. } => S::LimitExceeded,
        // A lost device is the driver's failure (the cause, in the message).
        Error::Driver(_)
        | Error::DeviceLost { .. }
        | Error::MisalignedSegment { .. }
        | Error::ForeignContext { .. } => S::Driver,
        Error::DriverLibraryNotFound { .. } | Error::DriverSymbolMissing { .. } => {
            S::BackendUnavailable
        }
        Error::RuntimePoisoned { .. } | Error::QueueFailed { .. } => S::RuntimePoisoned,
        Error::ActionPanicked { .. } => S::Panic,
        _ => S::Other,
    }
}

impl fmt::Display for CapiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapiError::Core(error) => error.fmt(f),
            CapiError::StaleHandle { kind, handle } => write!(
                f,
                "{} handle {handle:#x} names no live {0}: it was already released (or never \
                 issued)",
                kind.name()
            ),
            CapiError::EarlierSession { kind, handle } => write!(
                f,
                "{} handle {handle:#x} is from an earlier session of the library: the runtime \
                 it belonged to was shut down, which released it (handles do not outlive a \
                 shutdown)",
                kind.name()
            ),
            CapiError::WrongHandleKind {
                expected,
                found,
                handle,
            } => match found {
                Some(found) => write!(
                    f,
                    "handle {handle:#x} is a {} handle where a {} handle is expected",
                    found.name(),
                    expected.name()
                ),
                None => write!(
                    f,
                    "{handle:#x} is not a handle of this library (a {} handle is expected)",
                    expected.name()
                ),
            },
            CapiError::InvalidArgument { what, detail } => write!(f, "{what}: {detail}"),
            CapiError::BackendUnavailable { backend, reason } => {
                write!(f, "backend `{backend}` is unavailable: {reason}")
            }
            CapiError::NotOpen => write!(f, "no runtime is open"),
            CapiError::Panicked { message } => write!(
                f,
                "the call panicked inside the library (caught at the boundary): {message}"
            ),
        }
    }
}

thread_local! {
    /// The message of the calling thread's last failure.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `error` as the calling thread's last failure.
pub fn set_last_error(error: &CapiError) {
    // A message cannot hold a NUL byte in C; none of ours has one, but a panic message might.
    let text = error.to_string().replace('\0', "\\0");
    let message = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
}

/// Runs `read` on the calling thread's last failure message ("" when the thread has none).
/// The C API hands out a pointer into it, valid until the thread's next failure.
pub fn with_last_error<T>(read: impl FnOnce(&CStr) -> T) -> T {
    LAST_ERROR.with(|last| read(last.borrow().as_c_str()))
}

/// The calling thread's last failure message, as text (for the tests of every client ABI).
#[cfg(test)]
pub(crate) fn last_error() -> String {
    with_last_error(|message| message.to_string_lossy().into_owned())
}

/// Runs an exported call's body: a panic is caught and becomes [`CapiError::Panicked`], and a
/// failure is recorded as the thread's last error. Returns the body's value, or `on_failure`
/// when it failed (for ABIs whose functions return a value rather than a status, such as a
/// null pointer).
pub fn guarded<T>(on_failure: T, body: impl FnOnce() -> Result<T, CapiError>) -> T {
    match run_caught(body) {
        Ok(value) => value,
        Err(_) => on_failure,
    }
}

/// Runs an exported call's body as [`guarded`] does and returns its status code.
pub fn status_of(body: impl FnOnce() -> Result<(), CapiError>) -> GpurtStatus {
    match run_caught(body) {
        Ok(()) => GpurtStatus::Ok,
        Err(error) => error.status(),
    }
}

fn run_caught<T>(body: impl FnOnce() -> Result<T, CapiError>) -> Result<T, CapiError> {
    // Unwind safety: every lock the runtime takes recovers from poisoning, and a panic in the
    // middle of a call is reported, so the caller learns that this call's effect is unknown.
    let result = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        Err(CapiError::Panicked { message })
    });
    if let Err(error) = &result {
        set_last_error(error);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_runtime::id::DeviceId;

    #[test]
    fn a_panic_becomes_the_panic_status_with_its_message() {
        let status = status_of(|| panic!("boom {}", 42));
        assert_eq!(status, GpurtStatus::Panic);
        assert!(last_error().contains("boom 42"), "{}", last_error());
        let status = status_of(|| std::panic::panic_any(7_u32));
        assert_eq!(status, GpurtStatus::Panic);
        assert!(last_error().contains("without a message"));
    }

    #[test]
    fn a_failure_sets_the_message_and_a_success_keeps_it() {
        let status = status_of(|| Err(Error::ZeroSize { what: "copy size" }.into()));
        assert_eq!(status, GpurtStatus::ZeroSize);
        assert!(last_error().contains("copy size is zero"));
        assert_eq!(status_of(|| Ok(())), GpurtStatus::Ok);
        assert!(last_error().contains("copy size is zero"));
    }

    #[test]
    fn the_last_error_is_per_thread() {
        let _ = status_of(|| Err(CapiError::NotOpen));
        std::thread::spawn(|| assert_eq!(last_error(), ""))
            .join()
            .unwrap();
        assert_eq!(last_error(), "no runtime is open");
    }

    #[test]
    fn guarded_returns_the_failure_value_on_error_and_on_panic() {
        assert_eq!(guarded(0_usize, || Ok(5)), 5);
        assert_eq!(guarded(0_usize, || Err(CapiError::NotOpen)), 0);
        assert_eq!(guarded(0_usize, || panic!("inside")), 0);
        assert!(last_error().contains("inside"));
    }

    #[test]
    fn a_nul_byte_in_a_message_does_not_lose_the_message() {
        let _ = status_of(|| panic!("before\0after"));
        assert!(last_error().contains("before\\0after"), "{}", last_error());
    }

    #[test]
    fn core_errors_map_to_their_status() {
        let cases = [
            (Error::NullPointer { what: "x" }, GpurtStatus::NullPointer),
            (
                Error::UnknownDevice {
                    device: DeviceId(3),
                    device_count: 2,
                },
                GpurtStatus::UnknownDevice,
            ),
            (Error::NotLocked { ptr: 16 }, GpurtStatus::NotLocked),
            (
                Error::PinOwned {
                    ptr: 16,
                    entry: gpu_runtime::error::ByteRange { start: 16, len: 8 },
                    releaser: gpu_runtime::lock_table::LockOwner::Raw,
                    held: gpu_runtime::lock_table::LockCounts { raw: 0, guards: 1 },
                },
                GpurtStatus::PinOwned,
            ),
            (
                Error::Unsupported {
                    backend: "host",
                    what: "loading a module image",
                },
                GpurtStatus::Unsupported,
            ),
            (
                Error::OutOfBounds {
                    offset: 1,
                    len: 2,
                    size: 2,
                },
                GpurtStatus::OutOfBounds,
            ),
            (
                Error::TokenConsumed {
                    token: gpu_runtime::token::TokenId::from_raw(5),
                },
                GpurtStatus::InvalidHandle,
            ),
            (
                Error::KernelArgumentMismatch {
                    kernel: "fill_u32",
                    expected: "(Ptr dst, U32 value, U64 count)",
                },
                GpurtStatus::KernelArguments,
            ),
            (
                Error::KernelReach {
                    kernel: "fill_u32",
                    argument: Some(0),
                    parameter: "dst",
                    address: 0x1000,
                    given: 4096,
                    reach: 8192,
                },
                GpurtStatus::KernelArguments,
            ),
            (
                Error::LaunchShape {
                    what: "grid x",
                    given: 0,
                    min: 1,
                    max: u64::from(u32::MAX),
                    grid: [0, 1, 1],
                    block: [64, 1, 1],
                },
                GpurtStatus::InvalidArgument,
            ),
        ];
        for (error, status) in cases {
            assert_eq!(CapiError::from(error).status(), status);
        }
        let stale = CapiError::StaleHandle {
            kind: HandleKind::Memory,
            handle: 0x10,
        };
        assert_eq!(stale.status(), GpurtStatus::InvalidHandle);
        assert!(stale.to_string().contains("memory handle 0x10"));
    }

    #[test]
    fn handle_errors_get_their_status_and_a_message_that_names_the_kind() {
        let cases = [
            (
                HandleError::Null {
                    kind: HandleKind::Memory,
                },
                GpurtStatus::NullPointer,
                "memory handle is a null pointer",
            ),
            (
                HandleError::Null {
                    kind: HandleKind::Stream,
                },
                GpurtStatus::NullPointer,
                "MLIR stream handle is a null pointer",
            ),
            (
                HandleError::WrongKind {
                    expected: HandleKind::Stream,
                    found: Some(HandleKind::Event),
                    handle: 0xC2 << 56 | 5,
                },
                GpurtStatus::InvalidHandle,
                "is a MLIR event handle where a MLIR stream handle is expected",
            ),
            (
                HandleError::WrongKind {
                    expected: HandleKind::Memory,
                    found: None,
                    handle: 0x7fff_1234_5678,
                },
                GpurtStatus::InvalidHandle,
                "0x7fff12345678 is not a handle of this library (a memory handle",
            ),
            (
                HandleError::Stale {
                    kind: HandleKind::Kernel,
                    handle: 0x10,
                },
                GpurtStatus::InvalidHandle,
                "names no live kernel: it was already released",
            ),
            (
                HandleError::EarlierSession {
                    kind: HandleKind::Memory,
                    handle: 0x10,
                },
                GpurtStatus::InvalidHandle,
                "earlier session",
            ),
            (
                HandleError::SerialsExhausted {
                    what: "handles of this process",
                    serial: 1 << 56,
                    limit: (1 << 56) - 1,
                },
                GpurtStatus::LimitExceeded,
                "handles of this process",
            ),
            (
                HandleError::HostOutOfMemory,
                GpurtStatus::HostOutOfMemory,
                "a handle table entry",
            ),
        ];
        for (error, status, message) in cases {
            let error = CapiError::from(error);
            assert_eq!(error.status(), status, "{error}");
            assert!(error.to_string().contains(message), "{error}");
        }
    }
}
