//! The backend's own tests through the trait: a backend over the real library with no device,
//! or with made-up devices and peers, answers every method with the typed error it promises.

use core::ffi::c_void;
use core::ptr;
use std::sync::Mutex;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, FillValue, KernelArg, LaunchDims};
use gpu_core::{ByteRange, DeviceId, Error};

use super::copies::no_peer_access;
use super::devices::{DeviceState, describe_device};
use super::handles::MODULE_KERNEL;
use super::packets::KernelObject;
use super::{
    HsaBackend, HsaEvent, HsaKernel, HsaModule, HsaStream, SavedDevice, Tables, lock, stale,
};
use crate::library::Hsa;
use crate::sys;

fn assert_thread_safe<T: Send + Sync>() {}

/// A backend over the real library with no device opened (what a machine without an AMD
/// GPU would have if opening did not refuse); `None` where the library is absent.
fn deviceless() -> Option<HsaBackend> {
    Hsa::global().ok().map(|hsa| HsaBackend {
        hsa,
        devices: Vec::new(),
        host: None,
        tables: Mutex::new(Tables::default()),
        _runtime: None,
    })
}

#[test]
fn every_method_of_a_backend_without_devices_is_a_typed_error() {
    let Some(backend) = deviceless() else {
        eprintln!("skipped: the HSA library is not installed");
        return;
    };
    let d0 = DeviceId(0);
    let unknown = Error::UnknownDevice {
        device: d0,
        device_count: 0,
    };
    let stream = HsaStream {
        serial: 1,
        device: d0,
    };
    let event = HsaEvent {
        serial: 2,
        device: d0,
    };
    let object = KernelObject {
        kernarg_size: 24,
        ..KernelObject::default()
    };
    let kernel = HsaKernel {
        object,
        device: d0,
        library_index: Some(0),
    };
    let module_kernel = HsaKernel {
        library_index: None,
        ..kernel
    };
    let module = HsaModule {
        serial: 3,
        device: d0,
    };
    let range = ByteRange::new(0x1000, 64).unwrap();
    let mut one_slot = [0usize; 1];
    assert_eq!(backend.name(), "hsa");
    assert_eq!(backend.device_count(), 0);
    assert_eq!(backend.device_info(d0), Err(unknown.clone()));
    assert_eq!(backend.set_current_device(Some(d0)), Err(unknown.clone()));
    for kind in MemoryKind::CACHED {
        assert_eq!(backend.allocate(d0, kind, 64), Err(unknown.clone()));
        assert_eq!(
            backend.allocate_on_stream(stream, kind, 64),
            Err(unknown.clone())
        );
        assert_eq!(backend.free(d0, kind, 0x1000, None), Err(unknown.clone()));
    }
    assert_eq!(
        backend.host_register(range, &mut one_slot),
        Err(unknown.clone())
    );
    assert_eq!(backend.host_register(range, &mut []), Err(unknown.clone()));
    assert_eq!(
        backend.host_unregister(0x1000),
        Err(Error::NotLocked { ptr: 0x1000 })
    );
    assert_eq!(
        backend.host_pinned_extent(0x1000, &mut one_slot),
        Err(unknown.clone())
    );
    assert_eq!(
        backend.host_pinned_extent(0x1000, &mut []),
        Err(unknown.clone())
    );
    assert_eq!(backend.stream_create(d0), Err(unknown.clone()));
    assert_eq!(
        // SAFETY: refused before the raw handle is used.
        unsafe { backend.adopt_stream(d0, 0x1000) },
        Err(unknown.clone())
    );
    assert_eq!(backend.stream_destroy(stream), Err(unknown.clone()));
    assert_eq!(backend.stream_synchronize(stream), Err(unknown.clone()));
    assert_eq!(backend.event_create(d0), Err(unknown.clone()));
    assert_eq!(backend.event_destroy(event), Err(unknown.clone()));
    assert_eq!(backend.event_record(event, stream), Err(unknown.clone()));
    assert_eq!(
        backend.event_record(
            HsaEvent {
                device: DeviceId(1),
                ..event
            },
            stream
        ),
        Err(Error::WrongDevice {
            expected: d0,
            found: DeviceId(1)
        })
    );
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
    let args = [KernelArg::Ptr(0x1000), KernelArg::U32(1), KernelArg::U64(1)];
    // SAFETY: every call is refused before any address is used.
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
            backend.fill_elements(stream, 0x1000, FillValue::U16(7), 4),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.launch(stream, kernel, LaunchDims::linear(1, 1), &[]),
            Err(Error::KernelArgumentMismatch {
                kernel: "fill_u32",
                expected: "(Ptr dst, U32 value, U64 count)",
            })
        );
        assert_eq!(
            backend.launch(stream, kernel, LaunchDims::linear(1, 1), &args),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.launch(
                stream,
                HsaKernel {
                    device: DeviceId(1),
                    ..kernel
                },
                LaunchDims::linear(1, 1),
                &args
            ),
            Err(Error::WrongDevice {
                expected: d0,
                found: DeviceId(1)
            })
        );
        let too_many = [KernelArg::U64(1); 4];
        assert_eq!(
            backend.launch(stream, module_kernel, LaunchDims::linear(1, 1), &too_many),
            Err(Error::KernelArgumentMismatch {
                kernel: MODULE_KERNEL,
                expected: "arguments that fit the kernel's kernarg segment",
            })
        );
        assert_eq!(
            backend.launch(stream, module_kernel, LaunchDims::linear(1, 1), &args),
            Err(unknown.clone())
        );
        let mut values = [0x1000u64, 1, 1];
        let mut params: Vec<*mut c_void> =
            values.iter_mut().map(|v| (v as *mut u64).cast()).collect();
        assert_eq!(
            backend.launch_packed(
                stream,
                kernel,
                LaunchDims::linear(1, 1),
                params.as_mut_ptr()
            ),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.launch_packed(
                stream,
                module_kernel,
                LaunchDims::linear(1, 1),
                params.as_mut_ptr()
            ),
            Err(Error::Unsupported {
                backend: "hsa",
                what: "launching a module's kernel with a parameter array (use launch)",
            })
        );
        let image = gpu_hip_ffi::code_objects::CODE_OBJECTS[0];
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
    }
    assert_eq!(backend.module_unload(module), Err(unknown.clone()));
    assert_eq!(backend.module_kernel(module, c"k"), Err(unknown.clone()));
    assert_eq!(backend.kernel(d0, "fill_u32"), Err(unknown.clone()));
    assert_eq!(
        backend.kernel(d0, "no_such_kernel"),
        Err(Error::UnknownKernel {
            backend: "hsa",
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
    // The thread's device is the backend's own record: no device can be chosen, none is.
    assert!(!backend.is_current(SavedDevice(Some(d0)), d0));
    assert_eq!(backend.set_current_device(None), Ok(()));
    assert_eq!(backend.current_device(), Ok(None));
    assert_eq!(backend.save_current(), Ok(SavedDevice(None)));
    assert_eq!(backend.restore_current(SavedDevice(None)), Ok(()));
    // Nothing was created along the way.
    let tables = lock(&backend.tables);
    assert!(tables.streams.is_empty() && tables.events.is_empty());
    assert!(tables.modules.is_empty() && tables.locks.is_empty());
    assert!(tables.free_signals.is_empty() && tables.records.is_empty());
    assert_eq!(tables.next_serial, 0);
}

/// A backend over the real library with one device per entry of `peers`, each reached by
/// the agents of the devices listed (agent handles are device index + 1); nothing opened.
fn with_peers(peers: &[&[u64]]) -> Option<HsaBackend> {
    let mut backend = deviceless()?;
    backend.devices = (1..=peers.len() as u64)
        .zip(peers)
        .map(|(handle, reaching)| DeviceState {
            agent: sys::hsa_agent_t { handle },
            memory_pool: sys::hsa_amd_memory_pool_t {
                handle: handle * 10,
            },
            peers: reaching
                .iter()
                .map(|&handle| sys::hsa_agent_t { handle })
                .collect(),
            queue_slots: 1,
            info: describe_device("gfx90a".into(), 1 << 30, 65536),
            library: Mutex::new(None),
        })
        .collect();
    Some(backend)
}

#[test]
fn peer_access_follows_which_gpus_reach_each_pool_and_enabling_only_checks_it() {
    // Devices 0 and 1 reach each other's pools; device 2's pool is reached by device 0,
    // and device 2 reaches no other pool.
    let Some(backend) = with_peers(&[&[2], &[1], &[1]]) else {
        return;
    };
    let (d0, d1, d2) = (DeviceId(0), DeviceId(1), DeviceId(2));
    assert_eq!(backend.peer_access_possible(d0, d1), Ok(true));
    assert_eq!(backend.peer_access_possible(d1, d0), Ok(true));
    assert_eq!(backend.peer_access_possible(d0, d2), Ok(true));
    assert_eq!(backend.peer_access_possible(d2, d0), Ok(false));
    assert_eq!(backend.peer_access_possible(d0, d0), Ok(false));
    for _ in 0..2 {
        assert_eq!(backend.enable_peer_access(d0, d1), Ok(()));
    }
    assert_eq!(backend.enable_peer_access(d0, d2), Ok(()));
    assert_eq!(backend.enable_peer_access(d2, d0), Err(no_peer_access()));
    assert_eq!(backend.enable_peer_access(d1, d1), Err(no_peer_access()));
    let unknown = Error::UnknownDevice {
        device: DeviceId(3),
        device_count: 3,
    };
    assert_eq!(
        backend.peer_access_possible(d0, DeviceId(3)),
        Err(unknown.clone())
    );
    assert_eq!(
        backend.enable_peer_access(DeviceId(3), d0),
        Err(unknown.clone())
    );
    let stream = HsaStream {
        serial: 1,
        device: d0,
    };
    let no_stream = Err(stale(
        "stream handle (destroyed or foreign)",
        sys::HSA_STATUS_ERROR_INVALID_QUEUE,
    ));
    // SAFETY: every call is refused before any address is used: an unknown device, a pair
    // that does not reach each other both ways, else the unknown stream.
    unsafe {
        assert_eq!(
            backend.copy_peer(stream, 0x1000, DeviceId(3), 0x2000, d0, 8),
            Err(unknown.clone())
        );
        assert_eq!(
            backend.copy_peer(stream, 0x1000, d1, 0x2000, DeviceId(3), 8),
            Err(unknown)
        );
        assert_eq!(
            backend.copy_peer(stream, 0x1000, d2, 0x2000, d0, 8),
            Err(no_peer_access())
        );
        assert_eq!(
            backend.copy_peer(stream, 0x1000, d0, 0x2000, d2, 8),
            Err(no_peer_access())
        );
        assert_eq!(
            backend.copy_peer(stream, 0x1000, d1, 0x2000, d0, 8),
            no_stream
        );
        assert_eq!(
            backend.copy_peer(stream, 0x1000, d2, 0x2000, d2, 8),
            no_stream
        );
    }
}

#[test]
fn the_current_device_is_per_thread() {
    let Some(backend) = deviceless() else { return };
    backend
        .restore_current(SavedDevice(Some(DeviceId(3))))
        .unwrap();
    assert_eq!(backend.current_device(), Ok(Some(DeviceId(3))));
    // Device 3 does not exist here, so it is never "current" for the guard.
    assert!(!backend.is_current(SavedDevice(Some(DeviceId(3))), DeviceId(3)));
    std::thread::scope(|scope| {
        scope.spawn(|| assert_eq!(backend.current_device(), Ok(None)));
    });
    backend.set_current_device(None).unwrap();
    assert_eq!(backend.current_device(), Ok(None));
}

#[test]
fn handles_and_backend_are_send_and_sync() {
    assert_thread_safe::<HsaStream>();
    assert_thread_safe::<HsaEvent>();
    assert_thread_safe::<HsaKernel>();
    assert_thread_safe::<HsaModule>();
    assert_thread_safe::<HsaBackend>();
    assert_thread_safe::<SavedDevice>();
}
