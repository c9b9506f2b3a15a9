//! Safe code that lends the runtime host memory through a shared borrow only: `lock_range`
//! pins it by address, and `upload` copies straight from the pinned slice.
//!
//! Natively this round trip passes. Under Miri's default aliasing model (Stacked Borrows) it
//! is undefined behaviour, found by the Miri runs of issues 20 and 21: the host backend reads a
//! copy's source through `AtomicU8::from_ptr` (`host/bytes.rs`, `byte`), whose contract wants
//! the pointer valid for writes too, while `Backend::copy` promises the backend only a source
//! valid for reads, and `upload` has only `&[u8]`. Miri reports "trying to retag from
//! <wildcard> for SharedReadWrite permission ... but no exposed tags have suitable permission"
//! in `bytes::copy` on a host stream's thread. (Tree Borrows, `-Zmiri-tree-borrows`, accepts
//! it.) Until the host backend reads sources without claiming write access, Miri skips this
//! test; `MIRIFLAGS=-Zmiri-permissive-provenance cargo +nightly miri test -p gpu-rt --test
//! shared_borrow_sources -- --ignored` shows the report.

use gpu_core::DeviceId;
use gpu_core::allocator::MemoryKind;
use gpu_rt::host::{HostBackend, HostConfig};
use gpu_rt::runtime::Runtime;

const D0: DeviceId = DeviceId(0);

#[test]
#[cfg_attr(
    miri,
    ignore = "UB under Stacked Borrows: the host backend reads copy sources as AtomicU8 (see the file's doc)"
)]
fn an_upload_from_a_shared_borrow_of_pinned_memory_round_trips() {
    let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1))).unwrap();
    let owned: Vec<u8> = (0..64).collect();
    // Only ever lent through this shared borrow: its address is taken from the slice.
    let data: &[u8] = &owned;
    let address = data.as_ptr() as usize;
    let buffer = rt.alloc(D0, MemoryKind::Device, data.len()).unwrap();
    rt.lock_range(address, data.len()).unwrap();
    assert_eq!(
        rt.pinned_address(address, data.len(), D0).unwrap(),
        Some(address),
        "pinned: the upload copies from the slice itself"
    );
    let uploaded = rt.upload(D0, buffer.all(), data, &mut vec![]).unwrap();
    let mut back = vec![0u8; data.len()];
    rt.download(D0, &mut back, buffer.all(), &mut vec![uploaded])
        .unwrap();
    assert_eq!(back, data);
    rt.unlock_range(address).unwrap();
}
