//! The launch footprints the runtime announced to the host backend, logged while asked for:
//! what a test sees of the bytes each launch reaches, as gpu-recorder would be told them.
//!
//! Off by default, as on a GPU backend without a recorder: the runtime then builds none.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use gpu_core::ByteRange;
use gpu_core::backend::Access;

use super::{HostBackend, HostKernel, HostStream};

/// One launch's footprint as announced: its stream and kernel, and each range with its access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnouncedFootprint {
    /// The stream the launch was about to be enqueued on.
    pub stream: HostStream,
    /// The kernel about to be launched.
    pub kernel: HostKernel,
    /// The bytes it reaches, each read, written or both.
    pub ranges: Vec<(ByteRange, Access)>,
}

/// Whether footprints are wanted, and those announced since.
#[derive(Debug, Default)]
pub(super) struct Footprints {
    wanted: AtomicBool,
    log: Mutex<Vec<AnnouncedFootprint>>,
}

impl Footprints {
    /// [`gpu_core::backend::Backend::footprints_wanted`].
    pub(super) fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
    }

    /// Logs an announcement (whether wanted or not: a test sees any the runtime makes).
    pub(super) fn note(
        &self,
        stream: HostStream,
        kernel: HostKernel,
        ranges: &[(ByteRange, Access)],
    ) {
        let announced = AnnouncedFootprint {
            stream,
            kernel,
            ranges: ranges.to_vec(),
        };
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(announced);
    }
}

impl HostBackend {
    /// Asks the runtime for each launch's footprint from now on (`on`), as a GPU backend does
    /// while gpu-recorder records the process, or stops asking.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_core::{ByteRange, backend::Access};
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.want_footprints(true);
    /// let rt = Runtime::new(backend)?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let args = [Arg::Span(buffer.all()), Arg::U32(7), Arg::U64(4)];
    /// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    /// let dims = LaunchDims::linear(1, 4);
    /// let done = unsafe { rt.launch(DeviceId(0), "fill_u32", dims, &args, &mut vec![])? };
    /// rt.wait(done)?;
    /// let announced = rt.backend().take_footprints();
    /// // `fill_u32` writes its 4 words, not the whole buffer.
    /// let range = ByteRange::new(buffer.address(), 16).unwrap();
    /// assert_eq!(announced[0].ranges, [(range, Access::Write)]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn want_footprints(&self, on: bool) {
        self.footprints.wanted.store(on, Ordering::Relaxed);
    }

    /// The footprints announced since the last call, oldest first.
    pub fn take_footprints(&self) -> Vec<AnnouncedFootprint> {
        core::mem::take(
            &mut *self
                .footprints
                .log
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }
}
