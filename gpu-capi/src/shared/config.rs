//! The process-wide runtime's tunables, read from the environment when it opens, so a program
//! that only loads the library (PyTorch's plug-in point, say) can still choose them.
//!
//! - `GPU_RUNTIME_RELEASE_BEFORE_GROWING=0|1`: whether a cache miss returns wholly free cached
//!   segments to the driver before growing (`AllocatorConfig::release_before_growing`; `0`
//!   keeps them until the out-of-memory ladder, as PyTorch's own allocator does).
//! - `GPU_RUNTIME_WAIT_BEFORE_GROWING=0|1`: whether such a miss first merges free blocks that
//!   other streams freed, the host waiting for their frees (`AllocatorConfig::
//!   wait_before_growing`; `0` grows instead of waiting on the host).
//! - `GPU_RUNTIME_MAX_SPLIT_SIZE=BYTES|none`: blocks of at least this size are never split
//!   (`AllocatorConfig::max_split_size`; `none`: any block may be split, PyTorch's default).
//! - `GPU_RUNTIME_GROWABLE_SEGMENTS=0|1`: both pools from growable segments where the
//!   backend has virtual memory management (`AllocatorConfig::growable_segments`; off by
//!   default; the CUDA backend has it for device memory where the device supports it, the
//!   others fall back to ordinary segments). `gpurt_allocator_vm_stats` reports what they map
//!   and reserve.
//! - `GPU_RUNTIME_ALLOC_TRACE=PATH`: records every device-memory allocation, free and use on
//!   another stream into `PATH` in the allocation trace format (docs/alloc-trace-format.md),
//!   for `gpu-alloc-replay`; flushed at shutdown (`gpurt_shutdown`).
//! - `GPU_RUNTIME_PEER_ACCESS=0|1`: whether opening turns peer access on between devices that
//!   allow it (`RuntimeConfig::peer_access`, on by default; `0` stages copies between devices).
//! - `GPU_RUNTIME_MLIR_GRAPHS=0|1`: the MLIR drop-in's graph mode (off by default): the
//!   asynchronous `mgpu*` calls between two host synchronisations are deferred, and a sequence
//!   that repeats is replayed as one instantiated graph (`crate::mlir::graphs`).
//!
//! Unset, each keeps the allocator's default.

use std::ffi::{OsStr, OsString};

use gpu_runtime::allocator::AllocatorConfig;
use gpu_runtime::runtime::RuntimeConfig;

use super::status::CapiError;

/// Environment variable for [`AllocatorConfig::release_before_growing`].
pub const RELEASE_BEFORE_GROWING_VAR: &str = "GPU_RUNTIME_RELEASE_BEFORE_GROWING";
/// Environment variable for [`AllocatorConfig::wait_before_growing`].
pub const WAIT_BEFORE_GROWING_VAR: &str = "GPU_RUNTIME_WAIT_BEFORE_GROWING";
/// Environment variable for [`AllocatorConfig::max_split_size`].
pub const MAX_SPLIT_SIZE_VAR: &str = "GPU_RUNTIME_MAX_SPLIT_SIZE";
/// Environment variable for [`AllocatorConfig::growable_segments`].
pub const GROWABLE_SEGMENTS_VAR: &str = "GPU_RUNTIME_GROWABLE_SEGMENTS";

/// Each allocator variable and the [`AllocatorConfig::set`] key it sets.
const ALLOCATOR_VARS: [(&str, &str); 4] = [
    (RELEASE_BEFORE_GROWING_VAR, "release_before_growing"),
    (WAIT_BEFORE_GROWING_VAR, "wait_before_growing"),
    (MAX_SPLIT_SIZE_VAR, "max_split_size"),
    (GROWABLE_SEGMENTS_VAR, "growable_segments"),
];

/// Environment variable naming the file the allocation trace is recorded into.
pub const ALLOC_TRACE_VAR: &str = "GPU_RUNTIME_ALLOC_TRACE";

/// The allocation trace's path, if the environment names one.
pub fn alloc_trace_path() -> Option<std::path::PathBuf> {
    std::env::var_os(ALLOC_TRACE_VAR)
        .filter(|path| !path.is_empty())
        .map(Into::into)
}

/// Environment variable for [`RuntimeConfig::peer_access`].
pub const PEER_ACCESS_VAR: &str = "GPU_RUNTIME_PEER_ACCESS";

/// Environment variable for the MLIR drop-in's graph mode.
pub const MLIR_GRAPHS_VAR: &str = "GPU_RUNTIME_MLIR_GRAPHS";

/// Whether the MLIR drop-in's graph mode is on, as `lookup` gives [`MLIR_GRAPHS_VAR`] (unset:
/// off). A value other than `0` or `1` is an error naming the variable.
pub fn mlir_graphs(lookup: impl Fn(&'static str) -> Option<OsString>) -> Result<bool, CapiError> {
    lookup(MLIR_GRAPHS_VAR)
        .map(|value| flag(MLIR_GRAPHS_VAR, &value))
        .transpose()
        .map(|on| on.unwrap_or(false))
}

/// The runtime's configuration as the environment sets it (and the MLIR graph mode's switch
/// checked, so a bad value fails the opening).
pub fn from_env() -> Result<RuntimeConfig, CapiError> {
    let allocator = allocator_config(std::env::var_os)?;
    mlir_graphs(std::env::var_os)?;
    let defaults = RuntimeConfig::default();
    let peer_access = std::env::var_os(PEER_ACCESS_VAR)
        .map(|value| flag(PEER_ACCESS_VAR, &value))
        .transpose()?
        .unwrap_or(defaults.peer_access);
    Ok(RuntimeConfig {
        allocator,
        peer_access,
        ..defaults
    })
}

/// A `0|1` variable's value.
fn flag(what: &'static str, value: &OsStr) -> Result<bool, CapiError> {
    match value.to_str() {
        Some("0") => Ok(false),
        Some("1") => Ok(true),
        _ => Err(invalid(what, value, "`0` or `1`")),
    }
}

/// The allocator's configuration for the variables' values as `lookup` gives them (`None`:
/// unset). A bad value is an error naming its variable.
pub fn allocator_config(
    lookup: impl Fn(&'static str) -> Option<OsString>,
) -> Result<AllocatorConfig, CapiError> {
    let mut config = AllocatorConfig::default();
    for (variable, key) in ALLOCATOR_VARS {
        let Some(value) = lookup(variable) else {
            continue;
        };
        let text = value
            .to_str()
            .ok_or_else(|| invalid(variable, &value, "text"))?;
        config.set(key, text).map_err(|e| match e {
            gpu_runtime::error::Error::TraceSyntax { expected, .. } => {
                invalid(variable, &value, expected)
            }
            other => invalid(variable, &value, &other.to_string()),
        })?;
    }
    Ok(config)
}

fn invalid(what: &'static str, value: &OsStr, accepted: &str) -> CapiError {
    CapiError::InvalidArgument {
        what,
        detail: format!("{value:?} is not {accepted}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration for `(variable, value)` pairs (the others unset).
    fn config_of(pairs: &[(&str, &str)]) -> Result<AllocatorConfig, CapiError> {
        allocator_config(|name| {
            pairs
                .iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, value)| OsString::from(value))
        })
    }

    fn config(release: Option<&str>, split: Option<&str>) -> Result<AllocatorConfig, CapiError> {
        let mut pairs = Vec::new();
        pairs.extend(release.map(|v| (RELEASE_BEFORE_GROWING_VAR, v)));
        pairs.extend(split.map(|v| (MAX_SPLIT_SIZE_VAR, v)));
        config_of(&pairs)
    }

    #[test]
    fn waiting_before_growing_and_growable_segments_are_set_by_their_own_variables() {
        for (variable, read) in [
            (
                WAIT_BEFORE_GROWING_VAR,
                (|c: &AllocatorConfig| c.wait_before_growing) as fn(&AllocatorConfig) -> bool,
            ),
            (GROWABLE_SEGMENTS_VAR, |c| c.growable_segments),
        ] {
            assert!(!read(&config_of(&[(variable, "0")]).unwrap()));
            assert!(read(&config_of(&[(variable, "1")]).unwrap()));
            assert!(matches!(
                config_of(&[(variable, "on")]),
                Err(CapiError::InvalidArgument { what, .. }) if what == variable
            ));
        }
    }

    #[test]
    fn unset_keeps_the_defaults_and_each_value_sets_its_field() {
        assert_eq!(config(None, None), Ok(AllocatorConfig::default()));
        let kept = config(Some("0"), Some("none")).unwrap();
        assert!(!kept.release_before_growing);
        assert_eq!(kept.max_split_size, usize::MAX);
        let set = config(Some("1"), Some("1048576")).unwrap();
        assert!(set.release_before_growing);
        assert_eq!(set.max_split_size, 1 << 20);
        assert_eq!(set.max_streams, AllocatorConfig::default().max_streams);
    }

    #[test]
    fn flags_are_zero_or_one() {
        assert_eq!(flag(PEER_ACCESS_VAR, OsStr::new("0")), Ok(false));
        assert_eq!(flag(PEER_ACCESS_VAR, OsStr::new("1")), Ok(true));
        for bad in ["", "yes", "2", "off"] {
            assert!(matches!(
                flag(PEER_ACCESS_VAR, OsStr::new(bad)),
                Err(CapiError::InvalidArgument { what, .. }) if what == PEER_ACCESS_VAR
            ));
        }
    }

    #[test]
    fn the_mlir_graph_mode_is_off_unless_set_to_one() {
        let of = |value: Option<&str>| {
            mlir_graphs(|name| {
                assert_eq!(name, MLIR_GRAPHS_VAR);
                value.map(OsString::from)
            })
        };
        assert_eq!(of(None), Ok(false));
        assert_eq!(of(Some("0")), Ok(false));
        assert_eq!(of(Some("1")), Ok(true));
        assert!(matches!(
            of(Some("on")),
            Err(CapiError::InvalidArgument { what, .. }) if what == MLIR_GRAPHS_VAR
        ));
    }

    #[test]
    fn bad_values_are_refused_with_the_variable_named() {
        for (release, split, variable) in [
            (Some("yes"), None, RELEASE_BEFORE_GROWING_VAR),
            (None, Some("0"), MAX_SPLIT_SIZE_VAR),
            (None, Some("-5"), MAX_SPLIT_SIZE_VAR),
            (None, Some("64MiB"), MAX_SPLIT_SIZE_VAR),
        ] {
            let refused = config(release, split).unwrap_err();
            assert!(
                matches!(refused, CapiError::InvalidArgument { what, .. } if what == variable),
                "{refused:?}"
            );
        }
    }
}
