//! The allocator policy and the caching sub-allocator (spec: alloc.md).
//! Filled by the allocator work; empty until then.
