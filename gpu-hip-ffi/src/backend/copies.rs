//! Copies and fills on a stream: hipMemcpyAsync between any memory, hipMemcpyPeerAsync between
//! two devices, and the hipMemset*Async of each element width.

use core::ffi::c_void;

use gpu_core::backend::FillValue;
use gpu_core::{DeviceId, Result};

use super::{HipBackend, HipStream};
use crate::result;
use crate::sys;

impl HipBackend {
    /// `Backend::copy`: one copy on a live stream, HIP finding each side's memory.
    ///
    /// # Safety
    /// As `Backend::copy`.
    pub(super) unsafe fn copy_on_stream(
        &self,
        stream: HipStream,
        dst: usize,
        src: usize,
        bytes: usize,
    ) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let _scope = self.enter(stream.device)?;
        // SAFETY: the caller's promise for both ranges; the stream is live (held) and of the
        // current device.
        unsafe {
            result::memory::copy_async(
                self.hip,
                dst as *mut c_void,
                src as *const c_void,
                bytes,
                sys::hipMemcpyDefault,
                stream.raw,
            )
        }
    }

    /// `Backend::copy_peer`: one copy on a live stream, each side named by its device.
    ///
    /// # Safety
    /// As `Backend::copy_peer`.
    pub(super) unsafe fn copy_between_devices(
        &self,
        stream: HipStream,
        dst: usize,
        dst_device: DeviceId,
        src: usize,
        src_device: DeviceId,
        bytes: usize,
    ) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let dst_ordinal = self.device(dst_device)?.ordinal;
        let src_ordinal = self.device(src_device)?.ordinal;
        let _scope = self.enter(stream.device)?;
        // SAFETY: the caller's promise for both ranges; the stream is live (held) and of the
        // current device.
        unsafe {
            result::memory::copy_peer_async(
                self.hip,
                dst as *mut c_void,
                dst_ordinal,
                src as *const c_void,
                src_ordinal,
                bytes,
                stream.raw,
            )
        }
    }

    /// `Backend::fill`: one byte fill on a live stream.
    ///
    /// # Safety
    /// As `Backend::fill`.
    pub(super) unsafe fn fill_bytes(
        &self,
        stream: HipStream,
        dst: usize,
        value: u8,
        bytes: usize,
    ) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let _scope = self.enter(stream.device)?;
        // SAFETY: the caller's promise for the range; the stream is live (held) and of the
        // current device.
        unsafe {
            result::memory::set_d8_async(self.hip, dst as *mut c_void, value, bytes, stream.raw)
        }
    }

    /// `Backend::fill_elements`: one fill of 8-, 16- or 32-bit elements on a live stream.
    ///
    /// # Safety
    /// As `Backend::fill_elements`.
    pub(super) unsafe fn fill_elements_on_stream(
        &self,
        stream: HipStream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()> {
        let stream = self.streams.get(stream.key)?;
        let _scope = self.enter(stream.device)?;
        let (hip, dst, raw) = (self.hip, dst as *mut c_void, stream.raw);
        // The stream is live (held) and of the current device.
        match value {
            // SAFETY: the caller's promise for `count` bytes at `dst`; the stream as said above.
            FillValue::U8(v) => unsafe { result::memory::set_d8_async(hip, dst, v, count, raw) },
            // SAFETY: the caller's promise for `count` 16-bit elements at `dst`; the stream as
            // said above.
            FillValue::U16(v) => unsafe { result::memory::set_d16_async(hip, dst, v, count, raw) },
            // SAFETY: the caller's promise for `count` 32-bit elements at `dst`; the stream as
            // said above.
            FillValue::U32(v) => unsafe { result::memory::set_d32_async(hip, dst, v, count, raw) },
        }
    }
}
