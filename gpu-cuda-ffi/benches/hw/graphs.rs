//! Case 9: graphs. A chain of 1,000 small kernels replayed as one graph (through the runtime's
//! Graph API, and as a cuGraph built directly) against 1,000 cuLaunchKernel on a stream, each to
//! completion; a replay after updating every node's arguments in place against recording
//! and instantiating the graph again; and a graph whose scratch blocks are its own memory
//! against the same graph over buffers allocated before recording (what the replays' order
//! and the pool cost).

use super::*;

use gpu_core::backend::graph::NodeId;
use gpu_rt::runtime::{Buffer, GraphArg, GraphSpan};

/// Kernels in the chain.
const CHAIN: usize = 1000;

/// A cuGraph of `CHAIN` fill_u32 launches, each after the previous, built with the driver's
/// calls directly (the peer of the runtime's graph), destroyed on drop.
struct RawGraph {
    driver: &'static Driver,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl RawGraph {
    fn new(driver: &'static Driver, function: sys::CUfunction, fill: &RawFill) -> Outcome<Self> {
        let graph = result::graph::create(driver)?;
        let mut raw = Self {
            driver,
            graph,
            exec: ptr::null_mut(),
        };
        let mut params: [*mut c_void; 3] = [
            ptr::from_ref(&fill.destination).cast_mut().cast(),
            ptr::from_ref(&fill.value).cast_mut().cast(),
            ptr::from_ref(&fill.count).cast_mut().cast(),
        ];
        let node_params = result::graph::kernel_params(function, fill.shape, params.as_mut_ptr());
        let mut previous: Option<sys::CUgraphNode> = None;
        for _ in 0..CHAIN {
            let deps: &[sys::CUgraphNode] = match &previous {
                Some(node) => core::slice::from_ref(node),
                None => &[],
            };
            // SAFETY: the graph just created, a node of it, and fill_u32's parameters (the
            // driver copies the values) in the current context.
            let node =
                unsafe { result::graph::add_kernel_node(driver, graph, deps, &node_params) }?;
            previous = Some(node);
        }
        // SAFETY: the graph just built, in the current context.
        raw.exec = unsafe { result::graph::instantiate(driver, graph) }?;
        Ok(raw)
    }
}

impl Drop for RawGraph {
    fn drop(&mut self) {
        // SAFETY: both made by `new`, destroyed once, here, after their replays completed.
        unsafe {
            if !self.exec.is_null() {
                let _ = result::graph::exec_destroy(self.driver, self.exec);
            }
            let _ = result::graph::destroy(self.driver, self.graph);
        }
    }
}

/// Case 9: see the module's documentation.
pub(super) fn graphs(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    const WORDS: u32 = 256;
    let buffer = rt.alloc(D0, MemoryKind::Device, WORDS as usize * 4)?;
    let dims = LaunchDims::linear(1, WORDS);
    let fill = rt.kernel(D0, "fill_u32")?;
    let args = |value: u32| {
        [
            Arg::Span(buffer.all()),
            Arg::U32(value),
            Arg::U64(u64::from(WORDS)),
        ]
    };
    let record = || -> Outcome<(gpu_rt::runtime::Graph<'_, CudaBackend>, Vec<NodeId>)> {
        let mut recorder = rt.record_graph(D0)?;
        let mut nodes = Vec::with_capacity(CHAIN);
        for _ in 0..CHAIN {
            let after: Vec<NodeId> = nodes.last().copied().into_iter().collect();
            // SAFETY: the kernel touches its count of words of its span, which fit.
            nodes.push(unsafe { recorder.launch(&fill, dims, &args(7), &after) }?);
        }
        Ok((recorder.instantiate()?, nodes))
    };
    let (mut graph, nodes) = record()?;
    let replay = |graph: &gpu_rt::runtime::Graph<'_, CudaBackend>| -> Outcome<()> {
        let token = graph.launch(&mut vec![])?;
        Ok(rt.wait(token)?)
    };

    // The peers: the same kernel, as a cuGraph built directly and as stream launches.
    let stream = RawStream::new(driver)?;
    let function = rt.backend().kernel(D0, "fill_u32")?.raw();
    let raw_fill = RawFill::new(buffer.address(), 7, WORDS);
    let raw_graph = RawGraph::new(driver, function, &raw_fill)?;

    let ours_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            replay(&graph)?;
        }
        Ok(start.elapsed())
    };
    let raw_graph_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            // SAFETY: the instantiation lives until the end, on a live stream of the current
            // context; its kernels write the live buffer.
            unsafe { result::graph::launch(driver, raw_graph.exec, stream.raw) }?;
            stream.synchronize()?;
        }
        Ok(start.elapsed())
    };
    let stream_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            for _ in 0..CHAIN {
                // SAFETY: fill_u32 of the backend's live module on a live stream of the
                // current context; it writes the live buffer.
                unsafe { raw_fill.launch(driver, function, stream.raw) }?;
            }
            stream.synchronize()?;
        }
        Ok(start.elapsed())
    };
    let [ours, raw_replay, streamed] = plan.interleaved(
        31,
        5,
        [
            &mut |c| ours_side(c),
            &mut |c| raw_graph_side(c),
            &mut |c| stream_side(c),
        ],
    )?;
    let per_kernel = |ns: f64| ns / CHAIN as f64;
    let label = format!("{CHAIN} chained fill_u32 (1 x 256 threads), to completion, per kernel");
    report.row(
        "9",
        format!("Graph::launch (runtime) of {label}"),
        per_kernel(ours),
        "cuLaunchKernel on a stream",
        per_kernel(streamed),
        None,
        Target::FasterBy(3.0),
    );
    report.row(
        "9",
        format!("cuGraphLaunch (raw cuGraph) of {label}"),
        per_kernel(raw_replay),
        "cuLaunchKernel on a stream",
        per_kernel(streamed),
        None,
        Target::FasterBy(3.0),
    );
    report.row(
        "9",
        format!("Graph::launch (runtime) of {label}"),
        per_kernel(ours),
        "cuGraphLaunch of the raw cuGraph",
        per_kernel(raw_replay),
        None,
        Target::WithinPercent(10.0),
    );

    // Updates: every node's arguments changed in place, then a replay, against recording and
    // instantiating the graph again, then a replay (and its destruction).
    let value = Cell::new(0u32);
    let mut update_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            value.set(value.get() + 1);
            for &node in &nodes {
                // SAFETY: as recorded: the kernel touches its count of words of its span.
                unsafe { graph.set_launch(node, &fill, dims, &args(value.get())) }?;
            }
            replay(&graph)?;
        }
        Ok(start.elapsed())
    };
    let reinstantiate_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            let (again, _) = record()?;
            replay(&again)?;
            again.destroy()?;
        }
        Ok(start.elapsed())
    };
    let [updated, reinstantiated] = plan.interleaved(
        15,
        3,
        [&mut |c| update_side(c), &mut |c| reinstantiate_side(c)],
    )?;
    report.row(
        "9",
        format!("Graph::set_launch of all {CHAIN} nodes, then a replay to completion"),
        updated,
        "record + instantiate again, replay, destroy",
        reinstantiated,
        None,
        Target::Faster,
    );
    // The sides ran interleaved, the last batch either one's: one more replay of the updated
    // graph, whose value must then be in the buffer.
    replay(&graph)?;
    let mut back = vec![0u8; WORDS as usize * 4];
    rt.download(D0, &mut back, buffer.all(), &mut vec![])?;
    let expected = if value.get() == 0 { 7 } else { value.get() };
    let wrong = back
        .chunks_exact(4)
        .filter(|word| u32::from_ne_bytes([word[0], word[1], word[2], word[3]]) != expected)
        .count();
    if wrong != 0 {
        report.failed = true;
        report.notes.push(format!(
            "case 9: {wrong} words differ from the last replay's {expected}"
        ));
    }
    drop(raw_graph);
    graph.destroy()?;
    own_memory(bench, report, &buffer)?;
    rt.free(buffer)?;
    Ok(())
}

/// Scratch blocks in [`own_memory`]'s graph.
const SCRATCH: usize = 16;

/// A graph of `SCRATCH` rounds of a fill of a scratch block then its copy into `out`, the
/// scratch being blocks of the graph's own memory or buffers allocated before recording; each
/// replayed to completion, and the last replay's `out` checked.
fn own_memory(
    bench: &Bench<'_>,
    report: &mut Report,
    out: &Buffer<'_, CudaBackend>,
) -> Outcome<()> {
    let rt = bench.rt;
    let bytes = out.size();
    let words = bytes / 4;
    let fill = rt.kernel(D0, "fill_u32")?;
    let dims = LaunchDims::linear(1, words as u32);
    let buffers: Vec<_> = (0..SCRATCH)
        .map(|_| rt.alloc(D0, MemoryKind::Device, bytes))
        .collect::<Result<_, _>>()?;
    let record = |own: bool| -> Outcome<gpu_rt::runtime::Graph<'_, CudaBackend>> {
        let mut recorder = rt.record_graph(D0)?;
        let mut last: Vec<NodeId> = Vec::new();
        for (round, buffer) in buffers.iter().enumerate() {
            let scratch: GraphSpan<'_> = match own {
                true => recorder.alloc(bytes)?.into(),
                false => buffer.all().into(),
            };
            let args: [GraphArg<'_>; 3] = [
                scratch.into(),
                Arg::U32(round as u32).into(),
                Arg::U64(words as u64).into(),
            ];
            // SAFETY: the kernel touches its count of words of its span, which fit.
            let filled = unsafe { recorder.launch(&fill, dims, &args, &last) }?;
            last = vec![recorder.copy(out.all(), scratch, &[filled])?];
        }
        Ok(recorder.instantiate()?)
    };
    let (owning, borrowing) = (record(true)?, record(false)?);
    let side = |graph: &gpu_rt::runtime::Graph<'_, CudaBackend>, calls: usize| {
        let start = Instant::now();
        for _ in 0..calls {
            rt.wait(graph.launch(&mut vec![])?)?;
        }
        Outcome::Ok(start.elapsed())
    };
    let [owned, borrowed] = bench.plan.interleaved(
        31,
        5,
        [&mut |c| side(&owning, c), &mut |c| side(&borrowing, c)],
    )?;
    report.row(
        "9",
        format!(
            "Graph::launch of {SCRATCH} fills and copies over scratch blocks of its own memory \
             (one pool of {} bytes), to completion",
            owning.memory_bytes()
        ),
        owned,
        "the same graph over buffers allocated before recording",
        borrowed,
        None,
        Target::WithinPercent(10.0),
    );
    let mut back = vec![0u8; bytes];
    rt.download(D0, &mut back, out.all(), &mut vec![])?;
    let last = (SCRATCH - 1) as u32;
    if back
        .chunks_exact(4)
        .any(|word| u32::from_ne_bytes([word[0], word[1], word[2], word[3]]) != last)
    {
        report.failed = true;
        report.notes.push(format!(
            "case 9: scratch graphs left other than {last} in the output"
        ));
    }
    owning.destroy()?;
    borrowing.destroy()?;
    buffers.into_iter().try_for_each(|buffer| rt.free(buffer))?;
    Ok(())
}
