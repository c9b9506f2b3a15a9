//! The one error type of the toolkit: a kind a caller can match on, with the numbers that
//! explain it, and the driver's own name and number when a driver call caused it.
//!
//! The messages, one per kind, saying what went wrong and what to do, are the `Display` impl
//! of the `display` submodule.

mod display;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::id::{
    DeviceId, EventId, HandleId, LockCounts, LockOwner, MemoryKind, StreamId, TokenId,
};

/// A half-open host byte range `[start, start + len)` as named in errors and reports.
///
/// `start + len` may equal `2^64` (a range ending at the top of the address space), so the
/// end is never stored or computed unchecked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ByteRange {
    /// First byte of the range.
    pub start: usize,
    /// Number of bytes; never zero for a range the toolkit accepted.
    pub len: usize,
}

impl ByteRange {
    /// The range `[start, start + len)`, or `None` if it is empty or would run past the top of
    /// the address space.
    #[inline]
    pub const fn new(start: usize, len: usize) -> Option<Self> {
        if len == 0 || start.checked_add(len - 1).is_none() {
            None
        } else {
            Some(Self { start, len })
        }
    }

    /// The last byte of the range (inclusive), which never overflows.
    #[inline]
    pub const fn last(&self) -> usize {
        self.start + (self.len - 1)
    }

    /// Whether `other` lies wholly inside `self`.
    #[inline]
    pub const fn contains(&self, other: &ByteRange) -> bool {
        other.start >= self.start && other.last() <= self.last()
    }

    /// Whether the two ranges share at least one byte.
    #[inline]
    pub const fn overlaps(&self, other: &ByteRange) -> bool {
        self.start <= other.last() && other.start <= self.last()
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:#x}, {:#x}] ({} bytes)",
            self.start,
            self.last(),
            self.len
        )
    }
}

/// A failed driver call, as the backend reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverError {
    /// The backend that made the call (`"cuda"`, `"hip"`, `"hsa"`, `"host"`).
    pub backend: &'static str,
    /// The driver function that failed, e.g. `"cuMemHostRegister"`.
    pub call: &'static str,
    /// The driver's own name for the code, e.g. `"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"`.
    pub name: &'static str,
    /// The driver's numeric code.
    pub code: i64,
}

/// Driver codes that end a device's useful life until it is reset ("sticky" errors: the
/// context is corrupt and every later call on it fails): CUDA's and HIP's illegal address
/// (700), hardware stack error (714), illegal instruction (715), misaligned address (716),
/// invalid address space (717), invalid program counter (718) and launch failure (719); the
/// host backend reports its kernel faults with the same numbers.
pub const DEVICE_LOSING_CODES: [i64; 7] = [700, 714, 715, 716, 717, 718, 719];

impl DriverError {
    /// Whether this failure ends the device's useful life until it is reset (CUDA, HIP and
    /// the host backend: a code of [`DEVICE_LOSING_CODES`]). Any other driver error concerns
    /// only the call that returned it.
    pub fn loses_device(&self) -> bool {
        matches!(self.backend, "cuda" | "hip" | "host") && DEVICE_LOSING_CODES.contains(&self.code)
    }
}

/// Everything that can go wrong in the toolkit. Every failed call leaves the object it was
/// called on exactly as it was before the call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // ----- bad arguments, shared by all modules -----
    /// A size or length of zero where at least one byte is needed.
    ZeroSize {
        /// What was zero, e.g. `"lock length"`.
        what: &'static str,
    },
    /// A null pointer where a real address is needed.
    NullPointer {
        /// What was null, e.g. `"lock start"`.
        what: &'static str,
    },
    /// `ptr + len` runs past the top of the address space.
    AddressOverflow {
        /// Start of the requested range.
        ptr: usize,
        /// Requested length.
        len: usize,
    },
    /// A device id outside the backend's devices.
    UnknownDevice {
        /// The id given.
        device: DeviceId,
        /// How many devices there are.
        device_count: usize,
    },
    /// The host ran out of memory for the toolkit's own bookkeeping.
    HostOutOfMemory {
        /// What the memory was for.
        what: &'static str,
    },

    // ----- lock interval table -----
    /// A lock request overlaps an existing entry without lying inside it.
    LockOverlap {
        /// The range asked for.
        requested: ByteRange,
        /// The entry it collides with.
        conflicting: ByteRange,
        /// Whether the conflicting entry was pinned by someone else.
        external: bool,
    },
    /// An unlock (or query) names memory the table holds no entry for.
    NotLocked {
        /// The pointer given.
        ptr: usize,
    },
    /// An exact-start unlock named a pointer inside an entry but not its start.
    NotEntryStart {
        /// The pointer given.
        ptr: usize,
        /// The entry that contains it.
        entry: ByteRange,
    },
    /// Memory already pinned by someone else covers only part of the requested range.
    ExternalPinTooSmall {
        /// The range asked for.
        requested: ByteRange,
        /// The extent the driver reports as pinned.
        pinned: ByteRange,
    },
    /// An unlock of an entry that holds no lock of the unlocker's kind: its locks belong to
    /// others, who alone release them. A raw unlock (the runtime's `unlock_range`, C's
    /// `gpurt_unlock`) never removes the pin a guard (`LockedHost`, `gpurt_host_register`)
    /// relies on.
    PinOwned {
        /// The pointer given.
        ptr: usize,
        /// The entry that contains it.
        entry: ByteRange,
        /// The kind of lock the unlock would have released.
        releaser: LockOwner,
        /// The entry's locks, by owner (none of `releaser`'s kind).
        held: LockCounts,
    },

    // ----- workgroup -----
    /// A buffer in the private (per-thread) address space was handed to the workgroup planner,
    /// which lays out memory shared by every thread of a workgroup.
    PrivateBufferInWorkgroup {
        /// The buffer's name.
        buffer: String,
        /// Its position in the list given to the planner.
        index: usize,
    },
    /// A workgroup buffer's alignment is zero or not a power of two.
    WorkgroupAlignment {
        /// The buffer's name.
        buffer: String,
        /// Its position in the list given to the planner.
        index: usize,
        /// The alignment given.
        align: u32,
    },
    /// A workgroup buffer's live range ends before it starts.
    WorkgroupLiveRange {
        /// The buffer's name.
        buffer: String,
        /// Its position in the list given to the planner.
        index: usize,
        /// First phase given.
        first: u32,
        /// Last phase given.
        last: u32,
    },
    /// A launch gave a different number of sizes than the plan has launch-sized buffers.
    LaunchSizeCount {
        /// The launch-sized buffers, in the order their sizes are expected.
        buffers: Vec<String>,
        /// How many sizes the launch gave.
        given: usize,
    },

    // ----- allocator -----
    /// An allocation alignment that is not a power of two, or that exceeds the segment the
    /// request's size is carved from.
    InvalidAlignment {
        /// The alignment given.
        alignment: usize,
        /// The largest alignment this request could have (its segment size).
        limit: usize,
    },
    /// A memory kind the device (or the allocator's capabilities for it) does not provide.
    KindUnsupported {
        /// The device asked.
        device: DeviceId,
        /// The kind asked for.
        kind: MemoryKind,
    },
    /// The device's memory of one kind is exhausted even after every reclaim step.
    OutOfMemory {
        /// The device.
        device: DeviceId,
        /// The kind asked for.
        kind: MemoryKind,
        /// Bytes requested.
        requested: usize,
        /// Bytes the allocator holds from the driver for this kind.
        reserved: usize,
        /// Bytes of those handed out to callers.
        allocated: usize,
        /// The largest free cached block.
        largest_free: usize,
    },
    /// A handle that names no live allocation of this allocator (already freed, or foreign).
    UnknownAllocation {
        /// The kind the handle claims.
        kind: MemoryKind,
        /// The handle's slot.
        slot: u32,
    },
    /// An address given back to a free by address that is no live allocation of that device
    /// (never allocated there, or freed already).
    UnknownAddress {
        /// The device named.
        device: DeviceId,
        /// The address given.
        address: usize,
    },
    /// A free by address with another size than the allocation was made with.
    FreeSizeMismatch {
        /// The address given.
        address: usize,
        /// The size given.
        given: usize,
        /// The size the allocation was made with.
        allocated: usize,
    },
    /// The driver handed back a segment whose address breaks its alignment contract.
    MisalignedSegment {
        /// The address the driver returned.
        address: usize,
        /// The alignment the contract promises.
        required: usize,
    },

    // ----- token -----
    /// A token was already consumed (or given twice in one call, or its program ended).
    TokenConsumed {
        /// The token given.
        token: TokenId,
    },
    /// A token id this planner never issued.
    TokenUnknown {
        /// The token given.
        token: TokenId,
    },
    /// A token issued by another planner.
    TokenForeign {
        /// The token given.
        token: TokenId,
        /// The id of the planner it was given to.
        planner: u16,
    },
    /// A line of a stream/event trace is not in the trace format.
    TraceSyntax {
        /// Line number, from 1.
        line: usize,
        /// What was expected there.
        expected: &'static str,
        /// What the line held instead.
        found: String,
    },

    // ----- runtime -----
    /// A stream id the runtime has no driver stream for.
    UnknownStream {
        /// The id given.
        stream: StreamId,
    },
    /// An event id the runtime has no driver event for.
    UnknownEvent {
        /// The id given.
        event: EventId,
    },
    /// A range of a buffer runs past its end.
    OutOfBounds {
        /// First byte asked for, from the buffer's start.
        offset: usize,
        /// Bytes asked for.
        len: usize,
        /// The buffer's size.
        size: usize,
    },
    /// A copy whose source and destination share bytes without being the same range (the
    /// drivers' copies leave the result undefined then).
    CopyOverlap {
        /// The destination.
        dst: ByteRange,
        /// The source.
        src: ByteRange,
    },
    /// A buffer of one device was handed to an operation on another.
    WrongDevice {
        /// The device the operation runs on.
        expected: DeviceId,
        /// The device the buffer belongs to.
        found: DeviceId,
    },
    /// The device failed in a way its driver cannot recover from without a reset (a kernel's
    /// illegal address, a launch failure: [`DriverError::loses_device`]): every call on it is
    /// refused until it is reset; other devices keep working.
    DeviceLost {
        /// The device.
        device: DeviceId,
        /// The first failure that lost it.
        cause: alloc::boxed::Box<Error>,
    },
    /// A buffer or kernel of a device from before the device's reset, which freed or unloaded
    /// it: allocate or load it again.
    StaleAfterReset {
        /// The device.
        device: DeviceId,
        /// What was given (`"buffer"`, `"kernel"`).
        what: &'static str,
    },
    /// A device cannot be reset while tokens of work on it are live: wait for them (their
    /// waits report the loss) or release them first.
    LiveWorkOnDevice {
        /// The device.
        device: DeviceId,
        /// Live tokens whose work is on it (a token being waited for counts until its wait
        /// has returned).
        tokens: usize,
    },
    /// Memory or a handle of one runtime was given to another: a runtime orders and frees only
    /// what it owns, so the other runtime's work could outlive the memory.
    ForeignRuntime {
        /// What was given (`"span"`, `"buffer"`).
        what: &'static str,
        /// The runtime it belongs to (runtimes are numbered from 1 in the order they open).
        owner: u32,
        /// The runtime it was given to.
        runtime: u32,
    },
    /// An earlier action on this device's worker queue failed; the queue refuses further
    /// actions until its error is cleared.
    QueueFailed {
        /// The worker's device.
        device: DeviceId,
        /// The first failure.
        cause: alloc::boxed::Box<Error>,
    },
    /// An action on a device worker panicked; the worker caught it and keeps running.
    ActionPanicked {
        /// The worker's device.
        device: DeviceId,
    },
    /// A driver failure left stream ordering unknown (an event record or wait failed), so the
    /// runtime refuses new work; shut it down and open a new one.
    RuntimePoisoned {
        /// The failure that poisoned it.
        cause: alloc::boxed::Box<Error>,
    },

    // ----- graphs -----
    /// A graph node that its graph does not have (a dependency not yet added, or a node of
    /// another graph).
    UnknownGraphNode {
        /// The node given.
        node: u32,
        /// How many nodes the graph has.
        nodes: usize,
    },
    /// A graph node given an operation of another kind than it was recorded with, which would
    /// change the graph's shape.
    GraphNodeKind {
        /// The node given.
        node: u32,
        /// Its recorded kind (`"copy"`, `"fill"`, `"launch"`).
        recorded: &'static str,
        /// The kind given.
        given: &'static str,
    },
    /// A block of graph memory its graph does not have (a block of another graph).
    UnknownGraphBlock {
        /// The block given.
        block: u32,
        /// How many blocks the graph has.
        blocks: usize,
    },
    /// A graph node changed so that two blocks of the graph's memory that share bytes would be
    /// in use at once (their uses no longer ordered one entirely after the other).
    GraphBlockConflict {
        /// The block whose uses changed (the later made of the two).
        block: u32,
        /// The block it shares bytes with.
        other: u32,
    },

    // ----- cuda backend (kernel library and current context; generic enough for any backend) -----
    /// A kernel name the backend's standard kernel library does not have.
    UnknownKernel {
        /// The backend asked (`"cuda"`, `"host"`, ...).
        backend: &'static str,
        /// The name given.
        name: String,
    },
    /// A launch whose arguments do not match the kernel's parameters (count or kinds).
    KernelArgumentMismatch {
        /// The kernel launched.
        kernel: &'static str,
        /// The parameters it takes, e.g. `"(Ptr dst, U32 value, U64 count)"`.
        expected: &'static str,
    },
    /// A launch of a standard library kernel whose arguments make it reach past the memory it
    /// was given (a count too large for its span, a workgroup needing more dynamic memory than
    /// the launch gives), refused before anything is queued.
    KernelReach {
        /// The kernel launched.
        kernel: &'static str,
        /// The pointer argument's index, or `None` for the launch's dynamic workgroup memory.
        argument: Option<usize>,
        /// The parameter's name in the kernel's signature (`"dst"`), or
        /// `"dynamic workgroup memory"`.
        parameter: &'static str,
        /// The first byte of the span given for the argument (0 for workgroup memory).
        address: usize,
        /// The bytes given: the span's length, or the launch's dynamic workgroup bytes.
        given: usize,
        /// The bytes the kernel would reach from there (`u64::MAX` when they overflow 64 bits).
        reach: u64,
    },
    /// A launch shape no device runs (a grid or workgroup dimension of zero, more threads per
    /// workgroup than the limit), refused before anything is queued.
    LaunchShape {
        /// Which part of the shape: `"grid x"`, `"workgroup y"`, `"threads per workgroup"`.
        what: &'static str,
        /// Its value in the launch.
        given: u64,
        /// The least value accepted.
        min: u64,
        /// The most accepted.
        max: u64,
        /// The launch's workgroups per dimension.
        grid: [u32; 3],
        /// The launch's threads per workgroup per dimension.
        block: [u32; 3],
    },
    /// The calling thread's current driver context is none of the backend's devices (a context
    /// the program created itself), so no device id names it and restoring through a device id
    /// would lose it.
    ForeignContext {
        /// The backend asked.
        backend: &'static str,
    },
    /// A driver backend's handle (stream, event, module, kernel) that names nothing live in the
    /// backend it was given to: destroyed or unloaded already (a kernel, with its module), from
    /// before its device was reset, or another backend's. Refused before the driver, which
    /// would be handed a dangling handle ([`crate::backend::live`]).
    StaleHandle {
        /// The backend (`"cuda"`, `"hip"`).
        backend: &'static str,
        /// What the handle is: `"stream"`, `"event"`, `"module"`, `"kernel"`.
        what: &'static str,
        /// The handle's number (a kernel's is its module's).
        id: HandleId,
    },

    // ----- driver -----
    /// A driver call failed.
    Driver(DriverError),

    // ----- driver loading -----
    /// The driver library could not be opened under any of the file names tried.
    DriverLibraryNotFound {
        /// The backend whose driver is missing (`"cuda"`, `"hip"`, `"hsa"`).
        backend: &'static str,
        /// The file names tried, in order.
        tried: Vec<String>,
        /// What the system loader said for each name, in the same order.
        message: String,
    },
    /// The driver library was opened but lacks an entry point the call needs (usually a driver
    /// older than the feature).
    DriverSymbolMissing {
        /// The backend whose driver lacks it.
        backend: &'static str,
        /// The entry point's name, e.g. `"cuMemAllocAsync"`.
        symbol: &'static str,
    },
    /// The backend cannot do this at all (not a failure of the driver): the host backend,
    /// for one, cannot run foreign module images, which only a GPU driver can compile.
    Unsupported {
        /// The backend asked (`"cuda"`, `"host"`, ...).
        backend: &'static str,
        /// What it cannot do, e.g. `"loading a module image"`.
        what: &'static str,
    },

    // ----- free-form detail for errors that carry several names -----
    /// A limit was exceeded; `detail` names the items involved.
    LimitExceeded {
        /// What limit, e.g. `"workgroup memory per block"`.
        what: &'static str,
        /// Bytes (or items) required.
        required: usize,
        /// The limit.
        limit: usize,
        /// Names of the items involved and a hint.
        detail: Vec<String>,
    },
}

impl core::error::Error for Error {}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

/// The toolkit's result type.
pub type Result<T, E = Error> = core::result::Result<T, E>;
