//! The NVTX memory extension's slots and batches, on structures built as NVTX's headers do.

use super::*;

fn module(module_id: u16, slots: &mut [isize; 64]) -> (ModuleInfo, Box<ModuleSegment>) {
    let mut segment = Box::new(ModuleSegment {
        segment_id: 0,
        slot_count: 17,
        function_slots: slots[1..].as_mut_ptr(),
    });
    let info = ModuleInfo {
        nvtx_version: 3,
        struct_size: size_of::<ModuleInfo>() as u16,
        module_id,
        compat_id: COMPAT_MEM,
        segments_count: 1,
        segments: &mut *segment,
        get_export_function: core::ptr::null(),
        ext_info: core::ptr::null(),
    };
    (info, segment)
}

#[test]
fn the_memory_module_gets_its_three_functions_and_other_modules_none() {
    let mut slots = [0isize; 64];
    let (mut info, _segment) = module(MODULE_MEM, &mut slots);
    // SAFETY: a module description laid out as NVTX's.
    assert_eq!(unsafe { InitializeInjectionNvtxExtension(&mut info) }, 1);
    let filled: Vec<usize> = (0..63).filter(|&cbid| slots[cbid + 1] != 0).collect();
    assert_eq!(
        filled,
        [
            SLOT_HEAP_REGISTER,
            SLOT_REGIONS_REGISTER,
            SLOT_REGIONS_UNREGISTER
        ]
    );
    assert_eq!(
        slots[SLOT_REGIONS_REGISTER + 1],
        regions_register as *const () as isize
    );

    let mut other = [0isize; 64];
    let (mut info, _segment) = module(2, &mut other);
    // SAFETY: as above.
    assert_eq!(unsafe { InitializeInjectionNvtxExtension(&mut info) }, 1);
    assert!(other.iter().all(|&slot| slot == 0));
    // SAFETY: NULL is allowed.
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
    let batch = RegisterBatch {
        ext_compat_id: COMPAT_MEM,
        struct_size: size_of::<RegisterBatch>() as u16,
        region_type: TYPE_VIRTUAL_ADDRESS,
        heap: core::ptr::null(),
        count: 2,
        element_size: size_of::<VirtualRange>(),
        elements: ranges.as_ptr().cast(),
        handles_out: handles.as_mut_ptr(),
    };
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
