//! Memory through the runtime: devices report their capabilities, every allocation kind and
//! its errors, and the lock table's rules as the runtime applies them.

use alloc::format;
use alloc::vec;

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::Backend;
use gpu_core::error::Error;
use gpu_core::id::DeviceId;

use super::harness::{CaseResult, Harness, Open, Stop, ensure, fill_and_verify};

pub(super) fn devices_report_capabilities<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    ensure!(h.runtime.device_count() >= 1, "no device");
    for d in 0..h.runtime.device_count() {
        let info = h.runtime.device_info(DeviceId(d as u32))?;
        let limits = info.workgroup;
        ensure!(
            limits.default_per_block <= limits.max_per_block_opt_in,
            "device {d}: default workgroup limit {} above the opt-in maximum {}",
            limits.default_per_block,
            limits.max_per_block_opt_in
        );
        ensure!(
            info.allocator.device.available,
            "device {d} reports no device memory"
        );
    }
    let count = h.runtime.device_count();
    let err = h.runtime.device_info(DeviceId(count as u32)).err();
    ensure!(
        err == Some(Error::UnknownDevice {
            device: DeviceId(count as u32),
            device_count: count
        }),
        "an unknown device gave {err:?}"
    );
    h.close()
}

pub(super) fn allocation_kinds_and_errors<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let device = DeviceId(0);
    let caps = rt.device_info(device)?.allocator;
    for kind in MemoryKind::CACHED {
        if !caps.support(kind).available {
            let err = rt.alloc(device, kind, 256).err();
            ensure!(
                matches!(err, Some(Error::KindUnsupported { .. })),
                "{kind} is not available, yet allocating it gave {err:?}"
            );
            continue;
        }
        for size in [1, 4096, 1 << 20] {
            let buffer = rt.alloc(device, kind, size)?;
            ensure!(
                buffer.size() == size,
                "asked {size} bytes of {kind}, got {}",
                buffer.size()
            );
            fill_and_verify(rt, device, buffer.all(), 0x5a)?;
        }
        let err = rt.alloc(device, kind, 0).err();
        ensure!(
            matches!(err, Some(Error::ZeroSize { .. })),
            "zero bytes of {kind} gave {err:?}"
        );
    }
    let (buffer, token) = rt.alloc_after(device, MemoryKind::Device, 4096, &mut vec![])?;
    fill_and_verify(rt, device, buffer.all(), 3)?;
    rt.wait(token)?;
    let outside = buffer.span(4000, 200).err();
    ensure!(
        outside
            == Some(Error::OutOfBounds {
                offset: 4000,
                len: 200,
                size: 4096
            }),
        "a span past the end gave {outside:?}"
    );
    drop(buffer);
    h.close()
}

pub(super) fn lock_rules_through_the_runtime<B: Backend>(open: Open<'_, B>) -> CaseResult {
    let h = Harness::open(open)?;
    let rt = &h.runtime;
    let memory = vec![0u8; 64 << 10];
    let base = memory.as_ptr() as usize;
    let registrations = || h.backend.live().registrations;
    rt.lock_range(base, 16 << 10)?;
    rt.lock_range(base + 1024, 1024)?;
    ensure!(
        registrations() == 1,
        "a nested lock registered again ({} registrations)",
        registrations()
    );
    let overlap = rt.lock_range(base + (8 << 10), 16 << 10).err();
    ensure!(
        matches!(overlap, Some(Error::LockOverlap { .. })),
        "an overlapping lock gave {overlap:?}"
    );
    rt.lock_range(base + (16 << 10), 4096)?;
    ensure!(
        registrations() == 2,
        "adjacent ranges must stay separate entries"
    );
    for device in 0..rt.device_count() {
        let device = DeviceId(device as u32);
        ensure!(
            rt.pinned_address(base + 100, 100, device)?.is_some(),
            "a pinned range missed"
        );
        ensure!(
            rt.pinned_address(base + (16 << 10) - 8, 16, device)?
                .is_none(),
            "a span over two entries hit"
        );
    }
    let unknown = rt.unlock_range(base + (40 << 10)).err();
    ensure!(
        unknown
            == Some(Error::NotLocked {
                ptr: base + (40 << 10)
            }),
        "unlocking unknown memory gave {unknown:?}"
    );
    rt.unlock_range(base + 5000)?;
    rt.unlock_range(base + 5000)?;
    rt.unlock_range(base + (16 << 10))?;
    ensure!(
        registrations() == 0,
        "{} registrations left after the last unlocks",
        registrations()
    );
    drop(memory);
    h.close()
}
