"""Growable segments beside PyTorch's expandable segments (issue 23, step 2): each workload in
four columns, each run a process of its own with the same seed, the column order rotating
between repeats: PyTorch's allocator by default and with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, ours by default and with
GPU_RUNTIME_GROWABLE_SEGMENTS=1. Writes --out/segments.md (the table) and segments.json (every
record), and prints the table. Exits 1 if a run failed or the outputs differ between any two
runs; the memory and time figures are reported against the targets (peak reserved of our
growable segments <= PyTorch expandable and <= 0.85x PyTorch's default; time <= 1.0x PyTorch's
better configuration), not judged by the exit status.

The workloads (--only; both by default): infer (infer.py: a KV cache grown token by token, over
requests of varied batch sizes and prompt lengths, long and short interleaved) and train
(train.py: a different sequence length every step).

    python3 segments.py [--lib path/to/libgpu_capi.so] --out results/ [--repeats 3] [--quick]
"""

import argparse
import json
import os
import statistics
import sys

import compare

# (column, allocator, environment of its runs)
COLUMNS = (
    ("PyTorch default", "torch", {}),
    ("PyTorch expandable", "torch", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ("ours default", "gpurt", {}),
    ("ours growable", "gpurt", {"GPU_RUNTIME_GROWABLE_SEGMENTS": "1"}),
)
GROWABLE, TORCH_DEFAULT, TORCH_EXPANDABLE = "ours growable", "PyTorch default", "PyTorch expandable"

# workload: (script, its options for a quick run, the record's key that must be identical,
# the record's time in seconds)
WORKLOADS = {
    "infer": ("infer.py", ["--requests", "4", "--new-tokens", "8"], "outputs",
              lambda r: sum(r["request_seconds"])),
    "train": ("train.py", ["--steps", "8", "--warmup", "3"], "losses",
              lambda r: statistics.median(r["step_seconds"][r["warmup"]:])),
}


def runs(args, workload):
    """{column: [records]}: --repeats runs of each column, the order rotating."""
    script, quick, _, _ = WORKLOADS[workload]
    extra = quick if args.quick else []
    records = {name: [] for name, _, _ in COLUMNS}
    for repeat in range(args.repeats):
        shift = repeat % len(COLUMNS)
        for name, allocator, env in COLUMNS[shift:] + COLUMNS[:shift]:
            records[name].append(
                compare.run(script, allocator, args, extra, args.out, env_extra=env))
    return records


def median_of(records, value):
    return statistics.median(value(r) for r in records)


def table(workload, records, failures):
    """The workload's rows (one per figure, a column per configuration) and its ratios against
    the targets (none when a run failed)."""
    _, _, key, seconds = WORKLOADS[workload]
    every = [r for runs_ in records.values() for r in runs_]
    if None in every:
        failures.append(f"{workload}: a run failed")
        return [f"| {workload} | a run failed (see runs.log) |" + " |" * len(COLUMNS)], {}
    reference = every[0][key]
    if any(r[key] != reference for r in every):
        failures.append(f"{workload}: {key} differ between runs")
    figures = {
        "peak reserved (MiB)": lambda r: r["figures"]["peak_reserved"] / 2**20,
        "peak device memory in use, cudaMemGetInfo (MiB)": lambda r: r["device_used_peak"] / 2**20,
        "driver allocations": lambda r: r["figures"]["driver_allocations"],
        "time (s; infer: all requests, train: median step)": seconds,
    }
    rows = []
    for label, value in figures.items():
        cells = [f"{median_of(records[name], value):,.3f}".rstrip("0").rstrip(".")
                 for name, _, _ in COLUMNS]
        rows.append(f"| {workload} | {label} | " + " | ".join(cells) + " |")
    same = "identical" if not any(r[key] != reference for r in every) else "DIFFERENT"
    rows.append(f"| {workload} | {key} ({len(every)} runs) | " + " | ".join([same] * len(COLUMNS))
                + " |")
    return rows, {
        "growable / PyTorch expandable, peak reserved (target <= 1.0)": ratio(
            records, GROWABLE, TORCH_EXPANDABLE, figures["peak reserved (MiB)"]),
        "growable / PyTorch default, peak reserved (target <= 0.85)": ratio(
            records, GROWABLE, TORCH_DEFAULT, figures["peak reserved (MiB)"]),
        "growable / PyTorch's better time (target <= 1.0)": (
            median_of(records[GROWABLE], seconds)
            / min(median_of(records[TORCH_DEFAULT], seconds),
                  median_of(records[TORCH_EXPANDABLE], seconds))),
    }


def ratio(records, over, under, value):
    return median_of(records[over], value) / median_of(records[under], value)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="libgpu_capi.so to plug in instead of the gpu_runtime_torch "
                   "package's own library")
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--quick", action="store_true", help="a few steps of each (a smoke test)")
    p.add_argument("--only", default="infer,train", help="workloads to run")
    args = p.parse_args()
    args.gpurt_env = {}
    args.lib = args.lib and os.path.abspath(args.lib)
    os.makedirs(args.out, exist_ok=True)
    lines = ["| workload | figure (median of runs) | "
             + " | ".join(name for name, _, _ in COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    verdicts, raw, failures = [], {}, []
    for workload in args.only.split(","):
        if workload not in WORKLOADS:
            raise SystemExit(f"segments.py: unknown workload {workload!r}; "
                             f"known: {', '.join(WORKLOADS)}")
        raw[workload] = runs(args, workload)
        rows, ratios = table(workload, raw[workload], failures)
        lines += rows
        verdicts += [f"- {workload}: {name}: {value:.3f}" for name, value in ratios.items()]
    text = "\n".join(lines + [""] + verdicts)
    if failures:
        text += "\n\nFAILED: " + "; ".join(failures)
    print(text)
    with open(os.path.join(args.out, "segments.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "segments.json"), "w") as f:
        json.dump(raw, f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
