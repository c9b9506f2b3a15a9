//! The program's modules: loading an image on a device, unloading it (its kernels go stale with
//! it) and looking a kernel up by name; each recorded among the live modules.

use core::ffi::{CStr, c_void};

use gpu_core::{DeviceId, Error, Result};

use super::{HipBackend, HipKernel, HipModule};
use crate::result;
use crate::sys;

impl HipBackend {
    /// Records a module just loaded on `device` as live.
    pub(super) fn register_module(&self, raw: sys::hipModule_t, device: DeviceId) -> HipModule {
        self.modules
            .register(device, |key| HipModule { raw, device, key })
    }

    /// `Backend::module_load`: loads the image on `device`, recorded as live.
    ///
    /// # Safety
    /// As `Backend::module_load`.
    pub(super) unsafe fn load_module_image(
        &self,
        device: DeviceId,
        image: *const c_void,
    ) -> Result<HipModule> {
        if image.is_null() {
            return Err(Error::NullPointer {
                what: "module image",
            });
        }
        let _scope = self.enter(device)?;
        // SAFETY: the caller's promise for the image.
        let raw = unsafe { result::module::load_data(self.hip, image) }?;
        Ok(self.register_module(raw, device))
    }

    /// `Backend::module_unload`: unloads a live module once no other call uses it or its kernels.
    pub(super) fn unload_module(&self, module: HipModule) -> Result<()> {
        self.modules
            .destroy(module.key, std::thread::yield_now, |module| {
                let _scope = self.enter(module.device)?;
                // SAFETY: a live module of the device, just taken out of the live modules after
                // the last call using it or its kernels returned, so nothing uses them again.
                unsafe { result::module::unload(self.hip, module.raw) }
            })
    }

    /// `Backend::module_kernel`: the kernel `name` of a live module.
    pub(super) fn module_kernel_named(&self, module: HipModule, name: &CStr) -> Result<HipKernel> {
        let module = self.modules.get(module.key)?;
        let _scope = self.enter(module.device)?;
        // SAFETY: a live module of the device (held).
        let function = unsafe { result::module::function(self.hip, module.raw, name) }?;
        Ok(HipKernel {
            function,
            device: module.device,
            module: module.key,
            library_index: None,
        })
    }
}
