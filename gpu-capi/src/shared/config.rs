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
//! - `GPU_RUNTIME_GROWABLE_SEGMENTS=0|1`: whether each stream's pools grow one reserved
//!   address range in granules instead of allocating new segments, where the driver has
//!   virtual memory (`AllocatorConfig::growable_segments`; PyTorch's `expandable_segments`).
//! - `GPU_RUNTIME_PEER_ACCESS=0|1`: whether opening turns peer access on between devices that
//!   allow it (`RuntimeConfig::peer_access`, on by default; `0` stages copies between devices).
//!
//! Unset, each keeps the allocator's default.

use std::ffi::OsStr;

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

/// Environment variable for [`RuntimeConfig::peer_access`].
pub const PEER_ACCESS_VAR: &str = "GPU_RUNTIME_PEER_ACCESS";

/// The runtime's configuration as the environment sets it.
pub fn from_env() -> Result<RuntimeConfig, CapiError> {
    let allocator = allocator_config(
        std::env::var_os(RELEASE_BEFORE_GROWING_VAR).as_deref(),
        std::env::var_os(WAIT_BEFORE_GROWING_VAR).as_deref(),
        std::env::var_os(MAX_SPLIT_SIZE_VAR).as_deref(),
    )?;
    let allocator = AllocatorConfig {
        growable_segments: std::env::var_os(GROWABLE_SEGMENTS_VAR)
            .map(|value| flag(GROWABLE_SEGMENTS_VAR, &value))
            .transpose()?
            .unwrap_or(allocator.growable_segments),
        ..allocator
    };
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

/// The allocator's configuration for the three variables' values (`None`: unset).
pub fn allocator_config(
    release_before_growing: Option<&OsStr>,
    wait_before_growing: Option<&OsStr>,
    max_split_size: Option<&OsStr>,
) -> Result<AllocatorConfig, CapiError> {
    let mut config = AllocatorConfig::default();
    if let Some(value) = release_before_growing {
        config.release_before_growing = flag(RELEASE_BEFORE_GROWING_VAR, value)?;
    }
    if let Some(value) = wait_before_growing {
        config.wait_before_growing = flag(WAIT_BEFORE_GROWING_VAR, value)?;
    }
    if let Some(value) = max_split_size {
        config.max_split_size = match value.to_str() {
            Some("none") => usize::MAX,
            Some(bytes) => match bytes.parse::<usize>() {
                Ok(bytes) if bytes > 0 => bytes,
                _ => return Err(invalid(MAX_SPLIT_SIZE_VAR, value, "a byte count or `none`")),
            },
            None => return Err(invalid(MAX_SPLIT_SIZE_VAR, value, "a byte count or `none`")),
        };
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

    fn config(release: Option<&str>, split: Option<&str>) -> Result<AllocatorConfig, CapiError> {
        allocator_config(release.map(OsStr::new), None, split.map(OsStr::new))
    }

    #[test]
    fn growable_segments_take_a_flag() {
        assert_eq!(flag(GROWABLE_SEGMENTS_VAR, OsStr::new("1")), Ok(true));
        assert_eq!(flag(GROWABLE_SEGMENTS_VAR, OsStr::new("0")), Ok(false));
        assert!(matches!(
            flag(GROWABLE_SEGMENTS_VAR, OsStr::new("yes")),
            Err(CapiError::InvalidArgument { what, .. }) if what == GROWABLE_SEGMENTS_VAR
        ));
        assert!(!AllocatorConfig::default().growable_segments);
    }

    #[test]
    fn waiting_before_growing_is_set_by_its_own_variable() {
        let set = |value: &str| allocator_config(None, Some(OsStr::new(value)), None);
        assert!(!set("0").unwrap().wait_before_growing);
        assert!(set("1").unwrap().wait_before_growing);
        assert!(matches!(
            set("on"),
            Err(CapiError::InvalidArgument { what, .. }) if what == WAIT_BEFORE_GROWING_VAR
        ));
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
