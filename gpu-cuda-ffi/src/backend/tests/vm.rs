//! The backend's virtual memory over the fake driver: one cuMemCreate per piece, nothing left
//! after an out-of-memory map, typed refusals before the driver, and a reset or drop that gives
//! back every handle and range.
//!
//! The fake calls keep, per test thread, the physical handles alive, the pieces mapped, the
//! ranges reserved and the access granted, so a test sees exactly what reached the driver.

use super::*;

use std::cell::{Cell, RefCell};

/// The fake granularity.
const G: usize = 2 << 20;

std::thread_local! {
    /// Physical handles created on this thread and not released.
    static HANDLES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// Pieces mapped (address, size).
    static MAPPED: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
    /// Ranges reserved and not freed (address, size).
    static RANGES: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
    /// cuMemSetAccess calls: (address, size, device ordinal).
    static ACCESS: RefCell<Vec<(usize, usize, c_int)>> = const { RefCell::new(Vec::new()) };
    /// cuMemCreate calls left before it answers out of memory (`None`: never).
    static CREATES_LEFT: Cell<Option<usize>> = const { Cell::new(None) };
    /// The next fake address reserved.
    static NEXT_RANGE: Cell<usize> = const { Cell::new(1 << 40) };
    /// The largest reservation cuMemAddressReserve grants (`None`: any).
    static RESERVE_ROOM: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Tracks `value` in `list`.
fn add<T>(list: &'static std::thread::LocalKey<RefCell<Vec<T>>>, value: T) {
    list.with(|list| list.borrow_mut().push(value));
}

/// Untracks `value` from `list`: `CUDA_ERROR_INVALID_VALUE` where it is not there.
fn remove<T: PartialEq>(
    list: &'static std::thread::LocalKey<RefCell<Vec<T>>>,
    value: T,
) -> sys::CUresult {
    list.with(|list| {
        let mut list = list.borrow_mut();
        match list.iter().position(|v| *v == value) {
            Some(index) => {
                list.remove(index);
                sys::CUDA_SUCCESS
            }
            None => sys::CUDA_ERROR_INVALID_VALUE,
        }
    })
}

fn snapshot<T: Clone>(list: &'static std::thread::LocalKey<RefCell<Vec<T>>>) -> Vec<T> {
    list.with(|list| list.borrow().clone())
}

unsafe extern "C" fn reserve(
    out: *mut sys::CUdeviceptr,
    size: usize,
    _: usize,
    _: sys::CUdeviceptr,
    _: u64,
) -> sys::CUresult {
    if RESERVE_ROOM.with(Cell::get).is_some_and(|room| size > room) {
        return sys::CUDA_ERROR_OUT_OF_MEMORY;
    }
    let start = NEXT_RANGE.with(|next| next.replace(next.get() + size.next_multiple_of(G)));
    add(&RANGES, (start, size));
    // SAFETY: the backend passes a valid out-parameter.
    unsafe { put(out, start as sys::CUdeviceptr) }
}

unsafe extern "C" fn address_free(address: sys::CUdeviceptr, size: usize) -> sys::CUresult {
    remove(&RANGES, (address as usize, size))
}

unsafe extern "C" fn create(
    out: *mut u64,
    _: usize,
    _: *const sys::CUmemAllocationProp,
    _: u64,
) -> sys::CUresult {
    let left = CREATES_LEFT.with(Cell::get);
    if left == Some(0) {
        return sys::CUDA_ERROR_OUT_OF_MEMORY;
    }
    CREATES_LEFT.with(|c| c.set(left.map(|left| left - 1)));
    let handle = fake_address() as u64;
    add(&HANDLES, handle);
    // SAFETY: the backend passes a valid out-parameter.
    unsafe { put(out, handle) }
}

unsafe extern "C" fn release(handle: u64) -> sys::CUresult {
    remove(&HANDLES, handle)
}

unsafe extern "C" fn map(
    address: sys::CUdeviceptr,
    size: usize,
    _: usize,
    _: u64,
    _: u64,
) -> sys::CUresult {
    add(&MAPPED, (address as usize, size));
    sys::CUDA_SUCCESS
}

unsafe extern "C" fn unmap(address: sys::CUdeviceptr, size: usize) -> sys::CUresult {
    remove(&MAPPED, (address as usize, size))
}

unsafe extern "C" fn set_access(
    address: sys::CUdeviceptr,
    size: usize,
    desc: *const sys::CUmemAccessDesc,
    count: usize,
) -> sys::CUresult {
    assert_eq!(count, 1);
    // SAFETY: the backend passes one readable descriptor.
    let desc = unsafe { *desc };
    add(&ACCESS, (address as usize, size, desc.location.id));
    sys::CUDA_SUCCESS
}

/// The fake virtual-memory entry points.
pub(super) fn fake_entry_point(symbol: &[u8]) -> Option<*mut c_void> {
    Some(match symbol {
        b"cuMemAddressReserve" => reserve as sys::PFN_cuMemAddressReserve as *mut c_void,
        b"cuMemAddressFree" => address_free as sys::PFN_cuMemAddressFree as *mut c_void,
        b"cuMemCreate" => create as sys::PFN_cuMemCreate as *mut c_void,
        b"cuMemRelease" => release as sys::PFN_cuMemRelease as *mut c_void,
        b"cuMemMap" => map as sys::PFN_cuMemMap as *mut c_void,
        b"cuMemUnmap" => unmap as sys::PFN_cuMemUnmap as *mut c_void,
        b"cuMemSetAccess" => set_access as sys::PFN_cuMemSetAccess as *mut c_void,
        _ => return None,
    })
}

/// A fake backend of two devices with virtual memory of granularity `G`.
fn vm_backend() -> CudaBackend {
    let mut backend = fake_backend();
    let info = backend.devices[0].info.clone();
    backend.devices.push(DeviceState {
        ordinal: 1,
        context: AtomicPtr::new(FAKE_CONTEXT),
        pool: AtomicPtr::new(ptr::null_mut()),
        info,
        library: Mutex::new(None),
        vm_granularity: None,
    });
    for device in &mut backend.devices {
        device.vm_granularity = Some(G);
    }
    backend
}

const D1: DeviceId = DeviceId(1);
const DEVICE: MemoryKind = MemoryKind::Device;

#[test]
fn only_device_memory_of_a_device_with_virtual_memory_has_a_granularity() {
    let (plain, vm) = (fake_backend(), vm_backend());
    assert_eq!(plain.vm_granularity(D0, DEVICE), None);
    assert_eq!(
        plain.vm_reserve(D0, DEVICE, G, G),
        Err(Error::KindUnsupported {
            device: D0,
            kind: DEVICE
        })
    );
    assert_eq!(vm.vm_granularity(D0, DEVICE), Some(G));
    assert_eq!(vm.vm_granularity(D0, MemoryKind::HostPinned), None);
    assert_eq!(vm.vm_granularity(DeviceId(2), DEVICE), None);
    assert_eq!(
        vm.vm_reserve(D0, DEVICE, G + 1, G),
        Err(Error::MisalignedSegment {
            address: G + 1,
            required: G
        })
    );
    assert!(snapshot(&RANGES).is_empty());
}

#[test]
fn a_segment_maps_piece_by_piece_and_unmaps_its_tail() {
    let b = vm_backend();
    let (base, size) = b.vm_reserve(D0, DEVICE, 8 * G, G).unwrap().unwrap();
    assert_eq!(size, 8 * G);
    assert_eq!(b.vm_map(D0, DEVICE, base, 3 * G), Ok(true));
    assert_eq!(snapshot(&HANDLES).len(), 3);
    assert_eq!(
        snapshot(&MAPPED),
        vec![(base, G), (base + G, G), (base + 2 * G, G)]
    );
    assert_eq!(snapshot(&ACCESS), vec![(base, 3 * G, 0)]);
    assert_eq!(b.vm_set_access(D0, base, 3 * G, D1), Ok(()));
    assert_eq!(snapshot(&ACCESS)[1], (base, 3 * G, 1));
    // The last two pieces of the one mapping go back, with a stream's work waited for.
    let stream = b.stream_create(D0).unwrap();
    assert_eq!(
        b.vm_unmap(D0, DEVICE, base + G, 2 * G, Some(stream)),
        Ok(())
    );
    assert_eq!(snapshot(&MAPPED), vec![(base, G)]);
    assert_eq!(snapshot(&HANDLES).len(), 1);
    // A range still mapped is not released; once unmapped it is.
    assert_eq!(
        b.vm_release(D0, DEVICE, base, size),
        Err(Error::UnknownAddress {
            device: D0,
            address: base
        })
    );
    assert_eq!(b.vm_unmap(D0, DEVICE, base, G, None), Ok(()));
    assert_eq!(b.vm_release(D0, DEVICE, base, size), Ok(()));
    assert!(snapshot(&RANGES).is_empty() && snapshot(&HANDLES).is_empty());
}

#[test]
fn out_of_memory_on_a_piece_is_false_with_nothing_left_mapped() {
    let b = vm_backend();
    let (base, _) = b.vm_reserve(D0, DEVICE, 8 * G, G).unwrap().unwrap();
    CREATES_LEFT.with(|c| c.set(Some(2)));
    assert_eq!(b.vm_map(D0, DEVICE, base, 4 * G), Ok(false));
    CREATES_LEFT.with(|c| c.set(None));
    assert!(snapshot(&HANDLES).is_empty());
    assert!(snapshot(&MAPPED).is_empty());
    // Access to what is not mapped, and a stream of another device, are refused.
    assert_eq!(
        b.vm_set_access(D0, base, G, D1),
        Err(Error::UnknownAddress {
            device: D0,
            address: base
        })
    );
    assert_eq!(b.vm_map(D0, DEVICE, base, G), Ok(true));
    let other = b.stream_create(D1).unwrap();
    assert!(matches!(
        b.vm_unmap(D0, DEVICE, base, G, Some(other)),
        Err(Error::WrongDevice { .. })
    ));
    assert_eq!(snapshot(&MAPPED), vec![(base, G)]);
}

#[test]
fn a_reset_and_a_drop_give_back_everything_mapped_or_reserved() {
    let b = vm_backend();
    let (one, _) = b.vm_reserve(D0, DEVICE, 4 * G, G).unwrap().unwrap();
    let (two, _) = b.vm_reserve(D1, DEVICE, 4 * G, G).unwrap().unwrap();
    assert_eq!(b.vm_map(D0, DEVICE, one, 2 * G), Ok(true));
    assert_eq!(b.vm_map(D1, DEVICE, two, G), Ok(true));
    assert_eq!(b.reset_device(D0), Ok(()));
    // Device 0's pieces and range went back; device 1's stay until the drop.
    assert_eq!(snapshot(&MAPPED), vec![(two, G)]);
    assert_eq!(snapshot(&RANGES), vec![(two, 4 * G)]);
    assert_eq!(snapshot(&HANDLES).len(), 1);
    assert_eq!(
        b.vm_unmap(D0, DEVICE, one, G, None),
        Err(Error::UnknownAddress {
            device: D0,
            address: one
        })
    );
    drop(b);
    assert!(snapshot(&MAPPED).is_empty());
    assert!(snapshot(&RANGES).is_empty());
    assert!(snapshot(&HANDLES).is_empty());
}

#[test]
fn a_reservation_falls_back_to_the_needed_size_and_out_of_room_is_none() {
    let b = vm_backend();
    RESERVE_ROOM.with(|room| room.set(Some(2 * G)));
    let (start, size) = b.vm_reserve(D0, DEVICE, 8 * G, 2 * G).unwrap().unwrap();
    assert_eq!(size, 2 * G);
    assert_eq!(b.vm_reserve(D0, DEVICE, 8 * G, 4 * G), Ok(None));
    assert_eq!(snapshot(&RANGES), vec![(start, 2 * G)]);
    // A peer the backend does not have is refused before the driver.
    assert_eq!(b.vm_map(D0, DEVICE, start, G), Ok(true));
    assert!(matches!(
        b.vm_set_access(D0, start, G, DeviceId(7)),
        Err(Error::UnknownDevice { .. })
    ));
    assert_eq!(snapshot(&ACCESS), vec![(start, G, 0)]);
}
