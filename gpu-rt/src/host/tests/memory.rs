//! Memory: allocations aligned, zeroed and bounded, capabilities, bad frees, frees ordered
//! after queued work, copies kept inside their allocations, read-only sources, and element
//! fills.

use super::*;

#[test]
fn allocations_are_aligned_zeroed_and_limited_by_capacity() {
    let mut config = HostConfig::with_devices(1);
    config.devices[0].memory_capacity = 4096;
    let b = HostBackend::new(config);
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(b.allocate(D0, MemoryKind::Device, 4097).unwrap(), None);
    let a = b.allocate(D0, MemoryKind::Device, 4000).unwrap().unwrap();
    assert_eq!(a % HOST_ALLOCATION_ALIGNMENT, 0);
    assert_eq!(b.allocate(D0, MemoryKind::HostPinned, 97).unwrap(), None);
    assert!(b.allocate(D0, MemoryKind::Device, 96).unwrap().is_some());
    let s = b.stream_create(D0).unwrap();
    // SAFETY: `a` is a live allocation of `b`.
    assert!(unsafe { read_back(&b, s, a, 4000) }.iter().all(|&x| x == 0));
    assert_eq!(
        b.allocate_on_stream(s, MemoryKind::Device, 1).unwrap(),
        None
    );
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 4096);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    assert_eq!(b.stats().allocations, 1);
    let c = b
        .allocate_on_stream(s, MemoryKind::Device, 4000)
        .unwrap()
        .unwrap();
    assert_eq!(b.stats().allocated_bytes, 4096);
    assert!(matches!(
        b.allocate(D0, MemoryKind::Device, 0),
        Err(Error::ZeroSize { .. })
    ));
    b.free(D0, MemoryKind::Device, c, Some(s)).unwrap();
    b.stream_destroy(s).unwrap();
}

#[test]
fn capabilities_decide_which_kinds_and_forms_exist() {
    let mut config = HostConfig::with_devices(1);
    config.devices[0].allocator.device.stream_ordered = false;
    config.devices[0].allocator.managed = KindSupport::NONE;
    let b = HostBackend::new(config);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    assert!(!b.device_info(D0).unwrap().allocator.device.stream_ordered);
    assert_eq!(
        code(b.allocate_on_stream(s, MemoryKind::Device, 64)),
        HostErrorCode::NotSupported
    );
    assert_eq!(
        code(b.allocate(D0, MemoryKind::Managed, 64)),
        HostErrorCode::NotSupported
    );
    let p = b
        .allocate_on_stream(s, MemoryKind::HostPinned, 64)
        .unwrap()
        .unwrap();
    b.free(D0, MemoryKind::HostPinned, p, None).unwrap();
    b.stream_destroy(s).unwrap();
    zero_stats(&b);
}

#[test]
fn frees_of_unknown_or_mismatched_addresses_are_errors() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let a = b.allocate(D0, MemoryKind::Managed, 512).unwrap().unwrap();
    let invalid = HostErrorCode::InvalidValue;
    assert_eq!(
        code(b.free(D0, MemoryKind::Managed, a + 256, None)),
        invalid
    );
    assert_eq!(code(b.free(D0, MemoryKind::Device, a, None)), invalid);
    b.set_current_device(Some(D1)).unwrap();
    assert_eq!(code(b.free(D1, MemoryKind::Managed, a, None)), invalid);
    b.set_current_device(Some(D0)).unwrap();
    assert_eq!(b.stats().allocations, 1);
    b.free(D0, MemoryKind::Managed, a, None).unwrap();
    assert_eq!(code(b.free(D0, MemoryKind::Managed, a, None)), invalid);
    zero_stats(&b);
}

#[test]
fn a_free_after_a_stream_waits_for_its_queued_work() {
    let b = backend();
    let gate = Gate::install(&b);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b
        .allocate(D0, MemoryKind::Device, 1 << 20)
        .unwrap()
        .unwrap();
    // SAFETY: no pointer arguments; `a` is a live allocation of `b`.
    unsafe {
        launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]).unwrap();
        b.fill(s, a, 3, 1 << 20).unwrap();
    }
    b.free(D0, MemoryKind::Device, a, Some(s)).unwrap();
    // The address is gone for the caller at once; the memory stays until the stream gets there.
    assert_eq!(b.stats().allocations, 0);
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 1 << 20);
    assert_eq!(
        code(b.free(D0, MemoryKind::Device, a, Some(s))),
        HostErrorCode::InvalidValue
    );
    gate.open();
    b.stream_synchronize(s).unwrap();
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 0);
    let log = b.work_log();
    let fill = log
        .iter()
        .find(|r| matches!(r.op, WorkOp::Fill { .. }))
        .unwrap();
    let free = log
        .iter()
        .find(|r| r.op == WorkOp::Free { address: a })
        .unwrap();
    assert!(free.started > fill.finished);
    b.stream_destroy(s).unwrap();
}

#[test]
fn a_synchronous_free_never_pulls_memory_from_queued_work() {
    let b = backend();
    let gate = Gate::install(&b);
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 4096).unwrap().unwrap();
    // SAFETY: no pointer arguments; `a` is a live allocation of `b`.
    unsafe {
        launch_named(&b, s, D0, "wait_gate", LaunchDims::linear(1, 1), &[]).unwrap();
        b.fill(s, a, 3, 4096).unwrap();
    }
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 4096);
    gate.open();
    b.stream_synchronize(s).unwrap();
    assert_eq!(b.device_memory_in_use(D0).unwrap(), 0);
    b.stream_destroy(s).unwrap();
}

#[test]
fn copies_must_stay_inside_the_allocations_they_touch() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 256).unwrap().unwrap();
    let mut host = vec![0u8; 512];
    let h = addr_mut(&mut host);
    // SAFETY: `host` outlives the stream's work and is untouched by the host; every call
    // here but the last, whose range is empty, is refused before anything is enqueued (a
    // range touching `a` partly, a null address, an overflowing range).
    unsafe {
        assert_eq!(code(b.copy(s, h, a, 257)), HostErrorCode::InvalidValue);
        assert_eq!(
            code(b.copy(s, a + 128, h, 129)),
            HostErrorCode::InvalidValue
        );
        assert_eq!(code(b.fill(s, a - 1, 0, 2)), HostErrorCode::InvalidValue);
        assert!(matches!(b.copy(s, 0, h, 1), Err(Error::NullPointer { .. })));
        assert!(matches!(
            b.fill(s, usize::MAX, 0, 2),
            Err(Error::AddressOverflow { .. })
        ));
        b.copy(s, h, a, 0).unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert_eq!(b.work_log().len(), 1);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    b.stream_destroy(s).unwrap();
}

#[test]
fn a_read_only_source_is_copied_as_plain_memory_and_never_overlaps_its_destination() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let a = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    let source: Vec<u8> = (0..64).collect();
    let shared: &[u8] = &source; // lent only through a shared borrow
    let mut back = vec![0u8; 64];
    // SAFETY: `source` stays borrowed and unwritten until the synchronise below, `back` is
    // untouched by the host meanwhile, `a` is a live allocation of `b`. The refused calls
    // enqueue nothing: a source sharing bytes with the destination (the same range too,
    // which a plain copy accepts) would be written while read.
    unsafe {
        b.copy_from_read_only(s, a, shared.as_ptr() as usize, 64)
            .unwrap();
        assert_eq!(
            code(b.copy_from_read_only(s, a + 8, a, 16)),
            HostErrorCode::InvalidValue
        );
        assert_eq!(
            code(b.copy_from_read_only(s, a, a, 16)),
            HostErrorCode::InvalidValue
        );
        b.copy(s, addr_mut(&mut back), a, 64).unwrap();
    }
    b.stream_synchronize(s).unwrap();
    assert_eq!(back, source);
    let copies = b
        .work_log()
        .into_iter()
        .filter_map(|record| match record.op {
            WorkOp::Copy {
                read_only_source, ..
            } => Some(read_only_source),
            _ => None,
        });
    assert_eq!(copies.collect::<Vec<_>>(), [true, false]);
    b.free(D0, MemoryKind::Device, a, None).unwrap();
    b.stream_destroy(s).unwrap();
}

#[test]
fn fill_elements_sets_16_and_32_bit_values_and_refuses_misaligned_or_overflowing_ones() {
    let b = backend();
    b.set_current_device(Some(D0)).unwrap();
    let s = b.stream_create(D0).unwrap();
    let buffer = b.allocate(D0, MemoryKind::Device, 64).unwrap().unwrap();
    // SAFETY: a live allocation of `b` (held by the backend while the work runs) and `host`,
    // untouched until the synchronise; so for every fill and copy below.
    unsafe { b.fill_elements(s, buffer, FillValue::U32(0x0102_0304), 8) }.unwrap();
    // SAFETY: as above.
    unsafe { b.fill_elements(s, buffer + 32, FillValue::U16(0xbeef), 16) }.unwrap();
    let mut host = [0u8; 64];
    // SAFETY: as above.
    unsafe { b.copy(s, addr_mut(&mut host), buffer, 64) }.unwrap();
    b.stream_synchronize(s).unwrap();
    let words: Vec<u32> = host[..32]
        .chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    let halves: Vec<u16> = host[32..]
        .chunks(2)
        .map(|c| u16::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [0x0102_0304; 8]);
    assert_eq!(halves, [0xbeef; 16]);

    // SAFETY: refused before anything is enqueued (a 4-byte element at a 2-byte offset).
    let misaligned = unsafe { b.fill_elements(s, buffer + 2, FillValue::U32(1), 1) };
    assert_eq!(code(misaligned), HostErrorCode::InvalidValue);
    // SAFETY: refused before anything is enqueued (the element count runs past the top of the
    // address space).
    let overflowing = unsafe { b.fill_elements(s, buffer, FillValue::U16(1), usize::MAX) };
    assert!(matches!(overflowing, Err(Error::AddressOverflow { .. })));
    b.stream_destroy(s).unwrap();
    b.free(D0, MemoryKind::Device, buffer, None).unwrap();
}
