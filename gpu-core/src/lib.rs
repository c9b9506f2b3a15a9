//! Pure logic of a GPU runtime, with no driver in sight: the lock table, the token planner and
//! checker, the allocator, the workgroup planner, and the backend trait drivers implement.
//!
//! In full: the lock interval table of pinned host ranges, the async token planner and
//! stream/event checker, the allocator policy and caching sub-allocator, the workgroup memory
//! planner, and the backend trait drivers implement.
//!
//! The crate is `#![no_std]` with `alloc` and knows no driver and no thread: the runtime users
//! hold, its workers and the host backend are the `gpu-rt` crate, built on this one.
//!
//! Modules import one way only, with no circle: `id` imports nothing; `error` imports `id`;
//! `lock_table`, `allocator` and `token` import `error` and `id`, `workgroup` only `error`, and
//! none of them imports another; `backend` imports `allocator`, `workgroup`, `error` and `id`.
//! Inside each module the files import one way too: no file imports, directly or through
//! others, from a file that imports from it.
#![no_std]
#![warn(missing_docs)]
// Errors are built lazily (`ok_or_else`) everywhere: an `Error` built eagerly and dropped on
// the success path costs its drop glue, 30 to 56 instructions per call on the lock table's
// and the allocator's hot paths (measured with cachegrind and callgrind).
#![allow(clippy::unnecessary_lazy_evaluations)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod allocator;
pub mod backend;
pub mod error;
pub mod id;
pub mod lock_table;
#[cfg(feature = "model")]
pub mod seeded;
pub mod token;
pub mod workgroup;

pub use error::{ByteRange, DriverError, Error, Result};
pub use id::{DeviceId, EventId, StreamId};
