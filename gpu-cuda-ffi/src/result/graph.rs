//! Graphs: building one node by node (kernel, memcpy and memset nodes after their
//! dependencies), instantiating it, replaying it on a stream, and updating a node in place.
//!
//! The parameter builders ([`kernel_params`], [`copy_params`], [`fill_params`]) give each node
//! the shape the backend uses: a kernel with its function handle, a 1-D copy between any two
//! unified addresses, a 1-D memset of 1-, 2- or 4-byte elements. The driver copies every
//! parameter (the kernel's argument values included) when a node is added or updated, so they
//! need to live only for the call.

use core::ffi::{c_uint, c_void};
use core::ptr;

use gpu_core::Result;

use crate::driver::Driver;
use crate::result::check;
use crate::result::module::LaunchShape;
use crate::sys;

/// A kernel node's parameters: `function` with `shape` and the parameter array `params` (one
/// pointer per parameter, to a value of its type), in its module's context.
pub fn kernel_params(
    function: sys::CUfunction,
    shape: LaunchShape,
    params: *mut *mut c_void,
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: function,
        gridDimX: shape.grid[0],
        gridDimY: shape.grid[1],
        gridDimZ: shape.grid[2],
        blockDimX: shape.block[0],
        blockDimY: shape.block[1],
        blockDimZ: shape.block[2],
        sharedMemBytes: shape.shared_bytes,
        kernelParams: params,
        extra: ptr::null_mut(),
        // Used only without `func`.
        kern: ptr::null_mut(),
        ctx: ptr::null_mut(),
    }
}

/// A 1-D copy of `bytes` from `src` to `dst`, each any memory the driver knows by its unified
/// address (device, managed, pinned host).
pub fn copy_params(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
) -> sys::CUDA_MEMCPY3D {
    sys::CUDA_MEMCPY3D {
        srcMemoryType: sys::CU_MEMORYTYPE_UNIFIED,
        srcDevice: src,
        srcPitch: bytes,
        srcHeight: 1,
        dstMemoryType: sys::CU_MEMORYTYPE_UNIFIED,
        dstDevice: dst,
        dstPitch: bytes,
        dstHeight: 1,
        WidthInBytes: bytes,
        Height: 1,
        Depth: 1,
        ..Default::default()
    }
}

/// A 1-D memset of `count` elements of `element_size` bytes (1, 2 or 4) to `value` at `dst`.
pub fn fill_params(
    dst: sys::CUdeviceptr,
    value: c_uint,
    element_size: c_uint,
    count: usize,
) -> sys::CUDA_MEMSET_NODE_PARAMS {
    sys::CUDA_MEMSET_NODE_PARAMS {
        dst,
        pitch: count * element_size as usize,
        value,
        elementSize: element_size,
        width: count,
        height: 1,
    }
}

/// cuGraphCreate: an empty graph (`flags` 0).
pub fn create(driver: &Driver) -> Result<sys::CUgraph> {
    let create = driver.cuGraphCreate()?;
    let mut graph = ptr::null_mut();
    // SAFETY: `graph` is valid for writes; the driver checks the flags.
    check("cuGraphCreate", unsafe { create(&mut graph, 0) })?;
    Ok(graph)
}

/// cuGraphDestroy: destroys `graph` and its nodes (instantiations of it stay valid).
///
/// # Safety
/// `graph` is a live graph that no other thread uses meanwhile and nothing uses afterwards.
pub unsafe fn destroy(driver: &Driver, graph: sys::CUgraph) -> Result<()> {
    let destroy = driver.cuGraphDestroy()?;
    // SAFETY: the caller's promise that the graph is live and not used again.
    check("cuGraphDestroy", unsafe { destroy(graph) })
}

/// cuGraphAddKernelNode: a kernel node of `graph` after `deps`.
///
/// # Safety
/// `graph` is a live graph no other thread uses meanwhile, `deps` nodes of it, and `params`
/// names a function of a module of the current context with one valid pointer per kernel
/// parameter, each to a value of that parameter's type, readable during the call.
pub unsafe fn add_kernel_node(
    driver: &Driver,
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    params: &sys::CUDA_KERNEL_NODE_PARAMS,
) -> Result<sys::CUgraphNode> {
    let add = driver.cuGraphAddKernelNode()?;
    let mut node = ptr::null_mut();
    // SAFETY: `node` is valid for writes, `deps` for reads of its length; the caller's promise
    // for the graph and the parameters.
    check("cuGraphAddKernelNode", unsafe {
        add(&mut node, graph, deps.as_ptr(), deps.len(), params)
    })?;
    Ok(node)
}

/// cuGraphAddMemcpyNode: a copy node of `graph` after `deps`, run in `context`.
///
/// # Safety
/// `graph` is a live graph no other thread uses meanwhile, `deps` nodes of it, and `context` a
/// live context.
pub unsafe fn add_memcpy_node(
    driver: &Driver,
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    params: &sys::CUDA_MEMCPY3D,
    context: sys::CUcontext,
) -> Result<sys::CUgraphNode> {
    let add = driver.cuGraphAddMemcpyNode()?;
    let mut node = ptr::null_mut();
    // SAFETY: `node` is valid for writes, `deps` for reads of its length, `params` for reads;
    // the caller's promise for the graph and the context.
    check("cuGraphAddMemcpyNode", unsafe {
        add(&mut node, graph, deps.as_ptr(), deps.len(), params, context)
    })?;
    Ok(node)
}

/// cuGraphAddMemsetNode: a memset node of `graph` after `deps`, run in `context`.
///
/// # Safety
/// As [`add_memcpy_node`].
pub unsafe fn add_memset_node(
    driver: &Driver,
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    params: &sys::CUDA_MEMSET_NODE_PARAMS,
    context: sys::CUcontext,
) -> Result<sys::CUgraphNode> {
    let add = driver.cuGraphAddMemsetNode()?;
    let mut node = ptr::null_mut();
    // SAFETY: `node` is valid for writes, `deps` for reads of its length, `params` for reads;
    // the caller's promise for the graph and the context.
    check("cuGraphAddMemsetNode", unsafe {
        add(&mut node, graph, deps.as_ptr(), deps.len(), params, context)
    })?;
    Ok(node)
}

/// cuGraphInstantiateWithFlags: an executable graph of `graph` (`flags` 0), in the current
/// context.
///
/// # Safety
/// `graph` is a live graph no other thread uses meanwhile.
pub unsafe fn instantiate(driver: &Driver, graph: sys::CUgraph) -> Result<sys::CUgraphExec> {
    let instantiate = driver.cuGraphInstantiateWithFlags()?;
    let mut exec = ptr::null_mut();
    // SAFETY: `exec` is valid for writes; the caller's promise for the graph.
    check("cuGraphInstantiateWithFlags", unsafe {
        instantiate(&mut exec, graph, 0)
    })?;
    Ok(exec)
}

/// cuGraphLaunch: one replay of `exec` on `stream`, after the stream's earlier work.
///
/// # Safety
/// `exec` is a live executable graph no other thread uses meanwhile, `stream` a live stream of
/// its context, and every byte its nodes reach stays valid until the replay has completed.
pub unsafe fn launch(driver: &Driver, exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<()> {
    let launch = driver.cuGraphLaunch()?;
    // SAFETY: the caller's promise for the graph, the stream and the memory.
    check("cuGraphLaunch", unsafe { launch(exec, stream) })
}

/// cuGraphExecDestroy: destroys `exec`; replays already enqueued still run.
///
/// # Safety
/// `exec` is a live executable graph that no other thread uses meanwhile and nothing uses
/// afterwards.
pub unsafe fn exec_destroy(driver: &Driver, exec: sys::CUgraphExec) -> Result<()> {
    let destroy = driver.cuGraphExecDestroy()?;
    // SAFETY: the caller's promise that the executable graph is live and not used again.
    check("cuGraphExecDestroy", unsafe { destroy(exec) })
}

/// cuGraphExecKernelNodeSetParams: kernel node `node` of `exec` runs with `params` from the
/// next replay on.
///
/// # Safety
/// `exec` is a live executable graph no other thread uses meanwhile, `node` a kernel node of
/// the graph it was instantiated from, and `params` as for [`add_kernel_node`].
pub unsafe fn exec_set_kernel_node(
    driver: &Driver,
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: &sys::CUDA_KERNEL_NODE_PARAMS,
) -> Result<()> {
    let set = driver.cuGraphExecKernelNodeSetParams()?;
    // SAFETY: the caller's promise for the graph, the node and the parameters.
    check("cuGraphExecKernelNodeSetParams", unsafe {
        set(exec, node, params)
    })
}

/// cuGraphExecMemcpyNodeSetParams: copy node `node` of `exec` copies as `params` say from the
/// next replay on, in `context`.
///
/// # Safety
/// `exec` is a live executable graph no other thread uses meanwhile, `node` a copy node of the
/// graph it was instantiated from, and `context` a live context.
pub unsafe fn exec_set_memcpy_node(
    driver: &Driver,
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: &sys::CUDA_MEMCPY3D,
    context: sys::CUcontext,
) -> Result<()> {
    let set = driver.cuGraphExecMemcpyNodeSetParams()?;
    // SAFETY: `params` is valid for reads; the caller's promise for the rest.
    check("cuGraphExecMemcpyNodeSetParams", unsafe {
        set(exec, node, params, context)
    })
}

/// cuGraphExecMemsetNodeSetParams: memset node `node` of `exec` sets as `params` say from the
/// next replay on, in `context`.
///
/// # Safety
/// As [`exec_set_memcpy_node`], for a memset node.
pub unsafe fn exec_set_memset_node(
    driver: &Driver,
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: &sys::CUDA_MEMSET_NODE_PARAMS,
    context: sys::CUcontext,
) -> Result<()> {
    let set = driver.cuGraphExecMemsetNodeSetParams()?;
    // SAFETY: `params` is valid for reads; the caller's promise for the rest.
    check("cuGraphExecMemsetNodeSetParams", unsafe {
        set(exec, node, params, context)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_parameters_describe_one_dimensional_work() {
        let copy = copy_params(0x2000, 0x1000, 96);
        assert_eq!(
            (copy.srcMemoryType, copy.dstMemoryType),
            (sys::CU_MEMORYTYPE_UNIFIED, sys::CU_MEMORYTYPE_UNIFIED)
        );
        assert_eq!((copy.srcDevice, copy.dstDevice), (0x1000, 0x2000));
        assert_eq!((copy.WidthInBytes, copy.Height, copy.Depth), (96, 1, 1));
        assert!(copy.srcHost.is_null() && copy.dstArray.is_null());
        let fill = fill_params(0x3000, 0xabcd, 2, 10);
        assert_eq!(
            (fill.dst, fill.value, fill.elementSize),
            (0x3000, 0xabcd, 2)
        );
        assert_eq!((fill.width, fill.height, fill.pitch), (10, 1, 20));
        let shape = LaunchShape {
            grid: [4, 2, 1],
            block: [128, 1, 1],
            shared_bytes: 64,
        };
        let kernel = kernel_params(ptr::null_mut(), shape, ptr::null_mut());
        assert_eq!(
            (
                kernel.gridDimX,
                kernel.gridDimY,
                kernel.blockDimX,
                kernel.sharedMemBytes
            ),
            (4, 2, 128, 64)
        );
        assert!(kernel.extra.is_null() && kernel.kern.is_null() && kernel.ctx.is_null());
    }
}
