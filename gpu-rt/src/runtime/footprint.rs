//! A launch's exact footprint for a race checker: the bytes each library kernel reaches from
//! its table, or each span of a module's kernel read-write, told to the backend before launch.
//!
//! Built only while the backend wants it ([`Backend::footprints_wanted`]: gpu-recorder
//! records the process); otherwise a launch pays one call that loads one atomic.

use alloc::vec::Vec;

use super::handles::Arg;
use gpu_core::ByteRange;
use gpu_core::backend::library::KernelEntry;
use gpu_core::backend::{Access, Backend, KernelArg, LaunchDims};

/// Tells `backend` what the launch of `kernel` on `stream` with `args` (whose values are
/// `values`) and `dims` reaches, if it wants to know: for a library kernel (`entry`) its
/// reaches from the table, each with its access; for any other kernel each span given,
/// read-write (the caller of its launch promised that it stays inside them). Called on the
/// launching thread right before the backend's launch.
#[inline]
pub(super) fn announce<B: Backend>(
    backend: &B,
    stream: B::Stream,
    kernel: B::Kernel,
    entry: Option<&'static KernelEntry>,
    launch: (&[Arg<'_>], &[KernelArg], &LaunchDims),
) {
    if backend.footprints_wanted() {
        announce_now(backend, stream, kernel, entry, launch);
    }
}

#[cold]
#[inline(never)]
fn announce_now<B: Backend>(
    backend: &B,
    stream: B::Stream,
    kernel: B::Kernel,
    entry: Option<&'static KernelEntry>,
    (args, values, dims): (&[Arg<'_>], &[KernelArg], &LaunchDims),
) {
    let ranges: Vec<(ByteRange, Access)> = match entry {
        Some(entry) => entry.footprint(values, dims).collect(),
        None => args
            .iter()
            .filter_map(Arg::span)
            .filter_map(|span| ByteRange::new(span.address, span.len))
            .map(|range| (range, Access::ReadWrite))
            .collect(),
    };
    backend.note_launch_footprint(stream, kernel, &ranges);
}
