//! Unit tests of the host backend: one per rule of the module documentation, by concern:
//! devices, streams and events, memory, host registration, kernels, faults, peers, shutdown.
//!
//! The helpers every group uses (a backend, read-backs, the gate kernel, named launches) are
//! here.

mod devices;
mod faults;
mod kernels;
mod lifecycle;
mod memory;
mod peers;
mod registration;
mod streams;

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use super::*;
use gpu_core::allocator::KindSupport;

const D0: DeviceId = DeviceId(0);
const D1: DeviceId = DeviceId(1);

fn backend() -> HostBackend {
    HostBackend::new(HostConfig::default())
}

fn code<T: core::fmt::Debug>(result: Result<T>) -> HostErrorCode {
    let error = result.expect_err("the call should fail");
    HostErrorCode::of(&error).unwrap_or_else(|| panic!("not a host driver error: {error:?}"))
}

fn addr<T>(data: &[T]) -> usize {
    data.as_ptr() as usize
}

fn addr_mut<T>(data: &mut [T]) -> usize {
    data.as_mut_ptr() as usize
}

/// Copies `bytes` of device memory at `src` into a fresh vector (synchronising `stream`).
///
/// # Safety
/// `[src, src + bytes)` lies in a live allocation of `b`.
unsafe fn read_back(b: &HostBackend, stream: HostStream, src: usize, bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    // SAFETY: `out` is ours until the stream is synchronised below; the caller vouches for `src`.
    unsafe { b.copy(stream, addr_mut(&mut out), src, bytes) }.unwrap();
    b.stream_synchronize(stream).unwrap();
    out
}

/// Copies `n` values of type `T` at `src` into a fresh vector (synchronising `stream`).
///
/// # Safety
/// As for [`read_back`], for `n * size_of::<T>()` bytes.
unsafe fn read_words<T: Copy + Default>(
    b: &HostBackend,
    stream: HostStream,
    src: usize,
    n: usize,
) -> Vec<T> {
    let mut out = vec![T::default(); n];
    // SAFETY: as in `read_back`.
    unsafe { b.copy(stream, addr_mut(&mut out), src, n * size_of::<T>()) }.unwrap();
    b.stream_synchronize(stream).unwrap();
    out
}

/// A kernel (registered as "wait_gate") that blocks until the test opens the gate.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn install(b: &HostBackend) -> Arc<Gate> {
        let gate = Arc::new(Gate::default());
        let kernel_gate = gate.clone();
        b.register_kernel("wait_gate", move |_, _| {
            let mut open = lock(&kernel_gate.open);
            while !*open {
                open = kernel_gate
                    .opened
                    .wait(open)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            Ok(())
        });
        gate
    }

    fn open(&self) {
        *lock(&self.open) = true;
        self.opened.notify_all();
    }
}

/// Loads kernel `name` on `device` and launches it on `stream`.
///
/// # Safety
/// A pointer argument that lies in a registered host range keeps that memory valid, registered
/// and untouched by the host until the kernel has run (the host backend's `launch` contract).
unsafe fn launch_named(
    b: &HostBackend,
    stream: HostStream,
    device: DeviceId,
    name: &str,
    dims: LaunchDims,
    args: &[KernelArg],
) -> Result<()> {
    let kernel = b.kernel(device, name)?;
    // SAFETY: the caller's obligation, passed on.
    unsafe { b.launch(stream, kernel, dims, args) }
}

fn zero_stats(b: &HostBackend) {
    let stats = b.stats();
    assert_eq!(
        HostStats {
            faults_injected: stats.faults_injected,
            draining_streams: stats.draining_streams,
            ..HostStats::default()
        },
        stats
    );
}
