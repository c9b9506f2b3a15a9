//! The lock interval table.
