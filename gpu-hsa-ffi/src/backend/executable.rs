//! Code objects loaded for one agent: an HSA executable and the reader it came from (loading,
//! kernel-symbol lookup, destroying), and the standard kernel library as loaded on a device.

use core::ffi::{CStr, c_void};
use core::ptr;

use gpu_core::backend::library::LIBRARY;
use gpu_core::{Error, Result};
use gpu_hip_ffi::code_objects::CODE_OBJECTS;

use super::packets::KernelObject;
use crate::library::Hsa;
use crate::result::{driver_error, hsa};
use crate::sys;

/// A loaded code object: the executable and the reader it was loaded from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Executable {
    executable: sys::hsa_executable_t,
    reader: sys::hsa_code_object_reader_t,
}

/// The kernel library loaded on one device: its executable and each kernel's object.
pub(super) struct LoadedLibrary {
    pub(super) executable: Executable,
    pub(super) kernels: [KernelObject; LIBRARY.len()],
}

impl Executable {
    /// Reads `image` into an executable for `agent` and freezes it; on failure everything
    /// created on the way is destroyed again.
    pub(super) fn load(hsa: &Hsa, agent: sys::hsa_agent_t, image: &[u8]) -> Result<Self> {
        // Looked up first, so that the clean-up on the error paths cannot fail for a symbol.
        hsa.hsa_executable_destroy()?;
        hsa.hsa_code_object_reader_destroy()?;
        let mut reader = sys::hsa_code_object_reader_t::default();
        // SAFETY: `image` is `image.len()` bytes readable during the call; `reader` is valid
        // for writes.
        hsa!(
            hsa,
            hsa_code_object_reader_create_from_memory(
                image.as_ptr().cast(),
                image.len(),
                &mut reader
            )
        )?;
        let mut executable = sys::hsa_executable_t::default();
        // SAFETY: no options (null); `executable` is valid for writes.
        if let Err(error) = hsa!(
            hsa,
            hsa_executable_create_alt(
                sys::HSA_PROFILE_FULL,
                sys::HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                ptr::null(),
                &mut executable
            )
        ) {
            // SAFETY: the reader created above, destroyed once, on this path only.
            let _ = hsa!(hsa, hsa_code_object_reader_destroy(reader));
            return Err(error);
        }
        let loaded = Self { executable, reader };
        // SAFETY: the executable and reader created above and an agent the runtime reported;
        // no options (null) and no loaded-code-object out-parameter (null).
        let finished = hsa!(
            hsa,
            hsa_executable_load_agent_code_object(
                executable,
                agent,
                reader,
                ptr::null(),
                ptr::null_mut()
            )
        )
        .and_then(|()| {
            // SAFETY: the executable created above, its code object loaded; no options (null).
            hsa!(hsa, hsa_executable_freeze(executable, ptr::null()))
        });
        match finished {
            Ok(()) => Ok(loaded),
            Err(error) => {
                loaded.destroy(hsa);
                Err(error)
            }
        }
    }

    /// Destroys the executable and its reader (nothing to report: they are gone either way).
    pub(super) fn destroy(self, hsa: &Hsa) {
        // SAFETY: the executable this value names; its owner (a table entry, a device's library
        // slot, or a load that failed) gives it up here, so it is destroyed once.
        let _ = hsa!(hsa, hsa_executable_destroy(self.executable));
        // SAFETY: its reader, given up by the same owner.
        let _ = hsa!(hsa, hsa_code_object_reader_destroy(self.reader));
    }

    /// The kernel object and segment sizes of kernel `name` (its `name.kd` symbol) for `agent`.
    pub(super) fn kernel_object(
        self,
        hsa: &Hsa,
        agent: sys::hsa_agent_t,
        name: &CStr,
    ) -> Result<KernelObject> {
        let mut symbol_name = name.to_bytes().to_vec();
        symbol_name.extend_from_slice(b".kd\0");
        let mut symbol = sys::hsa_executable_symbol_t::default();
        // SAFETY: a live, frozen executable; `symbol_name` is NUL-terminated and `agent` read
        // during the call; `symbol` is valid for writes.
        hsa!(
            hsa,
            hsa_executable_get_symbol_by_name(
                self.executable,
                symbol_name.as_ptr().cast(),
                &agent,
                &mut symbol
            )
        )?;
        let mut object = KernelObject::default();
        let info = |attribute, value: *mut c_void| {
            // SAFETY: a symbol of a live executable; each use passes `value` valid for writes
            // of its attribute's type (a u64 kernel object, u32 segment sizes).
            hsa!(
                hsa,
                hsa_executable_symbol_get_info(symbol, attribute, value)
            )
        };
        info(
            sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
            (&mut object.object as *mut u64).cast(),
        )?;
        let sizes = [
            (
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                &mut object.kernarg_size,
            ),
            (
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                &mut object.group_size,
            ),
            (
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                &mut object.private_size,
            ),
        ];
        for (attribute, size) in sizes {
            info(attribute, (size as *mut u32).cast())?;
        }
        Ok(object)
    }
}

impl LoadedLibrary {
    /// The library from the first code object `agent` accepts, with each kernel's object; the
    /// last refusal when it accepts none, and the executable destroyed again when a kernel's
    /// symbol cannot be read.
    pub(super) fn load(hsa: &Hsa, agent: sys::hsa_agent_t) -> Result<Self> {
        let mut refusal = None;
        for image in CODE_OBJECTS {
            match Executable::load(hsa, agent, image) {
                Ok(executable) => {
                    let mut kernels = [KernelObject::default(); LIBRARY.len()];
                    for (kernel, entry) in kernels.iter_mut().zip(LIBRARY) {
                        match executable.kernel_object(hsa, agent, entry.symbol) {
                            Ok(object) => *kernel = object,
                            Err(error) => {
                                executable.destroy(hsa);
                                return Err(error);
                            }
                        }
                    }
                    return Ok(Self {
                        executable,
                        kernels,
                    });
                }
                Err(error) => refusal = Some(error),
            }
        }
        Err(refusal.unwrap_or(Error::Driver(driver_error(
            "hsa_executable_load_agent_code_object",
            sys::HSA_STATUS_ERROR_INVALID_ISA,
        ))))
    }
}
