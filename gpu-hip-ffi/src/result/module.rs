//! Code: module images (code objects, or PTX on NVIDIA) and their functions, function
//! attributes, and kernel launches.

use core::ffi::{CStr, c_int, c_uint, c_void};
use core::ptr;

use gpu_core::Result;

use crate::library::Hip;
use crate::result::check;
use crate::sys;

/// hipModuleLoadData: loads a module image (a code object for the device's architecture; on
/// NVIDIA PTX or a cubin) on the current device.
///
/// # Safety
/// `image` points to a complete image HIP reads (PTX text ends with a NUL), readable for the
/// duration of the call.
pub unsafe fn load_data(hip: &Hip, image: *const c_void) -> Result<sys::hipModule_t> {
    let load = hip.hipModuleLoadData()?;
    let mut module = ptr::null_mut();
    // SAFETY: `module` is valid for writes; the caller's promise for the image.
    check("hipModuleLoadData", unsafe { load(&mut module, image) })?;
    Ok(module)
}

/// hipModuleUnload: unloads `module`; its functions become invalid.
///
/// # Safety
/// `module` is a live module, and nothing uses it or its functions afterwards.
pub unsafe fn unload(hip: &Hip, module: sys::hipModule_t) -> Result<()> {
    let unload = hip.hipModuleUnload()?;
    // SAFETY: the caller's promise that the module is live and not used again.
    check("hipModuleUnload", unsafe { unload(module) })
}

/// hipModuleGetFunction: the function called `name` in `module`.
///
/// # Safety
/// `module` is a live module.
pub unsafe fn function(
    hip: &Hip,
    module: sys::hipModule_t,
    name: &CStr,
) -> Result<sys::hipFunction_t> {
    let get = hip.hipModuleGetFunction()?;
    let mut function = ptr::null_mut();
    // SAFETY: `function` is valid for writes and `name` NUL-terminated; the caller's promise
    // for the module.
    check("hipModuleGetFunction", unsafe {
        get(&mut function, module, name.as_ptr())
    })?;
    Ok(function)
}

/// hipFuncGetAttribute: the value of `attribute` for `function`.
///
/// # Safety
/// `function` is a function of a live module.
pub unsafe fn function_attribute(
    hip: &Hip,
    attribute: sys::hipFunction_attribute,
    function: sys::hipFunction_t,
) -> Result<c_int> {
    let get = hip.hipFuncGetAttribute()?;
    let mut value = 0;
    // SAFETY: `value` is valid for writes; the caller's promise for the function.
    check("hipFuncGetAttribute", unsafe {
        get(&mut value, attribute, function)
    })?;
    Ok(value)
}

/// hipFuncSetAttribute: sets `attribute` of `function` (a module's function) to `value`.
///
/// # Safety
/// `function` is a function of a live module.
pub unsafe fn set_function_attribute(
    hip: &Hip,
    function: sys::hipFunction_t,
    attribute: sys::hipFuncAttribute,
    value: c_int,
) -> Result<()> {
    let set = hip.hipFuncSetAttribute()?;
    // SAFETY: the caller's promise for the function; HIP checks attribute and value.
    check("hipFuncSetAttribute", unsafe {
        set(function as *const c_void, attribute, value)
    })
}

/// The shape of a launch as hipModuleLaunchKernel takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Workgroups per dimension.
    pub grid: [c_uint; 3],
    /// Threads per workgroup per dimension.
    pub block: [c_uint; 3],
    /// Dynamic workgroup (shared) memory per workgroup, in bytes.
    pub shared_bytes: c_uint,
}

/// hipModuleLaunchKernel: enqueues `function` on `stream` with `shape` and the parameter array
/// `params` (one pointer per parameter, to a value of its type; no `extra` options).
///
/// # Safety
/// `function` is a function of a live module of the stream's device, `stream` a live stream
/// (or a default-stream handle), `params` one valid pointer per kernel parameter, each to a
/// value of that parameter's type, readable during the call; and every byte the kernel reaches
/// stays valid for its accesses, and untouched by anything that races with them, until it has
/// completed.
pub unsafe fn launch(
    hip: &Hip,
    function: sys::hipFunction_t,
    shape: LaunchShape,
    stream: sys::hipStream_t,
    params: *mut *mut c_void,
) -> Result<()> {
    let launch = hip.hipModuleLaunchKernel()?;
    let LaunchShape {
        grid,
        block,
        shared_bytes,
    } = shape;
    // SAFETY: the caller's promise for the function, the stream, the parameters and the memory
    // the kernel reaches; no `extra` options.
    check("hipModuleLaunchKernel", unsafe {
        launch(
            function,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared_bytes,
            stream,
            params,
            ptr::null_mut(),
        )
    })
}
