"""Runs each workload with PyTorch's allocator and with this project's (through
CUDAPluggableAllocator), each run in a process of its own with the same seed and steps,
alternating which goes first, and writes the comparison as a markdown table (results.md) and
the raw records (runs.json) into --out. Exits 1 if a run failed or the two allocators'
losses or outputs differ; the speed and memory figures are reported, not judged.

    python3 compare.py --lib path/to/libgpu_capi.so --out results/ [--repeats 3] [--quick]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ALLOCATORS = ("torch", "gpurt")
NAMES = {"torch": "PyTorch", "gpurt": "gpurt"}


def run(script, allocator, args, extra, out, launcher=()):
    """One process: the workload `script` with `allocator`; returns its record (or None)."""
    path = os.path.join(out, f"{os.path.splitext(script)[0]}-{allocator}-{time.monotonic_ns()}.json")
    command = [*launcher, os.path.join(HERE, script), "--allocator", allocator, "--lib", args.lib]
    command += ["--seed", str(args.seed), "--out", path, *extra]
    if not launcher:
        command.insert(0, sys.executable)
    env = dict(os.environ, **(args.gpurt_env if allocator == "gpurt" else {}))
    if launcher:
        # ProcessGroupNCCL keeps the tensors of a collective alive until it completes instead
        # of calling record_stream, which a plug-in installed from Python cannot receive.
        env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
    started = time.monotonic()
    done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, env=env)
    log = os.path.join(out, "runs.log")
    with open(log, "a") as f:
        f.write(f"$ {' '.join(command)}\nexit {done.returncode} in {time.monotonic() - started:.1f} s\n")
        f.write(done.stdout[-4000:] + done.stderr[-4000:] + "\n")
    if done.returncode != 0 or not os.path.exists(path):
        print(f"{script} with {allocator}: FAILED (exit {done.returncode}); see {log}")
        print(done.stderr[-2000:])
        return None
    with open(path) as f:
        return json.load(f)


def paired(args, script, extra, out):
    """`repeats` pairs of runs, the first allocator alternating; {allocator: [records]}."""
    records = {a: [] for a in ALLOCATORS}
    for repeat in range(args.repeats):
        order = ALLOCATORS if repeat % 2 == 0 else ALLOCATORS[::-1]
        for allocator in order:
            records[allocator].append(run(script, allocator, args, extra, out))
    return records


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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, help="libgpu_capi.so")
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--quick", action="store_true", help="a few steps of each (a smoke test)")
    p.add_argument("--only", default="micro,train,infer,ddp", help="workloads to run")
    p.add_argument("--train-steps", type=int, help="training steps (default: train.py's)")
    p.add_argument("--gpurt-env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment of our allocator's runs (its tunables), repeatable")
    args = p.parse_args()
    args.gpurt_env = dict(item.split("=", 1) for item in args.gpurt_env)
    args.lib = os.path.abspath(args.lib)
    os.makedirs(args.out, exist_ok=True)
    only = set(args.only.split(","))
    quick = args.quick
    table, raw = Table(), {}

    if "micro" in only:
        records = paired(args, "micro.py", ["--ops", "20000" if quick else "200000"], args.out)
        raw["micro"] = records
        if None in records["torch"] + records["gpurt"]:
            table.failures.append("micro: a run failed")
        else:
            table.ratio_row("1 micro", "time per torch.empty or del", records,
                            lambda r: r["ns_per_op"], lambda v: f"{v:,.0f} ns")

    train_options = ["--steps", "6", "--warmup", "3"] if quick else []
    if args.train_steps:
        train_options = ["--steps", str(args.train_steps)]
    if "train" in only:
        records = paired(args, "train.py", train_options, args.out)
        raw["train"] = records
        if None in records["torch"] + records["gpurt"]:
            table.failures.append("train: a run failed")
        else:
            first = records["torch"][0]
            name = f"2 train ({first['parameters'] / 1e6:.0f} M params, {len(first['losses'])} steps)"
            identical(table, name, records, "losses")

            def step_time(r):
                return statistics.median(r["step_seconds"][r["warmup"]:])

            table.ratio_row(name, "step time (median after warm-up)", records, step_time,
                            lambda v: f"{v * 1e3:.2f} ms")
            memory_rows(table, name, records, after_warmup=True)

    if "infer" in only:
        extra = ["--requests", "3", "--new-tokens", "8"] if quick else []
        records = paired(args, "infer.py", extra, args.out)
        raw["infer"] = records
        if None in records["torch"] + records["gpurt"]:
            table.failures.append("infer: a run failed")
        else:
            name = f"3 infer ({len(records['torch'][0]['shapes'])} requests, KV cache)"
            identical(table, name, records, "outputs")
            table.ratio_row(name, "time of all requests", records,
                            lambda r: sum(r["request_seconds"]), lambda v: f"{v:.3f} s")
            memory_rows(table, name, records)

    if "ddp" in only:
        import torch  # only here: the driver itself never touches CUDA before its children

        gpus = torch.cuda.device_count()
        if gpus < 2:
            table.row("4 train DDP x2", "skipped", f"needs 2 GPUs, this machine has {gpus}", "", "")
            print(f"ddp: skipped (needs 2 GPUs, found {gpus})")
        else:
            launcher = (sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2")
            records = {a: [run("train.py", a, args, train_options, args.out, launcher)]
                       for a in ALLOCATORS}
            raw["ddp"] = records
            if None in records["torch"] + records["gpurt"]:
                table.failures.append("ddp: a run failed")
            else:
                name = "4 train DDP x2 (rank 0)"
                identical(table, name, records, "losses")
                table.ratio_row(name, "step time (median after warm-up)", records,
                                lambda r: statistics.median(r["step_seconds"][r["warmup"]:]),
                                lambda v: f"{v * 1e3:.2f} ms")

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
