//! The memory policies the GPU backends share: the checks before an allocation, driver codes
//! that answer rather than fail, how each kind is freed, and peer access with its undo.

use crate::allocator::MemoryKind;
use crate::backend::DeviceInfo;
use crate::error::{DriverError, Error, Result};
use crate::id::DeviceId;

/// The typed refusals before a [`Backend::allocate`](crate::backend::Backend::allocate) on `device`
/// described by `info`: a kind the device does not have ([`Error::KindUnsupported`]), and a size of
/// zero ([`Error::ZeroSize`]).
pub fn check_allocation(
    info: &DeviceInfo,
    device: DeviceId,
    kind: MemoryKind,
    bytes: usize,
) -> Result<()> {
    if !info.allocator.support(kind).available {
        return Err(Error::KindUnsupported { device, kind });
    }
    if bytes == 0 {
        return Err(Error::ZeroSize {
            what: "allocation size",
        });
    }
    Ok(())
}

/// The typed refusals before a
/// [`Backend::allocate_on_stream`](crate::backend::Backend::allocate_on_stream) on a stream of
/// `device`: anything but device memory, or device memory where the backend has no pool for it
/// (`stream_ordered` false) ([`Error::KindUnsupported`]), and a size of zero.
pub fn check_stream_allocation(
    device: DeviceId,
    kind: MemoryKind,
    stream_ordered: bool,
    bytes: usize,
) -> Result<()> {
    if kind != MemoryKind::Device || !stream_ordered {
        return Err(Error::KindUnsupported { device, kind });
    }
    if bytes == 0 {
        return Err(Error::ZeroSize {
            what: "allocation size",
        });
    }
    Ok(())
}

/// `Ok(Some(value))` for success; `Ok(None)` where the driver answered `code`, a code the trait
/// reports as a value rather than a failure (out of memory for an allocation, unknown memory
/// for a pointer query, "already enabled" for peer access); any other error as it is.
pub fn none_on_code<T>(result: Result<T>, code: i64) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Error::Driver(DriverError { code: answered, .. })) if answered == code => Ok(None),
        Err(other) => Err(other),
    }
}

/// How memory of one kind goes back to the driver ([`FreeStep::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeStep<S> {
    /// Device memory, in the order of this stream (CUDA's cuMemFreeAsync, HIP's hipFreeAsync).
    InStreamOrder(S),
    /// Device memory, now.
    Now,
    /// Host-visible memory (managed or pinned host), which has no stream-ordered free: the
    /// stream, if any, is synchronised first, then the memory freed.
    AfterSynchronizing {
        /// The stream whose work must finish first.
        after: Option<S>,
        /// Pinned host memory (freed by the host-allocation free) rather than managed.
        pinned: bool,
    },
}

impl<S> FreeStep<S> {
    /// The step for freeing memory of `kind` not before the work on `after` has finished.
    pub fn of(kind: MemoryKind, after: Option<S>) -> Self {
        match (kind, after) {
            (MemoryKind::Device, Some(stream)) => FreeStep::InStreamOrder(stream),
            (MemoryKind::Device, None) => FreeStep::Now,
            (kind, after) => FreeStep::AfterSynchronizing {
                after,
                pinned: kind == MemoryKind::HostPinned,
            },
        }
    }
}

/// [`Backend::enable_peer_access`](crate::backend::Backend::enable_peer_access) from its three
/// driver steps: `enable` turns on the context's (device's) access to the peer and says whether it
/// was off before (already on, by this backend or another user of the context, is no error);
/// `grant_pool` opens the peer's stream-ordered pool to the device, `None` where the backend uses
/// no pool there; if that fails, `undo` turns off the access this call turned on. `undo` cannot
/// fail (look its entry point up before calling), and a failure of the driver in it is not
/// reported: the pool's is.
pub fn enable_peer_access(
    enable: impl FnOnce() -> Result<bool>,
    grant_pool: impl FnOnce() -> Option<Result<()>>,
    undo: impl FnOnce(),
) -> Result<()> {
    let newly_enabled = enable()?;
    match grant_pool() {
        Some(Err(error)) => {
            if newly_enabled {
                undo();
            }
            Err(error)
        }
        _ => Ok(()),
    }
}
