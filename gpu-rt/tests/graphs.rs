//! Graphs of device work (issue 24) on the host backend: replays give what the same operations
//! give one after another (random programs against a plain model), tokens order replays like
//! any operation, updates in place change later replays only, and every refused recording,
//! update or replay, and a fault at every graph call of the backend, changes nothing and
//! leaks nothing.

mod common;
mod graph_programs;

use graph_programs::{Op, WORDS, assert_refused, op, words};

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::graph::NodeId;
use gpu_core::backend::{FillValue, LaunchDims};
use gpu_core::token::TraceOp;
use gpu_core::token::UnwaitedKind;
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::recording::RecordingBackend;
use gpu_rt::runtime::{Arg, Runtime, RuntimeConfig};
use proptest::prelude::*;
use std::sync::Arc;

const D0: DeviceId = DeviceId(0);

fn runtime(devices: usize) -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(devices))).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Each node runs after the earlier nodes that touch one of its buffers (and after random
    /// others): every replay leaves the buffers as the plain model leaves its vectors, whatever
    /// they held before, and a replay after another sees the first one's results; the same
    /// operations streamed with tokens along the same edges leave the same results.
    #[test]
    fn replays_give_what_the_operations_give_in_order(
        program in proptest::collection::vec((op(4), any::<u64>()), 1..24)
    ) {
        let rt = runtime(1);
        let buffers: Vec<_> =
            (0..4).map(|_| rt.alloc(D0, MemoryKind::Device, WORDS * 4).unwrap()).collect();
        let fill = rt.kernel(D0, "fill_u32").unwrap();
        let mut recorder = rt.record_graph(D0).unwrap();
        let mut nodes: Vec<(NodeId, Vec<usize>)> = Vec::new();
        let mut edges: Vec<Vec<usize>> = Vec::new();
        for (op, extra) in &program {
            let touched = op.operands();
            let mut after: Vec<NodeId> = nodes
                .iter()
                .enumerate()
                .filter(|(i, (_, theirs))| {
                    theirs.iter().any(|b| touched.contains(b)) || extra >> (i % 64) & 1 == 1
                })
                .map(|(_, (node, _))| *node)
                .collect();
            after.reverse();
            let node = match *op {
                Op::Fill { dst, value } => {
                    recorder.fill(buffers[dst].all(), FillValue::U32(value), &after)
                }
                Op::Copy { dst, src } => recorder.copy(buffers[dst].all(), buffers[src].all(), &after),
                Op::Kernel { dst, value, count } => {
                    let args = [Arg::Span(buffers[dst].all()), Arg::U32(value), Arg::U64(count as u64)];
                    // SAFETY: a library kernel, whose reach the runtime checks.
                    unsafe { recorder.launch(&fill, LaunchDims::linear(1, 64), &args, &after) }
                }
            }.unwrap();
            edges.push(after.iter().map(|node| node.index()).collect::<Vec<usize>>());
            nodes.push((node, touched));
        }
        let graph = recorder.instantiate().unwrap();
        let mut model: Vec<Vec<u32>> = (0..4).map(|b| vec![b as u32 + 100; WORDS]).collect();
        let mut filled: Vec<_> = buffers
            .iter()
            .zip(100..)
            .map(|(buffer, value)| {
                rt.fill_elements(D0, buffer.all(), FillValue::U32(value), &mut vec![]).unwrap()
            })
            .collect();
        for _ in 0..2 {
            let replay = graph.launch(&mut filled).unwrap();
            rt.wait(replay).unwrap();
            program.iter().for_each(|(op, _)| op.apply(&mut model));
            for (buffer, expected) in buffers.iter().zip(&model) {
                prop_assert_eq!(&words(&rt, buffer), expected);
            }
        }
        drop(graph);
        prop_assert_eq!(rt.backend().stats().graphs, 0);

        // Streamed: the same operations through the runtime's calls, each after exactly the
        // tokens of its graph edges (forked where a node has several dependents), from the
        // model's starting values again: the same results.
        let mut model: Vec<Vec<u32>> = (0..4).map(|b| vec![b as u32 + 100; WORDS]).collect();
        for (buffer, value) in buffers.iter().zip(100..) {
            rt.wait(rt.fill_elements(D0, buffer.all(), FillValue::U32(value), &mut vec![]).unwrap()).unwrap();
        }
        let mut dependents = vec![0usize; program.len()];
        edges.iter().flatten().for_each(|&dep| dependents[dep] += 1);
        let mut branches: Vec<Vec<gpu_core::token::Token>> = Vec::new();
        let mut ends = Vec::new();
        for ((op, _), deps) in program.iter().zip(&edges) {
            let mut after: Vec<_> = deps.iter().map(|&dep| branches[dep].pop().unwrap()).collect();
            let token = match *op {
                Op::Fill { dst, value } => {
                    rt.fill_elements(D0, buffers[dst].all(), FillValue::U32(value), &mut after)
                }
                Op::Copy { dst, src } => rt.copy(D0, buffers[dst].all(), buffers[src].all(), &mut after),
                Op::Kernel { dst, value, count } => {
                    let args = [Arg::Span(buffers[dst].all()), Arg::U32(value), Arg::U64(count as u64)];
                    // SAFETY: a library kernel, whose reach the runtime checks.
                    unsafe { fill.launch(LaunchDims::linear(1, 64), &args, &mut after) }
                }
            }.unwrap();
            branches.push(match dependents[branches.len()] {
                0 => {
                    ends.push(token);
                    Vec::new()
                }
                1 => vec![token],
                n => rt.fork(token, n).unwrap(),
            });
        }
        for end in ends {
            rt.wait(end).unwrap();
        }
        program.iter().for_each(|(op, _)| op.apply(&mut model));
        for (buffer, expected) in buffers.iter().zip(&model) {
            prop_assert_eq!(&words(&rt, buffer), expected);
        }
    }
}

#[test]
fn a_replay_runs_after_its_tokens_and_before_what_waits_for_it() {
    let rt = runtime(1);
    let (a, b) = (
        rt.alloc(D0, MemoryKind::Device, 256).unwrap(),
        rt.alloc(D0, MemoryKind::Device, 256).unwrap(),
    );
    let mut recorder = rt.record_graph(D0).unwrap();
    recorder.copy(b.all(), a.all(), &[]).unwrap();
    let graph = recorder.instantiate().unwrap();
    for round in 0..20u8 {
        // The upload and the replay land on whatever streams the planner picks; the token
        // orders them.
        let uploaded = rt.upload(D0, a.all(), &[round; 256], &mut vec![]).unwrap();
        let replay = graph.launch(&mut vec![uploaded]).unwrap();
        let mut out = [0u8; 256];
        rt.download(D0, &mut out, b.all(), &mut vec![replay])
            .unwrap();
        assert_eq!(out, [round; 256]);
    }
    // Many replays in flight at once, each after the last.
    let mut last = vec![];
    for _ in 0..50 {
        last = vec![graph.launch(&mut last).unwrap()];
    }
    rt.wait(last.pop().unwrap()).unwrap();
    assert_eq!(
        rt.backend().stats().graphs,
        1,
        "one instantiation for every replay"
    );
}

#[test]
fn an_update_changes_later_replays_only_and_keeps_its_kind() {
    let rt = runtime(1);
    let (a, b) = (
        rt.alloc(D0, MemoryKind::Device, 64).unwrap(),
        rt.alloc(D0, MemoryKind::Device, 64).unwrap(),
    );
    let fill = rt.kernel(D0, "fill_u32").unwrap();
    let mut recorder = rt.record_graph(D0).unwrap();
    let args = [Arg::Span(a.all()), Arg::U32(1), Arg::U64(16)];
    // SAFETY: a library kernel, whose reach the runtime checks.
    let launch = unsafe { recorder.launch(&fill, LaunchDims::linear(1, 16), &args, &[]) }.unwrap();
    let fill_node = recorder
        .fill(b.all(), FillValue::U32(5), &[launch])
        .unwrap();
    let mut graph = recorder.instantiate().unwrap();
    let first = graph.launch(&mut vec![]).unwrap();
    let args = [Arg::Span(b.all()), Arg::U32(2), Arg::U64(8)];
    // SAFETY: as above.
    unsafe { graph.set_launch(launch, &fill, LaunchDims::linear(1, 8), &args) }.unwrap();
    graph
        .set_fill(fill_node, a.all(), FillValue::U32(6))
        .unwrap();
    rt.wait(first).unwrap();
    assert_eq!((words(&rt, &a), words(&rt, &b)), (vec![1; 16], vec![5; 16]));
    rt.wait(graph.launch(&mut vec![]).unwrap()).unwrap();
    let mut expected_b = vec![5; 16];
    expected_b[..8].fill(2);
    assert_eq!((words(&rt, &a), words(&rt, &b)), (vec![6; 16], expected_b));

    // Another kind, an unknown node, a reach past the span: refused, and the graph unchanged.
    let kind = graph.set_copy(fill_node, a.all(), b.all()).unwrap_err();
    assert!(matches!(
        kind,
        Error::GraphNodeKind {
            node: 1,
            recorded: "fill",
            given: "copy"
        }
    ));
    let unknown = graph.set_fill(NodeId(2), a.all(), FillValue::U8(0));
    assert!(matches!(
        unknown,
        Err(Error::UnknownGraphNode { node: 2, nodes: 2 })
    ));
    let too_far = [Arg::Span(b.all()), Arg::U32(3), Arg::U64(17)];
    // SAFETY: refused before anything is kept: the runtime checks the library kernel's reach.
    let reach = unsafe { graph.set_launch(launch, &fill, LaunchDims::linear(1, 32), &too_far) };
    assert!(matches!(reach, Err(Error::KernelReach { .. })));
    let cleared = rt
        .fill_elements(D0, b.all(), FillValue::U32(0), &mut vec![])
        .unwrap();
    rt.wait(graph.launch(&mut vec![cleared]).unwrap()).unwrap();
    let mut expected_b = vec![0; 16];
    expected_b[..8].fill(2);
    assert_eq!((words(&rt, &a), words(&rt, &b)), (vec![6; 16], expected_b));
}

#[test]
fn refused_recordings_leave_the_recorder_as_it_was() {
    let rt = runtime(2);
    let a = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let elsewhere = rt.alloc(DeviceId(1), MemoryKind::Device, 64).unwrap();
    let other_fill = rt.kernel(DeviceId(1), "fill_u32").unwrap();
    let mut recorder = rt.record_graph(D0).unwrap();
    let first = recorder
        .fill(a.span(0, 32).unwrap(), FillValue::U8(1), &[])
        .unwrap();
    let refusals = [
        recorder.fill(a.span(0, 6).unwrap(), FillValue::U32(1), &[]),
        recorder.fill(elsewhere.all(), FillValue::U8(1), &[]),
        recorder.copy(a.span(0, 32).unwrap(), a.span(16, 32).unwrap(), &[]),
        recorder.copy(a.span(0, 32).unwrap(), a.span(32, 16).unwrap(), &[]),
        recorder.fill(a.all(), FillValue::U8(1), &[first, NodeId(7)]),
        // SAFETY: refused before anything is kept (the kernel is another device's).
        unsafe {
            recorder.launch(
                &other_fill,
                LaunchDims::linear(1, 1),
                &[Arg::Span(a.all()), Arg::U32(0), Arg::U64(1)],
                &[],
            )
        },
    ];
    assert_refused!(
        refusals,
        [
            Error::OutOfBounds { .. },
            Error::WrongDevice { .. },
            Error::CopyOverlap { .. },
            Error::OutOfBounds { .. },
            Error::UnknownGraphNode { node: 7, nodes: 1 },
            Error::WrongDevice { .. },
        ]
    );
    assert_eq!(recorder.len(), 1);
    let graph = recorder.instantiate().unwrap();
    rt.wait(graph.launch(&mut vec![]).unwrap()).unwrap();
    assert_eq!(words(&rt, &a)[..8], [0x0101_0101; 8]);
}

#[test]
fn a_fault_at_each_graph_call_leaves_nothing_behind() {
    let rt = runtime(1);
    let a = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let injected = |result: Result<(), Error>| {
        let error = result.unwrap_err();
        assert!(
            matches!(&error, Error::Driver(d) if d.name == "HOST_INJECTED_FAULT"),
            "{error}"
        );
    };
    let record = || {
        let mut recorder = rt.record_graph(D0).unwrap();
        recorder.fill(a.all(), FillValue::U8(9), &[]).unwrap();
        recorder
    };
    rt.backend().fail_nth(CallKind::GraphInstantiate, 1);
    injected(record().instantiate().map(drop));
    assert_eq!(rt.backend().stats().graphs, 0);

    let mut graph = record().instantiate().unwrap();
    rt.backend().fail_nth(CallKind::GraphLaunch, 1);
    let logged = rt.backend().work_log().len();
    injected(graph.launch(&mut vec![]).map(drop));
    assert_eq!(
        rt.backend().work_log().len(),
        logged,
        "the failed replay queued nothing"
    );
    rt.backend().fail_nth(CallKind::GraphSetNode, 1);
    injected(graph.set_fill(NodeId(0), a.all(), FillValue::U8(3)));
    rt.wait(graph.launch(&mut vec![]).unwrap()).unwrap();
    assert_eq!(
        words(&rt, &a),
        vec![0x0909_0909; 16],
        "the failed update changed nothing"
    );
    rt.backend().fail_nth(CallKind::GraphDestroy, 1);
    injected(graph.destroy());
    // The destroy that failed left the graph alive in the backend, as a failed free leaves
    // its memory: the caller learns of it, and the backend still counts it.
    assert_eq!(rt.backend().stats().graphs, 1);
    drop(a);
    let report = rt.shutdown().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // The failed replay's token, given up by the runtime as every failed operation's is.
    let unwaited = &report.program.unwaited;
    assert!(
        unwaited.len() == 1 && unwaited[0].kind == UnwaitedKind::Discarded,
        "{unwaited:?}"
    );
}

#[test]
fn a_reset_makes_the_graph_stale() {
    let rt = runtime(1);
    let a = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let mut recorder = rt.record_graph(D0).unwrap();
    recorder.fill(a.all(), FillValue::U8(1), &[]).unwrap();
    let graph = recorder.instantiate().unwrap();
    rt.reset_device(D0).unwrap();
    assert_eq!(
        rt.backend().stats().graphs,
        0,
        "the reset forgot the backend's graph"
    );
    let stale = graph.launch(&mut vec![]).unwrap_err();
    assert_eq!(
        stale,
        Error::StaleAfterReset {
            device: D0,
            what: "graph"
        }
    );
    assert_eq!(graph.destroy(), Ok(()), "nothing left to destroy");
}

/// Replays on device 1, interleaved with stream work on both devices through the recording
/// backend: each replay is one stream operation in the trace, and the trace has no defect.
#[test]
fn replays_are_one_stream_operation_each_in_a_clean_trace() {
    let backend = Arc::new(RecordingBackend::new(HostBackend::new(
        HostConfig::with_devices(2),
    )));
    let rt = Runtime::shared(Arc::clone(&backend), RuntimeConfig::default()).unwrap();
    let d1 = DeviceId(1);
    let (a, b) = (
        rt.alloc(d1, MemoryKind::Device, 64).unwrap(),
        rt.alloc(d1, MemoryKind::Device, 64).unwrap(),
    );
    let elsewhere = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let mut recorder = rt.record_graph(d1).unwrap();
    let fill = recorder.fill(a.all(), FillValue::U16(7), &[]).unwrap();
    let copy = recorder.copy(b.all(), a.all(), &[fill]).unwrap();
    recorder.fill(a.all(), FillValue::U8(1), &[copy]).unwrap();
    let graph = recorder.instantiate().unwrap();
    let launches_before = backend.trace().len();
    let mut last = Vec::new();
    for _ in 0..5 {
        let other = rt.fill(D0, elsewhere.all(), 3, &mut vec![]).unwrap();
        last = vec![graph.launch(&mut last).unwrap()];
        rt.wait(other).unwrap();
    }
    rt.wait(last.pop().unwrap()).unwrap();
    let on_device_1 = backend.trace()[launches_before..]
        .iter()
        .filter(|op| matches!(op, TraceOp::Launch { device: Some(d), .. } if *d == d1))
        .count();
    assert_eq!(
        on_device_1, 5,
        "each replay of three nodes is one operation in the trace"
    );
    assert_eq!(words(&rt, &b), vec![0x0007_0007; 16]);
    drop(graph);
    drop((a, b, elsewhere));
    rt.shutdown().unwrap();
    assert!(backend.defects().is_empty(), "{:?}", backend.defects());
}

/// A buffer a replay still writes (three nodes on it, noted once per replay) is not handed to
/// another stream before the replay has finished, though the graph and the buffer were dropped:
/// as a plain launch's buffer (`runtime_memory.rs`). The buffer fills a segment of its own, so
/// the only block the allocator could hand out without growing is the one still in use.
#[test]
fn a_buffer_a_replay_still_uses_is_reused_only_after_the_replay() {
    const BLOCK: usize = 20 << 20;
    let backend = HostBackend::new(HostConfig::with_devices(1));
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    backend.register_kernel("gated_write", move |ctx, _| {
        release_rx.lock().unwrap().recv().ok();
        ctx.view::<u32>(ctx.arg_ptr(0)?, 1)?.set(0, 0xdead)
    });
    let rt = Runtime::new(backend).unwrap();
    let first = rt.alloc(D0, MemoryKind::Device, BLOCK).unwrap();
    let address = first.address();
    let gated = rt.kernel(D0, "gated_write").unwrap();
    let mut recorder = rt.record_graph(D0).unwrap();
    let a = recorder.fill(first.all(), FillValue::U8(1), &[]).unwrap();
    let b = recorder.fill(first.all(), FillValue::U8(2), &[a]).unwrap();
    // SAFETY: the kernel touches only the first word of the span it is given.
    unsafe {
        recorder.launch(
            &gated,
            LaunchDims::linear(1, 1),
            &[Arg::Span(first.all())],
            &[b],
        )
    }
    .unwrap();
    let graph = recorder.instantiate().unwrap();
    let replay = graph.launch(&mut vec![]).unwrap();
    drop(graph);
    drop(first); // freed while the replay's kernel still waits for its gate
    let (second, ready) = rt
        .alloc_after(D0, MemoryKind::Device, BLOCK, &mut vec![])
        .unwrap();
    let filled = rt.fill(D0, second.all(), 7, &mut vec![ready]).unwrap();
    release_tx.send(()).unwrap();
    rt.wait(replay).unwrap();
    common::assert_reuse_waited(&rt, D0, (&second, address), filled, "the replay");
}
