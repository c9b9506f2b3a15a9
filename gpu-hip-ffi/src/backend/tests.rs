//! The backend's tests without a GPU: over the real library with no device, or one HIP cannot
//! reach, each method gives its typed error, and what the backend does not hold never reaches HIP.

use core::ptr;
use core::sync::atomic::AtomicPtr;
use std::sync::Mutex;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::live::{HandleKey, MODULE_KERNEL};
use gpu_core::backend::{Backend, DeviceInfo, FillValue, KernelArg, LaunchDims};
use gpu_core::{ByteRange, DeviceId, DriverError, Error};

use super::devices::DeviceState;
use super::{HipBackend, HipEvent, HipKernel, HipModule, HipStream, SavedDevice};
use crate::library::Hip;

fn assert_thread_safe<T: Send + Sync>() {}

/// A backend over the real library with no device opened (what a machine without a HIP
/// device would have if opening did not refuse); `None` where the library is absent.
fn deviceless() -> Option<HipBackend> {
    Hip::global()
        .ok()
        .map(|hip| HipBackend::with_devices(hip, Vec::new()))
}

/// A backend over the real library with one device of an ordinal no machine has: every
/// call that reaches HIP fails at hipSetDevice, before any handle or address is given to
/// HIP. `None` where the library is absent.
fn unreachable_device() -> Option<HipBackend> {
    let info = DeviceInfo {
        name: "unreachable".into(),
        total_memory: 1 << 30,
        allocator: gpu_core::allocator::AllocatorCapabilities {
            device: gpu_core::allocator::KindSupport::SYNCHRONOUS,
            managed: gpu_core::allocator::KindSupport::NONE,
            host_pinned: gpu_core::allocator::KindSupport::SYNCHRONOUS,
            host_register: true,
        },
        workgroup: gpu_core::workgroup::WorkgroupLimits {
            default_per_block: 64 << 10,
            max_per_block_opt_in: 64 << 10,
            per_multiprocessor: 64 << 10,
            reserved_per_block: 0,
        },
        unified_addressing: true,
        pageable_memory_access: false,
    };
    let device = DeviceState {
        ordinal: 4077,
        pool: AtomicPtr::new(ptr::null_mut()),
        info,
        library: Mutex::new(None),
        vm_granularity: None,
    };
    Hip::global()
        .ok()
        .map(|hip| HipBackend::with_devices(hip, vec![device]))
}

/// Handles of `device` recorded as live in `backend`'s registries, as creating them would
/// (never given to HIP: their raw values are null), and a library kernel of the module.
fn live_handles(
    backend: &HipBackend,
    device: DeviceId,
) -> (HipStream, HipEvent, HipModule, HipKernel) {
    let stream = backend.register_stream(ptr::null_mut(), device);
    let event = backend.events.register(device, |key| HipEvent {
        raw: ptr::null_mut(),
        device,
        key,
    });
    let module = backend.register_module(ptr::null_mut(), device);
    let kernel = HipKernel {
        function: ptr::null_mut(),
        device,
        module: module.key,
        library_index: Some(0),
    };
    (stream, event, module, kernel)
}

fn stale<V>(what: &'static str, key: HandleKey<V>) -> Error {
    Error::StaleHandle {
        backend: "hip",
        what,
        id: key.id(),
    }
}

#[test]
fn destroyed_unloaded_reset_and_foreign_handles_are_stale_before_hip() {
    let Some(backend) = deviceless() else {
        eprintln!("skipped: the HIP library is not installed");
        return;
    };
    let d0 = DeviceId(0);
    let unknown = Err(Error::UnknownDevice {
        device: d0,
        device_count: 0,
    });
    let (stream, event, module, kernel) = live_handles(&backend, d0);
    let dims = LaunchDims::linear(1, 1);
    // Live: past the registry, refused for the device (which this backend lacks).
    assert_eq!(backend.stream_synchronize(stream), unknown);
    assert_eq!(backend.event_record(event, stream), unknown);
    assert_eq!(
        backend.kernel_static_workgroup_bytes(kernel),
        unknown.clone().map(|()| 0)
    );
    // SAFETY: refused before anything is enqueued.
    let launched = unsafe { backend.launch_packed(stream, kernel, dims, ptr::null_mut()) };
    assert_eq!(launched, unknown);
    // What destroying does first: the handle leaves the registry.
    backend.streams.remove(stream.key, || {}).unwrap();
    let gone = Err(stale("stream", stream.key));
    assert_eq!(backend.stream_synchronize(stream), gone);
    assert_eq!(backend.stream_destroy(stream), gone);
    assert_eq!(backend.event_record(event, stream), gone);
    assert_eq!(backend.stream_wait_event(stream, event), gone);
    assert_eq!(
        backend.allocate_on_stream(stream, MemoryKind::Device, 64),
        gone.clone().map(|()| None)
    );
    // SAFETY: refused before anything is enqueued.
    unsafe {
        assert_eq!(backend.copy(stream, 0x1000, 0x2000, 8), gone);
        assert_eq!(backend.fill(stream, 0x1000, 0, 8), gone);
        assert_eq!(
            backend.fill_elements(stream, 0x1000, FillValue::U8(0), 8),
            gone
        );
        assert_eq!(backend.copy_peer(stream, 0x1000, d0, 0x2000, d0, 8), gone);
        assert_eq!(
            backend.launch_packed(stream, kernel, dims, ptr::null_mut()),
            gone
        );
    }
    backend.events.remove(event.key, || {}).unwrap();
    let gone = Err(stale("event", event.key));
    assert_eq!(backend.event_query(event), gone.clone().map(|()| false));
    assert_eq!(backend.event_synchronize(event), gone);
    assert_eq!(backend.event_destroy(event), gone);
    // Unloading a module makes its kernels stale.
    backend.modules.remove(module.key, || {}).unwrap();
    assert_eq!(
        backend.module_kernel(module, c"k"),
        Err(stale("module", module.key))
    );
    assert_eq!(
        backend.module_unload(module),
        Err(stale("module", module.key))
    );
    let gone = Err(stale("kernel", module.key));
    assert_eq!(
        backend.kernel_static_workgroup_bytes(kernel),
        gone.clone().map(|()| 0)
    );
    assert_eq!(backend.kernel_allow_workgroup_bytes(kernel, 64), gone);
    // A reset forgets every handle of its device; another backend's handles are stale.
    let (stream, event, _, kernel) = live_handles(&backend, d0);
    assert_eq!(backend.streams.forget_device(d0), 1);
    assert_eq!(backend.events.forget_device(d0), 1);
    assert_eq!(backend.modules.forget_device(d0), 1);
    assert_eq!(
        backend.stream_synchronize(stream),
        Err(stale("stream", stream.key))
    );
    assert_eq!(
        backend.event_synchronize(event),
        Err(stale("event", event.key))
    );
    let other = deviceless().unwrap();
    let (stream, ..) = live_handles(&other, d0);
    assert_eq!(
        backend.stream_synchronize(stream),
        Err(stale("stream", stream.key))
    );
    assert_eq!(
        backend.kernel_static_workgroup_bytes(kernel),
        Err(stale("kernel", kernel.module))
    );
}

#[test]
fn only_memory_and_ranges_this_backend_recorded_reach_hip() {
    let Some(backend) = unreachable_device() else {
        eprintln!("skipped: the HIP library is not installed");
        return;
    };
    let d0 = DeviceId(0);
    let kind = MemoryKind::Device;
    let unknown = |address| {
        Err(Error::UnknownAddress {
            device: d0,
            address,
        })
    };
    assert_eq!(backend.free(d0, kind, 0x1000, None), unknown(0x1000));
    // Recorded (as an allocation would): past the check, HIP refuses to switch to the
    // device, and the memory stays recorded.
    backend
        .allocations
        .record(d0, kind, Ok(Some(0x1000)))
        .unwrap();
    assert!(matches!(
        backend.free(d0, kind, 0x1000, None),
        Err(Error::Driver(DriverError {
            call: "hipSetDevice" | "hipGetDevice",
            ..
        }))
    ));
    assert!(backend.allocations.contains(d0, kind, 0x1000));
    assert_eq!(
        backend.free(d0, MemoryKind::HostPinned, 0x1000, None),
        unknown(0x1000),
        "another kind"
    );
    // A stream of this backend that is stale: the free is refused, the memory kept.
    let stream = backend.register_stream(ptr::null_mut(), d0);
    backend.streams.remove(stream.key, || {}).unwrap();
    assert_eq!(
        backend.free(d0, kind, 0x1000, Some(stream)),
        Err(stale("stream", stream.key))
    );
    assert!(backend.allocations.contains(d0, kind, 0x1000));

    let range = ByteRange::new(0x7000_0100, 4096).unwrap();
    assert_eq!(
        backend.host_unregister(range.start),
        Err(Error::NotLocked { ptr: range.start })
    );
    backend.registrations.record(range);
    assert_eq!(
        backend.host_unregister(range.start + 8),
        Err(Error::NotEntryStart {
            ptr: range.start + 8,
            entry: range
        })
    );
    assert!(matches!(
        backend.host_unregister(range.start),
        Err(Error::Driver(_))
    ));
    assert_eq!(backend.registrations.get(range.start), Some(range));
}

#[test]
fn every_method_of_a_backend_without_devices_is_a_typed_error() {
    let Some(backend) = deviceless() else {
        eprintln!("skipped: the HIP library is not installed");
        return;
    };
    let d0 = DeviceId(0);
    let unknown = Error::UnknownDevice {
        device: d0,
        device_count: 0,
    };
    // Live handles of the missing device (never given to HIP: refused for the device).
    let (stream, event, module, kernel) = live_handles(&backend, d0);
    let range = ByteRange::new(0x1000, 64).unwrap();
    let mut one_slot = [0usize; 1];
    assert_eq!(backend.device_count(), 0);
    assert_eq!(backend.device_info(d0), Err(unknown.clone()));
    assert_eq!(backend.set_current_device(Some(d0)), Err(unknown.clone()));
    assert_eq!(
        backend.allocate(d0, MemoryKind::Device, 64),
        Err(unknown.clone())
    );
    assert_eq!(
        backend.allocate_on_stream(stream, MemoryKind::Device, 64),
        Err(unknown.clone())
    );
    assert_eq!(
        backend.free(d0, MemoryKind::Device, 0x1000, None),
        Err(unknown.clone())
    );
    assert_eq!(
        backend.host_register(range, &mut one_slot),
        Err(unknown.clone())
    );
    assert_eq!(
        backend.host_unregister(0x1000),
        Err(Error::NotLocked { ptr: 0x1000 }),
        "never registered here"
    );
    assert_eq!(
        backend.host_pinned_extent(0x1000, &mut one_slot),
        Err(unknown.clone())
    );
    assert_eq!(backend.stream_create(d0), Err(unknown.clone()));
    assert_eq!(backend.stream_destroy(stream), Err(unknown.clone()));
    assert_eq!(backend.stream_synchronize(stream), Err(unknown.clone()));
    assert_eq!(backend.event_create(d0), Err(unknown.clone()));
    assert_eq!(backend.event_destroy(event), Err(unknown.clone()));
    assert_eq!(backend.event_record(event, stream), Err(unknown.clone()));
    assert_eq!(
        backend.stream_wait_event(stream, event),
        Err(unknown.clone())
    );
    assert_eq!(backend.event_query(event), Err(unknown.clone()));
    assert_eq!(backend.event_synchronize(event), Err(unknown.clone()));
    assert_eq!(backend.device_synchronize(d0), Err(unknown.clone()));
    assert_eq!(backend.peer_access_possible(d0, d0), Err(unknown.clone()));
    assert_eq!(
        backend.peer_access_possible(d0, DeviceId(1)),
        Err(unknown.clone())
    );
    assert_eq!(backend.enable_peer_access(d0, d0), Err(unknown.clone()));
    // SAFETY: refused before any address is used.
    unsafe {
        assert_eq!(
            backend.copy(stream, 0x1000, 0x2000, 8),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.copy_peer(stream, 0x1000, d0, 0x2000, d0, 8),
            Err(unknown.clone())
        );
        assert_eq!(backend.fill(stream, 0x1000, 0, 8), Err(unknown.clone()));
        assert_eq!(
            backend.launch(stream, kernel, LaunchDims::linear(1, 1), &[]),
            Err(Error::KernelArgumentMismatch {
                kernel: "fill_u32",
                expected: "(Ptr dst, U32 value, U64 count)",
            })
        );
        let args = [KernelArg::Ptr(0x1000), KernelArg::U32(1), KernelArg::U64(1)];
        assert_eq!(
            backend.launch(stream, kernel, LaunchDims::linear(1, 1), &args),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.fill_elements(stream, 0x1000, FillValue::U16(7), 4),
            Err(unknown.clone())
        );
        let image = c"not an image";
        assert_eq!(
            backend.module_load(d0, image.as_ptr().cast()),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.module_load(d0, ptr::null()),
            Err(Error::NullPointer {
                what: "module image"
            })
        );
        let module_kernel = HipKernel {
            library_index: None,
            ..kernel
        };
        assert_eq!(
            backend.launch(stream, module_kernel, LaunchDims::linear(1, 1), &args),
            Err(Error::KernelArgumentMismatch {
                kernel: MODULE_KERNEL,
                expected: "the module's own parameter array (launch_packed)",
            })
        );
        assert_eq!(
            backend.launch_packed(
                stream,
                module_kernel,
                LaunchDims::linear(1, 1),
                ptr::null_mut()
            ),
            Err(unknown.clone())
        );
    }
    assert_eq!(backend.module_unload(module), Err(unknown.clone()));
    assert_eq!(backend.module_kernel(module, c"k"), Err(unknown.clone()));
    assert_eq!(backend.kernel(d0, "fill_u32"), Err(unknown.clone()));
    assert_eq!(
        backend.kernel(d0, "no_such_kernel"),
        Err(Error::UnknownKernel {
            backend: "hip",
            name: "no_such_kernel".into()
        })
    );
    assert_eq!(
        backend.kernel_allow_workgroup_bytes(kernel, 1 << 20),
        Err(unknown.clone())
    );
    assert_eq!(
        backend.kernel_static_workgroup_bytes(kernel),
        Err(unknown.clone())
    );
    assert!(!backend.is_current(SavedDevice(Some(0)), d0));
    // The thread's device: HIP reports its own error; "no device" is the backend's mark.
    if let Err(error) = backend.current_device() {
        assert!(matches!(error, Error::Driver(_)), "{error}");
    }
    assert_eq!(backend.set_current_device(None), Ok(()));
    assert_eq!(backend.current_device(), Ok(None));
    assert_eq!(backend.save_current(), Ok(SavedDevice(None)));
    assert_eq!(backend.restore_current(SavedDevice(None)), Ok(()));
}

#[test]
fn handles_and_backend_are_send_and_sync() {
    assert_thread_safe::<HipStream>();
    assert_thread_safe::<HipEvent>();
    assert_thread_safe::<HipKernel>();
    assert_thread_safe::<HipBackend>();
    assert_thread_safe::<SavedDevice>();
}

#[test]
fn graphs_are_checked_like_the_other_handles_before_hip() {
    use gpu_core::backend::graph::{GraphDesc, NodeId, NodeOp};
    use gpu_core::backend::live::LiveGraph;

    use super::HipGraph;
    use super::graphs::GraphState;

    let Some(backend) = deviceless() else {
        eprintln!("skipped: the HIP library is not installed");
        return;
    };
    let d0 = DeviceId(0);
    let unknown = Err(Error::UnknownDevice {
        device: d0,
        device_count: 0,
    });
    assert_eq!(
        backend.graph_instantiate(d0, &GraphDesc::new()),
        unknown.clone().map(|()| unreachable!())
    );
    // A graph as instantiation would record it (no HIP objects behind it).
    let (stream, _, _, _) = live_handles(&backend, d0);
    let empty = LiveGraph::build(
        &GraphDesc::new(),
        |kernel: &HipKernel| kernel.module,
        || Ok(ptr::null_mut()),
        |_, _, _| unreachable!("no nodes"),
        |_| Ok(ptr::null_mut()),
        |_| {},
    )
    .unwrap();
    let key = backend.graphs.insert(d0, GraphState { live: empty });
    let graph = HipGraph { device: d0, key };
    // SAFETY: refused before HIP.
    assert_eq!(unsafe { backend.graph_launch(stream, graph) }, unknown);
    let fill = NodeOp::Fill {
        dst: 0x1000,
        value: FillValue::U8(1),
        count: 1,
    };
    assert_eq!(
        backend.graph_set_node(graph, NodeId(0), &fill),
        Err(Error::UnknownGraphNode { node: 0, nodes: 0 })
    );
    // Destroying takes the handle out first: stale from then on, whatever HIP says.
    assert_eq!(backend.graph_destroy(graph), unknown);
    let gone = Err(stale("graph", key));
    assert_eq!(backend.graph_destroy(graph), gone);
    // SAFETY: refused before HIP.
    assert_eq!(unsafe { backend.graph_launch(stream, graph) }, gone);
}

#[test]
fn virtual_memory_is_checked_before_hip_and_absent_without_a_granularity() {
    let (Some(none), Some(mut unreachable)) = (deviceless(), unreachable_device()) else {
        return;
    };
    let (d0, device) = (DeviceId(0), MemoryKind::Device);
    assert_eq!(none.vm_granularity(d0, device), None);
    assert!(matches!(
        none.vm_reserve(d0, device, 1 << 21, 1 << 21),
        Err(Error::UnknownDevice { .. })
    ));
    // Without a granularity from HIP at open: no virtual memory, refused as a kind.
    let unsupported = Err(Error::KindUnsupported {
        device: d0,
        kind: device,
    });
    assert_eq!(unreachable.vm_granularity(d0, device), None);
    assert_eq!(
        unreachable.vm_reserve(d0, device, 1 << 21, 1 << 21),
        unsupported
    );
    // With one, misaligned sizes and ranges never reserved are refused before HIP (which
    // would fail at hipSetDevice for this device), and only device memory has one.
    unreachable.devices[0].vm_granularity = Some(1 << 21);
    assert_eq!(unreachable.vm_granularity(d0, device), Some(1 << 21));
    assert_eq!(unreachable.vm_granularity(d0, MemoryKind::HostPinned), None);
    assert_eq!(
        unreachable.vm_reserve(d0, device, 3 << 20, 1 << 21),
        Err(Error::MisalignedSegment {
            address: 3 << 20,
            required: 1 << 21
        })
    );
    let never = Err(Error::UnknownAddress {
        device: d0,
        address: 1 << 40,
    });
    assert_eq!(
        unreachable.vm_map(d0, device, 1 << 40, 1 << 21),
        never.clone().map(|()| true)
    );
    assert_eq!(unreachable.vm_set_access(d0, 1 << 40, 1 << 21, d0), never);
    assert_eq!(
        unreachable.vm_unmap(d0, device, 1 << 40, 1 << 21, None),
        never
    );
    assert_eq!(unreachable.vm_release(d0, device, 1 << 40, 1 << 21), never);
    // A well-formed reservation reaches HIP, whose failure is a typed driver error.
    assert!(matches!(
        unreachable.vm_reserve(d0, device, 1 << 21, 1 << 21),
        Err(Error::Driver(_))
    ));
}
