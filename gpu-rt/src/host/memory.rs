//! The host backend's memory: device allocations backed by host memory (tracked, capacity
//! limited, freed only once no queued work holds them), the buffers a runtime carved out of
//! them (every access is checked against its buffer), and the registered host ranges.

use alloc::collections::BTreeMap;
use alloc::collections::btree_map::Entry;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::alloc::{Layout, alloc_zeroed, dealloc};

use super::HostErrorCode;
use gpu_core::allocator::MemoryKind;
use gpu_core::error::{ByteRange, Error, Result};
use gpu_core::id::DeviceId;

/// Alignment of every allocation, as CUDA guarantees for device memory.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::HOST_ALLOCATION_ALIGNMENT;
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// backend.set_current_device(Some(DeviceId(0)))?; // the backend's calls need it
/// for bytes in [1, 3, 1000] {
///     let address = backend.allocate(DeviceId(0), MemoryKind::HostPinned, bytes)?.unwrap();
///     assert_eq!(address % HOST_ALLOCATION_ALIGNMENT, 0);
///     backend.free(DeviceId(0), MemoryKind::HostPinned, address, None)?;
/// }
/// # Ok::<(), Error>(())
/// ```
pub const HOST_ALLOCATION_ALIGNMENT: usize = 256;

/// The granularity of the host backend's virtual memory model (`Backend::vm_granularity`):
/// 2 MiB, CUDA's for device memory on current GPUs.
pub const HOST_VM_GRANULARITY: usize = 2 << 20;

/// One block of host memory standing in for device memory. It is shared (`Arc`) by the
/// allocation table and by every queued work item that touches it, and returned to the host
/// allocator when the last holder lets go: a free never pulls memory from under queued work.
#[derive(Debug)]
pub(super) struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
    /// The owning device's bytes in use, given back when the block is released.
    usage: Arc<AtomicUsize>,
    /// The bytes of it counted in `usage`: all of it, or a reserved range's mapped part.
    charged: AtomicUsize,
    /// The bytes it stands for: all of it, or a reserved range's aligned part.
    bytes: ByteRange,
}

// SAFETY: a `Block` owns its memory outright; the pointer is only an address for other
// threads, which access the memory through raw pointers in queue order (as a GPU would).
unsafe impl Send for Block {}
// SAFETY: as above; `Block` has no interior state behind `&self`.
unsafe impl Sync for Block {}

impl Block {
    /// The block's bytes as a range.
    pub(super) fn range(&self) -> ByteRange {
        self.bytes
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is released exactly once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
        self.usage
            .fetch_sub(self.charged.load(Ordering::Acquire), Ordering::AcqRel);
    }
}

/// A live allocation as the table records it.
#[derive(Debug)]
pub(super) struct Allocation {
    /// The device it was allocated on.
    pub(super) device: DeviceId,
    /// Its memory kind.
    pub(super) kind: MemoryKind,
    /// Allocated in a stream's order (from the device's pool, on a GPU driver).
    pub(super) stream_ordered: bool,
    /// The memory, shared with queued work that touches it.
    pub(super) block: Arc<Block>,
    /// The buffers a runtime's allocator carved out of it (start -> length), as it said through
    /// [`gpu_core::backend::Backend::note_buffer`]. Once there is one, an access must lie in
    /// the buffer it starts in; memory between buffers is freed memory.
    buffers: BTreeMap<usize, usize>,
    /// A reserved address range (`Backend::vm_reserve`): the bytes mapped from its start.
    mapped: Option<usize>,
    /// A reserved range's mapped bytes other devices were granted (`Backend::vm_set_access`).
    grants: Vec<(DeviceId, ByteRange)>,
}

impl Allocation {
    /// The bytes that may be accessed: the block, or a reserved range's mapped part.
    fn extent(&self) -> ByteRange {
        let whole = self.block.range();
        ByteRange {
            start: whole.start,
            len: self.mapped.unwrap_or(whole.len),
        }
    }

    /// The bytes an access that starts at `address` (inside the allocation) may reach: its
    /// buffer's, or the whole allocation's if no buffer was carved out of it. An address
    /// between buffers is [`Error::UnknownAddress`]: no live buffer holds it.
    fn bounds_at(&self, address: usize) -> Result<ByteRange> {
        if self.buffers.is_empty() {
            return Ok(self.extent());
        }
        self.buffers
            .range(..=address)
            .next_back()
            .map(|(&start, &len)| ByteRange { start, len })
            .filter(|buffer| buffer.contains(&byte_at(address)))
            .ok_or(Error::UnknownAddress {
                device: self.device,
                address,
            })
    }

    /// Whether a copy on a stream of `stream_device` may touch this allocation with the plain
    /// copy call, given `reaches(stream_device, owner)`: the driver rule of
    /// [`gpu_core::backend::Backend::copy`]: another device's stream-ordered device memory only
    /// with peer access.
    /// with peer access; another device's mapped pieces of a reserved range (`range` the bytes
    /// touched) only with peer access and where they were granted to that device.
    pub(super) fn plain_copy_allowed(
        &self,
        stream_device: DeviceId,
        range: ByteRange,
        reaches: impl Fn(DeviceId, DeviceId) -> bool,
    ) -> bool {
        if self.mapped.is_some() && self.device != stream_device {
            return reaches(stream_device, self.device) && self.granted(stream_device, range);
        }
        self.device == stream_device
            || self.kind != MemoryKind::Device
            || !self.stream_ordered
            || reaches(stream_device, self.device)
    }

    /// Whether the grants to `peer` cover `range` (an empty range is covered).
    fn granted(&self, peer: DeviceId, range: ByteRange) -> bool {
        let mut grants: Vec<ByteRange> = self
            .grants
            .iter()
            .filter(|(to, _)| *to == peer)
            .map(|&(_, grant)| grant)
            .collect();
        grants.sort_by_key(|grant| grant.start);
        let (mut next, end) = (range.start, range.start + range.len);
        for grant in grants {
            if grant.start <= next && grant.start + grant.len > next {
                next = grant.start + grant.len;
            }
        }
        next >= end
    }
}

/// Memory a launch's pointer argument lies in, kept alive (allocations) or remembered
/// (registered ranges) for the launch's lifetime.
#[derive(Clone, Debug)]
pub(super) enum Region {
    /// A backend allocation, and the bytes the argument may reach in it (its buffer's).
    Allocation {
        /// Held for the launch (the memory outlives the kernel's accesses).
        _block: Arc<Block>,
        /// The buffer the argument points into, or the whole allocation.
        bounds: ByteRange,
    },
    /// A registered host range.
    Registered(ByteRange),
}

impl Region {
    pub(super) fn range(&self) -> ByteRange {
        match self {
            Region::Allocation { bounds, .. } => *bounds,
            Region::Registered(range) => *range,
        }
    }
}

/// Every allocation and registered range of one backend.
#[derive(Debug)]
pub(super) struct Memory {
    allocations: BTreeMap<usize, Allocation>,
    registered: BTreeMap<usize, usize>,
    /// Per device: bytes of live blocks (including blocks freed but still held by queued work).
    usage: Vec<Arc<AtomicUsize>>,
    capacity: Vec<usize>,
}

/// The entry of `map` (keyed by start) with the highest start at or below `range`'s last
/// byte, if it shares a byte with `range`: the only entry that can, since entries never overlap.
fn overlapping<V>(
    map: &BTreeMap<usize, V>,
    range: ByteRange,
    extent: impl Fn(usize, &V) -> ByteRange,
) -> Option<&V> {
    map.range(..=range.last())
        .next_back()
        .filter(|&(&start, v)| extent(start, v).overlaps(&range))
        .map(|(_, v)| v)
}

fn allocation_extent(_start: usize, a: &Allocation) -> ByteRange {
    a.block.range()
}

fn registered_extent(start: usize, len: &usize) -> ByteRange {
    ByteRange { start, len: *len }
}

/// The one-byte range at `ptr`.
fn byte_at(ptr: usize) -> ByteRange {
    ByteRange { start: ptr, len: 1 }
}

impl Memory {
    /// Empty memory for devices with the given capacities.
    pub(super) fn new(capacity: Vec<usize>) -> Self {
        Self {
            allocations: BTreeMap::new(),
            registered: BTreeMap::new(),
            usage: capacity
                .iter()
                .map(|_| Arc::new(AtomicUsize::new(0)))
                .collect(),
            capacity,
        }
    }

    /// Allocates `bytes` zeroed bytes of `kind` on `device` (`stream_ordered`: in a stream's
    /// order, as from a driver's pool), or `None` when the device's capacity (or the host)
    /// cannot hold them.
    pub(super) fn allocate(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        bytes: usize,
        stream_ordered: bool,
    ) -> Result<Option<usize>> {
        if bytes == 0 {
            return Err(Error::ZeroSize {
                what: "allocation size",
            });
        }
        let usage = &self.usage[device.index()];
        // The table's lock serialises allocations; releases only make room meanwhile.
        let available = self.capacity[device.index()].saturating_sub(usage.load(Ordering::Acquire));
        if bytes > available {
            return Ok(None);
        }
        let Ok(layout) = Layout::from_size_align(bytes, HOST_ALLOCATION_ALIGNMENT) else {
            return Ok(None);
        };
        let address = self.insert_block((device, kind), layout, stream_ordered, None);
        if address.is_some() {
            self.usage[device.index()].fetch_add(bytes, Ordering::AcqRel);
        }
        Ok(address)
    }

    /// Allocates zeroed host memory of `layout` and records it as an allocation of `device`
    /// and `kind` (a reserved range when `mapped` is `Some`, with nothing charged to the
    /// device's usage, else charged whole by the caller); its address, or `None` when the host
    /// has no memory for it.
    fn insert_block(
        &mut self,
        (device, kind): (DeviceId, MemoryKind),
        layout: Layout,
        stream_ordered: bool,
        mapped: Option<usize>,
    ) -> Option<usize> {
        // Zeroed memory aligned beyond what `calloc` gives is written zero page by page (a
        // reserved range's whole size at each reservation); a range of `calloc`'s, `align`
        // bytes larger, stays untouched (and unbacked) until used.
        let (held, over) = if layout.align() > HOST_ALLOCATION_ALIGNMENT {
            let held = Layout::from_size_align(layout.size().checked_add(layout.align())?, 16);
            (held.ok()?, true)
        } else {
            (layout, false)
        };
        // SAFETY: every caller's `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(held) })?;
        let address = if over {
            (ptr.as_ptr() as usize).next_multiple_of(layout.align())
        } else {
            ptr.as_ptr() as usize
        };
        let charged = if mapped.is_some() { 0 } else { layout.size() };
        let block = Arc::new(Block {
            ptr,
            layout: held,
            usage: self.usage[device.index()].clone(),
            charged: AtomicUsize::new(charged),
            bytes: ByteRange {
                start: address,
                len: layout.size(),
            },
        });
        self.allocations.insert(
            address,
            Allocation {
                device,
                kind,
                stream_ordered,
                block,
                buffers: BTreeMap::new(),
                mapped,
                grants: Vec::new(),
            },
        );
        Some(address)
    }

    /// Reserves an address range of `device` for `kind`: `wanted` bytes, or what the device's
    /// capacity allows (at least `needed`), as host memory the host commits only when touched;
    /// nothing of it mapped, nothing counted in use. `None` when not even `needed` fits.
    pub(super) fn reserve(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        (wanted, needed): (usize, usize),
    ) -> Result<Option<(usize, usize)>> {
        let size =
            wanted.min(self.capacity[device.index()] / HOST_VM_GRANULARITY * HOST_VM_GRANULARITY);
        if size < needed || size == 0 {
            return Ok(None);
        }
        let Ok(layout) = Layout::from_size_align(size, HOST_VM_GRANULARITY) else {
            return Ok(None);
        };
        Ok(self
            .insert_block((device, kind), layout, false, Some(0))
            .map(|address| (address, size)))
    }

    /// The reserved range of `device` and `kind` that `[address, address + size)` lies in, the
    /// piece granularity-aligned: its start and the allocation.
    fn reserved_range(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        (address, size): (usize, usize),
        call: &'static str,
    ) -> Result<&mut Allocation> {
        let invalid = || HostErrorCode::InvalidValue.error(call);
        if !address.is_multiple_of(HOST_VM_GRANULARITY) || !size.is_multiple_of(HOST_VM_GRANULARITY)
        {
            return Err(invalid());
        }
        let (_, allocation) = self
            .allocations
            .range_mut(..=address)
            .next_back()
            .ok_or_else(invalid)?;
        let fits = allocation.block.range().contains(&ByteRange {
            start: address,
            len: size.max(1),
        });
        if allocation.mapped.is_none()
            || allocation.device != device
            || allocation.kind != kind
            || !fits
        {
            return Err(invalid());
        }
        Ok(allocation)
    }

    /// Maps `size` bytes at `address`, the end of its reserved range's mapped part; `false`
    /// when the device's capacity cannot hold them.
    pub(super) fn map(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        (address, size): (usize, usize),
        call: &'static str,
    ) -> Result<bool> {
        let capacity = self.capacity[device.index()];
        let allocation = self.reserved_range(device, kind, (address, size), call)?;
        let end = allocation.extent().start + allocation.extent().len;
        if address != end || size == 0 {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        let usage = &allocation.block.usage;
        if size > capacity.saturating_sub(usage.load(Ordering::Acquire)) {
            return Ok(false);
        }
        usage.fetch_add(size, Ordering::AcqRel);
        allocation.block.charged.fetch_add(size, Ordering::AcqRel);
        allocation.mapped = allocation.mapped.map(|mapped| mapped + size);
        Ok(true)
    }

    /// Unmaps the last `size` bytes of a reserved range's mapped part, at `address`; a live
    /// buffer in them is `HOST_INVALID_VALUE`, changing nothing.
    pub(super) fn unmap(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        (address, size): (usize, usize),
        call: &'static str,
    ) -> Result<()> {
        let allocation = self.reserved_range(device, kind, (address, size), call)?;
        let piece = ByteRange {
            start: address,
            len: size,
        };
        let buffer_inside = overlapping(&allocation.buffers, piece, registered_extent).is_some();
        let end = allocation.extent().start + allocation.extent().len;
        if address + size != end || size == 0 || buffer_inside {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        allocation.block.usage.fetch_sub(size, Ordering::AcqRel);
        allocation.block.charged.fetch_sub(size, Ordering::AcqRel);
        allocation.mapped = allocation.mapped.map(|mapped| mapped - size);
        // The unmapped piece's grants go with it.
        for (_, grant) in &mut allocation.grants {
            grant.len = grant.len.min(address.saturating_sub(grant.start));
        }
        allocation.grants.retain(|(_, grant)| grant.len > 0);
        Ok(())
    }

    /// Grants `peer` the mapped `[address, address + size)` of a reserved range of `device`
    /// (`HOST_INVALID_VALUE` where it is not mapped there throughout).
    pub(super) fn grant(
        &mut self,
        device: DeviceId,
        (address, size): (usize, usize),
        peer: DeviceId,
        call: &'static str,
    ) -> Result<()> {
        let invalid = || HostErrorCode::InvalidValue.error(call);
        let (_, allocation) = self
            .allocations
            .range_mut(..=address)
            .next_back()
            .ok_or_else(invalid)?;
        let range = ByteRange::new(address, size).ok_or_else(invalid)?;
        if allocation.mapped.is_none()
            || allocation.device != device
            || !allocation.extent().contains(&range)
        {
            return Err(invalid());
        }
        allocation.grants.push((peer, range));
        Ok(())
    }

    /// Releases the reserved range at `address` of `size` bytes, nothing of it mapped.
    pub(super) fn release_range(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        (address, size): (usize, usize),
        call: &'static str,
    ) -> Result<()> {
        match self.allocations.get(&address) {
            Some(a)
                if a.device == device
                    && a.kind == kind
                    && a.mapped == Some(0)
                    && a.block.range().len == size =>
            {
                self.allocations.remove(&address);
                Ok(())
            }
            _ => Err(HostErrorCode::InvalidValue.error(call)),
        }
    }

    /// Takes the allocation at `address` out of the table, after checking it is a live
    /// allocation of `device` and `kind`. The caller drops the block (free now) or hands it to
    /// a stream (free after the stream's queued work).
    pub(super) fn release(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        call: &'static str,
    ) -> Result<Arc<Block>> {
        match self.allocations.entry(address) {
            Entry::Occupied(a) if a.get().device == device && a.get().kind == kind => {
                Ok(a.remove().block)
            }
            _ => Err(HostErrorCode::InvalidValue.error(call)),
        }
    }

    /// The allocation `range` lies in, or `None` if it touches no allocation (caller's host
    /// memory). A range that runs out of an allocation is an error, as a driver's bounds check;
    /// one that runs out of the buffer it starts in is [`Error::OutOfBounds`] (its offset in
    /// the buffer, its length and the buffer's size), and one that starts between buffers is
    /// [`Error::UnknownAddress`] (freed memory).
    pub(super) fn holder(
        &self,
        range: ByteRange,
        call: &'static str,
    ) -> Result<Option<&Allocation>> {
        match overlapping(&self.allocations, range, allocation_extent) {
            None => Ok(None),
            Some(a) if a.extent().contains(&range) => {
                let bounds = a.bounds_at(range.start)?;
                if bounds.contains(&range) {
                    Ok(Some(a))
                } else {
                    Err(Error::OutOfBounds {
                        offset: range.start - bounds.start,
                        len: range.len,
                        size: bounds.len,
                    })
                }
            }
            Some(_) => Err(HostErrorCode::InvalidValue.error(call)),
        }
    }

    /// The allocation or registered range `ptr` lies in, if any, bounded by the buffer `ptr`
    /// points into (`None` between buffers: freed memory).
    pub(super) fn region_of(&self, ptr: usize) -> Option<Region> {
        if let Some(a) = overlapping(&self.allocations, byte_at(ptr), allocation_extent) {
            return a.bounds_at(ptr).ok().map(|bounds| Region::Allocation {
                _block: a.block.clone(),
                bounds,
            });
        }
        self.registered_containing(ptr).map(Region::Registered)
    }

    /// Records that a runtime carved the buffer `range` out of an allocation (`live`), or
    /// gave it back. A range outside every allocation, a live buffer overlapping another, or
    /// the release of a buffer not recorded is `HOST_INVALID_VALUE`, changing nothing.
    pub(super) fn note_buffer(
        &mut self,
        range: ByteRange,
        live: bool,
        call: &'static str,
    ) -> Result<()> {
        let invalid = || HostErrorCode::InvalidValue.error(call);
        let start = self
            .allocations
            .range(..=range.start)
            .next_back()
            .map(|(&start, _)| start)
            .ok_or_else(invalid)?;
        let allocation = self.allocations.get_mut(&start).ok_or_else(invalid)?;
        if !allocation.extent().contains(&range) {
            return Err(invalid());
        }
        let buffers = &mut allocation.buffers;
        if !live {
            return match buffers.get(&range.start) {
                Some(&len) if len == range.len => {
                    buffers.remove(&range.start);
                    Ok(())
                }
                _ => Err(invalid()),
            };
        }
        if overlapping(buffers, range, registered_extent).is_some() {
            return Err(invalid());
        }
        buffers.insert(range.start, range.len);
        Ok(())
    }

    fn registered_containing(&self, ptr: usize) -> Option<ByteRange> {
        self.registered
            .range(..=ptr)
            .next_back()
            .map(|(&start, len)| registered_extent(start, len))
            .filter(|r| r.last() >= ptr)
    }

    /// Records `range` as pinned. Overlapping a registered range or a host-pinned allocation
    /// is `HOST_MEMORY_ALREADY_REGISTERED`; overlapping device or managed memory is
    /// `HOST_INVALID_VALUE` (it is not the caller's host memory).
    pub(super) fn register(&mut self, range: ByteRange, call: &'static str) -> Result<()> {
        if overlapping(&self.registered, range, registered_extent).is_some() {
            return Err(HostErrorCode::MemoryAlreadyRegistered.error(call));
        }
        if let Some(a) = overlapping(&self.allocations, range, allocation_extent) {
            return Err(if a.kind == MemoryKind::HostPinned {
                HostErrorCode::MemoryAlreadyRegistered.error(call)
            } else {
                HostErrorCode::InvalidValue.error(call)
            });
        }
        self.registered.insert(range.start, range.len);
        Ok(())
    }

    /// Forgets the registered range that starts at `start`.
    pub(super) fn unregister(&mut self, start: usize, call: &'static str) -> Result<()> {
        if self.registered.remove(&start).is_some() {
            Ok(())
        } else if self.registered_containing(start).is_some() {
            Err(HostErrorCode::InvalidValue.error(call))
        } else {
            Err(HostErrorCode::MemoryNotRegistered.error(call))
        }
    }

    /// The pinned extent `ptr` lies in: a registered range or a host-pinned allocation.
    pub(super) fn pinned_extent(&self, ptr: usize) -> Option<ByteRange> {
        self.registered_containing(ptr).or_else(|| {
            overlapping(&self.allocations, byte_at(ptr), allocation_extent)
                .filter(|a| a.kind == MemoryKind::HostPinned)
                .map(Allocation::extent)
        })
    }

    /// Live allocations and their bytes.
    pub(super) fn allocation_totals(&self) -> (usize, usize) {
        let bytes = self.allocations.values().map(|a| a.block.range().len).sum();
        (self.allocations.len(), bytes)
    }

    /// Registered ranges and their bytes.
    pub(super) fn registered_totals(&self) -> (usize, usize) {
        (self.registered.len(), self.registered.values().sum())
    }

    /// Bytes of `device`'s blocks not yet returned to the host (live, or freed and still held
    /// by queued work).
    pub(super) fn device_usage(&self, device: DeviceId) -> usize {
        self.usage[device.index()].load(Ordering::Acquire)
    }

    /// Drops every allocation of `device` (a reset): each block goes back to the host once
    /// the queued work holding it lets go.
    pub(super) fn release_device(&mut self, device: DeviceId) {
        self.allocations.retain(|_, a| a.device != device);
        for allocation in self.allocations.values_mut() {
            allocation.grants.retain(|&(peer, _)| peer != device);
        }
    }

    /// Drops every allocation and registration (the backend is going away).
    pub(super) fn clear(&mut self) {
        self.allocations.clear();
        self.registered.clear();
    }
}
