//! The runtime's buffers on the CUDA backend reach gpu-recorder through `note_buffer`: a hook
//! installed in place of the recorder's hears each buffer handed out and taken back, and
//! through `note_launch_footprint` each launch's exact footprint.

use std::sync::{Mutex, PoisonError};

use gpu_ffi_loader::recorder::install_block_hook;
use gpu_rt::runtime::{Arg, Runtime};

use super::*;

/// The block events heard: `(op, address, bytes, stream)`.
static SEEN: Mutex<Vec<(u32, u64, u64, u64)>> = Mutex::new(Vec::new());

extern "C" fn watch(op: u32, address: u64, bytes: u64, stream: u64) {
    SEEN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((op, address, bytes, stream));
}

/// `gpurt_region` (allocator byte 3): handed out, taken back.
const REGION_ALLOC: u32 = 0x300;
const REGION_FREE: u32 = 0x301;

#[test]
fn the_runtimes_buffers_cached_ones_too_reach_the_recorder_as_regions_of_their_requested_size() {
    install_block_hook(watch);
    let rt = Runtime::new(fake_backend()).unwrap();
    let a = rt.alloc(D0, MemoryKind::Device, 1000).unwrap();
    let b = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let (a_at, b_at) = (a.address(), b.address());
    rt.free(a).unwrap();
    // From the cache: no driver call, still a buffer the recorder must hear of.
    let c = rt.alloc(D0, MemoryKind::Device, 300).unwrap();
    let c_at = c.address();
    rt.free(c).unwrap();
    rt.free(b).unwrap();
    let ours = [a_at, b_at, c_at].map(|at| at as u64);
    let seen: Vec<_> = SEEN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .copied()
        .filter(|&(_, address, _, _)| ours.contains(&address))
        .collect();
    let [a_at, b_at, c_at] = ours;
    assert_eq!(
        seen,
        [
            (REGION_ALLOC, a_at, 1000, 0),
            (REGION_ALLOC, b_at, 4096, 0),
            (REGION_FREE, a_at, 1000, 0),
            (REGION_ALLOC, c_at, 300, 0),
            (REGION_FREE, c_at, 300, 0),
            (REGION_FREE, b_at, 4096, 0),
        ]
    );
}

#[test]
fn a_library_launch_on_a_sub_span_announces_the_bytes_it_writes_before_it_launches() {
    install_block_hook(watch);
    let rt = Runtime::new(fake_backend()).unwrap();
    let buffer = rt.alloc(D0, MemoryKind::Device, 4096).unwrap();
    let span = buffer.all().sub(1024, 64).unwrap();
    let args = [Arg::Span(span), Arg::U32(7), Arg::U64(16)];
    // SAFETY: a library kernel: the runtime checks how far it reaches into each span (the fake
    // driver runs nothing).
    let done = unsafe {
        rt.launch(
            D0,
            "fill_u32",
            LaunchDims::linear(1, 16),
            &args,
            &mut vec![],
        )
    };
    rt.wait(done.unwrap()).unwrap();
    let seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let at = (buffer.address() + 1024) as u64;
    // `fill_u32` writes (access byte 2) its 16 words, not the buffer.
    let written = seen
        .iter()
        .position(|&(op, address, bytes, _)| (op, address, bytes) == (0x203, at, 64))
        .unwrap_or_else(|| panic!("no footprint of {at:#x} in {seen:x?}"));
    let stream = seen[written].3;
    assert!(
        seen[..written]
            .iter()
            .any(|&(op, _, bytes, on)| (op, bytes, on) == (0x003, 1, stream)),
        "{seen:x?}"
    );
}
