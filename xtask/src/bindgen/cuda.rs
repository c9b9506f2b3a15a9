//! The CUDA driver-API bindings (gpu-cuda-ffi/src/sys.rs): the pinned header, the allow-list,
//! and each function's ABI version, which the loader asks cuGetProcAddress for.
//!
//! The header comes from the PyPI wheel `nvidia-cuda-runtime==13.0.96`, downloaded with pip and
//! unpacked under the workspace's target/ folder (headers are inputs, never committed). bindgen
//! parses it through libclang, loaded at run time. Functions are not emitted as `extern` items:
//! each becomes a pointer type `PFN_<name>` plus one row of the `cuda_entry_points!` table, so the
//! loader asks cuGetProcAddress for the ABI version cuda.h binds each name to. The CUresult
//! constants also become a sorted code-to-name table, so error names never need the driver.

use std::fmt::Write as _;
use std::path::Path;

use quote::ToTokens;

use super::{
    CLANG_TARGET, Generated, clang_version, common_builder, integer_value, is_path, pointer_type,
    result_codes, result_names_table, take_functions,
};
use crate::wheel::Wheel;

/// The pinned header source, and the include folder inside it.
const WHEEL: Wheel = Wheel {
    package: WHEEL_PACKAGE,
    version: WHEEL_VERSION,
    probe: "nvidia/cu13/include/cuda.h",
};
const WHEEL_PACKAGE: &str = "nvidia-cuda-runtime";
const WHEEL_VERSION: &str = "13.0.96";
const WHEEL_INCLUDE_DIR: &str = "nvidia/cu13/include";

/// Where the output goes.
const OUTPUT_FILE: &str = "gpu-cuda-ffi/src/sys.rs";

/// Driver functions a backend needs, by the base name cuGetProcAddress expects. cuda.h renames
/// some of them with macros (cuMemHostRegister is declared as cuMemHostRegister_v2): the
/// allow-list accepts a `_vN` suffix and the output records both names.
const FUNCTIONS: &[&str] = &[
    // Library, versions, entry points, error text.
    "cuInit",
    "cuDriverGetVersion",
    "cuGetProcAddress",
    "cuGetErrorName",
    "cuGetErrorString",
    // Devices.
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem",
    "cuDeviceCanAccessPeer",
    // Contexts.
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxReset",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxPushCurrent",
    "cuCtxPopCurrent",
    "cuCtxGetDevice",
    "cuCtxSynchronize",
    "cuCtxEnablePeerAccess",
    "cuCtxDisablePeerAccess",
    // A context of the program's own, as an embedding program makes one (the hardware tests
    // check that the runtime puts such a foreign current context back).
    "cuCtxCreate",
    "cuCtxDestroy",
    // Device memory, synchronous and stream-ordered, and pools.
    "cuMemGetInfo",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAllocFromPoolAsync",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolSetAttribute",
    "cuMemPoolGetAttribute",
    "cuMemPoolTrimTo",
    "cuMemPoolSetAccess",
    "cuMemAllocManaged",
    // Host memory: allocated pinned, or registered (locked) after the fact.
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister",
    "cuMemHostUnregister",
    "cuMemHostGetDevicePointer",
    "cuMemHostGetFlags",
    "cuPointerGetAttribute",
    "cuPointerGetAttributes",
    // Streams and events.
    "cuStreamCreate",
    "cuStreamDestroy",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    // Copies and fills.
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuMemcpyDtoDAsync",
    "cuMemcpyAsync",
    "cuMemcpyPeerAsync",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    // Modules and kernels.
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncSetAttribute",
    "cuFuncGetAttribute",
    // A kernel's parameters (offset and size of each): the MLIR graph mode copies a launch's
    // argument values with them.
    "cuFuncGetParamInfo",
    "cuLaunchKernel",
    // Context-independent libraries: a CUkernel launched on a stream runs in the stream's
    // context, so a launch needs no current context.
    "cuLibraryLoadData",
    "cuLibraryUnload",
    "cuLibraryGetKernel",
    "cuKernelSetAttribute",
    // Graphs: built node by node (kernel, memcpy and memset nodes with their edges),
    // instantiated once, replayed on a stream, and updated in place between replays.
    "cuGraphCreate",
    "cuGraphDestroy",
    "cuGraphAddKernelNode",
    "cuGraphAddMemcpyNode",
    "cuGraphAddMemsetNode",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphExecKernelNodeSetParams",
    "cuGraphExecMemcpyNodeSetParams",
    "cuGraphExecMemsetNodeSetParams",
    // Virtual memory management (the allocator's growable segments): address ranges reserved,
    // physical memory created and mapped into them piece by piece, access granted per device.
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
];

/// Types the functions take as plain integers (flags, attribute selectors), so the recursive
/// allow-list would not reach them; plus the pre-12.0 cuGetProcAddress pointer type, which the
/// loader needs to talk to drivers that lack cuGetProcAddress_v2. (The other `PFN_<name>_vN`
/// types are read to find each function's ABI version, then left out.)
const TYPES: &[&str] = &[
    "CUresult",
    "CUdevice_attribute",
    "CUpointer_attribute",
    "CUmemorytype",
    "CUmemPool_attribute",
    "CUfunction_attribute",
    "CUstream_flags",
    "CUevent_flags",
    "CUmemAttach_flags",
    "CUmemLocationType",
    "CUmemAccess_flags",
    "CUmemAllocationType",
    "CUmemAllocationHandleType",
    "CUmemAllocationGranularity_flags",
    "CUdriverProcAddress_flags",
    "CUdriverProcAddressQueryResult",
    "PFN_cuGetProcAddress_v11030",
];

/// `#define`d constants (regular expressions over their names).
const VARS: &[&str] = &[
    "CUDA_VERSION",
    "CU_MEMHOSTREGISTER_.*",
    "CU_MEMHOSTALLOC_.*",
];

/// The C enum behind `CUresult`; its constants become the code-to-name table.
const RESULT_ENUM: &str = "cudaError_enum";

/// The folder holding the pinned cuda.h (fetched on first use).
pub(super) fn include_dir(root: &Path) -> Result<std::path::PathBuf, String> {
    Ok(WHEEL.fetch(root)?.join(WHEEL_INCLUDE_DIR))
}

/// Fetches the pinned header and generates the bindings' text.
pub(super) fn generate(root: &Path) -> Result<Generated, String> {
    let include_dir = include_dir(root)?;
    Ok(Generated {
        output: OUTPUT_FILE,
        text: generate_from(&include_dir)?,
    })
}

/// Runs bindgen over the header (libclang loaded already) and turns its output into the
/// committed file's text.
fn generate_from(include_dir: &Path) -> Result<String, String> {
    let mut builder = common_builder(
        "cuda_driver_bindings.h",
        "#include <cuda.h>\n#include <cudaTypedefs.h>\n",
    )?
    .clang_arg(format!("-I{}", include_dir.display()));
    for function in FUNCTIONS {
        builder = builder
            .allowlist_function(format!("{function}(_v[0-9]+)?"))
            .allowlist_type(format!("PFN_{function}_v[0-9]+"));
    }
    for ty in TYPES {
        builder = builder.allowlist_type(ty);
    }
    for var in VARS {
        builder = builder.allowlist_var(var);
    }
    let raw = builder
        .generate()
        .map_err(|e| format!("bindgen failed on cuda.h: {e}"))?
        .to_string();
    let mut file =
        syn::parse_file(&raw).map_err(|e| format!("cannot parse bindgen's output: {e}"))?;
    let split = split_items(std::mem::take(&mut file.items), FUNCTIONS)?;
    file.items = split.items;
    let body = prettyplease::unparse(&file);
    let mut text = header_comment(&clang_version()?);
    text.push('\n');
    text.push_str(&body);
    text.push('\n');
    text.push_str(&result_names_table(
        "Every `CUresult` code cuda.h names, with its name, sorted by code (for binary search).",
        "CURESULT_NAMES",
        "CUresult",
        &split.results,
    ));
    text.push('\n');
    text.push_str(&entry_points_macro(&split.entry_points));
    Ok(text)
}

/// The first lines of the output. (lib.rs declares the module `#[rustfmt::skip]`, so the
/// committed file stays byte for byte what this command writes.)
fn header_comment(clang: &str) -> String {
    format!(
        "// @generated by `cargo xtask bindgen`: do not edit by hand.\n\
         //\n\
         // CUDA 13.0 driver API (cuda.h and cudaTypedefs.h from the PyPI wheel\n\
         // {WHEEL_PACKAGE}=={WHEEL_VERSION}, folder {WHEEL_INCLUDE_DIR}), parsed for {CLANG_TARGET}\n\
         // by bindgen 0.73 with libclang {clang}. The allow-list and the options live in\n\
         // xtask/src/bindgen/cuda.rs; `cargo xtask bindgen --check` compares this file with a fresh run.\n\
         //\n\
         // Functions are not declared as extern items (nothing links libcuda): each is a pointer type\n\
         // `PFN_<name>` with the signature cuda.h gives it, listed in `cuda_entry_points!` for the loader.\n"
    )
}

/// One driver function: its base name, the (possibly versioned) name cuda.h declares, and the
/// CUDA version whose ABI that declaration is (what cuGetProcAddress must be asked for).
struct EntryPoint {
    base: String,
    declared: String,
    abi_version: u32,
}

/// bindgen's output, sorted into what is kept verbatim and what is rewritten.
struct SplitItems {
    items: Vec<syn::Item>,
    entry_points: Vec<EntryPoint>,
    results: Vec<(i64, String)>,
}

/// Replaces each extern function with its pointer type and finds its ABI version, for the
/// functions `bases` in that order; collects the CUresult constants in code order.
fn split_items(bindgen_items: Vec<syn::Item>, bases: &[&str]) -> Result<SplitItems, String> {
    let (bindgen_items, functions) = take_functions(bindgen_items)?;
    let mut items = Vec::new();
    let mut abi_typedefs = Vec::new();
    let mut results = Vec::new();
    let mut aliases = TypeAliases::default();
    for item in bindgen_items {
        aliases.learn(&item);
        match item {
            syn::Item::Type(typedef) if abi_typedef_name(&typedef.ident.to_string()).is_some() => {
                let keep = TYPES.contains(&typedef.ident.to_string().as_str());
                if keep {
                    items.push(syn::Item::Type(typedef.clone()));
                }
                abi_typedefs.push(typedef);
            }
            syn::Item::Const(constant) if is_path(&constant.ty, RESULT_ENUM) => {
                results.push((integer_value(&constant)?, constant.ident.to_string()));
                items.push(syn::Item::Const(constant));
            }
            other => items.push(other),
        }
    }

    let mut entry_points = Vec::new();
    for base in bases {
        let function = declaration_of(base, &functions)?;
        let declared = function.sig.ident.to_string();
        let abi_version = abi_version_of(base, function, &functions, &abi_typedefs, &aliases)?;
        let doc = format!(
            " `{declared}` as cuda.h declares it: cuGetProcAddress(\"{base}\", {abi_version})."
        );
        items.push(pointer_type(base, function, &doc)?);
        entry_points.push(EntryPoint {
            base: base.to_string(),
            declared,
            abi_version,
        });
    }

    Ok(SplitItems {
        items,
        entry_points,
        results: result_codes(results),
    })
}

/// The declaration cuda.h gives `base`: the function named exactly `base` if there is one (cuda.h
/// 13.0 declares cuCtxGetDevice and, as a separate function, cuCtxGetDevice_v2), else the one
/// versioned `base_vN` a macro renamed it to (cuMemHostRegister -> cuMemHostRegister_v2).
fn declaration_of<'a>(
    base: &str,
    functions: &'a [syn::ForeignItemFn],
) -> Result<&'a syn::ForeignItemFn, String> {
    if let Some(exact) = functions.iter().find(|f| f.sig.ident == base) {
        return Ok(exact);
    }
    let mut versioned = functions
        .iter()
        .filter(|f| base_name(&f.sig.ident.to_string()) == base);
    match (versioned.next(), versioned.next()) {
        (Some(function), None) => Ok(function),
        _ => Err(format!(
            "cuda.h must declare {base}, or exactly one versioned {base}_vN"
        )),
    }
}

/// The CUDA version of the ABI `function` has, from cudaTypedefs.h's `PFN_<base>_v<version>`
/// pointer types (the per-thread-stream `_ptsz` ones aside). When cuda.h declares both `base`
/// and `base_vN` as separate functions, `base` is the oldest ABI; otherwise cuda.h binds `base`
/// to the newest. The chosen typedef's parameter types must equal the declaration's.
fn abi_version_of(
    base: &str,
    function: &syn::ForeignItemFn,
    functions: &[syn::ForeignItemFn],
    abi_typedefs: &[syn::ItemType],
    aliases: &TypeAliases,
) -> Result<u32, String> {
    let mut candidates: Vec<(u32, &syn::ItemType)> = abi_typedefs
        .iter()
        .filter_map(|typedef| {
            let name = typedef.ident.to_string();
            let (typedef_base, version) = abi_typedef_name(&name)?;
            (typedef_base == base).then_some((version, typedef))
        })
        .collect();
    candidates.sort_by_key(|(version, _)| *version);
    let has_separate_newer_function = function.sig.ident == base
        && functions
            .iter()
            .any(|f| f.sig.ident != base && base_name(&f.sig.ident.to_string()) == base);
    let chosen = if has_separate_newer_function {
        candidates.first()
    } else {
        candidates.last()
    };
    let Some((version, typedef)) = chosen else {
        return Err(format!(
            "cudaTypedefs.h has no PFN_{base}_vNNNN type; cannot tell which ABI cuda.h declares"
        ));
    };
    let declared: Vec<String> = function
        .sig
        .inputs
        .iter()
        .map(|input| match input {
            syn::FnArg::Typed(argument) => aliases.canonical(&argument.ty),
            syn::FnArg::Receiver(_) => String::from("self"),
        })
        .collect();
    let typedef_parameters = bare_fn_parameters(typedef)
        .ok_or_else(|| format!("{} is not an optional function pointer", typedef.ident))?;
    let typed: Vec<String> = typedef_parameters
        .iter()
        .map(|ty| aliases.canonical(ty))
        .collect();
    if declared != typed {
        return Err(format!(
            "{} declares ({}) but {} takes ({}); the ABI version of {base} is unclear",
            function.sig.ident,
            declared.join(", "),
            typedef.ident,
            typed.join(", ")
        ));
    }
    Ok(*version)
}

/// `PFN_cuMemAlloc_v3020` -> (`cuMemAlloc`, 3020); `None` for other names, `_ptsz` ones included.
fn abi_typedef_name(name: &str) -> Option<(&str, u32)> {
    let (base, version) = split_version_suffix(name.strip_prefix("PFN_")?)?;
    Some((base, version.parse().ok()?))
}

/// `cuMemHostRegister_v2` -> (`cuMemHostRegister`, `"2"`); `None` without a `_v<digits>` suffix.
fn split_version_suffix(name: &str) -> Option<(&str, &str)> {
    let (base, version) = name.rsplit_once("_v")?;
    let numeric = !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit());
    numeric.then_some((base, version))
}

/// The parameter types of `type X = Option<unsafe extern "C" fn(...) -> R>`.
fn bare_fn_parameters(typedef: &syn::ItemType) -> Option<Vec<syn::Type>> {
    let syn::Type::Path(option) = typedef.ty.as_ref() else {
        return None;
    };
    let segment = option.path.segments.last()?;
    let syn::PathArguments::AngleBracketed(arguments) = &segment.arguments else {
        return None;
    };
    let Some(syn::GenericArgument::Type(syn::Type::FnPtr(function))) = arguments.args.first()
    else {
        return None;
    };
    Some(
        function
            .inputs
            .iter()
            .map(|input| input.ty.clone())
            .collect(),
    )
}

/// Type aliases in bindgen's output (`pub type A = B;` and `pub use self::B as A;`), to compare
/// signatures that spell one type two ways (`CUdevice` and `CUdevice_v1`).
#[derive(Default)]
struct TypeAliases {
    targets: std::collections::HashMap<String, syn::Type>,
}

impl TypeAliases {
    fn learn(&mut self, item: &syn::Item) {
        match item {
            syn::Item::Type(alias) => {
                self.targets
                    .insert(alias.ident.to_string(), alias.ty.as_ref().clone());
            }
            syn::Item::Use(import) => {
                if let syn::UseTree::Path(path) = &import.tree
                    && let syn::UseTree::Rename(rename) = path.tree.as_ref()
                {
                    let target = &rename.ident;
                    self.targets
                        .insert(rename.rename.to_string(), syn::parse_quote!(#target));
                }
            }
            _ => {}
        }
    }

    /// `ty` with every alias replaced by what it stands for, as text.
    fn canonical(&self, ty: &syn::Type) -> String {
        match ty {
            syn::Type::Path(path) if path.qself.is_none() => match path.path.get_ident() {
                Some(ident) => match self.targets.get(&ident.to_string()) {
                    Some(target) => self.canonical(target),
                    None => ident.to_string(),
                },
                None => path.to_token_stream().to_string(),
            },
            syn::Type::Ptr(pointer) => format!(
                "*{} {}",
                match pointer.mutability {
                    syn::PointerMutability::Mut(_) => "mut",
                    syn::PointerMutability::Const(_) => "const",
                },
                self.canonical(&pointer.elem)
            ),
            other => other.to_token_stream().to_string(),
        }
    }
}

/// `cuMemHostRegister_v2` -> `cuMemHostRegister`; names without a `_vN` suffix are kept.
fn base_name(declared: &str) -> &str {
    split_version_suffix(declared).map_or(declared, |(base, _)| base)
}

/// `cuda_entry_points!`: hands the table of entry points to a macro of the loader.
fn entry_points_macro(entry_points: &[EntryPoint]) -> String {
    let mut text = String::from(
        "/// Calls `$callback!` with one `(name, c\"name\", declared_name, abi_version, PFN_name)` row per\n\
         /// driver function above: `name` is the base name cuGetProcAddress expects, `declared_name`\n\
         /// the (possibly versioned) symbol cuda.h binds it to, and `abi_version` the CUDA version\n\
         /// that introduced this ABI (cudaTypedefs.h's `PFN_name_v<abi_version>`), which is what\n\
         /// cuGetProcAddress must be asked for to return a function with this signature.\n\
         macro_rules! cuda_entry_points {\n    \
             ($callback:ident) => {\n        \
                 $callback! {\n",
    );
    for EntryPoint {
        base,
        declared,
        abi_version,
    } in entry_points
    {
        let _ = writeln!(
            text,
            "            ({base}, c\"{base}\", {declared}, {abi_version}, PFN_{base}),"
        );
    }
    text.push_str("        }\n    };\n}\npub(crate) use cuda_entry_points;\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_name_strips_only_a_numeric_version_suffix() {
        assert_eq!(base_name("cuMemHostRegister_v2"), "cuMemHostRegister");
        assert_eq!(base_name("cuGetProcAddress_v2"), "cuGetProcAddress");
        assert_eq!(base_name("cuCtxCreate_v4"), "cuCtxCreate");
        assert_eq!(base_name("cuInit"), "cuInit");
        assert_eq!(base_name("cuMemcpy_vector"), "cuMemcpy_vector");
        assert_eq!(base_name("cuThing_v"), "cuThing_v");
    }

    /// What bindgen emits for a slice of cuda.h and cudaTypedefs.h 13.0.
    const BINDGEN_SAMPLE: &str = r#"
        pub(crate) type CUdevice_v1 = ::core::ffi::c_int;
        pub(crate) type CUdevice = CUdevice_v1;
        pub(crate) type CUcontext = *mut CUctx_st;
        pub(crate) type cudaError_enum = ::core::ffi::c_uint;
        pub(crate) use self::cudaError_enum as CUresult;
        pub(crate) const CUDA_ERROR_INVALID_VALUE: cudaError_enum = 1;
        pub(crate) const CUDA_SUCCESS: cudaError_enum = 0;
        pub(crate) type PFN_cuCtxGetDevice_v2000 = ::core::option::Option<
            unsafe extern "C" fn(device: *mut CUdevice_v1) -> CUresult>;
        pub(crate) type PFN_cuCtxGetDevice_v13000 = ::core::option::Option<
            unsafe extern "C" fn(device: *mut CUdevice, ctx: CUcontext) -> CUresult>;
        pub(crate) type PFN_cuMemHostRegister_v6050 = ::core::option::Option<
            unsafe extern "C" fn(p: *mut ::core::ffi::c_void, bytesize: usize,
                                 Flags: ::core::ffi::c_uint) -> CUresult>;
        pub(crate) type PFN_cuEventElapsedTime_v2000 = ::core::option::Option<
            unsafe extern "C" fn(ms: *mut f32, start: CUdevice, end: CUdevice) -> CUresult>;
        pub(crate) type PFN_cuEventElapsedTime_v12080 = ::core::option::Option<
            unsafe extern "C" fn(ms: *mut f32, start: CUdevice, end: CUdevice) -> CUresult>;
        pub(crate) type PFN_cuGetProcAddress_v11030 = ::core::option::Option<
            unsafe extern "C" fn(symbol: *const ::core::ffi::c_char) -> CUresult>;
        pub(crate) type PFN_cuWrong_v2000 = ::core::option::Option<
            unsafe extern "C" fn(a: ::core::ffi::c_int, b: ::core::ffi::c_int) -> CUresult>;
        unsafe extern "C" {
            pub(crate) fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult;
            pub(crate) fn cuCtxGetDevice_v2(device: *mut CUdevice, ctx: CUcontext) -> CUresult;
            pub(crate) fn cuMemHostRegister_v2(p: *mut ::core::ffi::c_void, bytesize: usize,
                                        Flags: ::core::ffi::c_uint) -> CUresult;
            pub(crate) fn cuEventElapsedTime_v2(ms: *mut f32, start: CUdevice_v1, end: CUdevice)
                -> CUresult;
            pub(crate) fn cuWrong(a: ::core::ffi::c_int) -> CUresult;
            pub(crate) fn cuUntyped() -> CUresult;
        }
    "#;

    fn split_sample(bases: &[&str]) -> Result<SplitItems, String> {
        split_items(syn::parse_file(BINDGEN_SAMPLE).unwrap().items, bases)
    }

    #[test]
    fn each_function_gets_the_abi_version_of_its_declaration() {
        let split =
            split_sample(&["cuCtxGetDevice", "cuMemHostRegister", "cuEventElapsedTime"]).unwrap();
        let found: Vec<(&str, &str, u32)> = split
            .entry_points
            .iter()
            .map(|e| (e.base.as_str(), e.declared.as_str(), e.abi_version))
            .collect();
        assert_eq!(
            found,
            [
                // cuda.h declares both: the plain name is the old ABI, not cuCtxGetDevice_v2.
                ("cuCtxGetDevice", "cuCtxGetDevice", 2000),
                ("cuMemHostRegister", "cuMemHostRegister_v2", 6050),
                // Two ABIs with one signature: the macro-bound _v2 is the newest.
                ("cuEventElapsedTime", "cuEventElapsedTime_v2", 12080),
            ]
        );
        assert_eq!(
            split.results,
            [
                (0, "CUDA_SUCCESS".to_string()),
                (1, "CUDA_ERROR_INVALID_VALUE".to_string())
            ]
        );
        let text = prettyplease::unparse(&syn::File {
            shebang: None,
            frontmatter: None,
            attrs: Vec::new(),
            items: split.items,
        });
        assert!(text.contains("pub type PFN_cuCtxGetDevice = unsafe extern \"C\" fn("));
        assert!(text.contains("cuGetProcAddress(\"cuMemHostRegister\", 6050)"));
        assert!(
            text.contains("PFN_cuGetProcAddress_v11030"),
            "listed in TYPES: kept"
        );
        assert!(
            !text.contains("PFN_cuCtxGetDevice_v2000"),
            "read, then left out"
        );
        assert!(!text.contains("extern \"C\" {"), "no extern declarations");
    }

    #[test]
    fn unclear_or_absent_abis_are_refused() {
        let mismatch = split_sample(&["cuWrong"]).err().unwrap();
        assert!(
            mismatch.contains("the ABI version of cuWrong is unclear"),
            "{mismatch}"
        );
        let untyped = split_sample(&["cuUntyped"]).err().unwrap();
        assert!(untyped.contains("no PFN_cuUntyped_vNNNN"), "{untyped}");
        let absent = split_sample(&["cuAbsent"]).err().unwrap();
        assert!(absent.contains("must declare cuAbsent"), "{absent}");
    }

    #[test]
    fn abi_typedef_names_split_into_base_and_version() {
        assert_eq!(
            abi_typedef_name("PFN_cuMemAlloc_v3020"),
            Some(("cuMemAlloc", 3020))
        );
        assert_eq!(
            abi_typedef_name("PFN_cuCtxGetDevice_v13000"),
            Some(("cuCtxGetDevice", 13000))
        );
        assert_eq!(abi_typedef_name("PFN_cuMemAllocAsync_v11020_ptsz"), None);
        assert_eq!(abi_typedef_name("cuMemAlloc_v2"), None);
        assert_eq!(abi_typedef_name("PFN_cuInit"), None);
    }

    #[test]
    fn allow_list_has_no_versioned_or_repeated_names() {
        for (i, name) in FUNCTIONS.iter().enumerate() {
            assert_eq!(base_name(name), *name, "{name} must be a base name");
            assert!(!FUNCTIONS[..i].contains(name), "{name} listed twice");
        }
    }
}
