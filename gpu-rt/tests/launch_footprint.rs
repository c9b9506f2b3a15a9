//! The exact footprint the runtime tells its backend of each launch (issue 25), as the CUDA
//! and HIP backends pass it on to gpu-recorder: seen here through the host backend's log.

use gpu_core::ByteRange;
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Access, LaunchDims};
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{HostBackend, HostConfig, standard_kernels};
use gpu_rt::runtime::{Arg, Runtime};

const D0: DeviceId = DeviceId(0);
const MIB: usize = 1 << 20;

fn range(start: usize, len: usize) -> ByteRange {
    ByteRange::new(start, len).unwrap()
}

/// Launches `name` on device 0 over `threads` threads (256 a workgroup) and waits for it.
///
/// # Safety
/// A kernel outside the library stays inside its spans.
unsafe fn launch_and_wait(
    rt: &Runtime<HostBackend>,
    name: &str,
    threads: u32,
    args: &[Arg<'_>],
) -> gpu_core::Result<()> {
    let dims = LaunchDims::linear(threads.div_ceil(256), threads.min(256));
    // SAFETY: the library's launches are checked; the caller's promise for any other.
    let done = unsafe { rt.launch(D0, name, dims, args, &mut vec![])? };
    rt.wait(done)
}

#[test]
fn a_library_kernel_on_a_sub_span_announces_the_bytes_it_reaches_read_or_written() {
    let backend = HostBackend::new(HostConfig::with_devices(1));
    backend.want_footprints(true);
    let rt = Runtime::new(backend).unwrap();
    // The pipeline's pattern: a kernel on one 2 MiB chunk of two 8 MiB buffers.
    let x = rt.alloc(D0, MemoryKind::Device, 8 * MIB).unwrap();
    let y = rt.alloc(D0, MemoryKind::Device, 8 * MIB).unwrap();
    let (x_chunk, y_chunk) = (
        x.all().sub(4 * MIB, 2 * MIB).unwrap(),
        y.all().sub(4 * MIB, 2 * MIB).unwrap(),
    );
    let count = (MIB / 4) as u64; // half the chunk: the announcement is what it reaches
    let args = [
        Arg::F32(2.0),
        Arg::Span(x_chunk),
        Arg::Span(y_chunk),
        Arg::U64(count),
    ];
    // SAFETY: library kernels: the runtime checks how far they reach into each span.
    unsafe { launch_and_wait(&rt, "axpy_f32", 1024, &args) }.unwrap();
    let fill = [Arg::Span(y_chunk), Arg::U32(1), Arg::U64(16)];
    // SAFETY: as above.
    unsafe { launch_and_wait(&rt, "fill_u32", 16, &fill) }.unwrap();
    let announced = rt.backend().take_footprints();
    let ranges: Vec<_> = announced.iter().map(|a| a.ranges.clone()).collect();
    let (x_at, y_at) = (x.address() + 4 * MIB, y.address() + 4 * MIB);
    assert_eq!(
        ranges,
        [
            vec![
                (range(x_at, MIB), Access::Read),
                (range(y_at, MIB), Access::ReadWrite)
            ],
            vec![(range(y_at, 64), Access::Write)],
        ]
    );
}

#[test]
fn a_kernel_outside_the_library_announces_each_span_read_write() {
    let backend = HostBackend::new(HostConfig::with_devices(1));
    let (_, fill) = standard_kernels().into_iter().next().unwrap();
    backend.register_kernel("my_fill", move |ctx, workgroup| fill(ctx, workgroup));
    backend.want_footprints(true);
    let rt = Runtime::new(backend).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let span = buffer.all().sub(1024, 64).unwrap();
    let args = [Arg::Span(span), Arg::U32(3), Arg::U64(16)];
    // SAFETY: 16 words fit the 64-byte span.
    unsafe { launch_and_wait(&rt, "my_fill", 16, &args) }.unwrap();
    let announced = rt.backend().take_footprints();
    assert_eq!(announced.len(), 1);
    assert_eq!(
        announced[0].ranges,
        [(range(buffer.address() + 1024, 64), Access::ReadWrite)]
    );
}

#[test]
fn without_a_listener_no_footprint_is_built_and_a_refused_launch_announces_none() {
    let backend = HostBackend::new(HostConfig::with_devices(1));
    let rt = Runtime::new(backend).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let args = [Arg::Span(buffer.all()), Arg::U32(1), Arg::U64(16)];
    // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    unsafe { launch_and_wait(&rt, "fill_u32", 16, &args) }.unwrap();
    // The backend logs any announcement: none was made, since it wanted none.
    assert!(rt.backend().take_footprints().is_empty());
    rt.backend().want_footprints(true);
    let too_far = [Arg::Span(buffer.all()), Arg::U32(1), Arg::U64(17)];
    // SAFETY: as above (refused before anything is queued).
    let refused = unsafe { launch_and_wait(&rt, "fill_u32", 16, &too_far) };
    assert!(matches!(refused, Err(Error::KernelReach { .. })));
    assert!(rt.backend().take_footprints().is_empty());
}
