"""What every workload shares: the command line, choosing the allocator before anything
initialises CUDA, deterministic settings, the memory figures of either allocator, the process's
place under torchrun, and the JSON record each run writes for compare.py.

A run uses PyTorch's own CUDACachingAllocator (--allocator torch) or this project's caching
allocator through PyTorch's plug-in point (--allocator gpurt): the gpu_runtime_torch package
(python/ in the repository: `pip install ./python`), with its own library or the one --lib names.

What PyTorch requires of the plug-in: `torch.cuda.memory.change_current_allocator` must run
before anything initialises CUDA in the process, or it fails with "Can't swap an already
initialized allocator". CUDA is initialised by `torch.cuda.set_device` (measured with torch
2.11: `torch.cuda.is_initialized()` is True right after `set_device(1)`), by any tensor on a
CUDA device, by the `torch.cuda.*` queries that initialise (`current_device`, `mem_get_info`,
`get_device_name`, `synchronize`, ...; `device_count`, `is_available` and `memory_stats` do
not) and by `torch.distributed.init_process_group(..., device_id=...)`. So every workload builds
its `Allocator` first and only then chooses its device (`select_device`): the plug-in is told
the device of each allocation, so it needs no current device to be set beforehand.
"""

import argparse
import json
import os
import random
import time

# cuBLAS reads this when its first handle is created: set before torch touches CUDA.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402  (after the cuBLAS setting)

def parser(description):
    """The options every workload takes; workloads add their own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--allocator", choices=("torch", "gpurt"), required=True)
    p.add_argument("--lib", help="libgpu_capi.so to plug in instead of the gpu_runtime_torch "
                   "package's own library (for --allocator gpurt)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", required=True, help="file the JSON record is written to")
    p.add_argument("--memory-snapshot", metavar="PATH",
                   help="with --allocator torch: record PyTorch's memory history and dump the "
                        "snapshot to PATH at the end (for snapshot_to_trace.py and "
                        "gpu-alloc-replay; replay_check.py uses it)")
    return p


class Allocator:
    """The allocator a run uses and its figures. Build it first, before anything initialises
    CUDA (see the module's docstring): PyTorch can swap its allocator for a plug-in only while
    CUDA is uninitialised, and gpu_runtime_torch.enable refuses to start otherwise."""

    def __init__(self, args):
        self.name = args.allocator
        self.plugin = None
        self.tunables = {}
        if self.name == "gpurt":
            import gpu_runtime_torch  # noqa: PLC0415 (only runs of our allocator need it)

            # Its defaults are the tunables for a framework that frees and re-allocates its
            # working set every step (kept cached segments, blocks of any size split, as
            # PyTorch's own allocator); GPU_RUNTIME_* variables set beforehand win.
            self.tunables = gpu_runtime_torch.enable(library=args.lib)
            self.plugin = gpu_runtime_torch
        self.device_used_peak = 0
        self.snapshot = getattr(args, "memory_snapshot", None)
        if self.snapshot:
            if self.name != "torch":
                raise SystemExit("--memory-snapshot records PyTorch's own allocator: use it "
                                 "with --allocator torch")
            # Allocation and free events only (no stack frames): a small pickle; a ring buffer
            # large enough for every event of these workloads.
            try:
                torch.cuda.memory._record_memory_history(
                    enabled="all", context=None, stacks="python", max_entries=50_000_000)
            except TypeError:  # an older signature
                torch.cuda.memory._record_memory_history(True, max_entries=50_000_000)

    def figures(self, device):
        """Reserved and allocated bytes (now and peak), driver allocations and allocation
        requests served so far ("allocations": PyTorch's `allocation.all.allocated`; ours:
        hits, cross-stream hits and misses), on the GPU of index `device`; ours adds its own
        figures (hits, misses, ...)."""
        source = torch.cuda if self.plugin is None else self.plugin
        stats = source.memory_stats(device)
        figures = {
            "allocated": stats.get("allocated_bytes.all.current", 0),
            "peak_allocated": stats.get("allocated_bytes.all.peak", 0),
            "reserved": stats.get("reserved_bytes.all.current", 0),
            "peak_reserved": stats.get("reserved_bytes.all.peak", 0),
            "driver_allocations": stats.get("segment.all.allocated", 0),
            "driver_frees": stats.get("segment.all.freed", 0),
            "allocations": stats.get("allocation.all.allocated", 0),
        }
        figures.update((name[len("gpurt."):], value) for name, value in stats.items()
                       if name.startswith("gpurt."))
        return figures

    def shut_down(self):
        """Shuts our runtime down, last thing in the run: it writes the GPU_RUNTIME_TRACE file
        (written only at shutdown, which PyTorch never asks for) and gives every byte back.
        Tensors PyTorch frees afterwards, at exit, are refused without opening a new runtime."""
        return self.plugin.shutdown()

    def sample_device(self, device):
        """Notes the device memory in use on GPU `device` (cudaMemGetInfo), whoever holds it:
        the fair comparison when a driver pool keeps memory our figures no longer count."""
        free, total = torch.cuda.mem_get_info(device)
        self.device_used_peak = max(self.device_used_peak, total - free)


def deterministic(seed):
    """Same seed, same kernels: a run's numbers depend on nothing but the seed."""
    random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def process_place():
    """This process's (rank, local_rank, world_size) under torchrun, which sets RANK,
    LOCAL_RANK and WORLD_SIZE; (0, None, 1) for a process run on its own. Reads only the
    environment, so it may come before the Allocator."""
    if "LOCAL_RANK" not in os.environ:
        return 0, None, 1
    env = os.environ
    return int(env["RANK"]), int(env["LOCAL_RANK"]), int(env["WORLD_SIZE"])


def select_device(local_rank):
    """Makes the process's GPU current (LOCAL_RANK under torchrun, else GPU 0) and returns
    it. This initialises CUDA: call it only once the Allocator is built."""
    index = 0 if local_rank is None else local_rank
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def record_path(out, rank):
    """Where a process writes its record: --out for rank 0 (and a process on its own),
    OUT.rankN for rank N (compare.py reads them there)."""
    return out if rank == 0 else f"{out}.rank{rank}"


def write_record(args, allocator, record):
    """Writes the run's JSON record with the allocator's final figures on the process's
    current GPU, to record_path(--out, record's rank)."""
    device = torch.cuda.current_device()
    torch.cuda.synchronize(device)
    allocator.sample_device(device)
    record.update(
        allocator=allocator.name,
        tunables=allocator.tunables,
        seed=args.seed,
        gpu=device,
        figures=allocator.figures(device),
        device_used_peak=allocator.device_used_peak,
        device=torch.cuda.get_device_name(device),
        torch=torch.__version__,
        finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    )
    if allocator.snapshot:
        torch.cuda.memory._dump_snapshot(allocator.snapshot)
        record["memory_snapshot"] = allocator.snapshot
    # Both traces are written at shutdown, which PyTorch never asks for.
    traced = os.environ.get("GPU_RUNTIME_TRACE") or os.environ.get("GPU_RUNTIME_ALLOC_TRACE")
    if allocator.plugin is not None and traced:
        record["trace"] = allocator.shut_down()
    with open(record_path(args.out, record.get("rank", 0)), "w") as f:
        json.dump(record, f)
