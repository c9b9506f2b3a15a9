//! The backend's graphs over the fake driver: each node added after its dependencies' nodes,
//! nothing left behind when a step fails, handles checked like streams, updates by kind.
//!
//! The fake graph calls keep, per test thread, the graphs and instantiations alive and the
//! dependencies each node was added with, so a test sees exactly what the backend built and
//! destroyed.

use super::*;

use std::cell::RefCell;

use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};

/// A fill to this address makes the fake cuGraphAddMemsetNode fail.
const REFUSED_FILL: usize = 0xfa11;

std::thread_local! {
    /// The graphs and instantiations the fake driver made on this thread and not destroyed.
    static ALIVE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// Each node added on this thread: its handle and its dependencies' handles.
    static NODES: RefCell<Vec<(usize, Vec<usize>)>> = const { RefCell::new(Vec::new()) };
    /// Whether the fake cuGraphInstantiateWithFlags refuses.
    static REFUSE_INSTANTIATE: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

fn alive() -> Vec<usize> {
    ALIVE.with(|alive| alive.borrow().clone())
}

/// Makes a fake graph object, alive until destroyed.
///
/// # Safety
/// `out` is valid for writes.
unsafe fn make<T>(out: *mut *mut T) -> sys::CUresult {
    let address = fake_address();
    ALIVE.with(|alive| alive.borrow_mut().push(address));
    // SAFETY: the caller's promise.
    unsafe { put(out, ptr::without_provenance_mut(address)) }
}

fn unmake<T>(object: *mut T) -> sys::CUresult {
    ALIVE.with(|alive| {
        let mut alive = alive.borrow_mut();
        match alive.iter().position(|&a| a == object.addr()) {
            Some(index) => {
                alive.swap_remove(index);
                sys::CUDA_SUCCESS
            }
            None => sys::CUDA_ERROR_INVALID_HANDLE,
        }
    })
}

/// Records a node added after `count` dependencies at `deps`.
///
/// # Safety
/// `out` is valid for writes, `deps` for reads of `count` nodes.
unsafe fn add(
    out: *mut sys::CUgraphNode,
    deps: *const sys::CUgraphNode,
    count: usize,
) -> sys::CUresult {
    let node = fake_address();
    let deps = if count == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's promise.
        unsafe { core::slice::from_raw_parts(deps, count) }
            .iter()
            .map(|dep| dep.addr())
            .collect()
    };
    NODES.with(|nodes| nodes.borrow_mut().push((node, deps)));
    // SAFETY: the caller's promise.
    unsafe { put(out, ptr::without_provenance_mut(node)) }
}

unsafe extern "C" fn graph_create(out: *mut sys::CUgraph, _: c_uint) -> sys::CUresult {
    // SAFETY: the driver layer passes an out-parameter valid for writes.
    unsafe { make(out) }
}

unsafe extern "C" fn graph_destroy(graph: sys::CUgraph) -> sys::CUresult {
    unmake(graph)
}

unsafe extern "C" fn exec_destroy(exec: sys::CUgraphExec) -> sys::CUresult {
    unmake(exec)
}

unsafe extern "C" fn instantiate(
    out: *mut sys::CUgraphExec,
    _: sys::CUgraph,
    _: core::ffi::c_ulonglong,
) -> sys::CUresult {
    if REFUSE_INSTANTIATE.with(|refuse| refuse.get()) {
        return sys::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: as for `graph_create`.
    unsafe { make(out) }
}

unsafe extern "C" fn add_kernel(
    out: *mut sys::CUgraphNode,
    _: sys::CUgraph,
    deps: *const sys::CUgraphNode,
    count: usize,
    params: *const sys::CUDA_KERNEL_NODE_PARAMS,
) -> sys::CUresult {
    // SAFETY: the backend passes its parameters; the argument array holds three pointers.
    let params = unsafe { &*params };
    if params.kernelParams.is_null() || params.func.is_null() {
        return sys::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the driver layer's out-parameter and dependency array.
    unsafe { add(out, deps, count) }
}

unsafe extern "C" fn add_memcpy(
    out: *mut sys::CUgraphNode,
    _: sys::CUgraph,
    deps: *const sys::CUgraphNode,
    count: usize,
    _: *const sys::CUDA_MEMCPY3D,
    context: sys::CUcontext,
) -> sys::CUresult {
    if context != FAKE_CONTEXT {
        return sys::CUDA_ERROR_INVALID_CONTEXT;
    }
    // SAFETY: as for `add_kernel`.
    unsafe { add(out, deps, count) }
}

unsafe extern "C" fn add_memset(
    out: *mut sys::CUgraphNode,
    _: sys::CUgraph,
    deps: *const sys::CUgraphNode,
    count: usize,
    params: *const sys::CUDA_MEMSET_NODE_PARAMS,
    context: sys::CUcontext,
) -> sys::CUresult {
    // SAFETY: the backend passes its parameters.
    if unsafe { (*params).dst } as usize == REFUSED_FILL {
        return sys::CUDA_ERROR_INVALID_VALUE;
    }
    if context != FAKE_CONTEXT {
        return sys::CUDA_ERROR_INVALID_CONTEXT;
    }
    // SAFETY: as for `add_kernel`.
    unsafe { add(out, deps, count) }
}

succeeds! {
    ok_graph_launch(sys::CUgraphExec, sys::CUstream);
    ok_set_kernel(sys::CUgraphExec, sys::CUgraphNode, *const sys::CUDA_KERNEL_NODE_PARAMS);
    ok_set_memcpy(sys::CUgraphExec, sys::CUgraphNode, *const sys::CUDA_MEMCPY3D, sys::CUcontext);
    ok_set_memset(
        sys::CUgraphExec, sys::CUgraphNode, *const sys::CUDA_MEMSET_NODE_PARAMS, sys::CUcontext
    );
}

/// The fake driver's graph entry point `symbol`, if it is one.
pub(super) fn fake_entry_point(symbol: &[u8]) -> Option<*mut c_void> {
    Some(match symbol {
        b"cuGraphCreate" => graph_create as sys::PFN_cuGraphCreate as *mut c_void,
        b"cuGraphDestroy" => graph_destroy as sys::PFN_cuGraphDestroy as *mut c_void,
        b"cuGraphExecDestroy" => exec_destroy as sys::PFN_cuGraphExecDestroy as *mut c_void,
        b"cuGraphInstantiateWithFlags" => {
            instantiate as sys::PFN_cuGraphInstantiateWithFlags as *mut c_void
        }
        b"cuGraphAddKernelNode" => add_kernel as sys::PFN_cuGraphAddKernelNode as *mut c_void,
        b"cuGraphAddMemcpyNode" => add_memcpy as sys::PFN_cuGraphAddMemcpyNode as *mut c_void,
        b"cuGraphAddMemsetNode" => add_memset as sys::PFN_cuGraphAddMemsetNode as *mut c_void,
        b"cuGraphLaunch" => ok_graph_launch as sys::PFN_cuGraphLaunch as *mut c_void,
        b"cuGraphExecKernelNodeSetParams" => {
            ok_set_kernel as sys::PFN_cuGraphExecKernelNodeSetParams as *mut c_void
        }
        b"cuGraphExecMemcpyNodeSetParams" => {
            ok_set_memcpy as sys::PFN_cuGraphExecMemcpyNodeSetParams as *mut c_void
        }
        b"cuGraphExecMemsetNodeSetParams" => {
            ok_set_memset as sys::PFN_cuGraphExecMemsetNodeSetParams as *mut c_void
        }
        _ => return None,
    })
}

/// Two fills, a copy after the first, a launch of `fill` after the copy and the second fill.
fn fork_join(fill: CudaKernel, memory: usize) -> GraphDesc<CudaKernel> {
    let mut graph = GraphDesc::new();
    let set = |dst| NodeOp::Fill {
        dst,
        value: FillValue::U32(3),
        count: 4,
    };
    let a = graph.add(set(memory), &[]).unwrap();
    let b = graph.add(set(memory + 16), &[]).unwrap();
    let copy = NodeOp::Copy {
        dst: memory + 32,
        src: memory,
        bytes: 16,
    };
    let c = graph.add(copy, &[a]).unwrap();
    let launch = NodeOp::Launch {
        kernel: fill,
        dims: LaunchDims::linear(1, 1),
        args: args(memory).to_vec(),
    };
    graph.add(launch, &[c, b]).unwrap();
    graph
}

#[test]
fn a_graph_has_a_node_per_operation_after_its_dependencies_and_is_destroyed_whole() {
    let b = fake_backend();
    let fill = b.kernel(D0, "fill_u32").unwrap();
    let memory = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let stream = b.stream_create(D0).unwrap();
    let graph = b.graph_instantiate(D0, &fork_join(fill, memory)).unwrap();
    assert_eq!(graph.device(), D0);
    let nodes = NODES.with(|nodes| nodes.borrow().clone());
    let [(a, a_deps), (b_node, b_deps), (c, c_deps), (_, d_deps)] = nodes.as_slice() else {
        panic!("four nodes: {nodes:?}");
    };
    assert!(a_deps.is_empty() && b_deps.is_empty());
    assert_eq!(c_deps, &[*a]);
    assert_eq!(d_deps, &[*c, *b_node]);
    assert_eq!(alive().len(), 2, "a graph and its instantiation");
    // SAFETY: the fake driver runs nothing.
    assert_eq!(unsafe { b.graph_launch(stream, graph) }, Ok(()));
    assert_eq!(b.graph_destroy(graph), Ok(()));
    assert!(alive().is_empty(), "both destroyed");
    let gone = Err(stale("graph", graph.key));
    // SAFETY: refused before anything is enqueued.
    assert_eq!(unsafe { b.graph_launch(stream, graph) }, gone);
    let op = NodeOp::Fill {
        dst: memory,
        value: FillValue::U8(0),
        count: 1,
    };
    assert_eq!(b.graph_set_node(graph, NodeId(0), &op), gone);
    assert_eq!(b.graph_destroy(graph), gone, "destroyed twice");
    // A new graph never takes the destroyed one's handle.
    let again = b.graph_instantiate(D0, &fork_join(fill, memory)).unwrap();
    assert_ne!(again, graph);
    assert_eq!(b.graph_destroy(again), Ok(()));
}

#[test]
fn a_failure_at_any_step_leaves_no_graph_behind() {
    let b = fake_backend();
    let fill = b.kernel(D0, "fill_u32").unwrap();
    let memory = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // A node the driver refuses, after two it accepted.
    let mut refused = fork_join(fill, memory);
    let last = NodeId(refused.len() as u32 - 1);
    let bad = NodeOp::Fill {
        dst: REFUSED_FILL,
        value: FillValue::U8(1),
        count: 1,
    };
    refused.add(bad, &[last]).unwrap();
    let refusal = Err(Error::Driver(driver_error(
        "cuGraphAddMemsetNode",
        sys::CUDA_ERROR_INVALID_VALUE,
    )));
    assert_eq!(b.graph_instantiate(D0, &refused), refusal);
    assert!(alive().is_empty());
    // A launch whose arguments do not match the kernel: refused before the driver.
    let mut mismatched = GraphDesc::new();
    let launch = NodeOp::Launch {
        kernel: fill,
        dims: LaunchDims::linear(1, 1),
        args: vec![KernelArg::U32(1)],
    };
    mismatched.add(launch, &[]).unwrap();
    assert!(matches!(
        b.graph_instantiate(D0, &mismatched),
        Err(Error::KernelArgumentMismatch { .. })
    ));
    assert!(alive().is_empty());
    // The instantiation refused.
    REFUSE_INSTANTIATE.with(|refuse| refuse.set(true));
    let refusal = Err(Error::Driver(driver_error(
        "cuGraphInstantiateWithFlags",
        sys::CUDA_ERROR_INVALID_VALUE,
    )));
    assert_eq!(b.graph_instantiate(D0, &fork_join(fill, memory)), refusal);
    REFUSE_INSTANTIATE.with(|refuse| refuse.set(false));
    assert!(alive().is_empty());
    assert_eq!(b.graphs.len(), 0);
}

#[test]
fn nodes_are_updated_by_kind_and_stale_kernels_or_devices_are_refused() {
    let b = fake_backend();
    let fill = b.kernel(D0, "fill_u32").unwrap();
    let memory = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let graph = b.graph_instantiate(D0, &fork_join(fill, memory)).unwrap();
    // The graph, then its instantiation.
    let [template, exec] = alive()[..] else {
        panic!("one graph and one instantiation alive, not {:?}", alive());
    };
    let fill_op = NodeOp::Fill {
        dst: memory,
        value: FillValue::U16(9),
        count: 2,
    };
    let copy_op = NodeOp::Copy {
        dst: memory,
        src: memory + 8,
        bytes: 8,
    };
    let launch_op = NodeOp::Launch {
        kernel: fill,
        dims: LaunchDims::linear(2, 1),
        args: args(memory + 8).to_vec(),
    };
    assert_eq!(b.graph_set_node(graph, NodeId(0), &fill_op), Ok(()));
    assert_eq!(b.graph_set_node(graph, NodeId(2), &copy_op), Ok(()));
    assert_eq!(b.graph_set_node(graph, NodeId(3), &launch_op), Ok(()));
    assert_eq!(
        b.graph_set_node(graph, NodeId(0), &copy_op),
        Err(Error::GraphNodeKind {
            node: 0,
            recorded: "fill",
            given: "copy"
        })
    );
    assert_eq!(
        b.graph_set_node(graph, NodeId(4), &fill_op),
        Err(Error::UnknownGraphNode { node: 4, nodes: 4 })
    );
    // A reset makes the graph stale (its instantiation died with the context), and its
    // kernels too: a new graph of them is refused.
    let stream = b.stream_create(D0).unwrap();
    assert_eq!(b.reset_device(D0), Ok(()));
    // The reset took the instantiation with the context (not modelled here); the graph, a
    // host-side object, is destroyed as the backend forgets it.
    assert!(!alive().contains(&template) && alive().contains(&exec));
    let gone = Err(stale("graph", graph.key));
    assert_eq!(b.graph_set_node(graph, NodeId(0), &fill_op), gone);
    assert_eq!(b.graph_destroy(graph), gone);
    let stream_gone = Err(stale("stream", stream.key));
    // SAFETY: refused before anything is enqueued.
    assert_eq!(unsafe { b.graph_launch(stream, graph) }, stream_gone);
    assert_eq!(
        b.graph_instantiate(D0, &fork_join(fill, memory)),
        Err(stale("kernel", fill.module))
    );
    // A graph of another backend is stale here.
    let other = fake_backend();
    let fill = other.kernel(D0, "fill_u32").unwrap();
    let foreign = other
        .graph_instantiate(D0, &fork_join(fill, memory))
        .unwrap();
    assert_eq!(b.graph_destroy(foreign), Err(stale("graph", foreign.key)));
    assert_eq!(other.graph_destroy(foreign), Ok(()));
}

#[test]
fn a_graph_whose_kernels_module_was_unloaded_is_not_launched() {
    let b = fake_backend();
    let image = c"a module image";
    // SAFETY: the fake driver reads no image.
    let module = unsafe { b.module_load(D0, image.as_ptr().cast()) }.unwrap();
    let kernel = b.module_kernel(module, c"k").unwrap();
    let memory = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // A module's kernel takes its arguments as given.
    let of_module = b.graph_instantiate(D0, &fork_join(kernel, memory)).unwrap();
    let library = b.kernel(D0, "fill_u32").unwrap();
    let graph = b
        .graph_instantiate(D0, &fork_join(library, memory))
        .unwrap();
    let stream = b.stream_create(D0).unwrap();
    // The program's module, then the library module, unloaded under the graphs.
    assert_eq!(b.module_unload(module), Ok(()));
    // SAFETY: refused before anything is enqueued.
    let launched = unsafe { b.graph_launch(stream, of_module) };
    assert_eq!(launched, Err(stale("kernel", module.key)));
    assert_eq!(b.graph_destroy(of_module), Ok(()));
    let loaded = b
        .device(D0)
        .unwrap()
        .library
        .lock()
        .unwrap()
        .take()
        .unwrap();
    assert_eq!(b.module_unload(loaded.module), Ok(()));
    // SAFETY: refused before anything is enqueued.
    let launched = unsafe { b.graph_launch(stream, graph) };
    assert_eq!(launched, Err(stale("kernel", library.module)));
    assert_eq!(b.graph_destroy(graph), Ok(()));
}
