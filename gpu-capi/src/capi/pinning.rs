//! The caller's host memory pinned for transfers: registrations (`gpurt_host_register`, with a
//! memory handle) and handle-less locks (`gpurt_lock`), and looking pinned ranges up.

use std::ffi::c_void;
use std::sync::Arc;

use gpu_runtime::id::DeviceId;

use crate::shared::{
    CapiError, ClientBackend, GpurtStatus, Session, dispatch, status_of, with_session,
};

use super::args::{out_param, write_out};
use super::memory::{GpurtMemory, take};
use super::objects::Memory;
use crate::shared::args::non_null;

fn register<B: ClientBackend>(
    s: &'static Session<B>,
    ptr: *mut c_void,
    len: usize,
) -> Result<GpurtMemory, CapiError> {
    let address = non_null(ptr, "registered memory")?;
    let (id, ()) = s.capi.memory.insert_with(|| -> Result<_, CapiError> {
        // SAFETY: `gpurt_host_register`'s contract: the memory stays valid until unregistered,
        // and the host keeps off it while transfers that use it may run.
        let guard = unsafe { s.runtime().lock_host_raw(ptr.cast::<u8>(), len) }?;
        let memory = Memory::Registered {
            guard,
            address,
            size: len,
        };
        Ok((Arc::new(memory), ()))
    })?;
    Ok(GpurtMemory { id })
}

fn unregister<B: ClientBackend>(s: &Session<B>, memory: GpurtMemory) -> Result<(), CapiError> {
    match take(s, memory, true)? {
        Some(Memory::Registered { guard, .. }) => Ok(guard.unlock()?),
        _ => Ok(()),
    }
}

/// Registers (pins) the caller's host memory `[ptr, ptr + len)` for transfers by every device,
/// through the lock table: a range inside a registered or locked one costs no driver call
/// (counted); a range that overlaps one without lying inside it is `GPURT_STATUS_OVERLAP`.
/// Writes a memory handle to `*memory`, for spans of copies and launches; release it with
/// `gpurt_host_unregister`. The registration owns its lock: `gpurt_unlock` never releases it
/// (`GPURT_STATUS_PIN_OWNED`), so the memory stays pinned until it is unregistered.
///
/// Thread safety: any thread.
///
/// # Safety
/// The memory stays valid until unregistered (or shutdown); the host does not write it while a
/// transfer from it may run, nor touch it while a transfer into it may run (wait for their
/// tokens). `memory` points to writable memory for a `gpurt_memory`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_host_register(
    ptr: *mut c_void,
    len: usize,
    memory: *mut GpurtMemory,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(memory, "memory out-parameter")?;
        let registered = with_session(|s| dispatch!(s, s => register(s, ptr, len)))?;
        write_out(out, registered);
        Ok(())
    })
}

/// Unregisters memory from `gpurt_host_register`: waits for the transfers that used it, then
/// drops the registration's lock (the range's last lock unpins). The handle is invalid
/// afterwards. A bad handle changes nothing; a failure of those transfers or of the unpin is
/// returned, and the handle is released all the same.
///
/// Thread safety: any thread; blocks the caller until those transfers have finished.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_host_unregister(memory: GpurtMemory) -> GpurtStatus {
    status_of(|| with_session(|s| dispatch!(s, s => unregister(s, memory))))
}

/// Locks (pins) host range `[ptr, ptr + len)` in the lock table without a handle: counted like
/// a registration (nested ranges cost no driver call; a partial overlap is refused). Undo with
/// `gpurt_unlock`, which releases only such locks, never a registration's. For memory that is
/// transferred by others who look it up (`gpurt_lookup`); to use the memory in this API's
/// copies, register it instead.
///
/// Thread safety: any thread.
///
/// # Safety
/// The memory stays valid until unlocked.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_lock(ptr: *const c_void, len: usize) -> GpurtStatus {
    status_of(|| {
        let address = non_null(ptr, "lock start")?;
        with_session(|s| dispatch!(s, s => Ok(s.runtime().lock_range(address, len).map(drop)?)))
    })
}

/// Drops one `gpurt_lock` lock of the locked range containing `ptr` (any byte of it); the
/// range's last lock unpins. `GPURT_STATUS_NOT_LOCKED` when no locked range contains `ptr`;
/// `GPURT_STATUS_PIN_OWNED` when the range holds no `gpurt_lock` lock, only registrations'
/// (`gpurt_host_register`): those go with `gpurt_host_unregister`, and the range stays pinned.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_unlock(ptr: *const c_void) -> GpurtStatus {
    status_of(|| {
        let address = non_null(ptr, "unlock pointer")?;
        with_session(|s| dispatch!(s, s => Ok(s.runtime().unlock_range(address).map(drop)?)))
    })
}

/// Writes to `*device_address` the address `device` uses for host range `[ptr, ptr + len)` if
/// every byte of it is locked or registered, else NULL.
///
/// Thread safety: any thread; lookups never wait for each other.
///
/// # Safety
/// `device_address` points to writable memory for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_lookup(
    ptr: *const c_void,
    len: usize,
    device: u32,
    device_address: *mut *mut c_void,
) -> GpurtStatus {
    status_of(|| {
        let out = out_param(device_address, "device address out-parameter")?;
        let address = non_null(ptr, "lookup pointer")?;
        let found = with_session(
            |s| dispatch!(s, s => Ok(s.runtime().pinned_address(address, len, DeviceId(device))?)),
        )?;
        write_out(out, found.unwrap_or(0) as *mut c_void);
        Ok(())
    })
}
