//! Copies: DMA copies (hsa_amd_memory_async_copy) on a stream with each side named by its
//! agent, and which GPUs reach each other's memory (peer access and peer copies).

use core::ffi::c_void;

use gpu_core::{DeviceId, Error, Result};

use super::pools::{self, CopyAgents, free_pool_memory};
use super::stream::StreamState;
use super::{HsaBackend, HsaStream, lock};
use crate::result::{check, driver_error};
use crate::sys;

/// The error for peer access, or a peer copy, between GPUs that cannot have it: one's device
/// pool is `NEVER_ALLOWED` for the other's agent (or, for enabling, a device and itself).
pub(super) fn no_peer_access() -> Error {
    Error::Driver(driver_error(
        "hsa_amd_agent_memory_pool_get_info (peer access never allowed)",
        sys::HSA_STATUS_ERROR_INVALID_AGENT,
    ))
}

impl HsaBackend {
    /// [`Backend::peer_access_possible`](gpu_core::backend::Backend::peer_access_possible):
    /// whether `device`'s agent is among those that may reach `peer`'s pool.
    pub(super) fn reaches(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        let agent = self.device(device)?.agent;
        let peers = &self.device(peer)?.peers;
        Ok(device != peer && peers.iter().any(|p| p.handle == agent.handle))
    }

    /// [`Backend::enable_peer_access`](gpu_core::backend::Backend::enable_peer_access): only
    /// checks the pair ([`no_peer_access`] where `device` cannot reach `peer`).
    pub(super) fn check_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        if self.reaches(device, peer)? {
            Ok(())
        } else {
            Err(no_peer_access())
        }
    }

    /// [`Backend::copy`](gpu_core::backend::Backend::copy) and, with the agents of
    /// [`HsaBackend::peer_copy_agents`],
    /// [`Backend::copy_peer`](gpu_core::backend::Backend::copy_peer): a copy of `bytes` after
    /// the stream's previous operation.
    ///
    /// # Safety
    /// [`Backend::copy`](gpu_core::backend::Backend::copy)'s.
    pub(super) unsafe fn copy_on_stream(
        &self,
        stream: HsaStream,
        agents: CopyAgents,
        dst: usize,
        src: usize,
        bytes: usize,
    ) -> Result<()> {
        let state = self.stream_state(stream)?;
        if bytes == 0 {
            return Err(Error::ZeroSize { what: "copy size" });
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.enqueue_copy(&mut lock(&state), agents, dst, src, bytes, None) }
    }

    /// The agents of a [`Backend::copy_peer`](gpu_core::backend::Backend::copy_peer): each
    /// device's GPU agent, [`no_peer_access`] unless the two devices reach each other both ways.
    pub(super) fn peer_copy_agents(
        &self,
        dst_device: DeviceId,
        src_device: DeviceId,
    ) -> Result<CopyAgents> {
        let agents = CopyAgents::Named {
            dst: self.device(dst_device)?.agent,
            src: self.device(src_device)?.agent,
        };
        let reaches = |device, peer| self.reaches(device, peer);
        if dst_device != src_device
            && !(reaches(dst_device, src_device)? && reaches(src_device, dst_device)?)
        {
            return Err(no_peer_access());
        }
        Ok(agents)
    }

    /// Enqueues a DMA copy of `bytes` from `src` to `dst` after the stream's previous
    /// operation, each side named by the agent `agents` gives it, from `scratch` when the
    /// source is a buffer of the backend's.
    ///
    /// # Safety
    /// [`Backend::copy`](gpu_core::backend::Backend::copy)'s.
    pub(super) unsafe fn enqueue_copy(
        &self,
        state: &mut StreamState,
        agents: CopyAgents,
        dst: usize,
        src: usize,
        bytes: usize,
        scratch: Option<usize>,
    ) -> Result<()> {
        let prepared = self.hsa.hsa_amd_memory_async_copy().and_then(|copy| {
            Ok((
                copy,
                agents.sides(dst, src, |address| self.copy_side(address))?,
            ))
        });
        let (copy, [(dst_agent, dst), (src_agent, src)]) = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                free_pool_memory(self.hsa, scratch);
                return Err(error);
            }
        };
        self.enqueue_op(state, false, scratch, None, |dependencies, signal| {
            // SAFETY: the caller's promise for the memory; the signals are live.
            check("hsa_amd_memory_async_copy", unsafe {
                copy(
                    dst as *mut c_void,
                    dst_agent,
                    src as *const c_void,
                    src_agent,
                    bytes,
                    dependencies.len() as u32,
                    dependencies.as_ptr(),
                    signal,
                )
            })
        })
    }

    /// The agent and address a copy names for `address` ([`pools::copy_side`] of one
    /// hsa_amd_pointer_info).
    fn copy_side(&self, address: usize) -> Result<(sys::hsa_agent_t, usize)> {
        let host = self.host()?;
        let info = self.pointer_info(address)?;
        let is_gpu =
            |agent: sys::hsa_agent_t| self.devices.iter().any(|d| d.agent.handle == agent.handle);
        Ok(pools::copy_side(&info, address, host.cpu, is_gpu))
    }
}
