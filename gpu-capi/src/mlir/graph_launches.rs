//! The graph mode's launches (`mlir::graphs`): the parameter sizes of a module's kernels, noted
//! at loading, and a launch logged with its parameter values copied at the call.

use std::ffi::{CStr, c_void};

use gpu_runtime::backend::LaunchDims;
use gpu_runtime::runtime::{Arg, Kernel, ModuleId, Span};

use crate::shared::{ClientBackend, Session};

use super::graph_log::Op;
use super::graphs::{Deferral, Logged, with_log};
use super::objects::{Allocations, Objects};

/// Dynamic workgroup memory a deferred launch may ask for: a launch asking more (opted in,
/// or refused, at its call) ends the sequence instead.
const DEFAULT_WORKGROUP_BYTES: u32 = 48 << 10;

/// Notes the parameter sizes of `module`'s kernels, read from its PTX `image` (none for a
/// binary image), when the mode is on.
///
/// # Safety
/// `image` points to a module image the driver reads.
pub(super) unsafe fn note_module<B: ClientBackend>(
    objects: &mut Objects<B>,
    module: ModuleId,
    image: *const c_void,
) {
    if let Some(log) = objects.graphs.as_mut()
        // SAFETY: the caller's promise.
        && let Some(entries) = unsafe { super::ptx::entry_params(image) }
    {
        log.modules.insert(module, entries);
    }
}

/// Notes the parameter sizes of `function` (`kernel`, named `name` in `module`), for its
/// launches in the mode: as its module's PTX declares them, else as the driver tells
/// ([`Kernel::param_sizes`]: CUDA's `cuFuncGetParamInfo`; none where it cannot tell).
pub(super) fn note_function<B: ClientBackend>(
    objects: &mut Objects<B>,
    function: u64,
    (module, name, kernel): (ModuleId, &CStr, &Kernel<'_, B>),
) {
    if let Some(log) = objects.graphs.as_mut() {
        let declared = log.modules.get(&module).and_then(|m| m.get(name)).cloned();
        if let Some(sizes) = declared.or_else(|| kernel.param_sizes().ok()) {
            log.params.insert(function, sizes);
        }
    }
}

/// Forgets the parameter sizes of an unloaded module and of its `functions`.
pub(super) fn forget_module<B: ClientBackend>(
    objects: &mut Objects<B>,
    module: ModuleId,
    functions: &[u64],
) {
    if let Some(log) = objects.graphs.as_mut() {
        log.modules.remove(&module);
        log.params
            .retain(|function, _| !functions.contains(function));
    }
}

/// Notes `sizes` as the parameter sizes of `function` (for tests: the host backend loads no
/// module).
#[cfg(test)]
pub(super) fn set_params<B: ClientBackend>(
    objects: &mut Objects<B>,
    function: u64,
    sizes: &[usize],
) {
    if let Some(log) = objects.graphs.as_mut() {
        log.params.insert(function, sizes.to_vec());
    }
}

/// Logs a launch of `function` with `dims` on `stream`, its parameter values (`params`: one
/// pointer per parameter, each to a value of the size its module declares) copied now: an
/// address inside an allocation of `mgpuMemAlloc` as a span of it (to its end), other 8-byte
/// values as `U64` and 4-byte ones as `U32`. A function whose kernel is not resolved on this
/// device yet, whose sizes are unknown (not PTX), or with a parameter of another size ends the
/// sequence instead.
///
/// # Safety
/// `mgpuLaunchKernel`'s contract for `params`.
pub(super) unsafe fn defer_launch<B: ClientBackend>(
    session: &'static Session<B>,
    function: u64,
    dims: LaunchDims,
    stream: u64,
    params: *mut *mut c_void,
) -> Deferral {
    let device = super::session::device();
    with_log(session, Some(stream), |objects, log| {
        let kernel = objects.kernels.get(&(function, device.0)).copied();
        let (Some(kernel), Some(sizes)) = (kernel, log.params.get(&function)) else {
            return Ok(Logged::EndsSequence);
        };
        if dims.dynamic_workgroup_bytes > DEFAULT_WORKGROUP_BYTES {
            // The opt-in above the default, and its refusal, stay at the call.
            return Ok(Logged::EndsSequence);
        }
        if params.is_null() && !sizes.is_empty() {
            return Ok(Logged::EndsSequence);
        }
        let mut args = Vec::with_capacity(sizes.len());
        for (index, &size) in sizes.iter().enumerate() {
            // SAFETY: the caller's promise: `params` holds one pointer per parameter, each to a
            // value of its type, whose size the module declares.
            let value = unsafe { *params.add(index) };
            args.push(match size {
                // SAFETY: as above, a 4-byte value.
                4 => Arg::U32(unsafe { value.cast::<u32>().read_unaligned() }),
                8 => {
                    // SAFETY: as above, an 8-byte value.
                    let word = unsafe { value.cast::<u64>().read_unaligned() };
                    match allocation_end(&objects.buffers, word as usize) {
                        // SAFETY: inside a live allocation of `mgpuMemAlloc`, to its end; its
                        // free is ordered after the sequence's work.
                        Some(end) => Arg::Span(unsafe { Span::from_raw(word as usize, end) }),
                        None => Arg::U64(word),
                    }
                }
                _ => return Ok(Logged::EndsSequence),
            });
        }
        let index = log.launches.len();
        log.launches.push((kernel, args));
        log.ops.push(Op::Launch {
            device,
            stream,
            function,
            dims,
            index,
        });
        Ok(Logged::Yes)
    })
}

/// Bytes from `address` to the end of the allocation of `mgpuMemAlloc` it lies in.
fn allocation_end<B: ClientBackend>(buffers: &Allocations<B>, address: usize) -> Option<usize> {
    let (&start, buffer) = buffers.range(..=address).next_back()?;
    (address - start < buffer.size()).then(|| buffer.size() - (address - start))
}
