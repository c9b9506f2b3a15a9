//! Async tokens: the sync planner and the stream/event trace checker (spec: tokens.md).
//! Filled by the token work; empty until then.
