"""A small MLP's forward step (4 layers, batch 64, width 512) captured with torch.cuda.graphs,
the peer of the hardware bench's case 11 (our runtime's graph of the same step; issue 24):

- "same kernels": mlp.cu's linear_f32, compiled here with nvcc, loaded through the driver API
  and launched on PyTorch's capture stream, so that both graphs replay identical kernels;
- "PyTorch layers": torch.nn.functional.linear and relu (cuBLAS), what PyTorch users capture.

Each replay runs to completion (replay, then torch.cuda.synchronize), timed in batches, the
median per replay reported in ns. With --ours-ns (case 11's `mlp-graph-replay-ns` line) it
adds the ratios. The outputs are checked against the same formula's step in float64 on the
host. Writes the table to stdout and, with --out, a JSON record.

    python3 mlp_graph.py --cu mlp.cu [--ours-ns N] [--out record.json]
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import tempfile
import time

import torch

BATCH, WIDTH, CLASSES, LAYERS, TILE = 64, 512, 10, 4, 16


def values(tensor, count):
    """Case 11's deterministic parameter values (the same formula as mlp.rs's `values`)."""
    i = torch.arange(count, dtype=torch.int64)
    mixed = ((i * 2_654_435_761) & 0xFFFF_FFFF) ^ ((tensor * 40_503) & 0xFFFF_FFFF)
    return ((mixed % 1000).to(torch.float32) / 1000.0 - 0.5) * 0.1


def layer_shape(layer):
    return WIDTH, CLASSES if layer + 1 == LAYERS else WIDTH


def parameters(device):
    x = values(0, BATCH * WIDTH).view(BATCH, WIDTH)
    weights, biases = [], []
    for layer in range(LAYERS):
        inputs, outputs = layer_shape(layer)
        weights.append(values(2 * layer + 1, inputs * outputs).view(outputs, inputs))
        biases.append(values(2 * layer + 2, outputs))
    to = lambda t: t.to(device).contiguous()  # noqa: E731
    return to(x), [to(w) for w in weights], [to(b) for b in biases]


def reference(x, weights, biases):
    """The step in float64 on the host."""
    h = x.double().cpu()
    for layer in range(LAYERS):
        h = h @ weights[layer].double().cpu().T + biases[layer].double().cpu()
        if layer + 1 < LAYERS:
            h = h.clamp_min(0.0)
    return h


class Driver:
    """The few driver calls that launch mlp.cu's kernel on PyTorch's current stream."""

    def __init__(self, ptx):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        self.check("cuModuleLoadData", self.cuda.cuModuleLoadData(ctypes.byref(module), ptx))
        self.check("cuModuleGetFunction", self.cuda.cuModuleGetFunction(
            ctypes.byref(function), module, b"linear_f32"))
        self.module, self.function = module, function

    @staticmethod
    def check(call, status):
        if status != 0:
            raise SystemExit(f"mlp_graph.py: {call} failed with CUresult {status}")

    def linear(self, x, w, b, y, relu):
        rows, inputs = x.shape
        outputs = w.shape[0]
        args = [ctypes.c_uint64(t.data_ptr()) for t in (x, w, b, y)]
        args += [ctypes.c_uint32(v) for v in (rows, inputs, outputs, int(relu))]
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check("cuLaunchKernel", self.cuda.cuLaunchKernel(
            self.function, (outputs + TILE - 1) // TILE, (rows + TILE - 1) // TILE, 1,
            TILE, TILE, 1, 0, stream, params, None))


def captured(step):
    """`step` captured as a CUDA graph (after a warm-up on a side stream, as PyTorch asks);
    the graph and its output tensor."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out


def median_per_replay(graph, batches=31, per_batch=50):
    """Median over batches of the time per replay-to-completion, in ns."""
    for _ in range(per_batch):
        graph.replay()
        torch.cuda.synchronize()
    times = []
    for _ in range(batches):
        start = time.perf_counter_ns()
        for _ in range(per_batch):
            graph.replay()
            torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - start) / per_batch)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cu", required=True, help="mlp.cu (compiled here with nvcc -ptx)")
    p.add_argument("--ours-ns", type=float, help="case 11's median per replay of our graph")
    p.add_argument("--out", help="write the figures as JSON here")
    args = p.parse_args()
    device = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = False
    with tempfile.TemporaryDirectory() as scratch:
        ptx_path = os.path.join(scratch, "mlp.ptx")
        subprocess.run(["nvcc", "-ptx", "-o", ptx_path, args.cu], check=True)
        with open(ptx_path, "rb") as f:
            ptx = f.read() + b"\0"
    x, weights, biases = parameters(device)
    driver = Driver(ptx)
    activations = [torch.empty(BATCH, layer_shape(layer)[1], device=device)
                   for layer in range(LAYERS)]

    def same_kernels():
        h = x
        for layer in range(LAYERS):
            driver.linear(h, weights[layer], biases[layer], activations[layer],
                          layer + 1 < LAYERS)
            h = activations[layer]
        return h

    def torch_layers():
        h = x
        for layer in range(LAYERS):
            h = torch.nn.functional.linear(h, weights[layer], biases[layer])
            if layer + 1 < LAYERS:
                h = torch.relu(h)
        return h

    expected = reference(x, weights, biases)
    figures = {}
    for name, step in (("same kernels", same_kernels), ("PyTorch layers", torch_layers)):
        graph, out = captured(step)
        graph.replay()
        torch.cuda.synchronize()
        error = ((out.double().cpu() - expected).abs() / expected.abs().clamp_min(1e-3)).max()
        if error > 1e-3:
            raise SystemExit(f"mlp_graph.py: {name}: output off the reference by {error:.2e}")
        figures[name] = median_per_replay(graph)
    print(f"| forward step of a {LAYERS}-layer MLP (batch {BATCH}, width {WIDTH}), replay to "
          "completion | median per replay | ours / it |")
    print("|---|---|---|")
    if args.ours_ns:
        print(f"| our runtime's graph (bench case 11) | {args.ours_ns / 1e3:.2f} us | 1.00 |")
    for name, ns in figures.items():
        ratio = f"{args.ours_ns / ns:.2f}" if args.ours_ns else "-"
        print(f"| torch.cuda.graphs, {name} | {ns / 1e3:.2f} us | {ratio} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"ours_ns": args.ours_ns, "torch_ns": figures,
                       "torch": torch.__version__}, f)


if __name__ == "__main__":
    main()
