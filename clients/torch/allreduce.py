"""Workload 5: all-reduce over NCCL through torch.distributed, one process per GPU, launched by
torchrun (python3 -m torch.distributed.run --nproc_per_node=2 allreduce.py --allocator ...).

For each size (4 KiB to 64 MiB of float32) every rank fills a tensor with small integers derived
from its rank, the seed and the element's index, so the sum over the ranks is known exactly (all
values stay far below 2**24, where float32 sums are exact). Each iteration copies that tensor
into a freshly allocated one (an allocation through the chosen allocator every time), lines the
ranks up (a one-element all-reduce waited for on the host, so the host checks of the previous
iteration cannot show up in the next one's time), sums the tensor across the ranks in place with
dist.all_reduce, times that collective with CUDA events on the current stream, and compares
every element of the result with the expected sum on the host. A
mismatch fails the run (exit 1, after the record is written). Each rank writes a JSON record
(rank 0 to --out, rank N to OUT.rankN) with the median time per size after the warm-up
iterations and a SHA-256 of each size's result, so runs with the two allocators can be compared
for identical results.

NVLink multicast must stay off on the machines this runs on: launch it with NCCL_NVLS_ENABLE=0
(compare.py and the recorder's run.sh export it); this refuses to start without it.
"""

import hashlib
import os
import statistics
import sys

import common
import numpy as np
import torch
import torch.distributed as dist

# 4 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB.
DEFAULT_SIZES = "4096,65536,1048576,16777216,67108864"
# Values are in [-SPAN/2, SPAN/2): a sum over up to 2**24 / SPAN ranks stays exact in float32.
SPAN = 1024


def values(count, rank, seed):
    """Rank `rank`'s int64 values for `count` elements (the host's reference form)."""
    index = np.arange(count, dtype=np.int64)
    return (index * 7 + seed + 13 * rank) % SPAN - SPAN // 2


def expected_sum(count, world, seed):
    """The exact all-reduce (sum) result over `world` ranks, as float32."""
    return sum(values(count, rank, seed) for rank in range(world)).astype(np.float32)


def measure(size, args, rank, world, device):
    """Times `args.warmup + args.iters` all-reduces of `size` bytes; checks each result.
    Returns the record's entry for this size."""
    count = size // 4
    source = torch.from_numpy(values(count, rank, args.seed).astype(np.float32)).to(device)
    expected = expected_sum(count, world, args.seed)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flag = torch.zeros(1, device=device)
    times, mismatches = [], 0
    for iteration in range(args.warmup + args.iters):
        buffer = source.clone()  # a new block from the allocator each iteration
        dist.all_reduce(flag)
        flag.item()  # every rank is here and its earlier work (the copy too) is done
        start.record()
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
        end.record()
        result = buffer.cpu().numpy()  # waits for the collective
        del buffer
        wrong = int(np.count_nonzero(result != expected))
        mismatches += wrong
        if wrong and mismatches == wrong:
            first = int(np.flatnonzero(result != expected)[0])
            print(f"allreduce rank {rank}: {size} B iteration {iteration}: {wrong} elements "
                  f"differ, first at {first}: {result[first]} != {expected[first]}",
                  file=sys.stderr)
        if iteration >= args.warmup:
            times.append(start.elapsed_time(end) / 1e3)
    median = statistics.median(times)
    return {
        "bytes": size,
        "seconds": times,
        "median_seconds": median,
        # The usual all-reduce bus bandwidth: 2 (n - 1) / n of the bytes cross the links.
        "bus_gbps": 2 * (world - 1) / world * size / median / 1e9,
        "mismatched_elements": mismatches,
        "sha256": hashlib.sha256(result.tobytes()).hexdigest(),  # the last iteration's
    }


def nccl_version():
    """NCCL's version as PyTorch reports it ("2.27.5"; older PyTorch gives one integer)."""
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def main():
    p = common.parser(__doc__)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="bytes per all-reduce, comma-separated")
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces per size")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size first")
    args = p.parse_args()
    rank, local_rank, world = common.process_place()
    if local_rank is None:
        raise SystemExit("allreduce.py: launch it with torchrun (python3 -m torch.distributed.run "
                         "--nproc_per_node=2 allreduce.py ...)")
    if os.environ.get("NCCL_NVLS_ENABLE") != "0":
        raise SystemExit("allreduce.py: NCCL_NVLS_ENABLE=0 must be set (NVLink multicast off)")
    sizes = [int(size) for size in args.sizes.split(",")]
    if any(size % 4 or size <= 0 for size in sizes):
        raise SystemExit(f"allreduce.py: sizes must be positive multiples of 4 bytes: {args.sizes}")
    # The allocator first, while CUDA is uninitialised; then the GPU and the process group.
    allocator = common.Allocator(args)
    device = common.select_device(local_rank)
    common.deterministic(args.seed)
    dist.init_process_group("nccl", device_id=device)
    results = [measure(size, args, rank, world, device) for size in sizes]
    dist.destroy_process_group()
    bad = sum(r["mismatched_elements"] for r in results)
    common.write_record(args, allocator, {
        "workload": "nccl",
        "rank": rank,
        "world": world,
        "nccl": nccl_version(),
        "warmup": args.warmup,
        "iters": args.iters,
        "sizes": results,
        "checksums": [r["sha256"] for r in results],
        "mismatched_elements": bad,
    })
    summary = ", ".join(f"{r['bytes'] >> 10} KiB {r['median_seconds'] * 1e6:.1f} us" for r in results)
    verdict = "every element matched" if bad == 0 else f"{bad} elements DIFFER"
    print(f"allreduce rank {rank}/{world} ({allocator.name}): {verdict}; median: {summary}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
