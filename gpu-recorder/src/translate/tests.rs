//! The translator's rules, each on the calls that show it: default streams, handles, failures,
//! destroys, stream capture, footprints and the end.

use super::*;

const CTX: u64 = 0xc0;

fn call(function: &'static str, kind: Kind, code: u32) -> Call {
    Call {
        function,
        kind,
        context: CTX,
        device: Some(1),
        thread: 7,
        outcome: Outcome::Returned(code),
        args: Vec::new(),
    }
}

fn on_thread(mut call: Call, thread: u64) -> Call {
    call.thread = thread;
    call
}

fn entered(mut call: Call) -> Call {
    call.outcome = Outcome::Entered;
    call
}

/// The lines for `calls`, trailing comments cut, comment lines kept.
fn translate(calls: &[Call]) -> Vec<String> {
    let mut translator = Translator::new();
    let mut out = String::new();
    for call in calls {
        translator.translate(call, &mut out);
    }
    out.lines()
        .map(|line| match line.split_once("  #") {
            Some((code, _)) if !line.starts_with('#') => code.to_string(),
            _ => line.to_string(),
        })
        .collect()
}

#[test]
fn the_null_stream_is_the_legacy_default_stream_declared_once_before_its_first_use() {
    let lines = translate(&[
        call("cuLaunchKernel", Kind::Work { stream: 0 }, 0),
        call("cuMemcpyAsync", Kind::Work { stream: 1 }, 0),
        call(
            "cuStreamSynchronize",
            Kind::StreamSynchronize { stream: 0 },
            0,
        ),
    ]);
    assert_eq!(
        lines,
        [
            "stream_default legacy.0xc0 1",
            "launch legacy.0xc0",
            "launch legacy.0xc0",
            "stream_synchronize legacy.0xc0",
        ]
    );
}

#[test]
fn per_thread_forms_and_the_per_thread_handle_name_each_threads_default_stream() {
    let lines = translate(&[
        call("cuLaunchKernel_ptsz", Kind::Work { stream: 0 }, 0),
        on_thread(call("cuLaunchKernel", Kind::Work { stream: 2 }, 0), 8),
        call("cuLaunchKernel", Kind::Work { stream: 2 }, 0),
        call("cuLaunchKernel_ptsz", Kind::Work { stream: 1 }, 0),
        call(
            "cuEventRecord_ptsz",
            Kind::EventRecord {
                event: 0xe,
                stream: 0,
            },
            0,
        ),
    ]);
    assert_eq!(
        lines,
        [
            "stream_default ptds.0xc0.7 1",
            "launch ptds.0xc0.7",
            "stream_default ptds.0xc0.8 1",
            "launch ptds.0xc0.8",
            "launch ptds.0xc0.7",
            "stream_default legacy.0xc0 1",
            "launch legacy.0xc0",
            "event_record 0xe ptds.0xc0.7",
        ]
    );
}

#[test]
fn created_streams_and_events_are_named_by_handle_on_the_current_device() {
    let lines = translate(&[
        call(
            "cuStreamCreate",
            Kind::StreamCreate {
                stream: 0x10,
                flags: 0,
            },
            0,
        ),
        call("cuEventCreate", Kind::EventCreate { event: 0x20 }, 0),
        call(
            "cuEventRecordWithFlags",
            Kind::EventRecord {
                event: 0x20,
                stream: 0x10,
            },
            0,
        ),
        call(
            "cuStreamWaitEvent",
            Kind::StreamWaitEvent {
                stream: 0x10,
                event: 0x20,
            },
            0,
        ),
        call("cuEventQuery", Kind::EventQuery { event: 0x20 }, 0),
        call(
            "cuEventSynchronize",
            Kind::EventSynchronize { event: 0x20 },
            0,
        ),
        call("cuStreamQuery", Kind::StreamQuery { stream: 0x10 }, 0),
    ]);
    assert_eq!(
        lines,
        [
            "stream_create 0x10 1",
            "event_create 0x20 1",
            "event_record 0x20 0x10",
            "stream_wait_event 0x10 0x20",
            "event_query 0x20",
            "event_synchronize 0x20",
            "stream_query 0x10",
        ]
    );
}

#[test]
fn a_failed_call_is_a_comment_and_not_ready_is_a_failure_only_outside_queries() {
    let lines = translate(&[
        call(
            "cuStreamCreate",
            Kind::StreamCreate {
                stream: 0,
                flags: 0,
            },
            2,
        ),
        call(
            "cuStreamQuery",
            Kind::StreamQuery { stream: 0x10 },
            NOT_READY,
        ),
        call("cuEventQuery", Kind::EventQuery { event: 0x20 }, NOT_READY),
        call(
            "cuStreamSynchronize",
            Kind::StreamSynchronize { stream: 0x10 },
            NOT_READY,
        ),
    ]);
    assert_eq!(
        lines,
        [
            "# failed with CUresult 2: cuStreamCreate ctx=0xc0 dev=1 tid=7 ret=2 stream=0x0",
            "stream_query 0x10",
            "event_query 0x20",
            "# failed with CUresult 600: cuStreamSynchronize ctx=0xc0 dev=1 tid=7 ret=600 \
             stream=0x10",
        ]
    );
}

#[test]
fn destroys_are_written_when_entered_and_a_failure_is_noted_after_them() {
    let destroy = call(
        "cuStreamDestroy_v2",
        Kind::StreamDestroy { stream: 0x10 },
        0,
    );
    let event_destroy = call("cuEventDestroy_v2", Kind::EventDestroy { event: 0x20 }, 0);
    let lines = translate(&[
        entered(destroy.clone()),
        destroy,
        entered(event_destroy.clone()),
        Call {
            outcome: Outcome::Returned(400),
            ..event_destroy
        },
    ]);
    assert_eq!(
        lines,
        [
            "stream_destroy 0x10",
            "event_destroy 0x20",
            "# the call above failed with CUresult 400: cuEventDestroy_v2 ctx=0xc0 dev=1 \
             tid=7 ret=400 event=0x20",
        ]
    );
}

#[test]
fn a_default_stream_destroy_is_written_only_once_the_driver_accepted_it() {
    let destroy = call("cuStreamDestroy_v2", Kind::StreamDestroy { stream: 0 }, 0);
    let refused = Call {
        outcome: Outcome::Returned(400),
        ..destroy.clone()
    };
    assert_eq!(
        translate(&[entered(destroy.clone()), refused]),
        [
            "# failed with CUresult 400: cuStreamDestroy_v2 ctx=0xc0 dev=1 tid=7 ret=400 \
          stream=0x0"
        ]
    );
    assert_eq!(
        translate(&[entered(destroy.clone()), destroy]),
        ["stream_default legacy.0xc0 1", "stream_destroy legacy.0xc0"]
    );
}

#[test]
fn captured_calls_are_comments_and_a_stream_joins_by_waiting_on_a_captured_event() {
    let (origin, joined, other) = (0x10, 0x11, 0x12);
    let (fork, join) = (0x20, 0x21);
    let lines = translate(&[
        call(
            "cuStreamBeginCapture_v2",
            Kind::BeginCapture { stream: origin },
            0,
        ),
        call("cuLaunchKernel", Kind::Work { stream: origin }, 0),
        call(
            "cuEventRecord",
            Kind::EventRecord {
                event: fork,
                stream: origin,
            },
            0,
        ),
        call(
            "cuStreamWaitEvent",
            Kind::StreamWaitEvent {
                stream: joined,
                event: fork,
            },
            0,
        ),
        call("cuLaunchKernel", Kind::Work { stream: joined }, 0),
        call("cuLaunchKernel", Kind::Work { stream: other }, 0),
        call(
            "cuEventRecord",
            Kind::EventRecord {
                event: join,
                stream: joined,
            },
            0,
        ),
        call(
            "cuEventSynchronize",
            Kind::EventSynchronize { event: join },
            0,
        ),
        call(
            "cuStreamWaitEvent",
            Kind::StreamWaitEvent {
                stream: origin,
                event: join,
            },
            0,
        ),
        call("cuStreamEndCapture", Kind::EndCapture { stream: origin }, 0),
        call("cuLaunchKernel", Kind::Work { stream: joined }, 0),
        call("cuGraphLaunch", Kind::Work { stream: other }, 0),
        call(
            "cuEventSynchronize",
            Kind::EventSynchronize { event: join },
            0,
        ),
    ]);
    assert_eq!(
        lines,
        [
            "# 0x10 begins capturing into a graph: its calls are captured, not run \
             (cuStreamBeginCapture_v2 tid=7)",
            "# captured: launch 0x10  (cuLaunchKernel tid=7)",
            "# captured: event_record 0x20 0x10  (cuEventRecord tid=7)",
            "# 0x11 joins the capture of 0x10: its calls are captured",
            "# captured: stream_wait_event 0x11 0x20  (cuStreamWaitEvent tid=7)",
            "# captured: launch 0x11  (cuLaunchKernel tid=7)",
            "launch 0x12",
            "# captured: event_record 0x21 0x11  (cuEventRecord tid=7)",
            "# captured: event_synchronize 0x21  (cuEventSynchronize tid=7)",
            "# captured: stream_wait_event 0x10 0x21  (cuStreamWaitEvent tid=7)",
            "# the capture of 0x10 ends (cuStreamEndCapture tid=7)",
            "launch 0x11",
            "launch 0x12",
            "event_synchronize 0x21",
        ]
    );
}

#[test]
fn an_event_re_recorded_outside_a_capture_is_real_again() {
    let lines = translate(&[
        call(
            "cuStreamBeginCapture",
            Kind::BeginCapture { stream: 0x10 },
            0,
        ),
        call(
            "cuEventRecord",
            Kind::EventRecord {
                event: 0x20,
                stream: 0x10,
            },
            0,
        ),
        call(
            "cuEventRecord",
            Kind::EventRecord {
                event: 0x20,
                stream: 0x11,
            },
            0,
        ),
        call(
            "cuStreamWaitEvent",
            Kind::StreamWaitEvent {
                stream: 0x12,
                event: 0x20,
            },
            0,
        ),
    ]);
    assert_eq!(
        lines[2..],
        ["event_record 0x20 0x11", "stream_wait_event 0x12 0x20"]
    );
}

#[test]
fn after_exit_every_call_is_a_comment() {
    let mut translator = Translator::new();
    let mut out = String::new();
    translator.translate(&call("cuMemAlloc_v2", Kind::Note, 0), &mut out);
    translator.exit(&mut out);
    translator.exit(&mut out);
    translator.translate(
        &entered(call(
            "cuStreamDestroy_v2",
            Kind::StreamDestroy { stream: 0x10 },
            0,
        )),
        &mut out,
    );
    assert_eq!(
        out,
        "# cuMemAlloc_v2 ctx=0xc0 dev=1 tid=7 ret=0\n\
         exit\n\
         # after exit: cuStreamDestroy_v2 ctx=0xc0 dev=1 tid=7 ret=enter stream=0x10\n"
    );
}

/// A `cuMemAlloc_v2` that returned `address`.
fn alloc(address: u64, bytes: u64) -> Call {
    call("cuMemAlloc_v2", Kind::Alloc { address, bytes }, 0)
}

fn launch(stream: u64, args: &[u64]) -> Call {
    Call {
        args: args.to_vec(),
        ..call(
            "cuLaunchKernel",
            Kind::Launch {
                stream,
                function: 0xf1,
            },
            0,
        )
    }
}

#[test]
fn a_launch_parameter_inside_an_allocation_is_read_write_of_the_whole_allocation() {
    let lines = translate(&[
        alloc(0x1000, 256),
        call(
            "cuMemAllocManaged",
            Kind::Alloc {
                address: 0x2000,
                bytes: 16,
            },
            0,
        ),
        // Inside the first (twice), just past the second, a plain number.
        launch(0x10, &[0x1080, 0x10ff, 0x2010, 7]),
        launch(0x10, &[0x2000, 0x1000]),
        launch(0x10, &[]),
    ]);
    assert_eq!(
        lines,
        [
            "mem_alloc 0x1000+256",
            "mem_alloc 0x2000+16",
            "launch 0x10 rw:0x1000+256",
            "launch 0x10 rw:0x2000+16 rw:0x1000+256",
            "launch 0x10",
        ]
    );
}

#[test]
fn copies_read_their_source_and_write_their_destination_and_fills_write() {
    let lines = translate(&[
        alloc(0x1000, 0x100),
        // A generic copy: each side inside an allocation seen (here the source).
        call(
            "cuMemcpyAsync",
            Kind::Copy {
                stream: 0x10,
                dst: 0x2000,
                src: 0x1000,
                bytes: 64,
            },
            0,
        ),
        call(
            "cuMemcpyPeerAsync",
            Kind::Copy {
                stream: 0x10,
                dst: 0x2000,
                src: 0x1000,
                bytes: 64,
            },
            0,
        ),
        call(
            "cuMemsetD32Async",
            Kind::Fill {
                stream: 0x10,
                dst: 0x1000,
                bytes: 16,
            },
            0,
        ),
        call(
            "cuMemcpyHtoD_v2",
            Kind::CopySync {
                dst: 0x1000,
                src: 0x7fff0000,
                bytes: 8,
            },
            0,
        ),
        // A copy to the host returns once done: the host waited for the null stream.
        call(
            "cuMemcpyDtoH_v2_ptds",
            Kind::CopySync {
                dst: 0x7fff0000,
                src: 0x1000,
                bytes: 8,
            },
            0,
        ),
        call(
            "cuMemsetD8_v2",
            Kind::FillSync {
                dst: 0x1000,
                bytes: 3,
            },
            0,
        ),
    ]);
    assert_eq!(
        lines,
        [
            "mem_alloc 0x1000+256",
            "copy 0x10 r:0x1000+64",
            "copy 0x10 r:0x1000+64 w:0x2000+64",
            "fill 0x10 w:0x1000+16",
            "stream_default legacy.0xc0 1",
            "copy legacy.0xc0 w:0x1000+8",
            "stream_default ptds.0xc0.7 1",
            "copy ptds.0xc0.7 r:0x1000+8",
            "stream_synchronize ptds.0xc0.7",
            "fill legacy.0xc0 w:0x1000+3",
        ]
    );
}

#[test]
fn frees_are_written_when_entered_with_the_stream_of_the_stream_ordered_forms() {
    let free = call("cuMemFree_v2", Kind::Free { address: 0x1000 }, 0);
    let free_async = call(
        "cuMemFreeAsync",
        Kind::FreeAsync {
            stream: 0x10,
            address: 0x2000,
        },
        0,
    );
    let lines = translate(&[
        alloc(0x1000, 256),
        call(
            "cuMemAllocAsync",
            Kind::AllocAsync {
                stream: 0x10,
                address: 0x2000,
                bytes: 64,
            },
            0,
        ),
        entered(free.clone()),
        free,
        entered(free_async.clone()),
        Call {
            outcome: Outcome::Returned(1),
            ..free_async
        },
        // Both are gone: their addresses are no longer footprints.
        launch(0x10, &[0x1000, 0x2000]),
        // A failed allocation, and a free of nothing, are comments or nothing.
        call(
            "cuMemAlloc_v2",
            Kind::Alloc {
                address: 0,
                bytes: 256,
            },
            2,
        ),
        entered(call("cuMemFree_v2", Kind::Free { address: 0 }, 0)),
    ]);
    assert_eq!(
        lines,
        [
            "mem_alloc 0x1000+256",
            "mem_alloc 0x2000+64 0x10",
            "mem_free 0x1000",
            "mem_free 0x2000 0x10",
            "# the call above failed with CUresult 1: cuMemFreeAsync ctx=0xc0 dev=1 tid=7 \
             ret=1 stream=0x10 addr=0x2000",
            "launch 0x10",
            "# failed with CUresult 2: cuMemAlloc_v2 ctx=0xc0 dev=1 tid=7 ret=2 bytes=256",
        ]
    );
}

#[test]
fn calls_recorded_without_footprints_are_written_as_before() {
    let lines = translate(&[
        call(
            "cuMemAlloc_v2",
            Kind::Alloc {
                address: 0,
                bytes: 0,
            },
            0,
        ),
        call(
            "cuMemcpyAsync",
            Kind::Copy {
                stream: 0x10,
                dst: 0,
                src: 0,
                bytes: 0,
            },
            0,
        ),
        call(
            "cuMemAllocAsync",
            Kind::AllocAsync {
                stream: 0x10,
                address: 0,
                bytes: 0,
            },
            0,
        ),
        call(
            "cuMemFreeAsync",
            Kind::FreeAsync {
                stream: 0x10,
                address: 0,
            },
            0,
        ),
        call("cuMemFree_v2", Kind::Free { address: 0 }, 0),
    ]);
    assert_eq!(
        lines,
        [
            "# cuMemAlloc_v2 ctx=0xc0 dev=1 tid=7 ret=0",
            "launch 0x10",
            "launch 0x10",
            "launch 0x10",
            "# cuMemFree_v2 ctx=0xc0 dev=1 tid=7 ret=0",
        ]
    );
}

#[test]
fn memory_calls_on_a_capturing_stream_are_captured() {
    let lines = translate(&[
        call(
            "cuStreamBeginCapture",
            Kind::BeginCapture { stream: 0x10 },
            0,
        ),
        call(
            "cuMemAllocAsync",
            Kind::AllocAsync {
                stream: 0x10,
                address: 0x3000,
                bytes: 8,
            },
            0,
        ),
        launch(0x10, &[0x3000]),
        entered(call(
            "cuMemFreeAsync",
            Kind::FreeAsync {
                stream: 0x10,
                address: 0x3000,
            },
            0,
        )),
    ]);
    assert_eq!(
        lines[1..],
        [
            "# captured: mem_alloc 0x3000+8 0x10  (cuMemAllocAsync tid=7)",
            "# captured: launch 0x10  (cuLaunchKernel tid=7)",
            "# captured: mem_free 0x3000 0x10  (cuMemFreeAsync tid=7)",
        ]
    );
}

#[test]
fn non_blocking_streams_are_declared_and_a_context_synchronize_waits_for_the_device() {
    let lines = translate(&[
        call(
            "cuStreamCreate",
            Kind::StreamCreate {
                stream: 0x10,
                flags: 1,
            },
            0,
        ),
        call(
            "cuStreamCreateWithPriority",
            Kind::StreamCreate {
                stream: 0x11,
                flags: 0,
            },
            0,
        ),
        call("cuCtxSynchronize", Kind::Note, 0),
        call("cuCtxSynchronize", Kind::Note, 1),
    ]);
    assert_eq!(
        lines,
        [
            "stream_create 0x10 1",
            "stream_kind 0x10 nonblocking",
            "stream_create 0x11 1",
            "device_synchronize 1",
            "# failed with CUresult 1: cuCtxSynchronize ctx=0xc0 dev=1 tid=7 ret=1",
        ]
    );
}

#[test]
fn a_generic_copy_waits_for_the_host_only_from_an_allocation_to_outside_them_all() {
    let copy = |dst, src| call("cuMemcpy", Kind::CopySync { dst, src, bytes: 4 }, 0);
    let lines = translate(&[
        alloc(0x1000, 256),
        copy(0x1010, 0x1000),
        copy(0x9000, 0x1000),
        copy(0x1000, 0x9000),
    ]);
    assert_eq!(
        lines,
        [
            "mem_alloc 0x1000+256",
            "stream_default legacy.0xc0 1",
            "copy legacy.0xc0 r:0x1000+4 w:0x1010+4",
            "copy legacy.0xc0 r:0x1000+4",
            "stream_synchronize legacy.0xc0",
            "copy legacy.0xc0 w:0x1000+4",
        ]
    );
}

#[test]
fn block_events_of_our_allocator_name_their_stream_after_the_block() {
    let lines = translate(&[
        call(
            "gpurt_block_alloc",
            Kind::BlockAlloc {
                stream: 0x10,
                address: 0x1000,
                bytes: 512,
            },
            0,
        ),
        call(
            "gpurt_block_use",
            Kind::BlockUse {
                stream: 0,
                address: 0x1000,
            },
            0,
        ),
        call(
            "gpurt_block_free",
            Kind::BlockFree {
                stream: 0x10,
                address: 0x1000,
            },
            0,
        ),
    ]);
    assert_eq!(
        lines,
        [
            "block_alloc gpurt 0x1000+512 0x10",
            "stream_default legacy.0xc0 1",
            "block_use gpurt 0x1000 legacy.0xc0",
            "block_free gpurt 0x1000 0x10",
        ]
    );
}

#[test]
fn freeing_an_allocation_forgets_the_blocks_cut_from_it() {
    let block = |address| {
        call(
            "gpurt_block_alloc",
            Kind::BlockAlloc {
                stream: 0x10,
                address,
                bytes: 16,
            },
            0,
        )
    };
    let lines = translate(&[
        alloc(0x1000, 0x200),
        block(0x1000),
        block(0x1100),
        launch(0x10, &[0x1104]),
        entered(call("cuMemFree_v2", Kind::Free { address: 0x1000 }, 0)),
        alloc(0x1000, 0x400),
        launch(0x10, &[0x1104]),
    ]);
    assert_eq!(lines[3], "launch 0x10 rw:0x1100+16");
    assert_eq!(lines.last().unwrap(), "launch 0x10 rw:0x1000+1024");
}

mod blocks;

/// Our runtime's announcement of the next launch of `function` on `stream`: its begin, then
/// each `(part, address, bytes)` (`part` `r`, `w` or `rw`).
fn announce(stream: u64, function: u64, ranges: &[(&'static str, u64, u64)]) -> Vec<Call> {
    let part = |name, address, bytes| {
        let kind = Kind::BlockAlloc {
            stream,
            address,
            bytes,
        };
        call(name, kind, 0)
    };
    let mut calls = vec![part("gpurt_footprint_begin", function, ranges.len() as u64)];
    for &(access, address, bytes) in ranges {
        let name = match access {
            "r" => "gpurt_footprint_r",
            "w" => "gpurt_footprint_w",
            _ => "gpurt_footprint_rw",
        };
        calls.push(part(name, address, bytes));
    }
    calls
}

#[test]
fn an_announced_footprint_replaces_the_parameters_of_the_next_launch_of_its_kernel_only() {
    let mut calls = vec![alloc(0x1000, 0x1000)];
    calls.extend(announce(
        0x10,
        0xf1,
        &[("r", 0x1100, 64), ("w", 0x1800, 32)],
    ));
    // Its launch's entry and return, then a launch with nothing announced.
    calls.push(entered(launch(0x10, &[0x1100, 0x1800])));
    calls.push(launch(0x10, &[0x1100, 0x1800]));
    calls.push(launch(0x10, &[0x1100]));
    let lines = translate(&calls);
    assert_eq!(
        lines,
        [
            "mem_alloc 0x1000+4096",
            "launch 0x10 r:0x1100+64 w:0x1800+32",
            "launch 0x10 rw:0x1000+4096",
        ]
    );
}

#[test]
fn a_stale_announcement_is_dropped_at_its_threads_next_stream_operation() {
    let mut calls = vec![alloc(0x1000, 0x1000)];
    // Announced, but a copy comes first (its launch never reached the driver): dropped.
    calls.extend(announce(0x10, 0xf1, &[("rw", 0x1100, 64)]));
    calls.push(call(
        "cuMemsetD8Async",
        Kind::Fill {
            stream: 0x10,
            dst: 0x1000,
            bytes: 4,
        },
        0,
    ));
    calls.push(launch(0x10, &[0x1100]));
    // Announced for another stream, or another function: not this launch's.
    calls.extend(announce(0x20, 0xf1, &[("rw", 0x1100, 64)]));
    calls.push(launch(0x10, &[0x1100]));
    calls.extend(announce(0x10, 0xf2, &[("rw", 0x1100, 64)]));
    calls.push(launch(0x10, &[0x1100]));
    // Another thread's launch leaves this thread's announcement be.
    calls.extend(announce(0x10, 0xf1, &[("w", 0x1100, 64)]));
    calls.push(on_thread(launch(0x10, &[0x1100]), 8));
    calls.push(launch(0x10, &[0x1100]));
    // A failed launch uses it up too.
    calls.extend(announce(0x10, 0xf1, &[("w", 0x1100, 64)]));
    calls.push(call(
        "cuLaunchKernel",
        Kind::Launch {
            stream: 0x10,
            function: 0xf1,
        },
        1,
    ));
    calls.push(launch(0x10, &[0x1100]));
    let lines: Vec<_> = translate(&calls)
        .into_iter()
        .filter(|line| line.starts_with("launch"))
        .collect();
    assert_eq!(
        lines,
        [
            "launch 0x10 rw:0x1000+4096",
            "launch 0x10 rw:0x1000+4096",
            "launch 0x10 rw:0x1000+4096",
            "launch 0x10 rw:0x1000+4096",
            "launch 0x10 w:0x1100+64",
            "launch 0x10 rw:0x1000+4096",
        ]
    );
}
