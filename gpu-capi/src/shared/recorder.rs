//! The link to gpu-recorder when it records this process: our PyTorch plug-in's block events
//! (handed out, taken back, used on another stream) go into its trace through its hook.
//!
//! The hook is looked up once and cached by gpu-ffi-loader's `recorder` module (shared with the
//! CUDA and HIP backends' `note_buffer`); without the recorder every event costs one atomic
//! load and a branch, and nothing is written. The plug-in's blocks are `gpurt` blocks: each
//! names the stream it is handed out for, freed on, or used on, and the checker verifies the
//! allocator's promises about them.

use gpu_ffi_loader::recorder::BlockAllocator;
pub use gpu_ffi_loader::recorder::BlockEvent;

/// Tells the recorder, if it records this process, that `event` happened to the plug-in's
/// block of `bytes` at `address` on `stream` (a raw `CUstream`; 0 is the legacy default stream).
#[inline]
pub fn block_event(event: BlockEvent, address: usize, bytes: usize, stream: usize) {
    gpu_ffi_loader::recorder::block_event(
        BlockAllocator::TorchPlugin,
        event,
        address,
        bytes,
        stream,
    );
}
