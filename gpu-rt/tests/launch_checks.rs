//! What the runtime refuses before anything is queued (issue 20): standard library launches
//! whose arguments differ from the kernel's parameters or whose counts reach past their spans,
//! launch shapes no device runs, and fork counts above the stated limit; each a typed error
//! saying what was wrong, with the stream, the device and the runtime still usable after.

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::LaunchDims;
use gpu_core::token::{self, MAX_FORK_BRANCHES, Token, UnwaitedKind};
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::{Arg, Buffer, Runtime};

const D0: DeviceId = DeviceId(0);

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(1))).unwrap()
}

/// The buffer's bytes, after every use of it so far.
fn bytes_of(rt: &Runtime<HostBackend>, buffer: &Buffer<'_, HostBackend>) -> Vec<u8> {
    let mut back = vec![0u8; buffer.size()];
    rt.download(D0, &mut back, buffer.all(), &mut vec![])
        .unwrap();
    back
}

/// Launches library kernel `name` on device 0 with no dependencies.
fn launch(
    rt: &Runtime<HostBackend>,
    name: &str,
    dims: LaunchDims,
    args: &[Arg<'_>],
) -> Result<Token, Error> {
    // SAFETY: the runtime checks a library kernel's arguments and reach against its spans
    // before anything is queued (this file's subject): what it lets through stays inside them.
    unsafe { rt.launch(D0, name, dims, args, &mut vec![]) }
}

/// Launches `fill_u32` of `count` words of `value` over `span` and waits for it.
fn fill_words(rt: &Runtime<HostBackend>, span: Arg<'_>, value: u32, count: u64) {
    let args = [span, Arg::U32(value), Arg::U64(count)];
    let token = launch(rt, "fill_u32", LaunchDims::linear(4, 64), &args);
    rt.wait(token.unwrap()).unwrap();
}

#[test]
fn library_arguments_of_the_wrong_number_or_kinds_are_refused_at_launch() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let before = rt.backend().calls();
    let earlier = rt.fill(D0, buffer.all(), 0, &mut vec![]).unwrap();
    let mut after = vec![earlier];
    let span = Arg::Span(buffer.all());
    let fill_mismatch = Error::KernelArgumentMismatch {
        kernel: "fill_u32",
        expected: "(Ptr dst, U32 value, U64 count)",
    };
    let wrong: [&[Arg<'_>]; 4] = [
        &[span, Arg::U32(7)],
        &[],
        &[span, Arg::U64(7), Arg::U64(1024)],
        &[Arg::U32(7), span, Arg::U64(1024)],
    ];
    for args in wrong {
        // SAFETY: refused before anything is queued.
        let refused =
            unsafe { rt.launch(D0, "fill_u32", LaunchDims::linear(4, 64), args, &mut after) };
        assert_eq!(refused.err(), Some(fill_mismatch.clone()));
        assert_eq!(
            after.len(),
            1,
            "a refused launch leaves `after` with the caller"
        );
    }
    let axpy = [Arg::F32(1.0), span, Arg::U32(3), Arg::U64(16)];
    // SAFETY: refused before anything is queued.
    let refused =
        unsafe { rt.launch(D0, "axpy_f32", LaunchDims::linear(1, 64), &axpy, &mut after) };
    assert_eq!(
        refused.err(),
        Some(Error::KernelArgumentMismatch {
            kernel: "axpy_f32",
            expected: "(F32 a, Ptr x, Ptr y, U64 count)",
        })
    );
    assert_eq!(rt.backend().calls().since(&before).of(CallKind::Launch), 0);

    // The stream, the device and the runtime go on working.
    let args = [span, Arg::U32(7), Arg::U64(1024)];
    // SAFETY: 1024 words: the whole 4 KiB span.
    let token = unsafe { rt.launch(D0, "fill_u32", LaunchDims::linear(4, 64), &args, &mut after) };
    rt.wait(token.unwrap()).unwrap();
    assert!(
        bytes_of(&rt, &buffer)
            .chunks_exact(4)
            .all(|w| w == 7u32.to_ne_bytes())
    );
    drop(buffer);
    let report = rt.shutdown().unwrap();
    assert_eq!(report.program.unwaited_count(), 0);
}

/// fill_u32 of 2,048 words on a 4 KiB buffer returned Ok and overwrote the buffer after it:
/// the host backend checked the kernel against the 2 MiB segment the buffers share.
#[test]
fn a_fill_past_its_span_is_refused_naming_the_argument_the_span_and_the_excess() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let neighbour = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let args = [Arg::Span(buffer.all()), Arg::U32(0xDEAD), Arg::U64(2048)];
    let refused = launch(&rt, "fill_u32", LaunchDims::linear(4, 64), &args);
    let error = refused.err().unwrap();
    assert_eq!(
        error,
        Error::KernelReach {
            kernel: "fill_u32",
            argument: Some(0),
            parameter: "dst",
            address: buffer.address(),
            given: 4096,
            reach: 8192,
        }
    );
    let message = error.to_string();
    for part in [
        "fill_u32",
        "argument 0 (dst)",
        "4096 bytes",
        "8192 bytes",
        "4096 bytes past",
    ] {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
    assert!(bytes_of(&rt, &neighbour).iter().all(|&b| b == 0));

    // Part of a buffer is bounded by the part, not the buffer.
    let head = buffer.span(0, 16).unwrap();
    let args = [Arg::Span(head), Arg::U32(1), Arg::U64(5)];
    let refused = launch(&rt, "fill_u32", LaunchDims::linear(1, 64), &args);
    assert!(matches!(
        refused,
        Err(Error::KernelReach {
            given: 16,
            reach: 20,
            ..
        })
    ));
    // Counts that overflow are refused too, never wrapped.
    let args = [Arg::Span(buffer.all()), Arg::U32(1), Arg::U64(u64::MAX)];
    let refused = launch(&rt, "fill_u32", LaunchDims::linear(1, 64), &args);
    assert!(matches!(
        refused,
        Err(Error::KernelReach {
            reach: u64::MAX,
            ..
        })
    ));

    // What fits runs: the whole buffer, and exactly the 16-byte head.
    fill_words(&rt, Arg::Span(buffer.all()), 3, 1024);
    fill_words(&rt, Arg::Span(head), 9, 4);
    let back = bytes_of(&rt, &buffer);
    assert!(back[..16].chunks_exact(4).all(|w| w == 9u32.to_ne_bytes()));
    assert!(back[16..].chunks_exact(4).all(|w| w == 3u32.to_ne_bytes()));
    assert!(bytes_of(&rt, &neighbour).iter().all(|&b| b == 0));
}

#[test]
fn axpy_and_workgroup_reverse_are_bounded_by_each_span_and_the_workgroup_memory() {
    let rt = runtime();
    let x = rt.alloc(D0, MemoryKind::Device, 400).unwrap();
    let y = rt.alloc(D0, MemoryKind::Device, 396).unwrap();
    let args = [
        Arg::F32(2.0),
        Arg::Span(x.all()),
        Arg::Span(y.all()),
        Arg::U64(100),
    ];
    let refused = launch(&rt, "axpy_f32", LaunchDims::linear(1, 64), &args);
    assert_eq!(
        refused.err(),
        Some(Error::KernelReach {
            kernel: "axpy_f32",
            argument: Some(2),
            parameter: "y",
            address: y.address(),
            given: 396,
            reach: 400,
        })
    );

    // Each workgroup reverses its 16 words: 3 x 2 workgroups reach 384 bytes.
    let data = rt.alloc(D0, MemoryKind::Device, 320).unwrap();
    let args = [Arg::Span(data.all()), Arg::U32(16)];
    let dims = LaunchDims {
        grid: [3, 2, 1],
        block: [32, 1, 1],
        dynamic_workgroup_bytes: 64,
    };
    let refused = launch(&rt, "workgroup_reverse_u32", dims, &args);
    assert!(matches!(
        refused,
        Err(Error::KernelReach {
            argument: Some(0),
            parameter: "data",
            given: 320,
            reach: 384,
            ..
        })
    ));
    // 16 words a workgroup need 64 bytes of dynamic workgroup memory.
    let short = LaunchDims {
        grid: [5, 1, 1],
        dynamic_workgroup_bytes: 60,
        ..dims
    };
    let refused = launch(&rt, "workgroup_reverse_u32", short, &args);
    let error = refused.err().unwrap();
    assert_eq!(
        error,
        Error::KernelReach {
            kernel: "workgroup_reverse_u32",
            argument: None,
            parameter: "dynamic workgroup memory",
            address: 0,
            given: 60,
            reach: 64,
        }
    );
    assert!(error.to_string().contains("at least 64"), "{error}");
    let fits = LaunchDims {
        grid: [5, 1, 1],
        ..dims
    };
    let token = launch(&rt, "workgroup_reverse_u32", fits, &args);
    rt.wait(token.unwrap()).unwrap();
}

/// Grid 0 and block 4096 were both `HOST_INVALID_VALUE (1)`, naming nothing.
#[test]
fn launch_shapes_no_device_runs_are_refused_naming_the_part() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let args = [Arg::Span(buffer.all()), Arg::U32(5), Arg::U64(1024)];
    let before = rt.backend().calls();
    let cases = [
        (LaunchDims::linear(0, 64), "grid x", 0, u64::from(u32::MAX)),
        (
            LaunchDims::linear(4, 4096),
            "threads per workgroup",
            4096,
            1024,
        ),
        (LaunchDims::linear(4, 0), "workgroup x", 0, 1024),
        (
            LaunchDims {
                grid: [4, 1, 1],
                block: [64, 32, 1],
                dynamic_workgroup_bytes: 0,
            },
            "threads per workgroup",
            2048,
            1024,
        ),
        (
            LaunchDims {
                grid: [4, 1, 0],
                block: [64, 1, 1],
                dynamic_workgroup_bytes: 0,
            },
            "grid z",
            0,
            u64::from(u32::MAX),
        ),
    ];
    for (dims, part, value, most) in cases {
        let refused = launch(&rt, "fill_u32", dims, &args);
        let error = refused.err().unwrap();
        assert_eq!(
            error,
            Error::LaunchShape {
                what: part,
                given: value,
                min: 1,
                max: most,
                grid: dims.grid,
                block: dims.block,
            }
        );
        let message = error.to_string();
        assert!(message.contains(&format!("{part} is {value}")), "{message}");
    }
    assert_eq!(rt.backend().calls().since(&before).of(CallKind::Launch), 0);
    fill_words(&rt, Arg::Span(buffer.all()), 5, 1024);
    assert!(
        bytes_of(&rt, &buffer)
            .chunks_exact(4)
            .all(|w| w == 5u32.to_ne_bytes())
    );
}

/// `fork(t, 1 << 40)` aborted the process ("memory allocation of 8796093022208 bytes
/// failed") and `usize::MAX` panicked (capacity overflow).
#[test]
fn huge_fork_counts_are_typed_errors_and_the_runtime_goes_on() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let mut discarded = 0;
    // 2^40 where usize holds it (the i686 run of this suite has 32 bits).
    let huge = usize::try_from(1u64 << 40).unwrap_or(usize::MAX);
    for count in [MAX_FORK_BRANCHES + 1, huge, usize::MAX] {
        let refused = Error::LimitExceeded {
            what: "fork branch count",
            required: count,
            limit: MAX_FORK_BRANCHES,
            detail: vec!["branches of one fork; fork a branch again for more".into()],
        };
        // The count checked first keeps the token usable.
        assert_eq!(token::check_fork_count(count), Err(refused.clone()));
        let filled = rt.fill(D0, buffer.all(), 1, &mut vec![]).unwrap();
        assert_eq!(rt.fork(filled, count).err(), Some(refused.clone()));
        let filled = rt.fill(D0, buffer.all(), 2, &mut vec![]).unwrap();
        assert_eq!(rt.fork_detached(filled, count).err(), Some(refused));
        discarded += 2;
    }
    // A refused fork discards its token (the docs' rule, as for a count of zero): its stream
    // went back to the pool, so every fill above ran on the one stream.
    assert_eq!(rt.stats().streams_created, 1);
    let filled = rt.fill(D0, buffer.all(), 3, &mut vec![]).unwrap();
    let branches: Vec<Token> = rt.fork(filled, MAX_FORK_BRANCHES).unwrap();
    assert_eq!(branches.len(), MAX_FORK_BRANCHES);
    let mut branches = branches.into_iter();
    let mut back = vec![0u8; 256];
    rt.download(
        D0,
        &mut back,
        buffer.all(),
        &mut vec![branches.next().unwrap()],
    )
    .unwrap();
    assert!(back.iter().all(|&b| b == 3));
    for branch in branches {
        rt.release(branch).unwrap();
    }
    drop(buffer);
    let report = rt.shutdown().unwrap();
    let kinds: Vec<_> = report.program.unwaited.iter().map(|t| t.kind).collect();
    assert_eq!(kinds, vec![UnwaitedKind::Discarded; discarded]);
}

/// Memory the runtime cannot see the bounds of (a raw span, as an FFI layer passes a program's
/// pointers) is checked by the host backend against the buffer it points into, as
/// compute-sanitizer checks a sub-allocator's annotated regions: a fill or copy that runs out
/// of its buffer into the neighbouring one, and a launch whose kernel would, are refused
/// naming the bytes, and memory freed back to the cache is no buffer at all. Before, only the
/// 2 MiB driver allocation bounded them, and the neighbour was overwritten.
#[test]
fn raw_spans_are_bounded_by_the_buffer_they_point_into() {
    let rt = runtime();
    let a = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let neighbour = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    rt.wait(rt.fill(D0, neighbour.all(), 0x5a, &mut vec![]).unwrap())
        .unwrap();
    // SAFETY: the spans name memory of live buffers; what runs past them is refused before
    // anything is queued (this test's subject).
    let (over, inside) = unsafe {
        (
            gpu_rt::runtime::Span::from_raw(a.address(), 8192),
            gpu_rt::runtime::Span::from_raw(a.address(), 4096),
        )
    };
    let args = [Arg::Span(over), Arg::U32(1), Arg::U64(2048)];
    let refused = launch(&rt, "fill_u32", LaunchDims::linear(8, 256), &args);
    assert!(
        matches!(
            refused,
            Err(Error::KernelReach {
                argument: Some(0),
                given: 4096,
                reach: 8192,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        rt.fill(D0, over, 1, &mut vec![]).err(),
        Some(Error::OutOfBounds {
            offset: 0,
            len: 8192,
            size: 4096
        })
    );
    let large = rt.alloc(D0, MemoryKind::Device, 8192).unwrap();
    assert_eq!(
        rt.copy(D0, large.all(), over, &mut vec![]).err(),
        Some(Error::OutOfBounds {
            offset: 0,
            len: 8192,
            size: 4096
        })
    );
    assert!(bytes_of(&rt, &neighbour).iter().all(|&b| b == 0x5a));
    // Inside its buffer, the raw span works.
    fill_words(&rt, Arg::Span(inside), 7, 1024);
    assert!(bytes_of(&rt, &a).chunks(4).all(|w| w == 7u32.to_ne_bytes()));

    // Freed memory is no buffer: work on it is refused, not run on the cache's memory.
    let freed = a.address();
    rt.free(a).unwrap();
    // SAFETY: refused before anything is queued.
    let stale = unsafe { gpu_rt::runtime::Span::from_raw(freed, 64) };
    assert_eq!(
        rt.fill(D0, stale, 1, &mut vec![]).err(),
        Some(Error::UnknownAddress {
            device: D0,
            address: freed
        })
    );
    drop((neighbour, large));
    rt.shutdown().unwrap();
}
