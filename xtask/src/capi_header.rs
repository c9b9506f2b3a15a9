//! `cargo xtask capi-header [--check]`: generates gpu-capi's C header
//! (gpu-capi/include/gpu_runtime.h, committed) from the crate's source with cbindgen, using the
//! crate's cbindgen.toml; `--check` fails when the committed header is stale.

use crate::{root, write_or_check};

const CRATE_DIR: &str = "gpu-capi";
const HEADER: &str = "gpu-capi/include/gpu_runtime.h";

/// Runs `cargo xtask capi-header [--check]`.
pub(crate) fn capi_header(args: &[String]) -> Result<(), String> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        _ => return Err("usage: cargo xtask capi-header [--check]".to_string()),
    };
    let root = root();
    let crate_dir = root.join(CRATE_DIR);
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .map_err(|e| format!("cannot read {CRATE_DIR}/cbindgen.toml: {e}"))?;
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .map_err(|e| format!("cbindgen failed on {CRATE_DIR}: {e}"))?;
    let mut text = Vec::new();
    bindings.write(&mut text);
    let generated = String::from_utf8(text)
        .map_err(|e| format!("cbindgen wrote text that is not UTF-8: {e}"))?
        // cbindgen qualifies enum constants with the enum's C name (`gpurt_status_t`); the
        // header's status constants are `GPURT_STATUS_*`, without the type's `_t`.
        .replace("GPURT_STATUS_T_", "GPURT_STATUS_");
    write_or_check(&root, HEADER, &generated, check, "cargo xtask capi-header")
}
