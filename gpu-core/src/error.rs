//! The one error type of the toolkit: a kind a caller can match on, with the numbers that
//! explain it, and the driver's own name and number when a driver call caused it.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::id::DeviceId;
use crate::lock_table::{LockCounts, LockOwner};

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
        kind: crate::allocator::MemoryKind,
    },
    /// The device's memory of one kind is exhausted even after every reclaim step.
    OutOfMemory {
        /// The device.
        device: DeviceId,
        /// The kind asked for.
        kind: crate::allocator::MemoryKind,
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
        kind: crate::allocator::MemoryKind,
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
        token: crate::token::TokenId,
    },
    /// A token id this planner never issued.
    TokenUnknown {
        /// The token given.
        token: crate::token::TokenId,
    },
    /// A token issued by another planner.
    TokenForeign {
        /// The token given.
        token: crate::token::TokenId,
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
        stream: crate::id::StreamId,
    },
    /// An event id the runtime has no driver event for.
    UnknownEvent {
        /// The id given.
        event: crate::id::EventId,
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
        id: crate::backend::live::HandleId,
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ZeroSize { what } => write!(f, "{what} is zero; at least one byte is needed"),
            Error::NullPointer { what } => write!(f, "{what} is a null pointer"),
            Error::AddressOverflow { ptr, len } => write!(
                f,
                "range of {len} bytes at {ptr:#x} runs past the top of the address space"
            ),
            Error::UnknownDevice {
                device,
                device_count,
            } => write!(
                f,
                "{device} does not exist (the backend has {device_count} device(s))"
            ),
            Error::HostOutOfMemory { what } => {
                write!(f, "host memory exhausted while allocating {what}")
            }
            Error::LockOverlap {
                requested,
                conflicting,
                external,
            } => write!(
                f,
                "cannot lock {requested}: it overlaps the {}locked range {conflicting} without \
                 lying inside it; lock a range inside that entry, or unlock it first",
                if *external { "externally " } else { "" }
            ),
            Error::NotLocked { ptr } => write!(f, "no locked range contains {ptr:#x}"),
            Error::NotEntryStart { ptr, entry } => write!(
                f,
                "{ptr:#x} lies inside the locked range {entry} but is not its start; \
                 exact-start unlock needs {:#x}",
                entry.start
            ),
            Error::ExternalPinTooSmall { requested, pinned } => write!(
                f,
                "cannot lock {requested}: the driver reports only {pinned} as pinned by someone \
                 else; the rest would need a second registration the driver refuses"
            ),
            Error::PinOwned {
                ptr,
                entry,
                releaser,
                held,
            } => write!(
                f,
                "cannot release a {} lock at {ptr:#x}: the locked range {entry} holds none, \
                 only {} raw lock(s) (lock_range, gpurt_lock) and {} held by guards \
                 (LockedHost, gpurt_host_register); a lock is released only by its own kind, \
                 so a guard's pin goes when the guard does (drop the LockedHost, or \
                 gpurt_host_unregister)",
                releaser.name(),
                held.raw,
                held.guards
            ),
            Error::PrivateBufferInWorkgroup { buffer, index } => write!(
                f,
                "buffer `{buffer}` (#{index}) is private (per-thread) memory but was handed to the \
                 workgroup planner; declare it as a workgroup buffer if the threads of a \
                 workgroup share it, or keep it private (a per-thread alloca) and leave it out \
                 of the workgroup plan"
            ),
            Error::WorkgroupAlignment {
                buffer,
                index,
                align,
            } => write!(
                f,
                "buffer `{buffer}` (#{index}) has alignment {align}; use a power of two (1, 2, 4, \
                 8, 16, ...)"
            ),
            Error::WorkgroupLiveRange {
                buffer,
                index,
                first,
                last,
            } => write!(
                f,
                "buffer `{buffer}` (#{index}) has live range from phase {first} to phase {last}, \
                 which ends before it starts; give the first phase, then the last (inclusive)"
            ),
            Error::LaunchSizeCount { buffers, given } => write!(
                f,
                "the launch gave {given} size(s) but the plan has {} launch-sized buffer(s) ({}); \
                 give one size per launch-sized buffer, in that order",
                buffers.len(),
                buffers.join(", ")
            ),
            Error::InvalidAlignment { alignment, limit } => write!(
                f,
                "alignment {alignment} is not a power of two or exceeds {limit}, the segment this \
                 size is carved from; use a power of two no larger than that"
            ),
            Error::KindUnsupported { device, kind } => write!(
                f,
                "{device} has no {kind} memory; pick a kind its capabilities list"
            ),
            Error::OutOfMemory {
                device,
                kind,
                requested,
                reserved,
                allocated,
                largest_free,
            } => write!(
                f,
                "{device} is out of {kind} memory: {requested} bytes requested, {reserved} \
                 reserved, {allocated} allocated, largest free cached block {largest_free}; \
                 free memory or request less"
            ),
            Error::UnknownAllocation { kind, slot } => write!(
                f,
                "no live {kind} allocation has handle slot {slot}; it was already freed or \
                 comes from another allocator"
            ),
            Error::UnknownAddress { device, address } => write!(
                f,
                "{address:#x} is no live allocation of {device}: it was never allocated there, \
                 or was freed already"
            ),
            Error::FreeSizeMismatch {
                address,
                given,
                allocated,
            } => write!(
                f,
                "the allocation at {address:#x} has {allocated} bytes, but its free gave \
                 {given}; free with the size it was allocated with"
            ),
            Error::MisalignedSegment { address, required } => write!(
                f,
                "the driver returned segment {address:#x}, not aligned to {required} bytes as \
                 the allocator's driver contract requires; fix the backend"
            ),
            Error::TokenConsumed { token } => write!(
                f,
                "{token} was already consumed (tokens are linear: fork a token to use it twice)"
            ),
            Error::TokenUnknown { token } => write!(
                f,
                "{token} was never issued by this planner; pass only tokens it returned"
            ),
            Error::TokenForeign { token, planner } => write!(
                f,
                "{token} was given to planner {planner}; a token is valid only in the planner \
                 that issued it"
            ),
            Error::TraceSyntax {
                line,
                expected,
                found,
            } => write!(f, "trace line {line}: expected {expected}, found `{found}`"),
            Error::UnknownStream { stream } => {
                write!(
                    f,
                    "{stream} has no driver stream (never created, or destroyed)"
                )
            }
            Error::UnknownEvent { event } => {
                write!(
                    f,
                    "{event} has no driver event (never created, or destroyed)"
                )
            }
            Error::OutOfBounds { offset, len, size } => write!(
                f,
                "{len} bytes at offset {offset} run past the end of a {size}-byte buffer"
            ),
            Error::CopyOverlap { dst, src } => write!(
                f,
                "copy destination {dst} overlaps its source {src}; copy through a separate \
                 buffer"
            ),
            Error::StaleAfterReset { device, what } => write!(
                f,
                "a {what} of {device} from before the device was reset, which freed it; \
                 allocate or load it again"
            ),
            Error::LiveWorkOnDevice { device, tokens } => write!(
                f,
                "{device} has {tokens} live token(s) of work (waits in progress included); wait for them (their waits report \
                 the loss) or release them before resetting it"
            ),
            Error::DeviceLost { device, cause } => write!(
                f,
                "{device} is lost until it is reset (first failure: {cause}); other devices keep \
                 working"
            ),
            Error::ForeignRuntime {
                what,
                owner,
                runtime,
            } => write!(
                f,
                "a {what} of runtime {owner} was given to runtime {runtime}; each runtime orders \
                 and frees only its own memory"
            ),
            Error::WrongDevice { expected, found } => write!(
                f,
                "a buffer of {found} was given to an operation on {expected}; copy it to \
                 {expected} first"
            ),
            Error::QueueFailed { device, cause } => write!(
                f,
                "an earlier action on the worker of {device} failed ({cause}); the queue \
                 refuses work until its error is cleared"
            ),
            Error::ActionPanicked { device } => {
                write!(f, "an action on the worker of {device} panicked")
            }
            Error::RuntimePoisoned { cause } => write!(
                f,
                "the runtime stopped accepting work after a driver failure left stream \
                 ordering unknown ({cause}); shut it down and open a new one"
            ),
            Error::UnknownKernel { backend, name } => write!(
                f,
                "the {backend} backend's kernel library has no kernel called {name:?}; use one \
                 of the standard kernel names (fill_u32, axpy_f32, workgroup_reverse_u32) or, on \
                 the host backend, a name registered with HostBackend::register_kernel"
            ),
            Error::KernelArgumentMismatch { kernel, expected } => write!(
                f,
                "kernel {kernel} takes {expected}; the launch passed a different number or kind \
                 of arguments"
            ),
            Error::KernelReach {
                kernel,
                argument,
                parameter,
                address,
                given,
                reach,
            } => {
                let past = reach.saturating_sub(*given as u64);
                let shown = |bytes: u64| {
                    if bytes == u64::MAX {
                        String::from("2^64 or more")
                    } else {
                        alloc::format!("{bytes}")
                    }
                };
                match argument {
                    Some(index) => write!(
                        f,
                        "kernel {kernel} would reach {} bytes from argument {index} \
                         ({parameter}), but its span at {address:#x} has {given} bytes: {} \
                         bytes past its end; pass a larger span or a smaller count",
                        shown(*reach),
                        shown(past)
                    ),
                    None => write!(
                        f,
                        "kernel {kernel} uses {} bytes of {parameter} per workgroup, but the \
                         launch gives {given}: {} bytes past its end; give the launch at least \
                         {0} dynamic workgroup bytes",
                        shown(*reach),
                        shown(past)
                    ),
                }
            }
            Error::LaunchShape {
                what,
                given,
                min,
                max,
                grid,
                block,
            } => write!(
                f,
                "launch of grid {grid:?} x workgroup {block:?}: {what} is {given}, but it must \
                 be between {min} and {max}"
            ),
            Error::ForeignContext { backend } => write!(
                f,
                "the calling thread's current {backend} context belongs to none of the \
                 backend's devices (the program created it itself); pop or unset it before \
                 calling, or make a device's primary context current"
            ),
            Error::StaleHandle { backend, what, id } => write!(
                f,
                "{backend} {what} {id} is not live: it was destroyed (a kernel: its module was \
                 unloaded), its device was reset, or it belongs to another backend; create or \
                 load it again"
            ),
            Error::Driver(e) => write!(
                f,
                "{} driver call {} failed: {} ({})",
                e.backend, e.call, e.name, e.code
            ),
            Error::DriverLibraryNotFound {
                backend,
                tried,
                message,
            } => write!(
                f,
                "the {backend} driver library is not installed or not on the loader's path \
                 (tried {}): {message}; install the driver, or add the folder holding it to \
                 the library search path (LD_LIBRARY_PATH on Linux, PATH on Windows)",
                tried.join(", ")
            ),
            Error::DriverSymbolMissing { backend, symbol } => write!(
                f,
                "the installed {backend} driver has no entry point {symbol}; it is older than \
                 this call needs: update the driver, or avoid the feature that uses {symbol}"
            ),
            Error::Unsupported { backend, what } => {
                write!(f, "the {backend} backend does not support {what}")
            }
            Error::LimitExceeded {
                what,
                required,
                limit,
                detail,
            } => {
                write!(f, "{what}: {required} needed, limit {limit}")?;
                for d in detail {
                    write!(f, "; {d}")?;
                }
                Ok(())
            }
        }
    }
}

impl core::error::Error for Error {}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

/// The toolkit's result type.
pub type Result<T, E = Error> = core::result::Result<T, E>;
