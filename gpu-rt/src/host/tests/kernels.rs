//! Kernels: names and workgroup opt-in, the standard kernels' results, a failed kernel losing
//! its device until reset, kernels' reach, registered names and unsupported images.

use super::*;

#[test]
fn kernel_names_and_workgroup_opt_in_follow_the_drivers_rules() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    assert!(
        matches!(
            b.kernel(D0, "no_such_kernel"),
            Err(Error::UnknownKernel { backend: "host", ref name }) if name == "no_such_kernel"
        ),
        "an unknown kernel name is Error::UnknownKernel, as on the CUDA backend"
    );
    let k = b.kernel(D0, "workgroup_reverse_u32").unwrap();
    assert_eq!(b.kernel(D0, "workgroup_reverse_u32").unwrap(), k);
    let with_bytes = |bytes| LaunchDims {
        dynamic_workgroup_bytes: bytes,
        ..LaunchDims::linear(1, 32)
    };
    let invalid = HostErrorCode::InvalidValue;
    assert_eq!(
        // SAFETY: no pointer arguments.
        code(unsafe { b.launch(s, k, with_bytes(48 * 1024 + 4), &[]) }),
        invalid
    );
    assert_eq!(code(b.kernel_allow_workgroup_bytes(k, 232_449)), invalid);
    b.kernel_allow_workgroup_bytes(k, 64 * 1024).unwrap();
    assert_eq!(
        // SAFETY: no pointer arguments.
        code(unsafe { b.launch(s, k, with_bytes(64 * 1024 + 4), &[]) }),
        invalid
    );
    assert_eq!(
        // SAFETY: no pointer arguments.
        code(unsafe { b.launch(s, k, LaunchDims::linear(0, 32), &[]) }),
        invalid
    );
    // The opt-in sets the kernel's limit, also below the default one, as CUDA's attribute does.
    b.kernel_allow_workgroup_bytes(k, 1024).unwrap();
    assert_eq!(
        // SAFETY: no pointer arguments.
        code(unsafe { b.launch(s, k, with_bytes(1028), &[]) }),
        invalid
    );
    assert_eq!(
        // SAFETY: no pointer arguments.
        code(unsafe { b.launch(s, k, LaunchDims::linear(1, 1025), &[]) }),
        invalid
    );
    b.set_current_device(Some(D1)).unwrap();
    let s1 = b.stream_create(D1).unwrap();
    assert_eq!(
        // SAFETY: no pointer arguments.
        code(unsafe { b.launch(s1, k, LaunchDims::linear(1, 1), &[]) }),
        HostErrorCode::InvalidHandle
    );
    b.stream_destroy(s1).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    b.stream_synchronize(s).unwrap();
    assert!(b.work_log().is_empty());
    b.stream_destroy(s).unwrap();
}

#[test]
fn standard_kernels_compute_their_results() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();

    // fill_u32 with fewer threads than words (grid-stride loop).
    let n = 1000usize;
    let words = b.allocate(D0, MemoryKind::Device, n * 4).unwrap().unwrap();
    let args = [
        KernelArg::Ptr(words),
        KernelArg::U32(0xDEAD_BEEF),
        KernelArg::U64(n as u64 - 1),
    ];
    // SAFETY: `words` is a live allocation of `n` words, the kernel's only pointer.
    let filled: Vec<u32> = unsafe {
        launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(3, 64), &args).unwrap();
        read_words(&b, s, words, n)
    };
    assert!(filled[..n - 1].iter().all(|&w| w == 0xDEAD_BEEF));
    assert_eq!(filled[n - 1], 0);

    // axpy_f32.
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 + i as f32).collect();
    let (dx, dy) = (
        b.allocate(D0, MemoryKind::Device, n * 4).unwrap().unwrap(),
        b.allocate(D0, MemoryKind::Managed, n * 4).unwrap().unwrap(),
    );
    let args = [
        KernelArg::F32(2.0),
        KernelArg::Ptr(dx),
        KernelArg::Ptr(dy),
        KernelArg::U64(n as u64),
    ];
    // SAFETY: `dx` and `dy` are live allocations of `n` words; `x` and `y` live, untouched,
    // until `read_words` has synchronised the stream.
    let result: Vec<f32> = unsafe {
        b.copy(s, dx, addr(&x), n * 4).unwrap();
        b.copy(s, dy, addr(&y), n * 4).unwrap();
        launch_named(&b, s, D0, "axpy_f32", LaunchDims::linear(4, 128), &args).unwrap();
        read_words(&b, s, dy, n)
    };
    assert!(
        result
            .iter()
            .enumerate()
            .all(|(i, &v)| v == 2.0 * i as f32 + 1.0 + i as f32)
    );

    // workgroup_reverse_u32 with 64 KiB of workgroup memory per group (needs the opt-in).
    let w = 16 * 1024usize;
    let groups = 3usize;
    let data: Vec<u32> = (0..(w * groups) as u32).collect();
    let dd = b
        .allocate(D0, MemoryKind::Device, data.len() * 4)
        .unwrap()
        .unwrap();
    // SAFETY: `dd` is a live allocation of `data`'s size; `data` is untouched until the
    // stream is synchronised by `read_words` below.
    unsafe { b.copy(s, dd, addr(&data), data.len() * 4) }.unwrap();
    let k = b.kernel(D0, "workgroup_reverse_u32").unwrap();
    b.kernel_allow_workgroup_bytes(k, (w * 4) as u32).unwrap();
    let dims = LaunchDims {
        dynamic_workgroup_bytes: (w * 4) as u32,
        ..LaunchDims::linear(groups as u32, 256)
    };
    // SAFETY: `dd` is a live allocation of `groups * w` words, the kernel's only pointer.
    let reversed: Vec<u32> = unsafe {
        b.launch(s, k, dims, &[KernelArg::Ptr(dd), KernelArg::U32(w as u32)])
            .unwrap();
        read_words(&b, s, dd, data.len())
    };
    for g in 0..groups {
        for i in 0..w {
            assert_eq!(reversed[g * w + i], data[g * w + w - 1 - i] + 1);
        }
    }

    for (kind, a) in [
        (MemoryKind::Device, words),
        (MemoryKind::Device, dx),
        (MemoryKind::Managed, dy),
        (MemoryKind::Device, dd),
    ] {
        b.free(D0, kind, a, None).unwrap();
    }
    b.stream_destroy(s).unwrap();
    zero_stats(&b);
}

/// The failure model of the module documentation: work that fails loses its device, every
/// later call that works on it reports the failure (destroys and frees still work), the other
/// device goes on, and a reset makes the device usable again with its objects gone.
#[test]
fn a_failed_kernel_loses_its_device_until_reset_and_the_other_device_goes_on() {
    let b = backend();
    b.register_kernel("fail", |_, _| {
        Err(HostErrorCode::IllegalAddress.error("launch"))
    });
    b.register_kernel("panic", |_, _| panic!("kernel bug"));
    b.set_current_device(Some(D1)).unwrap();
    let other = b.stream_create(D1).unwrap();
    b.set_current_device(Some(D0)).unwrap();
    let (s, t) = (b.stream_create(D0).unwrap(), b.stream_create(D0).unwrap());
    let (before, after) = (b.event_create(D0).unwrap(), b.event_create(D0).unwrap());
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // The stream waits at a gate, so everything below is enqueued before the kernel fails.
    let gate = Gate::install(&b);
    // SAFETY: no pointer arguments; `a` is a live allocation of `b`.
    unsafe {
        launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]).unwrap();
    }
    b.event_record(before, s).unwrap();
    // SAFETY: as above.
    unsafe {
        launch_named(&b, s, D0, "fail", LaunchDims::linear(1, 1), &[]).unwrap();
        b.fill(s, a, 9, 64).unwrap();
    }
    b.event_record(after, s).unwrap();
    gate.open();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::IllegalAddress);
    assert!(b.device_lost(D0).is_some() && b.device_lost(D1).is_none());
    // The fill after the failure did not run.
    let outcomes: Vec<_> = b
        .work_log()
        .iter()
        .filter(|r| r.stream == s)
        .map(|r| r.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            WorkOutcome::Done,
            WorkOutcome::Done,
            WorkOutcome::Failed,
            WorkOutcome::Skipped,
            WorkOutcome::Skipped
        ]
    );
    // Every call that works on device 0 reports the failure, on any stream or event of it.
    assert_eq!(code(b.stream_synchronize(t)), HostErrorCode::IllegalAddress);
    assert_eq!(
        code(b.event_synchronize(before)),
        HostErrorCode::IllegalAddress
    );
    assert_eq!(code(b.event_query(after)), HostErrorCode::IllegalAddress);
    assert_eq!(
        code(b.device_synchronize(D0)),
        HostErrorCode::IllegalAddress
    );
    assert_eq!(code(b.stream_create(D0)), HostErrorCode::IllegalAddress);
    assert_eq!(
        code(b.allocate(D0, MemoryKind::Device, 64)),
        HostErrorCode::IllegalAddress
    );
    assert_eq!(
        // SAFETY: `a` is a live allocation of `b`.
        code(unsafe { b.fill(t, a, 1, 64) }),
        HostErrorCode::IllegalAddress
    );
    // Device 1 goes on, waiting on device 0's failed record included.
    b.set_current_device(Some(D1)).unwrap();
    b.stream_wait_event(other, after).unwrap();
    let on_1 = b.allocate(D1, MemoryKind::Device, 64).unwrap().unwrap();
    // SAFETY: a live allocation of device 1.
    assert_eq!(unsafe { read_back(&b, other, on_1, 64) }, vec![0; 64]);

    // A reset makes device 0 usable; its streams, events and allocations are gone.
    b.reset_device(D0).unwrap();
    assert!(b.device_lost(D0).is_none());
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::InvalidHandle);
    assert_eq!(code(b.event_query(before)), HostErrorCode::InvalidHandle);
    assert_eq!(
        code(b.free(D0, MemoryKind::Device, a, None)),
        HostErrorCode::InvalidValue
    );
    let u = b.stream_create(D0).unwrap();
    let fresh = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // SAFETY: a live allocation of `b`; the kernel has no pointer arguments.
    unsafe {
        assert_eq!(read_back(&b, u, fresh, 64), vec![0; 64]);
        launch_named(&b, u, D0, "panic", LaunchDims::linear(1, 1), &[]).unwrap();
    }
    assert_eq!(code(b.stream_synchronize(u)), HostErrorCode::LaunchFailed);
    // Destroys and frees work on a lost device, so its owner can clean up.
    b.stream_destroy(u).unwrap();
    b.free(D0, MemoryKind::Device, fresh, None).unwrap();
    b.reset_device(D0).unwrap();
    b.set_current_device(Some(D1)).unwrap();
    b.stream_destroy(other).unwrap();
    b.free(D1, MemoryKind::Device, on_1, None).unwrap();
    b.set_current_device(None).unwrap();
    zero_stats(&b);
}

#[test]
fn kernels_reach_only_memory_their_pointer_arguments_lie_in() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // 17 words run past the 64-byte allocation: a library kernel is refused at launch, naming
    // the argument, what it was given and what it would reach.
    let args = [KernelArg::Ptr(a), KernelArg::U32(1), KernelArg::U64(17)];
    // SAFETY: refused before anything is queued.
    let refused = unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), &args) };
    assert!(
        matches!(
            refused,
            Err(Error::KernelReach {
                argument: Some(0),
                given: 64,
                reach: 68,
                ..
            })
        ),
        "{refused:?}"
    );
    // A kernel the library does not describe runs, and its access past the end faults.
    b.register_kernel("write_past", |ctx, _| {
        ctx.view::<u32>(ctx.arg_ptr(0)?, 17)?.set(16, 1)
    });
    // SAFETY: the pointer is an allocation of `b`, which the kernel cannot reach past.
    unsafe {
        launch_named(
            &b,
            s,
            D0,
            "write_past",
            LaunchDims::linear(1, 1),
            &args[..1],
        )
    }
    .unwrap();
    assert_eq!(code(b.stream_synchronize(s)), HostErrorCode::IllegalAddress);
    // The fault lost the device: a reset brings it back, without its objects.
    b.reset_device(D0).unwrap();

    // Pageable host memory is not device-accessible (a library kernel may reach none of it);
    // registered memory is.
    let s = b.stream_create(D0).unwrap();
    let mut host = vec![0u32; 16];
    let args = [
        KernelArg::Ptr(addr_mut(&mut host)),
        KernelArg::U32(5),
        KernelArg::U64(16),
    ];
    // SAFETY: refused before anything is queued.
    let refused = unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), &args) };
    assert!(
        matches!(
            refused,
            Err(Error::KernelReach {
                given: 0,
                reach: 64,
                ..
            })
        ),
        "{refused:?}"
    );
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let mut ptrs = [0usize; 2];
    b.host_register(ByteRange::new(addr(&host), 64).unwrap(), &mut ptrs)
        .unwrap();
    // SAFETY: `host` stays alive, registered and untouched until the synchronise below.
    unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), &args) }.unwrap();
    b.stream_synchronize(s).unwrap();
    assert!(host.iter().all(|&w| w == 5));
    b.host_unregister(addr(&host)).unwrap();

    // Arguments of the wrong number or kinds are refused at launch, naming the parameters;
    // nothing is queued and the stream stays usable.
    let mismatch = Error::KernelArgumentMismatch {
        kernel: "fill_u32",
        expected: "(Ptr dst, U32 value, U64 count)",
    };
    let wrong: [&[KernelArg]; 3] = [
        &[KernelArg::U32(0)],
        &[KernelArg::Ptr(a), KernelArg::U32(0)],
        &[KernelArg::Ptr(a), KernelArg::U64(0), KernelArg::U64(1)],
    ];
    for args in wrong {
        // SAFETY: refused before anything is queued.
        let refused =
            unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), args) };
        assert_eq!(refused, Err(mismatch.clone()));
    }
    b.stream_synchronize(s).unwrap();
    let args = [KernelArg::Ptr(a), KernelArg::U32(3), KernelArg::U64(16)];
    // SAFETY: 16 words of the 64-byte allocation `a`.
    unsafe { launch_named(&b, s, D0, "fill_u32", LaunchDims::linear(1, 32), &args) }.unwrap();
    // SAFETY: `a` is a live allocation of 64 bytes.
    let words: Vec<u32> = unsafe { read_words(&b, s, a, 16) };
    assert!(words.iter().all(|&w| w == 3));
    b.stream_destroy(s).unwrap();
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    zero_stats(&b);
}

#[test]
fn registering_a_name_again_changes_later_loads_only() {
    let runs = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let b = backend();
    let register = |which: usize| {
        let runs = runs.clone();
        b.register_kernel("count", move |_, _| {
            runs[which].fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
    };
    register(0);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let old = b.kernel(D0, "count").unwrap();
    register(1);
    let new = b.kernel(D0, "count").unwrap();
    assert_ne!(new, old, "a name registered again loads afresh");
    assert_eq!(b.kernel(D0, "count").unwrap(), new);
    // SAFETY: no pointer arguments.
    unsafe {
        b.launch(s, old, LaunchDims::linear(1, 1), &[]).unwrap();
        b.launch(s, new, LaunchDims::linear(2, 1), &[]).unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert_eq!(
        runs[0].load(Ordering::Relaxed),
        1,
        "the old handle keeps its function"
    );
    assert_eq!(runs[1].load(Ordering::Relaxed), 2);
    b.stream_destroy(s).unwrap();
}

#[test]
fn foreign_module_images_and_packed_launches_are_unsupported_on_the_host() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let image = c"// PTX text";
    // SAFETY: a NUL-terminated image, readable during the call.
    let loaded = unsafe { b.module_load(D0, image.as_ptr().cast()) };
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
    // SAFETY: as above; the device does not exist, which is checked first.
    let unknown = unsafe { b.module_load(DeviceId(7), image.as_ptr().cast()) };
    assert!(matches!(unknown, Err(Error::UnknownDevice { .. })));
    let s = b.stream_create(D0).unwrap();
    let kernel = b.kernel(D0, "fill_u32").unwrap();
    // SAFETY: refused before anything reads the (null) parameter array.
    let launched =
        unsafe { b.launch_packed(s, kernel, LaunchDims::linear(1, 1), core::ptr::null_mut()) };
    assert!(matches!(launched, Err(Error::Unsupported { .. })));
    b.stream_destroy(s).unwrap();
}
