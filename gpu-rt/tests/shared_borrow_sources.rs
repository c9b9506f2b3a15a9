//! Safe code that lends the runtime host memory through a shared borrow only: `lock_range`
//! pins it by address, and `upload` copies straight from the pinned slice.
//!
//! Miri's default aliasing model (Stacked Borrows) once reported this round trip as undefined
//! behaviour (issues 20 and 21): the host backend read every copy's source as `AtomicU8`,
//! whose contract claims write access, which a slice behind `&[u8]` does not give. The upload
//! now tells the backend its source is read-only until the copy has run
//! (`Backend::copy_from_read_only`), and the host backend reads such a source as plain
//! memory. CI runs this file under Miri.

use gpu_core::DeviceId;
use gpu_core::allocator::MemoryKind;
use gpu_rt::host::{HostBackend, HostConfig};
use gpu_rt::runtime::Runtime;

const D0: DeviceId = DeviceId(0);

#[test]
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
