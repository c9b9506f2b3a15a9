//! What the CUDA backend adds on top of the driver, each figure beside the same driver calls
//! made directly in the same run (the baseline): a stream-ordered alloc+free pair, an event
//! record+wait, an event query with and without the device's context already current (the
//! context bracket's cost), and the pinned-extent query of unregistered memory. Needs a GPU;
//! without a driver or device it prints why and measures nothing.

use core::ffi::{c_uint, c_void};
use std::hint::black_box;

use criterion::Criterion;
use gpu_core::DeviceId;
use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_cuda_ffi::{CudaBackend, sys};

const D0: DeviceId = DeviceId(0);

fn bench(c: &mut Criterion, b: &CudaBackend) {
    let driver = b.driver();
    let stream = b.stream_create(D0).unwrap();
    let event = b.event_create(D0).unwrap();
    let raw_stream = stream.raw();
    let raw_event = event.raw();
    b.set_current_device(Some(D0)).unwrap();

    let alloc_async = driver.cuMemAllocAsync().unwrap();
    let free_async = driver.cuMemFreeAsync().unwrap();
    let mut group = c.benchmark_group("stream_ordered_alloc_free_4KiB");
    group.bench_function("driver", |bench| {
        bench.iter(|| {
            let mut address = 0;
            // SAFETY: a live stream of the current context; the memory is freed at once.
            unsafe {
                assert_eq!(alloc_async(&mut address, 4096, raw_stream), 0);
                assert_eq!(free_async(address, raw_stream), 0);
            }
        })
    });
    group.bench_function("backend", |bench| {
        bench.iter(|| {
            let address = b
                .allocate_on_stream(stream, MemoryKind::Device, 4096)
                .unwrap()
                .unwrap();
            b.free(D0, MemoryKind::Device, address, Some(stream))
                .unwrap();
        })
    });
    group.finish();
    b.stream_synchronize(stream).unwrap();

    let record = driver.cuEventRecord().unwrap();
    let wait = driver.cuStreamWaitEvent().unwrap();
    let mut group = c.benchmark_group("event_record_wait");
    group.bench_function("driver", |bench| {
        bench.iter(|| {
            // SAFETY: a live event and stream of the current context.
            unsafe {
                assert_eq!(record(raw_event, raw_stream), 0);
                assert_eq!(wait(raw_stream, raw_event, 0), 0);
            }
        })
    });
    group.bench_function("backend", |bench| {
        bench.iter(|| {
            b.event_record(event, stream).unwrap();
            b.stream_wait_event(stream, event).unwrap();
        })
    });
    group.finish();
    b.stream_synchronize(stream).unwrap();

    let query = driver.cuEventQuery().unwrap();
    let mut group = c.benchmark_group("event_query_completed");
    group.bench_function("driver", |bench| {
        // SAFETY: a live, completed event.
        bench.iter(|| assert_eq!(unsafe { query(raw_event) }, 0))
    });
    group.bench_function("backend_context_current", |bench| {
        bench.iter(|| assert!(b.event_query(event).unwrap()))
    });
    b.set_current_device(None).unwrap();
    group.bench_function("backend_no_context_current", |bench| {
        bench.iter(|| assert!(b.event_query(event).unwrap()))
    });
    group.finish();
    b.set_current_device(Some(D0)).unwrap();

    let heap = vec![0u8; 4096];
    let unregistered = heap.as_ptr() as usize;
    let attributes_of = driver.cuPointerGetAttributes().unwrap();
    let mut group = c.benchmark_group("pinned_extent_of_unregistered_memory");
    group.bench_function("driver", |bench| {
        bench.iter(|| {
            let (mut memory_type, mut start, mut size): (c_uint, u64, usize) = (0, 0, 0);
            let mut attributes = [
                sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                sys::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                sys::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            ];
            let mut values: [*mut c_void; 3] = [
                (&mut memory_type as *mut c_uint).cast(),
                (&mut start as *mut u64).cast(),
                (&mut size as *mut usize).cast(),
            ];
            // SAFETY: three attributes with matching out-parameters.
            let code = unsafe {
                attributes_of(
                    3,
                    attributes.as_mut_ptr(),
                    values.as_mut_ptr(),
                    black_box(unregistered) as u64,
                )
            };
            assert_eq!((code, memory_type), (0, 0));
        })
    });
    let mut device_ptrs = [0usize; 1];
    group.bench_function("backend", |bench| {
        bench.iter(|| {
            assert_eq!(
                b.host_pinned_extent(black_box(unregistered), &mut device_ptrs),
                Ok(None)
            )
        })
    });
    group.finish();

    b.event_destroy(event).unwrap();
    b.stream_destroy(stream).unwrap();
    b.set_current_device(None).unwrap();
}

fn main() {
    let backend = match CudaBackend::new() {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("skipped: no CUDA device to measure ({error})");
            return;
        }
    };
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion, &backend);
    criterion.final_summary();
}
