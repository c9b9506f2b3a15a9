//! HIP's calls, typed: one small function per HIP call, by area ([`device`], [`memory`],
//! [`stream`], [`event`], [`module`], [`graph`], [`vm`]), as the CUDA crate's `result` module has them. Each looks
//! its function up through [`Hip`](crate::Hip) (cached after the first use), passes its
//! out-parameters itself, and returns the value or the failure as [`Error::Driver`] with the
//! call's name and the code. A call that takes raw handles or pointers HIP would dereference
//! (a destroyed stream, a freed address) is an `unsafe fn` whose `# Safety` section says what
//! the caller vouches for; one that takes only values is safe.
//!
//! Below them, `hipError_t` codes turned into the toolkit's errors, keeping HIP's own name and
//! number; names come from a table generated from the header, so naming a code needs no
//! library.

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
pub const BACKEND: &str = "hip";

/// HIP's result codes.
const CODES: ResultCodes = ResultCodes {
    backend: BACKEND,
    success: sys::hipSuccess,
    names: sys::HIP_ERROR_NAMES,
    unrecognized: "unrecognized hipError_t",
};

/// HIP's name for `code` (`hipErrorNoDevice` for 100).
pub fn error_name(code: sys::hipError_t) -> &'static str {
    CODES.name(code)
}

/// The error for HIP function `call` having returned `code`.
pub fn driver_error(call: &'static str, code: sys::hipError_t) -> DriverError {
    CODES.error(call, code)
}

/// `Ok` for `hipSuccess`, else [`Error::Driver`] naming `call` and the code.
///
/// # Errors
/// [`Error::Driver`] when `code` is not `hipSuccess`.
pub fn check(call: &'static str, code: sys::hipError_t) -> Result<(), Error> {
    CODES.check(call, code)
}

/// Whether `error` is HIP saying this machine has no device for it (`hipErrorNoDevice`, or
/// `hipErrorInsufficientDriver`: ROCm's runtime on a machine without the amdgpu driver).
/// Hardware tests report "skipped: no device" for it.
pub fn reports_no_device(error: &Error) -> bool {
    CODES.is_one_of(
        error,
        &[sys::hipErrorNoDevice, sys::hipErrorInsufficientDriver],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_have_hips_names_and_aliases_the_first_declared_one() {
        let expected = [
            (0, "hipSuccess"),
            (1, "hipErrorInvalidValue"),
            (2, "hipErrorOutOfMemory"),
            (3, "hipErrorNotInitialized"),
            (100, "hipErrorNoDevice"),
            (400, "hipErrorInvalidHandle"),
            (600, "hipErrorNotReady"),
            (712, "hipErrorHostMemoryAlreadyRegistered"),
            (713, "hipErrorHostMemoryNotRegistered"),
            (999, "hipErrorUnknown"),
        ];
        for (code, name) in expected {
            assert_eq!(error_name(code), name, "code {code}");
        }
        assert_eq!(error_name(12345), "unrecognized hipError_t");
    }

    #[test]
    fn no_device_is_recognised_and_other_codes_are_not() {
        assert!(reports_no_device(
            &check("hipInit", sys::hipErrorNoDevice).unwrap_err()
        ));
        assert!(!reports_no_device(
            &check("hipInit", sys::hipErrorInvalidValue).unwrap_err()
        ));
        assert_eq!(check("hipInit", sys::hipSuccess), Ok(()));
    }
}
