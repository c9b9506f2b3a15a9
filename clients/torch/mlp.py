"""Workload 6: a small MLP trained with AdamW, the kind of step where the allocator's cost per
call is a visible part of the step (issue 22: 0.89x of PyTorch's allocator in one sample, 2.533
against 2.264 ms). --layers Linear layers (width x width, ReLU between them, the last one
width x 10 classes), batch --batch, float32 by default (TF32 off, common.deterministic) or bf16
autocast. The data are fixed before the loop (16 batches on the GPU, cycled), so the step's own
allocations are the only ones.

Each step is timed with torch.cuda.synchronize() before and after it: step_seconds is the whole
step (the GPU's work done), issue_seconds the host's part (until the step's Python code has
returned, its work queued but not necessarily run). Records each step's loss (read after the
timing), both times, and the allocator's figures after warm-up and at the end; the allocations
per step after warm-up are their difference (figures' "allocations") over the steps timed.

The allocator is installed before the process chooses its GPU: torch.cuda.set_device
initialises CUDA, after which PyTorch refuses to swap its allocator (common.py says more)."""

import time

import common
import torch
import torch.nn.functional as F

CLASSES = 10
# Batches generated before the loop and cycled through.
BATCHES = 16


def build(args, device):
    """--layers Linear layers with ReLU between them: width x width, then width x CLASSES."""
    layers = []
    for _ in range(args.layers - 1):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(args.width, CLASSES))
    return torch.nn.Sequential(*layers).to(device)


def main():
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4, help="Linear layers (at least 1)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="float32, or bf16 autocast over float32 weights")
    args = p.parse_args()
    if not 0 < args.warmup < args.steps or args.layers < 1:
        raise SystemExit("need 0 < --warmup < --steps and --layers >= 1")
    rank, local_rank, _ = common.process_place()
    # First the allocator, while CUDA is uninitialised; then the GPU.
    allocator = common.Allocator(args)
    device = common.select_device(local_rank)
    common.deterministic(args.seed)
    net = build(args, device)
    parameters = sum(t.numel() for t in net.parameters())
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    data = torch.Generator().manual_seed(args.seed + rank)
    inputs = torch.randn((BATCHES, args.batch, args.width), generator=data).to(device)
    targets = torch.randint(CLASSES, (BATCHES, args.batch), generator=data).to(device)
    autocast = args.dtype == "bfloat16"
    losses, times, issued, warm = [], [], [], None
    for step in range(args.steps):
        x, y = inputs[step % BATCHES], targets[step % BATCHES]  # views: no allocation
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = net(x)
        loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        returned = time.perf_counter()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
        issued.append(returned - started)
        losses.append(loss.item())  # after the timing: the step's work is done
        del logits, loss
        if step + 1 == args.warmup:
            allocator.sample_device(device.index)
            warm = allocator.figures(device.index)
    record = {
        "workload": "mlp",
        "rank": rank,
        "parameters": parameters,
        "shape": {"layers": args.layers, "width": args.width, "batch": args.batch,
                  "classes": CLASSES, "dtype": args.dtype},
        "losses": losses,
        "step_seconds": times,
        "issue_seconds": issued,
        "warmup": args.warmup,
        "figures_after_warmup": warm,
    }
    common.write_record(args, allocator, record)


if __name__ == "__main__":
    main()
