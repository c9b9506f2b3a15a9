//! Run-time loading shared by the driver crates (CUDA, HIP, HSA): a library opened under its
//! usual file names, and entry points looked up on first use and cached, missing ones included.
//!
//! A missing library or symbol is an [`Error`] value, never a panic, and nothing is looked up
//! before it is needed, so a library that lacks a newer function still serves every other one.
//! How a name becomes an address is the caller's: CUDA asks cuGetProcAddress for an ABI
//! version; HIP and HSA export plain symbols, which [`DynamicLibrary`] finds with dlsym, and
//! [`dlsym_library!`] turns a generated entry-point table into a library type with one typed
//! accessor per function.
//! [`ResultCodes`] names a driver's result codes from its generated table, and [`hw_bench`]
//! measures and reports the hardware benchmarks; [`recorder`] passes a sub-allocator's blocks to
//! gpu-recorder when it records the process.

pub mod hw_bench;
pub mod recorder;
mod result;

use core::ffi::{CStr, c_void};
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

use gpu_core::Error;

pub use libloading;
pub use result::ResultCodes;

/// The cache value of an entry point the library does not have (never a real address).
const MISSING: *mut c_void = ptr::without_provenance_mut(1);

/// Opens the first of `names` (file names or paths) that loads.
///
/// # Safety
/// Opening a library runs its initialisation code: each name must be the library the caller
/// means (a driver of `backend`) or not exist.
///
/// # Errors
/// [`Error::DriverLibraryNotFound`] naming every file tried and why each failed.
pub unsafe fn open_library(
    backend: &'static str,
    names: &[&str],
) -> Result<libloading::Library, Error> {
    let mut failures = Vec::with_capacity(names.len());
    for &name in names {
        // SAFETY: the caller promises that `name` is the library it means.
        match unsafe { libloading::Library::new(name) } {
            Ok(library) => return Ok(library),
            Err(error) => failures.push(with_causes(&error)),
        }
    }
    Err(Error::DriverLibraryNotFound {
        backend,
        tried: names.iter().map(|name| name.to_string()).collect(),
        message: if failures.is_empty() {
            String::from("no file name was given")
        } else {
            failures.join("; ")
        },
    })
}

/// An error's message followed by those of its causes (libloading puts the loader's own
/// message, which names the file, in the cause).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// `N` entry points, each looked up once and cached (a missing one too). Two threads using an
/// entry point for the first time at once may both look it up; both get the same answer.
pub struct EntryPointCache<const N: usize> {
    /// Per entry point: null until looked up, then its address or [`MISSING`].
    slots: [AtomicPtr<c_void>; N],
}

impl<const N: usize> Default for EntryPointCache<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> EntryPointCache<N> {
    /// A cache where nothing has been looked up.
    pub const fn new() -> Self {
        Self {
            slots: [const { AtomicPtr::new(ptr::null_mut()) }; N],
        }
    }

    /// The address of entry point `index`, from the cache or, the first time, from `resolve`
    /// (`Ok(None)`: the library has no such function).
    ///
    /// # Errors
    /// [`Error::DriverSymbolMissing`] naming `name` if the function is missing (now or at the
    /// first lookup); `resolve`'s own error, which is not cached.
    ///
    /// # Panics
    /// If `index` is not below `N` (the accessors generated from a table never pass one).
    pub fn get(
        &self,
        index: usize,
        backend: &'static str,
        name: &'static str,
        resolve: impl FnOnce() -> Result<Option<NonNull<c_void>>, Error>,
    ) -> Result<NonNull<c_void>, Error> {
        let cached = &self.slots[index];
        let missing = || Error::DriverSymbolMissing {
            backend,
            symbol: name,
        };
        match cached.load(Ordering::Acquire) {
            address if address == MISSING => return Err(missing()),
            address => {
                if let Some(found) = NonNull::new(address) {
                    return Ok(found);
                }
            }
        }
        let found = resolve()?;
        cached.store(found.map_or(MISSING, NonNull::as_ptr), Ordering::Release);
        found.ok_or_else(missing)
    }
}

/// A library that exports its functions as plain symbols (HIP, HSA), with `N` entry points
/// found by dlsym on first use.
pub struct DynamicLibrary<const N: usize> {
    backend: &'static str,
    cache: EntryPointCache<N>,
    /// Keeps the library's code mapped while the entry points are in use.
    library: libloading::Library,
}

impl<const N: usize> core::fmt::Debug for DynamicLibrary<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DynamicLibrary")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl<const N: usize> DynamicLibrary<N> {
    /// Opens the first of `names` that loads ([`open_library`]); looks nothing up yet.
    ///
    /// # Safety
    /// As [`open_library`]; and the entry points later asked for must have, in this library,
    /// the signatures their accessors declare.
    ///
    /// # Errors
    /// As [`open_library`].
    pub unsafe fn open(backend: &'static str, names: &[&str]) -> Result<Self, Error> {
        Ok(Self {
            backend,
            cache: EntryPointCache::new(),
            // SAFETY: the caller's promise.
            library: unsafe { open_library(backend, names)? },
        })
    }

    /// The address of entry point `index`, exported as `symbol`, looked up on first use.
    ///
    /// # Errors
    /// [`Error::DriverSymbolMissing`] naming `name` when the library does not export it.
    pub fn entry_point(
        &self,
        index: usize,
        name: &'static str,
        symbol: &CStr,
    ) -> Result<NonNull<c_void>, Error> {
        self.cache.get(index, self.backend, name, || {
            // SAFETY: the address is only returned, never called here; the accessors that call
            // it give it the signature the caller of `open` vouched for.
            let found = unsafe { self.library.get::<*mut c_void>(symbol) };
            Ok(found.ok().and_then(|symbol| NonNull::new(*symbol)))
        })
    }

    /// The names of `names` (the table's, in index order) that the library does not export,
    /// each looked up now (for logs and tests; accessors look up each function when needed).
    pub fn missing(&self, names: &[(&'static str, &'static CStr)]) -> Vec<&'static str> {
        names
            .iter()
            .enumerate()
            .filter(|(index, (name, symbol))| self.entry_point(*index, name, symbol).is_err())
            .map(|(_, (name, _))| *name)
            .collect()
    }
}

/// Declares a library type whose entry points come from a generated table: the type (holding a
/// [`DynamicLibrary`]), `load` (the usual file names), `load_from`, `global` (loaded once per
/// process), `missing_entry_points`, one accessor per row, and `ENTRY_POINTS` (every row's name
/// and symbol, in order).
///
/// Rows are `(name, c"symbol", path::to::PFN_type)`. Each accessor `name(&self)` returns the
/// function pointer, looked up on first use, or [`Error::DriverSymbolMissing`].
#[macro_export]
macro_rules! dlsym_library {
    (
        $(#[$meta:meta])*
        $vis:vis struct $owner:ident;
        backend: $backend:expr;
        file_names: $names:expr;
        $(($name:ident, $symbol:literal, $pfn:path)),* $(,)?
    ) => {
        /// Every entry point of the bindings, as `(name, symbol)`, in the table's order.
        pub const ENTRY_POINTS: &[(&str, &::core::ffi::CStr)] = &[$((stringify!($name), $symbol),)*];

        $(#[$meta])*
        $vis struct $owner {
            library: $crate::DynamicLibrary<{ ENTRY_POINTS.len() }>,
        }

        impl ::core::fmt::Debug for $owner {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(stringify!($owner)).finish_non_exhaustive()
            }
        }

        #[allow(non_snake_case)]
        impl $owner {
            /// Opens the library under its usual file names; looks nothing up yet.
            ///
            /// # Errors
            /// [`gpu_core::Error::DriverLibraryNotFound`] if no name opens.
            pub fn load() -> ::core::result::Result<Self, ::gpu_core::Error> {
                let names: &[&str] = $names;
                // SAFETY: these are the library's own file names.
                unsafe { Self::load_from(names) }
            }

            /// Like `load`, trying the given file names (or paths) in order.
            ///
            /// # Safety
            /// Opening a library runs its initialisation code, and its functions are later
            /// called with the signatures of the bindings: each name must be this library (or
            /// one exporting the same functions with the same signatures) or not exist.
            ///
            /// # Errors
            /// [`gpu_core::Error::DriverLibraryNotFound`] if no name opens.
            pub unsafe fn load_from(names: &[&str]) -> ::core::result::Result<Self, ::gpu_core::Error> {
                let backend: &'static str = $backend;
                Ok(Self {
                    // SAFETY: the caller's promise.
                    library: unsafe { $crate::DynamicLibrary::open(backend, names)? },
                })
            }

            /// The library loaded once for the whole process (by `load`); later calls return the
            /// same library, or the same error.
            ///
            /// # Errors
            /// As `load`.
            pub fn global() -> ::core::result::Result<&'static Self, ::gpu_core::Error> {
                static GLOBAL: ::std::sync::OnceLock<::core::result::Result<$owner, ::gpu_core::Error>> =
                    ::std::sync::OnceLock::new();
                GLOBAL.get_or_init(Self::load).as_ref().map_err(Clone::clone)
            }

            /// Looks up every entry point of `ENTRY_POINTS` and returns the names of those the
            /// library does not export.
            pub fn missing_entry_points(&self) -> Vec<&'static str> {
                self.library.missing(ENTRY_POINTS)
            }

            $crate::dlsym_library!(@accessors 0usize; $(($name, $symbol, $pfn))*);
        }
    };
    (@accessors $index:expr; ($name:ident, $symbol:literal, $pfn:path) $($rest:tt)*) => {
        #[doc = concat!(
            "The library's `", stringify!($name), "`, looked up on first use and cached. The ",
            "pointer is valid while `self` lives."
        )]
        ///
        /// # Errors
        /// [`gpu_core::Error::DriverSymbolMissing`] if the library does not export it.
        pub fn $name(&self) -> ::core::result::Result<$pfn, ::gpu_core::Error> {
            let address = self.library.entry_point($index, stringify!($name), $symbol)?;
            // SAFETY: the library exports this symbol with the signature the bindings declare
            // for it (generated from the library's own header).
            Ok(unsafe { ::core::mem::transmute::<*mut ::core::ffi::c_void, $pfn>(address.as_ptr()) })
        }
        $crate::dlsym_library!(@accessors $index + 1usize; $($rest)*);
    };
    (@accessors $index:expr;) => {};
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    #[test]
    fn an_entry_point_is_resolved_once_and_a_missing_one_is_remembered() {
        let cache = EntryPointCache::<2>::new();
        let calls = Cell::new(0);
        let address = NonNull::new(ptr::without_provenance_mut::<c_void>(0x1000)).unwrap();
        for _ in 0..3 {
            let found = cache.get(0, "hip", "hipInit", || {
                calls.set(calls.get() + 1);
                Ok(Some(address))
            });
            assert_eq!(found, Ok(address));
        }
        let missing = Error::DriverSymbolMissing {
            backend: "hip",
            symbol: "hipMallocAsync",
        };
        for _ in 0..3 {
            let found = cache.get(1, "hip", "hipMallocAsync", || {
                calls.set(calls.get() + 1);
                Ok(None)
            });
            assert_eq!(found, Err(missing.clone()));
        }
        assert_eq!(calls.get(), 2, "each entry point was looked up once");
    }

    #[test]
    fn a_failed_lookup_is_reported_and_not_cached() {
        let cache = EntryPointCache::<1>::new();
        let failure = Error::DriverLibraryNotFound {
            backend: "hsa",
            tried: vec![],
            message: "x".into(),
        };
        assert_eq!(
            cache.get(0, "hsa", "hsa_init", || Err(failure.clone())),
            Err(failure)
        );
        let address = NonNull::new(ptr::without_provenance_mut::<c_void>(0x2000)).unwrap();
        assert_eq!(
            cache.get(0, "hsa", "hsa_init", || Ok(Some(address))),
            Ok(address)
        );
    }

    #[test]
    fn a_missing_library_names_every_file_tried() {
        let names = [
            "libgpu-ffi-loader-absent-1.so",
            "libgpu-ffi-loader-absent-2.so",
        ];
        // SAFETY: neither file exists.
        let error = unsafe { open_library("hip", &names) }.unwrap_err();
        let Error::DriverLibraryNotFound {
            backend,
            tried,
            message,
        } = error
        else {
            panic!("expected DriverLibraryNotFound, got {error:?}");
        };
        assert_eq!(backend, "hip");
        assert_eq!(tried, names);
        assert!(
            message.contains(names[0]) && message.contains(names[1]),
            "{message}"
        );
        // SAFETY: nothing is opened.
        let error = unsafe { open_library("hip", &[]) }.unwrap_err();
        assert!(
            error.to_string().contains("no file name was given"),
            "{error}"
        );
    }

    type Strlen = unsafe extern "C" fn(*const core::ffi::c_char) -> usize;

    // The macro makes a library's public API; here the library is the test module's own.
    #[allow(unreachable_pub)]
    mod libc {
        use super::Strlen;

        dlsym_library! {
            /// The C library, as a test library.
            pub struct Libc;
            backend: "test";
            file_names: &["libgpu-ffi-loader-absent.so", "libc.so.6"];
            (strlen, c"strlen", Strlen),
            (gpu_ffi_loader_absent, c"gpu_ffi_loader_absent", Strlen),
        }
    }
    use libc::{ENTRY_POINTS, Libc};

    #[test]
    fn generated_accessors_find_exported_symbols_and_report_absent_ones() {
        let libc = Libc::load().unwrap();
        let strlen = libc.strlen().unwrap();
        // SAFETY: a NUL-terminated string.
        assert_eq!(unsafe { strlen(c"four".as_ptr()) }, 4);
        assert_eq!(
            libc.gpu_ffi_loader_absent().err(),
            Some(Error::DriverSymbolMissing {
                backend: "test",
                symbol: "gpu_ffi_loader_absent"
            })
        );
        assert_eq!(libc.missing_entry_points(), ["gpu_ffi_loader_absent"]);
        assert_eq!(ENTRY_POINTS.len(), 2);
        assert!(core::ptr::eq(
            Libc::global().unwrap(),
            Libc::global().unwrap()
        ));
    }
}
