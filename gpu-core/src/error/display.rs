//! How each error reads: the `Display` impl of [`Error`], one message per kind that names the
//! numbers involved and says what the caller can do about it.

use alloc::string::String;
use core::fmt;

use super::Error;

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
            Error::UnknownGraphNode { node, nodes } => write!(
                f,
                "graph node {node} does not exist: the graph has {nodes} nodes, numbered from 0; \
                 a node can only run after nodes of its own graph added before it"
            ),
            Error::GraphNodeKind {
                node,
                recorded,
                given,
            } => write!(
                f,
                "graph node {node} was recorded as a {recorded} and cannot become a {given}: \
                 an update keeps the graph's shape; record a new graph for a new shape"
            ),
            Error::UnknownGraphBlock { block, blocks } => write!(
                f,
                "graph memory block {block} does not exist: the graph has {blocks} blocks; a \
                 node can only use blocks its own graph made"
            ),
            Error::GraphBlockConflict { block, other } => write!(
                f,
                "graph memory blocks {block} and {other} share bytes of the graph's pool and \
                 would be in use at once: a node may use a block only where every use of it \
                 stays ordered before or after every use of the blocks laid over it (record a \
                 new graph instead)"
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
