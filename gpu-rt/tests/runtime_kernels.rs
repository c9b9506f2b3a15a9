//! Kernels through the runtime on the host backend: handles loaded once, the workgroup-memory
//! opt-in (once, never lowered by another runtime, leaving room for static memory, refused above
//! the limit before the driver), and module images the host backend refuses.

use std::sync::Arc;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::{Arg, Runtime, RuntimeConfig};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap()
}

/// A kernel handle loads once per device, opts in above the default workgroup limit once (to
/// the device's whole opt-in limit), and refuses spans of another device; unknown names are typed errors.
#[test]
fn kernel_handles_load_once_and_opt_in_once() {
    let rt = runtime();
    let unknown = rt.kernel(D0, "no_such_kernel").err().unwrap();
    assert!(
        matches!(unknown, Error::UnknownKernel { backend: "host", ref name } if name == "no_such_kernel"),
        "{unknown:?}"
    );
    let before = rt.backend().calls();
    let fill = rt.kernel(D0, "fill_u32").unwrap();
    let again = rt.kernel(D0, "fill_u32").unwrap();
    assert_eq!(fill.device(), D0);
    let buffer = rt.alloc(D0, MemoryKind::Device, 1024).unwrap();
    let default = rt.device_info(D0).unwrap().workgroup.default_per_block;
    let mut chain = vec![];
    for (handle, bytes) in [
        (fill, 0),
        (again, default),
        (fill, default + 4),
        (again, default + 4),
        (fill, default + 8),
    ] {
        let dims = LaunchDims {
            dynamic_workgroup_bytes: bytes,
            ..LaunchDims::linear(1, 256)
        };
        let args = [Arg::Span(buffer.all()), Arg::U32(bytes), Arg::U64(256)];
        // SAFETY: fill_u32 writes its count of words (256 of 4 bytes) of the 1 KiB span.
        let token = unsafe { handle.launch(dims, &args, &mut chain) }.unwrap();
        chain.push(token);
    }
    let mut back = vec![0u8; 1024];
    rt.download(D0, &mut back, buffer.all(), &mut chain)
        .unwrap();
    let last = (default + 8).to_le_bytes();
    assert!(back.chunks_exact(4).all(|word| word == last));
    let calls = rt.backend().calls().since(&before);
    assert_eq!(calls.of(CallKind::KernelLoad), 1);
    // One opt-in, to the device's whole limit, covers every larger size.
    assert_eq!(calls.of(CallKind::KernelAllowWorkgroupBytes), 1);
    assert_eq!(calls.of(CallKind::Launch), 5);

    let elsewhere = rt.alloc(D1, MemoryKind::Device, 1024).unwrap();
    let args = [Arg::Span(elsewhere.all()), Arg::U32(1), Arg::U64(256)];
    // SAFETY: refused before anything runs.
    let refused = unsafe { fill.launch(LaunchDims::linear(1, 256), &args, &mut vec![]) };
    assert!(matches!(
        refused,
        Err(Error::WrongDevice {
            expected: D0,
            found: D1
        })
    ));
}

/// Launches `workgroup_reverse_u32` over `words` words in one group with `words * 4` bytes of
/// dynamic workgroup memory, and waits for it.
fn reverse_in_one_group<B: Backend>(rt: &Runtime<B>, words: u32) -> Result<(), Error> {
    let buffer = rt.alloc(D0, MemoryKind::Device, words as usize * 4)?;
    let dims = LaunchDims {
        dynamic_workgroup_bytes: words * 4,
        ..LaunchDims::linear(1, 128)
    };
    let args = [Arg::Span(buffer.all()), Arg::U32(words)];
    // SAFETY: one group of `words` words: the whole buffer.
    let token = unsafe { rt.launch(D0, "workgroup_reverse_u32", dims, &args, &mut vec![]) }?;
    rt.wait(token)
}

/// Found by the scaling run (one runtime per thread over one backend): the kernel's opt-in
/// lives in the driver's kernel object, which runtimes sharing a backend share. One runtime
/// opting in exactly 50 KB lowered another's 64 KB opt-in, whose next 64 KB launch failed.
/// The opt-in now asks for all the kernel may have (the device's limit less its static bytes);
/// an opt-in the driver fails is the launch's typed error, and the next launch tries again.
#[test]
fn runtimes_sharing_a_backend_never_lower_each_others_workgroup_opt_in() {
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
    let first = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let second = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    reverse_in_one_group(&first, 16_384).unwrap();
    reverse_in_one_group(&second, 12_800).unwrap();
    reverse_in_one_group(&first, 16_384).unwrap();
    assert_eq!(backend.calls().of(CallKind::KernelAllowWorkgroupBytes), 2);

    let third = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    backend.fail_nth(CallKind::KernelAllowWorkgroupBytes, 1);
    let failed = reverse_in_one_group(&third, 12_800).unwrap_err();
    assert!(matches!(failed, Error::Driver(_)), "{failed}");
    reverse_in_one_group(&third, 12_800).unwrap();
    assert_eq!(backend.calls().of(CallKind::KernelAllowWorkgroupBytes), 4);
}

/// Found by compute-sanitizer on MLIR's shared_memory program (H100): the opt-in asked for the
/// device's whole opt-in limit, which the driver refuses for a kernel with static shared memory
/// (static and dynamic bytes share the limit), and only then for the exact size: one failed
/// driver call per kernel, an error to every sanitizer. The runtime now asks for the kernel's
/// static bytes once, opts in to the limit less them, refuses more as `LimitExceeded` before
/// the driver, and opts in between the default limit less them and the default limit too.
#[test]
fn the_opt_in_leaves_room_for_a_kernels_static_workgroup_memory() {
    const STATIC: u32 = 8 * 1024;
    let backend = Arc::new(HostBackend::new(HostConfig::with_devices(1)));
    backend.register_kernel_with_static_workgroup_bytes("with_static", STATIC, |_, _| Ok(()));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let limits = rt.device_info(D0).unwrap().workgroup;
    let kernel = rt.kernel(D0, "with_static").unwrap();
    let launch = |bytes: u32| {
        let dims = LaunchDims {
            dynamic_workgroup_bytes: bytes,
            ..LaunchDims::linear(1, 32)
        };
        // SAFETY: the kernel takes no arguments and touches no memory.
        let token = unsafe { kernel.launch(dims, &[], &mut vec![]) }?;
        rt.wait(token)
    };
    let before = backend.calls();
    // Under the default limit, but not with the static bytes: needs the opt-in.
    launch(limits.default_per_block - STATIC + 4).unwrap();
    let most = limits.max_per_block_opt_in - STATIC;
    launch(most).unwrap();
    let refused = launch(most + 1).unwrap_err();
    assert!(
        matches!(refused, Error::LimitExceeded { required, limit, .. }
            if required == most as usize + 1 && limit == most as usize),
        "{refused}"
    );
    launch(0).unwrap();
    launch(64).unwrap();
    let calls = backend.calls().since(&before);
    assert_eq!(calls.of(CallKind::KernelStaticWorkgroupBytes), 1);
    // One opt-in, which the driver took: no refused attempt before it.
    assert_eq!(calls.of(CallKind::KernelAllowWorkgroupBytes), 1);
    assert_eq!(calls.of(CallKind::Launch), 4);
}

#[test]
fn a_launch_above_the_opt_in_limit_is_refused_before_the_driver() {
    let rt = runtime();
    let fill = rt.kernel(D0, "fill_u32").unwrap();
    let limit = rt.device_info(D0).unwrap().workgroup.max_per_block_opt_in;
    let buffer = rt.alloc(D0, MemoryKind::Device, 1024).unwrap();
    let before = rt.backend().calls();
    let dims = LaunchDims {
        dynamic_workgroup_bytes: limit + 1,
        ..LaunchDims::linear(1, 256)
    };
    let args = [Arg::Span(buffer.all()), Arg::U32(0), Arg::U64(256)];
    let mut after = vec![];
    // SAFETY: refused before anything runs.
    let refused = unsafe { fill.launch(dims, &args, &mut after) }.unwrap_err();
    assert!(
        matches!(refused, Error::LimitExceeded { required, limit: l, .. }
            if required == limit as usize + 1 && l == limit as usize),
        "{refused}"
    );
    // SAFETY: refused before the (null) parameter array is read.
    let packed = unsafe { fill.launch_packed(dims, std::ptr::null_mut(), &mut after) };
    assert!(matches!(packed, Err(Error::LimitExceeded { .. })));
    assert_eq!(rt.backend().calls().since(&before).total, 0);
}

#[test]
fn module_images_are_refused_by_the_host_backend_through_the_runtime() {
    let rt = runtime();
    let image = c"// PTX";
    // SAFETY: a NUL-terminated image that outlives the call (it is refused anyway).
    let loaded = unsafe { rt.load_module(D0, image.as_ptr().cast()) };
    assert!(
        matches!(
            loaded,
            Err(Error::Unsupported {
                backend: "host",
                ..
            })
        ),
        "{loaded:?}"
    );
    // SAFETY: as above.
    let unknown = unsafe { rt.load_module(DeviceId(5), image.as_ptr().cast()) };
    assert!(matches!(unknown, Err(Error::UnknownDevice { .. })));
}
