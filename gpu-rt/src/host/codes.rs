//! The host backend's driver error codes: what each misuse or fault is called, with CUDA's
//! number for the same situation.

use gpu_core::error::{DriverError, Error};

/// The host backend's driver error codes: CUDA's numbers for the same situation, with names
/// prefixed `HOST_` (the [`DriverError::name`] of each error).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::HostErrorCode;
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// // As CUDA, the host backend acts on a device only while it is current.
/// let error = backend.stream_create(DeviceId(0)).unwrap_err();
/// assert_eq!(HostErrorCode::of(&error), Some(HostErrorCode::WrongCurrentDevice));
/// assert_eq!(error, HostErrorCode::WrongCurrentDevice.error("stream_create"));
/// assert_eq!(error.to_string().contains("HOST_WRONG_CURRENT_DEVICE"), true);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostErrorCode {
    /// A bad argument: wrong kind or device for an address, out-of-bounds range, bad launch
    /// shape, too much workgroup memory, an interior pointer to unregister (CUDA 1).
    InvalidValue,
    /// The calling thread's current device is not the device the call acts on (CUDA 201,
    /// `CUDA_ERROR_INVALID_CONTEXT`): the runtime forgot its device guard.
    WrongCurrentDevice,
    /// The operating system refused a resource, e.g. a worker thread (CUDA 304).
    OperatingSystem,
    /// An unknown or destroyed stream, event or kernel, or one of the wrong device (CUDA 400,
    /// "invalid resource handle").
    InvalidHandle,
    /// A kernel touched memory outside what its pointer arguments point into (CUDA 700).
    IllegalAddress,
    /// Peer access between devices with no link, or of a device to itself (CUDA 217,
    /// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`).
    PeerAccessUnsupported,
    /// The range overlaps memory already registered or allocated pinned (CUDA 712).
    MemoryAlreadyRegistered,
    /// No registered range starts at the pointer (CUDA 713).
    MemoryNotRegistered,
    /// A kernel panicked (CUDA 719).
    LaunchFailed,
    /// The device does not offer this (a memory kind, or its stream-ordered form) (CUDA 801).
    NotSupported,
    /// A fault injected by [`super::HostBackend::fail_nth`] or [`super::HostBackend::fail_nth_call`]
    /// (CUDA 999, `CUDA_ERROR_UNKNOWN`).
    InjectedFault,
}

impl HostErrorCode {
    /// Every code.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::host::HostErrorCode;
    ///
    /// let names: Vec<&str> = HostErrorCode::ALL.iter().map(|code| code.name()).collect();
    /// assert!(names.iter().all(|name| name.starts_with("HOST_")));
    /// assert!(HostErrorCode::ALL.contains(&HostErrorCode::InjectedFault));
    /// ```
    pub const ALL: [HostErrorCode; 11] = [
        HostErrorCode::InvalidValue,
        HostErrorCode::PeerAccessUnsupported,
        HostErrorCode::WrongCurrentDevice,
        HostErrorCode::OperatingSystem,
        HostErrorCode::InvalidHandle,
        HostErrorCode::IllegalAddress,
        HostErrorCode::MemoryAlreadyRegistered,
        HostErrorCode::MemoryNotRegistered,
        HostErrorCode::LaunchFailed,
        HostErrorCode::NotSupported,
        HostErrorCode::InjectedFault,
    ];

    /// The name in [`DriverError::name`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HostErrorCode;
    ///
    /// assert_eq!(HostErrorCode::IllegalAddress.name(), "HOST_ILLEGAL_ADDRESS");
    /// let Error::Driver(driver) = HostErrorCode::IllegalAddress.error("launch") else { panic!() };
    /// assert_eq!((driver.call, driver.name), ("launch", "HOST_ILLEGAL_ADDRESS"));
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            HostErrorCode::InvalidValue => "HOST_INVALID_VALUE",
            HostErrorCode::PeerAccessUnsupported => "HOST_PEER_ACCESS_UNSUPPORTED",
            HostErrorCode::WrongCurrentDevice => "HOST_WRONG_CURRENT_DEVICE",
            HostErrorCode::OperatingSystem => "HOST_OPERATING_SYSTEM",
            HostErrorCode::InvalidHandle => "HOST_INVALID_HANDLE",
            HostErrorCode::IllegalAddress => "HOST_ILLEGAL_ADDRESS",
            HostErrorCode::MemoryAlreadyRegistered => "HOST_MEMORY_ALREADY_REGISTERED",
            HostErrorCode::MemoryNotRegistered => "HOST_MEMORY_NOT_REGISTERED",
            HostErrorCode::LaunchFailed => "HOST_LAUNCH_FAILED",
            HostErrorCode::NotSupported => "HOST_NOT_SUPPORTED",
            HostErrorCode::InjectedFault => "HOST_INJECTED_FAULT",
        }
    }

    /// The number in [`DriverError::code`] (CUDA's code for the same situation).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HostErrorCode;
    ///
    /// assert_eq!(HostErrorCode::IllegalAddress.code(), 700); // CUDA_ERROR_ILLEGAL_ADDRESS
    /// // The codes of CUDA's sticky errors lose the device on the host backend too.
    /// let Error::Driver(fault) = HostErrorCode::IllegalAddress.error("launch") else { panic!() };
    /// let Error::Driver(misuse) = HostErrorCode::InvalidValue.error("copy") else { panic!() };
    /// assert!(fault.loses_device() && !misuse.loses_device());
    /// ```
    pub const fn code(self) -> i64 {
        match self {
            HostErrorCode::InvalidValue => 1,
            HostErrorCode::PeerAccessUnsupported => 217,
            HostErrorCode::WrongCurrentDevice => 201,
            HostErrorCode::OperatingSystem => 304,
            HostErrorCode::InvalidHandle => 400,
            HostErrorCode::IllegalAddress => 700,
            HostErrorCode::MemoryAlreadyRegistered => 712,
            HostErrorCode::MemoryNotRegistered => 713,
            HostErrorCode::LaunchFailed => 719,
            HostErrorCode::NotSupported => 801,
            HostErrorCode::InjectedFault => 999,
        }
    }

    /// The error a failed `call` reports with this code.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::{CallKind, HostErrorCode};
    /// use gpu_rt::runtime::with_device;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.fail_nth(CallKind::StreamCreate, 1);
    /// let failed = with_device(&backend, DeviceId(0), || backend.stream_create(DeviceId(0)));
    /// assert_eq!(failed.err(), Some(HostErrorCode::InjectedFault.error("stream_create")));
    /// # Ok::<(), Error>(())
    /// ```
    pub const fn error(self, call: &'static str) -> Error {
        Error::Driver(DriverError {
            backend: "host",
            call,
            name: self.name(),
            code: self.code(),
        })
    }

    /// The code of a host backend driver error, if `error` is one.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HostErrorCode;
    /// use gpu_rt::runtime::with_device;
    ///
    /// let (backend, d0) = (HostBackend::new(HostConfig::with_devices(1)), DeviceId(0));
    /// let refused = with_device(&backend, d0, || backend.free(d0, MemoryKind::Device, 64, None));
    /// // No allocation there: CUDA's `CUDA_ERROR_INVALID_VALUE`.
    /// assert_eq!(HostErrorCode::of(&refused.unwrap_err()), Some(HostErrorCode::InvalidValue));
    /// assert_eq!(HostErrorCode::of(&Error::ZeroSize { what: "x" }), None); // not a driver error
    /// # Ok::<(), Error>(())
    /// ```
    pub fn of(error: &Error) -> Option<HostErrorCode> {
        match error {
            Error::Driver(e) if e.backend == "host" => {
                HostErrorCode::ALL.into_iter().find(|c| c.code() == e.code)
            }
            _ => None,
        }
    }
}
