//! Case 9: graphs. A chain of 1,000 small kernels replayed as one graph (through the runtime's
//! Graph API, and as a cuGraph built directly) against 1,000 cuLaunchKernel on a stream, each to
//! completion; and a replay after updating every node's arguments in place against recording
//! and instantiating the graph again.

use super::*;

use gpu_core::backend::graph::NodeId;
use gpu_rt::runtime::{GraphRecorder, Kernel, Span};

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
    // The last replay's value is in the buffer.
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
    rt.free(buffer)?;
    Ok(())
}

/// `axpy_f32`'s four arguments (a, x, y, count) as cuLaunchKernel takes them, over `count`
/// elements in blocks of 256.
struct RawAxpy {
    a: f32,
    x: u64,
    y: u64,
    count: u64,
    shape: result::module::LaunchShape,
}

impl RawAxpy {
    fn new(a: f32, x: usize, y: usize, count: u32) -> Self {
        Self {
            a,
            x: x as u64,
            y: y as u64,
            count: u64::from(count),
            shape: result::module::LaunchShape {
                grid: [count.div_ceil(256), 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
        }
    }

    /// cuLaunchKernel of `function` (axpy_f32) on `stream`.
    ///
    /// # Safety
    /// As for [`RawFill::launch`], for axpy_f32 and both ranges.
    unsafe fn launch(
        &self,
        driver: &Driver,
        function: sys::CUfunction,
        stream: sys::CUstream,
    ) -> Outcome<()> {
        let mut params: [*mut c_void; 4] = [
            ptr::from_ref(&self.a).cast_mut().cast(),
            ptr::from_ref(&self.x).cast_mut().cast(),
            ptr::from_ref(&self.y).cast_mut().cast(),
            ptr::from_ref(&self.count).cast_mut().cast(),
        ];
        // SAFETY: one pointer per parameter, each to a value of its type that lives through
        // the call; the caller's promise for the function, the stream and the memory.
        Ok(unsafe {
            result::module::launch(driver, function, self.shape, stream, params.as_mut_ptr())
        }?)
    }
}

/// Adds `y += a * x` (axpy_f32 over the spans' floats, blocks of 256) after `after`.
fn axpy_node<'a>(
    recorder: &mut GraphRecorder<'a, CudaBackend>,
    axpy: &Kernel<'a, CudaBackend>,
    a: f32,
    [x, y]: [Span<'a>; 2],
    after: &[NodeId],
) -> Outcome<NodeId> {
    let count = (x.len() / 4) as u32;
    let args = [
        Arg::F32(a),
        Arg::Span(x),
        Arg::Span(y),
        Arg::U64(u64::from(count)),
    ];
    let dims = LaunchDims::linear(count.div_ceil(256), 256);
    // SAFETY: axpy_f32 of the library, whose reach the runtime checks against the spans.
    Ok(unsafe { recorder.launch(axpy, dims, &args, after) }?)
}

/// Case 10: the fork/join program's work (`clients/mlir/forkjoin.mlir`, 4,096 floats: copy
/// in, two kernels on two branches, a kernel joining them, copy out; here with the two branch
/// outputs zeroed first, and axpy_f32 for each kernel) as one replayed graph, against the same
/// calls written by hand on two streams with an event fork and join, each iteration to
/// completion. Host memory is pinned on both sides; every iteration's result is checked at
/// the end (y = x + 2x = 3 for x = 1).
pub(super) fn fork_join(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    const N: u32 = 4096;
    let bytes = N as usize * 4;
    let alloc = |kind| rt.alloc(D0, kind, bytes);
    let (host_in, host_out) = (
        alloc(MemoryKind::HostPinned)?,
        alloc(MemoryKind::HostPinned)?,
    );
    let ones: Vec<u8> = (0..N).flat_map(|_| 1f32.to_ne_bytes()).collect();
    // SAFETY: pinned memory of this runtime, not used by any work yet.
    unsafe { host_in.write_host(0, &ones) }?;
    let device_buffers = || -> Outcome<[gpu_rt::runtime::Buffer<'_, CudaBackend>; 3]> {
        Ok([
            alloc(MemoryKind::Device)?,
            alloc(MemoryKind::Device)?,
            alloc(MemoryKind::Device)?,
        ])
    };
    let [x, y, z] = device_buffers()?;
    let [rx, ry, rz] = device_buffers()?;
    let axpy = rt.kernel(D0, "axpy_f32")?;
    let mut recorder = rt.record_graph(D0)?;
    let copy_in = recorder.copy(x.all(), host_in.all(), &[])?;
    let zero_y = recorder.fill(y.all(), gpu_core::backend::FillValue::U32(0), &[])?;
    let zero_z = recorder.fill(z.all(), gpu_core::backend::FillValue::U32(0), &[])?;
    let left = axpy_node(
        &mut recorder,
        &axpy,
        1.0,
        [x.all(), y.all()],
        &[copy_in, zero_y],
    )?;
    let right = axpy_node(
        &mut recorder,
        &axpy,
        2.0,
        [x.all(), z.all()],
        &[copy_in, zero_z],
    )?;
    let joined = axpy_node(
        &mut recorder,
        &axpy,
        1.0,
        [z.all(), y.all()],
        &[left, right],
    )?;
    recorder.copy(host_out.all(), y.all(), &[joined])?;
    let graph = recorder.instantiate()?;

    let (main, side) = (RawStream::new(driver)?, RawStream::new(driver)?);
    let (forked, joined_event) = (RawEvent::new(driver)?, RawEvent::new(driver)?);
    let function = rt.backend().kernel(D0, "axpy_f32")?.raw();
    let raw_left = RawAxpy::new(1.0, rx.address(), ry.address(), N);
    let raw_right = RawAxpy::new(2.0, rx.address(), rz.address(), N);
    let raw_joined = RawAxpy::new(1.0, rz.address(), ry.address(), N);
    let raw_output = alloc(MemoryKind::HostPinned)?;

    let ours_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            rt.wait(graph.launch(&mut vec![])?)?;
        }
        Ok(start.elapsed())
    };
    let by_hand_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            // SAFETY: live pinned and device memory of this runtime, N floats each, on live
            // streams and events of the current context; axpy_f32 of the backend's library.
            unsafe {
                let (s, t) = (main.raw, side.raw);
                result::memory::copy_async(
                    driver,
                    rx.address() as u64,
                    host_in.address() as u64,
                    bytes,
                    s,
                )?;
                result::memory::set_d32_async(driver, ry.address() as u64, 0, N as usize, s)?;
                result::memory::set_d32_async(driver, rz.address() as u64, 0, N as usize, s)?;
                result::event::record(driver, forked.raw, s)?;
                result::stream::wait_event(driver, t, forked.raw, 0)?;
                raw_left.launch(driver, function, s)?;
                raw_right.launch(driver, function, t)?;
                result::event::record(driver, joined_event.raw, t)?;
                result::stream::wait_event(driver, s, joined_event.raw, 0)?;
                raw_joined.launch(driver, function, s)?;
                result::memory::copy_async(
                    driver,
                    raw_output.address() as u64,
                    ry.address() as u64,
                    bytes,
                    s,
                )?;
            }
            main.synchronize()?;
        }
        Ok(start.elapsed())
    };
    let [ours, by_hand] =
        plan.interleaved(31, 20, [&mut |c| ours_side(c), &mut |c| by_hand_side(c)])?;
    report.row(
        "10",
        "fork/join work (copy in, 2 fills, 3 kernels, copy out; 4,096 floats) as one Graph::launch, to completion",
        ours,
        "the same calls by hand on two streams with an event fork and join",
        by_hand,
        None,
        Target::FasterBy(2.0),
    );
    for (side, output) in [("graph", &host_out), ("by hand", &raw_output)] {
        let mut back = vec![0u8; bytes];
        // SAFETY: pinned memory of this runtime whose last writer was waited for above.
        unsafe { output.read_host(0, &mut back) }?;
        let wrong = back
            .chunks_exact(4)
            .filter(|w| f32::from_ne_bytes([w[0], w[1], w[2], w[3]]) != 3.0)
            .count();
        if wrong != 0 {
            report.failed = true;
            report.notes.push(format!(
                "case 10 ({side}): {wrong} of {N} results are not 3"
            ));
        }
    }
    graph.destroy()?;
    Ok(())
}
