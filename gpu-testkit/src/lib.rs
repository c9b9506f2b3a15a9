//! What every backend is tested with: the backend-generic conformance suite
//! ([`conformance`]) and the stress and soak driver ([`stress`]).
#![warn(missing_docs)]

extern crate alloc;

pub mod conformance;
pub mod stress;
