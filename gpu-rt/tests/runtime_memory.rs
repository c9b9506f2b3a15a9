//! Memory through the runtime on the host backend: spans bounded and on their device, a buffer
//! freed while in use reused only after the use, overlapping copies refused, staged transfers of
//! pageable memory, and fills of 16- and 32-bit elements.

mod common;

use std::sync::{Mutex, mpsc};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::{FillValue, LaunchDims};
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{HostBackend, HostConfig};
use gpu_rt::runtime::{Arg, Runtime};

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(2))).unwrap()
}

#[test]
fn spans_are_bounded_and_device_memory_stays_on_its_device() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 100).unwrap();
    assert_eq!(
        buffer.span(90, 20).err(),
        Some(Error::OutOfBounds {
            offset: 90,
            len: 20,
            size: 100
        })
    );
    assert_eq!(
        buffer.span(usize::MAX, 2).err(),
        Some(Error::OutOfBounds {
            offset: usize::MAX,
            len: 2,
            size: 100
        })
    );
    assert!(matches!(buffer.span(0, 0), Err(Error::ZeroSize { .. })));
    assert_eq!(
        rt.fill(D1, buffer.all(), 0, &mut vec![]).err(),
        Some(Error::WrongDevice {
            expected: D1,
            found: D0
        })
    );
    let other = rt.alloc(D0, MemoryKind::Device, 50).unwrap();
    assert!(matches!(
        rt.copy(D0, other.all(), buffer.all(), &mut vec![]),
        Err(Error::OutOfBounds { .. })
    ));
}

/// A buffer dropped while a kernel that writes it is still running is not handed to another
/// stream before that kernel has finished. The buffer fills a segment of its own (20 MiB), so
/// the only block the allocator can hand out without growing is the one still in use.
#[test]
fn a_buffer_freed_while_in_use_is_reused_only_after_the_use() {
    const BLOCK: usize = 20 << 20;
    let backend = HostBackend::new(HostConfig::with_devices(1));
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let (order_tx, order_rx) = mpsc::channel::<&'static str>();
    let order_tx = Mutex::new(order_tx);
    backend.register_kernel("gated_write", move |ctx, _| {
        release_rx.lock().unwrap().recv().ok();
        let view = ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?;
        view.set(0, 0xdead)?;
        order_tx.lock().unwrap().send("gated write done").ok();
        Ok(())
    });
    let rt = Runtime::new(backend).unwrap();
    let first = rt.alloc(D0, MemoryKind::Device, BLOCK).unwrap();
    let address = first.address();
    // SAFETY: the kernel touches only the span it is given (or none).
    let written = unsafe {
        rt.launch(
            D0,
            "gated_write",
            LaunchDims::linear(1, 1),
            &[Arg::Span(first.all())],
            &mut vec![],
        )
    }
    .unwrap();
    drop(first); // freed while the kernel still waits for its gate
    let (second, ready) = rt
        .alloc_after(D0, MemoryKind::Device, BLOCK, &mut vec![])
        .unwrap();
    let filled = rt.fill(D0, second.all(), 7, &mut vec![ready]).unwrap();
    release_tx.send(()).unwrap();
    assert_eq!(order_rx.recv().unwrap(), "gated write done");
    rt.wait(written).unwrap();
    // Had the fill not been ordered after the gated kernel, the kernel's write would now sit
    // in the reused block.
    common::assert_reuse_waited(&rt, D0, (&second, address), filled, "the old kernel");
}

/// A copy whose source and destination share bytes is refused before anything is enqueued
/// (cuMemcpyAsync leaves the result undefined); adjacent ranges, and a range onto itself, are
/// fine.
#[test]
fn an_overlapping_copy_is_refused_and_adjacent_ranges_copy() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let operations = rt.stats().operations;
    let err = rt
        .copy(
            D0,
            buffer.span(64, 128).unwrap(),
            buffer.span(0, 128).unwrap(),
            &mut vec![],
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::CopyOverlap { dst, src } if dst.start == src.start + 64),
        "{err}"
    );
    assert_eq!(rt.stats().operations, operations, "nothing was planned");
    let copied = rt
        .copy(
            D0,
            buffer.span(128, 128).unwrap(),
            buffer.span(0, 128).unwrap(),
            &mut vec![],
        )
        .unwrap();
    let onto_itself = rt
        .copy(
            D0,
            buffer.span(0, 128).unwrap(),
            buffer.span(0, 128).unwrap(),
            &mut vec![copied],
        )
        .unwrap();
    rt.wait(onto_itself).unwrap();
}

/// Pageable memory goes through the pinned staging buffers in chunks, each copied on the host
/// by several threads (parts of 2 MiB): a 13 MiB round trip with odd sizes checks every byte.
#[test]
fn staged_transfers_of_pageable_memory_round_trip() {
    let rt = runtime();
    let size = (13 << 20) + 12345;
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let buffer = rt.alloc(D1, MemoryKind::Device, size).unwrap();
    let uploaded = rt.upload(D1, buffer.all(), &data, &mut vec![]).unwrap();
    let mut back = vec![0u8; size];
    rt.download(D1, &mut back, buffer.all(), &mut vec![uploaded])
        .unwrap();
    assert!(back == data, "the round trip changed the data");
}

#[test]
fn fill_elements_writes_16_and_32_bit_words_through_raw_spans() {
    let rt = runtime();
    let buffer = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    // SAFETY: a live buffer of this runtime, waited for below before it is freed.
    let raw = unsafe { gpu_rt::runtime::Span::from_raw(buffer.address(), 64) };
    let words = rt
        .fill_elements(
            D0,
            raw.sub(0, 32).unwrap(),
            FillValue::U32(0xa1b2_c3d4),
            &mut vec![],
        )
        .unwrap();
    let halves = rt
        .fill_elements(
            D0,
            raw.sub(32, 32).unwrap(),
            FillValue::U16(0x0bad),
            &mut vec![words],
        )
        .unwrap();
    let mut back = vec![0u8; 64];
    rt.download(D0, &mut back, buffer.all(), &mut vec![halves])
        .unwrap();
    assert!(
        back[..32]
            .chunks_exact(4)
            .all(|w| w == 0xa1b2_c3d4u32.to_ne_bytes())
    );
    assert!(
        back[32..]
            .chunks_exact(2)
            .all(|h| h == 0x0badu16.to_ne_bytes())
    );
    let ragged = rt.fill_elements(D0, raw.sub(0, 6).unwrap(), FillValue::U32(1), &mut vec![]);
    assert!(matches!(
        ragged,
        Err(Error::OutOfBounds {
            offset: 4,
            len: 4,
            size: 6
        })
    ));
}

/// An upload from pinned memory copies straight from the caller's slice, which is borrowed
/// only for the call: when the fork after the copy fails (here the driver cannot create the
/// fork's event), the call still returns only once the copy has run, so the caller may free
/// the memory with the error in hand. Before, it returned at once and the copy read freed
/// memory (found by the stress run with injected faults, on i686).
#[test]
fn a_failed_pinned_upload_returns_only_after_its_copy_read_the_memory() {
    use gpu_rt::host::CallKind;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let backend = HostBackend::new(HostConfig::with_devices(1));
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    backend.register_kernel("gate", move |_, _| {
        gate_rx.lock().unwrap().recv().ok();
        Ok(())
    });
    let rt = Runtime::new(backend).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let mut host = vec![7u8; 4096];
    let pinned = rt
        .lock_range(host.as_mut_ptr() as usize, host.len())
        .unwrap();
    assert_eq!(pinned.outcome, gpu_core::lock_table::LockOutcome::Pinned);
    // SAFETY: no pointer arguments.
    let gated = unsafe { rt.launch(D0, "gate", LaunchDims::linear(1, 1), &[], &mut vec![]) };
    let opened = Arc::new(AtomicBool::new(false));
    let opener = {
        let opened = Arc::clone(&opened);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            opened.store(true, Ordering::SeqCst);
            gate_tx.send(()).unwrap();
        })
    };
    rt.backend().fail_nth(CallKind::EventCreate, 1);
    let uploaded = rt.upload(D0, buffer.all(), &host, &mut vec![gated.unwrap()]);
    assert!(uploaded.is_err(), "the fork's event could not be created");
    assert!(
        opened.load(Ordering::SeqCst),
        "the upload returned before its copy could run"
    );
    opener.join().unwrap();
    rt.unlock_range(host.as_ptr() as usize).unwrap();
    drop(host);
    drop(buffer);
    let _ = rt.shutdown_report();
}
