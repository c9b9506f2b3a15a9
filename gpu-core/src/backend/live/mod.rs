//! What a driver backend (CUDA, HIP; HSA next) keeps live, and the steps around creating and
//! destroying driver objects that are the same on every driver.
//!
//! Nothing here calls a driver: each backend translates to its own calls.
//!
//! - [`LiveHandles`]: a backend's registry of live handles (streams, events, modules). Each handle
//!   carries a [`HandleKey`]: its own slot in the registry and the slot's generation, never
//!   reused. A method that takes a handle checks its key ([`LiveHandles::get`]: one atomic add on
//!   the slot, no table, no lock) and holds the [`Live`] it gets for as long as its driver call
//!   runs, and destroying makes the handle stale first ([`LiveHandles::destroy`]), waiting for the
//!   calls in flight on that handle. A destroyed, unloaded, reset or foreign handle is
//!   [`Error::StaleHandle`](crate::Error::StaleHandle) (naming its [`HandleId`]) before the driver
//!   sees it, and no handle is destroyed while a call uses it. The registry needs 64-bit atomics
//!   (a handle's state word: generation, live bit and calls in flight), so it is left out on
//!   targets without them (the 32-bit bare-metal ones, where no driver backend runs).
//! - [`LiveAllocations`] and [`LiveRegistrations`]: the addresses a backend allocated and the
//!   host ranges it registered, so that freeing or unregistering anything else is a typed
//!   error before the driver is asked.
//! - The policies the GPU backends share, each backend supplying only its driver's calls:
//!   the checks before an allocation ([`check_allocation`], [`check_stream_allocation`]), a
//!   driver code that is an answer rather than a failure ([`none_on_code`]: out of memory,
//!   unknown memory), how each memory kind is freed ([`FreeStep`]), peer access with its undo
//!   ([`enable_peer_access`]), the kernel library's functions looked up with the module
//!   unloaded on a failure ([`library_functions`]), and a launch's arguments packed for a
//!   library kernel ([`library_arguments`]).
//! - [`LiveMappings`]: the address ranges a backend reserved and the pieces of physical memory
//!   it mapped into them (the allocator's growable segments), each piece's driver handle kept
//!   from map to release, the driver's calls supplied through [`VmCalls`].
//! - [`LiveGraph`]: a driver graph built from a graph description node by node, destroyed
//!   again if any step fails, and what its handle keeps (driver objects, node handles and
//!   kinds, the modules its kernels need, a lock serialising the calls on it).
//!
//! One concern a file: `handles` (the registry of live handles), `addresses` (allocations and
//! registrations), `memory` (allocation checks, answering codes, frees, peer access),
//! `kernels` (the library's functions, names, arguments and workgroup attribute), `mappings`
//! (virtual memory reserved and mapped) and `graphs` (building, keeping and updating driver
//! graphs).

mod addresses;
mod graphs;
#[cfg(target_has_atomic = "64")]
mod handles;
mod kernels;
mod mappings;
mod memory;
#[cfg(test)]
mod tests;

pub use crate::id::HandleId;
pub use addresses::{LiveAllocations, LiveRegistrations};
pub use graphs::{LiveGraph, fill_element};
#[cfg(target_has_atomic = "64")]
pub use handles::{HandleKey, Live, LiveHandles};
pub use kernels::{
    MODULE_KERNEL, kernel_name, library_arguments, library_functions, node_arguments,
    workgroup_bytes_attribute,
};
pub use mappings::{LiveMappings, VmCalls, vm_granularity_of};
pub use memory::{
    FreeStep, check_allocation, check_stream_allocation, enable_peer_access, none_on_code,
};
