//! The narrow boundary every driver implements (CUDA, HIP, HSA, the host backend), and the
//! capability and launch types that cross it. Backends translate; the runtime decides.
//!
//! Shaped after wgpu-hal's `Api` (one trait, raw handles as associated types, so no lookup
//! table sits between the runtime and the driver) and IREE's HAL split (devices, memory,
//! streams and events, kernels, each queried for what it can do rather than assumed).
//!
//! Contract for every method that names a device, directly or through a stream, event or
//! kernel: the caller has made that device current on the calling thread (the runtime's
//! device guard does this, and restores whatever was current before, the runtime's or not).
//! Every method either succeeds or changes nothing, and reports driver failures as
//! [`Error::Driver`] with the driver's own name and number.
//!
//! What is safe and what is not, and who checks what:
//!
//! - Device ids: every backend refuses one it does not have ([`Error::UnknownDevice`],
//!   [`check_device`]) before its driver sees it.
//! - Handles (streams, events, modules, kernels) are checked by the backend that made them, before
//!   its driver sees them. The CUDA and HIP backends keep their live handles in a
//!   [`live::LiveHandles`] registry: every handle carries a [`live::HandleKey`] (a slot of its own
//!   in the registry and the slot's generation, never reused), a kernel is live while its module
//!   is, and a handle that was destroyed ([`Backend::stream_destroy`], [`Backend::event_destroy`]),
//!   unloaded ([`Backend::module_unload`], which takes its kernels with it), forgotten by
//!   [`Backend::reset_device`], or made by another backend (another instance included) is
//!   [`Error::StaleHandle`]. Each method holds the handles it was given for as long as its driver
//!   calls run, and a destroy makes its handle stale first and waits for the calls in flight on it,
//!   so a concurrent destroy never frees a handle mid-call. The host backend checks its own tables
//!   (its `HOST_INVALID_HANDLE`); the HSA backend its tables of streams, events and modules (not
//!   yet its kernels). A handle of another device where the call needs one device's (an event
//!   recorded on a stream, a kernel launched on one) is [`Error::WrongDevice`]
//!   ([`check_same_device`]).
//! - Addresses a backend hands out and takes back: [`Backend::free`] frees only memory the
//!   backend allocated, of that kind on that device, and not freed since, and
//!   [`Backend::host_unregister`] unpins only a range the backend registered, by its start;
//!   anything else is a typed error before the driver. The CUDA and HIP backends record both
//!   ([`live::LiveAllocations`], [`live::LiveRegistrations`]) and say
//!   [`Error::UnknownAddress`], or [`Error::NotEntryStart`] (inside a registered range) and
//!   [`Error::NotLocked`]; the host backend checks its own tables and answers as CUDA's driver
//!   would (`HOST_INVALID_VALUE`, `HOST_MEMORY_NOT_REGISTERED`); the HSA backend checks
//!   neither yet. Either call still requires, as the trait cannot check it, that no work still
//!   to run uses the memory (but for a free's `after` stream, whose work it waits for).
//! - Raw addresses given to the device cannot be checked (on a unified-addressing driver any
//!   address is a valid DMA target, the caller's host memory included), so the calls that take
//!   them, [`Backend::copy`], [`Backend::fill`] and [`Backend::launch`], are `unsafe fn`s, as
//!   in wgpu-hal. The runtime's safe API wraps them with spans of memory it owns or borrows for
//!   as long as the work runs. [`Backend::adopt_stream`] is `unsafe` for the same reason: the
//!   driver's raw handle it wraps cannot be checked; once adopted, the handle is checked like
//!   the backend's own.
//!
//! The standard kernel library's table (names, parameters, reaches), which every backend
//! implements and the runtime checks launches against, is [`library`]; what the driver
//! backends share to check handles and addresses, and the steps of theirs that are the same on
//! every driver, are [`live`].

pub mod graph;
pub mod library;
pub mod live;

use alloc::string::String;
use core::ffi::{CStr, c_void};
use core::fmt::Debug;

use crate::allocator::{AllocatorCapabilities, MemoryKind};
use crate::error::{ByteRange, Error, Result};
use crate::id::DeviceId;
use crate::workgroup::WorkgroupLimits;
use graph::{GraphDesc, NodeId, NodeOp};

/// What a device is and what its driver can do; the policies decide from this, never from the
/// backend's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The driver's name for the device.
    pub name: String,
    /// Device memory in bytes.
    pub total_memory: usize,
    /// Which memory kinds exist and which have a stream-ordered form.
    pub allocator: AllocatorCapabilities,
    /// Workgroup (shared) memory limits per block.
    pub workgroup: WorkgroupLimits,
    /// One address space for host and device pointers (copies need no direction).
    pub unified_addressing: bool,
    /// The device can read ordinary (pageable) host memory directly.
    pub pageable_memory_access: bool,
}

/// One argument of a kernel launch, passed by value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A device-accessible address.
    Ptr(usize),
    /// A 32-bit unsigned integer.
    U32(u32),
    /// A 64-bit unsigned integer.
    U64(u64),
    /// A 32-bit float.
    F32(f32),
}

/// How a launch uses a range of memory, as a race checker needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only read.
    Read,
    /// Only written.
    Write,
    /// Read and written (or not known which).
    ReadWrite,
}

/// The value of a fill and the width of the elements it sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillValue {
    /// Every byte.
    U8(u8),
    /// Every 16-bit element (2-byte aligned).
    U16(u16),
    /// Every 32-bit element (4-byte aligned).
    U32(u32),
}

impl FillValue {
    /// Bytes per element.
    pub const fn width(self) -> usize {
        match self {
            FillValue::U8(_) => 1,
            FillValue::U16(_) => 2,
            FillValue::U32(_) => 4,
        }
    }
}

/// Most threads one workgroup may have: CUDA's limit on every current NVIDIA GPU, and the
/// largest workgroup AMD GPUs run. [`LaunchDims::check_shape`] refuses more.
pub const MAX_THREADS_PER_WORKGROUP: u32 = 1024;

/// The shape of a kernel launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    /// Workgroups (blocks) per dimension.
    pub grid: [u32; 3],
    /// Threads per workgroup per dimension.
    pub block: [u32; 3],
    /// Dynamic workgroup memory per workgroup, in bytes (from the workgroup planner).
    pub dynamic_workgroup_bytes: u32,
}

impl LaunchDims {
    /// A one-dimensional launch of `grid` workgroups of `block` threads, no dynamic memory.
    pub const fn linear(grid: u32, block: u32) -> Self {
        Self {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            dynamic_workgroup_bytes: 0,
        }
    }

    /// Total threads in the launch, or `None` if the count overflows.
    pub fn threads(&self) -> Option<u64> {
        self.grid
            .iter()
            .chain(&self.block)
            .try_fold(1u64, |acc, &n| acc.checked_mul(u64::from(n)))
    }

    /// [`Error::LaunchShape`] naming the first part of the shape no device runs: a grid or
    /// workgroup dimension of zero, or more than [`MAX_THREADS_PER_WORKGROUP`] threads per
    /// workgroup. (Dynamic workgroup memory is checked against the device's own limits.)
    pub fn check_shape(&self) -> Result<()> {
        const AXES: [(&str, &str); 3] = [
            ("grid x", "workgroup x"),
            ("grid y", "workgroup y"),
            ("grid z", "workgroup z"),
        ];
        let refuse = |what, given, min, max| Error::LaunchShape {
            what,
            given,
            min,
            max,
            grid: self.grid,
            block: self.block,
        };
        let most = u64::from(MAX_THREADS_PER_WORKGROUP);
        for ((grid_axis, block_axis), (&groups, &threads)) in
            AXES.iter().zip(self.grid.iter().zip(&self.block))
        {
            if groups == 0 {
                return Err(refuse(*grid_axis, 0, 1, u64::from(u32::MAX)));
            }
            if threads == 0 {
                return Err(refuse(*block_axis, 0, 1, most));
            }
        }
        let threads = self.block.iter().map(|&n| u64::from(n)).product::<u64>();
        if threads > most {
            return Err(refuse("threads per workgroup", threads, 1, most));
        }
        Ok(())
    }
}

/// A GPU driver (or the host simulation of one), as the runtime sees it.
///
/// Implementations are shared by every thread of the runtime (`Send + Sync`); the runtime
/// serialises what the driver requires serialised. Raw handles are associated types: small
/// `Copy` values the runtime stores in its own tables, never interprets.
pub trait Backend: Send + Sync + 'static {
    /// An in-order queue of work on one device.
    type Stream: Copy + Eq + Send + Sync + Debug + 'static;
    /// A completion marker recorded on a stream.
    type Event: Copy + Eq + Send + Sync + Debug + 'static;
    /// A kernel loaded on one device, ready to launch.
    type Kernel: Copy + Eq + Send + Sync + Debug + 'static;
    /// A module image (a program's own kernels, compiled elsewhere) loaded on one device.
    type Module: Copy + Eq + Send + Sync + Debug + 'static;
    /// Whatever was current on a thread when [`Backend::save_current`] looked: one of the
    /// backend's devices, nothing, or (CUDA) a context the program created itself, which no
    /// [`DeviceId`] can name. Only [`Backend::restore_current`] and [`Backend::is_current`]
    /// read it.
    type SavedCurrent: Copy + Send + Debug;
    /// A graph of device work instantiated on one device ([`Backend::graph_instantiate`]);
    /// `core::convert::Infallible` for a backend without graphs.
    type Graph: Copy + Eq + Send + Sync + Debug + 'static;

    /// Whether every method makes the device it acts on current by itself and puts the
    /// caller's context back before returning (the CUDA backend does, with one
    /// `cuCtxGetCurrent` per call). The runtime then skips its own device guard, which would
    /// only repeat that query. Backends that rely on the contract above leave it `false`.
    const SCOPES_ITS_CALLS: bool = false;

    /// Whether an error that loses a device ([`crate::error::DriverError::loses_device`])
    /// loses every device of the process, and for good: on CUDA (driver 580, two H200s) a
    /// kernel's illegal address on one device made the other's next allocation fail with the
    /// same code, and after a primary context reset even retaining the context again failed,
    /// as CUDA's documentation says ("the process must be terminated and relaunched"). The
    /// runtime then marks every device lost at once, and [`Backend::reset_device`] cannot
    /// bring them back. False: the loss is the one device's, and a reset recovers it.
    const DEVICE_LOSS_ENDS_THE_PROCESS: bool = false;

    /// Short lower-case name (`"cuda"`, `"host"`), used in errors and reports.
    fn name(&self) -> &'static str;

    /// How many devices the driver reports.
    fn device_count(&self) -> usize;

    /// What `device` is and can do.
    fn device_info(&self, device: DeviceId) -> Result<DeviceInfo>;

    /// The calling thread's current device, if any. A backend whose driver can have a current
    /// context of no device of the backend (CUDA: a context the program created itself) fails
    /// with [`Error::ForeignContext`] then; [`Backend::save_current`] has no such failure.
    fn current_device(&self) -> Result<Option<DeviceId>>;

    /// Makes `device` current on the calling thread (`None`: no device current).
    fn set_current_device(&self, device: Option<DeviceId>) -> Result<()>;

    /// Whatever is current on the calling thread (one of the backend's devices, nothing, or a
    /// context the backend does not own), for [`Backend::restore_current`] to put back. The
    /// device guard calls this at every bracket, so it must cost no more than one query of the
    /// driver's thread state.
    fn save_current(&self) -> Result<Self::SavedCurrent>;

    /// Makes current on the calling thread what `saved` recorded (from
    /// [`Backend::save_current`], on any thread of the process): the device, nothing, or the
    /// foreign context, which must still exist (its owner has not destroyed it).
    fn restore_current(&self, saved: Self::SavedCurrent) -> Result<()>;

    /// Whether `saved` records `device` as current: the device guard skips the switch then.
    /// A comparison of values the backend already holds, never a driver call.
    fn is_current(&self, saved: Self::SavedCurrent, device: DeviceId) -> bool;

    /// Allocates `bytes` of `kind` on `device`, usable at once by the host (host kinds) and by
    /// every stream. Returns `Ok(None)` when the driver is out of memory.
    fn allocate(&self, device: DeviceId, kind: MemoryKind, bytes: usize) -> Result<Option<usize>>;

    /// Allocates `bytes` of `kind` in `stream`'s order, where the device's capabilities say the
    /// kind has a stream-ordered form. Returns `Ok(None)` when the driver is out of memory.
    fn allocate_on_stream(
        &self,
        stream: Self::Stream,
        kind: MemoryKind,
        bytes: usize,
    ) -> Result<Option<usize>>;

    /// Frees memory from [`Backend::allocate`] or [`Backend::allocate_on_stream`]; with
    /// `after` (a stream of `device`: CUDA's cuMemFreeAsync takes a stream of the current
    /// context), not before the work already enqueued on that stream has finished.
    fn free(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        after: Option<Self::Stream>,
    ) -> Result<()>;

    /// The granularity (a power of two) of `device`'s virtual memory management for `kind`:
    /// address ranges reserved, and physical memory mapped into them in pieces of this size
    /// (CUDA: `cuMemGetAllocationGranularity`). `None` (the default): the backend has none,
    /// and the `vm_*` calls below are never made; the allocator's growable segments fall
    /// back to ordinary ones.
    fn vm_granularity(&self, device: DeviceId, kind: MemoryKind) -> Option<usize> {
        let _ = (device, kind);
        None
    }

    /// Reserves address space on `device` for `kind`: at most `wanted` bytes and at least
    /// `needed` (both multiples of the granularity), as the backend can; its start and size,
    /// or `Ok(None)` when it cannot reserve `needed`. Nothing is mapped yet (CUDA:
    /// `cuMemAddressReserve`).
    fn vm_reserve(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        wanted: usize,
        needed: usize,
    ) -> Result<Option<(usize, usize)>> {
        let _ = (device, kind, wanted, needed);
        Err(vm_unsupported("vm_reserve"))
    }

    /// Creates `size` bytes of physical memory on `device` and maps it at `address` (inside a
    /// reserved range, not mapped, granularity-aligned), readable and writable by `device`;
    /// `Ok(false)` when the device is out of memory (CUDA: `cuMemCreate`, `cuMemMap`,
    /// `cuMemSetAccess`).
    fn vm_map(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<bool> {
        let _ = (device, kind, address, size);
        Err(vm_unsupported("vm_map"))
    }

    /// Lets `peer` read and write the mapped pieces of `[address, address + size)` on
    /// `device` (CUDA: `cuMemSetAccess` with the peer's location), where the runtime enabled
    /// peer access.
    fn vm_set_access(
        &self,
        device: DeviceId,
        address: usize,
        size: usize,
        peer: DeviceId,
    ) -> Result<()> {
        let _ = (device, address, size, peer);
        Err(vm_unsupported("vm_set_access"))
    }

    /// Unmaps `[address, address + size)` (mapped by [`Backend::vm_map`]) and releases its
    /// physical memory, with `after` not before the work already enqueued on that stream has
    /// finished (CUDA: `cuMemUnmap`, `cuMemRelease`, after synchronising the stream).
    fn vm_unmap(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
        after: Option<Self::Stream>,
    ) -> Result<()> {
        let _ = (device, kind, address, size, after);
        Err(vm_unsupported("vm_unmap"))
    }

    /// Releases a range from [`Backend::vm_reserve`], nothing of it mapped (CUDA:
    /// `cuMemAddressFree`).
    fn vm_release(
        &self,
        device: DeviceId,
        kind: MemoryKind,
        address: usize,
        size: usize,
    ) -> Result<()> {
        let _ = (device, kind, address, size);
        Err(vm_unsupported("vm_release"))
    }

    /// Tells the backend that a runtime's allocator carved the buffer `range` out of memory
    /// the backend allocated on `device` (`live`), or took it back (not `live`), so that a
    /// backend that checks accesses checks them per buffer, not per driver allocation (as
    /// compute-sanitizer can, given NVTX memory-region annotations): the host backend then
    /// refuses a copy, fill or library kernel that runs out of its buffer or starts in freed
    /// memory; the CUDA and HIP backends pass it on to gpu-recorder when it records the
    /// process (a kernel's footprint is then its buffer, not the whole driver allocation). An
    /// annotation, not a driver call; by default it does nothing. The runtime calls it for every
    /// buffer handed out and taken back, cache hits included, with the size requested (not the
    /// allocator's rounded block): a backend that does nothing with it must cost nothing.
    ///
    /// # Errors
    /// A checking backend refuses a range outside its allocations, a live buffer overlapping
    /// another, or the release of a buffer it was not told of; nothing changes then.
    fn note_buffer(&self, device: DeviceId, range: ByteRange, live: bool) -> Result<()> {
        let _ = (device, range, live);
        Ok(())
    }

    /// Whether [`Backend::note_launch_footprint`] does anything: the runtime asks this once per
    /// launch and builds a footprint only when it is true, so a backend that says false (the
    /// default) costs a launch nothing more. The CUDA and HIP backends say true while
    /// gpu-recorder records the process (one cached atomic load).
    fn footprints_wanted(&self) -> bool {
        false
    }

    /// Tells the backend, right before the launch of `kernel` on `stream` on the same thread,
    /// exactly which bytes that launch reaches and how (`ranges`: a library kernel's reaches
    /// from its table, or each span of a module's kernel as read-write). The CUDA and HIP
    /// backends pass it on to gpu-recorder, which writes it as that launch's footprint
    /// instead of the whole buffers its pointer parameters point into. An annotation, not a
    /// driver call; by default it does nothing (and the runtime calls it only when
    /// [`Backend::footprints_wanted`] says so).
    fn note_launch_footprint(
        &self,
        stream: Self::Stream,
        kernel: Self::Kernel,
        ranges: &[(ByteRange, Access)],
    ) {
        let _ = (stream, kernel, ranges);
    }

    /// Pins the caller's host range for every device (CUDA: cuMemHostRegister with PORTABLE)
    /// and writes each device's address for `range.start` into `device_ptrs`.
    fn host_register(&self, range: ByteRange, device_ptrs: &mut [usize]) -> Result<()>;

    /// Unpins the range a successful [`Backend::host_register`] started at `start`.
    fn host_unregister(&self, start: usize) -> Result<()>;

    /// If `ptr` lies in host memory pinned by anyone, the pinned allocation's extent, with each
    /// device's address for the extent's start written into `device_ptrs`.
    fn host_pinned_extent(
        &self,
        ptr: usize,
        device_ptrs: &mut [usize],
    ) -> Result<Option<ByteRange>>;

    /// Creates a stream on `device` that does not synchronise with any other stream.
    fn stream_create(&self, device: DeviceId) -> Result<Self::Stream>;

    /// The backend's handle for a stream it did not create (a framework's, such as PyTorch's),
    /// given as the driver's raw handle, to enqueue work and events on without owning it: the
    /// runtime never destroys an adopted stream. CUDA: any `CUstream` of `device`'s primary
    /// context, the legacy default stream (`0`) and the per-thread default stream included;
    /// host backend: the number of a live stream of `device` (`gpu_rt::host::HostStream::raw`).
    ///
    /// # Safety
    /// `raw` must be a live stream of `device` in the driver's sense (or one of the driver's
    /// default-stream handles) and stay alive for as long as the runtime may enqueue on it:
    /// until the runtime shuts down. Backends that cannot check a raw handle (CUDA: the driver
    /// dereferences it) pass it on as it is.
    unsafe fn adopt_stream(&self, device: DeviceId, raw: usize) -> Result<Self::Stream>;

    /// Destroys a stream; work already enqueued on it still runs.
    fn stream_destroy(&self, stream: Self::Stream) -> Result<()>;

    /// Blocks the host until all work enqueued on `stream` has finished.
    fn stream_synchronize(&self, stream: Self::Stream) -> Result<()>;

    /// Creates an event on `device` (no timing).
    fn event_create(&self, device: DeviceId) -> Result<Self::Event>;

    /// Destroys an event; waits already enqueued on it stay valid.
    fn event_destroy(&self, event: Self::Event) -> Result<()>;

    /// Records `event` on `stream`: it completes when the work enqueued before it has. The
    /// runtime guarantees that both belong to the same device.
    fn event_record(&self, event: Self::Event, stream: Self::Stream) -> Result<()>;

    /// Makes work enqueued on `stream` after this call wait for `event`'s last record (the event
    /// may belong to another device).
    fn stream_wait_event(&self, stream: Self::Stream, event: Self::Event) -> Result<()>;

    /// Whether `event`'s last record has completed (true if it was never recorded).
    fn event_query(&self, event: Self::Event) -> Result<bool>;

    /// Blocks the host until `event`'s last record has completed.
    fn event_synchronize(&self, event: Self::Event) -> Result<()>;

    /// Blocks the host until all work on `device` has finished. Used only by the allocator's
    /// last out-of-memory rung, never on a hot path.
    fn device_synchronize(&self, device: DeviceId) -> Result<()>;

    /// Makes a lost device usable again ([`crate::error::DriverError::loses_device`]; CUDA:
    /// cuDevicePrimaryCtxReset, then the backend's own set-up of the device again). Every
    /// stream, event, allocation, module and loaded kernel of the device is gone afterwards:
    /// using one of their handles is an error, and none needs destroying. Peer access to and
    /// from the device is gone too. Also works on a device that is not lost.
    fn reset_device(&self, device: DeviceId) -> Result<()>;

    /// Whether `device` can be given direct access to `peer`'s memory over the link between
    /// them (CUDA: cuDeviceCanAccessPeer; HSA: the peer's pool allows `device`'s agent). A
    /// question about the hardware: nothing changes.
    fn peer_access_possible(&self, device: DeviceId, peer: DeviceId) -> Result<bool>;

    /// Gives `device` direct access to `peer`'s memory, of every form the backend allocates:
    /// synchronous allocations and the stream-ordered pool alike (CUDA: cuCtxEnablePeerAccess
    /// in `device`'s context, and cuMemPoolSetAccess on `peer`'s default pool), for memory
    /// allocated before the call and after it. Enabling a pair twice is no error. Copies and
    /// kernels on `device`'s streams may then reach `peer`'s memory directly.
    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()>;

    /// Enqueues a copy of `bytes` from `src` to `dst` (host or device addresses) on `stream`.
    ///
    /// The driver rule for memory of other devices (measured on two H100s, driver 580): a
    /// copy on a stream of device S whose source or destination is stream-ordered memory of
    /// another device D ([`Backend::allocate_on_stream`]) is refused (CUDA's
    /// `CUDA_ERROR_INVALID_VALUE`) unless S has peer access to D
    /// ([`Backend::enable_peer_access`]); synchronous allocations of D are copied, staged
    /// by the driver. Copies between two devices' memory go through [`Backend::copy_peer`],
    /// which names each side's device and works with or without peer access.
    ///
    /// # Safety
    /// `[src, src + bytes)` must be valid for reads and `[dst, dst + bytes)` valid for writes,
    /// as memory of the stream's device, memory it can reach, or host memory the driver can
    /// DMA, from this call until the copy has completed (an event recorded after it, or the
    /// stream, has been synchronised); meanwhile the host must not write the source or touch
    /// the destination. A wrong address is not always caught: on a unified-addressing driver
    /// the DMA engine writes wherever `dst` points.
    unsafe fn copy(&self, stream: Self::Stream, dst: usize, src: usize, bytes: usize)
    -> Result<()>;

    /// Enqueues a copy as [`Backend::copy`] does, of a source that stays read-only until the
    /// copy has completed: nothing writes it meanwhile, neither the host nor other work on any
    /// stream (an upload from host memory the caller lends through a shared borrow). A GPU
    /// driver's copy is the same call, the default; a backend that carries device work out
    /// in host memory reads such a source without claiming write access to it.
    ///
    /// # Safety
    /// As for [`Backend::copy`], and nothing writes `[src, src + bytes)` until the copy has
    /// completed, which `[dst, dst + bytes)` therefore does not overlap.
    unsafe fn copy_from_read_only(
        &self,
        stream: Self::Stream,
        dst: usize,
        src: usize,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the caller upholds `copy`'s contract, which this one extends.
        unsafe { self.copy(stream, dst, src, bytes) }
    }

    /// Enqueues a copy of `bytes` from memory of `src_device` at `src` to memory of
    /// `dst_device` at `dst` on `stream` (of either device, or of a third): CUDA's
    /// cuMemcpyPeerAsync. It runs directly over the link where the stream's device has peer
    /// access to the other ([`Backend::enable_peer_access`]), and staged through the host by
    /// the driver where it has not; either way every memory form is accepted.
    ///
    /// # Safety
    /// As for [`Backend::copy`], with `[src, src + bytes)` memory of `src_device` and
    /// `[dst, dst + bytes)` memory of `dst_device`.
    unsafe fn copy_peer(
        &self,
        stream: Self::Stream,
        dst: usize,
        dst_device: DeviceId,
        src: usize,
        src_device: DeviceId,
        bytes: usize,
    ) -> Result<()>;

    /// Enqueues setting `bytes` at `dst` to `value` on `stream`.
    ///
    /// # Safety
    /// `[dst, dst + bytes)` must be valid for writes, as memory the stream's device can reach,
    /// from this call until the fill has completed, and the host must not touch it meanwhile.
    unsafe fn fill(&self, stream: Self::Stream, dst: usize, value: u8, bytes: usize) -> Result<()>;

    /// Enqueues setting `count` elements of `value`'s width at `dst` to `value` on `stream`.
    ///
    /// # Safety
    /// `[dst, dst + count * value.width())` must be valid for writes, as for [`Backend::fill`].
    unsafe fn fill_elements(
        &self,
        stream: Self::Stream,
        dst: usize,
        value: FillValue,
        count: usize,
    ) -> Result<()>;

    /// Loads a module image on `device`: a program's own kernels, as a compiler embedded them
    /// (CUDA: PTX text, a cubin or a fatbin, JIT-compiled by the driver where it is PTX). A
    /// backend that cannot run such images fails with [`Error::Unsupported`].
    ///
    /// # Safety
    /// `image` points to a complete image in a format the driver reads (PTX text ends with a
    /// NUL), readable for the duration of the call.
    unsafe fn module_load(&self, device: DeviceId, image: *const c_void) -> Result<Self::Module>;

    /// Unloads a module from [`Backend::module_load`]; its kernels become invalid.
    fn module_unload(&self, module: Self::Module) -> Result<()>;

    /// The kernel called `name` in `module`, on the module's device.
    fn module_kernel(&self, module: Self::Module, name: &CStr) -> Result<Self::Kernel>;

    /// The kernel called `name` from the backend's kernel library, loaded on `device`.
    fn kernel(&self, device: DeviceId, name: &str) -> Result<Self::Kernel>;

    /// The size in bytes of each of `kernel`'s parameters, in order, as the driver knows them
    /// (CUDA: `cuFuncGetParamInfo`, drivers of CUDA 12.4 and later): what a caller needs to
    /// copy the values of a raw parameter array ([`Backend::launch_packed`]'s) to launch them
    /// later. [`Error::Unsupported`] where the driver cannot tell (the default).
    fn kernel_param_sizes(&self, kernel: Self::Kernel) -> Result<alloc::vec::Vec<usize>> {
        let _ = kernel;
        Err(Error::Unsupported {
            backend: self.name(),
            what: "asking a kernel's parameter sizes",
        })
    }

    /// The workgroup memory `kernel` declares statically (CUDA: cuFuncGetAttribute
    /// SHARED_SIZE_BYTES). It counts against the same per-workgroup limit as the dynamic bytes,
    /// so a kernel may be allowed at most the device's opt-in limit less this.
    fn kernel_static_workgroup_bytes(&self, kernel: Self::Kernel) -> Result<u32>;

    /// Allows `kernel` to use up to `bytes` of dynamic workgroup memory per workgroup (CUDA:
    /// cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES), needed above the default limit. The
    /// driver refuses more than the device's opt-in limit less the kernel's static bytes.
    fn kernel_allow_workgroup_bytes(&self, kernel: Self::Kernel, bytes: u32) -> Result<()>;

    /// Enqueues `kernel` on `stream` with `dims` and `args`.
    ///
    /// # Safety
    /// Every byte the kernel reaches through its [`KernelArg::Ptr`] arguments (as the kernel's
    /// own definition and its other arguments, counts and sizes, decide) must be valid for the
    /// kernel's reads and writes, as memory the stream's device can reach, from this call
    /// until the kernel has completed, and the host must not access it meanwhile in a way that
    /// races with the kernel (reading what the kernel only reads is fine).
    unsafe fn launch(
        &self,
        stream: Self::Stream,
        kernel: Self::Kernel,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<()>;

    /// Enqueues `kernel` on `stream` with `dims` and the program's own parameter array, as a
    /// compiler lays it out (CUDA's `void **kernelParams`: one pointer per parameter, to a value
    /// of the parameter's type). Nothing can check the values against the kernel here.
    ///
    /// # Safety
    /// As for [`Backend::launch`]; in addition `params` points to one valid pointer per kernel
    /// parameter, each to a value of that parameter's type, readable during the call.
    unsafe fn launch_packed(
        &self,
        stream: Self::Stream,
        kernel: Self::Kernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()>;

    /// Builds the driver's graph of `graph`'s nodes, with its edges, and instantiates it on
    /// `device` (made current by the caller), ready to replay. Nothing reaches memory until a
    /// replay runs. A launch node of a library kernel has its arguments checked against the
    /// kernel's parameters; one of a module's kernel passes them as given, the graph's
    /// recorder having promised that the kernel's parameters have the values' types.
    /// [`Error::Unsupported`] for a backend without graphs (the default).
    fn graph_instantiate(
        &self,
        device: DeviceId,
        graph: &GraphDesc<Self::Kernel>,
    ) -> Result<Self::Graph> {
        let _ = (device, graph);
        Err(no_graphs(self.name()))
    }

    /// Enqueues one replay of `graph` on `stream` (of the graph's device): one stream
    /// operation, after the stream's earlier work and before its later work, in which each
    /// node runs after the nodes it names.
    ///
    /// # Safety
    /// As for [`Backend::copy`], [`Backend::fill`] and [`Backend::launch`], for every node as
    /// it is at this call: each byte a node reaches stays valid until the replay has completed,
    /// and the host does not race with it.
    unsafe fn graph_launch(&self, stream: Self::Stream, graph: Self::Graph) -> Result<()> {
        let _ = (stream, graph);
        Err(no_graphs(self.name()))
    }

    /// Makes `node` of `graph` do `op` from the next replay on (replays already enqueued run as
    /// they were): same kind as recorded, on the graph's device. Nothing changes on an error.
    fn graph_set_node(
        &self,
        graph: Self::Graph,
        node: NodeId,
        op: &NodeOp<Self::Kernel>,
    ) -> Result<()> {
        let _ = (graph, node, op);
        Err(no_graphs(self.name()))
    }

    /// Destroys `graph`; replays already enqueued still run to completion.
    fn graph_destroy(&self, graph: Self::Graph) -> Result<()> {
        let _ = graph;
        Err(no_graphs(self.name()))
    }
}

/// What a backend without graphs answers every graph call.
fn no_graphs(backend: &'static str) -> Error {
    Error::Unsupported {
        backend,
        what: "graphs of device work",
    }
}

/// The typed error for a device id the backend does not have.
pub fn check_device<B: Backend + ?Sized>(backend: &B, device: DeviceId) -> Result<()> {
    let device_count = backend.device_count();
    if device.index() < device_count {
        Ok(())
    } else {
        Err(Error::UnknownDevice {
            device,
            device_count,
        })
    }
}

/// The typed error for a handle of device `found` used where device `expected`'s is needed
/// (an event recorded on another device's stream, a kernel launched on one): refused before
/// the driver, whose own error would only say "invalid handle".
pub fn check_same_device(expected: DeviceId, found: DeviceId) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(Error::WrongDevice { expected, found })
    }
}

/// The typed error for a slice of per-device slots (`device_ptrs` of
/// [`Backend::host_register`] and [`Backend::host_pinned_extent`]) longer than the backend's
/// `device_count` devices: it names the first device that does not exist.
pub fn check_device_slots(device_count: usize, slots: &[usize]) -> Result<()> {
    if slots.len() <= device_count {
        Ok(())
    } else {
        Err(Error::UnknownDevice {
            device: DeviceId(device_count as u32),
            device_count,
        })
    }
}

/// The error of a virtual-memory call on a backend without virtual memory management.
fn vm_unsupported(what: &'static str) -> Error {
    Error::Unsupported {
        backend: "backend without virtual memory management",
        what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_shapes_with_a_zero_or_too_many_threads_name_the_part() {
        assert_eq!(LaunchDims::linear(1, 1024).check_shape(), Ok(()));
        let shape = |grid, block| LaunchDims {
            grid,
            block,
            dynamic_workgroup_bytes: 0,
        };
        assert_eq!(shape([7, 3, 2], [8, 8, 16]).check_shape(), Ok(()));
        let refused = |dims: LaunchDims| match dims.check_shape() {
            Err(Error::LaunchShape {
                what, given, max, ..
            }) => (what, given, max),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused(LaunchDims::linear(0, 64)),
            ("grid x", 0, u64::from(u32::MAX))
        );
        assert_eq!(refused(shape([1, 1, 0], [1, 1, 1])).0, "grid z");
        assert_eq!(
            refused(shape([1, 1, 1], [1, 0, 1])),
            ("workgroup y", 0, 1024)
        );
        assert_eq!(
            refused(LaunchDims::linear(1, 4096)),
            ("threads per workgroup", 4096, 1024)
        );
        assert_eq!(
            refused(shape([1, 1, 1], [64, 64, 1])),
            ("threads per workgroup", 4096, 1024)
        );
        let message = alloc::string::ToString::to_string(
            &LaunchDims::linear(0, 64).check_shape().unwrap_err(),
        );
        assert!(message.contains("grid x is 0"), "{message}");
    }

    #[test]
    fn handles_of_one_device_pass_and_of_two_name_both() {
        assert_eq!(check_same_device(DeviceId(1), DeviceId(1)), Ok(()));
        assert_eq!(
            check_same_device(DeviceId(0), DeviceId(1)),
            Err(Error::WrongDevice {
                expected: DeviceId(0),
                found: DeviceId(1)
            })
        );
    }

    #[test]
    fn device_slots_up_to_the_device_count_pass_and_more_name_the_first_missing_device() {
        assert_eq!(check_device_slots(2, &[]), Ok(()));
        assert_eq!(check_device_slots(2, &[0, 0]), Ok(()));
        for slots in [&[0usize; 3][..], &[0; 5]] {
            assert_eq!(
                check_device_slots(2, slots),
                Err(Error::UnknownDevice {
                    device: DeviceId(2),
                    device_count: 2
                })
            );
        }
        assert_eq!(
            check_device_slots(0, &[0]),
            Err(Error::UnknownDevice {
                device: DeviceId(0),
                device_count: 0
            })
        );
    }
}
