//! The runtime's buffers on the CUDA backend reach gpu-recorder through `note_buffer`: a hook
//! installed in place of the recorder's hears each buffer handed out and taken back.

use std::sync::{Mutex, PoisonError};

use gpu_ffi_loader::recorder::install_block_hook;
use gpu_rt::runtime::Runtime;

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
