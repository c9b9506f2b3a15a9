//! `cargo xtask bindgen`, second half: the CUPTI bindings of the recorder
//! (gpu-recorder/src/sys.rs) and the table of driver calls it records, from the pinned headers.
//!
//! The headers come from the PyPI wheel `nvidia-cuda-cupti==13.0.85` (cuda.h, which they
//! include, from the driver bindings' wheel; crt/ from `nvidia-cuda-crt==13.0.88`), unpacked under target/ like the driver's. CUPTI's
//! functions become pointer types `PFN_<name>` plus rows of `cupti_functions!` (the recorder
//! opens libcupti at run time; nothing links it). Each recorded driver call keeps its
//! `<name>_params` struct and its callback id, and becomes one row of `recorded_calls!`:
//! `(name, kind, [fields holding its handles])`, which the recorder turns into its reader.

use std::fmt::Write as _;
use std::path::Path;

use super::{CLANG_TARGET, Generated, clang_version, common_builder, pointer_type, take_functions};
use crate::wheel::Wheel;

/// The pinned CUPTI headers.
const CUPTI_WHEEL: Wheel = Wheel {
    package: "nvidia-cuda-cupti",
    version: "13.0.85",
    probe: "nvidia/cu13/include/cupti_callbacks.h",
};

/// The compiler's crt/ headers, which the runtime types cupti_callbacks.h includes need.
const CRT_WHEEL: Wheel = Wheel {
    package: "nvidia-cuda-crt",
    version: "13.0.88",
    probe: "nvidia/cu13/include/crt/host_defines.h",
};

/// The include folder inside each wheel.
const INCLUDE_DIR: &str = "nvidia/cu13/include";

const OUTPUT_FILE: &str = "gpu-recorder/src/sys.rs";

/// The CUPTI functions the recorder calls.
const FUNCTIONS: &[&str] = &[
    "cuptiSubscribe",
    "cuptiEnableCallback",
    "cuptiGetDeviceId",
    "cuptiGetResultString",
];

/// The driver functions the recorder looks up in the loaded libcuda (the parameter sizes of a
/// launched kernel).
const DRIVER_FUNCTIONS: &[&str] = &["cuFuncGetParamInfo", "cuKernelGetParamInfo"];

/// Types the callback receives or the functions take as plain integers.
const TYPES: &[&str] = &[
    "CUpti_CallbackData",
    "CUpti_CallbackFunc",
    "CUpti_SubscriberHandle",
    "CUpti_ApiCallbackSite",
    "CUpti_CallbackDomain",
    "CUptiResult",
];

/// The enum of driver-API callback ids; only the recorded calls' constants are kept.
const CBID_ENUM: &str = "CUpti_driver_api_trace_cbid_enum";
const CBID_PREFIX: &str = "CUPTI_DRIVER_TRACE_CBID_";

/// The driver calls the recorder subscribes to, by the name CUPTI gives their callback (the
/// ABI-versioned symbol: `cuStreamDestroy_v2`, `cuLaunchKernel_ptsz`), what kind of call each
/// is, and the fields of its `<name>_params` struct that hold its stream and event handles, in
/// the order the kind takes them. Kinds: `stream_create` (a pointer the new handle is written
/// to, and the creation flags), `event_create` (a pointer the new handle is written to), `stream_destroy`, `event_destroy`, `event_record` (event, stream),
/// `stream_wait_event` (stream, event), `stream_synchronize`, `stream_query`,
/// `event_synchronize`, `event_query`, `work` (stream-ordered work on a stream), `work_each` (a `CUDA_LAUNCH_PARAMS` array and
/// its length: one launch per entry), `begin_capture`, `end_capture`, and `note` (memory and
/// context calls the trace keeps as comments; no fields). The calls with a memory footprint
/// also name the fields holding it: `launch` (function, parameter array, stream),
/// `launch_extra` (function, parameter array, `extra` array, stream), `launch_config` (a
/// `CUlaunchConfig` pointer, function, parameter array, `extra` array), `copy` (destination,
/// source, bytes, stream) and `copy_sync` (the same on the null stream), `fill` (destination,
/// element count, stream; the element size is in the name: `D8`, `D16`, `D32`) and `fill_sync`,
/// `alloc` (a pointer the new address is written to, bytes), `alloc_async` (the same, stream),
/// `free` (address) and `free_async` (address, stream).
const RECORDED_CALLS: &[(&str, &str, &[&str])] = &[
    // Streams.
    ("cuStreamCreate", "stream_create", &["phStream", "Flags"]),
    (
        "cuStreamCreateWithPriority",
        "stream_create",
        &["phStream", "flags"],
    ),
    (
        "cuGreenCtxStreamCreate",
        "stream_create",
        &["phStream", "flags"],
    ),
    ("cuStreamDestroy", "stream_destroy", &["hStream"]),
    ("cuStreamDestroy_v2", "stream_destroy", &["hStream"]),
    ("cuStreamSynchronize", "stream_synchronize", &["hStream"]),
    (
        "cuStreamSynchronize_ptsz",
        "stream_synchronize",
        &["hStream"],
    ),
    ("cuStreamQuery", "stream_query", &["hStream"]),
    ("cuStreamQuery_ptsz", "stream_query", &["hStream"]),
    (
        "cuStreamWaitEvent",
        "stream_wait_event",
        &["hStream", "hEvent"],
    ),
    (
        "cuStreamWaitEvent_ptsz",
        "stream_wait_event",
        &["hStream", "hEvent"],
    ),
    // Events.
    ("cuEventCreate", "event_create", &["phEvent"]),
    ("cuIpcOpenEventHandle", "event_create", &["phEvent"]),
    ("cuEventDestroy", "event_destroy", &["hEvent"]),
    ("cuEventDestroy_v2", "event_destroy", &["hEvent"]),
    ("cuEventRecord", "event_record", &["hEvent", "hStream"]),
    ("cuEventRecord_ptsz", "event_record", &["hEvent", "hStream"]),
    (
        "cuEventRecordWithFlags",
        "event_record",
        &["hEvent", "hStream"],
    ),
    (
        "cuEventRecordWithFlags_ptsz",
        "event_record",
        &["hEvent", "hStream"],
    ),
    ("cuEventSynchronize", "event_synchronize", &["hEvent"]),
    ("cuEventQuery", "event_query", &["hEvent"]),
    // Kernel launches.
    (
        "cuLaunchKernel",
        "launch_extra",
        &["f", "kernelParams", "extra", "hStream"],
    ),
    (
        "cuLaunchKernel_ptsz",
        "launch_extra",
        &["f", "kernelParams", "extra", "hStream"],
    ),
    (
        "cuLaunchKernelEx",
        "launch_config",
        &["config", "f", "kernelParams", "extra"],
    ),
    (
        "cuLaunchKernelEx_ptsz",
        "launch_config",
        &["config", "f", "kernelParams", "extra"],
    ),
    (
        "cuLaunchCooperativeKernel",
        "launch",
        &["f", "kernelParams", "hStream"],
    ),
    (
        "cuLaunchCooperativeKernel_ptsz",
        "launch",
        &["f", "kernelParams", "hStream"],
    ),
    (
        "cuLaunchCooperativeKernelMultiDevice",
        "work_each",
        &["launchParamsList", "numDevices"],
    ),
    ("cuLaunchGridAsync", "work", &["hStream"]),
    ("cuLaunchHostFunc", "work", &["hStream"]),
    ("cuLaunchHostFunc_ptsz", "work", &["hStream"]),
    ("cuStreamAddCallback", "work", &["hStream"]),
    ("cuStreamAddCallback_ptsz", "work", &["hStream"]),
    // Graphs and capture.
    ("cuGraphLaunch", "work", &["hStream"]),
    ("cuGraphLaunch_ptsz", "work", &["hStream"]),
    ("cuGraphUpload", "work", &["hStream"]),
    ("cuGraphUpload_ptsz", "work", &["hStream"]),
    ("cuStreamBeginCapture", "begin_capture", &["hStream"]),
    ("cuStreamBeginCapture_ptsz", "begin_capture", &["hStream"]),
    ("cuStreamBeginCapture_v2", "begin_capture", &["hStream"]),
    (
        "cuStreamBeginCapture_v2_ptsz",
        "begin_capture",
        &["hStream"],
    ),
    ("cuStreamBeginCaptureToGraph", "begin_capture", &["hStream"]),
    (
        "cuStreamBeginCaptureToGraph_ptsz",
        "begin_capture",
        &["hStream"],
    ),
    ("cuStreamEndCapture", "end_capture", &["hStream"]),
    ("cuStreamEndCapture_ptsz", "end_capture", &["hStream"]),
    // Asynchronous copies, fills and stream-ordered memory.
    (
        "cuMemcpyAsync",
        "copy",
        &["dst", "src", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyAsync_ptsz",
        "copy",
        &["dst", "src", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyPeerAsync",
        "copy",
        &["dstDevice", "srcDevice", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyPeerAsync_ptsz",
        "copy",
        &["dstDevice", "srcDevice", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyHtoDAsync_v2",
        "copy",
        &["dstDevice", "srcHost", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyHtoDAsync_v2_ptsz",
        "copy",
        &["dstDevice", "srcHost", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyDtoHAsync_v2",
        "copy",
        &["dstHost", "srcDevice", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyDtoHAsync_v2_ptsz",
        "copy",
        &["dstHost", "srcDevice", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyDtoDAsync_v2",
        "copy",
        &["dstDevice", "srcDevice", "ByteCount", "hStream"],
    ),
    (
        "cuMemcpyDtoDAsync_v2_ptsz",
        "copy",
        &["dstDevice", "srcDevice", "ByteCount", "hStream"],
    ),
    ("cuMemcpyHtoAAsync_v2", "work", &["hStream"]),
    ("cuMemcpyHtoAAsync_v2_ptsz", "work", &["hStream"]),
    ("cuMemcpyAtoHAsync_v2", "work", &["hStream"]),
    ("cuMemcpyAtoHAsync_v2_ptsz", "work", &["hStream"]),
    ("cuMemcpy2DAsync_v2", "work", &["hStream"]),
    ("cuMemcpy2DAsync_v2_ptsz", "work", &["hStream"]),
    ("cuMemcpy3DAsync_v2", "work", &["hStream"]),
    ("cuMemcpy3DAsync_v2_ptsz", "work", &["hStream"]),
    ("cuMemcpy3DPeerAsync", "work", &["hStream"]),
    ("cuMemcpy3DPeerAsync_ptsz", "work", &["hStream"]),
    ("cuMemcpyBatchAsync_v2", "work", &["hStream"]),
    ("cuMemcpyBatchAsync_v2_ptsz", "work", &["hStream"]),
    ("cuMemcpy3DBatchAsync_v2", "work", &["hStream"]),
    ("cuMemcpy3DBatchAsync_v2_ptsz", "work", &["hStream"]),
    ("cuMemsetD8Async", "fill", &["dstDevice", "N", "hStream"]),
    (
        "cuMemsetD8Async_ptsz",
        "fill",
        &["dstDevice", "N", "hStream"],
    ),
    ("cuMemsetD16Async", "fill", &["dstDevice", "N", "hStream"]),
    (
        "cuMemsetD16Async_ptsz",
        "fill",
        &["dstDevice", "N", "hStream"],
    ),
    ("cuMemsetD32Async", "fill", &["dstDevice", "N", "hStream"]),
    (
        "cuMemsetD32Async_ptsz",
        "fill",
        &["dstDevice", "N", "hStream"],
    ),
    ("cuMemsetD2D8Async", "work", &["hStream"]),
    ("cuMemsetD2D8Async_ptsz", "work", &["hStream"]),
    ("cuMemsetD2D16Async", "work", &["hStream"]),
    ("cuMemsetD2D16Async_ptsz", "work", &["hStream"]),
    ("cuMemsetD2D32Async", "work", &["hStream"]),
    ("cuMemsetD2D32Async_ptsz", "work", &["hStream"]),
    (
        "cuMemAllocAsync",
        "alloc_async",
        &["dptr", "bytesize", "hStream"],
    ),
    (
        "cuMemAllocAsync_ptsz",
        "alloc_async",
        &["dptr", "bytesize", "hStream"],
    ),
    (
        "cuMemAllocFromPoolAsync",
        "alloc_async",
        &["dptr", "bytesize", "hStream"],
    ),
    (
        "cuMemAllocFromPoolAsync_ptsz",
        "alloc_async",
        &["dptr", "bytesize", "hStream"],
    ),
    ("cuMemFreeAsync", "free_async", &["dptr", "hStream"]),
    ("cuMemFreeAsync_ptsz", "free_async", &["dptr", "hStream"]),
    ("cuMemPrefetchAsync_v2", "work", &["hStream"]),
    ("cuMemPrefetchAsync_v2_ptsz", "work", &["hStream"]),
    ("cuMemPrefetchBatchAsync", "work", &["hStream"]),
    ("cuMemPrefetchBatchAsync_ptsz", "work", &["hStream"]),
    ("cuMemDiscardBatchAsync", "work", &["hStream"]),
    ("cuMemDiscardBatchAsync_ptsz", "work", &["hStream"]),
    ("cuMemDiscardAndPrefetchBatchAsync", "work", &["hStream"]),
    (
        "cuMemDiscardAndPrefetchBatchAsync_ptsz",
        "work",
        &["hStream"],
    ),
    ("cuMemMapArrayAsync", "work", &["hStream"]),
    ("cuMemMapArrayAsync_ptsz", "work", &["hStream"]),
    ("cuMemBatchDecompressAsync", "work", &["stream"]),
    ("cuMemBatchDecompressAsync_ptsz", "work", &["stream"]),
    ("cuStreamAttachMemAsync", "work", &["hStream"]),
    ("cuStreamAttachMemAsync_ptsz", "work", &["hStream"]),
    // Stream memory operations and external semaphores.
    ("cuStreamWaitValue32_v2", "work", &["stream"]),
    ("cuStreamWaitValue32_v2_ptsz", "work", &["stream"]),
    ("cuStreamWaitValue64_v2", "work", &["stream"]),
    ("cuStreamWaitValue64_v2_ptsz", "work", &["stream"]),
    ("cuStreamWriteValue32_v2", "work", &["stream"]),
    ("cuStreamWriteValue32_v2_ptsz", "work", &["stream"]),
    ("cuStreamWriteValue64_v2", "work", &["stream"]),
    ("cuStreamWriteValue64_v2_ptsz", "work", &["stream"]),
    ("cuStreamBatchMemOp_v2", "work", &["stream"]),
    ("cuStreamBatchMemOp_v2_ptsz", "work", &["stream"]),
    ("cuSignalExternalSemaphoresAsync", "work", &["stream"]),
    ("cuSignalExternalSemaphoresAsync_ptsz", "work", &["stream"]),
    ("cuWaitExternalSemaphoresAsync", "work", &["stream"]),
    ("cuWaitExternalSemaphoresAsync_ptsz", "work", &["stream"]),
    // Synchronous memory calls (footprints on the null stream), then memory and context calls
    // the trace keeps as comments.
    ("cuMemAlloc_v2", "alloc", &["dptr", "bytesize"]),
    ("cuMemAllocPitch_v2", "note", &[]),
    ("cuMemAllocManaged", "alloc", &["dptr", "bytesize"]),
    ("cuMemFree_v2", "free", &["dptr"]),
    ("cuMemAllocHost_v2", "alloc", &["pp", "bytesize"]),
    ("cuMemHostAlloc", "alloc", &["pp", "bytesize"]),
    ("cuMemFreeHost", "free", &["p"]),
    ("cuMemHostRegister_v2", "note", &[]),
    ("cuMemHostUnregister", "note", &[]),
    ("cuMemCreate", "note", &[]),
    ("cuMemRelease", "note", &[]),
    ("cuMemMap", "note", &[]),
    ("cuMemUnmap", "note", &[]),
    ("cuMemAddressReserve", "note", &[]),
    ("cuMemAddressFree", "note", &[]),
    ("cuMemPoolCreate", "note", &[]),
    ("cuMemPoolDestroy", "note", &[]),
    ("cuMemcpy", "copy_sync", &["dst", "src", "ByteCount"]),
    ("cuMemcpy_ptds", "copy_sync", &["dst", "src", "ByteCount"]),
    (
        "cuMemcpyHtoD_v2",
        "copy_sync",
        &["dstDevice", "srcHost", "ByteCount"],
    ),
    (
        "cuMemcpyHtoD_v2_ptds",
        "copy_sync",
        &["dstDevice", "srcHost", "ByteCount"],
    ),
    (
        "cuMemcpyDtoH_v2",
        "copy_sync",
        &["dstHost", "srcDevice", "ByteCount"],
    ),
    (
        "cuMemcpyDtoH_v2_ptds",
        "copy_sync",
        &["dstHost", "srcDevice", "ByteCount"],
    ),
    (
        "cuMemcpyDtoD_v2",
        "copy_sync",
        &["dstDevice", "srcDevice", "ByteCount"],
    ),
    (
        "cuMemcpyDtoD_v2_ptds",
        "copy_sync",
        &["dstDevice", "srcDevice", "ByteCount"],
    ),
    ("cuMemsetD8_v2", "fill_sync", &["dstDevice", "N"]),
    ("cuMemsetD8_v2_ptds", "fill_sync", &["dstDevice", "N"]),
    ("cuMemsetD16_v2", "fill_sync", &["dstDevice", "N"]),
    ("cuMemsetD16_v2_ptds", "fill_sync", &["dstDevice", "N"]),
    ("cuMemsetD32_v2", "fill_sync", &["dstDevice", "N"]),
    ("cuMemsetD32_v2_ptds", "fill_sync", &["dstDevice", "N"]),
    ("cuCtxSynchronize", "note", &[]),
    ("cuCtxSynchronize_v2", "note", &[]),
    ("cuCtxCreate_v4", "note", &[]),
    ("cuCtxDestroy_v2", "note", &[]),
    ("cuDevicePrimaryCtxRetain", "note", &[]),
    ("cuDevicePrimaryCtxRelease_v2", "note", &[]),
    ("cuDevicePrimaryCtxReset_v2", "note", &[]),
    // Unloading code: the recorder forgets the parameter sizes of the functions it knew.
    ("cuModuleUnload", "note", &[]),
    ("cuLibraryUnload", "note", &[]),
];

/// Fetches the pinned headers and generates the bindings' text.
pub(super) fn generate(root: &Path) -> Result<Generated, String> {
    let cupti_include = CUPTI_WHEEL.fetch(root)?.join(INCLUDE_DIR);
    let cuda_include = super::cuda::include_dir(root)?;
    let crt_include = CRT_WHEEL.fetch(root)?.join(INCLUDE_DIR);
    Ok(Generated {
        output: OUTPUT_FILE,
        text: generate_from(&[&cupti_include, &cuda_include, &crt_include])?,
    })
}

fn generate_from(include_dirs: &[&Path]) -> Result<String, String> {
    let clang = clang_version()?;
    let mut builder = common_builder(
        "cupti_bindings.h",
        // generated_cuda_meta.h's structs of old ABIs (cuMemcpy2D's CUDA_MEMCPY2D_v1) use types
        // cuda.h declares only for the driver's own build.
        "#define __CUDA_API_VERSION_INTERNAL\n#include <cupti_callbacks.h>\n#include <cupti_activity.h>\n\
         #include <cupti_driver_cbid.h>\n#include <generated_cuda_meta.h>\n",
    )?
    .allowlist_type(CBID_ENUM);
    for include_dir in include_dirs {
        builder = builder.clang_arg(format!("-I{}", include_dir.display()));
    }
    for function in FUNCTIONS.iter().chain(DRIVER_FUNCTIONS) {
        builder = builder.allowlist_function(function);
    }
    for ty in TYPES {
        builder = builder.allowlist_type(ty);
    }
    for (name, kind, _) in RECORDED_CALLS {
        if *kind != "note" {
            builder = builder.allowlist_type(format!("{name}_params"));
        }
    }
    let raw = builder
        .generate()
        .map_err(|e| format!("bindgen failed on the CUPTI headers: {e}"))?
        .to_string();
    let file = syn::parse_file(&raw).map_err(|e| format!("cannot parse bindgen's output: {e}"))?;
    let items = keep_recorded(file.items)?;
    let body = prettyplease::unparse(&syn::File {
        shebang: None,
        frontmatter: None,
        attrs: Vec::new(),
        items,
    });
    let mut text = format!(
        "// @generated by `cargo xtask bindgen`: do not edit by hand.\n\
         //\n\
         // CUPTI 13.0's callback API and the parameter structs of the recorded driver calls:\n\
         // cupti_callbacks.h, cupti_activity.h, cupti_driver_cbid.h and generated_cuda_meta.h from\n\
         // the PyPI wheel {}=={}; cuda.h from the driver bindings' wheel; crt/ from\n\
         // {}=={}. Parsed for {CLANG_TARGET} by bindgen 0.73 with libclang {clang}.\n\
         // The allow-list and the table of recorded calls live in xtask/src/bindgen/cupti.rs.\n\
         //\n\
         // Functions are not declared as extern items (nothing links libcupti): each is a pointer\n\
         // type `PFN_<name>`, listed in `cupti_functions!` for the loader.\n\n",
        CUPTI_WHEEL.package, CUPTI_WHEEL.version, CRT_WHEEL.package, CRT_WHEEL.version
    );
    text.push_str(&body);
    text.push('\n');
    text.push_str(&tables());
    Ok(text)
}

/// Turns CUPTI's functions into pointer types, and drops the callback ids of calls not
/// recorded; fails if a recorded call has no callback id.
fn keep_recorded(bindgen_items: Vec<syn::Item>) -> Result<Vec<syn::Item>, String> {
    let (bindgen_items, functions) = take_functions(bindgen_items)?;
    let mut items = Vec::new();
    let mut cbids = Vec::new();
    for item in bindgen_items {
        match item {
            syn::Item::Const(constant) if constant.ident.to_string().starts_with(CBID_PREFIX) => {
                let name = constant.ident.to_string();
                let call = &name[CBID_PREFIX.len()..];
                if RECORDED_CALLS
                    .iter()
                    .any(|(recorded, ..)| *recorded == call)
                {
                    cbids.push(call.to_string());
                    items.push(syn::Item::Const(constant));
                }
            }
            other => items.push(other),
        }
    }
    for (name, ..) in RECORDED_CALLS {
        if !cbids.iter().any(|cbid| cbid == name) {
            return Err(format!(
                "cupti_driver_cbid.h has no {CBID_PREFIX}{name}; fix RECORDED_CALLS"
            ));
        }
    }
    for (names, library) in [(FUNCTIONS, "libcupti"), (DRIVER_FUNCTIONS, "libcuda")] {
        for name in names {
            let function = functions
                .iter()
                .find(|f| f.sig.ident == name)
                .ok_or_else(|| format!("the headers do not declare {name}"))?;
            let doc =
                format!("`{name}` as the headers declare it, found by this name in {library}.");
            items.push(pointer_type(name, function, &doc)?);
        }
    }
    Ok(items)
}

/// `cupti_functions!`, `recorded_calls!` and `noted_calls!`, the tables the recorder expands.
fn tables() -> String {
    let mut text = String::from(
        "/// Calls `$callback!` with one `(name, c\"name\", PFN_name)` row per CUPTI function above.\n\
         macro_rules! cupti_functions {\n    ($callback:ident) => {\n        $callback! {\n",
    );
    for name in FUNCTIONS {
        let _ = writeln!(text, "            ({name}, c\"{name}\", PFN_{name}),");
    }
    text.push_str("        }\n    };\n}\npub(crate) use cupti_functions;\n\n");
    text.push_str(
        "/// Calls `$callback!` with one `(name, c\"name\", PFN_name)` row per driver function above.\n\
         macro_rules! driver_functions {\n    ($callback:ident) => {\n        $callback! {\n",
    );
    for name in DRIVER_FUNCTIONS {
        let _ = writeln!(text, "            ({name}, c\"{name}\", PFN_{name}),");
    }
    text.push_str("        }\n    };\n}\npub(crate) use driver_functions;\n\n");
    text.push_str(
        "/// Calls `$callback!` with one `(name, callback_id, params, kind, [fields])` row per recorded\n\
         /// driver call but the notes: the fields of `params` hold its stream and event handles\n\
         /// (xtask/src/bindgen/cupti.rs says what each kind takes).\n\
         macro_rules! recorded_calls {\n    ($callback:ident) => {\n        $callback! {\n",
    );
    for (name, kind, fields) in RECORDED_CALLS.iter().filter(|(_, kind, _)| *kind != "note") {
        let _ = writeln!(
            text,
            "            ({name}, {CBID_PREFIX}{name}, {name}_params, {kind}, [{}]),",
            fields.join(", ")
        );
    }
    text.push_str("        }\n    };\n}\npub(crate) use recorded_calls;\n\n");
    text.push_str(
        "/// Calls `$callback!` with one `(name, callback_id)` row per driver call the trace keeps as\n\
         /// a comment (memory and context calls).\n\
         macro_rules! noted_calls {\n    ($callback:ident) => {\n        $callback! {\n",
    );
    for (name, ..) in RECORDED_CALLS.iter().filter(|(_, kind, _)| *kind == "note") {
        let _ = writeln!(text, "            ({name}, {CBID_PREFIX}{name}),");
    }
    text.push_str("        }\n    };\n}\npub(crate) use noted_calls;\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_calls_are_listed_once_with_the_fields_their_kind_takes() {
        for (i, (name, kind, fields)) in RECORDED_CALLS.iter().enumerate() {
            assert!(
                !RECORDED_CALLS[..i].iter().any(|(other, ..)| other == name),
                "{name} listed twice"
            );
            let expected = match *kind {
                "note" => 0,
                "stream_create" | "event_record" | "stream_wait_event" | "work_each"
                | "fill_sync" | "alloc" | "free_async" => 2,
                "launch" | "copy_sync" | "fill" | "alloc_async" => 3,
                "copy" | "launch_extra" | "launch_config" => 4,
                _ => 1,
            };
            assert_eq!(fields.len(), expected, "{name} ({kind})");
        }
    }

    #[test]
    fn the_tables_name_every_function_and_call() {
        let text = tables();
        assert!(text.contains("(cuptiSubscribe, c\"cuptiSubscribe\", PFN_cuptiSubscribe),"));
        assert!(text.contains(
            "(cuLaunchKernelEx_ptsz, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, \
             cuLaunchKernelEx_ptsz_params, launch_config, [config, f, kernelParams, extra]),"
        ));
        assert!(text.contains(
            "(cuMemAlloc_v2, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, cuMemAlloc_v2_params, alloc, \
             [dptr, bytesize]),"
        ));
        assert!(text.contains("(cuCtxSynchronize, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize),"));
        assert!(
            text.contains("(cuFuncGetParamInfo, c\"cuFuncGetParamInfo\", PFN_cuFuncGetParamInfo),")
        );
        assert_eq!(
            text.matches("),\n").count(),
            FUNCTIONS.len() + DRIVER_FUNCTIONS.len() + RECORDED_CALLS.len()
        );
    }
}
