//! The HIP and HSA bindings (gpu-hip-ffi/src/sys.rs, gpu-hsa-ffi/src/sys.rs) from Debian's ROCm
//! 5.2.3 headers (`libamdhip64-dev`, `libhsa-runtime-dev`), parsed for the AMD platform.
//!
//! Both libraries export plain C symbols (no ABI versions behind macros), so each function
//! becomes a pointer type `PFN_<name>` and one row `(name, c"name", PFN_name)` of the crate's
//! entry-point table, which the shared run-time loader (gpu-ffi-loader) resolves with dlsym.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use super::{
    CLANG_TARGET, Generated, clang_version, common_builder, integer_value, pointer_type,
    result_codes, result_names_table, take_functions,
};

/// One ROCm library's bindings: where the header comes from and what is allow-listed.
pub(super) struct RocmLibrary {
    /// Short name, as in the output's comments (`HIP`).
    title: &'static str,
    /// The Debian package holding the headers, and the version it must have.
    package: &'static str,
    package_version: &'static str,
    /// A header of the package, relative to its include folder (used to find that folder).
    probe_header: &'static str,
    /// What the bindings include.
    contents: &'static str,
    /// Extra clang arguments (the platform macro).
    clang_args: &'static [&'static str],
    /// Functions, by exported name.
    functions: &'static [&'static str],
    /// Types and `#define`d or enum constants (regular expressions over their names).
    types: &'static [&'static str],
    vars: &'static [&'static str],
    /// Prefixes of the result enum's constants; they also become the code-to-name table.
    result_prefixes: &'static [&'static str],
    /// The result type and the name of its table.
    result_type: &'static str,
    result_table: &'static str,
    /// The entry-point table's macro.
    entry_points_macro: &'static str,
    /// The committed file.
    output: &'static str,
}

/// HIP's runtime API (libamdhip64), as the HIP backend uses it.
pub(super) const HIP: RocmLibrary = RocmLibrary {
    title: "HIP",
    package: "libamdhip64-dev",
    package_version: "5.2.3",
    probe_header: "hip/hip_runtime_api.h",
    contents: "#include <hip/hip_runtime_api.h>\n",
    clang_args: &["-D__HIP_PLATFORM_AMD__"],
    functions: &[
        // Library, versions, error text.
        "hipInit",
        "hipDriverGetVersion",
        "hipRuntimeGetVersion",
        "hipGetErrorName",
        "hipGetErrorString",
        // Devices and the calling thread's current device.
        "hipGetDeviceCount",
        "hipDeviceGet",
        "hipDeviceGetName",
        "hipDeviceGetAttribute",
        "hipDeviceTotalMem",
        "hipSetDevice",
        "hipGetDevice",
        "hipDeviceSynchronize",
        "hipDeviceReset",
        // Peer access between devices.
        "hipDeviceCanAccessPeer",
        "hipDeviceEnablePeerAccess",
        "hipDeviceDisablePeerAccess",
        // Device memory, synchronous and stream-ordered, and the default pool.
        "hipMemGetInfo",
        "hipMalloc",
        "hipFree",
        "hipMallocAsync",
        "hipFreeAsync",
        "hipDeviceGetDefaultMemPool",
        "hipMemPoolSetAttribute",
        "hipMemPoolGetAttribute",
        "hipMemPoolSetAccess",
        "hipMallocManaged",
        // Host memory: allocated pinned, or registered (locked) after the fact.
        "hipHostMalloc",
        "hipHostFree",
        "hipHostRegister",
        "hipHostUnregister",
        "hipHostGetDevicePointer",
        "hipPointerGetAttributes",
        "hipDrvPointerGetAttributes",
        // Streams and events.
        "hipStreamCreateWithFlags",
        "hipStreamDestroy",
        "hipStreamSynchronize",
        "hipStreamQuery",
        "hipStreamWaitEvent",
        "hipEventCreateWithFlags",
        "hipEventDestroy",
        "hipEventRecord",
        "hipEventQuery",
        "hipEventSynchronize",
        // Copies and fills.
        "hipMemcpyAsync",
        "hipMemcpyPeerAsync",
        "hipMemsetD8Async",
        "hipMemsetD16Async",
        "hipMemsetD32Async",
        // Modules and kernels.
        "hipModuleLoadData",
        "hipModuleUnload",
        "hipModuleGetFunction",
        "hipFuncSetAttribute",
        "hipFuncGetAttribute",
        "hipModuleLaunchKernel",
        // Graphs: built node by node (kernel, 1-D memcpy and memset nodes with their edges),
        // instantiated once, replayed on a stream, and updated in place between replays.
        "hipGraphCreate",
        "hipGraphDestroy",
        "hipGraphAddKernelNode",
        "hipGraphAddMemcpyNode1D",
        "hipGraphAddMemsetNode",
        "hipGraphInstantiateWithFlags",
        "hipGraphLaunch",
        "hipGraphExecDestroy",
        "hipGraphExecKernelNodeSetParams",
        "hipGraphExecMemcpyNodeSetParams1D",
        "hipGraphExecMemsetNodeSetParams",
        // Virtual memory management (the allocator's growable segments): address ranges
        // reserved, physical memory created and mapped into them piece by piece, access granted.
        "hipMemGetAllocationGranularity",
        "hipMemAddressReserve",
        "hipMemAddressFree",
        "hipMemCreate",
        "hipMemRelease",
        "hipMemMap",
        "hipMemUnmap",
        "hipMemSetAccess",
    ],
    types: &[
        "hipError_t",
        "hipMemAllocationProp",
        "hipMemGenericAllocationHandle_t",
        "hipMemAllocationGranularity_flags",
        "hipMemAllocationType",
        "hipMemAllocationHandleType",
        "hipDeviceAttribute_t",
        "hipMemPoolAttr",
        "hipMemAccessDesc",
        "hipMemLocation",
        "hipMemLocationType",
        "hipMemAccessFlags",
        "hipPointer_attribute",
        "hipMemoryType",
        "hipFuncAttribute",
        "hipFunction_attribute",
        "hipPointerAttribute_t",
        "hipMemcpyKind",
    ],
    vars: &[
        "HIP_VERSION.*",
        "hipHostRegister.*",
        "hipHostMalloc.*",
        "hipStreamNonBlocking",
        "hipEventDisableTiming",
        "hipMemAttach.*",
    ],
    result_prefixes: &["hipSuccess", "hipError"],
    result_type: "hipError_t",
    result_table: "HIP_ERROR_NAMES",
    entry_points_macro: "hip_entry_points",
    output: "gpu-hip-ffi/src/sys.rs",
};

/// The HSA runtime (libhsa-runtime64) with AMD's extensions, as the HSA backend uses it.
pub(super) const HSA: RocmLibrary = RocmLibrary {
    title: "HSA",
    package: "libhsa-runtime-dev",
    package_version: "5.2.3",
    probe_header: "hsa/hsa.h",
    contents: "#include <hsa/hsa.h>\n#include <hsa/hsa_ext_amd.h>\n",
    clang_args: &[],
    functions: &[
        // Runtime, system, errors.
        "hsa_init",
        "hsa_shut_down",
        "hsa_status_string",
        "hsa_system_get_info",
        // Agents and memory pools.
        "hsa_iterate_agents",
        "hsa_agent_get_info",
        "hsa_amd_agent_iterate_memory_pools",
        "hsa_amd_memory_pool_get_info",
        "hsa_amd_agent_memory_pool_get_info",
        "hsa_amd_memory_pool_allocate",
        "hsa_amd_memory_pool_free",
        "hsa_amd_agents_allow_access",
        // Locked host memory and pointer queries.
        "hsa_amd_memory_lock",
        "hsa_amd_memory_unlock",
        "hsa_amd_pointer_info",
        // Signals (events) and copies.
        "hsa_signal_create",
        "hsa_signal_destroy",
        "hsa_signal_load_scacquire",
        "hsa_signal_store_screlease",
        "hsa_signal_add_screlease",
        "hsa_signal_wait_scacquire",
        "hsa_amd_memory_async_copy",
        "hsa_amd_memory_fill",
        // Queues and AQL dispatch.
        "hsa_queue_create",
        "hsa_queue_destroy",
        "hsa_queue_load_write_index_relaxed",
        "hsa_queue_add_write_index_screlease",
        "hsa_queue_load_read_index_scacquire",
        // Code objects and executables.
        "hsa_code_object_reader_create_from_memory",
        "hsa_code_object_reader_destroy",
        "hsa_executable_create_alt",
        "hsa_executable_load_agent_code_object",
        "hsa_executable_freeze",
        "hsa_executable_get_symbol_by_name",
        "hsa_executable_symbol_get_info",
        "hsa_executable_destroy",
    ],
    types: &[
        "hsa_status_t",
        "hsa_agent_info_t",
        "hsa_device_type_t",
        "hsa_system_info_t",
        "hsa_amd_memory_pool_info_t",
        "hsa_amd_segment_t",
        "hsa_amd_memory_pool_global_flag_t",
        "hsa_amd_agent_memory_pool_info_t",
        "hsa_amd_memory_pool_access_t",
        "hsa_amd_pointer_type_t",
        "hsa_amd_pointer_info_t",
        "hsa_signal_condition_t",
        "hsa_wait_state_t",
        "hsa_queue_type_t",
        "hsa_packet_type_t",
        "hsa_packet_header_t",
        "hsa_packet_header_width_t",
        "hsa_fence_scope_t",
        "hsa_kernel_dispatch_packet_t",
        "hsa_barrier_and_packet_t",
        "hsa_kernel_dispatch_packet_setup_t",
        "hsa_executable_symbol_info_t",
        "hsa_profile_t",
        "hsa_default_float_rounding_mode_t",
        "hsa_executable_state_t",
    ],
    vars: &["HSA_STATUS_.*"],
    result_prefixes: &["HSA_STATUS_"],
    result_type: "hsa_status_t",
    result_table: "HSA_STATUS_NAMES",
    entry_points_macro: "hsa_entry_points",
    output: "gpu-hsa-ffi/src/sys.rs",
};

/// Finds the library's include folder from its Debian package (checking the pinned version)
/// and generates the bindings' text.
pub(super) fn generate(library: &RocmLibrary) -> Result<Generated, String> {
    let include_dir = package_include_dir(library)?;
    let mut builder = common_builder("rocm_bindings.h", library.contents)?
        .clang_arg(format!("-I{}", include_dir.display()));
    for arg in library.clang_args {
        builder = builder.clang_arg(*arg);
    }
    for function in library.functions {
        builder = builder.allowlist_function(function);
    }
    for ty in library.types {
        builder = builder.allowlist_type(ty);
    }
    for var in library.vars {
        builder = builder.allowlist_var(var);
    }
    let raw = builder
        .generate()
        .map_err(|e| format!("bindgen failed on {}: {e}", library.contents.trim()))?
        .to_string();
    let file = syn::parse_file(&raw).map_err(|e| format!("cannot parse bindgen's output: {e}"))?;
    let (mut items, functions) = take_functions(file.items)?;
    let mut results = Vec::new();
    for item in &items {
        if let syn::Item::Const(constant) = item {
            let name = constant.ident.to_string();
            if library.result_prefixes.iter().any(|p| name.starts_with(p)) {
                results.push((integer_value(constant)?, name));
            }
        }
    }
    for name in library.functions {
        let function = functions
            .iter()
            .find(|f| f.sig.ident == name)
            .ok_or_else(|| format!("{} declares no function {name}", library.contents.trim()))?;
        let doc = format!(" `{name}` as the {} header declares it.", library.title);
        items.push(pointer_type(name, function, &doc)?);
    }
    let body = prettyplease::unparse(&syn::File {
        shebang: None,
        frontmatter: None,
        attrs: Vec::new(),
        items,
    });
    let mut text = header_comment(library, &clang_version()?);
    text.push('\n');
    text.push_str(&body);
    text.push('\n');
    text.push_str(&result_names_table(
        &format!(
            "Every `{}` code the headers name, with its name, sorted by code (for binary search).",
            library.result_type
        ),
        library.result_table,
        library.result_type,
        &result_codes(results),
    ));
    text.push('\n');
    text.push_str(&entry_points_macro(library));
    Ok(Generated {
        output: library.output,
        text,
    })
}

/// The include folder of HIP's headers (Debian's libamdhip64-dev 5.2.3), for the NVIDIA shim.
pub(crate) fn hip_include_dir() -> Result<PathBuf, String> {
    package_include_dir(&HIP)
}

/// The include folder of the library's Debian package, after checking that the installed
/// package has the pinned version.
fn package_include_dir(library: &RocmLibrary) -> Result<PathBuf, String> {
    let query = |args: &[&str]| -> Result<String, String> {
        let output = Command::new("dpkg-query")
            .args(args)
            .arg(library.package)
            .output()
            .map_err(|e| format!("cannot run dpkg-query: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!(
                "the {} headers come from the Debian package {} {}: install it \
                 (`apt-get install {}`)",
                library.title, library.package, library.package_version, library.package
            ))
        }
    };
    let version = query(&["-W", "-f=${Version}"])?;
    if !version.starts_with(library.package_version) {
        return Err(format!(
            "{} is version {version}; the bindings are pinned to {}",
            library.package, library.package_version
        ));
    }
    let suffix = format!("/{}", library.probe_header);
    query(&["-L"])?
        .lines()
        .find_map(|path| path.strip_suffix(&suffix).map(PathBuf::from))
        .ok_or_else(|| format!("{} installs no {}", library.package, library.probe_header))
}

/// The first lines of the output.
fn header_comment(library: &RocmLibrary, clang: &str) -> String {
    let defines = if library.clang_args.is_empty() {
        String::new()
    } else {
        format!(" with {}", library.clang_args.join(" "))
    };
    format!(
        "// @generated by `cargo xtask bindgen`: do not edit by hand.\n\
         //\n\
         // {} ({} from the Debian package {} {}), parsed for {CLANG_TARGET}{defines}\n\
         // by bindgen 0.73 with libclang {clang}. The allow-list and the options live in\n\
         // xtask/src/bindgen/rocm.rs; `cargo xtask bindgen --check` compares this file with a fresh run.\n\
         //\n\
         // Functions are not declared as extern items (nothing links the library): each is a pointer\n\
         // type `PFN_<name>`, listed in `{}!` for the loader, which finds it with dlsym.\n",
        library.title,
        library.contents.trim().replace('\n', ", "),
        library.package,
        library.package_version,
        library.entry_points_macro
    )
}

/// The entry-point table: hands one `(name, c"name", PFN_name)` row per function to a macro of
/// the loader.
fn entry_points_macro(library: &RocmLibrary) -> String {
    let name = library.entry_points_macro;
    let mut text = format!(
        "/// Calls `$callback!` with one `(name, c\"name\", PFN_name)` row per function above, in\n\
         /// allow-list order: the exported symbol, NUL-terminated, and its pointer type.\n\
         macro_rules! {name} {{\n    \
             ($callback:ident) => {{\n        \
                 $callback! {{\n"
    );
    for function in library.functions {
        let _ = writeln!(
            text,
            "            ({function}, c\"{function}\", PFN_{function}),"
        );
    }
    text.push_str(&format!(
        "        }}\n    }};\n}}\npub(crate) use {name};\n"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lists_have_no_repeated_names() {
        for library in [&HIP, &HSA] {
            for (i, name) in library.functions.iter().enumerate() {
                assert!(
                    !library.functions[..i].contains(name),
                    "{name} listed twice"
                );
            }
        }
    }

    #[test]
    fn the_entry_point_table_has_one_row_per_function() {
        let text = entry_points_macro(&HSA);
        assert!(text.starts_with("/// Calls `$callback!`"));
        assert!(text.contains("macro_rules! hsa_entry_points {"));
        assert!(text.contains("(hsa_init, c\"hsa_init\", PFN_hsa_init),"));
        let rows = text
            .lines()
            .filter(|line| line.starts_with("            (hsa_"))
            .count();
        assert_eq!(rows, HSA.functions.len());
        assert!(text.ends_with("pub(crate) use hsa_entry_points;\n"));
    }
}
