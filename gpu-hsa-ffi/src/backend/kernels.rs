//! Kernels: the standard library loaded on a device at its first use, programs' code objects as
//! modules, kernel lookup, and launches as AQL dispatch packets with kernarg buffers.

use core::ffi::{CStr, c_void};

use gpu_core::backend::library::{LIBRARY, ParamKind, find_for};
use gpu_core::backend::{KernelArg, LaunchDims, check_same_device};
use gpu_core::{DeviceId, Error, Result};

use super::executable::{Executable, LoadedLibrary};
use super::handles::MODULE_KERNEL;
use super::image::{ELF_HEADER_BYTES, elf_image_size};
use super::packets::{self, args_from_parameter_array, dispatch_packet};
use super::signals::barrier_packets;
use super::stream::{Packet, Producer};
use super::{HsaBackend, HsaKernel, HsaModule, HsaStream, lock, stale};
use crate::result::BACKEND;
use crate::sys;

/// The error for a module handle the backend has no executable for.
fn no_module() -> Error {
    stale(
        "module handle (unloaded or foreign)",
        sys::HSA_STATUS_ERROR_INVALID_EXECUTABLE,
    )
}

impl HsaBackend {
    /// The library kernel `library_index` on `device`, loading the library on first use (the
    /// first code object the agent accepts).
    pub(super) fn library_kernel(
        &self,
        device: DeviceId,
        library_index: usize,
    ) -> Result<HsaKernel> {
        let state = self.device(device)?;
        let mut slot = lock(&state.library);
        let loaded = match slot.as_ref() {
            Some(loaded) => loaded,
            None => slot.insert(LoadedLibrary::load(self.hsa, state.agent)?),
        };
        Ok(HsaKernel {
            object: loaded.kernels[library_index],
            device,
            library_index: Some(library_index),
        })
    }

    /// [`Backend::kernel`](gpu_core::backend::Backend::kernel): the library kernel called
    /// `name` on `device`.
    pub(super) fn library_kernel_named(&self, device: DeviceId, name: &str) -> Result<HsaKernel> {
        let library_index = find_for(BACKEND, name)?;
        self.library_kernel(device, library_index)
    }

    /// [`Backend::module_load`](gpu_core::backend::Backend::module_load): the code object, its
    /// size read from its ELF header, loaded into an executable for the device's agent.
    ///
    /// # Safety
    /// The trait's: `image` is a complete AMDGPU code object.
    pub(super) unsafe fn load_module(
        &self,
        device: DeviceId,
        image: *const c_void,
    ) -> Result<HsaModule> {
        if image.is_null() {
            return Err(Error::NullPointer {
                what: "module image",
            });
        }
        let state = self.device(device)?;
        // SAFETY: the caller's promise: a complete image, so at least an ELF header.
        let header = unsafe { &*image.cast::<[u8; ELF_HEADER_BYTES]>() };
        let size = elf_image_size(header)?;
        // SAFETY: the caller's promise: the image is complete, `size` bytes by its header.
        let bytes = unsafe { core::slice::from_raw_parts(image.cast::<u8>(), size) };
        let loaded = Executable::load(self.hsa, state.agent, bytes)?;
        let mut tables = lock(&self.tables);
        let serial = tables.serial();
        tables.modules.insert(serial, loaded);
        Ok(HsaModule { serial, device })
    }

    /// [`Backend::module_unload`](gpu_core::backend::Backend::module_unload): destroys the
    /// module's executable and reader.
    pub(super) fn unload_module(&self, module: HsaModule) -> Result<()> {
        self.device(module.device)?;
        let loaded = lock(&self.tables)
            .modules
            .remove(&module.serial)
            .ok_or(no_module())?;
        loaded.destroy(self.hsa);
        Ok(())
    }

    /// [`Backend::module_kernel`](gpu_core::backend::Backend::module_kernel): the kernel's
    /// `NAME.kd` symbol in the module's executable.
    pub(super) fn module_kernel_named(&self, module: HsaModule, name: &CStr) -> Result<HsaKernel> {
        let state = self.device(module.device)?;
        let loaded = lock(&self.tables)
            .modules
            .get(&module.serial)
            .copied()
            .ok_or(no_module())?;
        Ok(HsaKernel {
            object: loaded.kernel_object(self.hsa, state.agent, name)?,
            device: module.device,
            library_index: None,
        })
    }

    /// [`Backend::kernel_allow_workgroup_bytes`](gpu_core::backend::Backend::kernel_allow_workgroup_bytes):
    /// checks `bytes` and the kernel's static part against the device's workgroup memory.
    pub(super) fn allow_workgroup_bytes(&self, kernel: HsaKernel, bytes: u32) -> Result<()> {
        let limit = self
            .device(kernel.device)?
            .info
            .workgroup
            .max_per_block_opt_in;
        let required = u64::from(bytes) + u64::from(kernel.object.group_size);
        if required > u64::from(limit) {
            return Err(Error::LimitExceeded {
                what: "dynamic workgroup memory per workgroup",
                required: required as usize,
                limit: limit as usize,
                detail: vec![format!("kernel {}", kernel.name())],
            });
        }
        Ok(())
    }

    /// Enqueues a dispatch of `kernel` with `args` (already checked against its parameters)
    /// after the stream's previous operation.
    ///
    /// # Safety
    /// [`Backend::launch`](gpu_core::backend::Backend::launch)'s.
    pub(super) unsafe fn enqueue_dispatch(
        &self,
        stream: HsaStream,
        kernel: HsaKernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()> {
        check_same_device(stream.device, kernel.device)?;
        let state = self.stream_state(stream)?;
        // The shape is checked before anything is allocated.
        dispatch_packet(&kernel.object, &dims, 0, sys::hsa_signal_t::default())?;
        let producer = Producer::new(self.hsa)?;
        let kernargs = packets::kernarg_bytes(args, kernel.object.kernarg_size as usize);
        let scratch = self.scratch(&kernargs)?;
        let mut state = lock(&state);
        let queue = state.queue;
        self.enqueue_op(&mut state, true, scratch, None, |dependencies, signal| {
            let dispatch = dispatch_packet(&kernel.object, &dims, scratch.unwrap_or(0), signal)?;
            let mut all = barrier_packets(dependencies, None);
            all.push(Packet::new(
                &dispatch,
                packets::header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH),
                dispatch.setup,
            ));
            // SAFETY: a live queue; the kernel object lives as long as the backend, the
            // kernarg buffer and signal until the chain retires the operation.
            unsafe { producer.submit(queue, &all) };
            Ok(())
        })
    }
}

/// Checks a launch's `args`: against a library kernel's parameters
/// ([`Error::KernelArgumentMismatch`]), or for a module's kernel, that they fit its kernarg
/// segment ([`Backend::launch`](gpu_core::backend::Backend::launch)).
pub(super) fn check_arguments(kernel: HsaKernel, args: &[KernelArg]) -> Result<()> {
    match kernel.library_index {
        Some(index) => LIBRARY[index].check_arguments(args)?,
        None => {
            let kinds: Vec<ParamKind> = args.iter().map(ParamKind::of).collect();
            let size = gpu_hip_ffi::code_objects::kernarg_layout(&kinds).size;
            if size > kernel.object.kernarg_size as usize {
                return Err(Error::KernelArgumentMismatch {
                    kernel: MODULE_KERNEL,
                    expected: "arguments that fit the kernel's kernarg segment",
                });
            }
        }
    }
    Ok(())
}

/// The arguments of a [`Backend::launch_packed`](gpu_core::backend::Backend::launch_packed): a
/// library kernel's parameter array read by its parameter table; a module's kernel has no table
/// here, so it is [`Error::Unsupported`].
///
/// # Safety
/// For a library kernel, `params` points to one valid pointer per parameter, each to a value of
/// that parameter's type (the trait's promise).
pub(super) unsafe fn packed_arguments(
    kernel: HsaKernel,
    params: *mut *mut c_void,
) -> Result<Vec<KernelArg>> {
    let Some(index) = kernel.library_index else {
        return Err(Error::Unsupported {
            backend: BACKEND,
            what: "launching a module's kernel with a parameter array (use launch)",
        });
    };
    // SAFETY: the caller's promise: one pointer per parameter, to a value of its type.
    unsafe { args_from_parameter_array(LIBRARY[index].params, params) }
}
