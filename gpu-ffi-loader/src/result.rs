//! A driver's result codes turned into the toolkit's errors, keeping the driver's own name and
//! number; names come from a table generated from the headers, so naming a code needs no driver.

use gpu_core::{DriverError, Error};

/// A driver's result codes: its backend name, its success code and its generated code-to-name
/// table (sorted by code, as `cargo xtask bindgen` writes it).
#[derive(Debug)]
pub struct ResultCodes {
    /// The backend name carried by every error.
    pub backend: &'static str,
    /// The code that means success.
    pub success: u32,
    /// Every code the headers name, sorted by code.
    pub names: &'static [(u32, &'static str)],
    /// The name given to a code the table does not have (a driver newer than the headers).
    pub unrecognized: &'static str,
}

impl ResultCodes {
    /// The driver's name for `code`, or [`ResultCodes::unrecognized`].
    pub fn name(&self, code: u32) -> &'static str {
        match self.names.binary_search_by_key(&code, |&(known, _)| known) {
            Ok(index) => self.names[index].1,
            Err(_) => self.unrecognized,
        }
    }

    /// The error for driver function `call` having returned `code`.
    pub fn error(&self, call: &'static str, code: u32) -> DriverError {
        DriverError {
            backend: self.backend,
            call,
            name: self.name(code),
            code: i64::from(code),
        }
    }

    /// `Ok` for the success code, else [`Error::Driver`] naming `call` and the code.
    ///
    /// # Errors
    /// [`Error::Driver`] when `code` is not the success code.
    pub fn check(&self, call: &'static str, code: u32) -> Result<(), Error> {
        if code == self.success {
            Ok(())
        } else {
            Err(Error::Driver(self.error(call, code)))
        }
    }

    /// Whether `error` is this driver's error with one of `codes`.
    pub fn is_one_of(&self, error: &Error, codes: &[u32]) -> bool {
        matches!(
            error,
            Error::Driver(DriverError { backend, code, .. })
                if *backend == self.backend && codes.iter().any(|&c| i64::from(c) == *code)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODES: ResultCodes = ResultCodes {
        backend: "test",
        success: 0,
        names: &[(0, "OK"), (2, "OUT_OF_MEMORY"), (100, "NO_DEVICE")],
        unrecognized: "unrecognized code",
    };

    #[test]
    fn codes_are_named_from_the_table_and_unknown_ones_keep_their_number() {
        assert_eq!(CODES.name(2), "OUT_OF_MEMORY");
        assert_eq!(CODES.name(100), "NO_DEVICE");
        assert_eq!(CODES.name(1), "unrecognized code");
        assert_eq!(CODES.error("f", u32::MAX).code, i64::from(u32::MAX));
    }

    #[test]
    fn check_passes_success_and_names_the_failed_call() {
        assert_eq!(CODES.check("init", 0), Ok(()));
        let error = CODES.check("init", 100).unwrap_err();
        assert_eq!(
            error,
            Error::Driver(DriverError {
                backend: "test",
                call: "init",
                name: "NO_DEVICE",
                code: 100
            })
        );
        assert!(CODES.is_one_of(&error, &[2, 100]));
        assert!(!CODES.is_one_of(&error, &[2]));
        let other_backend = Error::Driver(DriverError {
            backend: "other",
            call: "init",
            name: "NO_DEVICE",
            code: 100,
        });
        assert!(!CODES.is_one_of(&other_backend, &[100]));
    }
}
