//! The virtual memory a driver backend reserved and mapped (the allocator's growable segments):
//! each reserved range, and each mapped piece with the handle of its physical memory.
//!
//! CUDA and HIP map physical memory into a reserved range the same way: create a piece of
//! physical memory (`cuMemCreate`, `hipMemCreate`), map it (`cuMemMap`), grant the device access
//! (`cuMemSetAccess`); unmapping is the reverse, and the handle must be kept from the map to
//! the release. [`LiveMappings`] is that bookkeeping, the backend supplying the driver's calls
//! ([`VmCalls`]). A range is mapped in pieces of the granularity, one physical allocation each,
//! because the allocator unmaps the tail of what it mapped in one call and the drivers unmap
//! only whole mappings: a piece is the unit both can agree on. Every range and piece is checked
//! before the driver sees it (a foreign, misaligned, unmapped or still-mapped range is a typed
//! error), a failed or out-of-memory map leaves nothing mapped, and a reset or teardown gets
//! back everything still mapped or reserved ([`LiveMappings::clear`]).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use spin::Mutex;

use super::memory::none_on_code;
use crate::allocator::MemoryKind;
use crate::error::{Error, Result};
use crate::id::DeviceId;

/// The driver calls behind one device's mappings, made with that device current.
pub trait VmCalls {
    /// The driver's handle of a piece of physical memory.
    type Handle: Copy;

    /// What keeps the device current for the calls (a scope that puts the caller's back).
    type Current;

    /// The driver's code for out of memory (of address space for a reservation, of physical
    /// memory for a creation): an answer, `None`, rather than a failure.
    const OUT_OF_MEMORY: i64;

    /// Makes the device current until the value drops; asked once a call's checks have
    /// passed, so a refused range never reaches the driver, not even to switch devices.
    fn make_current(&self) -> Result<Self::Current>;

    /// Reserves `size` bytes of address space aligned to `alignment`: its start.
    fn reserve(&self, size: usize, alignment: usize) -> Result<usize>;

    /// Creates `size` bytes of physical memory on the device.
    fn create(&self, size: usize) -> Result<Self::Handle>;

    /// Maps `handle` (of `size` bytes) at `address`, inside a reserved range.
    fn map(&self, address: usize, size: usize, handle: Self::Handle) -> Result<()>;

    /// Lets the device itself read and write the mapped `[address, address + size)`.
    fn grant(&self, address: usize, size: usize) -> Result<()>;

    /// Unmaps the piece `[address, address + size)`.
    fn unmap(&self, address: usize, size: usize) -> Result<()>;

    /// Releases a piece's physical memory (unmapped, or never mapped).
    fn release(&self, handle: Self::Handle) -> Result<()>;

    /// Frees a reserved range, nothing of it mapped.
    fn free_range(&self, address: usize, size: usize) -> Result<()>;
}

/// A reserved range: its size, device and kind.
#[derive(Clone, Copy, Debug)]
struct Reserved {
    size: usize,
    device: DeviceId,
    kind: MemoryKind,
}

/// A mapped piece: its size, device and physical memory.
#[derive(Clone, Copy, Debug)]
struct Piece<H> {
    size: usize,
    device: DeviceId,
    handle: H,
}

/// The ranges and pieces, by start address.
#[derive(Debug)]
struct Ranges<H> {
    reserved: BTreeMap<usize, Reserved>,
    pieces: BTreeMap<usize, Piece<H>>,
}

/// A backend's reserved ranges and mapped pieces, each piece with its physical memory's handle
/// `H`. One lock guards both and is held across a map's or an unmap's driver calls, so two
/// calls never map or unmap the same piece at once (these calls are rare: a segment grows or
/// shrinks).
#[derive(Debug)]
pub struct LiveMappings<H> {
    ranges: Mutex<Ranges<H>>,
}

impl<H> Default for LiveMappings<H> {
    fn default() -> Self {
        Self {
            ranges: Mutex::new(Ranges {
                reserved: BTreeMap::new(),
                pieces: BTreeMap::new(),
            }),
        }
    }
}

/// The granularity a `vm_*` call on `device` for `kind` works in: `granularity`, the device's
/// for device memory (where it has virtual memory management), for device memory only; any
/// other kind, or a device without it, is [`Error::KindUnsupported`].
pub fn vm_granularity_of(
    device: DeviceId,
    kind: MemoryKind,
    granularity: Option<usize>,
) -> Result<usize> {
    granularity
        .filter(|_| kind == MemoryKind::Device)
        .ok_or(Error::KindUnsupported { device, kind })
}

impl<H: Copy> LiveMappings<H> {
    /// Nothing reserved or mapped.
    pub fn new() -> Self {
        Self::default()
    }

    /// [`Backend::vm_reserve`](crate::backend::Backend::vm_reserve): reserves `wanted` bytes
    /// aligned to `granularity`, or, where the driver has no room for them, `needed`, and
    /// records the range got; `Ok(None)` where it has no room for `needed` either. A size of
    /// zero is [`Error::ZeroSize`], one not a multiple of `granularity`
    /// [`Error::MisalignedSegment`], both before the driver.
    pub fn reserve<C: VmCalls<Handle = H>>(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        granularity: usize,
        (wanted, needed): (usize, usize),
        calls: &C,
    ) -> Result<Option<(usize, usize)>> {
        if wanted == 0 || needed == 0 {
            return Err(Error::ZeroSize {
                what: "reserved range",
            });
        }
        if let Some(size) = [wanted, needed]
            .into_iter()
            .find(|size| !size.is_multiple_of(granularity))
        {
            return Err(Error::MisalignedSegment {
                address: size,
                required: granularity,
            });
        }
        let _current = calls.make_current()?;
        let try_reserve = |size| {
            let start = none_on_code(calls.reserve(size, granularity), C::OUT_OF_MEMORY)?;
            Ok::<_, Error>(start.map(|start| (start, size)))
        };
        let mut got = try_reserve(wanted.max(needed))?;
        if got.is_none() && needed < wanted {
            got = try_reserve(needed)?;
        }
        if let Some((start, size)) = got {
            let range = Reserved { size, device, kind };
            self.ranges.lock().reserved.insert(start, range);
        }
        Ok(got)
    }

    /// [`Backend::vm_map`](crate::backend::Backend::vm_map): maps `[address, address + size)`
    /// in pieces of `piece` bytes, each its own physical memory, then grants the device access
    /// to the whole. `Ok(false)` when the device is out of memory. Refused before the driver:
    /// a size of zero ([`Error::ZeroSize`]); an address or size not a multiple of `piece`
    /// ([`Error::MisalignedSegment`]); a range not inside one range reserved for `device` and
    /// `kind`, or overlapping a mapped piece ([`Error::UnknownAddress`]). On out of memory or
    /// a failure, the pieces mapped so far are unmapped and released again: nothing stays.
    pub fn map<C: VmCalls<Handle = H>>(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        (address, size): (usize, usize),
        piece: usize,
        calls: &C,
    ) -> Result<bool> {
        if size == 0 {
            return Err(Error::ZeroSize { what: "mapping" });
        }
        let misaligned = [address, size]
            .into_iter()
            .find(|v| !v.is_multiple_of(piece));
        if let Some(value) = misaligned {
            return Err(Error::MisalignedSegment {
                address: value,
                required: piece,
            });
        }
        let mut ranges = self.ranges.lock();
        let end = address.checked_add(size).ok_or(Error::AddressOverflow {
            ptr: address,
            len: size,
        })?;
        let inside =
            ranges
                .reserved
                .range(..=address)
                .next_back()
                .is_some_and(|(&start, range)| {
                    range.device == device && range.kind == kind && start + range.size >= end
                });
        let overlaps = ranges
            .pieces
            .range(..end)
            .next_back()
            .is_some_and(|(&start, piece)| start + piece.size > address);
        if !inside || overlaps {
            return Err(Error::UnknownAddress { device, address });
        }
        let _current = calls.make_current()?;
        let mut mapped = Vec::new();
        let outcome = (|| {
            for start in (address..end).step_by(piece) {
                let created = none_on_code(calls.create(piece), C::OUT_OF_MEMORY)?;
                let Some(handle) = created else {
                    return Ok(false);
                };
                if let Err(error) = calls.map(start, piece, handle) {
                    let _ = calls.release(handle);
                    return Err(error);
                }
                mapped.push((start, handle));
            }
            calls.grant(address, size).map(|()| true)
        })();
        if matches!(outcome, Ok(true)) {
            for (start, handle) in mapped {
                let entry = Piece {
                    size: piece,
                    device,
                    handle,
                };
                ranges.pieces.insert(start, entry);
            }
        } else {
            for (start, handle) in mapped.into_iter().rev() {
                let _ = calls.unmap(start, piece);
                let _ = calls.release(handle);
            }
        }
        outcome
    }

    /// [`Backend::vm_set_access`](crate::backend::Backend::vm_set_access): `grant` gives the
    /// peer access to `[address, address + size)`, which must be mapped on `device` throughout
    /// (else [`Error::UnknownAddress`], before the driver).
    pub fn set_access(
        &self,
        device: DeviceId,
        (address, size): (usize, usize),
        grant: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let ranges = self.ranges.lock();
        covering_pieces(&ranges, device, address, size)?;
        grant()
    }

    /// [`Backend::vm_unmap`](crate::backend::Backend::vm_unmap) after the stream's work is done:
    /// unmaps and releases each piece of `[address, address + size)`, which must be whole
    /// pieces mapped on `device` in a range reserved for `kind` (else
    /// [`Error::UnknownAddress`], before the driver). A piece the driver fails to unmap stays
    /// recorded (a reset or teardown tries it again), and its failure is the call's.
    pub fn unmap<C: VmCalls<Handle = H>>(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        (address, size): (usize, usize),
        calls: &C,
    ) -> Result<()> {
        let mut ranges = self.ranges.lock();
        let of_kind = ranges
            .reserved
            .range(..=address)
            .next_back()
            .is_some_and(|(_, range)| range.kind == kind);
        if !of_kind {
            return Err(Error::UnknownAddress { device, address });
        }
        let starts = covering_pieces(&ranges, device, address, size)?;
        let _current = calls.make_current()?;
        for start in starts {
            let piece = ranges.pieces[&start];
            calls.unmap(start, piece.size)?;
            ranges.pieces.remove(&start);
            calls.release(piece.handle)?;
        }
        Ok(())
    }

    /// [`Backend::vm_release`](crate::backend::Backend::vm_release): frees the reserved range
    /// at `address` of `size` bytes, where it is a range reserved for `device` and `kind` with
    /// nothing of it mapped (else [`Error::UnknownAddress`], before the driver). A range the
    /// driver fails to free stays recorded.
    pub fn release<C: VmCalls<Handle = H>>(
        &self,
        (device, kind): (DeviceId, MemoryKind),
        (address, size): (usize, usize),
        calls: &C,
    ) -> Result<()> {
        let mut ranges = self.ranges.lock();
        let known = ranges.reserved.get(&address).is_some_and(|range| {
            range.device == device && range.kind == kind && range.size == size
        });
        // A known range does not run past the top of the address space.
        let mapped = known
            && ranges
                .pieces
                .range(address..address + size)
                .next()
                .is_some();
        if !known || mapped {
            return Err(Error::UnknownAddress { device, address });
        }
        let _current = calls.make_current()?;
        calls.free_range(address, size)?;
        ranges.reserved.remove(&address);
        Ok(())
    }

    /// Gives back everything of `device` still mapped or reserved (before a reset, or at
    /// teardown): each piece unmapped and released, then each range freed, through `calls`
    /// (the device current). Nothing of the device stays recorded; driver failures are not
    /// reported (the memory is gone with the device's state either way). Returns how many
    /// pieces and ranges there were.
    pub fn clear<C: VmCalls<Handle = H>>(&self, device: DeviceId, calls: &C) -> (usize, usize) {
        let mut ranges = self.ranges.lock();
        let _current = calls.make_current();
        let pieces: Vec<(usize, Piece<H>)> = ranges
            .pieces
            .iter()
            .filter(|(_, piece)| piece.device == device)
            .map(|(&start, &piece)| (start, piece))
            .collect();
        for &(start, piece) in &pieces {
            let _ = calls.unmap(start, piece.size);
            let _ = calls.release(piece.handle);
            ranges.pieces.remove(&start);
        }
        let reserved: Vec<(usize, usize)> = ranges
            .reserved
            .iter()
            .filter(|(_, range)| range.device == device)
            .map(|(&start, range)| (start, range.size))
            .collect();
        for &(start, size) in &reserved {
            let _ = calls.free_range(start, size);
            ranges.reserved.remove(&start);
        }
        (pieces.len(), reserved.len())
    }

    /// Bytes mapped and bytes reserved on `device`.
    pub fn bytes(&self, device: DeviceId) -> (usize, usize) {
        let ranges = self.ranges.lock();
        let mapped = ranges.pieces.values().filter(|p| p.device == device);
        let reserved = ranges.reserved.values().filter(|r| r.device == device);
        (
            mapped.map(|piece| piece.size).sum(),
            reserved.map(|range| range.size).sum(),
        )
    }
}

/// The starts of the pieces that make up `[address, address + size)` exactly, all mapped on
/// `device`; [`Error::UnknownAddress`] where the range is empty, has a gap, or cuts a piece.
fn covering_pieces<H>(
    ranges: &Ranges<H>,
    device: DeviceId,
    address: usize,
    size: usize,
) -> Result<Vec<usize>> {
    let unknown = Error::UnknownAddress { device, address };
    let end = address.checked_add(size).ok_or(unknown.clone())?;
    let mut next = address;
    let mut starts = Vec::new();
    for (&start, piece) in ranges.pieces.range(address..end) {
        if start != next || piece.device != device {
            return Err(unknown);
        }
        next = start + piece.size;
        starts.push(start);
    }
    if size == 0 || next != end {
        return Err(unknown);
    }
    Ok(starts)
}

#[cfg(test)]
mod tests;
