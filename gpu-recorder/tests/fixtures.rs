//! Recorded fixtures: the calls gpu-recorder saw in real programs on an H100
//! (`GPU_RECORDER_CALLS=1`, hw-results/2026-11-24-h100-89ca110-recorder), translated here and
//! checked with the checker: no defects, the objects alive at exit, default streams declared,
//! captured calls kept out, and for our own pipeline example the same calls its backend saw.
//! And footprints: the driver calls of seeded race programs (gpu-recorder/hw/races/, written
//! by hand as calls files) translate to traces in which the checker finds their races.

use std::collections::HashMap;
use std::path::PathBuf;

use gpu_core::token::{Checker, Finding, RaceKind, StreamingChecker, TraceObject, parse_trace};
use gpu_recorder::{Call, Translator};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The trace the recorder writes for a calls fixture, ended by `exit` as at a process's end.
fn translate(name: &str) -> String {
    translate_calls(name, &fixture(name))
}

/// The trace the recorder writes for `calls` (the text of a calls file), ended by `exit`.
fn translate_calls(name: &str, calls: &str) -> String {
    let mut translator = Translator::new();
    let mut trace = String::new();
    for (number, line) in calls.lines().enumerate() {
        let call: Call = line
            .parse()
            .unwrap_or_else(|e| panic!("{name}:{}: {e}", number + 1));
        translator.translate(&call, &mut trace);
    }
    translator.exit(&mut trace);
    trace
}

/// The lines of `calls` that do not start with `prefix`.
fn without(calls: &str, prefix: &str) -> String {
    calls
        .lines()
        .filter(|line| !line.starts_with(prefix))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// Parses and checks a translated trace; fails on a format error or any defect.
fn assert_clean(name: &str, trace: &str) {
    let parsed = parse_trace(trace).unwrap_or_else(|e| panic!("{name}: {e}"));
    let defects = parsed.check();
    assert!(
        defects.is_empty(),
        "{name}: {}",
        defects
            .iter()
            .map(|d| parsed.describe(d).to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The streams and the events the checker reports alive at exit.
fn alive_at_exit(trace: &str) -> (usize, usize) {
    let parsed = parse_trace(trace).unwrap();
    let mut checker = Checker::new();
    let (mut streams, mut events) = (0, 0);
    let mut count = |finding: Finding| {
        if let Finding::AliveAtExit { object, .. } = finding {
            match object {
                TraceObject::Stream(_) => streams += 1,
                TraceObject::Event(_) => events += 1,
            }
        }
    };
    for (position, op) in parsed.ops.iter().enumerate() {
        checker.step(position, op, &mut count);
    }
    checker.finish(&mut count);
    (streams, events)
}

/// The stream and event lines, names replaced by their order of first appearance per kind
/// (`s0`, `e0`, ...), default-stream declarations, `exit` and comments left out.
fn normalized(trace: &str) -> Vec<String> {
    let mut names: HashMap<(char, String), String> = HashMap::new();
    let mut counts: HashMap<char, usize> = HashMap::new();
    let mut lines = Vec::new();
    for line in trace.lines() {
        let code = line.split('#').next().unwrap_or("");
        let mut words = code.split_whitespace();
        let Some(verb) = words.next() else { continue };
        let kinds = match verb {
            "stream_default" | "exit" => continue,
            "stream_create" | "launch" => "sd",
            "event_create" => "ed",
            "stream_destroy" | "stream_synchronize" | "stream_query" => "s",
            "event_destroy" | "event_synchronize" | "event_query" => "e",
            "event_record" => "es",
            "stream_wait_event" => "se",
            other => panic!("unexpected line {other}"),
        };
        let mut row = vec![verb.to_string()];
        for (kind, word) in kinds.chars().zip(words) {
            if kind == 'd' {
                row.push(word.to_string());
                continue;
            }
            let name = names.entry((kind, word.to_string())).or_insert_with(|| {
                let count = counts.entry(kind).or_default();
                *count += 1;
                format!("{kind}{}", *count - 1)
            });
            row.push(name.clone());
        }
        lines.push(row.join(" "));
    }
    lines
}

fn count_lines(trace: &str, prefix: &str) -> usize {
    trace
        .lines()
        .filter(|line| line.starts_with(prefix))
        .count()
}

#[test]
fn the_calls_file_reproduces_the_trace_written_on_the_gpu() {
    assert_eq!(translate("variants.calls"), fixture("variants.trace"));
}

#[test]
fn variants_are_clean_with_one_stream_and_one_event_alive_at_exit() {
    let trace = translate("variants.calls");
    assert_clean("variants", &trace);
    // Both default streams (the null stream and cudaStreamPerThread), declared once each.
    assert_eq!(count_lines(&trace, "stream_default legacy."), 1);
    assert_eq!(count_lines(&trace, "stream_default ptds."), 1);
    // Everything captured (two launches, two records, two waits) stays out of the trace.
    assert_eq!(count_lines(&trace, "# captured: "), 6);
    // Work that ran: 4 launches on the first streams, 100 between the re-records, the Ex,
    // cooperative and host-function launches, 5 asynchronous memory calls, the spin, 3 graph
    // launches, and 4 threads x 51.
    assert_eq!(
        count_lines(&trace, "launch "),
        4 + 100 + 3 + 5 + 1 + 3 + 4 * 51
    );
    // Created, never destroyed: s1 and e1, alive at exit (the default streams are not).
    assert_eq!(alive_at_exit(&trace), (1, 1));
    assert_eq!(trace.lines().last(), Some("exit"));
}

#[test]
fn per_thread_default_streams_are_one_per_thread() {
    let trace = translate("variants_ptds.calls");
    assert_clean("variants_ptds", &trace);
    // The main thread and four workers; cudaStreamLegacy names the legacy stream.
    assert_eq!(count_lines(&trace, "stream_default ptds."), 5);
    assert_eq!(count_lines(&trace, "stream_default legacy."), 1);
    assert!(trace.contains("# cuLaunchKernel_ptsz tid="));
}

#[test]
fn the_pipeline_example_records_the_calls_its_backend_saw() {
    let recorded = translate("pipeline.calls");
    assert_clean("pipeline", &recorded);
    assert_eq!(alive_at_exit(&recorded), (0, 0));
    let backend = fixture("pipeline.backend.trace");
    let (recorded, backend) = (normalized(&recorded), normalized(&backend));
    assert_eq!(recorded.len(), 721);
    assert_eq!(recorded, backend);
}

#[test]
fn pytorch_with_cuda_graphs_is_clean_and_its_capture_stays_out() {
    let trace = translate("torch_graphs.calls");
    assert_clean("torch_graphs", &trace);
    assert!(count_lines(&trace, "# captured: launch ") > 0);
    assert!(trace.contains("begins capturing into a graph"));
    assert!(trace.contains("# the capture of "));
    assert!(trace.contains("launch legacy.") && trace.contains("# cuGraphLaunch tid="));
    // cuEventRecordWithFlags (the probe missed it) records the events PyTorch waits on.
    assert!(trace.contains("# cuEventRecordWithFlags tid="));
    // PyTorch's stream pool (128 streams) and its cached events live as long as the process.
    assert_eq!(alive_at_exit(&trace), (128, 58));
}

#[test]
fn pytorch_eager_and_triton_are_clean_with_pools_alive_at_exit() {
    let eager = translate("torch_eager.calls");
    assert_clean("torch_eager", &eager);
    assert_eq!(alive_at_exit(&eager), (128, 40));
    let triton = translate("triton.calls");
    assert_clean("triton", &triton);
    assert_eq!(alive_at_exit(&triton), (0, 0));
}

/// The races the checker reports in a translated trace: (kind, earlier line, later line,
/// first byte both touch), the lines 1-based; fails on any lifetime defect.
fn races(name: &str, trace: &str) -> Vec<(RaceKind, usize, usize, u64)> {
    let mut checker = StreamingChecker::new();
    let (mut races, mut defects) = (Vec::new(), Vec::new());
    checker
        .check_text(trace.as_bytes(), &mut |report| match report.finding() {
            Finding::Race(race) => races.push((
                race.kind,
                race.earlier.position,
                race.later.position,
                race.range.start,
            )),
            Finding::Defect(_) => defects.push(report.to_string()),
            Finding::AliveAtExit { .. } => {}
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    checker.finish(&mut |report| {
        if let Finding::Defect(_) = report.finding() {
            defects.push(report.to_string());
        }
    });
    assert_eq!(defects, Vec::<String>::new(), "{name}");
    races
}

/// The 1-based number of the first line of `trace` starting with `prefix`.
fn line_of(trace: &str, prefix: &str) -> usize {
    trace
        .lines()
        .position(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` in\n{trace}"))
        + 1
}

/// The 1-based number of the second line of `trace` starting with `prefix` (a block's reuse).
fn second_line_of(trace: &str, prefix: &str) -> usize {
    trace
        .lines()
        .enumerate()
        .filter(|(_, line)| line.starts_with(prefix))
        .map(|(index, _)| index + 1)
        .nth(1)
        .unwrap_or_else(|| panic!("no second `{prefix}` in\n{trace}"))
}

#[test]
fn the_seeded_c_pool_bug_recorded_from_driver_calls_is_a_race_on_the_reused_block() {
    // The driver calls of gpu-recorder/hw/races/seeded.cu's `c_pool_wrong_stream`: a 1 MiB
    // segment, its first 64 KiB block filled and scaled on stream A, freed into B's pool and
    // handed out again on B, whose fill races A's kernel. The pool itself makes no driver call.
    let trace = translate("c_pool_wrong_stream.calls");
    assert!(trace.contains("mem_alloc 0x7f0000000000+1048576  # cuMemAlloc_v2"));
    assert!(trace.contains("stream_kind 0xb nonblocking  # cuStreamCreate"));
    assert!(trace.contains("launch 0xa rw:0x7f0000000000+1048576  # cuLaunchKernel"));
    assert!(trace.contains("mem_free 0x7f0000000000  # cuMemFree_v2"));
    let kernel = line_of(&trace, "launch 0xa");
    let fill = line_of(&trace, "fill 0xb");
    assert_eq!(
        races("c_pool_wrong_stream", &trace),
        [(RaceKind::WriteWrite, kernel, fill, 0x7f00_0000_0000)],
        "{trace}"
    );
    // The fixed program fills another block on B; the kernel's footprint is, conservatively,
    // the whole segment, so the checker still reports its overlap with B's fill: at B's block,
    // not at the reused one. (Only a narrowed footprint, or the allocator's own `block_*`
    // events, would tell the twin clean.)
    let trace = translate("c_pool_wrong_stream.fixed.calls");
    let kernel = line_of(&trace, "launch 0xa");
    let fill = line_of(&trace, "fill 0xb");
    assert_eq!(
        races("c_pool_wrong_stream.fixed", &trace),
        [(RaceKind::WriteWrite, kernel, fill, 0x7f00_0001_0000)],
        "{trace}"
    );
}

#[test]
fn our_allocators_blocks_without_record_stream_are_a_reuse_race_and_with_it_clean() {
    // seeded's `runtime_no_foreign_mark` (gpu-recorder/hw/races/torch_seeded.py): PyTorch on our
    // allocator, x filled on the legacy stream, read by a kernel on a side stream, freed and
    // handed out again on the legacy stream; the block events come from our plug-in through
    // the recorder's hook, the kernels' footprints are the blocks their parameters point into.
    let trace = translate("runtime_no_foreign_mark.calls");
    assert!(
        trace.contains(
            "launch 0x20 rw:0x7f0000400000+4194304 rw:0x7f0000000000+4194304  # cuLaunchKernel"
        ),
        "{trace}"
    );
    let side_kernel = line_of(&trace, "launch 0x20 rw:");
    let reuse = second_line_of(&trace, "block_alloc gpurt 0x7f0000000000+");
    assert_eq!(
        races("runtime_no_foreign_mark", &trace),
        [(RaceKind::Reuse, side_kernel, reuse, 0x7f00_0000_0000)],
        "{trace}"
    );
    // With record_stream (our `mark_used_on_foreign_stream`): the reuse waits for the side.
    let trace = translate("runtime_no_foreign_mark.fixed.calls");
    assert!(trace.contains("block_use gpurt 0x7f0000000000 0x20"));
    assert_eq!(races("runtime_no_foreign_mark.fixed", &trace), []);
}

#[test]
fn a_stream_ordered_free_raced_by_another_streams_kernels_is_found_and_its_fix_is_clean() {
    // seeded's `async_free_raced`: x from cudaMallocAsync on s1, read by two kernels on s2,
    // freed on s1 with no event from s2 (the fix records one and waits for it).
    let trace = translate("async_free_raced.calls");
    assert!(trace.contains("mem_alloc 0x7f0000200000+65536 0xa  # cuMemAllocAsync"));
    assert!(trace.contains("mem_free 0x7f0000200000 0xa  # cuMemFreeAsync"));
    let free = line_of(&trace, "mem_free 0x7f0000200000 0xa");
    // The last use before the free: the second kernel, which also writes `out`.
    let consume = line_of(
        &trace,
        "launch 0xb rw:0x7f0000200000+65536 rw:0x7f0000100000+65536",
    );
    assert_eq!(
        races("async_free_raced", &trace),
        [(RaceKind::FreeWhileInUse, consume, free, 0x7f00_0020_0000)],
        "{trace}"
    );
    let trace = translate("async_free_raced.fixed.calls");
    assert_eq!(races("async_free_raced.fixed", &trace), []);
}

#[test]
fn a_launch_missing_its_async_dependency_races_the_one_before_and_the_fix_is_clean() {
    // seeded's `mlir_missing_async_dependency`: produce on t1, consume on t2 without the event
    // between them; the result read back with a synchronous copy after both streams' waits.
    let trace = translate("mlir_missing_async_dependency.calls");
    assert!(trace.contains("copy legacy.0x5555 r:0x7f000001fffc+4  # cuMemcpyDtoH_v2"));
    assert!(trace.contains("stream_synchronize legacy.0x5555  # cuMemcpyDtoH_v2"));
    let produce = line_of(&trace, "launch 0xa");
    let consume = line_of(&trace, "launch 0xb");
    assert_eq!(
        races("mlir_missing_async_dependency", &trace),
        [(RaceKind::WriteWrite, produce, consume, 0x7f00_0000_0000)],
        "{trace}"
    );
    let trace = translate("mlir_missing_async_dependency.fixed.calls");
    assert_eq!(races("mlir_missing_async_dependency.fixed", &trace), []);
}

#[test]
fn the_c_pools_nvtx_regions_narrow_its_kernel_so_the_bug_is_found_and_the_fix_is_clean() {
    // seeded's `c_pool_wrong_stream` as it runs now: its blocks registered as NVTX regions
    // (the recorder is the NVTX injection library), so the kernel's footprint is its block.
    let trace = translate("c_pool_wrong_stream.nvtx.calls");
    assert!(trace.contains("launch 0xa rw:0x7f0000000000+65536  # cuLaunchKernel"));
    let kernel = line_of(&trace, "launch 0xa");
    let fill = line_of(&trace, "fill 0xb");
    assert_eq!(
        races("c_pool_wrong_stream.nvtx", &trace),
        [(RaceKind::WriteWrite, kernel, fill, 0x7f00_0000_0000)],
        "{trace}"
    );
    let trace = translate("c_pool_wrong_stream.fixed.nvtx.calls");
    assert_eq!(
        races("c_pool_wrong_stream.fixed.nvtx", &trace),
        [],
        "{trace}"
    );
}

#[test]
fn the_runtimes_buffers_narrow_kernels_to_them_so_two_streams_on_one_segment_do_not_race() {
    // A Rust program on our runtime over the CUDA backend, written by hand as the calls the
    // recorder sees: two 64 KiB buffers carved from one 2 MiB segment (the backend's
    // note_buffer: `gpurt_region`), one written on stream A, the other on B; then A's buffer
    // freed and handed out again on B, which the runtime orders with an event of A waited for.
    let calls = fixture("runtime_two_buffers.calls");
    let trace = translate_calls("runtime_two_buffers", &calls);
    assert!(trace.contains("launch 0xa rw:0x7f0000000000+65536  # cuLaunchKernel"));
    assert!(trace.contains("launch 0xb rw:0x7f0000010000+65536  # cuLaunchKernel"));
    assert!(trace.contains("launch 0xb rw:0x7f0000000000+4096  # cuLaunchKernel"));
    assert_eq!(races("runtime_two_buffers", &trace), [], "{trace}");
    // Without the buffers (before the backend reported them) each kernel is the whole
    // segment: a false race.
    let whole = without(&calls, "gpurt_region_");
    let trace = translate_calls("runtime_two_buffers.whole", &whole);
    let (a, b) = (line_of(&trace, "launch 0xa"), line_of(&trace, "launch 0xb"));
    assert_eq!(
        races("runtime_two_buffers.whole", &trace),
        [(RaceKind::WriteWrite, a, b, 0x7f00_0000_0000)],
        "{trace}"
    );
    // A real missing wait is still found: B reusing A's buffer without waiting for A.
    let unordered = without(&calls, "cuStreamWaitEvent");
    let trace = translate_calls("runtime_two_buffers.unordered", &unordered);
    let (a, reuse) = (
        line_of(&trace, "launch 0xa"),
        line_of(&trace, "launch 0xb rw:0x7f0000000000+4096"),
    );
    assert_eq!(
        races("runtime_two_buffers.unordered", &trace),
        [(RaceKind::WriteWrite, a, reuse, 0x7f00_0000_0000)],
        "{trace}"
    );
}

#[test]
fn the_runtimes_launch_footprints_keep_chunks_of_one_buffer_on_two_streams_apart() {
    // examples/pipeline.rs's pattern on our runtime over the CUDA backend, by hand: chunk 0 of
    // two 32 MiB buffers copied and then computed on stream A, chunk 1 on stream B. The
    // backend announces each kernel's exact footprint (`gpurt_footprint_*`) before its
    // launch.
    let calls = fixture("runtime_pipeline_chunks.calls");
    let trace = translate_calls("runtime_pipeline_chunks", &calls);
    assert!(
        trace.contains("launch 0xa r:0x7f0000000000+2097152 rw:0x7f0002000000+2097152  #"),
        "{trace}"
    );
    assert!(
        trace.contains("launch 0xb r:0x7f0000200000+2097152 rw:0x7f0002200000+2097152  #"),
        "{trace}"
    );
    assert_eq!(races("runtime_pipeline_chunks", &trace), [], "{trace}");
    // Without them (before issue 25) each kernel is both whole buffers: chunk 1's copy on B
    // races with chunk 0's kernel on A.
    let whole = without(&calls, "gpurt_footprint_");
    let trace = translate_calls("runtime_pipeline_chunks.whole", &whole);
    let (kernel, copy) = (line_of(&trace, "launch 0xa"), line_of(&trace, "copy 0xb"));
    let found = races("runtime_pipeline_chunks.whole", &trace);
    assert!(
        found.iter().any(|&(_, a, b, _)| (a, b) == (kernel, copy)),
        "{found:?}\n{trace}"
    );
}

#[test]
fn pytorchs_own_blocks_without_record_stream_are_a_reuse_race_and_with_it_clean() {
    // seeded's `torch_no_record_stream` on PyTorch's caching allocator, its blocks from the
    // recorder's tracker shim: x's block is handed out again on the legacy stream while the
    // side stream's kernel may still read it.
    let trace = translate("torch_no_record_stream.torch.calls");
    let side_kernel = line_of(&trace, "launch 0x20 rw:");
    let reuse = second_line_of(&trace, "block_alloc torch 0x7f0000000000+");
    assert_eq!(
        races("torch_no_record_stream.torch", &trace),
        [(RaceKind::Reuse, side_kernel, reuse, 0x7f00_0000_0000)],
        "{trace}"
    );
    // With record_stream: the event PyTorch records on the side stream for the freed block is
    // its use there, and the reuse waits for the side stream's work.
    let trace = translate("torch_no_record_stream.fixed.torch.calls");
    assert!(
        trace.contains("block_use torch 0x7f0000000000 0x20  # torch_block_use"),
        "{trace}"
    );
    assert_eq!(
        races("torch_no_record_stream.fixed.torch", &trace),
        [],
        "{trace}"
    );
}

#[test]
fn a_missing_wait_stream_is_found_and_the_read_back_after_cuda_device_synchronize_is_clean() {
    // seeded's `torch_no_wait_stream`: x written on the legacy stream, reduced on the side
    // stream (a launch's parameters count as read-write: a write/write race); the result is
    // read back on the legacy stream after torch.cuda.synchronize() (cuCtxSynchronize_v2 in
    // CUDA 13), which orders it after the side stream's kernel.
    let trace = translate("torch_no_wait_stream.torch.calls");
    assert!(trace.contains("device_synchronize 0  # cuCtxSynchronize_v2"));
    let write = line_of(&trace, "launch legacy.0x5555 rw:");
    let read = line_of(&trace, "launch 0x20 rw:");
    assert_eq!(
        races("torch_no_wait_stream.torch", &trace),
        [(RaceKind::WriteWrite, write, read, 0x7f00_0000_0000)],
        "{trace}"
    );
    let trace = translate("torch_no_wait_stream.fixed.torch.calls");
    assert_eq!(
        races("torch_no_wait_stream.fixed.torch", &trace),
        [],
        "{trace}"
    );
}
