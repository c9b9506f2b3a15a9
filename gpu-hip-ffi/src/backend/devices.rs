//! The devices as opened: each one's ordinal, default memory pool, description, kernel library
//! and virtual-memory granularity, read and set up at open (and the pool again after a reset).

use core::ffi::c_int;
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use gpu_core::Result;
use gpu_core::backend::DeviceInfo;

use super::caps;
use super::handles::HipModule;
use crate::library::Hip;
use crate::result;
use crate::sys;

/// The kernel library loaded on one device: the module (live in the backend's modules while it
/// is loaded) and one function per library entry.
pub(super) struct LoadedLibrary {
    pub(super) module: HipModule,
    pub(super) functions: Vec<sys::hipFunction_t>,
}

/// One device as opened: its ordinal, default memory pool (where stream-ordered allocation is
/// used), description, and kernel library once loaded.
pub(super) struct DeviceState {
    pub(super) ordinal: c_int,
    /// The default pool, with its release threshold raised to the maximum at open (and after a
    /// reset); null where the device has no stream-ordered allocation.
    pub(super) pool: AtomicPtr<sys::ihipMemPoolHandle_t>,
    pub(super) info: DeviceInfo,
    /// Loaded at the first [`Backend::kernel`] call for the device.
    ///
    /// [`Backend::kernel`]: gpu_core::backend::Backend::kernel
    pub(super) library: Mutex<Option<LoadedLibrary>>,
    /// The granularity of device memory's virtual memory management, where HIP has it (asked
    /// at open).
    pub(super) vm_granularity: Option<usize>,
}

impl DeviceState {
    /// The default pool, where the device has stream-ordered allocation.
    pub(super) fn pool(&self) -> Option<sys::hipMemPool_t> {
        let pool = self.pool.load(Ordering::Acquire);
        (!pool.is_null()).then_some(pool)
    }
}

/// Reads device `ordinal`'s description.
pub(super) fn open_device(
    hip: &Hip,
    ordinal: c_int,
    pool_entry_points: bool,
) -> Result<DeviceState> {
    let device = result::device::get(hip, ordinal)?;
    let name = result::device::name(hip, device)?;
    let total_memory = result::device::total_memory(hip, device)?;
    let info = caps::describe_device(name, total_memory, pool_entry_points, |attribute| {
        result::device::attribute(hip, attribute, ordinal)
    })?;
    Ok(DeviceState {
        ordinal,
        pool: AtomicPtr::new(ptr::null_mut()),
        info,
        library: Mutex::new(None),
        vm_granularity: vm_granularity(hip, ordinal),
    })
}

/// The granularity of device `ordinal`'s device memory, where HIP answers for it (HIP 5.2.3 has
/// no device attribute for virtual memory management; failing, the allocator uses ordinary
/// segments).
fn vm_granularity(hip: &Hip, ordinal: c_int) -> Option<usize> {
    result::vm::granularity(hip, &result::vm::device_memory(ordinal))
        .ok()
        .filter(|granularity| granularity.is_power_of_two())
}

/// The device's default memory pool, with its release threshold raised to the maximum so that
/// memory freed in stream order stays in the pool instead of going back at each synchronisation.
pub(super) fn configure_default_pool(hip: &Hip, ordinal: c_int) -> Result<sys::hipMemPool_t> {
    let pool = result::device::default_memory_pool(hip, ordinal)?;
    // SAFETY: the device's default pool, which lives as long as the device's state.
    unsafe { result::memory::set_pool_release_threshold(hip, pool, u64::MAX) }?;
    Ok(pool)
}
