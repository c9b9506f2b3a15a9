//! Memory behind handles: the value types that name it (`gpurt_memory_t`, spans, the
//! `GPURT_MEMORY_*` kinds, `gpurt_memory_info_t`), and allocating, freeing and describing it.

use std::ffi::c_void;
use std::sync::Arc;

use gpu_runtime::allocator::MemoryKind;
use gpu_runtime::id::DeviceId;
use gpu_runtime::token::Token;

use crate::shared::{
    CapiError, ClientBackend, GpurtStatus, Session, dispatch, status_of, with_session,
};

use super::args::{out_param, write_out};
use super::objects::Memory;
use super::tokens::{GpurtToken, token_out, tokens_in};

/// Memory the C API hands out: from the runtime's allocator (`gpurt_alloc`) or the caller's
/// host memory registered with it (`gpurt_host_register`). `{0}` is the null handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtMemory {
    /// The handle's value (opaque).
    pub id: u64,
}

/// Bytes `[offset, offset + len)` of a memory handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtSpan {
    /// The memory.
    pub memory: GpurtMemory,
    /// First byte, from the memory's start.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// Device memory: `gpurt_alloc`'s `kind`.
pub const GPURT_MEMORY_DEVICE: u32 = 0;
/// Managed memory (one address on the host and every device).
pub const GPURT_MEMORY_MANAGED: u32 = 1;
/// Page-locked host memory every device can reach.
pub const GPURT_MEMORY_PINNED: u32 = 2;
/// The caller's host memory registered with `gpurt_host_register` (in `gpurt_memory_info`).
pub const GPURT_MEMORY_REGISTERED: u32 = 3;

/// What a memory handle is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpurtMemoryInfo {
    /// The first byte: a device address for device memory, else a host pointer (usable by the
    /// host once the work that uses the memory has been waited for).
    pub address: *mut c_void,
    /// Bytes.
    pub size: usize,
    /// The device it belongs to (device memory), or was allocated for (`UINT32_MAX` for
    /// registered memory, which every device reaches).
    pub device: u32,
    /// One of the `GPURT_MEMORY_*` kinds.
    pub kind: u32,
}

/// What the C API says of the memory behind a handle.
impl<B: ClientBackend> Memory<B> {
    fn info(&self) -> GpurtMemoryInfo {
        match self {
            Memory::Buffer(buffer) => GpurtMemoryInfo {
                address: buffer.address() as *mut c_void,
                size: buffer.size(),
                device: buffer.device().0,
                kind: match buffer.kind() {
                    MemoryKind::Device => GPURT_MEMORY_DEVICE,
                    MemoryKind::Managed => GPURT_MEMORY_MANAGED,
                    MemoryKind::HostPinned => GPURT_MEMORY_PINNED,
                },
            },
            Memory::Registered { address, size, .. } => GpurtMemoryInfo {
                address: *address as *mut c_void,
                size: *size,
                device: u32::MAX,
                kind: GPURT_MEMORY_REGISTERED,
            },
        }
    }
}

fn memory_kind(kind: u32) -> Result<MemoryKind, CapiError> {
    match kind {
        GPURT_MEMORY_DEVICE => Ok(MemoryKind::Device),
        GPURT_MEMORY_MANAGED => Ok(MemoryKind::Managed),
        GPURT_MEMORY_PINNED => Ok(MemoryKind::HostPinned),
        other => Err(CapiError::InvalidArgument {
            what: "memory kind",
            detail: format!(
                "{other} is not GPURT_MEMORY_DEVICE (0), GPURT_MEMORY_MANAGED (1) or \
                 GPURT_MEMORY_PINNED (2)"
            ),
        }),
    }
}

fn alloc<B: ClientBackend>(
    s: &'static Session<B>,
    device: u32,
    kind: MemoryKind,
    size: usize,
) -> Result<GpurtMemory, CapiError> {
    let (id, ()) = s.capi.memory.insert_with(|| -> Result<_, CapiError> {
        let buffer = s.runtime().alloc(DeviceId(device), kind, size)?;
        Ok((Arc::new(Memory::Buffer(buffer)), ()))
    })?;
    Ok(GpurtMemory { id })
}

fn alloc_after<B: ClientBackend>(
    s: &'static Session<B>,
    device: u32,
    kind: MemoryKind,
    size: usize,
    after: &mut Vec<Token>,
) -> Result<(GpurtMemory, GpurtToken), CapiError> {
    // The handle is taken first: once the runtime has consumed `after`, nothing can fail.
    let (id, token) = s.capi.memory.insert_with(|| -> Result<_, CapiError> {
        let (buffer, token) = s
            .runtime()
            .alloc_after(DeviceId(device), kind, size, after)?;
        Ok((Arc::new(Memory::Buffer(buffer)), token))
    })?;
    Ok((GpurtMemory { id }, token_out(token)))
}

fn free<B: ClientBackend>(s: &Session<B>, memory: GpurtMemory) -> Result<(), CapiError> {
    match take(s, memory, false)? {
        Some(Memory::Buffer(buffer)) => Ok(s.runtime().free(buffer)?),
        _ => Ok(()),
    }
}

/// Takes allocated (or, with `registered`, registered) memory out of the table: the other
/// kind is refused and left there. `None` when a call on another thread still holds the memory:
/// it is released when that call ends.
pub(super) fn take<B: ClientBackend>(
    s: &Session<B>,
    memory: GpurtMemory,
    registered: bool,
) -> Result<Option<Memory<B>>, CapiError> {
    let removed = s.capi.memory.remove_if(memory.id, |held| {
        let release_with = match (&**held, registered) {
            (Memory::Registered { .. }, false) => {
                "registered host memory: release it with \
                                                    gpurt_host_unregister"
            }
            (Memory::Buffer(_), true) => "allocated memory: release it with gpurt_free",
            _ => return Ok(()),
        };
        Err(CapiError::InvalidArgument {
            what: "memory",
            detail: format!("handle {:#x} is {release_with}", memory.id),
        })
    })?;
    Ok(Arc::try_unwrap(removed).ok())
}

fn memory_info<B: ClientBackend>(
    s: &Session<B>,
    memory: GpurtMemory,
) -> Result<GpurtMemoryInfo, CapiError> {
    Ok(s.capi.memory.get(memory.id)?.info())
}

/// The memory a span names, held for the duration of a call.
pub(super) fn held<B: ClientBackend>(
    s: &Session<B>,
    span: &GpurtSpan,
) -> Result<Arc<Memory<B>>, CapiError> {
    Ok(s.capi.memory.get(span.memory.id)?)
}

/// Allocates `size` bytes of `kind` (`GPURT_MEMORY_DEVICE`, `_MANAGED` or `_PINNED`) for
/// `device`, usable at once by every stream (and by the host, for managed and pinned memory).
/// Served from the caching allocator when it can be (no driver call). Writes the handle to
/// `*memory`; release it with `gpurt_free`.
///
/// Thread safety: any thread; allocations on different devices do not wait for each other.
///
/// # Safety
/// `memory` points to writable memory for a `gpurt_memory`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_alloc(
    device: u32,
    kind: u32,
    size: usize,
    memory: *mut GpurtMemory,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(memory, "memory out-parameter")?;
        let kind = memory_kind(kind)?;
        let memory = with_session(|s| dispatch!(s, s => alloc(s, device, kind, size)))?;
        write_out(out, memory);
        Ok(())
    })
}

/// Allocates as `gpurt_alloc` does, in stream order: the memory is usable by work that runs
/// after the token written to `*done` (stream-ordered on the device where the driver can, so
/// the call does not wait for `after`). Consumes the `after_count` tokens of `after` on success;
/// a refused call leaves them valid.
///
/// Thread safety: any thread.
///
/// # Safety
/// `after` points to `after_count` tokens (or is NULL with 0); `memory` and `done` point to
/// writable memory of their types.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_alloc_after(
    device: u32,
    kind: u32,
    size: usize,
    after: *const GpurtToken,
    after_count: usize,
    memory: *mut GpurtMemory,
    done: *mut GpurtToken,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(memory, "memory out-parameter")?;
        let done = out_param(done, "done token out-parameter")?;
        let kind = memory_kind(kind)?;
        // SAFETY: `gpurt_alloc_after`'s contract: `after` points to `after_count` tokens (or is
        // NULL with 0).
        let mut after = unsafe { tokens_in(after, after_count) }?;
        let (memory, token) =
            with_session(|s| dispatch!(s, s => alloc_after(s, device, kind, size, &mut after)))?;
        write_out(out, memory);
        write_out(done, token);
        Ok(())
    })
}

/// Frees memory from `gpurt_alloc`/`gpurt_alloc_after`. The bytes are reused only after every
/// stream that used them has finished with them (no wait here). The handle is invalid
/// afterwards: a second free is `GPURT_STATUS_INVALID_HANDLE`. A bad handle changes nothing; a
/// failure the runtime reports while taking the memory back (a driver error) is returned, and
/// the handle is released all the same.
///
/// Thread safety: any thread; a call on another thread that still uses the memory keeps it
/// until that call returns.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_free(memory: GpurtMemory) -> GpurtStatus {
    status_of(|| with_session(|s| dispatch!(s, s => free(s, memory))))
}

/// Writes what `memory` is (address, size, device, kind) to `*info`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `info` points to writable memory for a `gpurt_memory_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_memory_info(
    memory: GpurtMemory,
    info: *mut GpurtMemoryInfo,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(info, "memory info out-parameter")?;
        let found = with_session(|s| dispatch!(s, s => memory_info(s, memory)))?;
        write_out(out, found);
        Ok(())
    })
}
