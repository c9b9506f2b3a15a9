//! A graph's own memory (issue 24) on the host backend: random programs over buffers and
//! blocks of graph memory give what a plain model gives, replay after replay, while blocks
//! share bytes; replays allocate nothing and run one after another; the pool is the graph's
//! alone while it lives and is freed after its replays; every refusal (a block of another
//! graph, bounds, overlap, an update that would break the layout) and a fault at instantiation
//! or replay change nothing and leak nothing.

use gpu_core::allocator::MemoryKind;
use gpu_core::backend::graph::NodeId;
use gpu_core::backend::{FillValue, LaunchDims};
use gpu_core::token::UnwaitedKind;
use gpu_core::{DeviceId, Error};
use gpu_rt::host::{CallKind, HostBackend, HostConfig};
use gpu_rt::runtime::{Arg, GraphArg, GraphSpan, Runtime};
use proptest::prelude::*;

mod graph_programs;

use graph_programs::{Op, WORDS, assert_refused, op, words};

const D0: DeviceId = DeviceId(0);
const BUFFERS: usize = 3;
const BLOCKS: usize = 4;

fn runtime() -> Runtime<HostBackend> {
    Runtime::new(HostBackend::new(HostConfig::with_devices(1))).unwrap()
}

fn device_bytes(rt: &Runtime<HostBackend>) -> usize {
    rt.allocator_stats(D0, MemoryKind::Device)
        .unwrap()
        .requested
}

/// `program` (whose operands `0..BUFFERS` are buffers, the others blocks of the graph's own
/// memory) with a whole fill of each block before its first use: what a replay leaves in a
/// block is undefined for the next, so each replay writes a block before reading it.
fn with_blocks_written_first(program: &[(Op, u64)]) -> Vec<(Op, u64)> {
    let mut written = [false; BLOCKS];
    let mut out = Vec::new();
    for &(op, extra) in program {
        for operand in op.operands() {
            if operand >= BUFFERS && !std::mem::replace(&mut written[operand - BUFFERS], true) {
                let fill = Op::Fill {
                    dst: operand,
                    value: operand as u32 * 7,
                };
                out.push((fill, 0));
            }
        }
        out.push((op, extra));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Each node runs after the earlier nodes that touch one of its operands (and after random
    /// others): every replay leaves the buffers as the plain model leaves its vectors, whatever
    /// the blocks' bytes were shared with, also with two replays launched with no token
    /// between them; the pool is no larger than the blocks side by side; replays allocate
    /// nothing; and dropping the graph gives its memory back.
    #[test]
    fn replays_with_graph_memory_give_what_the_model_gives(
        program in proptest::collection::vec((op(BUFFERS + BLOCKS), any::<u64>()), 1..20)
    ) {
        let program = with_blocks_written_first(&program);
        let rt = runtime();
        let buffers: Vec<_> =
            (0..BUFFERS).map(|_| rt.alloc(D0, MemoryKind::Device, WORDS * 4).unwrap()).collect();
        let before_graph = device_bytes(&rt);
        let fill = rt.kernel(D0, "fill_u32").unwrap();
        let mut recorder = rt.record_graph(D0).unwrap();
        let blocks: Vec<_> = (0..BLOCKS).map(|_| recorder.alloc(WORDS * 4).unwrap()).collect();
        let operand = |index: usize| -> GraphSpan<'_> {
            match index.checked_sub(BUFFERS) {
                None => buffers[index].all().into(),
                Some(block) => blocks[block].into(),
            }
        };
        let mut nodes: Vec<(NodeId, Vec<usize>)> = Vec::new();
        for (op, extra) in &program {
            let touched = op.operands();
            let after: Vec<NodeId> = nodes
                .iter()
                .enumerate()
                .filter(|(i, (_, theirs))| {
                    theirs.iter().any(|o| touched.contains(o)) || extra >> (i % 64) & 1 == 1
                })
                .map(|(_, (node, _))| *node)
                .collect();
            let node = match *op {
                Op::Fill { dst, value } => recorder.fill(operand(dst), FillValue::U32(value), &after),
                Op::Copy { dst, src } => recorder.copy(operand(dst), operand(src), &after),
                Op::Kernel { dst, value, count } => {
                    let args: [GraphArg<'_>; 3] =
                        [operand(dst).into(), Arg::U32(value).into(), Arg::U64(count as u64).into()];
                    // SAFETY: a library kernel, whose reach the runtime checks.
                    unsafe { recorder.launch(&fill, LaunchDims::linear(1, 64), &args, &after) }
                }
            }.unwrap();
            nodes.push((node, touched));
        }
        let graph = recorder.instantiate().unwrap();
        prop_assert!(graph.memory_bytes() <= BLOCKS * WORDS * 4);
        prop_assert_eq!(device_bytes(&rt), before_graph + graph.memory_bytes());
        let mut model: Vec<Vec<u32>> =
            (0..BUFFERS + BLOCKS).map(|b| vec![b as u32 + 100; WORDS]).collect();
        for (buffer, value) in buffers.iter().zip(100..) {
            rt.wait(rt.fill_elements(D0, buffer.all(), FillValue::U32(value), &mut vec![]).unwrap()).unwrap();
        }
        for _ in 0..2 {
            // Two replays with no token between them: the second still runs after the first.
            let calls = rt.backend().calls();
            let first = graph.launch(&mut vec![]).unwrap();
            let second = graph.launch(&mut vec![]).unwrap();
            rt.wait(rt.join(&mut vec![first, second]).unwrap()).unwrap();
            let since = rt.backend().calls().since(&calls);
            prop_assert_eq!(since.of(CallKind::Allocate) + since.of(CallKind::Free), 0);
            for _ in 0..2 {
                program.iter().for_each(|(op, _)| op.apply(&mut model));
            }
            for (buffer, expected) in buffers.iter().zip(&model) {
                prop_assert_eq!(&words(&rt, buffer), expected);
            }
        }
        drop(graph);
        prop_assert_eq!(device_bytes(&rt), before_graph);
        prop_assert_eq!(rt.backend().stats().graphs, 0);
    }
}

#[test]
fn blocks_are_checked_as_spans_and_belong_to_their_graph() {
    let rt = runtime();
    let a = rt.alloc(D0, MemoryKind::Device, 256).unwrap();
    let mut other = rt.record_graph(D0).unwrap();
    let foreign = other.alloc(256).unwrap();
    let mut recorder = rt.record_graph(D0).unwrap();
    assert_eq!(
        recorder.alloc(0).unwrap_err(),
        Error::ZeroSize {
            what: "graph memory block"
        }
    );
    let block = recorder.alloc(256).unwrap();
    assert!(matches!(
        block.sub(200, 57),
        Err(Error::OutOfBounds {
            offset: 200,
            len: 57,
            size: 256
        })
    ));
    let fill = rt.kernel(D0, "fill_u32").unwrap();
    let refusals = [
        recorder.fill(foreign, FillValue::U8(1), &[]),
        recorder.copy(a.all(), foreign, &[]),
        recorder.fill(block.sub(0, 6).unwrap(), FillValue::U32(1), &[]),
        recorder.copy(a.span(0, 128).unwrap(), block, &[]),
        recorder.copy(block.sub(0, 128).unwrap(), block.sub(64, 128).unwrap(), &[]),
        // SAFETY: refused before anything is kept: the runtime checks the kernel's reach.
        unsafe {
            let args: [GraphArg<'_>; 3] = [block.into(), Arg::U32(0).into(), Arg::U64(65).into()];
            recorder.launch(&fill, LaunchDims::linear(1, 65), &args, &[])
        },
    ];
    assert_refused!(
        refusals,
        [
            Error::UnknownGraphBlock {
                block: 0,
                blocks: 1
            },
            Error::UnknownGraphBlock {
                block: 0,
                blocks: 1
            },
            Error::OutOfBounds { .. },
            Error::OutOfBounds { .. },
            Error::CopyOverlap { .. },
            Error::KernelReach { .. },
        ]
    );
    assert!(recorder.is_empty());
    // Halves of one block copied into each other, and a block copied from a buffer: accepted.
    let half = recorder
        .copy(
            block.sub(0, 128).unwrap(),
            block.sub(128, 128).unwrap(),
            &[],
        )
        .unwrap();
    recorder
        .copy(a.all(), block, &[half])
        .expect("a block and a buffer never overlap");
    drop(other);
}

#[test]
fn an_update_may_move_a_block_use_only_where_the_layout_holds() {
    let rt = runtime();
    let out = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let mut recorder = rt.record_graph(D0).unwrap();
    let (first, second, unused) = (
        recorder.alloc(64).unwrap(),
        recorder.alloc(64).unwrap(),
        recorder.alloc(64).unwrap(),
    );
    let write_first = recorder.fill(first, FillValue::U32(1), &[]).unwrap();
    let read_first = recorder.copy(out.all(), first, &[write_first]).unwrap();
    let write_second = recorder
        .fill(second, FillValue::U32(2), &[read_first])
        .unwrap();
    let read_second = recorder.copy(out.all(), second, &[write_second]).unwrap();
    let mut graph = recorder.instantiate().unwrap();
    assert_eq!(
        graph.memory_bytes(),
        64,
        "the second block reuses the first's bytes"
    );
    rt.wait(graph.launch(&mut vec![]).unwrap()).unwrap();
    assert_eq!(words(&rt, &out), vec![2; 16]);

    // The first write moved onto the second block, unordered with... it is ordered before the
    // second's uses: the layout holds. The last read moved onto the first block, which the
    // second's write then overwrites in between: the two blocks would be in use at once.
    let conflict = graph.set_copy(read_second, out.all(), first).unwrap_err();
    assert_eq!(conflict, Error::GraphBlockConflict { block: 1, other: 0 });
    assert_eq!(
        graph.set_fill(write_first, unused, FillValue::U32(3)),
        Err(Error::UnknownGraphBlock {
            block: 2,
            blocks: 3
        })
    );
    rt.wait(graph.launch(&mut vec![]).unwrap()).unwrap();
    assert_eq!(
        words(&rt, &out),
        vec![2; 16],
        "the refused updates changed nothing"
    );
    graph
        .set_fill(write_second, second, FillValue::U32(4))
        .unwrap();
    rt.wait(graph.launch(&mut vec![]).unwrap()).unwrap();
    assert_eq!(words(&rt, &out), vec![4; 16]);
}

#[test]
fn a_fault_at_instantiation_or_replay_leaves_nothing_behind() {
    let rt = runtime();
    let out = rt.alloc(D0, MemoryKind::Device, 64).unwrap();
    let held = device_bytes(&rt);
    // A block larger than any cached segment: the pool needs the driver.
    let record = || {
        let mut recorder = rt.record_graph(D0).unwrap();
        let block = recorder.alloc(64 << 20).unwrap();
        let fill = recorder.fill(block, FillValue::U8(9), &[]).unwrap();
        let head = block.sub(0, 64).unwrap();
        recorder.copy(out.all(), head, &[fill]).unwrap();
        recorder
    };
    let injected = |error: Error| {
        assert!(
            matches!(&error, Error::Driver(d) if d.name == "HOST_INJECTED_FAULT"),
            "{error}"
        );
    };
    // The pool's allocation, then the instantiation after it: nothing stays allocated.
    rt.backend().fail_nth(CallKind::Allocate, 1);
    injected(record().instantiate().map(drop).unwrap_err());
    rt.backend().fail_nth(CallKind::GraphInstantiate, 1);
    injected(record().instantiate().map(drop).unwrap_err());
    assert_eq!((device_bytes(&rt), rt.backend().stats().graphs), (held, 0));

    // A failed replay keeps the order of replays: the next one still runs after the last.
    let graph = record().instantiate().unwrap();
    let first = graph.launch(&mut vec![]).unwrap();
    rt.backend().fail_nth(CallKind::GraphLaunch, 1);
    injected(graph.launch(&mut vec![]).unwrap_err());
    let third = graph.launch(&mut vec![]).unwrap();
    rt.wait(rt.join(&mut vec![first, third]).unwrap()).unwrap();
    assert_eq!(words(&rt, &out), vec![0x0909_0909; 16]);
    drop(graph);
    assert_eq!(device_bytes(&rt), held);
    drop(out);
    let report = rt.shutdown().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let unwaited = &report.program.unwaited;
    assert!(
        unwaited.iter().all(|u| u.kind == UnwaitedKind::Discarded) && unwaited.len() <= 1,
        "only the failed replay's token, given up: {unwaited:?}"
    );
}
