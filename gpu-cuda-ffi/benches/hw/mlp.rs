//! Case 11: a small MLP's forward step (4 layers, batch 64, width 512) as a graph. The kernels
//! are `mlp.cu`'s, compiled on the GPU machine (`nvcc -ptx`) and named by `GPU_BENCH_MLP_PTX`
//! (the case is skipped without it); `clients/torch/mlp_graph.py` replays the same kernels, and
//! PyTorch's own layers, as `torch.cuda.graphs` captures, for the comparison with PyTorch.

use super::*;

use gpu_core::backend::graph::NodeId;
use gpu_rt::runtime::Buffer;

/// Rows of the batch, the width of the hidden layers, and the classes of the last layer.
const BATCH: u32 = 64;
const WIDTH: u32 = 512;
const CLASSES: u32 = 10;
const LAYERS: usize = 4;
/// `mlp.cu`'s tile edge.
const TILE: u32 = 16;

/// Layer `layer`'s (inputs, outputs).
fn layer_shape(layer: usize) -> (u32, u32) {
    (WIDTH, if layer + 1 == LAYERS { CLASSES } else { WIDTH })
}

/// The deterministic values of parameter tensor `tensor` (the same formula as mlp_graph.py's):
/// small, of both signs, so that ReLU keeps some and drops others.
fn values(tensor: u32, count: u32) -> Vec<f32> {
    (0..count)
        .map(|i| {
            let mixed = (i.wrapping_mul(2_654_435_761) ^ tensor.wrapping_mul(40_503)) % 1000;
            (mixed as f32 / 1000.0 - 0.5) * 0.1
        })
        .collect()
}

/// The forward step on the host: the reference the GPU's output is checked against.
fn reference(input: &[f32], weights: &[Vec<f32>], biases: &[Vec<f32>]) -> Vec<f32> {
    let mut x = input.to_vec();
    for layer in 0..LAYERS {
        let (inputs, outputs) = layer_shape(layer);
        let (inputs, outputs) = (inputs as usize, outputs as usize);
        let mut y = vec![0f32; BATCH as usize * outputs];
        for row in 0..BATCH as usize {
            for out in 0..outputs {
                let w = &weights[layer][out * inputs..][..inputs];
                let sum: f32 = x[row * inputs..][..inputs]
                    .iter()
                    .zip(w)
                    .map(|(a, b)| a * b)
                    .sum();
                let value = sum + biases[layer][out];
                y[row * outputs + out] = if layer + 1 < LAYERS {
                    value.max(0.0)
                } else {
                    value
                };
            }
        }
        x = y;
    }
    x
}

fn to_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

/// The launch shape of one layer.
fn shape(outputs: u32) -> result::module::LaunchShape {
    result::module::LaunchShape {
        grid: [outputs.div_ceil(TILE), BATCH.div_ceil(TILE), 1],
        block: [TILE, TILE, 1],
        shared_bytes: 0,
    }
}

/// Case 11: see the module's documentation.
pub(super) fn mlp(bench: &Bench<'_>, report: &mut Report) -> Outcome<()> {
    let Some(ptx) = ptx_from_env("GPU_BENCH_MLP_PTX")? else {
        println!("case 11 skipped: GPU_BENCH_MLP_PTX names no PTX of mlp.cu");
        return Ok(());
    };
    let (rt, driver, plan) = (bench.rt, bench.driver, bench.plan);
    // SAFETY: a complete PTX image, alive until the end of the case (after the runtime's
    // last use of the module: the graph is destroyed and the module unloaded below).
    let module = unsafe { rt.load_module(D0, ptx.as_ptr().cast()) }?;
    let linear = rt.module_kernel(module, D0, c"linear_f32")?;

    let device = |floats: u32| rt.alloc(D0, MemoryKind::Device, floats as usize * 4);
    let upload = |buffer: &Buffer<'_, CudaBackend>, data: &[f32]| -> Outcome<()> {
        let token = rt.upload(D0, buffer.all(), &to_bytes(data), &mut vec![])?;
        Ok(rt.wait(token)?)
    };
    let input = values(0, BATCH * WIDTH);
    let x = device(BATCH * WIDTH)?;
    upload(&x, &input)?;
    let (mut weights, mut biases, mut params, mut activations) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for layer in 0..LAYERS {
        let (inputs, outputs) = layer_shape(layer);
        let (w, b) = (
            values(2 * layer as u32 + 1, inputs * outputs),
            values(2 * layer as u32 + 2, outputs),
        );
        let (w_buffer, b_buffer) = (device(inputs * outputs)?, device(outputs)?);
        upload(&w_buffer, &w)?;
        upload(&b_buffer, &b)?;
        weights.push(w);
        biases.push(b);
        params.push((w_buffer, b_buffer));
        activations.push(device(BATCH * outputs)?);
    }

    // Ours: the four launches, each after the previous, recorded once.
    let mut recorder = rt.record_graph(D0)?;
    let mut previous: Option<NodeId> = None;
    for layer in 0..LAYERS {
        let (inputs, outputs) = layer_shape(layer);
        let source = if layer == 0 {
            &x
        } else {
            &activations[layer - 1]
        };
        let args = [
            Arg::Span(source.all()),
            Arg::Span(params[layer].0.all()),
            Arg::Span(params[layer].1.all()),
            Arg::Span(activations[layer].all()),
            Arg::U32(BATCH),
            Arg::U32(inputs),
            Arg::U32(outputs),
            Arg::U32(u32::from(layer + 1 < LAYERS)),
        ];
        let dims = LaunchDims {
            grid: [outputs.div_ceil(TILE), BATCH.div_ceil(TILE), 1],
            block: [TILE, TILE, 1],
            dynamic_workgroup_bytes: 0,
        };
        let after: Vec<NodeId> = previous.into_iter().collect();
        // SAFETY: linear_f32 reads rows x inputs floats of its source, outputs x inputs of its
        // weights and outputs of its biases, and writes rows x outputs of its destination: the
        // sizes these buffers were allocated with.
        previous = Some(unsafe { recorder.launch(&linear, dims, &args, &after) }?);
    }
    let graph = recorder.instantiate()?;
    let replay = || -> Outcome<()> {
        let token = graph.launch(&mut vec![])?;
        Ok(rt.wait(token)?)
    };
    replay()?;
    let mut output = vec![0u8; (BATCH * CLASSES) as usize * 4];
    rt.download(D0, &mut output, activations[LAYERS - 1].all(), &mut vec![])?;
    let expected = reference(&input, &weights, &biases);
    let worst = output
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().expect("four bytes")))
        .zip(&expected)
        .map(|(got, want)| (got - want).abs() / want.abs().max(1e-3))
        .fold(0f32, f32::max);
    if worst > 1e-3 {
        return Err(
            format!("the graph's MLP output is off the host's by {worst:e} (relative)").into(),
        );
    }

    // The peer in this process: the same kernels, launched on a stream with cuLaunchKernel.
    let stream = RawStream::new(driver)?;
    let raw_module = RawModule::new(driver, &ptx)?;
    let function = raw_module.function(c"linear_f32")?;
    let mut raw_layers: Vec<RawLaunch> = (0..LAYERS)
        .map(|layer| {
            let (inputs, outputs) = layer_shape(layer);
            let source = if layer == 0 {
                &x
            } else {
                &activations[layer - 1]
            };
            let args = [
                KernelArg::Ptr(source.address()),
                KernelArg::Ptr(params[layer].0.address()),
                KernelArg::Ptr(params[layer].1.address()),
                KernelArg::Ptr(activations[layer].address()),
                KernelArg::U32(BATCH),
                KernelArg::U32(inputs),
                KernelArg::U32(outputs),
                KernelArg::U32(u32::from(layer + 1 < LAYERS)),
            ];
            RawLaunch::new(function, shape(outputs), &args)
        })
        .collect();
    let mut stream_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            for layer in &mut raw_layers {
                // SAFETY: linear_f32 of the live module with its eight parameters, on a live
                // stream of the current context, over the live buffers sized for it.
                unsafe { layer.launch(driver, stream.raw) }?;
            }
            stream.synchronize()?;
        }
        Ok(start.elapsed())
    };
    let graph_side = |calls: usize| -> Outcome<Duration> {
        let start = Instant::now();
        for _ in 0..calls {
            replay()?;
        }
        Ok(start.elapsed())
    };
    let [ours, streamed] =
        plan.interleaved(31, 50, [&mut |c| graph_side(c), &mut |c| stream_side(c)])?;
    report.row(
        "11",
        format!(
            "Graph::launch of a {LAYERS}-layer MLP forward step (batch {BATCH}, width {WIDTH}), \
             to completion"
        ),
        ours,
        "the same 4 kernels by cuLaunchKernel on a stream",
        streamed,
        None,
        Target::Faster,
    );
    // The figure mlp_graph.py compares PyTorch's captured graphs with.
    println!("mlp-graph-replay-ns {ours:.0}");
    graph.destroy()?;
    drop((raw_module, x, params, activations));
    rt.unload_module(module)?;
    Ok(())
}
