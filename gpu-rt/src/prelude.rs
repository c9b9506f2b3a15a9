//! What a program needs, in one import: `use gpu_rt::prelude::*;` (through the facade,
//! `use gpu_runtime::prelude::*;`).
//!
//! The runtime and what it hands out ([`Runtime`], [`RuntimeConfig`], [`Buffer`], [`Span`],
//! [`Token`], [`Kernel`] and its [`Arg`]s, [`LockedHost`]), the host backend that needs no GPU
//! ([`HostBackend`], [`HostConfig`]), the recording wrapper ([`RecordingBackend`]), the core
//! types their calls take ([`DeviceId`], [`MemoryKind`], [`LaunchDims`], [`FillValue`]), the
//! [`Backend`] trait (for code generic over the backend), and the one error type ([`Error`],
//! [`Result`], whose error parameter defaults to [`Error`], so other `Result<T, E>`s still
//! work under the glob import).
//!
//! # Examples
//!
//! ```
//! use gpu_rt::prelude::*;
//!
//! fn main() -> Result<()> {
//!     let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
//!     let buffer = rt.alloc(DeviceId(1), MemoryKind::Device, 16)?;
//!     let filled = rt.fill_elements(DeviceId(1), buffer.all(), FillValue::U32(7), &mut vec![])?;
//!     let mut out = [0u8; 16];
//!     rt.download(DeviceId(1), &mut out, buffer.all(), &mut vec![filled])?;
//!     assert_eq!(u32::from_ne_bytes(out[12..].try_into().unwrap()), 7);
//!     Ok(())
//! }
//! ```

pub use crate::host::{HostBackend, HostConfig};
pub use crate::runtime::{
    Arg, Buffer, Kernel, LockedHost, RecordingBackend, Runtime, RuntimeConfig, RuntimeStats,
    ShutdownReport, Span,
};
pub use gpu_core::allocator::MemoryKind;
pub use gpu_core::backend::{Backend, FillValue, LaunchDims};
pub use gpu_core::error::{Error, Result};
pub use gpu_core::id::DeviceId;
pub use gpu_core::token::Token;
