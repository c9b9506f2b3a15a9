//! Kernels: the standard library computes what it should (opting in to large workgroup
//! memory where needed), and wrong launches are typed errors before anything is queued.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, LaunchDims};
use gpu_core::error::Error;
use gpu_core::id::DeviceId;
use gpu_core::workgroup::{WorkgroupBuffer, WorkgroupPlanner};
use gpu_rt::runtime::Arg;

use super::harness::{CaseResult, Harness, Open, Stop, ensure, fill_and_verify};

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub(super) fn kernels_compute_and_opt_in<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let n = 10_000usize;
    let (x, y) = (
        rt.alloc(d, MemoryKind::Device, 4 * n)?,
        rt.alloc(d, MemoryKind::Device, 4 * n)?,
    );
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let up_x = rt.upload(d, x.all(), &f32_bytes(&xs), &mut vec![])?;
    // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
    let fill = unsafe {
        rt.launch(
            d,
            "fill_u32",
            LaunchDims::linear(40, 256),
            &[
                Arg::Span(y.all()),
                Arg::U32(2.0f32.to_bits()),
                Arg::U64(n as u64),
            ],
            &mut vec![],
        )
    }?;
    // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
    let axpy = unsafe {
        rt.launch(
            d,
            "axpy_f32",
            LaunchDims::linear(40, 256),
            &[
                Arg::F32(3.0),
                Arg::Span(x.all()),
                Arg::Span(y.all()),
                Arg::U64(n as u64),
            ],
            &mut vec![up_x, fill],
        )
    }?;
    let mut back = vec![0u8; 4 * n];
    rt.download(d, &mut back, y.all(), &mut vec![axpy])?;
    for (i, chunk) in back.chunks_exact(4).enumerate() {
        let got = f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        ensure!(got == 3.0 * i as f32 + 2.0, "axpy element {i}: {got}");
    }

    // A workgroup buffer planned above the default limit, when the device can opt in.
    let limits = rt.device_info(d)?.workgroup;
    let words = if limits.max_per_block() > limits.default_per_block {
        (limits.default_per_block / 4) + 1024
    } else {
        limits.default_per_block / 8
    };
    let plan = WorkgroupPlanner::new(limits)
        .plan(&[WorkgroupBuffer::launch_sized("staging", 16)])?
        .for_launch(&[words * 4])?;
    let groups = 4u32;
    let data = rt.alloc(d, MemoryKind::Device, (groups * words * 4) as usize)?;
    let input: Vec<u8> = (0..groups * words).flat_map(|w| w.to_le_bytes()).collect();
    let up = rt.upload(d, data.all(), &input, &mut vec![])?;
    let dims = LaunchDims {
        grid: [groups, 1, 1],
        block: [256, 1, 1],
        dynamic_workgroup_bytes: plan.dynamic_bytes,
    };
    // SAFETY: the kernel touches its count of words (or words per group) of its spans, which fit.
    let reversed = unsafe {
        rt.launch(
            d,
            "workgroup_reverse_u32",
            dims,
            &[Arg::Span(data.all()), Arg::U32(words)],
            &mut vec![up],
        )
    }?;
    let mut out = vec![0u8; input.len()];
    rt.download(d, &mut out, data.all(), &mut vec![reversed])?;
    for g in 0..groups {
        for i in 0..words {
            let at = ((g * words + i) * 4) as usize;
            let got = u32::from_le_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]]);
            let expected = g * words + (words - 1 - i) + 1;
            ensure!(
                got == expected,
                "workgroup {g} word {i}: {got}, expected {expected}"
            );
        }
    }
    drop((x, y, data));
    h.close()
}

/// Launches of the standard library that are wrong (arguments of the wrong number or kinds,
/// counts reaching past a span or past the dynamic workgroup memory, shapes no device runs)
/// are typed errors before anything is queued, whatever the backend: the buffer after the one
/// given keeps its bytes, and the device runs the next launch.
pub(super) fn library_launches_are_checked<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let d = DeviceId(0);
    let (buffer, neighbour) = (
        rt.alloc(d, MemoryKind::Device, 4096)?,
        rt.alloc(d, MemoryKind::Device, 4096)?,
    );
    fill_and_verify(rt, d, neighbour.all(), 0x11)?;
    let span = Arg::Span(buffer.all());
    let linear = LaunchDims::linear(4, 64);
    let fill = |value: u64, count: u64| [span, Arg::U64(value), Arg::U64(count)];
    type Expect = fn(&Error) -> bool;
    let mismatch: Expect = |e| matches!(e, Error::KernelArgumentMismatch { .. });
    let shape: Expect = |e| matches!(e, Error::LaunchShape { .. });
    let cases: [(&str, &str, LaunchDims, &[Arg<'_>], Expect); 6] = [
        (
            "fill_u32",
            "two arguments",
            linear,
            &[span, Arg::U32(1)],
            mismatch,
        ),
        ("fill_u32", "a U64 value", linear, &fill(1, 1024), mismatch),
        (
            "fill_u32",
            "2,048 words on 4 KiB",
            linear,
            &[span, Arg::U32(1), Arg::U64(2048)],
            |e| {
                matches!(
                    e,
                    Error::KernelReach {
                        argument: Some(0),
                        given: 4096,
                        reach: 8192,
                        ..
                    }
                )
            },
        ),
        (
            "fill_u32",
            "grid 0",
            LaunchDims::linear(0, 64),
            &[span, Arg::U32(1), Arg::U64(1024)],
            shape,
        ),
        (
            "fill_u32",
            "4,096 threads",
            LaunchDims::linear(1, 4096),
            &[span, Arg::U32(1), Arg::U64(1024)],
            shape,
        ),
        (
            "workgroup_reverse_u32",
            "16 words and no workgroup memory",
            LaunchDims::linear(1, 64),
            &[span, Arg::U32(16)],
            |e| {
                matches!(
                    e,
                    Error::KernelReach {
                        argument: None,
                        reach: 64,
                        ..
                    }
                )
            },
        ),
    ];
    for (name, what, dims, args, expected) in cases {
        // SAFETY: each launch is refused before anything is queued (what the case checks).
        let refused = unsafe { rt.launch(d, name, dims, args, &mut vec![]) };
        ensure!(
            refused.as_ref().err().is_some_and(expected),
            "{name} with {what} gave {refused:?}"
        );
    }
    let args = [span, Arg::U32(0x2222_2222), Arg::U64(1024)];
    // SAFETY: 1,024 words: the whole 4 KiB span.
    let filled = unsafe { rt.launch(d, "fill_u32", linear, &args, &mut vec![]) }?;
    let mut back = vec![0u8; 4096];
    rt.download(d, &mut back, buffer.all(), &mut vec![filled])?;
    ensure!(
        back.iter().all(|&b| b == 0x22),
        "the launch after the refusals did not fill its span"
    );
    rt.download(d, &mut back, neighbour.all(), &mut vec![])?;
    ensure!(
        back.iter().all(|&b| b == 0x11),
        "a refused launch wrote the neighbouring buffer"
    );
    drop((buffer, neighbour));
    h.close()
}
