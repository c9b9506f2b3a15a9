//! The HIP backend on real hardware (HIP on NVIDIA GPUs through the `nvidia` shim, or ROCm on
//! AMD GPUs): every trait method at least once with the calling thread's device checked after
//! each call, launches from threads whose current device is another one, peer access and peer
//! copies between two devices, then the backend-generic conformance suite. Without the library or a device each test says it
//! skipped and passes.

use core::ffi::c_int;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, KernelArg, LaunchDims};
use gpu_core::{ByteRange, DeviceId, DriverError, Error};
use gpu_hip_ffi::{HipBackend, HipStream, reports_no_device, sys};
use gpu_testkit::conformance::run_and_print;

/// The backend, or `None` after printing why the test is skipped (on a line of its own: the
/// harness has printed "test NAME ... ", and the runner looks for "backend hip: skipped" at the
/// start of a line).
fn open() -> Option<HipBackend> {
    match HipBackend::new() {
        Ok(backend) => Some(backend),
        Err(error @ Error::DriverLibraryNotFound { .. }) => {
            eprintln!("\nbackend hip: skipped: no HIP library ({error})");
            None
        }
        Err(error) if reports_no_device(&error) => {
            eprintln!("\nbackend hip: skipped: no device ({error})");
            None
        }
        Err(other) => panic!("opening the HIP backend failed: {other}"),
    }
}

/// What the calling thread has current: the backend's view and HIP's own device.
fn thread_state(b: &HipBackend) -> (Option<DeviceId>, c_int) {
    let get = b.library().hipGetDevice().unwrap();
    let mut ordinal: c_int = -1;
    // SAFETY: a valid out-parameter.
    assert_eq!(unsafe { get(&mut ordinal) }, sys::hipSuccess);
    (b.current_device().unwrap(), ordinal)
}

/// Evaluates a backend call and checks that the thread's current device is what it was.
macro_rules! kept {
    ($backend:expr, $call:expr) => {{
        let before = thread_state($backend);
        let result = $call;
        assert_eq!(
            thread_state($backend),
            before,
            "{} changed the current device",
            stringify!($call)
        );
        result
    }};
}

/// HIP's error `name` (code `code`) from `call`.
fn hip(call: &'static str, name: &'static str, code: i64) -> Error {
    Error::Driver(DriverError {
        backend: "hip",
        call,
        name,
        code,
    })
}

const D0: DeviceId = DeviceId(0);

/// Bytes copied out of `address` (device or host memory) after the stream's work.
///
/// # Safety
/// `[address, address + bytes)` is live memory of `b` that nothing else writes meanwhile.
unsafe fn read_back(b: &HipBackend, stream: HipStream, address: usize, bytes: usize) -> Vec<u8> {
    let mut host = vec![0u8; bytes];
    // SAFETY: the caller's memory; `host` is untouched until the synchronise below.
    kept!(b, unsafe {
        b.copy(stream, host.as_mut_ptr() as usize, address, bytes)
    })
    .unwrap();
    kept!(b, b.stream_synchronize(stream)).unwrap();
    host
}

fn devices(b: &HipBackend, start: Option<DeviceId>) {
    let count = kept!(b, b.device_count());
    assert_eq!(b.name(), "hip");
    let info = kept!(b, b.device_info(D0)).unwrap();
    eprintln!("device 0 of {count}: {info:?}");
    assert!(info.total_memory > 0 && info.unified_addressing);
    assert!(info.allocator.device.available && info.allocator.host_register);
    assert!(info.workgroup.default_per_block <= info.workgroup.max_per_block_opt_in);
    let missing = Err(Error::UnknownDevice {
        device: DeviceId(count as u32),
        device_count: count,
    });
    assert_eq!(kept!(b, b.device_info(DeviceId(count as u32))), missing);
    assert_eq!(b.current_device(), Ok(start));
    let last = DeviceId(count as u32 - 1);
    b.set_current_device(Some(last)).unwrap();
    assert_eq!(thread_state(b), (Some(last), last.0 as c_int));
    b.set_current_device(None).unwrap();
    assert_eq!(b.current_device(), Ok(None), "the backend's no-device mark");
    assert_eq!(
        b.set_current_device(Some(DeviceId(count as u32)))
            .map(|_| ()),
        missing.map(|_| ())
    );
    b.set_current_device(start).unwrap();
}

fn memory(b: &HipBackend, stream: HipStream) {
    let caps = b.device_info(D0).unwrap().allocator;
    let size = 1 << 20;
    for kind in MemoryKind::CACHED {
        if !caps.support(kind).available {
            continue;
        }
        for after in [None, Some(stream)] {
            let address = kept!(b, b.allocate(D0, kind, size)).unwrap().unwrap();
            // SAFETY: a fresh allocation of `size` bytes, used by nothing else.
            kept!(b, unsafe { b.fill(stream, address, 0x3c, size) }).unwrap();
            // SAFETY: as above.
            let back = unsafe { read_back(b, stream, address, size) };
            assert!(back.iter().all(|&byte| byte == 0x3c), "{kind:?}");
            kept!(b, b.free(D0, kind, address, after)).unwrap();
        }
        assert_eq!(
            kept!(b, b.allocate(D0, kind, 0)),
            Err(Error::ZeroSize {
                what: "allocation size"
            })
        );
    }
    let huge = 1usize << 50;
    assert_eq!(kept!(b, b.allocate(D0, MemoryKind::Device, huge)), Ok(None));
    assert!(
        caps.device.stream_ordered,
        "the device reports memory pools"
    );
    for after in [Some(stream), None] {
        let address = kept!(b, b.allocate_on_stream(stream, MemoryKind::Device, size))
            .unwrap()
            .unwrap();
        // SAFETY: a fresh stream-ordered allocation of `size` bytes on this very stream.
        kept!(b, unsafe { b.fill(stream, address, 0xa7, size) }).unwrap();
        // SAFETY: as above.
        let back = unsafe { read_back(b, stream, address, size) };
        assert!(back.iter().all(|&byte| byte == 0xa7));
        kept!(b, b.free(D0, MemoryKind::Device, address, after)).unwrap();
    }
    assert_eq!(
        kept!(b, b.allocate_on_stream(stream, MemoryKind::Device, huge)),
        Ok(None)
    );
    assert_eq!(
        kept!(b, b.allocate_on_stream(stream, MemoryKind::Managed, size)),
        Err(Error::KindUnsupported {
            device: D0,
            kind: MemoryKind::Managed
        })
    );
    kept!(b, b.stream_synchronize(stream)).unwrap();
}

fn host_registration(b: &HipBackend, stream: HipStream) {
    let count = b.device_count();
    let mut host = vec![0u8; 3 << 20];
    let len = 1 << 20;
    let start = host.as_mut_ptr() as usize + 100;
    let range = ByteRange::new(start, len).unwrap();
    let mut device_ptrs = vec![0usize; count];
    kept!(b, b.host_register(range, &mut device_ptrs)).unwrap();
    assert!(device_ptrs.iter().all(|&address| address != 0));
    let already = Err(hip(
        "hipHostRegister",
        "hipErrorHostMemoryAlreadyRegistered",
        712,
    ));
    let mut scratch = vec![0usize; count];
    assert_eq!(kept!(b, b.host_register(range, &mut scratch)), already);
    let inside = ByteRange::new(start + 4096, 4096).unwrap();
    assert_eq!(kept!(b, b.host_register(inside, &mut scratch)), already);

    let mut found = vec![0usize; count];
    assert_eq!(
        kept!(b, b.host_pinned_extent(start + 5000, &mut found)),
        Ok(Some(range))
    );
    assert_eq!(found, device_ptrs);
    let on_stack = 0u64;
    assert_eq!(
        kept!(
            b,
            b.host_pinned_extent(&on_stack as *const u64 as usize, &mut found)
        ),
        Ok(None)
    );
    assert_eq!(
        kept!(b, b.host_pinned_extent(start, &mut vec![0usize; count + 1])),
        Err(Error::UnknownDevice {
            device: DeviceId(count as u32),
            device_count: count
        })
    );
    // The device writes the registered memory through the address the backend gave.
    let device_memory = b.allocate(D0, MemoryKind::Device, 4096).unwrap().unwrap();
    // SAFETY: a live 4 KiB allocation, then the device's address of the first 4 KiB of the
    // registered range (inside `host`, untouched until the synchronise below).
    unsafe {
        kept!(b, b.fill(stream, device_memory, 0x5c, 4096)).unwrap();
        kept!(b, b.copy(stream, device_ptrs[0], device_memory, 4096)).unwrap();
    }
    kept!(b, b.stream_synchronize(stream)).unwrap();
    assert!(host[100..4196].iter().all(|&byte| byte == 0x5c));
    assert_eq!(host[99], 0);
    b.free(D0, MemoryKind::Device, device_memory, None).unwrap();

    // Refused before HIP: a pointer inside the range, and one no longer registered.
    assert_eq!(
        kept!(b, b.host_unregister(start + 5000)),
        Err(Error::NotEntryStart {
            ptr: start + 5000,
            entry: range
        })
    );
    kept!(b, b.host_unregister(start)).unwrap();
    assert_eq!(
        kept!(b, b.host_unregister(start)),
        Err(Error::NotLocked { ptr: start })
    );
    assert_eq!(kept!(b, b.host_pinned_extent(start, &mut found)), Ok(None));
    // Memory pinned by someone else (here hipHostMalloc) is found with its whole extent.
    let pinned = b
        .allocate(D0, MemoryKind::HostPinned, len)
        .unwrap()
        .unwrap();
    assert_eq!(
        kept!(b, b.host_pinned_extent(pinned + 777, &mut found)),
        Ok(Some(ByteRange::new(pinned, len).unwrap()))
    );
    b.free(D0, MemoryKind::HostPinned, pinned, None).unwrap();
    drop(host);
}

fn streams_and_events(b: &HipBackend) {
    let first = kept!(b, b.stream_create(D0)).unwrap();
    let second = kept!(b, b.stream_create(D0)).unwrap();
    let event = kept!(b, b.event_create(D0)).unwrap();
    assert_eq!(kept!(b, b.event_query(event)), Ok(true), "never recorded");
    let size = 64 << 20;
    let device_memory = b.allocate(D0, MemoryKind::Device, size).unwrap().unwrap();
    // SAFETY: a live device allocation of `size` bytes, filled on `first`, read on `second`
    // after it waited for the fill.
    unsafe { kept!(b, b.fill(first, device_memory, 0x11, size)).unwrap() };
    kept!(b, b.event_record(event, first)).unwrap();
    kept!(b, b.stream_wait_event(second, event)).unwrap();
    // SAFETY: as above.
    let landed = unsafe { read_back(b, second, device_memory, size) };
    assert!(landed.iter().all(|&byte| byte == 0x11));
    assert_eq!(kept!(b, b.event_query(event)), Ok(true));
    kept!(b, b.event_synchronize(event)).unwrap();
    kept!(b, b.device_synchronize(D0)).unwrap();
    b.free(D0, MemoryKind::Device, device_memory, None).unwrap();
    kept!(b, b.event_destroy(event)).unwrap();
    kept!(b, b.stream_destroy(first)).unwrap();
    // Destroyed handles are refused before HIP, which would be handed dangling ones.
    assert!(matches!(
        kept!(b, b.event_query(event)),
        Err(Error::StaleHandle { what: "event", .. })
    ));
    assert!(matches!(
        kept!(b, b.stream_synchronize(first)),
        Err(Error::StaleHandle { what: "stream", .. })
    ));
    kept!(b, b.stream_destroy(second)).unwrap();
}

/// The words of device memory at `address`.
///
/// # Safety
/// As [`read_back`], for `4 * count` bytes.
unsafe fn read_words(b: &HipBackend, stream: HipStream, address: usize, count: usize) -> Vec<u32> {
    // SAFETY: the caller's.
    unsafe { read_back(b, stream, address, 4 * count) }
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

fn kernels(b: &HipBackend, stream: HipStream, first_round: bool) {
    let count = 1_000_003usize;
    let data = b
        .allocate(D0, MemoryKind::Device, (count + 1) * 4)
        .unwrap()
        .unwrap();
    // SAFETY: the whole live allocation.
    unsafe { b.fill(stream, data, 0xee, (count + 1) * 4) }.unwrap();
    let fill = kept!(b, b.kernel(D0, "fill_u32")).unwrap();
    let args = [
        KernelArg::Ptr(data),
        KernelArg::U32(0xc0ff_ee01),
        KernelArg::U64(count as u64),
    ];
    // SAFETY: the kernel writes `count` words of the `count + 1` allocated at `data`.
    kept!(b, unsafe {
        b.launch(stream, fill, LaunchDims::linear(64, 256), &args)
    })
    .unwrap();
    // SAFETY: the live allocation of `count + 1` words.
    let words = unsafe { read_words(b, stream, data, count + 1) };
    assert!(words[..count].iter().all(|&word| word == 0xc0ff_ee01));
    assert_eq!(words[count], 0xeeee_eeee);
    assert_eq!(
        kept!(b, b.kernel(D0, "no_such_kernel")),
        Err(Error::UnknownKernel {
            backend: "hip",
            name: "no_such_kernel".into()
        })
    );
    assert_eq!(kept!(b, b.kernel(D0, "fill_u32")), Ok(fill), "cached");
    b.free(D0, MemoryKind::Device, data, None).unwrap();

    let n = 10_000usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let ys = vec![1.0f32; n];
    let x = b.allocate(D0, MemoryKind::Device, 4 * n).unwrap().unwrap();
    let y = b.allocate(D0, MemoryKind::Device, 4 * n).unwrap().unwrap();
    // SAFETY: live allocations of `n` floats each; `xs` and `ys` outlive the synchronise in
    // `read_words` below.
    unsafe {
        b.copy(stream, x, xs.as_ptr() as usize, 4 * n).unwrap();
        b.copy(stream, y, ys.as_ptr() as usize, 4 * n).unwrap();
    }
    let axpy = kept!(b, b.kernel(D0, "axpy_f32")).unwrap();
    let args = [
        KernelArg::F32(2.0),
        KernelArg::Ptr(x),
        KernelArg::Ptr(y),
        KernelArg::U64(n as u64),
    ];
    // SAFETY: the kernel reads `n` floats at `x` and updates `n` at `y`, both live.
    kept!(b, unsafe {
        b.launch(stream, axpy, LaunchDims::linear(8, 128), &args)
    })
    .unwrap();
    // SAFETY: the live allocation of `n` words at `y`.
    let result = unsafe { read_words(b, stream, y, n) };
    for (i, word) in result.iter().enumerate() {
        assert_eq!(f32::from_bits(*word), 2.0 * i as f32 + 1.0, "axpy {i}");
    }
    b.free(D0, MemoryKind::Device, x, None).unwrap();
    b.free(D0, MemoryKind::Device, y, None).unwrap();

    // workgroup_reverse_u32 with the most dynamic workgroup memory a block can have.
    let limits = b.device_info(D0).unwrap().workgroup;
    let words_per_group = limits.max_per_block() / 4;
    let dynamic_bytes = 4 * words_per_group;
    let groups = 4u32;
    let total = (groups * words_per_group) as usize;
    let input: Vec<u32> = (0..total as u32).collect();
    let data = b
        .allocate(D0, MemoryKind::Device, 4 * total)
        .unwrap()
        .unwrap();
    // SAFETY: a live allocation of `total` words; `input` outlives the copy.
    unsafe { b.copy(stream, data, input.as_ptr() as usize, 4 * total) }.unwrap();
    let reverse = kept!(b, b.kernel(D0, "workgroup_reverse_u32")).unwrap();
    let dims = LaunchDims {
        grid: [groups, 1, 1],
        block: [256, 1, 1],
        dynamic_workgroup_bytes: dynamic_bytes,
    };
    let args = [KernelArg::Ptr(data), KernelArg::U32(words_per_group)];
    if first_round && dynamic_bytes > limits.default_per_block {
        assert_eq!(
            // SAFETY: `groups` workgroups of `words_per_group` words: exactly the allocation.
            kept!(b, unsafe { b.launch(stream, reverse, dims, &args) }),
            Err(hip("hipModuleLaunchKernel", "hipErrorInvalidValue", 1)),
            "a launch above the default limit before opting in"
        );
    }
    // Its buffer is all dynamic: no static shared memory counts against the limit.
    assert_eq!(kept!(b, b.kernel_static_workgroup_bytes(reverse)), Ok(0));
    kept!(b, b.kernel_allow_workgroup_bytes(reverse, dynamic_bytes)).unwrap();
    // SAFETY: as above.
    kept!(b, unsafe { b.launch(stream, reverse, dims, &args) }).unwrap();
    // SAFETY: the live allocation of `total` words.
    let output = unsafe { read_words(b, stream, data, total) };
    for g in 0..groups {
        for i in 0..words_per_group {
            let at = (g * words_per_group + i) as usize;
            let expected = g * words_per_group + (words_per_group - 1 - i) + 1;
            assert_eq!(output[at], expected, "workgroup {g} word {i}");
        }
    }
    assert!(matches!(
        kept!(b, b.kernel_allow_workgroup_bytes(reverse, u32::MAX)),
        Err(Error::LimitExceeded { .. })
    ));
    b.free(D0, MemoryKind::Device, data, None).unwrap();
}

#[test]
fn every_method_works_and_keeps_the_current_device() {
    let Some(backend) = open() else { return };
    let b = &backend;
    eprintln!("{b:?}");
    let last = DeviceId(b.device_count() as u32 - 1);
    for (round, start) in [None, Some(last)].into_iter().enumerate() {
        b.set_current_device(start).unwrap();
        devices(b, start);
        let stream = kept!(b, b.stream_create(D0)).unwrap();
        memory(b, stream);
        host_registration(b, stream);
        streams_and_events(b);
        kernels(b, stream, round == 0);
        kept!(b, b.stream_destroy(stream)).unwrap();
        assert_eq!(b.current_device(), Ok(start));
        eprintln!("all methods passed with {start:?} current");
    }
    b.set_current_device(None).unwrap();
}

/// fill_u32 on `device` from the calling thread, checked, with the thread's device unchanged.
fn fill_on(b: &HipBackend, device: DeviceId) {
    let stream = kept!(b, b.stream_create(device)).unwrap();
    let data = kept!(b, b.allocate(device, MemoryKind::Device, 4096))
        .unwrap()
        .unwrap();
    let fill = kept!(b, b.kernel(device, "fill_u32")).unwrap();
    let args = [
        KernelArg::Ptr(data),
        KernelArg::U32(device.0 + 7),
        KernelArg::U64(1024),
    ];
    // SAFETY: 1024 words of the live 4 KiB allocation.
    kept!(b, unsafe {
        b.launch(stream, fill, LaunchDims::linear(4, 256), &args)
    })
    .unwrap();
    // SAFETY: the live allocation.
    let words = unsafe { read_words(b, stream, data, 1024) };
    assert!(
        words.iter().all(|&w| w == device.0 + 7),
        "device {device:?}"
    );
    kept!(b, b.free(device, MemoryKind::Device, data, None)).unwrap();
    kept!(b, b.stream_destroy(stream)).unwrap();
}

#[test]
fn launches_from_new_threads_keep_whatever_device_they_have() {
    let Some(backend) = open() else { return };
    let b = &backend;
    let count = b.device_count() as u32;
    if count < 2 {
        eprintln!("two devices: skipped: one device");
    }
    std::thread::scope(|scope| {
        for device in (0..count).map(DeviceId) {
            // A new thread (HIP's device 0, nothing chosen), and one whose device is another.
            scope.spawn(move || fill_on(b, device)).join().unwrap();
            scope
                .spawn(move || {
                    let other = DeviceId((device.0 + 1) % count);
                    b.set_current_device(Some(other)).unwrap();
                    fill_on(b, device);
                    assert_eq!(b.current_device(), Ok(Some(other)));
                })
                .join()
                .unwrap();
        }
    });
}

/// Whether every byte of `[address, address + bytes)` (memory of `stream`'s device or one it
/// reaches) is `value`, read through `stream`.
///
/// # Safety
/// As [`read_back`].
unsafe fn holds(
    b: &HipBackend,
    stream: HipStream,
    address: usize,
    bytes: usize,
    value: u8,
) -> bool {
    // SAFETY: the caller's.
    unsafe { read_back(b, stream, address, bytes) }
        .iter()
        .all(|&byte| byte == value)
}

#[test]
fn peer_access_and_peer_copies_between_two_devices() {
    let Some(backend) = open() else { return };
    let b = &backend;
    if b.device_count() < 2 {
        eprintln!("\nbackend hip: peer copies skipped: one device");
        return;
    }
    let (d0, d1) = (D0, DeviceId(1));
    assert_eq!(kept!(b, b.peer_access_possible(d0, d0)), Ok(false));
    let linked = kept!(b, b.peer_access_possible(d0, d1)).unwrap()
        && kept!(b, b.peer_access_possible(d1, d0)).unwrap();
    eprintln!("devices 0 and 1 linked for peer access: {linked}");
    let (s0, s1) = (b.stream_create(d0).unwrap(), b.stream_create(d1).unwrap());
    let bytes = 1 << 20;
    // Device 1's stream-ordered memory (its default pool) and device 0's synchronous memory.
    let pooled = b
        .allocate_on_stream(s1, MemoryKind::Device, bytes)
        .unwrap()
        .unwrap();
    let plain = b.allocate(d0, MemoryKind::Device, bytes).unwrap().unwrap();
    // SAFETY: (every fill and copy below) inside the two live allocations, each waited for
    // before it is read again or freed.
    unsafe {
        b.fill(s1, pooled, 0x42, bytes).unwrap();
        b.stream_synchronize(s1).unwrap();
        // Named devices: accepted with or without peer access.
        kept!(b, b.copy_peer(s0, plain, d0, pooled, d1, bytes)).unwrap();
        assert!(
            holds(b, s0, plain, bytes, 0x42),
            "device 1's pool to device 0"
        );
    }
    if linked {
        for (device, peer) in [(d0, d1), (d1, d0), (d0, d1)] {
            kept!(b, b.enable_peer_access(device, peer)).unwrap();
        }
        // SAFETY: as above.
        unsafe {
            // Device 0's stream now reaches device 1's pool memory with a plain copy.
            b.fill(s1, pooled, 0x17, bytes).unwrap();
            b.stream_synchronize(s1).unwrap();
            kept!(b, b.copy(s0, plain, pooled, bytes)).unwrap();
            assert!(
                holds(b, s0, plain, bytes, 0x17),
                "plain copy of a peer's pool"
            );
            b.fill(s0, plain, 0x99, bytes).unwrap();
            b.stream_synchronize(s0).unwrap();
            kept!(b, b.copy_peer(s1, pooled + 8, d1, plain, d0, 4096)).unwrap();
            let back = read_back(b, s1, pooled, 4096 + 16);
            assert!(back[..8].iter().all(|&x| x == 0x17));
            assert!(back[8..4104].iter().all(|&x| x == 0x99));
            assert!(back[4104..].iter().all(|&x| x == 0x17));
        }
    }
    b.free(d1, MemoryKind::Device, pooled, Some(s1)).unwrap();
    b.free(d0, MemoryKind::Device, plain, None).unwrap();
    b.stream_destroy(s0).unwrap();
    b.stream_destroy(s1).unwrap();
}

#[test]
fn conformance_suite_passes_on_hardware() {
    let Some(held) = open() else { return };
    let failed = run_and_print("hip", &HipBackend::new);
    assert_eq!(failed, 0, "{failed} case(s) failed");
    drop(held);
}
