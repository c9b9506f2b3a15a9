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
pub type KernelFn = Arc<dyn Fn(&KernelContext<'_>, &mut [u8]) -> Result<()> + Send + Sync>;

/// A kernel loaded on one device (the host backend's [`gpu_core::backend::Backend::Kernel`]).
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
pub struct KernelContext<'a> {
    pub(super) group: [u32; 3],
    pub(super) dims: LaunchDims,
    pub(super) args: &'a [KernelArg],
    /// The memory the launch's pointer arguments lie in, held for the launch.
    pub(super) regions: &'a [Region],
}

impl<'a> KernelContext<'a> {
    /// This workgroup's position in the grid.
    pub fn group(&self) -> [u32; 3] {
        self.group
    }

    /// This workgroup's linear number (x fastest).
    pub fn group_index(&self) -> u64 {
        let [gx, gy, _] = self.dims.grid.map(u64::from);
        let [x, y, z] = self.group.map(u64::from);
        x + gx * (y + gy * z)
    }

    /// The launch's shape.
    pub fn dims(&self) -> LaunchDims {
        self.dims
    }

    /// The launch's arguments.
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
    pub fn arg_ptr(&self, index: usize) -> Result<usize> {
        match self.arg(index)? {
            KernelArg::Ptr(p) => Ok(p),
            _ => Err(HostErrorCode::InvalidValue.error("launch")),
        }
    }

    /// Argument `index` as a `u32`.
    pub fn arg_u32(&self, index: usize) -> Result<u32> {
        match self.arg(index)? {
            KernelArg::U32(v) => Ok(v),
            _ => Err(HostErrorCode::InvalidValue.error("launch")),
        }
    }

    /// Argument `index` as a `u64`.
    pub fn arg_u64(&self, index: usize) -> Result<u64> {
        match self.arg(index)? {
            KernelArg::U64(v) => Ok(v),
            _ => Err(HostErrorCode::InvalidValue.error("launch")),
        }
    }

    /// Argument `index` as an `f32`.
    pub fn arg_f32(&self, index: usize) -> Result<f32> {
        match self.arg(index)? {
            KernelArg::F32(v) => Ok(v),
            _ => Err(HostErrorCode::InvalidValue.error("launch")),
        }
    }

    /// `count` values of `T` at `address`, which must lie wholly in memory a pointer argument
    /// of this launch points into (an allocation or a registered host range); otherwise
    /// `HOST_ILLEGAL_ADDRESS`, as a GPU faults on a wild access.
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
pub struct DeviceView<'a, T> {
    address: usize,
    len: usize,
    _memory: PhantomData<&'a T>,
}

impl<T: DeviceScalar> DeviceView<'_, T> {
    /// How many values the view holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view holds no values.
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
    pub fn get(&self, index: usize) -> Result<T> {
        let slot = self.slot(index)?;
        // SAFETY: `view` checked the whole view lies in memory the launch holds alive, which
        // other work touches atomically too; `T` has no invalid bit patterns.
        Ok(unsafe { super::bytes::read(slot) })
    }

    /// Stores `value` at `index`.
    pub fn set(&self, index: usize, value: T) -> Result<()> {
        let slot = self.slot(index)?;
        // SAFETY: as in `get`.
        unsafe { super::bytes::write(slot, value) };
        Ok(())
    }

    /// Copies the whole view into `out`, which must be as long as the view.
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
