"""Workload 1: torch.empty / del from Python, mixed sizes (most small, some mid-size, a few
large), with a window of live tensors so frees come out of order. Records the time per
operation (an allocation or a free)."""

import random
import time

import common
import torch


def sizes(seed, count):
    """Byte counts: 70% of 512 B-64 KiB, 25% of 64 KiB-4 MiB, 5% of 4-64 MiB."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        draw = rng.random()
        low, high = (512, 64 << 10) if draw < 0.70 else (64 << 10, 4 << 20) if draw < 0.95 else (4 << 20, 64 << 20)
        out.append(rng.randint(low, high))
    return out


def main():
    p = common.parser(__doc__)
    p.add_argument("--ops", type=int, default=200_000)
    p.add_argument("--window", type=int, default=16)
    args = p.parse_args()
    allocator = common.Allocator(args)
    common.deterministic(args.seed)
    plan = sizes(args.seed, args.ops // 2)
    picks = random.Random(args.seed + 1)
    live = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in plan[: args.window]]
    # Warm-up pass over the plan: every size class is cached once before timing.
    for n in plan:
        live[picks.randrange(args.window)] = torch.empty(n, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    for n in plan:
        # One free (the replaced tensor) and one allocation per iteration.
        live[picks.randrange(args.window)] = torch.empty(n, dtype=torch.uint8, device="cuda")
    elapsed = time.perf_counter() - started
    del live
    common.write_record(
        args,
        allocator,
        {
            "workload": "micro",
            "operations": 2 * len(plan),
            "seconds": elapsed,
            "ns_per_op": elapsed / (2 * len(plan)) * 1e9,
        },
    )


if __name__ == "__main__":
    main()
