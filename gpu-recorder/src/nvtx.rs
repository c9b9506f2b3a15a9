//! The NVTX injection: a program that annotates its sub-allocations with NVTX's memory API
//! (`nvtxMemRegionsRegister`/`Unregister`) tells the recorder where its blocks are.
//!
//! NVTX loads the library `NVTX_INJECTION64_PATH` names (this one, already loaded by the driver)
//! and calls [`InitializeInjectionNvtxExtension`] once per extension module; for the memory
//! module (id 1, compatibility 0x0102, `nvtxDetail/nvtxExtImplMem_v1.h`) it fills the function
//! slots of heap registration and region registration and unregistration, at the indices
//! (`NVTX3EXT_CBID_*`) of the layout the program was built with ([`LAYOUTS`]: the released
//! one, and the pre-release one of NVTX's `dev` branch, which share the compatibility id), and
//! writes `# nvtx: memory extension attached` into the trace (or why it did not attach). Each
//! region of process virtual memory registered becomes a block of the allocator `nvtx` through
//! `gpu_recorder_block` (the translator narrows launch footprints to it and writes it as a
//! comment: a region names no stream, so the checker sees the accesses, not a hand-out), each
//! unregistered one its end. Regions registered before the driver loaded the recorder (before
//! `cuInit`) are not seen; other extensions and NVTX's core get no-ops.

use core::ffi::{c_int, c_void};

use crate::inject::{comment, gpu_recorder_block};

/// `NVTX_EXT_MODULEID_MEM`.
const MODULE_MEM: u16 = 1;
/// `NVTX_EXT_COMPATID_MEM`: the layout of the structures read here.
const COMPAT_MEM: u16 = 0x0102;

/// Where one layout of the memory module puts the functions the recorder fills: its one
/// segment's id and slot count, and the slots (`NVTX3EXT_CBID_*`, indices into the segment's
/// `functionSlots`) of `nvtxMemHeapRegister`, `nvtxMemRegionsRegister` and
/// `nvtxMemRegionsUnregister`.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    /// What the trace's comment calls it.
    name: &'static str,
    segment_id: usize,
    /// The exact slot count, or `None`: any count that holds the slots.
    slot_count: Option<usize>,
    heap_register: usize,
    regions_register: usize,
    regions_unregister: usize,
}

/// The layouts known, first match wins.
pub const LAYOUTS: [Layout; 2] = [
    // NVTX's `dev` branch of 2024 (its `nvToolsExtMem.h` numbers the callbacks from 1, "CBID 0
    // is invalid"; `NVTX3EXT_CBID_MEM_FN_NUM` = 17 slots in segment 0): never in a CUDA
    // toolkit. The recorder was first written and tried against it.
    Layout {
        name: "pre-release",
        segment_id: 0,
        slot_count: Some(17),
        heap_register: 1,
        regions_register: 4,
        regions_unregister: 6,
    },
    // The released headers (CUDA 13's `nvtx3`, the `nvidia-nvtx` 13 wheel): callbacks numbered
    // from 0, `NVTX_EXT_MEM_SLOT_COUNT` = 63 slots in segment 1.
    Layout {
        name: "released",
        segment_id: 1,
        slot_count: None,
        heap_register: 0,
        regions_register: 3,
        regions_unregister: 5,
    },
];

impl Layout {
    /// The layout of a memory module's segment, if it is a known one.
    fn of(segment: &ModuleSegment) -> Option<&'static Self> {
        LAYOUTS.iter().find(|layout| {
            layout.segment_id == segment.segment_id
                && layout.slot_count.unwrap_or(segment.slot_count) == segment.slot_count
                && segment.slot_count
                    > layout
                        .heap_register
                        .max(layout.regions_register)
                        .max(layout.regions_unregister)
        })
    }
}

/// `NVTX_MEM_TYPE_VIRTUAL_ADDRESS`.
const TYPE_VIRTUAL_ADDRESS: u32 = 1;
/// `gpu_recorder_block`'s allocator byte for NVTX regions.
const ALLOCATOR_NVTX: u32 = 2 << 8;

/// `nvtxExtModuleSegment_t`.
#[repr(C)]
pub struct ModuleSegment {
    segment_id: usize,
    slot_count: usize,
    function_slots: *mut isize,
}

/// `nvtxExtModuleInfo_t`.
#[repr(C)]
pub struct ModuleInfo {
    nvtx_version: u16,
    struct_size: u16,
    module_id: u16,
    compat_id: u16,
    segments_count: usize,
    segments: *mut ModuleSegment,
    get_export_function: *const c_void,
    ext_info: *const c_void,
}

/// `nvtxMemVirtualRangeDesc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct VirtualRange {
    size: usize,
    ptr: u64,
}

/// `nvtxMemHeapDesc_t`, as far as it is read.
#[repr(C)]
struct HeapDesc {
    ext_compat_id: u16,
    struct_size: u16,
    reserved: u32,
    usage: u32,
    kind: u32,
    type_specific_size: usize,
    type_specific: *const VirtualRange,
}

/// `nvtxMemRegionsRegisterBatch_t`.
#[repr(C)]
struct RegisterBatch {
    ext_compat_id: u16,
    struct_size: u16,
    region_type: u32,
    heap: *const c_void,
    count: usize,
    element_size: usize,
    elements: *const u8,
    handles_out: *mut u64,
}

/// `nvtxMemRegionsUnregisterBatch_t`.
#[repr(C)]
struct UnregisterBatch {
    ext_compat_id: u16,
    struct_size: u16,
    ref_type: u32,
    count: usize,
    element_size: usize,
    elements: *const u8,
}

/// NVTX's entry point for an extension module: fills the memory module's slots and notes in
/// the trace whether it did; leaves every other module's empty (NVTX makes them no-ops).
/// Returns 1 (success).
///
/// # Safety
/// `module` is NULL or NVTX's module description, its segments and slots valid for writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtxExtension(module: *mut ModuleInfo) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the caller's promise.
        if let Some(note) = unsafe { attach(module) } {
            comment(note);
        }
    });
    1
}

/// Fills a memory module's slots for its layout; the trace's comment on it (without `# `), or
/// `None` for another module.
///
/// # Safety
/// As [`InitializeInjectionNvtxExtension`].
pub unsafe fn attach(module: *mut ModuleInfo) -> Option<String> {
    // SAFETY: the caller's promise.
    let module = unsafe { module.as_ref() }?;
    if module.module_id != MODULE_MEM {
        return None;
    }
    if module.compat_id != COMPAT_MEM || module.segments.is_null() || module.segments_count != 1 {
        return Some(format!(
            "nvtx: memory extension not attached: compatibility {:#06x}, {} segments (the \
             recorder reads {COMPAT_MEM:#06x}, 1 segment)",
            module.compat_id, module.segments_count
        ));
    }
    // SAFETY: NVTX passes `segments_count` (1) segments.
    let segment = unsafe { &*module.segments };
    let Some(layout) = Layout::of(segment).filter(|_| !segment.function_slots.is_null()) else {
        return Some(format!(
            "nvtx: memory extension not attached: unknown layout (segment {}, {} slots)",
            segment.segment_id, segment.slot_count
        ));
    };
    let fill = [
        (layout.heap_register, heap_register as *const () as usize),
        (
            layout.regions_register,
            regions_register as *const () as usize,
        ),
        (
            layout.regions_unregister,
            regions_unregister as *const () as usize,
        ),
    ];
    for (slot, function) in fill {
        // SAFETY: slot < slot_count (`Layout::of`); NVTX reads the slots after we return.
        unsafe { segment.function_slots.add(slot).write(function as isize) };
    }
    Some(format!(
        "nvtx: memory extension attached ({} layout: {} slots in segment {})",
        layout.name, segment.slot_count, segment.segment_id
    ))
}

/// NVTX's core entry point: nothing of the core is recorded; returns 1 (success: NVTX makes
/// its functions no-ops, as without a tool).
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjectionNvtx2(_get_export_table: *const c_void) -> c_int {
    1
}

/// `nvtxMemHeapRegister`: a heap of virtual memory is named by its first byte.
unsafe extern "C" fn heap_register(_domain: *const c_void, desc: *const HeapDesc) -> u64 {
    // SAFETY: NVTX passes the caller's descriptor.
    let Some(desc) = (unsafe { desc.as_ref() }) else {
        return 0;
    };
    if desc.kind != TYPE_VIRTUAL_ADDRESS {
        return 1;
    }
    // SAFETY: a virtual-address heap's descriptor points to its range.
    unsafe { desc.type_specific.as_ref() }.map_or(1, |range| range.ptr)
}

/// `nvtxMemRegionsRegister`: each virtual-address region is a block (its handle its address).
unsafe extern "C" fn regions_register(_domain: *const c_void, batch: *const RegisterBatch) {
    // SAFETY: NVTX passes the caller's batch.
    for (index, range) in unsafe { registered(batch) }.into_iter().enumerate() {
        gpu_recorder_block(ALLOCATOR_NVTX, range.ptr, range.size as u64, 0);
        // SAFETY: `registered` returned ranges only for a valid batch.
        let out = unsafe { batch.as_ref() }.map_or(core::ptr::null_mut(), |b| b.handles_out);
        if !out.is_null() {
            // SAFETY: the caller provides `count` handles where it passes the array.
            unsafe { out.add(index).write(range.ptr) };
        }
    }
}

/// `nvtxMemRegionsUnregister`: each region, by pointer or by the handle (its address) given.
unsafe extern "C" fn regions_unregister(_domain: *const c_void, batch: *const UnregisterBatch) {
    // SAFETY: NVTX passes the caller's batch.
    for address in unsafe { unregistered(batch) } {
        gpu_recorder_block(ALLOCATOR_NVTX | 1, address, 0, 0);
    }
}

/// The virtual-address regions of a register batch.
///
/// # Safety
/// `batch` is NULL or a batch whose elements are valid for `count` reads.
unsafe fn registered(batch: *const RegisterBatch) -> Vec<VirtualRange> {
    // SAFETY: the caller's promise.
    match unsafe { batch.as_ref() } {
        Some(batch) if batch.region_type == TYPE_VIRTUAL_ADDRESS => {
            // SAFETY: the caller's promise.
            unsafe { elements(batch.elements, batch.count, batch.element_size) }
        }
        _ => Vec::new(),
    }
}

/// The addresses of an unregister batch (pointers or handles: a handle is the address).
///
/// # Safety
/// `batch` is NULL or a batch whose elements are valid for `count` reads.
unsafe fn unregistered(batch: *const UnregisterBatch) -> Vec<u64> {
    // SAFETY: the caller's promise.
    match unsafe { batch.as_ref() } {
        // SAFETY: the caller's promise.
        Some(batch) => unsafe { elements(batch.elements, batch.count, batch.element_size) },
        None => Vec::new(),
    }
}

/// The `count` elements of a batch's array, each `size` bytes (at least a `T`, which begins
/// each), read unaligned; none for a NULL array or a smaller size.
///
/// # Safety
/// `base` is NULL or valid for reading `count` elements of `size` bytes.
unsafe fn elements<T: Copy>(base: *const u8, count: usize, size: usize) -> Vec<T> {
    if base.is_null() || size < size_of::<T>() {
        return Vec::new();
    }
    (0..count)
        // SAFETY: element `i` lies within the caller's array.
        .map(|i| unsafe { base.add(i * size).cast::<T>().read_unaligned() })
        .collect()
}

#[cfg(test)]
mod tests;
