//! Kernels: loading a kernel of the backend's library by name (`gpurt_kernel_t`), and launching
//! it with its dimensions and arguments (`gpurt_dims_t`, `gpurt_arg_t`, the `GPURT_ARG_*` kinds).

use std::ffi::c_char;
use std::sync::PoisonError;

use gpu_runtime::backend::LaunchDims;
use gpu_runtime::error::Error;
use gpu_runtime::id::DeviceId;
use gpu_runtime::runtime::Arg;
use gpu_runtime::token::Token;

use crate::shared::{
    CapiError, ClientBackend, GpurtStatus, Session, dispatch, status_of, with_session,
};

use super::args::{c_slice, check_array, out_param, required_str, write_out};
use super::memory::{GpurtSpan, held};
use super::tokens::{GpurtToken, enqueue, token_out};

/// A kernel of the backend's library loaded on one device (`gpurt_kernel`), valid until
/// shutdown. `{0}` is the null handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtKernel {
    /// The handle's value (opaque).
    pub id: u64,
}

/// Grid and workgroup of a launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtDims {
    /// Workgroups (blocks) per dimension.
    pub grid: [u32; 3],
    /// Threads per workgroup per dimension.
    pub block: [u32; 3],
    /// Dynamic workgroup (shared) memory per workgroup, in bytes; above the device's default
    /// limit the runtime opts in once per kernel and size.
    pub dynamic_workgroup_bytes: u32,
}

/// A kernel argument: memory (the address of `span` is passed).
pub const GPURT_ARG_SPAN: u32 = 0;
/// A kernel argument: `u32_value`.
pub const GPURT_ARG_U32: u32 = 1;
/// A kernel argument: `u64_value`.
pub const GPURT_ARG_U64: u32 = 2;
/// A kernel argument: `f32_value`.
pub const GPURT_ARG_F32: u32 = 3;

/// One kernel argument: `kind` says which field holds it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpurtArg {
    /// One of the `GPURT_ARG_*` kinds.
    pub kind: u32,
    /// The memory, for `GPURT_ARG_SPAN`: the kernel is passed its address, and the runtime
    /// keeps it alive and ordered until the kernel has run.
    pub span: GpurtSpan,
    /// The value, for `GPURT_ARG_U32`.
    pub u32_value: u32,
    /// The value, for `GPURT_ARG_U64`.
    pub u64_value: u64,
    /// The value, for `GPURT_ARG_F32`.
    pub f32_value: f32,
}

fn kernel<B: ClientBackend>(
    s: &'static Session<B>,
    device: u32,
    name: &str,
) -> Result<GpurtKernel, CapiError> {
    let device = DeviceId(device);
    let mut handles = s
        .capi
        .kernel_handles
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(&id) = handles.get(&(device, name.to_string())) {
        return Ok(GpurtKernel { id });
    }
    let kernel = s.runtime().kernel(device, name)?;
    let id = s.capi.kernels.insert(kernel)?;
    handles.insert((device, name.to_string()), id);
    Ok(GpurtKernel { id })
}

/// # Safety
/// As for `gpurt_launch`: the kernel touches only bytes inside its span arguments.
unsafe fn launch<B: ClientBackend>(
    s: &Session<B>,
    kernel: GpurtKernel,
    dims: LaunchDims,
    args: &[GpurtArg],
    after: &mut Vec<Token>,
) -> Result<GpurtToken, CapiError> {
    let kernel = s.capi.kernels.get(kernel.id)?;
    let memory = args
        .iter()
        .filter(|arg| arg.kind == GPURT_ARG_SPAN)
        .map(|arg| held(s, &arg.span))
        .collect::<Result<Vec<_>, _>>()?;
    let mut held_memory = memory.iter();
    let values = kernel_args(args, |span| match held_memory.next() {
        Some(memory) => Ok(Arg::Span(memory.span(span.offset, span.len)?)),
        None => Err(Error::NullPointer {
            what: "kernel span argument",
        }
        .into()),
    })?;
    // SAFETY: the caller's promise (`gpurt_launch`'s contract), passed on.
    Ok(token_out(unsafe { kernel.launch(dims, &values, after) }?))
}

/// The runtime's arguments for `args` (stream launches' [`Arg`]s, or graph nodes' arguments),
/// each span argument's memory given by `span_of`.
pub(super) fn kernel_args<'m, A: From<Arg<'m>>>(
    args: &[GpurtArg],
    mut span_of: impl FnMut(&GpurtSpan) -> Result<A, CapiError>,
) -> Result<Vec<A>, CapiError> {
    args.iter()
        .enumerate()
        .map(|(index, arg)| match arg.kind {
            GPURT_ARG_SPAN => span_of(&arg.span),
            GPURT_ARG_U32 => Ok(Arg::U32(arg.u32_value).into()),
            GPURT_ARG_U64 => Ok(Arg::U64(arg.u64_value).into()),
            GPURT_ARG_F32 => Ok(Arg::F32(arg.f32_value).into()),
            other => Err(CapiError::InvalidArgument {
                what: "kernel argument kind",
                detail: format!(
                    "argument {index} has kind {other}; the kinds are GPURT_ARG_SPAN (0), \
                     GPURT_ARG_U32 (1), GPURT_ARG_U64 (2) and GPURT_ARG_F32 (3)"
                ),
            }),
        })
        .collect()
}

/// The launch shape `dims` points to, checked for null and alignment.
pub(super) fn launch_dims(dims: *const GpurtDims) -> Result<LaunchDims, CapiError> {
    check_array(dims, 1, "launch dimensions")?;
    // SAFETY: non-null and aligned (checked); the caller's promise: a `gpurt_dims_t`.
    let dims = unsafe { dims.read() };
    Ok(LaunchDims {
        grid: dims.grid,
        block: dims.block,
        dynamic_workgroup_bytes: dims.dynamic_workgroup_bytes,
    })
}

/// Loads kernel `name` of the backend's standard kernel library (`fill_u32`, `axpy_f32`,
/// `workgroup_reverse_u32`) on `device`, once, and writes its handle to `*kernel` (the same
/// handle every time). Valid until shutdown; needs no release.
///
/// Thread safety: any thread.
///
/// # Safety
/// `name` is a NUL-terminated string; `kernel` points to writable memory for a `gpurt_kernel`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_kernel(
    device: u32,
    name: *const c_char,
    kernel: *mut GpurtKernel,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(kernel, "kernel out-parameter")?;
        // SAFETY: `gpurt_kernel`'s contract: `name` is a NUL-terminated string.
        let name = unsafe { required_str(name, "kernel name") }?;
        let loaded = with_session(|s| dispatch!(s, s => self::kernel(s, device, name)))?;
        write_out(out, loaded);
        Ok(())
    })
}

/// Enqueues `kernel` on its device with `dims` and the `arg_count` arguments of `args`, after
/// `after`; writes the launch's token to `*done`. Span arguments are kept alive and ordered
/// until the kernel has run. Refused before anything is queued: arguments that do not match
/// the kernel's parameters in number or kinds, or whose counts make it reach past a span
/// (`fill_u32` of 2,048 words on a 4 KiB span) or past the launch's dynamic workgroup memory,
/// are `GPURT_STATUS_KERNEL_ARGUMENTS`; a grid or workgroup dimension of zero or more than 1024
/// threads per workgroup is `GPURT_STATUS_INVALID_ARGUMENT`; the message says what was wrong.
/// Consumes `after` on success.
///
/// Thread safety: any thread.
///
/// # Safety
/// The kernel touches only bytes inside its span arguments: for the standard library's
/// kernels the runtime checks the counts against the spans; for a kernel of the host backend
/// registered under another name the caller promises it. `dims` points to a `gpurt_dims`;
/// `args` to `arg_count` arguments (or is NULL with 0); `after` and `done` as for `gpurt_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_launch(
    kernel: GpurtKernel,
    dims: *const GpurtDims,
    args: *const GpurtArg,
    arg_count: usize,
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |after: &mut Vec<Token>| {
        let dims = launch_dims(dims)?;
        // SAFETY: the caller's promise: `arg_count` arguments at `args`.
        let args = unsafe { c_slice(args, arg_count, "kernel argument list") }?;
        with_session(|s| {
            // SAFETY: the caller's promise (the kernel stays inside its spans), passed on.
            dispatch!(s, s => unsafe { launch(s, kernel, dims, args, after) })
        })
    };
    // SAFETY: `gpurt_launch`'s contract: `after` and `done` as for `gpurt_copy`, as `enqueue`
    // needs.
    unsafe { enqueue(after, after_count, done, operation) }
}
