//! Work on devices: copies (peer copies between devices), fills and kernel launches, each
//! planned after its dependencies and carried out on a stream.

use super::*;

/// What a copy may assume of its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CopySource {
    /// Memory that other work may write meanwhile (a program's unordered work).
    Shared,
    /// Memory that nothing writes until the copy has run: a slice the caller lends through a
    /// shared borrow ([`Backend::copy_from_read_only`]).
    ReadOnly,
}

impl<B: Backend> Runtime<B> {
    /// Enqueues a copy of `src` into `dst` (equal lengths) on a stream of `device`. Ranges that
    /// share bytes are refused ([`Error::CopyOverlap`]) unless they are the same range.
    ///
    /// Memory of two devices: either may run the copy, which goes over the link where peer
    /// access is enabled between them and is staged by the driver where not
    /// ([`Runtime::peer_link`], counted in [`RuntimeStats`]). Device memory and host memory:
    /// the copy runs on the memory's device, or on a device that reaches it through peer
    /// access; another device is [`Error::WrongDevice`] (the driver would refuse its
    /// stream-ordered memory).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let (d0, buffer) = (DeviceId(0), rt.alloc(DeviceId(0), MemoryKind::Device, 64)?);
    /// let filled = rt.fill(d0, buffer.span(0, 32)?, 1, &mut vec![])?;
    /// let copied = rt.copy(d0, buffer.span(32, 32)?, buffer.span(0, 32)?, &mut vec![filled])?;
    /// let mut out = [0u8; 64];
    /// rt.download(d0, &mut out, buffer.all(), &mut vec![copied])?;
    /// assert_eq!(out, [1; 64]);
    /// // Ranges that share bytes are refused before anything is queued.
    /// let overlap = rt.copy(d0, buffer.span(8, 32)?, buffer.span(0, 32)?, &mut vec![]);
    /// assert!(matches!(overlap, Err(Error::CopyOverlap { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn copy(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        src: Span<'_>,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        self.copy_from(device, dst, src, CopySource::Shared, after)
    }

    /// [`Runtime::copy`], told what the source may assume.
    pub(super) fn copy_from(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        src: Span<'_>,
        source: CopySource,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        let between = self.check_copy(device, dst, src, source)?;
        let note = |stream| [dst, src].iter().for_each(|span| span.note_use(stream));
        let token = self.submit(device, after, &note, |backend, stream| {
            // SAFETY: both spans come from a `Buffer` or `LockedHost` borrowed for at least
            // `'_` (or, raw, from pinned memory the runtime looked up and waits for), and
            // `submit` notes this stream on each: freeing the buffer is ordered after the
            // stream's work, and unpinning waits for it, so the bytes stay valid until the copy
            // has run. The host reaches them only through `unsafe` accessors or `&mut` access
            // that excludes the borrows of pending spans. A span's device is the device whose
            // memory it is. A read-only source is a slice the caller lends through a shared
            // borrow until the copy has run, which nothing writes meanwhile (guards' spans
            // into it would need `&mut` or `lock_host_raw`'s promise), and the two spans do
            // not overlap (checked above).
            unsafe {
                match (between, source) {
                    (Some((to, from)), _) => {
                        backend.copy_peer(stream, dst.address, to, src.address, from, src.len)
                    }
                    (None, CopySource::ReadOnly) => {
                        backend.copy_from_read_only(stream, dst.address, src.address, src.len)
                    }
                    (None, CopySource::Shared) => {
                        backend.copy(stream, dst.address, src.address, src.len)
                    }
                }
            }
        })?;
        if let Some((to, from)) = between {
            self.peers.count_copy(to, from);
        }
        Ok(token)
    }

    /// Refuses a copy [`Runtime::copy`] would refuse; where the spans are memory of two
    /// devices, returns them (destination's first).
    pub(super) fn check_copy(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        src: Span<'_>,
        source: CopySource,
    ) -> Result<Option<(DeviceId, DeviceId)>> {
        let between = self.check_copy_ends(device, dst, src)?;
        // A range copied onto itself changes nothing (and is what a one-device run of a
        // peer-copy program does), but writes a read-only source; any other shared byte makes
        // the driver's result undefined.
        if let (Some(to), Some(from)) = (
            ByteRange::new(dst.address, dst.len),
            ByteRange::new(src.address, src.len),
        ) && to.overlaps(&from)
            && (to != from || source == CopySource::ReadOnly)
        {
            return Err(Error::CopyOverlap { dst: to, src: from });
        }
        Ok(between)
    }

    /// [`Runtime::check_copy`] but for the overlap of the two spans: for ends known apart.
    pub(super) fn check_copy_ends(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        src: Span<'_>,
    ) -> Result<Option<(DeviceId, DeviceId)>> {
        self.own(&dst)?;
        self.own(&src)?;
        self.health.check(device)?;
        for memory_device in [dst.device, src.device].into_iter().flatten() {
            self.health.check(memory_device)?;
        }
        if dst.len != src.len {
            return Err(Error::OutOfBounds {
                offset: 0,
                len: src.len,
                size: dst.len,
            });
        }
        Ok(match (dst.device, src.device) {
            (Some(to), Some(from)) if to != from => Some((to, from)),
            (Some(owner), _) | (_, Some(owner)) => {
                if !self.peers.reaches(device, owner) {
                    self.device_info(device)?;
                    return Err(Error::WrongDevice {
                        expected: owner,
                        found: device,
                    });
                }
                None
            }
            (None, None) => None,
        })
    }

    /// Enqueues setting every byte of `dst` to `value` on a stream of `device`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 8)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 0xff, &mut vec![])?;
    /// let mut out = [0u8; 8];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![filled])?;
    /// assert_eq!(out, [0xff; 8]);
    /// // Device 0's memory is filled on device 0.
    /// let elsewhere = rt.fill(DeviceId(1), buffer.all(), 0, &mut vec![]);
    /// let wrong = Error::WrongDevice { expected: DeviceId(1), found: DeviceId(0) };
    /// assert_eq!(elsewhere.err(), Some(wrong));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fill(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        value: u8,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        self.fill_elements(device, dst, FillValue::U8(value), after)
    }

    /// Enqueues setting every element of `dst` to `value` (8, 16 or 32 bits wide) on a stream
    /// of `device`. A span that is not a whole number of elements is refused
    /// ([`Error::OutOfBounds`]: the last element would run past it).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let (d0, buffer) = (DeviceId(0), rt.alloc(DeviceId(0), MemoryKind::Device, 8)?);
    /// let filled = rt.fill_elements(d0, buffer.all(), FillValue::U16(0xbeef), &mut vec![])?;
    /// let mut out = [0u8; 8];
    /// rt.download(d0, &mut out, buffer.all(), &mut vec![filled])?;
    /// assert_eq!(out, [0xbeef_u16.to_ne_bytes(); 4].concat()[..]);
    /// // Six bytes are not a whole number of 32-bit words.
    /// let partial = rt.fill_elements(d0, buffer.span(0, 6)?, FillValue::U32(1), &mut vec![]);
    /// assert_eq!(partial.err(), Some(Error::OutOfBounds { offset: 4, len: 4, size: 6 }));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fill_elements(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        value: FillValue,
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        self.check_fill(device, dst, value)?;
        let width = value.width();
        self.submit(
            device,
            after,
            &|stream| dst.note_use(stream),
            |backend, stream| {
                // SAFETY: as in `copy`: the span is memory the runtime owns or borrows, kept until
                // the stream noted on it by `submit` has finished with it.
                unsafe { backend.fill_elements(stream, dst.address, value, dst.len / width) }
            },
        )
    }

    /// Refuses a fill [`Runtime::fill_elements`] would refuse.
    pub(super) fn check_fill(
        &self,
        device: DeviceId,
        dst: Span<'_>,
        value: FillValue,
    ) -> Result<()> {
        self.own(&dst)?;
        dst.check_device(device)?;
        self.health.check(device)?;
        let width = value.width();
        if !dst.len.is_multiple_of(width) {
            // The last element would run past the span.
            return Err(Error::OutOfBounds {
                offset: dst.len - dst.len % width,
                len: width,
                size: dst.len,
            });
        }
        Ok(())
    }

    /// Loads a program's module image (CUDA: PTX, cubin or fatbin) on `device` now, so a bad
    /// image fails here; other devices load it at their first [`Runtime::module_kernel`].
    ///
    /// # Safety
    /// `image` points to a complete image in a format the backend's driver reads, and stays
    /// readable until [`Runtime::unload_module`] or the runtime's shutdown.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// // A complete PTX module with no kernels (PTX text ends with a NUL).
    /// const PTX: &core::ffi::CStr = c".version 7.0\n.target sm_70\n.address_size 64\n";
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// // SAFETY: `PTX` is a complete image, readable for as long as the program runs.
    /// let loaded = unsafe { rt.load_module(DeviceId(0), PTX.as_ptr().cast()) };
    /// // The host backend runs Rust kernels only: it refuses every image, typed.
    /// assert!(matches!(loaded, Err(Error::Unsupported { backend: "host", .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn load_module(&self, device: DeviceId, image: *const c_void) -> Result<ModuleId> {
        self.device_info(device)?;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.state()?.load_module(&self.backend, device, image) }
    }

    /// Unloads `module` on every device; its kernels are refused afterwards.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// // A complete PTX module with no kernels (PTX text ends with a NUL).
    /// const PTX: &core::ffi::CStr = c".version 7.0\n.target sm_70\n.address_size 64\n";
    /// fn load_and_unload<B: Backend>(rt: &Runtime<B>) -> Result<()> {
    ///     // SAFETY: `PTX` is a complete image, readable for as long as the program runs.
    ///     let module = unsafe { rt.load_module(DeviceId(0), PTX.as_ptr().cast())? };
    ///     rt.unload_module(module) // its kernels are refused from now on
    /// }
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// // On a GPU backend this loads and unloads; the host backend loads no image.
    /// assert!(matches!(load_and_unload(&rt), Err(Error::Unsupported { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn unload_module(&self, module: ModuleId) -> Result<()> {
        self.state()?.unload_module(&self.backend, module)
    }

    /// Kernel `name` of `module` on `device` (the module is loaded there first if it is not):
    /// a handle to launch it by, cached per module, name and device.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use core::ffi::CStr;
    ///
    /// // The program's own module, as a compiler embedded it (PTX text ends with a NUL).
    /// const PTX: &CStr = c".version 7.0\n.target sm_70\n.address_size 64\n";
    /// /// Kernel `name` of the program's module on `device`.
    /// fn kernel_of<'rt, B: Backend>(rt: &'rt Runtime<B>, device: DeviceId, name: &CStr)
    ///     -> Result<Kernel<'rt, B>> {
    ///     // SAFETY: `PTX` is a complete image, readable for as long as the program runs.
    ///     let module = unsafe { rt.load_module(DeviceId(0), PTX.as_ptr().cast())? };
    ///     rt.module_kernel(module, device, name) // loaded on `device` now if it is not there yet
    /// }
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// // A GPU backend hands out a kernel to launch with `Kernel::launch_packed`; the host, none.
    /// assert!(matches!(kernel_of(&rt, DeviceId(0), c"scale"), Err(Error::Unsupported { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn module_kernel(
        &self,
        module: ModuleId,
        device: DeviceId,
        name: &CStr,
    ) -> Result<Kernel<'_, B>> {
        let info = self.usable(device)?;
        let index = self
            .state()?
            .module_kernel(&self.backend, module, device, name, info)?;
        Ok(Kernel {
            runtime: self,
            device,
            index,
            entry: None,
        })
    }

    /// Kernel `name` of the backend's kernel library on `device`, loaded at the first call: a
    /// handle to launch it by, with no lookup by name on each launch. A kernel of the standard
    /// library ([`library::LIBRARY`]) keeps its table entry, so every launch is checked against
    /// it ([`Kernel::launch`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let fill = rt.kernel(DeviceId(0), "fill_u32")?; // looked up once
    /// let args = [Arg::Span(buffer.all()), Arg::U32(42), Arg::U64(16)];
    /// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    /// let filled = unsafe { fill.launch(LaunchDims::linear(1, 16), &args, &mut vec![])? };
    /// let mut out = [0u8; 64];
    /// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![filled])?;
    /// assert_eq!(u32::from_ne_bytes(out[60..].try_into().unwrap()), 42);
    /// let unknown = rt.kernel(DeviceId(0), "no_such_kernel");
    /// assert!(matches!(unknown, Err(Error::UnknownKernel { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn kernel(&self, device: DeviceId, name: &str) -> Result<Kernel<'_, B>> {
        let info = self.usable(device)?;
        let index = self
            .state()?
            .load_kernel(&self.backend, device, name, info)?;
        Ok(Kernel {
            runtime: self,
            device,
            index,
            entry: library::entry(name),
        })
    }

    /// Enqueues kernel `name` of the backend's kernel library on `device`: [`Runtime::kernel`]
    /// then [`Kernel::launch`] (keep the handle to launch a kernel often).
    ///
    /// # Safety
    /// As for [`Kernel::launch`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?; // 16 words
    /// let dims = LaunchDims::linear(1, 64);
    /// let args = [Arg::Span(buffer.all()), Arg::U32(5), Arg::U64(16)];
    /// // SAFETY: a library kernel: the runtime checks how far it reaches into each span.
    /// let filled = unsafe { rt.launch(DeviceId(0), "fill_u32", dims, &args, &mut vec![])? };
    /// rt.wait(filled)?;
    /// // 17 words would reach past the span: refused before anything is queued.
    /// let too_far = [Arg::Span(buffer.all()), Arg::U32(5), Arg::U64(17)];
    /// // SAFETY: as above.
    /// let refused = unsafe { rt.launch(DeviceId(0), "fill_u32", dims, &too_far, &mut vec![]) };
    /// assert!(matches!(refused, Err(Error::KernelReach { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    pub unsafe fn launch(
        &self,
        device: DeviceId,
        name: &str,
        dims: LaunchDims,
        args: &[Arg<'_>],
        after: &mut Vec<Token>,
    ) -> Result<Token> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.kernel(device, name)?.launch(dims, args, after) }
    }

    /// Plans one operation on `device`, runs `work` on its stream, and notes the stream on
    /// each span the operation uses (through `note`).
    pub(super) fn submit(
        &self,
        device: DeviceId,
        after: &mut Vec<Token>,
        note: &dyn Fn(StreamId),
        work: impl FnOnce(&B, B::Stream) -> Result<()>,
    ) -> Result<Token> {
        // An unknown device is refused by the planner, before anything happens.
        self.run_planned(self.state()?, device, after, note, work)
    }

    /// Plans one operation on `device` under `state`, lets the lock go, then runs `work` on
    /// the operation's stream ([`state::Planned`] says why no other thread can need it done
    /// meanwhile) and notes the stream on each span the operation uses (through `note`).
    pub(super) fn run_planned(
        &self,
        mut state: BackoffGuard<'_, State<B>>,
        device: DeviceId,
        after: &mut Vec<Token>,
        note: &dyn Fn(StreamId),
        work: impl FnOnce(&B, B::Stream) -> Result<()>,
    ) -> Result<Token> {
        let planned = state.plan(&self.backend, device, after)?;
        drop(state);
        match planned.run(&self.backend, &self.health, work) {
            Ok(()) => {
                note(planned.stream);
                Ok(planned.token)
            }
            Err(e) => {
                let mut state = self.state.lock();
                state.abandon(&self.backend, planned.token);
                Err(e)
            }
        }
    }
}
