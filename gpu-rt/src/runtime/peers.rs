//! Which devices reach each other's memory directly: decided once when the runtime opens
//! (asked of the driver and enabled for every pair that can), then read by every copy.
//!
//! The rules the copy path follows (measured on two H100s joined by NVLink, driver 580): a
//! copy between two devices' memory goes through the backend's peer copy, which names both
//! devices and works whatever was enabled, over the link where the pair has peer access (about
//! 390 GB/s there) and staged through the host by the driver where not (about 38 GB/s). The
//! plain copy on a stream of device S may touch memory of another device only where S reaches
//! it: the driver refuses another device's stream-ordered memory otherwise.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use super::guard::with_device;
use gpu_core::backend::Backend;
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;

/// What the runtime found and did for one ordered pair of devices at open.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::PeerLink;
///
/// let mut config = HostConfig::with_devices(3);
/// config.devices[2].peer_link = false; // device 2 is not on the link
/// let rt = Runtime::new(HostBackend::new(config))?;
/// let [d0, d1, d2] = [0, 1, 2].map(DeviceId);
/// assert_eq!(rt.peer_link(d0, d1)?, &PeerLink::Enabled);
/// assert_eq!(rt.peer_link(d0, d2)?, &PeerLink::Impossible);
/// assert_eq!(rt.peer_link(d2, d2)?, &PeerLink::SameDevice);
/// // Copies between 0 and 2 still work: the driver stages them through the host.
/// let (a, c) = (rt.alloc(d0, MemoryKind::Device, 64)?, rt.alloc(d2, MemoryKind::Device, 64)?);
/// rt.wait(rt.copy(d2, c.all(), a.all(), &mut vec![])?)?;
/// assert_eq!(rt.stats().peer_copies_staged, 1);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerLink {
    /// The device reaches the peer's memory directly: copies run over the link, and kernels
    /// and copies on the device's streams may use the peer's memory.
    Enabled,
    /// The driver says the pair has no link for peer access: copies between them are staged.
    Impossible,
    /// The runtime was opened with [`super::RuntimeConfig::peer_access`] off.
    OptedOut,
    /// The driver could do it but refused to enable it (with its error): copies are staged.
    Refused(Error),
    /// A device and itself.
    SameDevice,
}

/// How a copy between two devices' memory ran.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let config = RuntimeConfig { peer_access: false, ..RuntimeConfig::default() };
/// let rt = Runtime::with_config(HostBackend::new(HostConfig::with_devices(2)), config)?;
/// let a = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// let b = rt.alloc(DeviceId(1), MemoryKind::Device, 64)?;
/// rt.wait(rt.copy(DeviceId(1), b.all(), a.all(), &mut vec![])?)?;
/// // Each copy between devices' memory is counted by its path: staged here, with no peer access.
/// let stats = rt.stats();
/// assert_eq!((stats.peer_copies_direct, stats.peer_copies_staged), (0, 1));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerPath {
    /// Over the link between the devices (peer access enabled both ways).
    Direct,
    /// Staged through the host by the driver (no peer access between them).
    Staged,
}

/// The peer links of every ordered pair of a runtime's devices, and the peer-copy counters.
#[derive(Debug)]
pub(super) struct Peers {
    count: usize,
    /// `links[device * count + peer]`.
    links: Vec<PeerLink>,
    direct_copies: AtomicU64,
    staged_copies: AtomicU64,
}

impl Peers {
    /// Asks the driver about every ordered pair of `count` devices and, where `enable`, turns
    /// peer access on for each pair that can have it (with the device current). A pair the
    /// driver refuses is recorded as [`PeerLink::Refused`] and its copies are staged: the
    /// runtime stays usable. A failed question is the open's error.
    pub(super) fn open<B: Backend>(backend: &B, count: usize, enable: bool) -> Result<Self> {
        let mut links = Vec::with_capacity(count * count);
        for d in 0..count {
            let device = DeviceId(d as u32);
            for p in 0..count {
                let peer = DeviceId(p as u32);
                let link = if device == peer {
                    PeerLink::SameDevice
                } else if !backend.peer_access_possible(device, peer)? {
                    PeerLink::Impossible
                } else if !enable {
                    PeerLink::OptedOut
                } else {
                    match with_device(backend, device, || backend.enable_peer_access(device, peer))
                    {
                        Ok(()) => PeerLink::Enabled,
                        Err(error) => PeerLink::Refused(error),
                    }
                };
                links.push(link);
            }
        }
        Ok(Self {
            count,
            links,
            direct_copies: AtomicU64::new(0),
            staged_copies: AtomicU64::new(0),
        })
    }

    /// The link from `device` to `peer` (both known devices).
    pub(super) fn link(&self, device: DeviceId, peer: DeviceId) -> Option<&PeerLink> {
        if device.index() >= self.count || peer.index() >= self.count {
            return None;
        }
        self.links.get(device.index() * self.count + peer.index())
    }

    /// Whether `device`'s streams reach `peer`'s memory (true for a device and itself).
    #[inline]
    pub(super) fn reaches(&self, device: DeviceId, peer: DeviceId) -> bool {
        matches!(
            self.link(device, peer),
            Some(PeerLink::Enabled | PeerLink::SameDevice)
        )
    }

    /// The path of a copy between memory of `a` and of `b`, counted.
    pub(super) fn count_copy(&self, a: DeviceId, b: DeviceId) -> PeerPath {
        let (path, counter) = if self.reaches(a, b) && self.reaches(b, a) {
            (PeerPath::Direct, &self.direct_copies)
        } else {
            (PeerPath::Staged, &self.staged_copies)
        };
        counter.fetch_add(1, Ordering::Relaxed);
        path
    }

    /// Turns peer access on again for every pair with `device` that had it (a reset of the
    /// device took it away); the first refusal is returned, after trying every pair.
    pub(super) fn restore<B: Backend>(&self, backend: &B, device: DeviceId) -> Result<()> {
        let mut first = Ok(());
        for other in (0..self.count).map(|p| DeviceId(p as u32)) {
            for (from, to) in [(device, other), (other, device)] {
                if from != to && self.link(from, to) == Some(&PeerLink::Enabled) {
                    let enabled =
                        with_device(backend, from, || backend.enable_peer_access(from, to));
                    first = first.and(enabled);
                }
            }
        }
        first
    }

    /// Every ordered pair with peer access enabled.
    pub(super) fn enabled_pairs(&self) -> Vec<(DeviceId, DeviceId)> {
        (0..self.links.len())
            .filter(|&i| self.links[i] == PeerLink::Enabled)
            .map(|i| {
                (
                    DeviceId((i / self.count) as u32),
                    DeviceId((i % self.count) as u32),
                )
            })
            .collect()
    }

    /// Peer copies so far: (direct, staged).
    pub(super) fn copies(&self) -> (u64, u64) {
        (
            self.direct_copies.load(Ordering::Relaxed),
            self.staged_copies.load(Ordering::Relaxed),
        )
    }
}
