//! Modules and kernels: loading a module image (per device, at its first kernel there),
//! resolving its functions once per device, and launching them in a stream's order.

use std::ffi::{c_char, c_void};

use gpu_runtime::backend::LaunchDims;

use crate::shared::args::{c_str, non_null};
use crate::shared::{CapiError, ClientBackend, Session};

use super::core_ops::on_locked_stream;
use super::objects::Function;
use super::session::{device, on_session};

/// # Safety
/// `image` points to a module image the driver reads, readable until the module is unloaded.
unsafe fn module_load<B: ClientBackend>(
    session: &'static Session<B>,
    image: *const c_void,
) -> Result<u64, CapiError> {
    non_null(image, "module image")?;
    super::graphs::flush_before(session);
    let runtime = session.runtime();
    // SAFETY: this function's contract: `image` (not null: checked above) is a module image the
    // driver can read until the module is unloaded, as `load_module` needs.
    let module = unsafe { runtime.load_module(device(), image) }?;
    let mut objects = session.mlir.lock();
    // SAFETY: as above: a module image the driver reads.
    unsafe { super::graph_launches::note_module(&mut objects, module, image) };
    let inserted = objects.modules.insert(module);
    drop(objects);
    if inserted.is_err() {
        // No handle for it: it is unloaded again, and the call refused.
        let _ = runtime.unload_module(module);
    }
    Ok(inserted?)
}

fn module_unload<B: ClientBackend>(
    session: &'static Session<B>,
    module: u64,
) -> Result<(), CapiError> {
    super::graphs::flush_before(session);
    let mut objects = session.mlir.lock();
    let id = objects.modules.remove(module)?;
    let gone: Vec<u64> = objects
        .functions
        .iter()
        .filter(|(_, f)| f.module == id)
        .map(|(h, _)| h)
        .collect();
    super::graph_launches::forget_module(&mut objects, id, &gone);
    for handle in gone {
        let _ = objects.functions.remove(handle);
        objects.kernels.retain(|&(h, _), _| h != handle);
    }
    objects.function_names.remove(&id);
    drop(objects);
    Ok(session.runtime().unload_module(id)?)
}

/// # Safety
/// `name` is a NUL-terminated string.
unsafe fn module_get_function<B: ClientBackend>(
    session: &'static Session<B>,
    module: u64,
    name: *const c_char,
) -> Result<u64, CapiError> {
    // SAFETY: this function's contract: `name` is a NUL-terminated string (`c_str` refuses
    // null).
    let name = unsafe { c_str(name, "kernel name") }?;
    let objects = session.mlir.lock();
    let id = *objects.modules.get(module)?;
    if let Some(&handle) = objects
        .function_names
        .get(&id)
        .and_then(|names| names.get(name))
    {
        return Ok(handle);
    }
    // Resolved now on the default device, so a missing name fails here, as upstream's does.
    drop(objects);
    let kernel = session.runtime().module_kernel(id, device(), name)?;
    let mut objects = session.mlir.lock();
    let handle = objects.functions.insert(Function {
        module: id,
        name: name.to_owned(),
    })?;
    objects.kernels.insert((handle, device().0), kernel);
    super::graph_launches::note_function(&mut objects, handle, (id, name, &kernel));
    objects
        .function_names
        .entry(id)
        .or_default()
        .insert(name.to_owned(), handle);
    Ok(handle)
}

/// # Safety
/// As [`Kernel::launch_packed`](gpu_runtime::runtime::Kernel::launch_packed) for `params`.
#[allow(clippy::too_many_arguments)]
unsafe fn launch_kernel<B: ClientBackend>(
    session: &'static Session<B>,
    function: u64,
    grid: [i64; 3],
    block: [i64; 3],
    shared_bytes: i32,
    stream: u64,
    params: *mut *mut c_void,
) -> Result<(), CapiError> {
    let dimension = |value: i64, what: &'static str| {
        u32::try_from(value).map_err(|_| CapiError::InvalidArgument {
            what,
            detail: format!("{value} is not a launch dimension (0 to 2^32 - 1)"),
        })
    };
    let dims = LaunchDims {
        grid: [
            dimension(grid[0], "grid x")?,
            dimension(grid[1], "grid y")?,
            dimension(grid[2], "grid z")?,
        ],
        block: [
            dimension(block[0], "block x")?,
            dimension(block[1], "block y")?,
            dimension(block[2], "block z")?,
        ],
        dynamic_workgroup_bytes: u32::try_from(shared_bytes).map_err(|_| {
            CapiError::InvalidArgument {
                what: "dynamic shared memory",
                detail: format!("{shared_bytes} bytes is negative"),
            }
        })?,
    };
    // In the graph mode, a launch whose parameter sizes are known is deferred, its values
    // copied now; any other ends the sequence and is issued.
    // SAFETY: the caller's promise for `params`.
    let deferred =
        unsafe { super::graph_launches::defer_launch(session, function, dims, stream, params) };
    if let super::graphs::Deferral::Done(done) = deferred {
        return done;
    }
    super::graphs::flush_before(session);
    let device = device();
    let mut objects = session.mlir.lock();
    // A kernel resolved before (only live functions have one) launches under this one lock.
    let kernel = match objects.kernels.get(&(function, device.0)) {
        Some(&kernel) => kernel,
        None => {
            // The stream is checked before the kernel is resolved, which may load its module
            // on this device (outside the lock).
            objects.check_stream(stream)?;
            let entry = objects.functions.get(function)?;
            let (module, name) = (entry.module, entry.name.clone());
            drop(objects);
            let kernel = session.runtime().module_kernel(module, device, &name)?;
            objects = session.mlir.lock();
            objects.kernels.insert((function, device.0), kernel);
            kernel
        }
    };
    on_locked_stream(
        session,
        objects,
        stream,
        |_| Ok(()),
        |_, after| {
            // SAFETY: the caller's promise for `params` and the memory the kernel reaches.
            let token = unsafe { kernel.launch_packed(dims, params, after) }?;
            Ok((token, ()))
        },
    )
}

// ----- the exported ABI -----

/// Loads a module image (PTX, cubin, fatbin) on the default device; other devices load it at
/// their first launch.
///
/// # Safety
/// `data` points to a module image that stays readable until `mgpuModuleUnload`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuModuleLoad(data: *mut c_void) -> *mut c_void {
    // SAFETY: `mgpuModuleLoad`'s contract: `data` is a module image readable until
    // `mgpuModuleUnload`, as `module_load` needs.
    on_session!("mgpuModuleLoad", 0, |s| unsafe { module_load(s, data) }) as *mut c_void
}

/// As `mgpuModuleLoad`; the driver JIT-compiles PTX at its default (highest) level.
///
/// # Safety
/// As `mgpuModuleLoad`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuModuleLoadJIT(data: *mut c_void, _opt_level: i32) -> *mut c_void {
    // SAFETY: `mgpuModuleLoadJIT`'s contract is `mgpuModuleLoad`'s.
    unsafe { mgpuModuleLoad(data) }
}

/// Unloads a module on every device it was loaded on.
#[unsafe(no_mangle)]
pub extern "C" fn mgpuModuleUnload(module: *mut c_void) {
    on_session!("mgpuModuleUnload", (), |s| module_unload(s, module as u64))
}

/// The function `name` of `module` (the same handle every time it is asked).
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mgpuModuleGetFunction(
    module: *mut c_void,
    name: *const c_char,
) -> *mut c_void {
    // SAFETY: `mgpuModuleGetFunction`'s contract: `name` is a NUL-terminated string, as
    // `module_get_function` needs.
    on_session!("mgpuModuleGetFunction", 0, |s| unsafe {
        module_get_function(s, module as u64, name)
    }) as *mut c_void
}

/// Launches `function` on the default device in `stream`'s order. Dynamic shared memory
/// above the default limit is opted in once per function and size; above the device's opt-in
/// limit the launch is refused with a message (nothing is launched). `extra` must be null and
/// the parameter count (LLVM 22 passes it) is not needed.
///
/// # Safety
/// `params` holds one pointer per kernel parameter, each to a value of its type; the memory
/// the kernel reaches stays valid until it has run.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn mgpuLaunchKernel(
    function: *mut c_void,
    grid_x: i64,
    grid_y: i64,
    grid_z: i64,
    block_x: i64,
    block_y: i64,
    block_z: i64,
    shared_bytes: i32,
    stream: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) {
    on_session!("mgpuLaunchKernel", (), |s| {
        if extra.is_null() {
            // SAFETY: `mgpuLaunchKernel`'s contract: `params` holds one pointer per kernel
            // parameter, each to a value of its type, and the memory the kernel reaches stays
            // valid until it has run, as `launch_kernel` needs.
            unsafe {
                launch_kernel(
                    s,
                    function as u64,
                    [grid_x, grid_y, grid_z],
                    [block_x, block_y, block_z],
                    shared_bytes,
                    stream as u64,
                    params,
                )
            }
        } else {
            Err(CapiError::InvalidArgument {
                what: "extra",
                detail: "launch options in `extra` are not supported; pass null".into(),
            })
        }
    })
}
