//! The memory a backend allocated and the host ranges it registered, so that freeing or
//! unregistering anything else is a typed error before the driver is asked.

use alloc::collections::BTreeMap;

use hashbrown::HashMap;
use spin::Mutex;

use crate::allocator::MemoryKind;
use crate::error::{ByteRange, Error, Result};
use crate::id::DeviceId;

/// The memory a backend allocated and has not freed: each address with its device and kind.
/// [`LiveAllocations::release`] frees only what is here, so a free of an address the backend
/// never handed out (or freed already) is refused before the driver.
#[derive(Debug, Default)]
pub struct LiveAllocations {
    entries: Mutex<HashMap<usize, (DeviceId, MemoryKind)>>,
}

impl LiveAllocations {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the address of a successful allocation (`Ok(Some)`) of `kind` on `device`, and
    /// passes the outcome on.
    pub fn record(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        allocated: Result<Option<usize>>,
    ) -> Result<Option<usize>> {
        if let Ok(Some(address)) = allocated {
            self.entries.lock().insert(address, (device, kind));
        }
        allocated
    }

    /// Frees `address` with `free` (the driver's calls) if it is live memory of `kind` on
    /// `device`: taken out of the table first, so that two frees of one address cannot both
    /// reach the driver, and put back if `free` fails. Refused, with nothing changed: a null
    /// address ([`Error::NullPointer`]); an address that is not live memory of that kind on that
    /// device ([`Error::UnknownAddress`]).
    pub fn release(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        free: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if address == 0 {
            return Err(Error::NullPointer {
                what: "freed address",
            });
        }
        {
            let mut entries = self.entries.lock();
            match entries.get(&address) {
                Some(&live) if live == (device, kind) => {
                    entries.remove(&address);
                }
                _ => return Err(Error::UnknownAddress { device, address }),
            }
        }
        free().inspect_err(|_| {
            self.entries.lock().insert(address, (device, kind));
        })
    }

    /// Forgets every allocation of `device` (after a reset freed them with the device's state).
    /// Returns how many.
    pub fn forget_device(&self, device: DeviceId) -> usize {
        let mut entries = self.entries.lock();
        let before = entries.len();
        entries.retain(|_, (of, _)| *of != device);
        before - entries.len()
    }

    /// Whether `address` is live memory of `kind` on `device`.
    pub fn contains(&self, device: DeviceId, kind: MemoryKind, address: usize) -> bool {
        self.entries.lock().get(&address) == Some(&(device, kind))
    }

    /// How many allocations are live.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The host ranges a backend registered (pinned) and has not unregistered, by start.
#[derive(Debug, Default)]
pub struct LiveRegistrations {
    entries: Mutex<BTreeMap<usize, usize>>,
}

impl LiveRegistrations {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a range the driver just registered.
    pub fn record(&self, range: ByteRange) {
        self.entries.lock().insert(range.start, range.len);
    }

    /// Unregisters the range that starts at `start` with `unregister` (the driver's call):
    /// taken out of the table first and put back if `unregister` fails. Refused, with nothing
    /// changed: a pointer inside a registered range but not its start
    /// ([`Error::NotEntryStart`]), and one in no registered range ([`Error::NotLocked`]).
    pub fn release(&self, start: usize, unregister: impl FnOnce() -> Result<()>) -> Result<()> {
        let len = {
            let mut entries = self.entries.lock();
            match entries.remove(&start) {
                Some(len) => len,
                None => {
                    let containing = entries
                        .range(..start)
                        .next_back()
                        .and_then(|(&first, &len)| ByteRange::new(first, len))
                        .filter(|range| range.last() >= start);
                    return Err(match containing {
                        Some(entry) => Error::NotEntryStart { ptr: start, entry },
                        None => Error::NotLocked { ptr: start },
                    });
                }
            }
        };
        unregister().inspect_err(|_| {
            self.entries.lock().insert(start, len);
        })
    }

    /// The registered range that starts at `start`, if any.
    pub fn get(&self, start: usize) -> Option<ByteRange> {
        let len = *self.entries.lock().get(&start)?;
        ByteRange::new(start, len)
    }

    /// How many ranges are registered.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
