//! Host kernels: Rust functions registered under the GPU kernels' names, the per-device loaded
//! kernels with their workgroup-memory opt-in, and the context a kernel runs with.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU64, Ordering};
use hashbrown::HashMap;

use super::HostErrorCode;
use super::memory::Region;
use gpu_core::backend::library::{self, KernelEntry};
use gpu_core::backend::{KernelArg, LaunchDims};
use gpu_core::error::{ByteRange, Error, Result};
use gpu_core::id::DeviceId;

/// A host kernel: called once per workgroup with the launch's context and the workgroup's
/// dynamic workgroup memory (zeroed, `dims.dynamic_workgroup_bytes` long). An error fails the
/// launch and becomes the stream's sticky error.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::host::{KernelFn, standard_kernels};
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// let (name, fill): (&str, KernelFn) = standard_kernels().into_iter().next().unwrap();
/// assert_eq!(name, "fill_u32");
/// // The same function under a name of its own (its launches are then not checked by the
/// // library's table: the caller vouches for the counts).
/// backend.register_kernel("my_fill", move |ctx, workgroup| fill(ctx, workgroup));
/// let rt = Runtime::new(backend)?;
/// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 16)?;
/// let args = [Arg::Span(buffer.all()), Arg::U32(3), Arg::U64(4)];
/// // SAFETY: 4 words fit the 16-byte span.
/// let dims = LaunchDims::linear(1, 4);
/// let done = unsafe { rt.launch(DeviceId(0), "my_fill", dims, &args, &mut vec![])? };
/// let mut out = [0u8; 16];
/// rt.download(DeviceId(0), &mut out, buffer.all(), &mut vec![done])?;
/// assert_eq!(out, [3u32.to_ne_bytes(); 4].concat()[..]);
/// # Ok::<(), Error>(())
/// ```
pub type KernelFn = Arc<dyn Fn(&KernelContext<'_>, &mut [u8]) -> Result<()> + Send + Sync>;

/// A kernel loaded on one device (the host backend's [`gpu_core::backend::Backend::Kernel`]).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// use gpu_rt::runtime::with_device;
///
/// let backend = HostBackend::new(HostConfig::with_devices(2));
/// let on_0 = with_device(&backend, DeviceId(0), || backend.kernel(DeviceId(0), "axpy_f32"))?;
/// let again = with_device(&backend, DeviceId(0), || backend.kernel(DeviceId(0), "axpy_f32"))?;
/// let on_1 = with_device(&backend, DeviceId(1), || backend.kernel(DeviceId(1), "axpy_f32"))?;
/// assert_eq!(on_0, again); // loaded once per device
/// assert_ne!(on_0, on_1);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostKernel {
    id: u64,
}

/// Kernel handle numbers, never reused by any backend in the process.
static NEXT_KERNEL: AtomicU64 = AtomicU64::new(1);

/// A kernel as loaded on a device.
#[derive(Clone)]
pub(super) struct LoadedKernel {
    pub(super) device: DeviceId,
    pub(super) name: Arc<str>,
    pub(super) function: KernelFn,
    /// The standard library's entry for the kernel's name: launches are checked against its
    /// parameters (`None`: a kernel of the program's own, whose function checks them).
    pub(super) entry: Option<&'static KernelEntry>,
    /// Workgroup bytes the kernel declares statically (as a GPU kernel's `__shared__` arrays):
    /// they count against the device's per-workgroup limit with the dynamic bytes.
    pub(super) static_workgroup_bytes: u32,
    /// Most dynamic workgroup bytes a launch may use, once set (CUDA's
    /// `MAX_DYNAMIC_SHARED_SIZE_BYTES`); until then the device's default limit applies.
    pub(super) allowed_workgroup_bytes: Option<u32>,
}

impl fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedKernel")
            .field("device", &self.device)
            .field("name", &self.name)
            .field("static_workgroup_bytes", &self.static_workgroup_bytes)
            .field("allowed_workgroup_bytes", &self.allowed_workgroup_bytes)
            .finish_non_exhaustive()
    }
}

/// Registered kernel functions by name, and the kernels loaded from them on each device.
#[derive(Default)]
pub(super) struct KernelRegistry {
    /// Each function with its static workgroup bytes.
    functions: HashMap<String, (KernelFn, u32)>,
    loaded: HashMap<HostKernel, LoadedKernel>,
    /// Loaded handles by device, then name, so loading twice gives the same handle (looked up
    /// by `&str`, with no allocation on a hit).
    by_name: HashMap<DeviceId, HashMap<String, HostKernel>>,
}

impl KernelRegistry {
    /// Registers `function` under `name`, declaring `static_workgroup_bytes`; kernels already
    /// loaded under that name keep theirs.
    pub(super) fn register(&mut self, name: &str, function: KernelFn, static_workgroup_bytes: u32) {
        self.functions
            .insert(String::from(name), (function, static_workgroup_bytes));
        for loaded in self.by_name.values_mut() {
            loaded.remove(name);
        }
    }

    /// The kernel `name` loaded on `device` (loaded now if it was not).
    /// Forgets every kernel loaded on `device` (a reset): their handles are invalid from now on.
    pub(super) fn unload_device(&mut self, device: DeviceId) {
        self.by_name.remove(&device);
        self.loaded.retain(|_, kernel| kernel.device != device);
    }

    pub(super) fn load(&mut self, device: DeviceId, name: &str) -> Result<HostKernel> {
        let on_device = self.by_name.entry(device).or_default();
        if let Some(&kernel) = on_device.get(name) {
            return Ok(kernel);
        }
        let Some((function, static_workgroup_bytes)) = self.functions.get(name) else {
            return Err(Error::UnknownKernel {
                backend: "host",
                name: String::from(name),
            });
        };
        let kernel = HostKernel {
            id: NEXT_KERNEL.fetch_add(1, Ordering::Relaxed),
        };
        self.loaded.insert(
            kernel,
            LoadedKernel {
                device,
                name: Arc::from(name),
                function: function.clone(),
                entry: library::entry(name),
                static_workgroup_bytes: *static_workgroup_bytes,
                allowed_workgroup_bytes: None,
            },
        );
        on_device.insert(String::from(name), kernel);
        Ok(kernel)
    }

    /// The loaded kernel behind `kernel`.
    pub(super) fn get(&self, kernel: HostKernel, call: &'static str) -> Result<&LoadedKernel> {
        self.loaded
            .get(&kernel)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))
    }

    /// Mutable access to the loaded kernel behind `kernel`.
    pub(super) fn get_mut(
        &mut self,
        kernel: HostKernel,
        call: &'static str,
    ) -> Result<&mut LoadedKernel> {
        self.loaded
            .get_mut(&kernel)
            .ok_or_else(|| HostErrorCode::InvalidHandle.error(call))
    }
}

/// Plain numbers a kernel may read from and write to device memory.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
/// # fn launch_into(
/// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
/// # ) -> Result<Vec<u32>> {
/// #     let rt = Runtime::new(backend)?;
/// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
/// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
/// #     // SAFETY: the kernels of these examples stay inside their one span.
/// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
/// #     let mut bytes = vec![0u8; words * 4];
/// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
/// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
/// # }
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// // The same memory as `f32`s, as `u8`s and as `u32`s: every view of plain numbers is allowed.
/// backend.register_kernel("views", |ctx, _| {
///     let at = ctx.arg_ptr(0)?;
///     ctx.view::<f32>(at, 1)?.set(0, 1.0)?;
///     ctx.view::<u8>(at + 4, 4)?.set(0, 0xff)?;
///     ctx.view::<u32>(at + 8, 1)?.set(0, ctx.view::<u32>(at, 1)?.get(0)?)
/// });
/// // `launch_into` (hidden) launches it with a fresh 3-word span first and reads that back.
/// let words = launch_into(backend, "views", LaunchDims::linear(1, 1), 3, &[])?;
/// assert_eq!(words, [1f32.to_bits(), u32::from_ne_bytes([0xff, 0, 0, 0]), 1f32.to_bits()]);
/// # Ok::<(), Error>(())
/// ```
pub trait DeviceScalar: Copy + sealed::Sealed + 'static {}

mod sealed {
    /// Keeps [`super::DeviceScalar`] to types with no invalid bit patterns.
    pub trait Sealed {}
}

macro_rules! device_scalars {
    ($($t:ty),*) => {
        $(impl sealed::Sealed for $t {}
        impl DeviceScalar for $t {})*
    };
}
device_scalars!(u8, u16, u32, u64, i32, i64, f32, f64);

/// What a kernel sees while it runs one workgroup: its position, the launch shape, the
/// arguments, and checked access to the memory the pointer arguments lie in.
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// // `scale(data, factor, count)`: data[i] *= factor, one workgroup per 4 values.
/// backend.register_kernel("scale", |ctx, _| {
///     let (factor, count) = (ctx.arg_f32(1)?, ctx.arg_u64(2)? as usize);
///     let data = ctx.view::<f32>(ctx.arg_ptr(0)?, count)?;
///     let first = ctx.group_index() as usize * 4;
///     (first..(first + 4).min(count)).try_for_each(|i| data.set(i, data.get(i)? * factor))
/// });
/// let rt = Runtime::new(backend)?;
/// let data = rt.alloc(DeviceId(0), MemoryKind::Device, 10 * 4)?;
/// let three = FillValue::U32(3f32.to_bits());
/// let threes = rt.fill_elements(DeviceId(0), data.all(), three, &mut vec![])?;
/// let args = [Arg::Span(data.all()), Arg::F32(0.5), Arg::U64(10)];
/// let dims = LaunchDims::linear(3, 1); // 3 workgroups of 4 values (the last has 2)
/// // SAFETY: the kernel touches the 10 values of its span, and no more.
/// let done = unsafe { rt.launch(DeviceId(0), "scale", dims, &args, &mut vec![threes])? };
/// let mut out = vec![0u8; 10 * 4];
/// rt.download(DeviceId(0), &mut out, data.all(), &mut vec![done])?;
/// assert_eq!(out, [1.5f32.to_ne_bytes(); 10].concat()); // 3 * 0.5, in all three workgroups
/// # Ok::<(), Error>(())
/// ```
pub struct KernelContext<'a> {
    pub(super) group: [u32; 3],
    pub(super) dims: LaunchDims,
    pub(super) args: &'a [KernelArg],
    /// The memory the launch's pointer arguments lie in, held for the launch.
    pub(super) regions: &'a [Region],
}

impl<'a> KernelContext<'a> {
    /// This workgroup's position in the grid.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// // Each workgroup writes its y position into word `group_index`.
    /// backend.register_kernel("rows", |ctx, _| {
    ///     let out = ctx.view::<u32>(ctx.arg_ptr(0)?, 6)?;
    ///     out.set(ctx.group_index() as usize, ctx.group()[1])
    /// });
    /// let dims = LaunchDims { grid: [3, 2, 1], ..LaunchDims::linear(1, 1) };
    /// // `launch_into` (hidden) launches it with a fresh 6-word span first and reads that back.
    /// assert_eq!(launch_into(backend, "rows", dims, 6, &[])?, [0, 0, 0, 1, 1, 1]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn group(&self) -> [u32; 3] {
        self.group
    }

    /// This workgroup's linear number (x fastest).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("number", |ctx, _| {
    ///     let out = ctx.view::<u32>(ctx.arg_ptr(0)?, 8)?;
    ///     let [x, y, z] = ctx.group();
    ///     out.set(ctx.group_index() as usize, x * 100 + y * 10 + z) // x fastest
    /// });
    /// let dims = LaunchDims { grid: [2, 2, 2], ..LaunchDims::linear(1, 1) };
    /// // `launch_into` (hidden) launches it with a fresh 8-word span first and reads that back.
    /// let words = launch_into(backend, "number", dims, 8, &[])?;
    /// assert_eq!(words, [0, 100, 10, 110, 1, 101, 11, 111]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn group_index(&self) -> u64 {
        let [gx, gy, _] = self.dims.grid.map(u64::from);
        let [x, y, z] = self.group.map(u64::from);
        x + gx * (y + gy * z)
    }

    /// The launch's shape.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("shape", |ctx, _| {
    ///     let dims = ctx.dims();
    ///     let out = ctx.view::<u32>(ctx.arg_ptr(0)?, 2)?;
    ///     out.set(0, dims.grid[0])?;
    ///     out.set(1, dims.block[0] * dims.block[1])
    /// });
    /// let dims = LaunchDims { grid: [1, 1, 1], block: [32, 4, 1], dynamic_workgroup_bytes: 0 };
    /// // `launch_into` (hidden) launches it with a fresh 2-word span first and reads that back.
    /// assert_eq!(launch_into(backend, "shape", dims, 2, &[])?, [1, 128]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn dims(&self) -> LaunchDims {
        self.dims
    }

    /// The launch's arguments.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// use gpu_core::backend::KernelArg;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("count_args", |ctx, _| {
    ///     let values = ctx.args().iter().filter(|a| !matches!(a, KernelArg::Ptr(_))).count();
    ///     ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.set(0, values as u32)
    /// });
    /// let more = [Arg::U32(1), Arg::F32(2.0), Arg::U64(3)];
    /// // `launch_into` (hidden) launches it with a fresh 1-word span first, then `more`.
    /// assert_eq!(launch_into(backend, "count_args", LaunchDims::linear(1, 1), 1, &more)?, [3]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn args(&self) -> &'a [KernelArg] {
        self.args
    }

    fn arg(&self, index: usize) -> Result<KernelArg> {
        self.args
            .get(index)
            .copied()
            .ok_or_else(|| HostErrorCode::InvalidValue.error("launch"))
    }

    /// Argument `index` as a pointer.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("ptr_or_not", |ctx, _| {
    ///     let second_is_ptr = ctx.arg_ptr(1).is_ok(); // argument 1 is a `u32` here
    ///     ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.set(0, u32::from(second_is_ptr))
    /// });
    /// // `launch_into` (hidden) launches it with a fresh 1-word span first, then `Arg::U32(5)`.
    /// let dims = LaunchDims::linear(1, 1);
    /// let words = launch_into(backend, "ptr_or_not", dims, 1, &[Arg::U32(5)])?;
    /// assert_eq!(words, [0]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn arg_ptr(&self, index: usize) -> Result<usize> {
        match self.arg(index)? {
            KernelArg::Ptr(p) => Ok(p),
            _ => Err(HostErrorCode::InvalidValue.error("launch")),
        }
    }

    /// Argument `index` as a `u32`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("set_to", |ctx, _| {
    ///     ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.set(0, ctx.arg_u32(1)?)
    /// });
    /// // `launch_into` (hidden) launches it with a fresh 1-word span first, then `more`.
    /// let words = launch_into(backend, "set_to", LaunchDims::linear(1, 1), 1, &[Arg::U32(77)])?;
    /// assert_eq!(words, [77]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn arg_u32(&self, index: usize) -> Result<u32> {
        match self.arg(index)? {
            KernelArg::U32(v) => Ok(v),
            _ => Err(HostErrorCode::InvalidValue.error("launch")),
        }
    }

    /// Argument `index` as a `u64`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("high_half", |ctx, _| {
    ///     ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.set(0, (ctx.arg_u64(1)? >> 32) as u32)
    /// });
    /// let more = [Arg::U64(7 << 32)];
    /// // `launch_into` (hidden) launches it with a fresh 1-word span first, then `more`.
    /// assert_eq!(launch_into(backend, "high_half", LaunchDims::linear(1, 1), 1, &more)?, [7]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn arg_u64(&self, index: usize) -> Result<u64> {
        match self.arg(index)? {
            KernelArg::U64(v) => Ok(v),
            _ => Err(HostErrorCode::InvalidValue.error("launch")),
        }
    }

    /// Argument `index` as an `f32`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("double", |ctx, _| {
    ///     ctx.view::<f32>(ctx.arg_ptr(0)?, 1)?.set(0, 2.0 * ctx.arg_f32(1)?)
    /// });
    /// // `launch_into` (hidden) launches it with a fresh 1-word span first, then `more`.
    /// let words = launch_into(backend, "double", LaunchDims::linear(1, 1), 1, &[Arg::F32(1.25)])?;
    /// assert_eq!(f32::from_bits(words[0]), 2.5);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn arg_f32(&self, index: usize) -> Result<f32> {
        match self.arg(index)? {
            KernelArg::F32(v) => Ok(v),
            _ => Err(HostErrorCode::InvalidValue.error("launch")),
        }
    }

    /// `count` values of `T` at `address`, which must lie wholly in memory a pointer argument
    /// of this launch points into (an allocation or a registered host range); otherwise
    /// `HOST_ILLEGAL_ADDRESS`, as a GPU faults on a wild access. Under a runtime the memory is
    /// the buffer, not the allocator's segment it was carved from
    /// ([`gpu_core::backend::Backend::note_buffer`]): an access past a buffer's end faults.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// // Writes its argument's first word, then reads the word just past its buffer.
    /// backend.register_kernel("past_the_end", |ctx, _| {
    ///     ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.set(0, 1)?;
    ///     ctx.view::<u32>(ctx.arg_ptr(0)? + 16, 1).map(drop) // refused: a fault
    /// });
    /// let rt = Runtime::new(backend)?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 16)?;
    /// let (args, dims) = ([Arg::Span(buffer.all())], LaunchDims::linear(1, 1));
    /// // SAFETY: the kernel writes inside its span; the backend refuses its access outside.
    /// let run = unsafe { rt.launch(DeviceId(0), "past_the_end", dims, &args, &mut vec![])? };
    /// assert!(matches!(rt.wait(run), Err(Error::DeviceLost { .. }))); // HOST_ILLEGAL_ADDRESS
    /// # Ok::<(), Error>(())
    /// ```
    pub fn view<T: DeviceScalar>(&self, address: usize, count: usize) -> Result<DeviceView<'_, T>> {
        let illegal = || HostErrorCode::IllegalAddress.error("launch");
        let bytes = count.checked_mul(size_of::<T>()).ok_or_else(illegal)?;
        if bytes > 0 {
            let range = ByteRange::new(address, bytes).ok_or_else(illegal)?;
            if !self.regions.iter().any(|r| r.range().contains(&range)) {
                return Err(illegal());
            }
        }
        Ok(DeviceView {
            address,
            len: count,
            _memory: PhantomData,
        })
    }
}

/// `len` values of `T` in device memory, read and written byte by byte with relaxed atomics
/// (several streams may touch the same memory, as on a GPU: unordered work gives unspecified
/// values, never a data race; no Rust reference to it is ever formed).
///
/// # Examples
///
/// ```
/// use gpu_rt::prelude::*;
///
/// let backend = HostBackend::new(HostConfig::with_devices(1));
/// // `prefix_sum(data, count)` in one workgroup: data[i] += data[i - 1].
/// backend.register_kernel("prefix_sum", |ctx, _| {
///     let data = ctx.view::<u32>(ctx.arg_ptr(0)?, ctx.arg_u64(1)? as usize)?;
///     (1..data.len()).try_for_each(|i| data.set(i, data.get(i)? + data.get(i - 1)?))
/// });
/// let rt = Runtime::new(backend)?;
/// let data = rt.alloc(DeviceId(0), MemoryKind::Device, 16)?;
/// let ones = rt.fill_elements(DeviceId(0), data.all(), FillValue::U32(1), &mut vec![])?;
/// let args = [Arg::Span(data.all()), Arg::U64(4)];
/// // SAFETY: the kernel touches the 4 words of its span.
/// let dims = LaunchDims::linear(1, 1);
/// let done = unsafe { rt.launch(DeviceId(0), "prefix_sum", dims, &args, &mut vec![ones])? };
/// let mut out = [0u8; 16];
/// rt.download(DeviceId(0), &mut out, data.all(), &mut vec![done])?;
/// assert_eq!(out, [1u32, 2, 3, 4].map(u32::to_ne_bytes).concat()[..]);
/// # Ok::<(), Error>(())
/// ```
pub struct DeviceView<'a, T> {
    address: usize,
    len: usize,
    _memory: PhantomData<&'a T>,
}

impl<T: DeviceScalar> DeviceView<'_, T> {
    /// How many values the view holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("view_len", |ctx, _| {
    ///     let view = ctx.view::<u16>(ctx.arg_ptr(0)?, 6)?; // 6 values of 2 bytes
    ///     ctx.view::<u32>(ctx.arg_ptr(0)?, 4)?.set(3, view.len() as u32)
    /// });
    /// // `launch_into` (hidden) launches it with a fresh 4-word span first and reads that back.
    /// assert_eq!(launch_into(backend, "view_len", LaunchDims::linear(1, 1), 4, &[])?[3], 6);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view holds no values.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("empty", |ctx, _| {
    ///     // An empty view is checked against nothing: any address will do.
    ///     let nothing = ctx.view::<f64>(0x10, 0)?;
    ///     ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.set(0, u32::from(nothing.is_empty()))
    /// });
    /// // `launch_into` (hidden) launches it with a fresh 1-word span first and reads that back.
    /// assert_eq!(launch_into(backend, "empty", LaunchDims::linear(1, 1), 1, &[])?, [1]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot(&self, index: usize) -> Result<usize> {
        if index < self.len {
            Ok(self.address + index * size_of::<T>())
        } else {
            Err(HostErrorCode::IllegalAddress.error("launch"))
        }
    }

    /// The value at `index`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("get", |ctx, _| {
    ///     let words = ctx.view::<u32>(ctx.arg_ptr(0)?, 2)?;
    ///     let past_end = words.get(2).is_err(); // index 2 of 2: HOST_ILLEGAL_ADDRESS
    ///     words.set(1, words.get(0)? + u32::from(past_end))
    /// });
    /// // `launch_into` (hidden) launches it with a fresh (zeroed) 2-word span, and reads it back.
    /// assert_eq!(launch_into(backend, "get", LaunchDims::linear(1, 1), 2, &[])?, [0, 1]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn get(&self, index: usize) -> Result<T> {
        let slot = self.slot(index)?;
        // SAFETY: `view` checked the whole view lies in memory the launch holds alive, which
        // other work touches atomically too; `T` has no invalid bit patterns.
        Ok(unsafe { super::bytes::read(slot) })
    }

    /// Stores `value` at `index`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("iota", |ctx, _| {
    ///     let words = ctx.view::<u32>(ctx.arg_ptr(0)?, 4)?;
    ///     (0..4).try_for_each(|i| words.set(i, i as u32 * 10))
    /// });
    /// // `launch_into` (hidden) launches it with a fresh 4-word span first and reads that back.
    /// let words = launch_into(backend, "iota", LaunchDims::linear(1, 1), 4, &[])?;
    /// assert_eq!(words, [0, 10, 20, 30]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn set(&self, index: usize, value: T) -> Result<()> {
        let slot = self.slot(index)?;
        // SAFETY: as in `get`.
        unsafe { super::bytes::write(slot, value) };
        Ok(())
    }

    /// Copies the whole view into `out`, which must be as long as the view.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    /// # fn launch_into(
    /// #     backend: HostBackend, name: &str, dims: LaunchDims, words: usize, more: &[Arg<'_>],
    /// # ) -> Result<Vec<u32>> {
    /// #     let rt = Runtime::new(backend)?;
    /// #     let out = rt.alloc(DeviceId(0), MemoryKind::Device, words * 4)?;
    /// #     let args: Vec<Arg<'_>> = [Arg::Span(out.all())].iter().chain(more).copied().collect();
    /// #     // SAFETY: the kernels of these examples stay inside their one span.
    /// #     let done = unsafe { rt.launch(DeviceId(0), name, dims, &args, &mut vec![])? };
    /// #     let mut bytes = vec![0u8; words * 4];
    /// #     rt.download(DeviceId(0), &mut bytes, out.all(), &mut vec![done])?;
    /// #     Ok(bytes.chunks(4).map(|w| u32::from_ne_bytes(w.try_into().unwrap())).collect())
    /// # }
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// backend.register_kernel("reverse", |ctx, _| {
    ///     let words = ctx.view::<u32>(ctx.arg_ptr(0)?, 4)?;
    ///     (0..4).try_for_each(|i| words.set(i, i as u32))?;
    ///     let mut copy = [0u32; 4];
    ///     words.read_into(&mut copy)?; // exactly as long as the view
    ///     (0..4).try_for_each(|i| words.set(i, copy[3 - i]))
    /// });
    /// // `launch_into` (hidden) launches it with a fresh 4-word span first and reads that back.
    /// let words = launch_into(backend, "reverse", LaunchDims::linear(1, 1), 4, &[])?;
    /// assert_eq!(words, [3, 2, 1, 0]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn read_into(&self, out: &mut [T]) -> Result<()> {
        if out.len() != self.len {
            return Err(HostErrorCode::InvalidValue.error("launch"));
        }
        for (index, value) in out.iter_mut().enumerate() {
            *value = self.get(index)?;
        }
        Ok(())
    }
}

/// The loaded kernel's function and arguments, as a queued launch carries them.
pub(super) struct Launch {
    pub(super) function: KernelFn,
    pub(super) dims: LaunchDims,
    pub(super) args: Vec<KernelArg>,
    pub(super) regions: Vec<Region>,
}

impl Launch {
    /// Runs every workgroup in order (x fastest), each with zeroed dynamic workgroup memory.
    pub(super) fn run(&self) -> Result<()> {
        let mut workgroup = alloc::vec![0u8; self.dims.dynamic_workgroup_bytes as usize];
        let [gx, gy, gz] = self.dims.grid;
        for z in 0..gz {
            for y in 0..gy {
                for x in 0..gx {
                    workgroup.fill(0);
                    let context = KernelContext {
                        group: [x, y, z],
                        dims: self.dims,
                        args: &self.args,
                        regions: &self.regions,
                    };
                    (self.function)(&context, &mut workgroup)?;
                }
            }
        }
        Ok(())
    }
}
