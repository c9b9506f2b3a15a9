//! Peer access between two devices: whether HIP can give it, and enabling it, for the device
//! and for the peer's default memory pool, undone if the pool refuses.

use gpu_core::backend::live::{enable_peer_access, none_on_code};
use gpu_core::{DeviceId, Result};

use super::{HipBackend, code};
use crate::result;
use crate::sys;

impl HipBackend {
    /// `Backend::peer_access_possible`: whether HIP says `device` can reach `peer`'s memory.
    pub(super) fn can_reach_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        let (from, to) = (self.device(device)?.ordinal, self.device(peer)?.ordinal);
        if device == peer {
            return Ok(false);
        }
        result::device::can_access_peer(self.hip, from, to)
    }

    /// `Backend::enable_peer_access`: peer access from `device` to `peer`, and to `peer`'s default
    /// pool where the backend uses it; undone if the pool refuses.
    pub(super) fn open_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        let peer_state = self.device(peer)?;
        let ordinal = self.device(device)?.ordinal;
        // Looked up first (and cached), so that undoing cannot fail for a missing symbol.
        self.hip.hipDeviceDisablePeerAccess()?;
        let _scope = self.enter(device)?;
        let hip = self.hip;
        enable_peer_access(
            || {
                let enabled = result::device::enable_peer_access(hip, peer_state.ordinal, 0);
                none_on_code(enabled, code(sys::hipErrorPeerAccessAlreadyEnabled))
                    .map(|newly| newly.is_some())
            },
            || {
                let pool = peer_state.pool()?;
                let access = sys::hipMemAccessDesc {
                    location: sys::hipMemLocation {
                        type_: sys::hipMemLocationTypeDevice,
                        id: ordinal,
                    },
                    flags: sys::hipMemAccessFlagsProtReadWrite,
                };
                // SAFETY: the peer's default pool, which lives as long as its device's state.
                Some(unsafe { result::memory::set_pool_access(hip, pool, &[access]) })
            },
            || {
                // SAFETY: `device` (current) enabled access to the peer just above, and no work
                // has used it yet.
                let _ = unsafe { result::device::disable_peer_access(hip, peer_state.ordinal) };
            },
        )
    }
}
