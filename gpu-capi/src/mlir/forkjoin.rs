//! One iteration of `clients/mlir/forkjoin.mlir` as LLVM 22's lowering calls the ABI, for the
//! tests (`mlir::tests`) and the bench (`benches/mlir.rs`, which includes this file by path).
//!
//! Its parent module brings the `mgpu*` functions into scope (the library's `mlir`, or the
//! bench's root through `gpu_capi::mlir`).

use std::ffi::c_void;

use super::{
    mgpuEventCreate, mgpuEventDestroy, mgpuEventRecord, mgpuMemAlloc, mgpuMemFree, mgpuMemcpy,
    mgpuMemset32, mgpuStreamCreate, mgpuStreamDestroy, mgpuStreamSynchronize, mgpuStreamWaitEvent,
};

/// Words in each of the iteration's buffers.
pub(crate) const WORDS: usize = 64;

/// One iteration (the kernels as memsets, which the host backend runs): allocations, a copy in
/// and a first operation on `s1`, `e1` recorded, a second operation on `s1`, `e2` recorded, a
/// new stream `s2` waiting on both events (the join), an operation, a copy out and the frees
/// on `s2`, `s2` synchronised and destroyed. `s1`, the join's input, is never destroyed. Every
/// word of `out` is 8 afterwards.
pub(crate) fn forkjoin_iteration(input: &[u32; WORDS], out: &mut [u32; WORDS]) {
    const BYTES: u64 = WORDS as u64 * 4;
    let s1 = mgpuStreamCreate();
    let [x, y, z] = [0; 3].map(|_| mgpuMemAlloc(BYTES, s1, false));
    mgpuMemcpy(x, input.as_ptr() as *mut c_void, BYTES, s1);
    mgpuMemset32(y, 2, WORDS as u64, s1);
    let e1 = mgpuEventCreate();
    mgpuEventRecord(e1, s1);
    mgpuMemset32(z, 4, WORDS as u64, s1);
    let e2 = mgpuEventCreate();
    mgpuEventRecord(e2, s1);
    let s2 = mgpuStreamCreate();
    mgpuStreamWaitEvent(s2, e1);
    mgpuStreamWaitEvent(s2, e2);
    mgpuEventDestroy(e1);
    mgpuEventDestroy(e2);
    mgpuMemset32(x, 8, WORDS as u64, s2);
    mgpuMemcpy(out.as_mut_ptr().cast(), x, BYTES, s2);
    for buffer in [x, y, z] {
        mgpuMemFree(buffer, s2);
    }
    mgpuStreamSynchronize(s2);
    mgpuStreamDestroy(s2);
}
