//! Code: module images and their functions, function attributes, kernel launches, and
//! context-independent libraries (CUDA 12).

use core::ffi::{CStr, c_int, c_uint, c_void};
use core::ptr;

use gpu_core::Result;

use crate::driver::Driver;
use crate::result::check;
use crate::sys;

/// cuModuleLoadData: loads a module image (PTX text, JIT-compiled by the driver, a cubin or a
/// fatbin) into the current context.
///
/// # Safety
/// `image` points to a complete image the driver reads (PTX text ends with a NUL), readable
/// for the duration of the call.
pub unsafe fn load_data(driver: &Driver, image: *const c_void) -> Result<sys::CUmodule> {
    let load = driver.cuModuleLoadData()?;
    let mut module = ptr::null_mut();
    // SAFETY: `module` is valid for writes; the caller's promise for the image.
    check("cuModuleLoadData", unsafe { load(&mut module, image) })?;
    Ok(module)
}

/// cuModuleUnload: unloads `module`; its functions become invalid.
///
/// # Safety
/// `module` is a live module of the current context, and nothing uses it or its functions
/// afterwards.
pub unsafe fn unload(driver: &Driver, module: sys::CUmodule) -> Result<()> {
    let unload = driver.cuModuleUnload()?;
    // SAFETY: the caller's promise that the module is live and not used again.
    check("cuModuleUnload", unsafe { unload(module) })
}

/// cuModuleGetFunction: the function called `name` in `module` (a name the module lacks is
/// `CUDA_ERROR_NOT_FOUND`).
///
/// # Safety
/// `module` is a live module.
pub unsafe fn function(
    driver: &Driver,
    module: sys::CUmodule,
    name: &CStr,
) -> Result<sys::CUfunction> {
    let get = driver.cuModuleGetFunction()?;
    let mut function = ptr::null_mut();
    // SAFETY: `function` is valid for writes and `name` NUL-terminated; the caller's promise
    // for the module.
    check("cuModuleGetFunction", unsafe {
        get(&mut function, module, name.as_ptr())
    })?;
    Ok(function)
}

/// cuFuncGetAttribute: the value of `attribute` for `function`.
///
/// # Safety
/// `function` is a function of a live module.
pub unsafe fn function_attribute(
    driver: &Driver,
    attribute: sys::CUfunction_attribute,
    function: sys::CUfunction,
) -> Result<c_int> {
    let get = driver.cuFuncGetAttribute()?;
    let mut value = 0;
    // SAFETY: `value` is valid for writes; the caller's promise for the function.
    check("cuFuncGetAttribute", unsafe {
        get(&mut value, attribute, function)
    })?;
    Ok(value)
}

/// cuFuncGetParamInfo: the offset and size in bytes of parameter `index` of `function`, or
/// `None` past its last parameter (the driver says `CUDA_ERROR_INVALID_VALUE`).
///
/// # Safety
/// `function` is a function of a live module.
pub unsafe fn param_info(
    driver: &Driver,
    function: sys::CUfunction,
    index: usize,
) -> Result<Option<(usize, usize)>> {
    let get = driver.cuFuncGetParamInfo()?;
    let (mut offset, mut size) = (0, 0);
    // SAFETY: both outputs are valid for writes; the caller's promise for the function.
    match unsafe { get(function, index, &mut offset, &mut size) } {
        sys::CUDA_ERROR_INVALID_VALUE => Ok(None),
        code => check("cuFuncGetParamInfo", code).map(|()| Some((offset, size))),
    }
}

/// cuFuncSetAttribute: sets `attribute` of `function` to `value`.
///
/// # Safety
/// `function` is a function of a live module.
pub unsafe fn set_function_attribute(
    driver: &Driver,
    function: sys::CUfunction,
    attribute: sys::CUfunction_attribute,
    value: c_int,
) -> Result<()> {
    let set = driver.cuFuncSetAttribute()?;
    // SAFETY: the caller's promise for the function; the driver checks attribute and value.
    check("cuFuncSetAttribute", unsafe {
        set(function, attribute, value)
    })
}

/// The shape of a launch as cuLaunchKernel takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Blocks per dimension.
    pub grid: [c_uint; 3],
    /// Threads per block per dimension.
    pub block: [c_uint; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: c_uint,
}

/// cuLaunchKernel: enqueues `function` on `stream` with `shape` and the parameter array
/// `params` (one pointer per parameter, to a value of its type; no `extra` options).
///
/// # Safety
/// `function` is a function of a live module of the current context (or a `CUkernel`, cast),
/// `stream` a live stream of that context (or a default-stream handle), `params` one valid
/// pointer per kernel parameter, each to a value of that parameter's type, readable during the
/// call; and every byte the kernel reaches stays valid for its accesses, and untouched by
/// anything that races with them, until it has completed.
pub unsafe fn launch(
    driver: &Driver,
    function: sys::CUfunction,
    shape: LaunchShape,
    stream: sys::CUstream,
    params: *mut *mut c_void,
) -> Result<()> {
    let launch = driver.cuLaunchKernel()?;
    let LaunchShape {
        grid,
        block,
        shared_bytes,
    } = shape;
    // SAFETY: the caller's promise for the function, the stream, the parameters and the memory
    // the kernel reaches; no `extra` options.
    check("cuLaunchKernel", unsafe {
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

/// cuLibraryLoadData: loads a library image, not bound to a context (no JIT or library
/// options).
///
/// # Safety
/// As [`load_data`].
pub unsafe fn library_load_data(driver: &Driver, code: *const c_void) -> Result<sys::CUlibrary> {
    let load = driver.cuLibraryLoadData()?;
    let mut library = ptr::null_mut();
    // SAFETY: `library` is valid for writes, no options are passed; the caller's promise for
    // the image.
    check("cuLibraryLoadData", unsafe {
        load(
            &mut library,
            code,
            ptr::null_mut(),
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            ptr::null_mut(),
            0,
        )
    })?;
    Ok(library)
}

/// cuLibraryGetKernel: the kernel called `name` in `library`.
///
/// # Safety
/// `library` is a live library.
pub unsafe fn library_kernel(
    driver: &Driver,
    library: sys::CUlibrary,
    name: &CStr,
) -> Result<sys::CUkernel> {
    let get = driver.cuLibraryGetKernel()?;
    let mut kernel = ptr::null_mut();
    // SAFETY: `kernel` is valid for writes and `name` NUL-terminated; the caller's promise for
    // the library.
    check("cuLibraryGetKernel", unsafe {
        get(&mut kernel, library, name.as_ptr())
    })?;
    Ok(kernel)
}

/// cuLibraryUnload: unloads `library`; its kernels become invalid.
///
/// # Safety
/// `library` is a live library, and nothing uses it or its kernels afterwards.
pub unsafe fn library_unload(driver: &Driver, library: sys::CUlibrary) -> Result<()> {
    let unload = driver.cuLibraryUnload()?;
    // SAFETY: the caller's promise that the library is live and not used again.
    check("cuLibraryUnload", unsafe { unload(library) })
}
