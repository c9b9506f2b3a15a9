//! Call counting and fault injection for the host backend: every driver call is counted by
//! kind, and a test can make the Nth call of a kind (or of any kind) fail without effect.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::{HostErrorCode, lock};
use gpu_core::error::Result;

macro_rules! call_kinds {
    ($($(#[$doc:meta])* $kind:ident => $name:literal,)*) => {
        /// A kind of driver call, as counted and as named in the host backend's errors.
        ///
        /// # Examples
        ///
        /// ```
        /// use gpu_rt::prelude::*;
        /// use gpu_rt::host::CallKind;
        ///
        /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
        /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
        /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?;
        /// let calls = rt.backend().calls();
        /// assert_eq!((calls.of(CallKind::Allocate), calls.of(CallKind::Fill)), (1, 1));
        /// assert_eq!(calls.of(CallKind::Launch), 0);
        /// # Ok::<(), Error>(())
        /// ```
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum CallKind {
            $($(#[$doc])* $kind,)*
        }

        impl CallKind {
            /// Every kind, in declaration order.
            ///
            /// # Examples
            ///
            /// ```
            /// use gpu_rt::host::CallKind;
            ///
            /// assert_eq!(CallKind::ALL.first(), Some(&CallKind::DeviceInfo));
            /// assert!(CallKind::ALL.contains(&CallKind::Launch));
            /// ```
            pub const ALL: &'static [CallKind] = &[$(CallKind::$kind,)*];

            /// The call's name, as it appears in [`gpu_core::DriverError::call`].
            ///
            /// # Examples
            ///
            /// ```
            /// use gpu_rt::prelude::*;
            /// use gpu_rt::host::CallKind;
            ///
            /// let backend = HostBackend::new(HostConfig::with_devices(1));
            /// backend.set_current_device(Some(DeviceId(0)))?;
            /// backend.fail_nth(CallKind::Allocate, 1);
            /// let failed = backend.allocate(DeviceId(0), MemoryKind::HostPinned, 64).unwrap_err();
            /// let Error::Driver(driver) = failed else { panic!("{failed}") };
            /// assert_eq!(driver.call, CallKind::Allocate.name()); // "allocate"
/// assert_eq!(driver.name, "HOST_INJECTED_FAULT");
            /// # Ok::<(), Error>(())
            /// ```
            pub const fn name(self) -> &'static str {
                match self {
                    $(CallKind::$kind => $name,)*
                }
            }
        }
    };
}

call_kinds! {
    /// `device_info`.
    DeviceInfo => "device_info",
    /// `current_device` (not part of the total: see [`CallKind::in_total`]).
    CurrentDevice => "current_device",
    /// `set_current_device` (not part of the total: see [`CallKind::in_total`]).
    SetCurrentDevice => "set_current_device",
    /// `save_current` (not part of the total: see [`CallKind::in_total`]).
    SaveCurrent => "save_current",
    /// `restore_current` (not part of the total: see [`CallKind::in_total`]).
    RestoreCurrent => "restore_current",
    /// `allocate`.
    Allocate => "allocate",
    /// `allocate_on_stream`.
    AllocateOnStream => "allocate_on_stream",
    /// `free`.
    Free => "free",
    /// `host_register`.
    HostRegister => "host_register",
    /// `host_unregister`.
    HostUnregister => "host_unregister",
    /// `host_pinned_extent`.
    HostPinnedExtent => "host_pinned_extent",
    /// `stream_create`.
    StreamCreate => "stream_create",
    /// `stream_destroy`.
    StreamDestroy => "stream_destroy",
    /// `stream_synchronize`.
    StreamSynchronize => "stream_synchronize",
    /// `event_create`.
    EventCreate => "event_create",
    /// `event_destroy`.
    EventDestroy => "event_destroy",
    /// `event_record`.
    EventRecord => "event_record",
    /// `stream_wait_event`.
    StreamWaitEvent => "stream_wait_event",
    /// `event_query`.
    EventQuery => "event_query",
    /// `event_synchronize`.
    EventSynchronize => "event_synchronize",
    /// `device_synchronize`.
    DeviceSynchronize => "device_synchronize",
    /// `reset_device`.
    ResetDevice => "reset_device",
    /// `peer_access_possible`.
    PeerAccessPossible => "peer_access_possible",
    /// `enable_peer_access`.
    EnablePeerAccess => "enable_peer_access",
    /// `copy`.
    Copy => "copy",
    /// `copy_peer`.
    CopyPeer => "copy_peer",
    /// `fill`.
    Fill => "fill",
    /// `kernel` (loading a kernel on a device).
    KernelLoad => "kernel",
    /// `kernel_static_workgroup_bytes`.
    KernelStaticWorkgroupBytes => "kernel_static_workgroup_bytes",
    /// `kernel_allow_workgroup_bytes`.
    KernelAllowWorkgroupBytes => "kernel_allow_workgroup_bytes",
    /// `launch`.
    Launch => "launch",
    /// `graph_instantiate`.
    GraphInstantiate => "graph_instantiate",
    /// `graph_launch`.
    GraphLaunch => "graph_launch",
    /// `graph_set_node`.
    GraphSetNode => "graph_set_node",
    /// `graph_destroy`.
    GraphDestroy => "graph_destroy",
}

impl CallKind {
    /// Whether the call counts towards [`CallCounts::total`] and can be hit by
    /// [`super::HostBackend::fail_nth_call`]. Getting, setting, saving and restoring the
    /// current device do not: they are thread-local bookkeeping (CUDA's cuCtxSetCurrent on a
    /// live context does not fail), and a runtime's device guard restores the device in a
    /// destructor that cannot report an error. They are still counted per kind and can be
    /// failed by kind.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::CallKind;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.set_current_device(Some(DeviceId(0)))?; // bookkeeping: not in the total
    /// assert!(!CallKind::SetCurrentDevice.in_total());
    /// assert_eq!(backend.calls().total, 0);
    /// backend.stream_destroy(backend.stream_create(DeviceId(0))?)?;
    /// assert_eq!(backend.calls().total, 2);
    /// # Ok::<(), Error>(())
    /// ```
    pub const fn in_total(self) -> bool {
        !matches!(
            self,
            CallKind::CurrentDevice
                | CallKind::SetCurrentDevice
                | CallKind::SaveCurrent
                | CallKind::RestoreCurrent
        )
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// How many driver calls were made, in all and per kind (a snapshot).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::CallKind;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// let before = rt.backend().calls(); // a snapshot
/// drop(buffer);
/// let again = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?; // served by the cache
/// assert_eq!(rt.backend().calls().since(&before).of(CallKind::Allocate), 0);
/// # drop(again);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls of every kind whose [`CallKind::in_total`] is true.
    pub total: u64,
    per_kind: Vec<u64>,
}

impl CallCounts {
    /// Calls of `kind`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::CallKind;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.set_current_device(Some(DeviceId(0)))?;
    /// backend.allocate(DeviceId(0), MemoryKind::HostPinned, 64)?;
    /// assert_eq!(backend.calls().of(CallKind::Allocate), 1);
    /// assert_eq!(backend.calls().of(CallKind::Free), 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn of(&self, kind: CallKind) -> u64 {
        self.per_kind[kind.index()]
    }

    /// The calls made since `earlier`, a snapshot taken before.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::CallKind;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?;
    /// let before = rt.backend().calls();
    /// rt.wait(rt.fill(DeviceId(0), buffer.all(), 2, &mut vec![])?)?;
    /// let second = rt.backend().calls().since(&before);
    /// // The second fill reused the pooled stream: no create, one fill, one synchronisation.
    /// assert_eq!(second.of(CallKind::StreamCreate), 0);
    /// assert_eq!((second.of(CallKind::Fill), second.of(CallKind::StreamSynchronize)), (1, 1));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn since(&self, earlier: &CallCounts) -> CallCounts {
        CallCounts {
            total: self.total - earlier.total,
            per_kind: self
                .per_kind
                .iter()
                .zip(&earlier.per_kind)
                .map(|(now, then)| now - then)
                .collect(),
        }
    }
}

/// An armed fault: fails the call whose counter reaches `at`.
#[derive(Clone, Copy, Debug)]
struct Trigger {
    /// The kind counted, or `None` for the total.
    kind: Option<CallKind>,
    /// The counter value of the call to fail.
    at: u64,
}

/// Counters of every call kind and the armed faults.
#[derive(Debug)]
pub(super) struct CallLedger {
    total: AtomicU64,
    per_kind: Vec<AtomicU64>,
    /// Fast path: no trigger armed, no lock taken.
    armed: AtomicBool,
    triggers: Mutex<Vec<Trigger>>,
    injected: AtomicU64,
}

impl CallLedger {
    pub(super) fn new() -> Self {
        Self {
            total: AtomicU64::new(0),
            per_kind: CallKind::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            armed: AtomicBool::new(false),
            triggers: Mutex::new(Vec::new()),
            injected: AtomicU64::new(0),
        }
    }

    /// Counts one call of `kind`; fails it with `HOST_INJECTED_FAULT` if a trigger names it,
    /// else returns the call's name for its errors. Called first thing by every driver call,
    /// so a failed call has done nothing.
    pub(super) fn enter(&self, kind: CallKind) -> Result<&'static str> {
        let of_kind = self.per_kind[kind.index()].fetch_add(1, Ordering::Relaxed) + 1;
        let total = if kind.in_total() {
            Some(self.total.fetch_add(1, Ordering::Relaxed) + 1)
        } else {
            None
        };
        if !self.armed.load(Ordering::Acquire) {
            return Ok(kind.name());
        }
        let mut triggers = lock(&self.triggers);
        let hit = triggers.iter().position(|t| match t.kind {
            Some(k) => k == kind && t.at == of_kind,
            None => total == Some(t.at),
        });
        let Some(hit) = hit else {
            return Ok(kind.name());
        };
        triggers.swap_remove(hit);
        self.armed.store(!triggers.is_empty(), Ordering::Release);
        self.injected.fetch_add(1, Ordering::Relaxed);
        Err(HostErrorCode::InjectedFault.error(kind.name()))
    }

    /// Makes the `n`th call of `kind` from now fail (1 = the next one; 0 also means the next).
    pub(super) fn fail_nth(&self, kind: CallKind, n: u64) {
        let now = self.per_kind[kind.index()].load(Ordering::Relaxed);
        self.arm(Trigger {
            kind: Some(kind),
            at: now + n.max(1),
        });
    }

    /// Makes the `n`th counted call of any kind from now fail (1 = the next one; 0 also means
    /// the next). Calls outside the total ([`CallKind::in_total`]) are not counted.
    pub(super) fn fail_nth_call(&self, n: u64) {
        let now = self.total.load(Ordering::Relaxed);
        self.arm(Trigger {
            kind: None,
            at: now + n.max(1),
        });
    }

    fn arm(&self, trigger: Trigger) {
        lock(&self.triggers).push(trigger);
        self.armed.store(true, Ordering::Release);
    }

    /// Disarms every trigger that has not fired; returns how many there were.
    pub(super) fn clear(&self) -> usize {
        let mut triggers = lock(&self.triggers);
        let pending = triggers.len();
        triggers.clear();
        self.armed.store(false, Ordering::Release);
        pending
    }

    /// Faults injected so far.
    pub(super) fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    pub(super) fn counts(&self) -> CallCounts {
        CallCounts {
            total: self.total.load(Ordering::Relaxed),
            per_kind: self
                .per_kind
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        }
    }
}
