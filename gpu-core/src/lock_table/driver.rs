//! What the table asks of a driver ([`PinDriver`]: pin, unpin, "who pinned this?"), and the
//! second phase of a lock, which asks it about a new range without any table lock held.

use super::outcome::LockStats;
use crate::error::{ByteRange, Result};

/// What the lock table needs from a driver. Implemented by each backend (and by test fakes).
///
/// Every method either succeeds completely or changes nothing in the driver.
pub trait PinDriver {
    /// Pins `range` for every device of the backend (CUDA: cuMemHostRegister with PORTABLE;
    /// HSA: hsa_amd_memory_lock to all GPU agents) and writes into `device_ptrs[d]` the
    /// address device `d` uses for `range.start`. On error nothing stays pinned.
    fn pin(&mut self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()>;

    /// Unpins the range that a successful [`PinDriver::pin`] started at `start`.
    fn unpin(&mut self, start: usize) -> Result<()>;

    /// If `ptr` lies in host memory pinned by someone other than this table, returns the
    /// extent of that pinned allocation and writes into `device_ptrs[d]` the address device
    /// `d` uses for the extent's start (CUDA: cuPointerGetAttribute RANGE_START_ADDR and
    /// RANGE_SIZE; HSA: hsa_amd_pointer_info). Returns `None` for unpinned memory.
    fn pinned_extent(&mut self, ptr: usize, device_ptrs: &mut [usize])
    -> Result<Option<ByteRange>>;
}

/// What the driver said about a new range (phase two of a lock).
pub(crate) struct Pinned {
    pub(super) extent: ByteRange,
    pub(super) external: bool,
}

/// Phase two of a lock of a new range: asks the driver whether someone else pinned it, and
/// pins it otherwise. Runs without any table lock held; `device_ptrs` receives the addresses.
pub(crate) fn pin_new<D: PinDriver + ?Sized>(
    driver: &mut D,
    counts: &mut LockStats,
    range: ByteRange,
    device_ptrs: &mut [usize],
) -> Result<Pinned> {
    counts.driver_queries += 1;
    if let Some(extent) = driver.pinned_extent(range.start, device_ptrs)? {
        return Ok(Pinned {
            extent,
            external: true,
        });
    }
    counts.driver_pins += 1;
    driver.pin(range, device_ptrs)?;
    Ok(Pinned {
        extent: range,
        external: false,
    })
}
