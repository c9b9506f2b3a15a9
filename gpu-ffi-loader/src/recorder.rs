//! The link to gpu-recorder when it records this process: a sub-allocator's block events go
//! into its trace through the hook it exports, looked up once and cached, absence included.
//!
//! gpu-recorder is the CUPTI injection library `CUDA_INJECTION64_PATH` names; the driver loads
//! it at `cuInit`, with `RTLD_LOCAL`, so its symbols are not in the global scope (`dlsym` with
//! `RTLD_DEFAULT` does not see them). Its hook, `gpu_recorder_block(op, address, bytes,
//! stream)`, is looked up at the first block event in that library if it is already loaded
//! (`dlopen` with `RTLD_NOLOAD`: nothing is loaded here, no initialiser runs). Without it (no
//! recorder, another platform) every later event costs one atomic load and a branch.
//!
//! `op`'s low byte is the [`BlockEvent`], its second byte the [`BlockAllocator`] (the
//! recorder's `block_event` decodes it so).
//!
//! [`note_buffer`] is what the CUDA and HIP backends' `Backend::note_buffer` do: a runtime's
//! caching allocator carved a buffer out of a segment (2 MiB, 20 MiB) the backend allocated,
//! or took it back. Its block event names no stream (`gpurt_region`, written as a comment, as
//! NVTX regions are), unlike the PyTorch plug-in's `gpurt` blocks (a `block_alloc` line on a
//! stream, whose reuse the checker orders after the streams of its `block_free` and
//! `block_use`). Why no stream: the trait's hook has none to give (a buffer is allocated
//! without one, and freed after every stream that used it), and none is needed. The runtime
//! hands a buffer out again only in an order it enforces itself with driver calls the recorder
//! sees: on the stream it was freed on (stream order), or after events recorded on each stream
//! that used it and waited for by the next one. So the checker sees the accesses of the same
//! bytes by both buffers' kernels and the real synchronisation between them; a missing one is
//! still a race. What the region adds is the narrowing: a launch's parameter inside the buffer
//! counts as the buffer, not as its whole segment, so two streams using different buffers of
//! one segment no longer look like they use the same memory. Buffers the PyTorch plug-in hands
//! out are reported both ways (its `gpurt` block, and the runtime's region, the same bytes).

use core::ffi::c_void;
use core::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use gpu_core::ByteRange;
use gpu_core::backend::Access;

/// `gpu_recorder_block(op, address, bytes, stream)`, as gpu-recorder exports it.
pub type BlockHook = extern "C" fn(u32, u64, u64, u64);

/// What happened to a block, as the hook numbers it (`op`'s low byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BlockEvent {
    /// The allocator handed the block out.
    Alloc = 0,
    /// The allocator took the block back.
    Free = 1,
    /// The block is used on the stream too (PyTorch's `record_stream`).
    Use = 2,
}

/// Which allocator reports the block, as the hook numbers it (`op`'s second byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BlockAllocator {
    /// Our runtime's PyTorch plug-in (`gpurt`): blocks handed out for a stream, whose
    /// promises about streams the checker verifies.
    TorchPlugin = 0,
    /// A runtime's caching allocator through `Backend::note_buffer` (`gpurt_region`): a
    /// buffer names no stream, it only narrows footprints (the runtime orders each reuse with
    /// driver events the recorder sees).
    RuntimeBuffer = 3,
}

/// The cache value of a hook not found (never a real address).
const MISSING: *mut c_void = ptr::without_provenance_mut(1);

/// Null until looked up, then the hook's address or [`MISSING`].
static HOOK: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

/// The environment variable naming the injection library.
const INJECTION_VAR: &str = "CUDA_INJECTION64_PATH";

/// Tells the recorder, if it records this process, that `event` happened to `allocator`'s
/// block of `bytes` at `address` on `stream` (a raw `CUstream`; 0 is the legacy default
/// stream, and the stream of a block that names none).
#[inline]
pub fn block_event(
    allocator: BlockAllocator,
    event: BlockEvent,
    address: usize,
    bytes: usize,
    stream: usize,
) {
    let mut hook = HOOK.load(Ordering::Acquire);
    if hook == MISSING {
        return;
    }
    if hook.is_null() {
        hook = look_up();
    }
    if hook == MISSING {
        return;
    }
    // SAFETY: the cache holds MISSING, or an address of a `BlockHook` (found in the recorder,
    // which exports it with exactly this signature, or installed as one).
    let hook = unsafe { core::mem::transmute::<*mut c_void, BlockHook>(hook) };
    let op = ((allocator as u32) << 8) | event as u32;
    // usize is at most 64 bits on every target the toolkit builds for.
    hook(op, address as u64, bytes as u64, stream as u64);
}

/// Tells the recorder, if it records this process, that a runtime's allocator handed out the
/// buffer `range` (`live`) or took it back: a `gpurt_region` block, naming no stream (the
/// module's doc says why). Without the recorder it costs one atomic load and a branch.
#[inline]
pub fn note_buffer(range: ByteRange, live: bool) {
    let event = if live {
        BlockEvent::Alloc
    } else {
        BlockEvent::Free
    };
    block_event(
        BlockAllocator::RuntimeBuffer,
        event,
        range.start,
        range.len,
        0,
    );
}

/// The event number (`op`'s low byte) of a launch footprint's begin and ranges.
pub const FOOTPRINT_EVENT: u32 = 3;

/// Whether the recorder records this process (or a hook was installed): a launch's footprint
/// is then worth building. Without it: one atomic load and a branch, once looked up.
#[inline]
pub fn footprints_wanted() -> bool {
    let hook = HOOK.load(Ordering::Acquire);
    if hook.is_null() {
        return look_up() != MISSING;
    }
    hook != MISSING
}

/// Tells the recorder, if it records this process, that the calling thread's next launch of
/// `function` (a raw `CUfunction` or `hipFunction_t`) on `stream` (a raw stream handle) reaches
/// exactly `ranges`, each with its access (the module's doc gives the encoding).
pub fn note_launch_footprint(function: usize, stream: usize, ranges: &[(ByteRange, Access)]) {
    let hook = HOOK.load(Ordering::Acquire);
    let hook = if hook.is_null() { look_up() } else { hook };
    if hook == MISSING {
        return;
    }
    // SAFETY: as in `block_event`: the cache holds an address of a `BlockHook`.
    let hook = unsafe { core::mem::transmute::<*mut c_void, BlockHook>(hook) };
    // usize is at most 64 bits on every target the toolkit builds for.
    let (function, stream) = (function as u64, stream as u64);
    hook(FOOTPRINT_EVENT, function, ranges.len() as u64, stream);
    for (range, access) in ranges {
        let access = match access {
            Access::Read => 1,
            Access::Write => 2,
            Access::ReadWrite => 3,
        };
        let op = (access << 8) | FOOTPRINT_EVENT;
        hook(op, range.start as u64, range.len as u64, stream);
    }
}

/// Makes `hook` receive every later block event instead of the recorder's (a program that
/// links a recorder in itself, or a test that watches the events).
pub fn install_block_hook(hook: BlockHook) {
    HOOK.store(hook as *mut c_void, Ordering::Release);
}

/// Looks the hook up and caches the answer (two threads looking at once get the same one).
#[cold]
fn look_up() -> *mut c_void {
    let found = find_hook().map_or(MISSING, |symbol| symbol.as_ptr());
    match HOOK.compare_exchange(ptr::null_mut(), found, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => found,
        // Installed (or found by another thread) meanwhile: that one stands.
        Err(current) => current,
    }
}

#[cfg(unix)]
fn find_hook() -> Option<ptr::NonNull<c_void>> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::env::var_os(INJECTION_VAR).filter(|path| !path.is_empty())?;
    let path = std::ffi::CString::new(path.as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path; RTLD_NOLOAD only finds a library already loaded (it runs
    // no initialiser), and the handle it returns is kept open for the process.
    let library = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if library.is_null() {
        return None;
    }
    // SAFETY: a handle dlopen returned, and a NUL-terminated name.
    ptr::NonNull::new(unsafe { libc::dlsym(library, c"gpu_recorder_block".as_ptr()) })
}

#[cfg(not(unix))]
fn find_hook() -> Option<ptr::NonNull<c_void>> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<(u32, u64, u64, u64)>> = Mutex::new(Vec::new());

    extern "C" fn watch(op: u32, address: u64, bytes: u64, stream: u64) {
        SEEN.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((op, address, bytes, stream));
    }

    #[test]
    fn without_the_recorder_nothing_is_called_and_an_installed_hook_hears_each_event() {
        // The test process has no injection library loaded, whatever the variable says.
        block_event(
            BlockAllocator::RuntimeBuffer,
            BlockEvent::Alloc,
            0x1000,
            64,
            0,
        );
        assert_eq!(HOOK.load(Ordering::Acquire), MISSING);
        assert!(!footprints_wanted());
        install_block_hook(watch);
        block_event(
            BlockAllocator::RuntimeBuffer,
            BlockEvent::Alloc,
            0x1000,
            64,
            0,
        );
        block_event(
            BlockAllocator::RuntimeBuffer,
            BlockEvent::Free,
            0x1000,
            64,
            0,
        );
        block_event(
            BlockAllocator::TorchPlugin,
            BlockEvent::Use,
            0x2000,
            0,
            0x30,
        );
        let range = ByteRange::new(0x3000, 100).unwrap_or_else(|| unreachable!());
        note_buffer(range, true);
        note_buffer(range, false);
        assert!(footprints_wanted());
        note_launch_footprint(
            0xf1,
            0x30,
            &[(range, Access::Read), (range, Access::ReadWrite)],
        );
        assert_eq!(
            *SEEN.lock().unwrap_or_else(|e| e.into_inner()),
            [
                (0x300, 0x1000, 64, 0),
                (0x301, 0x1000, 64, 0),
                (0x002, 0x2000, 0, 0x30),
                (0x300, 0x3000, 100, 0),
                (0x301, 0x3000, 100, 0),
                (0x003, 0xf1, 2, 0x30),
                (0x103, 0x3000, 100, 0x30),
                (0x303, 0x3000, 100, 0x30),
            ]
        );
    }
}
