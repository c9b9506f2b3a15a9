//! How a host backend is built (its simulated devices: memory, capabilities, workgroup
//! limits, peer link) and what it counts for leak checks.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use gpu_core::allocator::{AllocatorCapabilities, KindSupport};
use gpu_core::workgroup::WorkgroupLimits;

/// One simulated device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDeviceConfig {
    /// The name [`gpu_core::backend::Backend::device_info`] reports.
    pub name: String,
    /// Bytes `allocate` may hand out on this device, all kinds together; beyond it
    /// `allocate` reports out of memory (`Ok(None)`).
    pub memory_capacity: usize,
    /// Which memory kinds exist and which have a stream-ordered form.
    pub allocator: AllocatorCapabilities,
    /// Workgroup memory limits, enforced by `launch` and `kernel_allow_workgroup_bytes`.
    pub workgroup: WorkgroupLimits,
    /// On the link that joins devices for peer access (NVLink on the GPU box): peer access is
    /// possible between two devices that both have it. True by default.
    pub peer_link: bool,
}

impl HostDeviceConfig {
    /// An NVIDIA H200's workgroup memory limits: 48 KiB by default, 227 KiB after opt-in,
    /// 228 KiB per multiprocessor, 1 KiB reserved per block.
    pub const H200_WORKGROUP: WorkgroupLimits = WorkgroupLimits {
        default_per_block: 48 * 1024,
        max_per_block_opt_in: 232_448,
        per_multiprocessor: 233_472,
        reserved_per_block: 1024,
    };

    /// Every kind, each with a stream-ordered form, and host registration (a CUDA 13 driver).
    pub const ALL_CAPABILITIES: AllocatorCapabilities = AllocatorCapabilities {
        device: KindSupport::STREAM_ORDERED,
        managed: KindSupport::STREAM_ORDERED,
        host_pinned: KindSupport::STREAM_ORDERED,
        host_register: true,
    };
}

impl Default for HostDeviceConfig {
    /// A device named "host device" with 1 GiB, every capability, and an H200's limits.
    fn default() -> Self {
        Self {
            name: String::from("host device"),
            memory_capacity: 1 << 30,
            allocator: Self::ALL_CAPABILITIES,
            workgroup: Self::H200_WORKGROUP,
            peer_link: true,
        }
    }
}

/// How to build a [`super::HostBackend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// The devices, numbered in this order.
    pub devices: Vec<HostDeviceConfig>,
    /// How many finished work items [`super::HostBackend::work_log`] keeps (the oldest go first).
    pub work_log_capacity: usize,
}

impl HostConfig {
    /// `count` default devices, named "host device 0", "host device 1", ...
    pub fn with_devices(count: usize) -> Self {
        Self {
            devices: (0..count)
                .map(|i| HostDeviceConfig {
                    name: format!("host device {i}"),
                    ..HostDeviceConfig::default()
                })
                .collect(),
            work_log_capacity: 1 << 16,
        }
    }
}

impl Default for HostConfig {
    /// Two default devices.
    fn default() -> Self {
        Self::with_devices(2)
    }
}

/// Live objects of a host backend, for leak checks (all zero after a clean shutdown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Streams created and not destroyed.
    pub streams: usize,
    /// Destroyed streams whose worker thread has not been joined yet.
    pub draining_streams: usize,
    /// Events created and not destroyed.
    pub events: usize,
    /// Allocations not freed.
    pub allocations: usize,
    /// Bytes of those allocations.
    pub allocated_bytes: usize,
    /// Registered host ranges.
    pub registered_ranges: usize,
    /// Bytes of those ranges.
    pub registered_bytes: usize,
    /// Faults injected so far.
    pub faults_injected: u64,
}
