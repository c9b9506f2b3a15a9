//! The host backend's virtual memory: a reservation is one zeroed host block (address space
//! the OS backs only when touched) whose pieces are mapped and unmapped in granules.
//!
//! Mapped pieces count against the device's capacity as allocations do; an access (copy, fill,
//! kernel argument) to bytes of a reservation that are not mapped is refused as one outside
//! every buffer. A reservation is capped at the device's capacity (rounded up to the
//! granularity): the host stands it in with host address space of its full size.

use alloc::collections::BTreeMap;
use core::sync::atomic::Ordering;

use super::HostErrorCode;
use super::memory::{Allocation, Memory, mapped_run};
use gpu_core::allocator::MemoryKind;
use gpu_core::error::{ByteRange, Result};
use gpu_core::id::DeviceId;

impl Memory {
    /// Reserves `bytes` (a multiple of `granularity`) of `kind` on `device`, aligned to the
    /// granularity; `None` when larger than the device's capacity or the host has no room.
    pub(super) fn reserve(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        bytes: usize,
        granularity: usize,
        call: &'static str,
    ) -> Result<Option<usize>> {
        if bytes == 0 || !bytes.is_multiple_of(granularity) {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        if bytes > self.capacity[device.index()].next_multiple_of(granularity) {
            return Ok(None);
        }
        Ok(
            self.insert_block(device, bytes, granularity, 0, |block, span| Allocation {
                device,
                kind,
                // Like pool memory: another device reaches it only with peer access.
                stream_ordered: true,
                block,
                span,
                buffers: BTreeMap::new(),
                mapped: Some(BTreeMap::new()),
            }),
        )
    }

    /// The reservation of `device` and `kind` holding all of `range`, with its pieces.
    fn reservation_of(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        range: ByteRange,
        granularity: usize,
        call: &'static str,
    ) -> Result<&mut Allocation> {
        let aligned = range.len > 0
            && range.start.is_multiple_of(granularity)
            && range.len.is_multiple_of(granularity);
        self.allocations
            .range_mut(..=range.start)
            .next_back()
            .map(|(_, a)| a)
            .filter(|a| {
                aligned
                    && a.device == device
                    && a.kind == kind
                    && a.mapped.is_some()
                    && a.span.contains(&range)
            })
            .ok_or_else(|| HostErrorCode::InvalidValue.error(call))
    }

    /// Maps `range` (granule-aligned, inside one reservation, over no mapped byte), charging
    /// the device; `false` when its capacity has no room.
    pub(super) fn map(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        range: ByteRange,
        granularity: usize,
        call: &'static str,
    ) -> Result<bool> {
        let available = self.available(device);
        let usage = self.usage[device.index()].clone();
        let a = self.reservation_of(device, kind, range, granularity, call)?;
        let pieces = a
            .mapped
            .as_mut()
            .ok_or_else(|| HostErrorCode::InvalidValue.error(call))?;
        let below = pieces.range(..range.start).next_back();
        if below.is_some_and(|(&start, &len)| start + len > range.start)
            || pieces
                .range(range.start..range.start + range.len)
                .next()
                .is_some()
        {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        if range.len > available {
            return Ok(false);
        }
        pieces.insert(range.start, range.len);
        a.block.charged.fetch_add(range.len, Ordering::AcqRel);
        usage.fetch_add(range.len, Ordering::AcqRel);
        Ok(true)
    }

    /// Unmaps `range` (granule-aligned, all mapped, no buffer in it), uncharging the device.
    pub(super) fn unmap(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        range: ByteRange,
        granularity: usize,
        call: &'static str,
    ) -> Result<()> {
        let usage = self.usage[device.index()].clone();
        let a = self.reservation_of(device, kind, range, granularity, call)?;
        let live = a
            .buffers
            .range(..range.start + range.len)
            .next_back()
            .is_some_and(|(&start, &len)| start + len > range.start);
        let pieces = a
            .mapped
            .as_mut()
            .ok_or_else(|| HostErrorCode::InvalidValue.error(call))?;
        if live || mapped_run(pieces, range.start).is_none_or(|run| !run.contains(&range)) {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        // Cut the pieces at both ends, then drop those inside.
        for cut in [range.start, range.start + range.len] {
            if let Some((&start, &len)) = pieces.range(..cut).next_back()
                && start + len > cut
            {
                pieces.insert(start, cut - start);
                pieces.insert(cut, start + len - cut);
            }
        }
        pieces.retain(|&start, _| start < range.start || start >= range.start + range.len);
        a.block.charged.fetch_sub(range.len, Ordering::AcqRel);
        usage.fetch_sub(range.len, Ordering::AcqRel);
        Ok(())
    }

    /// Releases the reservation at `address` of exactly `bytes`, with nothing mapped in it.
    pub(super) fn release_reservation(
        &mut self,
        device: DeviceId,
        kind: MemoryKind,
        range: ByteRange,
        call: &'static str,
    ) -> Result<()> {
        let empty = self.allocations.get(&range.start).is_some_and(|a| {
            a.device == device
                && a.kind == kind
                && a.span == range
                && a.mapped.as_ref().is_some_and(BTreeMap::is_empty)
        });
        if !empty {
            return Err(HostErrorCode::InvalidValue.error(call));
        }
        self.allocations.remove(&range.start);
        Ok(())
    }
}
