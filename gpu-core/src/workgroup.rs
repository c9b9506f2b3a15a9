//! The workgroup (shared) memory planner (spec: workgroup.md).
//! Filled by the workgroup work; empty until then.
