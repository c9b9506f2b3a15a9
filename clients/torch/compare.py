"""Runs each workload with PyTorch's allocator and with this project's (through
CUDAPluggableAllocator), each run in a process of its own with the same seed and steps,
alternating which goes first, and writes the comparison as a markdown table (results.md) and
the raw records (runs.json) into --out. Exits 1 if a run failed or the two allocators'
losses, outputs or all-reduce results differ; the speed and memory figures are reported, not
judged.

The workloads (--only; all by default): micro (micro.py), train (train.py), infer (infer.py),
ddp, nccl, and mlp (mlp.py: a small MLP whose step is short enough for the allocator's cost
per call to show; its rows add the host's part of a step and the allocations per step). The
two-process workloads (ddp: train.py under torchrun with DDP; nccl: allreduce.py) need two GPUs
and are skipped with a message on a machine with fewer; each of their processes writes its own
record (rank 0 --out, rank N OUT.rankN), and the table has one set of rows per rank. Every
child runs with NVLink multicast off (MULTICAST_OFF).

    python3 compare.py [--lib path/to/libgpu_capi.so] --out results/ [--repeats 3] [--quick]
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ALLOCATORS = ("torch", "gpurt")
NAMES = {"torch": "PyTorch", "gpurt": "gpurt"}
# NVLink multicast stays off in every child, in NCCL, PyTorch's symmetric memory and NVSHMEM:
# on the machines this runs on a program that uses it can put the host's shared GPUs out of
# service. Forced, whatever the caller's environment says.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# Processes (one per GPU) of the distributed workloads.
RANKS = 2


def rank_path(path, rank):
    """Where process `rank` of a torchrun run writes its record (common.record_path)."""
    return path if rank == 0 else f"{path}.rank{rank}"


def run(script, allocator, args, extra, out, ranks=1, env_extra=None):
    """One run of the workload `script` with `allocator`: one process, or `ranks` processes
    under torchrun, with `env_extra` added to the environment (after --gpurt-env). Returns rank
    0's record, with the other ranks' records in its "other_ranks" (see rank_records), or None
    if a process failed or wrote no record."""
    path = os.path.join(out, f"{os.path.splitext(script)[0]}-{allocator}-{time.monotonic_ns()}.json")
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}"]
    command = [*launcher, os.path.join(HERE, script), "--allocator", allocator]
    command += ["--lib", args.lib] if args.lib else []
    command += ["--seed", str(args.seed), "--out", path, *extra]
    env = dict(os.environ, **MULTICAST_OFF, **(args.gpurt_env if allocator == "gpurt" else {}))
    env.update(env_extra or {})
    if ranks > 1:
        # ProcessGroupNCCL keeps the tensors of a collective alive until it completes instead
        # of calling record_stream, which a plug-in installed from Python cannot receive.
        env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
    started = time.monotonic()
    done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, env=env)
    log = os.path.join(out, "runs.log")
    with open(log, "a") as f:
        f.write(f"$ {' '.join(command)}\nexit {done.returncode} in {time.monotonic() - started:.1f} s\n")
        f.write(done.stdout[-4000:] + done.stderr[-4000:] + "\n")
    paths = [rank_path(path, rank) for rank in range(ranks)]
    if done.returncode != 0 or not all(os.path.exists(p) for p in paths):
        print(f"{script} with {allocator}: FAILED (exit {done.returncode}); see {log}")
        print(done.stderr[-2000:])
        return None
    records = []
    for p in paths:
        with open(p) as f:
            records.append(json.load(f))
    records[0]["other_ranks"] = records[1:]
    return records[0]


def rank_records(records, rank):
    """{allocator: [each run's record of process `rank`]} of runs made with ranks > 1."""
    return {a: [r if rank == 0 else r["other_ranks"][rank - 1] for r in runs]
            for a, runs in records.items()}


def paired(args, script, extra, out, ranks=1, repeats=None):
    """`repeats` (default --repeats) pairs of runs, the first allocator alternating;
    {allocator: [records]}."""
    records = {a: [] for a in ALLOCATORS}
    for repeat in range(args.repeats if repeats is None else repeats):
        order = ALLOCATORS if repeat % 2 == 0 else ALLOCATORS[::-1]
        for allocator in order:
            records[allocator].append(run(script, allocator, args, extra, out, ranks))
    return records


def all_ran(table, workload, records):
    """Whether every run of `records` wrote its records; notes a failure otherwise."""
    if None in records["torch"] + records["gpurt"]:
        table.failures.append(f"{workload}: a run failed")
        return False
    return True


@functools.lru_cache(maxsize=None)
def gpu_count():
    """This machine's CUDA GPUs (asked once)."""
    import torch  # only here: the driver itself never touches CUDA before its children

    return torch.cuda.device_count()


def has_gpus(table, workload, key, needed=RANKS):
    """Whether this machine has the `needed` GPUs; a "skipped" row and a message if not."""
    gpus = gpu_count()
    if gpus >= needed:
        return True
    table.row(workload, "skipped", f"needs {needed} GPUs, this machine has {gpus}", "", "")
    print(f"{key}: skipped (needs {needed} GPUs, found {gpus})")
    return False


def spread(values):
    """'median (min-max)' of a list of ratios."""
    if not values:
        return "n/a"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def mib(value):
    return f"{value / 2**20:,.0f} MiB"


class Table:
    """The comparison table's rows and the verdicts on identical results."""

    def __init__(self):
        self.rows, self.failures = [], []

    def row(self, workload, metric, torch_value, gpurt_value, ratio):
        self.rows.append((workload, metric, torch_value, gpurt_value, ratio))

    def ratio_row(self, workload, metric, records, value, show):
        """A metric of each run; ratios gpurt / PyTorch per pair, median and spread."""
        pairs = list(zip(records["torch"], records["gpurt"]))
        ratios = [value(g) / value(t) for t, g in pairs if value(t)]
        medians = {a: statistics.median(value(r) for r in records[a]) for a in ALLOCATORS}
        self.row(workload, metric, show(medians["torch"]), show(medians["gpurt"]), spread(ratios))

    def markdown(self):
        lines = [
            "| workload | metric | PyTorch | gpurt | gpurt / PyTorch: median (min-max over pairs) |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {' | '.join(str(cell) for cell in row)} |" for row in self.rows]
        return "\n".join(lines)


def identical(table, workload, records, key):
    """Checks every run's `key` equals the first PyTorch run's; notes the verdict."""
    reference = records["torch"][0][key]
    same = {a: all(r[key] == reference for r in records[a]) for a in ALLOCATORS}
    verdict = "identical" if all(same.values()) else "DIFFERENT"
    if not all(same.values()):
        table.failures.append(f"{workload}: {key} differ ({same})")
    count = len(reference) if isinstance(reference, list) else 1
    table.row(workload, f"{key} ({count} values, every run)", "reference", verdict, "")


def memory_rows(table, workload, records, after_warmup=False):
    table.ratio_row(workload, "peak reserved (allocator's own figure)", records,
                    lambda r: r["figures"]["peak_reserved"], mib)
    table.ratio_row(workload, "peak device memory in use (cudaMemGetInfo)", records,
                    lambda r: r["device_used_peak"], mib)
    if after_warmup:
        def later(r):
            return r["figures"]["driver_allocations"] - r["figures_after_warmup"]["driver_allocations"]
        counts = {a: [later(r) for r in records[a]] for a in ALLOCATORS}
        table.row(workload, f"driver allocations after step {records['torch'][0]['warmup']}",
                  counts["torch"], counts["gpurt"], "")
    totals = {a: [r["figures"]["driver_allocations"] for r in records[a]] for a in ALLOCATORS}
    table.row(workload, "driver allocations in all", totals["torch"], totals["gpurt"], "")


def step_time(record):
    """A training run's median step time after its warm-up steps."""
    return statistics.median(record["step_seconds"][record["warmup"]:])


def train_rows(table, workload, records):
    """train.py's rows: identical losses, step time, memory and driver allocations."""
    identical(table, workload, records, "losses")
    table.ratio_row(workload, "step time (median after warm-up)", records, step_time,
                    lambda v: f"{v * 1e3:.2f} ms")
    memory_rows(table, workload, records, after_warmup=True)


def per_step(record, key):
    """A training run's `key` of its figures, per step after warm-up: the difference between
    its final figures and those after its warm-up steps, over the steps between."""
    timed = len(record["step_seconds"]) - record["warmup"]
    return (record["figures"][key] - record["figures_after_warmup"][key]) / timed


def mlp_rows(table, workload, records):
    """mlp.py's rows: train.py's (identical losses, step time, memory and driver allocations),
    with the host's part of a step and the allocations per step after the step time."""
    identical(table, workload, records, "losses")
    table.ratio_row(workload, "step time (median after warm-up)", records, step_time,
                    lambda v: f"{v * 1e3:.2f} ms")
    table.ratio_row(workload, "host time to issue a step (median after warm-up)", records,
                    lambda r: statistics.median(r["issue_seconds"][r["warmup"]:]),
                    lambda v: f"{v * 1e3:.2f} ms")
    counts = {a: [round(per_step(r, "allocations"), 2) for r in records[a]] for a in ALLOCATORS}
    counts = {a: [int(c) if c == int(c) else c for c in values] for a, values in counts.items()}
    table.row(workload, "allocations per step after warm-up", counts["torch"], counts["gpurt"], "")
    memory_rows(table, workload, records, after_warmup=True)


def size_text(size):
    """4096 -> '4 KiB', 67108864 -> '64 MiB'."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="libgpu_capi.so to plug in instead of the gpu_runtime_torch "
                   "package's own library")
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--quick", action="store_true", help="a few steps of each (a smoke test)")
    p.add_argument("--only", default="micro,train,infer,ddp,nccl,mlp", help="workloads to run")
    p.add_argument("--distributed-repeats", type=int, default=1,
                   help="pairs of runs of the two-process workloads (ddp, nccl)")
    p.add_argument("--train-steps", type=int, help="training steps (default: train.py's)")
    p.add_argument("--mlp-steps", type=int,
                   help="mlp.py's steps (default: mlp.py's; more than its 50 warm-up steps)")
    p.add_argument("--gpurt-env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment of our allocator's runs (its tunables), repeatable")
    args = p.parse_args()
    args.gpurt_env = dict(item.split("=", 1) for item in args.gpurt_env)
    args.lib = args.lib and os.path.abspath(args.lib)
    os.makedirs(args.out, exist_ok=True)
    only = set(args.only.split(","))
    quick = args.quick
    table, raw = Table(), {}

    if "micro" in only:
        records = paired(args, "micro.py", ["--ops", "20000" if quick else "200000"], args.out)
        raw["micro"] = records
        if all_ran(table, "micro", records):
            table.ratio_row("1 micro", "time per torch.empty or del", records,
                            lambda r: r["ns_per_op"], lambda v: f"{v:,.0f} ns")

    train_options = ["--steps", "6", "--warmup", "3"] if quick else []
    if args.train_steps:
        train_options = ["--steps", str(args.train_steps)]
    if "train" in only:
        records = paired(args, "train.py", train_options, args.out)
        raw["train"] = records
        if all_ran(table, "train", records):
            first = records["torch"][0]
            name = f"2 train ({first['parameters'] / 1e6:.0f} M params, {len(first['losses'])} steps)"
            train_rows(table, name, records)

    if "infer" in only:
        extra = ["--requests", "3", "--new-tokens", "8"] if quick else []
        records = paired(args, "infer.py", extra, args.out)
        raw["infer"] = records
        if all_ran(table, "infer", records):
            name = f"3 infer ({len(records['torch'][0]['shapes'])} requests, KV cache)"
            identical(table, name, records, "outputs")
            table.ratio_row(name, "time of all requests", records,
                            lambda r: sum(r["request_seconds"]), lambda v: f"{v:.3f} s")
            memory_rows(table, name, records)

    # The two-process workloads: the same rows as a one-process workload, for each rank.
    name = f"4 train DDP x{RANKS}"
    if "ddp" in only and has_gpus(table, name, "ddp"):
        records = paired(args, "train.py", train_options, args.out, RANKS, args.distributed_repeats)
        raw["ddp"] = records
        if all_ran(table, "ddp", records):
            for rank in range(RANKS):
                train_rows(table, f"{name} (rank {rank})", rank_records(records, rank))

    name = f"5 all-reduce NCCL x{RANKS}"
    if "nccl" in only and has_gpus(table, name, "nccl"):
        extra = ["--iters", "5", "--warmup", "2"] if quick else []
        records = paired(args, "allreduce.py", extra, args.out, RANKS, args.distributed_repeats)
        raw["nccl"] = records
        if all_ran(table, "nccl", records):
            for rank in range(RANKS):
                identical(table, f"{name} (rank {rank})", rank_records(records, rank), "checksums")
            # Every rank times the same collectives: rank 0's times stand for them.
            for index, size in enumerate(entry["bytes"] for entry in records["torch"][0]["sizes"]):
                table.ratio_row(f"{name} (rank 0)", f"time per all-reduce of {size_text(size)} "
                                "(median after warm-up)", records,
                                lambda r, i=index: r["sizes"][i]["median_seconds"],
                                lambda v: f"{v * 1e6:,.1f} us")

    if "mlp" in only:
        extra = ["--steps", "6", "--warmup", "3"] if quick else []
        if args.mlp_steps:
            extra = ["--steps", str(args.mlp_steps)]
        records = paired(args, "mlp.py", extra, args.out)
        raw["mlp"] = records
        if all_ran(table, "mlp", records):
            first = records["torch"][0]
            shape = first["shape"]
            name = (f"6 mlp ({shape['layers']} x {shape['width']}, batch {shape['batch']}, "
                    f"{shape['dtype']}, {first['parameters'] / 1e6:.1f} M params, "
                    f"{len(first['losses'])} steps)")
            mlp_rows(table, name, records)

    tunables = next((r["tunables"] for runs in raw.values() for r in runs["gpurt"] if r), {})
    text = table.markdown()
    text += "\n\nOur allocator's tunables: " + (
        ", ".join(f"{k}={v}" for k, v in sorted(tunables.items())) or "defaults")
    if table.failures:
        text += "\n\nFAILED: " + "; ".join(table.failures)
    print(text)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "runs.json"), "w") as f:
        json.dump(raw, f)
    sys.exit(1 if table.failures else 0)


if __name__ == "__main__":
    main()
