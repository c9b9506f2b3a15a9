//! The NVTX memory extension's slots, filled and then called as NVTX's loader and wrappers do
//! for each header layout, and its batches, on structures built as NVTX's headers do.

use super::*;

/// NVTX's `NVTX_EXTENSION_FRESH` and `NVTX_EXTENSION_DISABLED` (`nvtxExtImpl.h`).
const FRESH: isize = 0;
const DISABLED: isize = 1;

/// The memory module's slots as a program built with one NVTX header set holds them
/// (`nvtxExtMemSlots`: the module's state, then its function slots), initialised as NVTX's
/// loader does it: `nvtxExtMemInitOnce` describes the module (one segment of `slot_count`
/// slots numbered `segment_id`), `nvtxExtInitOnce` calls the tool's entry point and disables
/// every slot still fresh (all of them if the entry point returned 0). Returns the trace's
/// comment.
fn nvtx_loads_the_tool(
    slots: &mut [isize],
    segment_id: usize,
    compat_id: u16,
    module_id: u16,
) -> Option<String> {
    let slot_count = slots.len() - 1;
    let mut segment = ModuleSegment {
        segment_id,
        slot_count,
        function_slots: slots[1..].as_mut_ptr(),
    };
    let mut info = ModuleInfo {
        nvtx_version: 3,
        struct_size: size_of::<ModuleInfo>() as u16,
        module_id,
        compat_id,
        segments_count: 1,
        segments: &mut segment,
        get_export_function: core::ptr::null(),
        ext_info: core::ptr::null(),
    };
    // SAFETY: a module description laid out and filled as NVTX's.
    let note = unsafe { attach(&mut info) };
    // SAFETY: as above.
    let status = unsafe { InitializeInjectionNvtxExtension(&mut info) };
    for slot in &mut slots[1..] {
        if status == 0 || *slot == FRESH {
            *slot = DISABLED;
        }
    }
    note
}

/// What a program's `nvtxMemHeapRegister` and `nvtxMemRegionsRegister` return through NVTX's
/// wrappers (`NVTX_EXT_MEM_IMPL_FN_V1`: the function in `nvtxExtMemSlots[CBID + 1]`, if not
/// disabled), called with the header's callback ids: the heap handle and the region handle
/// written, both 0 where no tool is attached.
fn program_registers(slots: &[isize], heap_cbid: usize, regions_cbid: usize) -> (u64, u64) {
    let range = VirtualRange {
        size: 1 << 16,
        ptr: 0x7f00_0000_0000,
    };
    let heap = HeapDesc {
        ext_compat_id: COMPAT_MEM,
        struct_size: size_of::<HeapDesc>() as u16,
        reserved: 0,
        usage: 1,
        kind: TYPE_VIRTUAL_ADDRESS,
        type_specific_size: size_of::<VirtualRange>(),
        type_specific: &range,
    };
    let block = VirtualRange {
        size: 256,
        ptr: 0x7f00_0000_1000,
    };
    let mut handle = [0u64];
    let batch = register_batch(core::slice::from_ref(&block), &mut handle);
    type HeapFn = unsafe extern "C" fn(*const c_void, *const HeapDesc) -> u64;
    type RegionsFn = unsafe extern "C" fn(*const c_void, *const RegisterBatch);
    let heap_handle = match tool_function(slots, heap_cbid) {
        // SAFETY: a filled slot holds the function of its callback id's signature, called
        // with a heap descriptor.
        Some(slot) => unsafe {
            core::mem::transmute::<isize, HeapFn>(slot)(core::ptr::null(), &heap)
        },
        None => 0,
    };
    if let Some(slot) = tool_function(slots, regions_cbid) {
        // SAFETY: as above, with a batch of one region and room for its handle.
        unsafe { core::mem::transmute::<isize, RegionsFn>(slot)(core::ptr::null(), &batch) };
    }
    (heap_handle, handle[0])
}

/// A batch registering `ranges` of virtual memory, their handles written to `handles`.
fn register_batch(ranges: &[VirtualRange], handles: &mut [u64]) -> RegisterBatch {
    assert_eq!(ranges.len(), handles.len());
    RegisterBatch {
        ext_compat_id: COMPAT_MEM,
        struct_size: size_of::<RegisterBatch>() as u16,
        region_type: TYPE_VIRTUAL_ADDRESS,
        heap: core::ptr::null(),
        count: ranges.len(),
        element_size: size_of::<VirtualRange>(),
        elements: ranges.as_ptr().cast(),
        handles_out: handles.as_mut_ptr(),
    }
}

/// The tool's function in a callback id's slot, if NVTX's wrapper would call one.
fn tool_function(slots: &[isize], cbid: usize) -> Option<isize> {
    Some(slots[cbid + 1]).filter(|&slot| slot != DISABLED && slot != FRESH)
}

#[test]
fn a_program_built_with_either_header_layout_reaches_the_recorder() {
    // Slots (state included), segment id, `NVTX3EXT_CBID_*` of `nvtxMemHeapRegister`,
    // `nvtxMemRegionsRegister` and `nvtxMemRegionsUnregister`, and the trace's comment.
    let headers: [(usize, usize, [usize; 3], &str); 2] = [
        // CUDA 13's `nvtx3` (the `nvidia-nvtx` 13 wheel): `NVTX_EXT_MEM_SLOT_COUNT` 63 in
        // segment 1, callbacks from 0. The other slots (`nvtxMemHeapUnregister` 1,
        // `...RegionsResize` 4, `...RegionsName` 6: where the recorder wrote before) are
        // no-ops, never called with another function's arguments.
        (64, 1, [0, 3, 5], "released layout: 63 slots in segment 1"),
        // NVTX's `dev` branch of 2024: `NVTX3EXT_CBID_MEM_FN_NUM` 17 in segment 0, from 1.
        (
            18,
            0,
            [1, 4, 6],
            "pre-release layout: 17 slots in segment 0",
        ),
    ];
    for (count, segment_id, cbids, layout) in headers {
        let mut slots = vec![FRESH; count];
        let note = nvtx_loads_the_tool(&mut slots, segment_id, 0x0102, 1);
        let attached = format!("nvtx: memory extension attached ({layout})");
        assert_eq!(note, Some(attached));
        let handles = program_registers(&slots, cbids[0], cbids[1]);
        assert_eq!(handles, (0x7f00_0000_0000, 0x7f00_0000_1000), "{layout}");
        let filled: Vec<usize> = (0..count - 1)
            .filter(|&cbid| tool_function(&slots, cbid).is_some())
            .collect();
        assert_eq!(filled, cbids, "{layout}");
    }
}

#[test]
fn other_modules_and_unknown_layouts_get_nothing_and_say_so() {
    let mut other = [FRESH; 64];
    assert_eq!(nvtx_loads_the_tool(&mut other, 1, 0x0102, 2), None);
    assert!(other[1..].iter().all(|&slot| slot == DISABLED));

    let mut newer = [FRESH; 64];
    let note = nvtx_loads_the_tool(&mut newer, 1, 0x0103, 1).unwrap_or_default();
    assert!(note.starts_with("nvtx: memory extension not attached: compatibility 0x0103"));
    assert_eq!(program_registers(&newer, 0, 3), (0, 0));

    let mut unknown = [FRESH; 64];
    let note = nvtx_loads_the_tool(&mut unknown, 2, 0x0102, 1).unwrap_or_default();
    assert_eq!(
        note,
        "nvtx: memory extension not attached: unknown layout (segment 2, 63 slots)"
    );
    assert!(unknown[1..].iter().all(|&slot| slot == DISABLED));

    // SAFETY: NULL is allowed.
    assert_eq!(unsafe { attach(core::ptr::null_mut()) }, None);
    // SAFETY: as above.
    let none = unsafe { InitializeInjectionNvtxExtension(core::ptr::null_mut()) };
    assert_eq!(none, 1);
}

#[test]
fn a_register_batch_gives_its_ranges_and_their_addresses_as_handles() {
    let ranges = [
        VirtualRange {
            size: 256,
            ptr: 0x7f00_0000_0000,
        },
        VirtualRange {
            size: 512,
            ptr: 0x7f00_0000_1000,
        },
    ];
    let mut handles = [0u64; 2];
    let batch = register_batch(&ranges, &mut handles);
    // SAFETY: a batch of two ranges.
    let got = unsafe { registered(&batch) };
    assert_eq!(
        got.iter().map(|r| (r.ptr, r.size)).collect::<Vec<_>>(),
        [(0x7f00_0000_0000, 256), (0x7f00_0000_1000, 512)]
    );
    // Nothing is recorded in a test process; the handles are still written.
    // SAFETY: as above, with room for two handles.
    unsafe { regions_register(core::ptr::null(), &batch) };
    assert_eq!(handles, [0x7f00_0000_0000, 0x7f00_0000_1000]);

    let other = RegisterBatch {
        region_type: 7,
        ..batch
    };
    // SAFETY: as above.
    assert!(unsafe { registered(&other) }.is_empty());
}

#[test]
fn an_unregister_batch_gives_its_addresses() {
    let refs = [0x7f00_0000_0000u64, 0x7f00_0000_1000];
    let batch = UnregisterBatch {
        ext_compat_id: COMPAT_MEM,
        struct_size: size_of::<UnregisterBatch>() as u16,
        ref_type: 1,
        count: 2,
        element_size: 8,
        elements: refs.as_ptr().cast(),
    };
    // SAFETY: a batch of two references.
    assert_eq!(unsafe { unregistered(&batch) }, refs);
    // SAFETY: NULL is allowed.
    assert!(unsafe { unregistered(core::ptr::null()) }.is_empty());
}

#[test]
fn a_heap_of_virtual_memory_is_named_by_its_first_byte() {
    let range = VirtualRange {
        size: 1 << 20,
        ptr: 0x7f00_0000_0000,
    };
    let desc = HeapDesc {
        ext_compat_id: COMPAT_MEM,
        struct_size: 0,
        reserved: 0,
        usage: 1,
        kind: TYPE_VIRTUAL_ADDRESS,
        type_specific_size: size_of::<VirtualRange>(),
        type_specific: &range,
    };
    // SAFETY: a heap descriptor.
    let handle = unsafe { heap_register(core::ptr::null(), &desc) };
    assert_eq!(handle, range.ptr);
}
