//! Kernel handles and their arguments: [`Kernel`] (a kernel loaded on one device, launched
//! with typed arguments checked against the library's table, or with a program's own parameter
//! array) and [`Arg`] (one argument of a launch).
//!
//! A launch's exact footprint goes to the backend for a race checker right before the launch:
//! the bytes a library kernel reaches from its table, or each span of a module's kernel
//! read-write; it is built only while the backend wants it ([`Backend::footprints_wanted`]:
//! gpu-recorder records the process), otherwise a launch pays one call that loads one atomic.

use alloc::vec::Vec;
use core::ffi::c_void;

use super::Runtime;
use super::handles::Span;
use super::lock::BackoffGuard;
use super::state::{KernelIndex, State};
use gpu_core::ByteRange;
use gpu_core::backend::library::KernelEntry;
use gpu_core::backend::{Access, Backend, KernelArg, LaunchDims};
use gpu_core::error::{Error, Result};
use gpu_core::id::DeviceId;
use gpu_core::token::Token;

/// One argument of [`Runtime::launch`].
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
/// let n = 256;
/// let x = rt.alloc(DeviceId(0), MemoryKind::Device, n * 4)?;
/// let y = rt.alloc(DeviceId(0), MemoryKind::Device, n * 4)?;
/// let x_in = rt.fill_elements(DeviceId(0), x.all(), FillValue::U32(3f32.to_bits()), &mut vec![])?;
/// let y_in = rt.fill_elements(DeviceId(0), y.all(), FillValue::U32(1f32.to_bits()), &mut vec![])?;
/// // `axpy_f32(a, x, y, count)`: y = a * x + y. Arguments in the order the kernel takes them.
/// let args = [Arg::F32(2.0), Arg::Span(x.all()), Arg::Span(y.all()), Arg::U64(n as u64)];
/// let dims = LaunchDims::linear(1, 256);
/// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
/// let done = unsafe { rt.launch(DeviceId(0), "axpy_f32", dims, &args, &mut vec![x_in, y_in])? };
/// let mut out = vec![0u8; n * 4];
/// rt.download(DeviceId(0), &mut out, y.all(), &mut vec![done])?;
/// assert_eq!(f32::from_ne_bytes(out[..4].try_into().unwrap()), 7.0); // 2 * 3 + 1
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    /// Memory the kernel reads or writes (its address is passed).
    Span(Span<'a>),
    /// A 32-bit unsigned integer.
    U32(u32),
    /// A 64-bit unsigned integer.
    U64(u64),
    /// A 32-bit float.
    F32(f32),
}

impl<'a> Arg<'a> {
    pub(super) fn span(&self) -> Option<Span<'a>> {
        match self {
            Arg::Span(span) => Some(*span),
            _ => None,
        }
    }

    pub(super) fn value(&self) -> KernelArg {
        match *self {
            Arg::Span(span) => KernelArg::Ptr(span.address),
            Arg::U32(v) => KernelArg::U32(v),
            Arg::U64(v) => KernelArg::U64(v),
            Arg::F32(v) => KernelArg::F32(v),
        }
    }
}

/// A kernel loaded on one device of a runtime, from [`Runtime::kernel`]. Copy it freely: it
/// borrows the runtime.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
/// // One handle per device, looked up by name once; launches do no lookup.
/// let fills: Vec<Kernel<'_, _>> =
///     (0..2).map(|d| rt.kernel(DeviceId(d), "fill_u32")).collect::<Result<_>>()?;
/// for (d, fill) in (0u32..).zip(&fills) {
///     let buffer = rt.alloc(DeviceId(d), MemoryKind::Device, 64)?;
///     let args = [Arg::Span(buffer.all()), Arg::U32(d + 10), Arg::U64(16)];
///     // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
///     let filled = unsafe { fill.launch(LaunchDims::linear(1, 16), &args, &mut vec![])? };
///     let mut out = [0u8; 64];
///     rt.download(DeviceId(d), &mut out, buffer.all(), &mut vec![filled])?;
///     assert_eq!(out[60..], (d + 10).to_ne_bytes());
/// }
/// # Ok::<(), Error>(())
/// ```
pub struct Kernel<'rt, B: Backend> {
    pub(super) runtime: &'rt Runtime<B>,
    pub(super) device: DeviceId,
    pub(super) index: KernelIndex,
    /// The standard library's table entry of a library kernel, which its launches are checked
    /// against (`None`: a module's kernel, or one the host backend registered under another
    /// name).
    pub(super) entry: Option<&'static KernelEntry>,
}

// Copy whatever `B` is (a derive would ask `B: Copy`): a reference and two small ids.
impl<B: Backend> Clone for Kernel<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Kernel<'_, B> {}

impl<B: Backend> Kernel<'_, B> {
    /// The device the kernel is loaded on.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let fill = rt.kernel(DeviceId(1), "fill_u32")?;
    /// assert_eq!(fill.device(), DeviceId(1));
    /// // Its span arguments must be memory of that device.
    /// let elsewhere = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let args = [Arg::Span(elsewhere.all()), Arg::U32(0), Arg::U64(16)];
    /// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    /// let refused = unsafe { fill.launch(LaunchDims::linear(1, 16), &args, &mut vec![]) };
    /// assert!(matches!(refused, Err(Error::WrongDevice { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// Enqueues the kernel on its device after `after` with the program's own parameter array
    /// (CUDA's `void **kernelParams`), as a compiler lays it out: for kernels of a program's
    /// module ([`Runtime::module_kernel`]). A launch shape no device runs is refused with
    /// [`Error::LaunchShape`]; a dynamic workgroup size above the device's default limit is
    /// opted in first (once per kernel and size); one above the device's opt-in limit is
    /// refused with [`Error::LimitExceeded`] before the driver is asked. The values in `params`
    /// cannot be checked.
    ///
    /// # Safety
    /// `params` points to one valid pointer per kernel parameter, each to a value of that
    /// parameter's type, readable during the call; every byte the kernel reaches stays valid
    /// until it has completed, and the host does not race with it.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use core::ffi::c_void;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let fill = rt.kernel(DeviceId(0), "fill_u32")?; // fill_u32(dst, value, count)
    /// let (mut dst, mut value, mut count) = (buffer.address(), 7u32, 16u64);
    /// let mut params: [*mut c_void; 3] =
    ///     [(&raw mut dst).cast(), (&raw mut value).cast(), (&raw mut count).cast()];
    /// // SAFETY: one pointer per parameter, each to a value of its type; the 16 words fit the
    /// // buffer, which outlives the kernel (it is waited for before the buffer is dropped).
    /// let dims = LaunchDims::linear(1, 16);
    /// let launched = unsafe { fill.launch_packed(dims, params.as_mut_ptr(), &mut vec![]) };
    /// // A GPU backend enqueues it; the host backend's kernels take typed arguments only.
    /// assert!(matches!(launched, Err(Error::Unsupported { backend: "host", .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn launch_packed(
        &self,
        dims: LaunchDims,
        params: *mut *mut c_void,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        let (runtime, device) = (self.runtime, self.device);
        let (state, kernel) = self.prepare(dims)?;
        runtime.run_planned(state, device, after, &|_| (), |backend, stream| {
            // SAFETY: this function's contract, passed on.
            unsafe { backend.launch_packed(stream, kernel, dims, params) }
        })
    }

    /// The size in bytes of each of the kernel's parameters, in order, as its driver knows them
    /// ([`Backend::kernel_param_sizes`]; [`Error::Unsupported`] where it cannot tell): what a
    /// caller needs to copy the values of a raw parameter array, to launch them later (as a
    /// graph's node).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let fill = rt.kernel(DeviceId(0), "fill_u32")?;
    /// // CUDA asks the driver; the host backend's kernels take typed arguments only.
    /// assert!(matches!(fill.param_sizes(), Err(Error::Unsupported { backend: "host", .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn param_sizes(&self) -> Result<Vec<usize>> {
        let kernel =
            self.runtime
                .state()?
                .kernel_for(&self.runtime.backend, self.device, self.index, 0)?;
        self.runtime.backend.kernel_param_sizes(kernel)
    }

    /// Refuses span arguments this runtime does not own or of another device, and for a
    /// library kernel, `values` (the arguments' values) that do not match its parameters or
    /// reach past their spans.
    pub(super) fn check_args(
        &self,
        dims: LaunchDims,
        args: &[Arg<'_>],
        values: &[KernelArg],
    ) -> Result<()> {
        for span in args.iter().filter_map(Arg::span) {
            self.runtime.own(&span)?;
            span.check_device(self.device)?;
        }
        if let Some(entry) = self.entry {
            let given = |index: usize| args.get(index).and_then(Arg::span).map_or(0, |s| s.len);
            entry.check_launch(values, &dims, given)?;
        }
        Ok(())
    }

    /// Refuses a launch shape no device runs and dynamic workgroup memory above the device's
    /// opt-in limit, then locks the state and gives the backend's kernel for `dims` (its
    /// dynamic workgroup size opted in where needed), with the state still locked.
    pub(super) fn prepare(
        &self,
        dims: LaunchDims,
    ) -> Result<(BackoffGuard<'_, State<B>>, B::Kernel)> {
        dims.check_shape()?;
        let limit = self
            .runtime
            .usable(self.device)?
            .workgroup
            .max_per_block_opt_in;
        if dims.dynamic_workgroup_bytes > limit {
            return Err(Error::LimitExceeded {
                what: "dynamic workgroup memory per workgroup",
                required: dims.dynamic_workgroup_bytes as usize,
                limit: limit as usize,
                detail: alloc::vec![alloc::format!(
                    "{} with opt-in; less, or split the work",
                    self.device
                )],
            });
        }
        let mut state = self.runtime.state()?;
        let kernel = state.kernel_for(
            &self.runtime.backend,
            self.device,
            self.index,
            dims.dynamic_workgroup_bytes,
        )?;
        Ok((state, kernel))
    }

    /// Enqueues the kernel on its device after `after`. Refused before anything is queued:
    /// a launch shape no device runs ([`Error::LaunchShape`]: a grid or workgroup dimension of
    /// zero, more than [`gpu_core::backend::MAX_THREADS_PER_WORKGROUP`] threads per workgroup),
    /// and for a kernel of the standard library, arguments whose number or kinds differ from
    /// its parameters ([`Error::KernelArgumentMismatch`]) or whose counts make it reach past a
    /// span or past the launch's dynamic workgroup memory ([`Error::KernelReach`], naming the
    /// argument, the span and the bytes). A dynamic workgroup size above the device's default
    /// limit is opted in first (once per kernel and size); one above the device's opt-in
    /// limit is refused with [`Error::LimitExceeded`].
    ///
    /// # Safety
    /// The runtime keeps every span argument alive and ordered until the kernel has finished.
    /// How far a kernel reaches past each span's address is decided by the kernel and its
    /// other arguments (a count, a words-per-group): for the standard library the runtime
    /// knows this from the library's table and refuses launches that would reach past their
    /// spans, so those launches meet this contract by construction; for any other kernel (one
    /// the host backend registered under a name of its own) the caller guarantees that it
    /// touches only bytes inside the spans it is given.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let data = rt.alloc(DeviceId(0), MemoryKind::Device, 2 * 4 * 4)?; // 2 groups of 4 words
    /// let up: Vec<u8> = (0u32..8).flat_map(u32::to_ne_bytes).collect();
    /// let uploaded = rt.upload(DeviceId(0), data.all(), &up, &mut vec![])?;
    /// // `workgroup_reverse_u32(data, words_per_group)`: needs 16 bytes of workgroup memory.
    /// let reverse = rt.kernel(DeviceId(0), "workgroup_reverse_u32")?;
    /// let args = [Arg::Span(data.all()), Arg::U32(4)];
    /// let dims = LaunchDims { dynamic_workgroup_bytes: 16, ..LaunchDims::linear(2, 4) };
    /// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    /// let done = unsafe { reverse.launch(dims, &args, &mut vec![uploaded])? };
    /// let mut out = vec![0u8; 32];
    /// rt.download(DeviceId(0), &mut out, data.all(), &mut vec![done])?;
    /// // Each group's words reversed, plus one.
    /// assert_eq!(out, [4u32, 3, 2, 1, 8, 7, 6, 5].map(u32::to_ne_bytes).concat());
    /// // Too little workgroup memory for 4 words is refused before anything is queued.
    /// let small = LaunchDims { dynamic_workgroup_bytes: 8, ..dims };
    /// // SAFETY: as above.
    /// let refused = unsafe { reverse.launch(small, &args, &mut vec![]) };
    /// assert!(matches!(refused, Err(Error::KernelReach { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn launch(
        &self,
        dims: LaunchDims,
        args: &[Arg<'_>],
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        let (runtime, device) = (self.runtime, self.device);
        // Up to 16 arguments go on the stack: a launch is a hot path.
        let mut on_stack = [KernelArg::U32(0); 16];
        let on_heap: Vec<KernelArg>;
        let values: &[KernelArg] = if args.len() <= on_stack.len() {
            for (value, arg) in on_stack.iter_mut().zip(args) {
                *value = arg.value();
            }
            &on_stack[..args.len()]
        } else {
            on_heap = args.iter().map(Arg::value).collect();
            &on_heap
        };
        self.check_args(dims, args, values)?;
        let (state, kernel) = self.prepare(dims)?;
        let note = |stream| {
            args.iter()
                .filter_map(Arg::span)
                .for_each(|span| span.note_use(stream))
        };
        runtime.run_planned(state, device, after, &note, |backend, stream| {
            let launch = (args, values, &dims);
            announce(backend, stream, kernel, self.entry, launch);
            // SAFETY: every pointer argument is the address of a span (no `Arg` holds a raw
            // address), kept valid as in `copy` until the stream noted on it has finished; the
            // caller guarantees (this function's contract) that the kernel stays inside them.
            unsafe { backend.launch(stream, kernel, dims, values) }
        })
    }
}

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
