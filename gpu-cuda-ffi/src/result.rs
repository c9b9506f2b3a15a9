//! The driver's calls, typed: one small function per driver call, by area ([`device`],
//! [`context`], [`memory`], [`stream`], [`event`], [`module`], [`graph`], [`vm`]), as cudarc's `result` module has
//! them. Each looks its entry point up through [`Driver`](crate::Driver) (cached after the
//! first use), passes its out-parameters itself, and returns the value or the failure as
//! [`Error::Driver`] with the call's name and the code. A call that takes raw handles or
//! pointers the driver would dereference (a destroyed stream, a freed address) is an
//! `unsafe fn` whose `# Safety` section says what the caller vouches for; one that takes only
//! values is safe. The backend, the benchmarks and the tests call the driver through these.
//!
//! Below them, `CUresult` codes turned into the toolkit's errors, keeping the driver's own name
//! and number. Names come from a table generated from cuda.h (read through gpu-ffi-loader's
//! ResultCodes).

pub mod context;
pub mod device;
pub mod event;
pub mod graph;
pub mod memory;
pub mod module;
pub mod stream;
pub mod vm;

use gpu_core::{DriverError, Error};
use gpu_ffi_loader::ResultCodes;

use crate::sys;

/// The backend name carried by every error of this crate.
pub const BACKEND: &str = "cuda";

/// The name given to a code the bindings do not know (a driver newer than cuda.h 13.0); the
/// number itself is kept in [`DriverError::code`].
pub const UNRECOGNIZED_RESULT: &str = "unrecognized CUresult";

/// CUDA's result codes.
const CODES: ResultCodes = ResultCodes {
    backend: BACKEND,
    success: sys::CUDA_SUCCESS,
    names: sys::CURESULT_NAMES,
    unrecognized: UNRECOGNIZED_RESULT,
};

/// The driver's name for `code` (`CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED` for 712), or
/// [`UNRECOGNIZED_RESULT`] for a code cuda.h 13.0 does not name.
pub fn result_name(code: sys::CUresult) -> &'static str {
    CODES.name(code)
}

/// The error for driver function `call` having returned `code`.
pub fn driver_error(call: &'static str, code: sys::CUresult) -> DriverError {
    CODES.error(call, code)
}

/// `Ok` for `CUDA_SUCCESS`, else [`Error::Driver`] naming `call` and the code.
///
/// # Errors
/// [`Error::Driver`] when `code` is not `CUDA_SUCCESS`.
pub fn check(call: &'static str, code: sys::CUresult) -> Result<(), Error> {
    CODES.check(call, code)
}

/// Whether `error` is the driver saying this machine has no CUDA device to use:
/// `CUDA_ERROR_NO_DEVICE`, or `CUDA_ERROR_STUB_LIBRARY` (the toolkit's stub library answered
/// instead of a driver). Hardware tests and benchmarks report "skipped: no device" for it.
pub fn reports_no_device(error: &Error) -> bool {
    CODES.is_one_of(
        error,
        &[sys::CUDA_ERROR_NO_DEVICE, sys::CUDA_ERROR_STUB_LIBRARY],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_device_and_stub_library_report_no_device_and_nothing_else_does() {
        for code in [sys::CUDA_ERROR_NO_DEVICE, sys::CUDA_ERROR_STUB_LIBRARY] {
            assert!(reports_no_device(&check("cuInit", code).unwrap_err()));
        }
        for code in [
            sys::CUDA_ERROR_INVALID_VALUE,
            sys::CUDA_ERROR_UNKNOWN,
            12345,
        ] {
            assert!(!reports_no_device(&check("cuInit", code).unwrap_err()));
        }
        let other_backend = Error::Driver(DriverError {
            backend: "hip",
            call: "hipInit",
            name: "hipErrorNoDevice",
            code: i64::from(sys::CUDA_ERROR_NO_DEVICE),
        });
        assert!(!reports_no_device(&other_backend));
        assert!(!reports_no_device(&Error::DriverSymbolMissing {
            backend: BACKEND,
            symbol: "cuInit",
        }));
    }

    #[test]
    fn known_codes_have_the_driver_names() {
        let expected = [
            (0, "CUDA_SUCCESS"),
            (1, "CUDA_ERROR_INVALID_VALUE"),
            (2, "CUDA_ERROR_OUT_OF_MEMORY"),
            (3, "CUDA_ERROR_NOT_INITIALIZED"),
            (34, "CUDA_ERROR_STUB_LIBRARY"),
            (100, "CUDA_ERROR_NO_DEVICE"),
            (500, "CUDA_ERROR_NOT_FOUND"),
            (600, "CUDA_ERROR_NOT_READY"),
            (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
            (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
            (999, "CUDA_ERROR_UNKNOWN"),
        ];
        for (code, name) in expected {
            assert_eq!(result_name(code), name, "code {code}");
        }
    }

    #[test]
    fn unknown_codes_are_named_unrecognized_and_keep_their_number() {
        for code in [9, 99, 998, 1000, 12345, u32::MAX] {
            assert_eq!(result_name(code), UNRECOGNIZED_RESULT, "code {code}");
            assert_eq!(driver_error("cuInit", code).code, i64::from(code));
        }
    }

    #[test]
    fn name_table_is_sorted_by_code_without_repeats_and_complete_at_both_ends() {
        let codes: Vec<_> = sys::CURESULT_NAMES.iter().map(|&(code, _)| code).collect();
        assert!(codes.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(sys::CURESULT_NAMES.first(), Some(&(0, "CUDA_SUCCESS")));
        assert_eq!(
            sys::CURESULT_NAMES.last(),
            Some(&(999, "CUDA_ERROR_UNKNOWN"))
        );
        assert!(
            sys::CURESULT_NAMES.len() > 100,
            "the table covers every CUresult"
        );
    }

    #[test]
    fn check_passes_success_and_names_the_failed_call() {
        assert_eq!(check("cuInit", sys::CUDA_SUCCESS), Ok(()));
        let error = check(
            "cuMemHostRegister",
            sys::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        )
        .unwrap_err();
        assert_eq!(
            error,
            Error::Driver(DriverError {
                backend: "cuda",
                call: "cuMemHostRegister",
                name: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
                code: 712,
            })
        );
        let message = error.to_string();
        assert!(message.contains("cuMemHostRegister"), "{message}");
        assert!(
            message.contains("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712)"),
            "{message}"
        );
    }
}
