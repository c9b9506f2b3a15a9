//! The link to gpu-recorder when it records this process: our allocator's block events
//! (handed out, taken back, used on another stream) go into its trace through its hook.
//!
//! gpu-recorder is the CUPTI injection library `CUDA_INJECTION64_PATH` names; the driver loads
//! it at `cuInit`. The hook, `gpu_recorder_block`, is looked up once, at the first block event,
//! in that library if it is already loaded (`dlopen` with `RTLD_NOLOAD`: nothing is loaded
//! here); without it (no recorder, another platform) every event costs one load of a cached
//! pointer and nothing is written.

use std::sync::OnceLock;

/// What happened to a block, as the hook numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BlockEvent {
    /// The allocator handed the block out for the stream.
    Alloc = 0,
    /// The block went back into the stream's pool.
    Free = 1,
    /// The block is used on the stream too (PyTorch's `record_stream`).
    Use = 2,
}

/// `gpu_recorder_block(op, address, bytes, stream)`, as gpu-recorder exports it.
type BlockHook = extern "C" fn(u32, u64, u64, u64);

/// The environment variable naming the injection library.
const INJECTION_VAR: &str = "CUDA_INJECTION64_PATH";

static HOOK: OnceLock<Option<BlockHook>> = OnceLock::new();

/// Tells the recorder, if it records this process, that `event` happened to the block of
/// `bytes` at `address` on `stream` (a raw `CUstream`; 0 is the legacy default stream).
pub fn block_event(event: BlockEvent, address: usize, bytes: usize, stream: usize) {
    if let Some(hook) = *HOOK.get_or_init(find_hook) {
        // usize is at most 64 bits on every target the library builds for.
        hook(event as u32, address as u64, bytes as u64, stream as u64);
    }
}

#[cfg(unix)]
fn find_hook() -> Option<BlockHook> {
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
    let symbol = unsafe { libc::dlsym(library, c"gpu_recorder_block".as_ptr()) };
    if symbol.is_null() {
        return None;
    }
    // SAFETY: gpu-recorder exports `gpu_recorder_block` with exactly this signature.
    Some(unsafe { core::mem::transmute::<*mut core::ffi::c_void, BlockHook>(symbol) })
}

#[cfg(not(unix))]
fn find_hook() -> Option<BlockHook> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_recorder_loaded_a_block_event_does_nothing() {
        // The test process has no injection library loaded, whatever the variable says.
        block_event(BlockEvent::Alloc, 0x1000, 64, 0);
        assert_eq!(HOOK.get().copied(), Some(None));
    }
}
