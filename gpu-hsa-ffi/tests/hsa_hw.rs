//! The HSA backend on a hardware machine, for `cargo xtask test-hw`: on an AMD GPU, fills with
//! unaligned edges and a kernel checked through copies, then the backend-generic conformance
//! suite; elsewhere each test reports why it skipped (no library, or no device: hsa_init's
//! OUT_OF_RESOURCES without /dev/kfd). Each line starts on a line of its own, where the runner
//! looks for it (the harness has printed "test NAME ... ").

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{Backend, FillValue, KernelArg, LaunchDims};
use gpu_core::conformance::run_and_print;
use gpu_core::{DeviceId, Error};
use gpu_hsa_ffi::{HsaBackend, reports_no_device};

/// The backend, or `None` after printing why the test is skipped.
fn open() -> Option<HsaBackend> {
    match HsaBackend::new() {
        Ok(backend) => Some(backend),
        Err(error @ Error::DriverLibraryNotFound { .. }) => {
            eprintln!("\nbackend hsa: skipped: no HSA library ({error})");
            None
        }
        Err(error) if reports_no_device(&error) => {
            eprintln!("\nbackend hsa: skipped: no device ({error})");
            None
        }
        Err(other) => panic!("opening the HSA backend failed: {other}"),
    }
}

#[test]
fn fills_copies_and_a_kernel_round_trip_through_device_memory() {
    let Some(b) = open() else { return };
    eprintln!("{b:?}");
    let d0 = DeviceId(0);
    let stream = b.stream_create(d0).unwrap();
    let words = 1000usize;
    let device = b
        .allocate(d0, MemoryKind::Device, words * 4)
        .unwrap()
        .unwrap();
    let host = b
        .allocate(d0, MemoryKind::HostPinned, words * 4)
        .unwrap()
        .unwrap();
    let read_back = |b: &HsaBackend| -> Vec<u8> {
        // SAFETY: both buffers are live, `words * 4` bytes, and only this test touches them.
        unsafe { b.copy(stream, host, device, words * 4) }.unwrap();
        b.stream_synchronize(stream).unwrap();
        // SAFETY: the copy has completed; the pinned buffer holds `words * 4` bytes.
        unsafe { core::slice::from_raw_parts(host as *const u8, words * 4) }.to_vec()
    };
    // Bytes 1..3998: a head of 3 bytes, aligned words, a tail of 2 bytes.
    // SAFETY: inside the device buffer.
    unsafe {
        b.fill(stream, device, 0, words * 4).unwrap();
        b.fill_elements(stream, device + 1, FillValue::U8(0xAB), words * 4 - 3)
            .unwrap();
    }
    let bytes = read_back(&b);
    assert_eq!(bytes[0], 0);
    assert!(bytes[1..words * 4 - 2].iter().all(|&x| x == 0xAB));
    assert_eq!(&bytes[words * 4 - 2..], &[0, 0]);
    // fill_u32 through `launch`, after a copy (a barrier-AND on the copy's signal).
    let kernel = b.kernel(d0, "fill_u32").unwrap();
    let args = [
        KernelArg::Ptr(device),
        KernelArg::U32(0x1234_5678),
        KernelArg::U64(words as u64),
    ];
    // SAFETY: the kernel writes `words` words of the device buffer.
    unsafe { b.launch(stream, kernel, LaunchDims::linear(4, 256), &args) }.unwrap();
    let bytes = read_back(&b);
    assert!(bytes.chunks(4).all(|w| w == 0x1234_5678u32.to_le_bytes()));
    // An event recorded after the work completes; a second stream waits for it.
    let event = b.event_create(d0).unwrap();
    let other = b.stream_create(d0).unwrap();
    b.event_record(event, stream).unwrap();
    b.stream_wait_event(other, event).unwrap();
    b.stream_synchronize(other).unwrap();
    b.event_synchronize(event).unwrap();
    assert!(b.event_query(event).unwrap());
    b.event_destroy(event).unwrap();
    b.stream_destroy(other).unwrap();
    b.free(d0, MemoryKind::Device, device, Some(stream))
        .unwrap();
    b.free(d0, MemoryKind::HostPinned, host, None).unwrap();
    b.stream_destroy(stream).unwrap();
}

#[test]
fn conformance_suite_passes_on_hardware() {
    let Some(held) = open() else { return };
    let failed = run_and_print("hsa", &HsaBackend::new);
    assert_eq!(failed, 0, "{failed} case(s) failed");
    drop(held);
}
