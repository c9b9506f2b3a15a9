//! How a host backend is built (its simulated devices: memory, capabilities, workgroup
//! limits, peer link) and what it counts for leak checks.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use gpu_core::allocator::{AllocatorCapabilities, KindSupport};
use gpu_core::workgroup::WorkgroupLimits;

/// One simulated device.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::HostDeviceConfig;
///
/// let mut config = HostConfig::with_devices(2);
/// config.devices[1] = HostDeviceConfig {
///     name: "small device".into(),
///     memory_capacity: 1 << 20,
///     ..HostDeviceConfig::default()
/// };
/// let rt = Runtime::new(HostBackend::new(config))?;
/// assert_eq!(rt.device_info(DeviceId(1))?.name, "small device");
/// let too_big = rt.alloc(DeviceId(1), MemoryKind::Device, 2 << 20);
/// assert!(matches!(too_big, Err(Error::OutOfMemory { .. })));
/// # Ok::<(), Error>(())
/// ```
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
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_rt::host::HostDeviceConfig;
    ///
    /// assert_eq!(HostDeviceConfig::default().workgroup, HostDeviceConfig::H200_WORKGROUP);
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let args = [Arg::Span(buffer.all()), Arg::U32(0), Arg::U64(16)];
    /// let too_much = 232_448 + 4; // past the 227 KiB an H200 allows after opt-in
    /// let dims = LaunchDims { dynamic_workgroup_bytes: too_much, ..LaunchDims::linear(1, 16) };
    /// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    /// let refused = unsafe { rt.launch(DeviceId(0), "fill_u32", dims, &args, &mut vec![]) };
    /// assert!(matches!(refused, Err(Error::LimitExceeded { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub const H200_WORKGROUP: WorkgroupLimits = WorkgroupLimits {
        default_per_block: 48 * 1024,
        max_per_block_opt_in: 232_448,
        per_multiprocessor: 233_472,
        reserved_per_block: 1024,
    };

    /// Every kind, each with a stream-ordered form, and host registration (a CUDA 13 driver).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_core::allocator::KindSupport;
    /// use gpu_rt::host::HostDeviceConfig;
    ///
    /// let mut config = HostConfig::with_devices(1);
    /// // A device without managed memory (the default has every kind).
    /// config.devices[0].allocator = HostDeviceConfig::ALL_CAPABILITIES;
    /// config.devices[0].allocator.managed = KindSupport::NONE;
    /// let rt = Runtime::new(HostBackend::new(config))?;
    /// assert!(rt.alloc(DeviceId(0), MemoryKind::Device, 64).is_ok());
    /// let managed = rt.alloc(DeviceId(0), MemoryKind::Managed, 64);
    /// assert!(matches!(managed, Err(Error::KindUnsupported { .. })));
    /// # Ok::<(), Error>(())
    /// ```
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
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let config = HostConfig { work_log_capacity: 2, ..HostConfig::with_devices(1) };
/// let rt = Runtime::new(HostBackend::new(config))?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// for value in 0..5 {
///     rt.wait(rt.fill(DeviceId(0), buffer.all(), value, &mut vec![])?)?;
/// }
/// assert_eq!(rt.backend().work_log().len(), 2); // the two most recent items
/// assert_eq!(HostConfig::default(), HostConfig::with_devices(2));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// The devices, numbered in this order.
    pub devices: Vec<HostDeviceConfig>,
    /// How many finished work items [`super::HostBackend::work_log`] keeps (the oldest go first).
    pub work_log_capacity: usize,
    /// How many launches a stream holds unfinished before a launch call blocks until one
    /// completes, as a GPU driver's call does when the device's launch queue is full (CUDA's
    /// holds about a thousand); 0, the default, never blocks.
    pub launch_queue_depth: usize,
}

impl HostConfig {
    /// `count` default devices, named "host device 0", "host device 1", ...
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let config = HostConfig::with_devices(3);
    /// assert_eq!(config.devices[2].name, "host device 2");
    /// assert_eq!(config.devices[2].memory_capacity, 1 << 30);
    /// let backend = HostBackend::new(config);
    /// assert_eq!(backend.device_count(), 3);
    /// ```
    pub fn with_devices(count: usize) -> Self {
        Self {
            devices: (0..count)
                .map(|i| HostDeviceConfig {
                    name: format!("host device {i}"),
                    ..HostDeviceConfig::default()
                })
                .collect(),
            work_log_capacity: 1 << 16,
            launch_queue_depth: 0,
        }
    }
}

impl Default for HostConfig {
    /// Two default devices.
    fn default() -> Self {
        Self::with_devices(2)
    }
}

/// Live objects of a host backend, for leak checks (all zero after a clean shutdown, but for
/// `draining_streams`, which counts destroyed streams whose worker has not been joined yet and
/// may stay above zero for a moment, and `faults_injected`).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::HostStats;
///
/// let backend = std::sync::Arc::new(HostBackend::new(HostConfig::with_devices(1)));
/// let rt = Runtime::shared(backend.clone(), RuntimeConfig::default())?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
/// rt.wait(rt.fill(DeviceId(0), buffer.all(), 1, &mut vec![])?)?;
/// assert_eq!((backend.stats().allocations, backend.stats().streams), (1, 1));
/// drop(buffer);
/// rt.shutdown()?;
/// let HostStats { streams, events, allocations, registered_ranges, .. } = backend.stats();
/// assert_eq!((streams, events, allocations, registered_ranges), (0, 0, 0, 0)); // no leak
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Streams created and not destroyed.
    pub streams: usize,
    /// Destroyed streams whose worker thread has not been joined yet.
    pub draining_streams: usize,
    /// Events created and not destroyed.
    pub events: usize,
    /// Graphs instantiated and not destroyed.
    pub graphs: usize,
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
