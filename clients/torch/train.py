"""Workload 2 (and 4 under torchrun): a GPT-style decoder trained with AdamW under bf16
autocast, with a different sequence length every step (the pattern that fragments caching
allocators). Records each step's loss and time, and the allocator's figures after warm-up and
at the end. Under torchrun (--nproc_per_node=2) each process trains its replica with DDP over
NCCL on its own GPU, with the chosen allocator installed in each process; rank 0 writes --out,
rank N writes OUT.rankN.

The allocator is installed before the process chooses its GPU: torch.cuda.set_device
initialises CUDA, after which PyTorch refuses to swap its allocator (common.py says more)."""

import random
import time

import common
import model as gpt
import torch
import torch.nn.functional as F


def main():
    p = common.parser(__doc__)
    gpt.add_model_options(p)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--min-length", type=int, default=128)
    args = p.parse_args()
    rank, local_rank, _ = common.process_place()
    distributed = local_rank is not None
    # First the allocator, while CUDA is uninitialised; then each process's own GPU, current
    # before the first allocation.
    allocator = common.Allocator(args)
    device = common.select_device(local_rank)
    common.deterministic(args.seed)
    net = gpt.build(args, device)
    parameters = sum(t.numel() for t in net.parameters())
    if distributed:
        torch.distributed.init_process_group("nccl", device_id=device)
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device.index])
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-4, weight_decay=0.1)
    schedule = random.Random(args.seed)
    data = torch.Generator().manual_seed(args.seed + rank)
    # The longest step comes first, so warm-up sees the largest shapes.
    lengths = [args.max_length] + [
        schedule.randint(args.min_length, args.max_length) for _ in range(args.steps - 1)
    ]
    losses, times, warm, driver_allocations = [], [], None, []
    for step, length in enumerate(lengths):
        tokens = torch.randint(args.vocab, (args.batch, length + 1), generator=data)
        tokens = tokens.to(device)
        started = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = net(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # waits for the step's work
        times.append(time.perf_counter() - started)
        allocator.sample_device(device.index)
        figures = allocator.figures(device.index)
        driver_allocations.append(figures["driver_allocations"])
        if step + 1 == args.warmup:
            warm = figures
    if distributed:
        torch.distributed.destroy_process_group()
    record = {
        "workload": "train-ddp" if distributed else "train",
        "rank": rank,
        "parameters": parameters,
        "lengths": lengths,
        "losses": losses,
        "step_seconds": times,
        "warmup": args.warmup,
        "figures_after_warmup": warm,
        "driver_allocations_by_step": driver_allocations,
    }
    common.write_record(args, allocator, record)


if __name__ == "__main__":
    main()
