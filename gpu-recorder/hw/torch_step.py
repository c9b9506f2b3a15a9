"""A PyTorch training step for the recorder: eager (with a side stream for the input copies,
as data loaders do), or replayed from a CUDA graph (torch.cuda.graphs).

    python3 torch_step.py eager|graphs STEPS [WIDTH]

Prints the mean step time over the timed steps (after 5 warm-up steps) and the final loss."""
import sys
import time

import torch

mode, steps = sys.argv[1], int(sys.argv[2])
width = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
torch.manual_seed(0)
dev = torch.device("cuda")
model = torch.nn.Sequential(
    *[m for _ in range(6) for m in (torch.nn.Linear(width, width), torch.nn.GELU())],
    torch.nn.Linear(width, 10),
).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=(mode == "graphs"))
loss_fn = torch.nn.CrossEntropyLoss()
host_x = torch.randn(512, width).pin_memory()
host_y = torch.randint(0, 10, (512,)).pin_memory()
copy_stream = torch.cuda.Stream()


def load():
    """Copies the batch on a side stream; the compute stream waits on an event."""
    with torch.cuda.stream(copy_stream):
        x = host_x.to(dev, non_blocking=True)
        y = host_y.to(dev, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record(copy_stream)
    torch.cuda.current_stream().wait_event(ready)
    x.record_stream(torch.cuda.current_stream())
    y.record_stream(torch.cuda.current_stream())
    return x, y


def step(x, y):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss


if mode == "eager":
    run = lambda: step(*load())
elif mode == "graphs":
    static_x, static_y = load()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = step(static_x, static_y)

    def run():
        x, y = load()
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        return static_loss
else:
    raise SystemExit(f"unknown mode {mode}")

for _ in range(5):
    loss = run()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(steps):
    loss = run()
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
print(f"torch {mode}: {steps} steps, width {width}, {elapsed / steps * 1e3:.3f} ms/step, loss {loss.item():.4f}")
