//! `hsa_status_t` codes turned into the toolkit's errors, keeping HSA's own name and number;
//! names come from a table generated from the headers, so naming a code needs no library.

use gpu_core::{DriverError, Error};
use gpu_ffi_loader::ResultCodes;

use crate::sys;

/// The backend name carried by every error of this crate.
pub const BACKEND: &str = "hsa";

/// HSA's status codes (hsa.h's and hsa_ext_amd.h's additions).
const CODES: ResultCodes = ResultCodes {
    backend: BACKEND,
    success: sys::HSA_STATUS_SUCCESS,
    names: sys::HSA_STATUS_NAMES,
    unrecognized: "unrecognized hsa_status_t",
};

/// HSA's name for `code` (`HSA_STATUS_ERROR_OUT_OF_RESOURCES` for 0x1008).
pub fn status_name(code: sys::hsa_status_t) -> &'static str {
    CODES.name(code)
}

/// The error for HSA function `call` having returned `code`.
pub fn driver_error(call: &'static str, code: sys::hsa_status_t) -> DriverError {
    CODES.error(call, code)
}

/// `Ok` for `HSA_STATUS_SUCCESS`, else [`Error::Driver`] naming `call` and the code.
///
/// # Errors
/// [`Error::Driver`] when `code` is not `HSA_STATUS_SUCCESS`.
pub fn check(call: &'static str, code: sys::hsa_status_t) -> Result<(), Error> {
    CODES.check(call, code)
}

/// Calls HSA function `$name` of the library `$hsa` through the loader and [`check`]s its
/// status, naming the call: `hsa!(hsa, hsa_signal_destroy(signal))`. The call is unsafe, so
/// each use has its own `// SAFETY:` comment for its arguments.
macro_rules! hsa {
    ($hsa:expr, $name:ident($($argument:expr),* $(,)?)) => {
        $hsa.$name().and_then(|function| {
            // SAFETY: the `// SAFETY:` comment at each use says why its arguments are valid
            // for the function it names.
            $crate::result::check(stringify!($name), unsafe { function($($argument),*) })
        })
    };
}
pub(crate) use hsa;

/// Whether `error` says there is no AMD GPU to use: hsa_init's
/// `HSA_STATUS_ERROR_OUT_OF_RESOURCES` (what ROCm 5.2.3's runtime reports when /dev/kfd is
/// absent, observed on these machines), or an initialised runtime without GPU agents (the
/// backend's `HSA_STATUS_ERROR_INVALID_AGENT` from the agent scan). Hardware tests report
/// "skipped: no device" for it.
pub fn reports_no_device(error: &Error) -> bool {
    match error {
        Error::Driver(DriverError { call, .. }) if *call == "hsa_init" => {
            CODES.is_one_of(error, &[sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES])
        }
        _ => *error == no_gpu_agent(),
    }
}

/// The error for an initialised HSA runtime without GPU agents (the backend's open reports
/// it; [`reports_no_device`] says so).
pub(crate) fn no_gpu_agent() -> Error {
    Error::Driver(driver_error(
        "hsa_iterate_agents (no GPU agent)",
        sys::HSA_STATUS_ERROR_INVALID_AGENT,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_have_hsas_names() {
        let expected = [
            (0, "HSA_STATUS_SUCCESS"),
            (1, "HSA_STATUS_INFO_BREAK"),
            (40, "HSA_STATUS_ERROR_INVALID_MEMORY_POOL"),
            (0x1000, "HSA_STATUS_ERROR"),
            (0x1008, "HSA_STATUS_ERROR_OUT_OF_RESOURCES"),
            (0x100b, "HSA_STATUS_ERROR_NOT_INITIALIZED"),
        ];
        for (code, name) in expected {
            assert_eq!(status_name(code), name, "code {code:#x}");
        }
        assert_eq!(status_name(2), "unrecognized hsa_status_t");
    }

    #[test]
    fn only_hsa_init_out_of_resources_reports_no_device() {
        let no_device = check("hsa_init", sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES).unwrap_err();
        assert!(reports_no_device(&no_device));
        let elsewhere =
            check("hsa_queue_create", sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES).unwrap_err();
        assert!(!reports_no_device(&elsewhere));
        assert!(!reports_no_device(
            &check("hsa_init", sys::HSA_STATUS_ERROR).unwrap_err()
        ));
        assert!(reports_no_device(&no_gpu_agent()));
        assert!(!reports_no_device(
            &check("hsa_iterate_agents", sys::HSA_STATUS_ERROR_INVALID_AGENT).unwrap_err()
        ));
    }
}
