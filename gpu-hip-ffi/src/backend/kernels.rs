//! Kernels: the standard library, loaded on each device at its first use, a kernel's workgroup
//! memory (its static size, the opt-in above the default), and the one launch of both forms.

use core::ffi::c_void;

use gpu_core::backend::library::find_for;
use gpu_core::backend::live::{HandleKey, Live, library_functions, workgroup_bytes_attribute};
use gpu_core::backend::{LaunchDims, check_same_device};
use gpu_core::{DeviceId, Error, Result};

use super::devices::LoadedLibrary;
use super::{HipBackend, HipKernel, HipModule, HipStream};
use crate::result::module::LaunchShape;
use crate::result::{self, BACKEND, driver_error};
use crate::sys;

/// The kernel images tried in order by hipModuleLoadData: on NVIDIA GPUs (feature `nvidia`)
/// the CUDA crate's PTX, NUL-terminated as a text image must be.
#[cfg(feature = "nvidia")]
const KERNEL_IMAGES: &[&[u8]] = &[gpu_cuda_ffi::kernels::PTX.as_bytes()];

/// The kernel images tried in order by hipModuleLoadData: on AMD GPUs the standard kernels'
/// code objects, one per target; the first the device accepts is used.
#[cfg(not(feature = "nvidia"))]
const KERNEL_IMAGES: &[&[u8]] = crate::code_objects::CODE_OBJECTS;

impl HipBackend {
    /// `Backend::kernel`: the library kernel `name` of `device`, its module loaded at first use.
    pub(super) fn library_kernel(&self, device: DeviceId, name: &str) -> Result<HipKernel> {
        let library_index = find_for(BACKEND, name)?;
        let (module, function) = self.library_function(device, library_index)?;
        Ok(HipKernel {
            function,
            device,
            module,
            library_index: Some(library_index),
        })
    }

    /// `Backend::kernel_static_workgroup_bytes`: the kernel's static workgroup memory, as HIP
    /// reports it.
    pub(super) fn static_workgroup_bytes(&self, kernel: HipKernel) -> Result<u32> {
        let _module = self.live_kernel(kernel)?;
        let _scope = self.enter(kernel.device)?;
        // SAFETY: a function of a live module of the device (held).
        let bytes = unsafe {
            result::module::function_attribute(
                self.hip,
                sys::HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                kernel.function,
            )
        }?;
        Ok(u32::try_from(bytes).unwrap_or(0))
    }

    /// `Backend::kernel_allow_workgroup_bytes`: lets the kernel use `bytes` of dynamic workgroup
    /// memory.
    pub(super) fn allow_workgroup_bytes(&self, kernel: HipKernel, bytes: u32) -> Result<()> {
        let _module = self.live_kernel(kernel)?;
        let state = self.device(kernel.device)?;
        if bytes <= state.info.workgroup.default_per_block {
            return Ok(());
        }
        let value = workgroup_bytes_attribute(bytes, kernel.library_index)?;
        let _scope = self.enter(kernel.device)?;
        // SAFETY: a function of a live module of the device (held).
        unsafe {
            result::module::set_function_attribute(
                self.hip,
                kernel.function,
                sys::hipFuncAttributeMaxDynamicSharedMemorySize,
                value,
            )
        }
    }

    /// The function `library_index` of `device`'s kernel library and the library module's
    /// key, loading the module on first use.
    fn library_function(
        &self,
        device: DeviceId,
        library_index: usize,
    ) -> Result<(HandleKey<HipModule>, sys::hipFunction_t)> {
        let state = self.device(device)?;
        let mut slot = state
            .library
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(loaded) = slot.as_ref() {
            return Ok((loaded.module.key, loaded.functions[library_index]));
        }
        // Looked up before loading (and cached from then on), so that unloading on an error
        // path cannot fail for a missing symbol (which would leak the module and report the
        // lookup instead of the error).
        self.hip.hipModuleUnload()?;
        let _scope = self.enter(device)?;
        let module = self.load_module()?;
        let functions = library_functions(
            module,
            // SAFETY: the module was just loaded on the current device.
            |module, symbol| unsafe { result::module::function(self.hip, module, symbol) },
            // SAFETY: the module was just loaded and nothing else refers to it.
            |module| drop(unsafe { result::module::unload(self.hip, module) }),
        )?;
        let module = self.register_module(module, device);
        let function = functions[library_index];
        *slot = Some(LoadedLibrary { module, functions });
        Ok((module.key, function))
    }

    /// `kernel`'s module, live, held until the guard drops: a kernel of an unloaded module (or
    /// of a library from before its device's reset) is [`Error::StaleHandle`] naming a kernel.
    fn live_kernel(&self, kernel: HipKernel) -> Result<Live<'_, HipModule>> {
        self.modules.get_as(kernel.module, "kernel")
    }

    /// Loads the first of [`KERNEL_IMAGES`] the current device accepts; the last refusal is
    /// the error when none does.
    fn load_module(&self) -> Result<sys::hipModule_t> {
        let mut refusal = Error::Driver(driver_error(
            "hipModuleLoadData",
            sys::hipErrorNoBinaryForGpu,
        ));
        for image in KERNEL_IMAGES {
            // SAFETY: an embedded image, complete and static.
            match unsafe { result::module::load_data(self.hip, image.as_ptr().cast()) } {
                Ok(module) => return Ok(module),
                Err(error) => refusal = error,
            }
        }
        Err(refusal)
    }

    /// The one hipModuleLaunchKernel of both launch forms.
    ///
    /// # Safety
    /// As [`Backend::launch_packed`].
    ///
    /// [`Backend::launch_packed`]: gpu_core::backend::Backend::launch_packed
    pub(super) unsafe fn launch_with(
        &self,
        stream: HipStream,
        kernel: HipKernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        check_same_device(stream.device, kernel.device)?;
        let (stream, _module) = (self.streams.get(stream.key)?, self.live_kernel(kernel)?);
        let _scope = self.enter(stream.device)?;
        let shape = LaunchShape {
            grid: dims.grid,
            block: dims.block,
            shared_bytes: dims.dynamic_workgroup_bytes,
        };
        // SAFETY: a function of a live module and a live stream of the device (both held), which
        // is current; the caller's promise for the parameters and the memory the kernel reaches.
        unsafe { result::module::launch(self.hip, kernel.function, shape, stream.raw, params) }
    }
}
