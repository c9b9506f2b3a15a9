//! The C API of `include/gpu_runtime.h`: `gpurt_*` functions over the process-wide runtime.
//! Each translates its arguments and handles, calls the runtime, and returns a status code.
//!
//! Every function returns a [`GpurtStatus`](crate::shared::GpurtStatus) (0 is success;
//! `gpurt_last_error()` has the calling thread's last failure message) and never unwinds into
//! the caller. Out-parameters are written only on success (`gpurt_shutdown`'s report excepted:
//! the runtime is closed even when its shutdown reports a failure). All functions may be called
//! from any thread at any time unless their documentation says otherwise.
//!
//! Every argument is checked before the call changes anything: arrays and out-parameters (null,
//! alignment, a length that fits the address space) before a slice is made of them or anything
//! is written, spans before the caller's host memory is taken at their length, and handles are
//! taken before the runtime consumes tokens, so that storing one cannot fail afterwards.
//!
//! One module per concern, each with the value types of the header it needs, its operations
//! (written once for every backend) and its exported functions; `objects` keeps what a session
//! holds for the C API and `args` the argument checks they all use. This module only declares
//! them and re-exports the public items.
//!
//! The modules are declared in the header's order, each on its own (rustfmt would sort a block
//! of them): cbindgen writes the functions, and the types they need, in the order it reads them,
//! so moving a function to another module, or the modules around, reorders the header.

// Opening and shutting the runtime down; the last error, status names, the device count.
mod session;

// Memory handles: allocating, freeing and describing memory.
mod memory;

// Pinning the caller's host memory: registrations, locks, lookups.
mod pinning;

// Tokens: after-lists, done tokens, fork, join and wait.
mod tokens;

// Copies, fills, uploads and downloads in stream order.
mod transfers;

// Loading and launching kernels.
mod kernels;

// Graphs: recording, instantiating, replaying and updating.
mod graphs;

// The runtime's counters.
mod stats;

// What a session holds for the C API, and the argument checks every module uses (neither has
// anything for the header).
mod args;
mod objects;

#[cfg(test)]
mod tests;

use graphs::GraphObject;
pub use graphs::{
    GpurtGraph, gpurt_graph_alloc, gpurt_graph_begin, gpurt_graph_copy, gpurt_graph_destroy,
    gpurt_graph_end, gpurt_graph_fill, gpurt_graph_kernel, gpurt_graph_launch,
    gpurt_graph_update_copy, gpurt_graph_update_fill, gpurt_graph_update_kernel,
};
pub use kernels::{
    GPURT_ARG_F32, GPURT_ARG_SPAN, GPURT_ARG_U32, GPURT_ARG_U64, GpurtArg, GpurtDims, GpurtKernel,
    gpurt_kernel, gpurt_launch,
};
pub use memory::{
    GPURT_MEMORY_DEVICE, GPURT_MEMORY_MANAGED, GPURT_MEMORY_PINNED, GPURT_MEMORY_REGISTERED,
    GpurtMemory, GpurtMemoryInfo, GpurtSpan, gpurt_alloc, gpurt_alloc_after, gpurt_free,
    gpurt_memory_info,
};
pub use objects::Objects;
pub use pinning::{
    gpurt_host_register, gpurt_host_unregister, gpurt_lock, gpurt_lookup, gpurt_unlock,
};
pub use session::{
    GpurtReport, gpurt_device_count, gpurt_last_error, gpurt_open, gpurt_shutdown,
    gpurt_status_name,
};
pub use stats::{GpurtStats, GpurtVmStats, gpurt_allocator_vm_stats, gpurt_stats};
pub use tokens::{GpurtToken, gpurt_fork, gpurt_join, gpurt_wait};
pub use transfers::{gpurt_copy, gpurt_download, gpurt_fill, gpurt_upload};
