//! The CUDA driver library, opened at run time, and its entry points: each is looked up on first
//! use through cuGetProcAddress, for the ABI the bindings declare, and cached.
//!
//! cuda.h hides ABI versions behind macros (its `cuMemHostRegister` is `cuMemHostRegister_v2`)
//! and CUDA 13 adds functions under old names with new signatures (`cuCtxGetDevice_v2` takes a
//! context), so a symbol's plain name does not say which function you get. NVIDIA's answer is
//! cuGetProcAddress(base name, CUDA version of the wanted ABI): every entry point here is
//! requested with the version that introduced the signature its `sys::PFN_*` type has (taken
//! from cudaTypedefs.h when the bindings were generated). Only cuGetProcAddress itself is
//! found with the system loader. An entry point whose ABI is newer than the installed driver is
//! reported missing without asking (cuGetProcAddress rejects versions above the driver's), and
//! everything else keeps working: nothing is looked up before it is needed.

use core::ffi::{CStr, c_int, c_void};
use core::ptr::{self, NonNull};
use std::sync::OnceLock;

use gpu_core::Error;
use gpu_ffi_loader::{EntryPointCache, open_library};

use crate::result::{BACKEND, driver_error};
use crate::sys;

/// The file names [`Driver::load`] tries, in order.
#[cfg(windows)]
pub const LIBRARY_NAMES: &[&str] = &["nvcuda.dll"];
/// The file names [`Driver::load`] tries, in order: the versioned name first, as driver packages
/// install only `libcuda.so.1` (the unversioned link comes with development packages).
#[cfg(not(windows))]
pub const LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// Every lookup asks for the legacy default stream's variants, as a program built without
/// per-thread default streams would get.
const LOOKUP_FLAGS: sys::cuuint64_t = sys::CU_GET_PROC_ADDRESS_LEGACY_STREAM as sys::cuuint64_t;

/// Finds an entry point for an ABI version: the driver's cuGetProcAddress in production, a fake
/// in tests.
pub(crate) trait ResolveEntryPoint: Send + Sync {
    /// The address of `symbol` (a base name such as `cuMemHostRegister`) with the ABI of CUDA
    /// `abi_version`; `Ok(None)` if the driver has no such function.
    fn resolve(&self, symbol: &CStr, abi_version: c_int) -> Result<Option<NonNull<c_void>>, Error>;
}

/// The inner function type of an `Option<fn>` pointer typedef.
trait OptionalFunction {
    type Function;
}

impl<F> OptionalFunction for Option<F> {
    type Function = F;
}

/// cuGetProcAddress as the driver exports it: with the status out-parameter (CUDA 12.0 and
/// later, exported as `cuGetProcAddress_v2`), or without it (CUDA 11.3 to 12.x).
#[derive(Clone, Copy)]
enum GetProcAddress {
    WithStatus(sys::PFN_cuGetProcAddress),
    WithoutStatus(<sys::PFN_cuGetProcAddress_v11030 as OptionalFunction>::Function),
}

impl GetProcAddress {
    /// Finds cuGetProcAddress in `library`, the newer export first.
    fn find(library: &libloading::Library) -> Result<Self, Error> {
        // SAFETY: the CUDA driver exports these names with these signatures (cuda.h 13.0 and
        // cudaTypedefs.h's PFN_cuGetProcAddress_v11030).
        unsafe {
            if let Ok(with_status) =
                library.get::<sys::PFN_cuGetProcAddress>(c"cuGetProcAddress_v2")
            {
                return Ok(Self::WithStatus(*with_status));
            }
            if let Ok(Some(without_status)) = library
                .get::<sys::PFN_cuGetProcAddress_v11030>(c"cuGetProcAddress")
                .map(|symbol| *symbol)
            {
                return Ok(Self::WithoutStatus(without_status));
            }
        }
        Err(Error::DriverSymbolMissing {
            backend: BACKEND,
            symbol: "cuGetProcAddress",
        })
    }
}

impl ResolveEntryPoint for GetProcAddress {
    fn resolve(&self, symbol: &CStr, abi_version: c_int) -> Result<Option<NonNull<c_void>>, Error> {
        let mut address = ptr::null_mut();
        let mut status = sys::CU_GET_PROC_ADDRESS_SUCCESS;
        // SAFETY: `symbol` is NUL-terminated, and both out-parameters are valid for writes.
        let code = unsafe {
            match *self {
                Self::WithStatus(get) => get(
                    symbol.as_ptr(),
                    &mut address,
                    abi_version,
                    LOOKUP_FLAGS,
                    &mut status,
                ),
                Self::WithoutStatus(get) => {
                    get(symbol.as_ptr(), &mut address, abi_version, LOOKUP_FLAGS)
                }
            }
        };
        match code {
            // Success with a null address or a not-found status: the driver has no such ABI.
            sys::CUDA_SUCCESS if status == sys::CU_GET_PROC_ADDRESS_SUCCESS => {
                Ok(NonNull::new(address))
            }
            sys::CUDA_SUCCESS => Ok(None),
            // How drivers before 12.0 say "no such symbol".
            sys::CUDA_ERROR_NOT_FOUND => Ok(None),
            failed => Err(Error::Driver(driver_error("cuGetProcAddress", failed))),
        }
    }
}

/// One driver function of the bindings.
#[derive(Debug)]
pub struct EntryPoint {
    /// Base name, as cuGetProcAddress expects it and as errors name the call.
    pub name: &'static str,
    /// The same, NUL-terminated.
    symbol: &'static CStr,
    /// The CUDA version that introduced the ABI of its `sys::PFN_*` type: drivers older than
    /// this lack it.
    pub abi_version: c_int,
}

/// Turns the generated entry-point table into the slot list and one accessor per function.
macro_rules! entry_point_accessors {
    ($(($name:ident, $symbol:literal, $declared:ident, $abi_version:literal, $pfn:ident)),* $(,)?) => {
        /// The cache slot of each entry point, in table order.
        #[allow(non_camel_case_types, clippy::enum_variant_names)]
        #[derive(Clone, Copy)]
        enum Slot {
            $($name,)*
        }

        /// Every driver function of the bindings, in the generated table's order.
        pub const ENTRY_POINTS: &[EntryPoint] = &[
            $(EntryPoint { name: stringify!($name), symbol: $symbol, abi_version: $abi_version },)*
        ];

        #[allow(non_snake_case)]
        impl Driver {
            $(
                #[doc = concat!(
                    "The driver's `", stringify!($name), "` (cuda.h: `", stringify!($declared),
                    "`, the ABI of CUDA ", stringify!($abi_version), "), looked up on first use ",
                    "and cached. The pointer is valid while this `Driver` lives."
                )]
                ///
                /// # Errors
                /// [`Error::DriverSymbolMissing`] if the driver does not have this ABI (too old),
                /// or [`Error::Driver`] if cuGetProcAddress itself failed.
                pub fn $name(&self) -> Result<sys::$pfn, Error> {
                    let address = self.entry_point(Slot::$name)?;
                    // SAFETY: the driver returned this address for this base name at the ABI
                    // version whose signature `sys::$pfn` has (the generator checked the
                    // signature against cudaTypedefs.h).
                    Ok(unsafe { core::mem::transmute::<*mut c_void, sys::$pfn>(address.as_ptr()) })
                }
            )*
        }
    };
}

sys::cuda_entry_points!(entry_point_accessors);

/// How many entry points the bindings have.
const ENTRY_POINT_COUNT: usize = ENTRY_POINTS.len();

/// The loaded CUDA driver: an open driver library and its entry points, each looked up on
/// first use and cached (a missing one is cached too).
///
/// Entry points are reached through one method per function, named as in cuda.h without the
/// ABI suffix: `driver.cuMemHostRegister()?` returns a `sys::PFN_cuMemHostRegister` to call.
/// Two threads using an entry point for the first time at once may both look it up; both get
/// the same address.
pub struct Driver {
    resolver: Box<dyn ResolveEntryPoint>,
    /// The version cuDriverGetVersion reported (e.g. 12040 for CUDA 12.4).
    driver_version: c_int,
    /// Per entry point: its address or "missing", once looked up.
    entry_points: EntryPointCache<ENTRY_POINT_COUNT>,
    /// Keeps the driver's code mapped while the entry points are in use.
    _library: Option<libloading::Library>,
}

impl core::fmt::Debug for Driver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Driver")
            .field("driver_version", &self.driver_version)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// Opens the driver library under the usual names ([`LIBRARY_NAMES`]) and reads its
    /// version. Does not call cuInit.
    ///
    /// # Errors
    /// [`Error::DriverLibraryNotFound`] if no name opens; [`Error::DriverSymbolMissing`] if the
    /// library has no cuGetProcAddress (a driver older than CUDA 11.3) or cuDriverGetVersion;
    /// [`Error::Driver`] if reading the version fails.
    pub fn load() -> Result<Self, Error> {
        // SAFETY: these are the CUDA driver's own file names.
        unsafe { Self::load_from(LIBRARY_NAMES) }
    }

    /// The driver loaded once for the whole process (by [`Driver::load`]); later calls return
    /// the same driver, or the same error.
    ///
    /// # Errors
    /// As [`Driver::load`].
    pub fn global() -> Result<&'static Self, Error> {
        static GLOBAL: OnceLock<Result<Driver, Error>> = OnceLock::new();
        GLOBAL
            .get_or_init(Self::load)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Like [`Driver::load`], trying the given file names (or paths) in order.
    ///
    /// # Safety
    /// Opening a library runs its initialisation code, and its `cuGetProcAddress` is then called
    /// with the CUDA driver's signature: each name must be a CUDA driver library or not exist.
    ///
    /// # Errors
    /// As [`Driver::load`].
    pub unsafe fn load_from(names: &[&str]) -> Result<Self, Error> {
        // SAFETY: the caller promises that each name is a CUDA driver library.
        let library = unsafe { open_library(BACKEND, names)? };
        let get_proc_address = GetProcAddress::find(&library)?;
        Self::with_resolver(Box::new(get_proc_address), Some(library))
    }

    /// A driver whose entry points come from `resolver`; reads the driver version through it.
    pub(crate) fn with_resolver(
        resolver: Box<dyn ResolveEntryPoint>,
        library: Option<libloading::Library>,
    ) -> Result<Self, Error> {
        let mut driver = Self {
            resolver,
            // Unknown until asked; no lookup is refused for being too new meanwhile.
            driver_version: c_int::MAX,
            entry_points: EntryPointCache::new(),
            _library: library,
        };
        // cuDriverGetVersion needs no cuInit. Called here rather than through the result layer,
        // which is built on the driver.
        let get = driver.cuDriverGetVersion()?;
        let mut version = 0;
        // SAFETY: `version` is valid for writes.
        crate::result::check("cuDriverGetVersion", unsafe { get(&mut version) })?;
        driver.driver_version = version;
        Ok(driver)
    }

    /// The installed driver's version, as cuDriverGetVersion reports it (1000 * major + 10 *
    /// minor: 12040 is CUDA 12.4).
    pub fn driver_version(&self) -> c_int {
        self.driver_version
    }

    /// Looks up every entry point of [`ENTRY_POINTS`] and returns the names of those this driver
    /// lacks (for hardware logs; a backend looks up each function when it first needs it).
    ///
    /// # Errors
    /// [`Error::Driver`] if a lookup itself failed.
    pub fn missing_entry_points(&self) -> Result<Vec<&'static str>, Error> {
        let mut missing = Vec::new();
        for (index, entry) in ENTRY_POINTS.iter().enumerate() {
            match self.entry_point_at(index) {
                Ok(_) => {}
                Err(Error::DriverSymbolMissing { .. }) => missing.push(entry.name),
                Err(other) => return Err(other),
            }
        }
        Ok(missing)
    }

    /// The address of the entry point in `slot`, looked up on first use.
    fn entry_point(&self, slot: Slot) -> Result<NonNull<c_void>, Error> {
        self.entry_point_at(slot as usize)
    }

    /// The address of the entry point at `index` of [`ENTRY_POINTS`], looked up on first use;
    /// one whose ABI is newer than the driver is missing without asking.
    fn entry_point_at(&self, index: usize) -> Result<NonNull<c_void>, Error> {
        let entry = &ENTRY_POINTS[index];
        self.entry_points.get(index, BACKEND, entry.name, || {
            if entry.abi_version > self.driver_version {
                Ok(None)
            } else {
                self.resolver.resolve(entry.symbol, entry.abi_version)
            }
        })
    }
}

#[cfg(test)]
mod tests;
