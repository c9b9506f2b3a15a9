//! Tests of the mapping bookkeeping against a fake driver that records every call: pieces
//! mapped one physical allocation each, nothing left after a failed or out-of-memory map, typed
//! refusals before the driver, and a clear that gives everything back.

use super::*;

use alloc::string::String;
use alloc::vec;
use alloc::{format, vec::Vec};
use core::cell::{Cell, RefCell};

use crate::error::DriverError;

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);
const DEVICE: MemoryKind = MemoryKind::Device;
const PIECE: usize = 0x1000;
const BASE: usize = 0x10_0000;

/// A fake driver: the physical allocations alive, the pieces mapped, and a log of the calls.
#[derive(Default)]
struct Fake {
    next_handle: Cell<u32>,
    alive: RefCell<Vec<u32>>,
    mapped: RefCell<Vec<(usize, u32)>>,
    freed_ranges: RefCell<Vec<(usize, usize)>>,
    grants: RefCell<Vec<(usize, usize)>>,
    /// The create that answers out of memory (counting from 1), if any.
    oom_at: Cell<Option<u32>>,
    /// Where the next reservation starts.
    base: Cell<usize>,
    /// The largest reservation the fake has room for (`None`: any).
    room: Cell<Option<usize>>,
    /// Whether grant fails.
    refuse_grant: Cell<bool>,
    /// An address whose unmap fails.
    refuse_unmap: Cell<Option<usize>>,
    log: RefCell<Vec<String>>,
}

/// The fake's out-of-memory code.
const OUT_OF_MEMORY: i64 = 2;

fn failure(call: &'static str) -> Error {
    Error::Driver(DriverError {
        backend: "fake",
        call,
        code: 1,
        name: "FAKE_FAILURE",
    })
}

fn out_of_memory(call: &'static str) -> Error {
    Error::Driver(DriverError {
        backend: "fake",
        call,
        code: OUT_OF_MEMORY,
        name: "FAKE_OUT_OF_MEMORY",
    })
}

/// A fake whose reservations start at `base`.
fn fake_at(base: usize) -> Fake {
    let fake = Fake::default();
    fake.base.set(base);
    fake
}

impl VmCalls for Fake {
    type Handle = u32;
    type Current = ();
    const OUT_OF_MEMORY: i64 = OUT_OF_MEMORY;

    fn reserve(&self, size: usize, alignment: usize) -> Result<usize> {
        self.log.borrow_mut().push(format!("reserve {size:#x}"));
        assert_eq!(alignment, PIECE);
        if self.room.get().is_some_and(|room| size > room) {
            return Err(out_of_memory("reserve"));
        }
        Ok(self.base.get())
    }

    fn make_current(&self) -> Result<()> {
        self.log.borrow_mut().push("current".into());
        Ok(())
    }

    fn create(&self, size: usize) -> Result<u32> {
        let handle = self.next_handle.get() + 1;
        self.next_handle.set(handle);
        self.log.borrow_mut().push(format!("create {size:#x}"));
        if self.oom_at.get() == Some(handle) {
            return Err(out_of_memory("create"));
        }
        self.alive.borrow_mut().push(handle);
        Ok(handle)
    }

    fn map(&self, address: usize, size: usize, handle: u32) -> Result<()> {
        self.log
            .borrow_mut()
            .push(format!("map {address:#x} {size:#x}"));
        self.mapped.borrow_mut().push((address, handle));
        Ok(())
    }

    fn grant(&self, address: usize, size: usize) -> Result<()> {
        if self.refuse_grant.get() {
            return Err(failure("grant"));
        }
        self.grants.borrow_mut().push((address, size));
        Ok(())
    }

    fn unmap(&self, address: usize, _: usize) -> Result<()> {
        if self.refuse_unmap.get() == Some(address) {
            return Err(failure("unmap"));
        }
        self.mapped.borrow_mut().retain(|&(at, _)| at != address);
        Ok(())
    }

    fn release(&self, handle: u32) -> Result<()> {
        self.alive.borrow_mut().retain(|&h| h != handle);
        Ok(())
    }

    fn free_range(&self, address: usize, size: usize) -> Result<()> {
        self.freed_ranges.borrow_mut().push((address, size));
        Ok(())
    }
}

/// The refusal of a range on device 0 at `address`.
fn unknown<T>(address: usize) -> Result<T> {
    Err(Error::UnknownAddress {
        device: D0,
        address,
    })
}

/// A table with one range of 8 pieces reserved on device 0 at `BASE`.
fn reserved() -> LiveMappings<u32> {
    let live = LiveMappings::new();
    let got = live.reserve((D0, DEVICE), PIECE, (8 * PIECE, PIECE), &fake_at(BASE));
    assert_eq!(got, Ok(Some((BASE, 8 * PIECE))));
    live
}

#[test]
fn a_reservation_falls_back_to_the_needed_size_and_none_when_even_that_fails() {
    let live = LiveMappings::<u32>::new();
    let fake = fake_at(BASE);
    fake.room.set(Some(2 * PIECE));
    let got = live.reserve((D0, DEVICE), PIECE, (8 * PIECE, 2 * PIECE), &fake);
    assert_eq!(got, Ok(Some((BASE, 2 * PIECE))));
    let asked = ["current", "reserve 0x8000", "reserve 0x2000"];
    assert_eq!(*fake.log.borrow(), asked);
    assert_eq!(live.bytes(D0), (0, 2 * PIECE));
    fake.room.set(Some(0));
    let none = live.reserve((D1, DEVICE), PIECE, (PIECE, PIECE), &fake);
    assert_eq!(none, Ok(None));
    assert_eq!(live.bytes(D1), (0, 0));
    fake.log.borrow_mut().clear();
    let zero = live.reserve((D1, DEVICE), PIECE, (0, 0), &fake);
    assert!(matches!(zero, Err(Error::ZeroSize { .. })));
    let odd = live.reserve((D1, DEVICE), PIECE, (PIECE + 1, PIECE), &fake);
    assert_eq!(
        odd,
        Err(Error::MisalignedSegment {
            address: PIECE + 1,
            required: PIECE
        })
    );
    assert_eq!(live.bytes(D1), (0, 0));
    assert!(fake.log.borrow().is_empty(), "refused before the driver");
    // Only device memory of a device with a granularity has virtual memory.
    assert_eq!(vm_granularity_of(D0, DEVICE, Some(PIECE)), Ok(PIECE));
    let unsupported = |kind| Err(Error::KindUnsupported { device: D0, kind });
    assert_eq!(vm_granularity_of(D0, DEVICE, None), unsupported(DEVICE));
    assert_eq!(
        vm_granularity_of(D0, MemoryKind::Managed, Some(PIECE)),
        unsupported(MemoryKind::Managed)
    );
}

#[test]
fn a_map_creates_one_physical_allocation_per_piece_and_grants_the_whole() {
    let (live, fake) = (reserved(), fake_at(BASE));
    assert_eq!(
        live.map((D0, DEVICE), (BASE, 3 * PIECE), PIECE, &fake),
        Ok(true)
    );
    assert_eq!(fake.alive.borrow().len(), 3);
    assert_eq!(
        *fake.mapped.borrow(),
        vec![(BASE, 1), (BASE + PIECE, 2), (BASE + 2 * PIECE, 3)]
    );
    assert_eq!(*fake.grants.borrow(), vec![(BASE, 3 * PIECE)]);
    assert_eq!(live.bytes(D0), (3 * PIECE, 8 * PIECE));
    // The tail of what one call mapped unmaps alone: its piece's memory goes back.
    assert_eq!(
        live.unmap((D0, DEVICE), (BASE + 2 * PIECE, PIECE), &fake),
        Ok(())
    );
    assert_eq!(*fake.alive.borrow(), vec![1, 2]);
    assert_eq!(live.bytes(D0), (2 * PIECE, 8 * PIECE));
}

#[test]
fn an_out_of_memory_or_failed_map_leaves_nothing_mapped() {
    let (live, fake) = (reserved(), fake_at(BASE));
    fake.oom_at.set(Some(3));
    assert_eq!(
        live.map((D0, DEVICE), (BASE, 4 * PIECE), PIECE, &fake),
        Ok(false)
    );
    assert!(fake.alive.borrow().is_empty());
    assert!(fake.mapped.borrow().is_empty());
    assert_eq!(live.bytes(D0), (0, 8 * PIECE));
    fake.refuse_grant.set(true);
    let refused = live.map((D0, DEVICE), (BASE, 2 * PIECE), PIECE, &fake);
    assert_eq!(refused, Err(failure("grant")));
    assert!(fake.alive.borrow().is_empty() && fake.mapped.borrow().is_empty());
    // The range is free to map again.
    fake.refuse_grant.set(false);
    assert_eq!(
        live.map((D0, DEVICE), (BASE, 2 * PIECE), PIECE, &fake),
        Ok(true)
    );
}

#[test]
fn bad_ranges_are_typed_errors_before_the_driver() {
    let (live, fake) = (reserved(), fake_at(BASE));
    let map = |device, kind, address, size| live.map((device, kind), (address, size), PIECE, &fake);
    assert_eq!(
        map(D0, DEVICE, BASE + 1, PIECE),
        Err(Error::MisalignedSegment {
            address: BASE + 1,
            required: PIECE
        })
    );
    assert!(matches!(
        map(D0, DEVICE, BASE, 0),
        Err(Error::ZeroSize { .. })
    ));
    // Past the reserved range, before it, of another device or kind.
    assert_eq!(
        map(D0, DEVICE, BASE + 7 * PIECE, 2 * PIECE),
        unknown(BASE + 7 * PIECE)
    );
    assert_eq!(map(D0, DEVICE, BASE - PIECE, PIECE), unknown(BASE - PIECE));
    assert_eq!(
        map(D1, DEVICE, BASE, PIECE),
        Err(Error::UnknownAddress {
            device: D1,
            address: BASE
        })
    );
    assert_eq!(map(D0, MemoryKind::Managed, BASE, PIECE), unknown(BASE));
    assert!(fake.log.borrow().is_empty(), "{:?}", fake.log.borrow());
    // Over a mapped piece.
    assert_eq!(map(D0, DEVICE, BASE + PIECE, PIECE), Ok(true));
    assert_eq!(map(D0, DEVICE, BASE, 2 * PIECE), unknown(BASE));
    // Access, unmap and release of what is not mapped (or still is).
    assert_eq!(
        live.set_access(D0, (BASE, 2 * PIECE), || Ok(())),
        unknown(BASE)
    );
    assert_eq!(
        live.unmap((D0, DEVICE), (BASE, PIECE), &fake),
        unknown(BASE)
    );
    assert_eq!(
        live.release((D0, DEVICE), (BASE, 8 * PIECE), &fake),
        unknown(BASE)
    );
    assert_eq!(
        live.release((D0, DEVICE), (BASE, PIECE), &fake),
        unknown(BASE)
    );
    assert_eq!(fake.alive.borrow().len(), 1);
    assert_eq!(fake.log.borrow().len(), 3, "{:?}", fake.log.borrow());
}

#[test]
fn a_peer_is_granted_only_mapped_pieces_of_the_device() {
    let (live, fake) = (reserved(), fake_at(BASE));
    assert_eq!(
        live.map((D0, DEVICE), (BASE, 2 * PIECE), PIECE, &fake),
        Ok(true)
    );
    let granted = Cell::new(0);
    let grant = || {
        granted.set(granted.get() + 1);
        Ok(())
    };
    assert_eq!(live.set_access(D0, (BASE, 2 * PIECE), grant), Ok(()));
    assert_eq!(
        live.set_access(D1, (BASE, 2 * PIECE), grant),
        Err(Error::UnknownAddress {
            device: D1,
            address: BASE
        })
    );
    assert_eq!(granted.get(), 1);
}

#[test]
fn a_failed_unmap_keeps_the_piece_and_a_release_needs_everything_unmapped() {
    let (live, fake) = (reserved(), fake_at(BASE));
    assert_eq!(
        live.map((D0, DEVICE), (BASE, 2 * PIECE), PIECE, &fake),
        Ok(true)
    );
    fake.refuse_unmap.set(Some(BASE + PIECE));
    let failed = live.unmap((D0, DEVICE), (BASE, 2 * PIECE), &fake);
    assert_eq!(failed, Err(failure("unmap")));
    // The first piece went; the refused one is still mapped and recorded.
    assert_eq!(*fake.alive.borrow(), vec![2]);
    assert_eq!(live.bytes(D0), (PIECE, 8 * PIECE));
    fake.refuse_unmap.set(None);
    assert_eq!(
        live.unmap((D0, DEVICE), (BASE + PIECE, PIECE), &fake),
        Ok(())
    );
    assert_eq!(live.release((D0, DEVICE), (BASE, 8 * PIECE), &fake), Ok(()));
    assert_eq!(live.bytes(D0), (0, 0));
}

#[test]
fn clearing_a_device_gives_back_its_pieces_and_ranges_only() {
    let (live, fake) = (reserved(), fake_at(BASE));
    let other = live.reserve((D1, DEVICE), PIECE, (PIECE, PIECE), &fake_at(BASE * 2));
    assert_eq!(other, Ok(Some((BASE * 2, PIECE))));
    assert_eq!(
        live.map((D0, DEVICE), (BASE, 3 * PIECE), PIECE, &fake),
        Ok(true)
    );
    assert_eq!(
        live.map((D1, DEVICE), (BASE * 2, PIECE), PIECE, &fake),
        Ok(true)
    );
    assert_eq!(live.clear(D0, &fake), (3, 1));
    assert_eq!(*fake.alive.borrow(), vec![4]);
    assert_eq!(*fake.freed_ranges.borrow(), vec![(BASE, 8 * PIECE)]);
    assert_eq!(live.bytes(D0), (0, 0));
    assert_eq!(live.bytes(D1), (PIECE, PIECE));
}
