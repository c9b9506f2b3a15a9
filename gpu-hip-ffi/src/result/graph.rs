//! Graphs: building one node by node (kernel, 1-D memcpy and memset nodes after their
//! dependencies), instantiating it, replaying it on a stream, and updating a node in place.
//!
//! HIP copies every parameter (the kernel's argument values included) when a node is added or
//! updated, as CUDA does, so they need to live only for the call.

use core::ffi::{c_uint, c_void};
use core::ptr;

use gpu_core::Result;

use crate::library::Hip;
use crate::result::check;
use crate::result::module::LaunchShape;
use crate::sys;

/// A kernel node's parameters: `function` (a module's `hipFunction_t`) with `shape` and the
/// parameter array `params` (one pointer per parameter, to a value of its type).
pub fn kernel_params(
    function: sys::hipFunction_t,
    shape: LaunchShape,
    params: *mut *mut c_void,
) -> sys::hipKernelNodeParams {
    let dim = |d: [c_uint; 3]| sys::dim3 {
        x: d[0],
        y: d[1],
        z: d[2],
    };
    sys::hipKernelNodeParams {
        blockDim: dim(shape.block),
        extra: ptr::null_mut(),
        func: function.cast(),
        gridDim: dim(shape.grid),
        kernelParams: params,
        sharedMemBytes: shape.shared_bytes,
    }
}

/// A 1-D memset of `count` elements of `element_size` bytes (1, 2 or 4) to `value` at `dst`.
pub fn fill_params(
    dst: *mut c_void,
    value: c_uint,
    element_size: c_uint,
    count: usize,
) -> sys::hipMemsetParams {
    sys::hipMemsetParams {
        dst,
        elementSize: element_size,
        height: 1,
        pitch: count * element_size as usize,
        value,
        width: count,
    }
}

/// hipGraphCreate: an empty graph (`flags` 0).
pub fn create(hip: &Hip) -> Result<sys::hipGraph_t> {
    let create = hip.hipGraphCreate()?;
    let mut graph = ptr::null_mut();
    // SAFETY: `graph` is valid for writes; HIP checks the flags.
    check("hipGraphCreate", unsafe { create(&mut graph, 0) })?;
    Ok(graph)
}

/// hipGraphDestroy: destroys `graph` and its nodes (instantiations of it stay valid).
///
/// # Safety
/// `graph` is a live graph that no other thread uses meanwhile and nothing uses afterwards.
pub unsafe fn destroy(hip: &Hip, graph: sys::hipGraph_t) -> Result<()> {
    let destroy = hip.hipGraphDestroy()?;
    // SAFETY: the caller's promise that the graph is live and not used again.
    check("hipGraphDestroy", unsafe { destroy(graph) })
}

/// hipGraphAddKernelNode: a kernel node of `graph` after `deps`.
///
/// # Safety
/// `graph` is a live graph no other thread uses meanwhile, `deps` nodes of it, and `params`
/// names a function of a module of the current device with one valid pointer per kernel
/// parameter, each to a value of that parameter's type, readable during the call.
pub unsafe fn add_kernel_node(
    hip: &Hip,
    graph: sys::hipGraph_t,
    deps: &[sys::hipGraphNode_t],
    params: &sys::hipKernelNodeParams,
) -> Result<sys::hipGraphNode_t> {
    let add = hip.hipGraphAddKernelNode()?;
    let mut node = ptr::null_mut();
    // SAFETY: `node` is valid for writes, `deps` for reads of its length; the caller's promise
    // for the graph and the parameters.
    check("hipGraphAddKernelNode", unsafe {
        add(&mut node, graph, deps.as_ptr(), deps.len(), params)
    })?;
    Ok(node)
}

/// hipGraphAddMemcpyNode1D: a copy node of `graph` after `deps`, `bytes` from `src` to `dst`,
/// HIP finding each side's memory (`hipMemcpyDefault`).
///
/// # Safety
/// `graph` is a live graph no other thread uses meanwhile, and `deps` nodes of it.
pub unsafe fn add_memcpy_node(
    hip: &Hip,
    graph: sys::hipGraph_t,
    deps: &[sys::hipGraphNode_t],
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
) -> Result<sys::hipGraphNode_t> {
    let add = hip.hipGraphAddMemcpyNode1D()?;
    let mut node = ptr::null_mut();
    // SAFETY: `node` is valid for writes, `deps` for reads of its length; the caller's promise
    // for the graph; the addresses are only recorded.
    check("hipGraphAddMemcpyNode1D", unsafe {
        add(
            &mut node,
            graph,
            deps.as_ptr(),
            deps.len(),
            dst,
            src,
            bytes,
            sys::hipMemcpyDefault,
        )
    })?;
    Ok(node)
}

/// hipGraphAddMemsetNode: a memset node of `graph` after `deps`.
///
/// # Safety
/// As [`add_memcpy_node`].
pub unsafe fn add_memset_node(
    hip: &Hip,
    graph: sys::hipGraph_t,
    deps: &[sys::hipGraphNode_t],
    params: &sys::hipMemsetParams,
) -> Result<sys::hipGraphNode_t> {
    let add = hip.hipGraphAddMemsetNode()?;
    let mut node = ptr::null_mut();
    // SAFETY: `node` is valid for writes, `deps` for reads of its length, `params` for reads;
    // the caller's promise for the graph.
    check("hipGraphAddMemsetNode", unsafe {
        add(&mut node, graph, deps.as_ptr(), deps.len(), params)
    })?;
    Ok(node)
}

/// hipGraphInstantiateWithFlags: an executable graph of `graph` (`flags` 0) on the current
/// device.
///
/// # Safety
/// `graph` is a live graph no other thread uses meanwhile.
pub unsafe fn instantiate(hip: &Hip, graph: sys::hipGraph_t) -> Result<sys::hipGraphExec_t> {
    let instantiate = hip.hipGraphInstantiateWithFlags()?;
    let mut exec = ptr::null_mut();
    // SAFETY: `exec` is valid for writes; the caller's promise for the graph.
    check("hipGraphInstantiateWithFlags", unsafe {
        instantiate(&mut exec, graph, 0)
    })?;
    Ok(exec)
}

/// hipGraphLaunch: one replay of `exec` on `stream`, after the stream's earlier work.
///
/// # Safety
/// `exec` is a live executable graph no other thread uses meanwhile, `stream` a live stream of
/// its device, and every byte its nodes reach stays valid until the replay has completed.
pub unsafe fn launch(hip: &Hip, exec: sys::hipGraphExec_t, stream: sys::hipStream_t) -> Result<()> {
    let launch = hip.hipGraphLaunch()?;
    // SAFETY: the caller's promise for the graph, the stream and the memory.
    check("hipGraphLaunch", unsafe { launch(exec, stream) })
}

/// hipGraphExecDestroy: destroys `exec`; replays already enqueued still run.
///
/// # Safety
/// `exec` is a live executable graph that no other thread uses meanwhile and nothing uses
/// afterwards.
pub unsafe fn exec_destroy(hip: &Hip, exec: sys::hipGraphExec_t) -> Result<()> {
    let destroy = hip.hipGraphExecDestroy()?;
    // SAFETY: the caller's promise that the executable graph is live and not used again.
    check("hipGraphExecDestroy", unsafe { destroy(exec) })
}

/// hipGraphExecKernelNodeSetParams: kernel node `node` of `exec` runs with `params` from the
/// next replay on.
///
/// # Safety
/// `exec` is a live executable graph no other thread uses meanwhile, `node` a kernel node of
/// the graph it was instantiated from, and `params` as for [`add_kernel_node`].
pub unsafe fn exec_set_kernel_node(
    hip: &Hip,
    exec: sys::hipGraphExec_t,
    node: sys::hipGraphNode_t,
    params: &sys::hipKernelNodeParams,
) -> Result<()> {
    let set = hip.hipGraphExecKernelNodeSetParams()?;
    // SAFETY: the caller's promise for the graph, the node and the parameters.
    check("hipGraphExecKernelNodeSetParams", unsafe {
        set(exec, node, params)
    })
}

/// hipGraphExecMemcpyNodeSetParams1D: copy node `node` of `exec` copies `bytes` from `src` to
/// `dst` from the next replay on.
///
/// # Safety
/// `exec` is a live executable graph no other thread uses meanwhile, and `node` a 1-D copy node
/// of the graph it was instantiated from.
pub unsafe fn exec_set_memcpy_node(
    hip: &Hip,
    exec: sys::hipGraphExec_t,
    node: sys::hipGraphNode_t,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
) -> Result<()> {
    let set = hip.hipGraphExecMemcpyNodeSetParams1D()?;
    // SAFETY: the caller's promise for the graph and the node; the addresses are only recorded.
    check("hipGraphExecMemcpyNodeSetParams1D", unsafe {
        set(exec, node, dst, src, bytes, sys::hipMemcpyDefault)
    })
}

/// hipGraphExecMemsetNodeSetParams: memset node `node` of `exec` sets as `params` say from the
/// next replay on.
///
/// # Safety
/// As [`exec_set_memcpy_node`], for a memset node.
pub unsafe fn exec_set_memset_node(
    hip: &Hip,
    exec: sys::hipGraphExec_t,
    node: sys::hipGraphNode_t,
    params: &sys::hipMemsetParams,
) -> Result<()> {
    let set = hip.hipGraphExecMemsetNodeSetParams()?;
    // SAFETY: `params` is valid for reads; the caller's promise for the rest.
    check("hipGraphExecMemsetNodeSetParams", unsafe {
        set(exec, node, params)
    })
}
