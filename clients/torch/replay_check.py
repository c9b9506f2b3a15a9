"""Checks gpu-alloc-replay's predictions against measured runs on a GPU (issue 23, step 3).

For each workload (train.py, infer.py) it (1) runs it under PyTorch's allocator with its memory
history recorded (`--memory-snapshot`), (2) runs it under our allocator (`--allocator gpurt`),
the measured run, recording our own allocation trace (`GPU_RUNTIME_ALLOC_TRACE`), (3) converts
the snapshot (snapshot_to_trace.py, no torch needed), (4) replays both traces with
gpu-alloc-replay under the settings the measured run used and a few others, and (5) compares
the predicted peak reserved bytes and driver allocations with the measured run's: each within
--target (2%). It then answers a user's question: it names the configuration the replay
predicts the lowest peak for, runs the workload under it (6), and compares that prediction with
the measurement too.
Writes OUT/replay-check.md (the table) and OUT/replay-check.json; exit status 1 when a
prediction misses the target, 2 when a step fails.

Usage (from a test-hw bundle, on the GPU machine):
    python3 torch/replay_check.py --lib torch/libgpu_capi.so --replay torch/gpu-alloc-replay \\
        --out out/replay [--workloads train,infer] [--quick]
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Our allocator's tunables as gpu-capi reads them, and the replay's keys for them.
TUNABLE_KEYS = {
    "GPU_RUNTIME_RELEASE_BEFORE_GROWING": "release_before_growing",
    "GPU_RUNTIME_WAIT_BEFORE_GROWING": "wait_before_growing",
    "GPU_RUNTIME_MAX_SPLIT_SIZE": "max_split_size",
}

# Other settings the replay tries, to answer "which gives the lowest peak for this program".
CANDIDATES = {
    "default": "",
    "torch-like": "release_before_growing=0,max_split_size=none",
    "split-64MiB": "release_before_growing=0",
    "release": "max_split_size=none",
    "no-wait": "wait_before_growing=0,release_before_growing=0,max_split_size=none",
}

# AllocatorConfig::default()'s tunables, which a candidate's settings change: the runs under a
# candidate set every tunable, as the plug-in's own defaults are PyTorch-like.
ALLOCATOR_DEFAULTS = {
    "release_before_growing": "1",
    "wait_before_growing": "1",
    "max_split_size": str(64 << 20),
}

QUICK = {
    "train": ["--steps", "30", "--warmup", "5"],
    "infer": ["--requests", "8"],
}


def run(command, env=None, log=None):
    """Runs a step; exits 2 with its output's tail when it fails."""
    print("+", " ".join(command), file=sys.stderr)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if log:
        with open(log, "w") as f:
            f.write(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-4000:])
        raise SystemExit(f"replay_check: {' '.join(command[:3])} ... exited {done.returncode}")
    return done.stdout


def ours_spec(tunables):
    """The replay configuration of the settings a measured run used."""
    settings = [f"{TUNABLE_KEYS[name]}={value}" for name, value in sorted(tunables.items())
                if name in TUNABLE_KEYS]
    return "ours:" + ",".join(settings)


def replay(binary, trace, tunables):
    """gpu-alloc-replay's JSON report of `trace` under our settings and the candidates."""
    command = [binary, "--json", "--config", ours_spec(tunables)]
    for name, spec in CANDIDATES.items():
        command += ["--config", f"{name}:{spec}" if spec else name]
    return json.loads(run(command + [trace]))


def device_figures(report, name, device):
    """One configuration's figures on one device from a replay report."""
    for config in report["configs"]:
        if config["name"] == name:
            for figures in config["devices"]:
                if figures["device"] == device:
                    return figures
    raise SystemExit(f"replay_check: no figures for {name} on device {device}")


def candidate_env(spec):
    """The GPU_RUNTIME_* variables that make our allocator run under a candidate's settings."""
    settings = dict(ALLOCATOR_DEFAULTS)
    settings.update(item.split("=", 1) for item in spec.split(",") if item)
    variables = {key: name for name, key in TUNABLE_KEYS.items()}
    return {variables[key]: value for key, value in settings.items()}


def relative(predicted, measured):
    return abs(predicted - measured) / measured if measured else float(predicted != 0)


def check_workload(args, workload):
    out = args.out
    extra = QUICK[workload] if args.quick else []
    script = os.path.join(HERE, f"{workload}.py")
    snapshot = os.path.join(out, f"{workload}-snapshot.pickle")
    torch_record = os.path.join(out, f"{workload}-torch.json")
    run([sys.executable, script, "--allocator", "torch", "--memory-snapshot", snapshot,
         "--out", torch_record] + extra, log=os.path.join(out, f"{workload}-torch.out"))
    ours_trace = os.path.join(out, f"{workload}-ours.trace")
    ours_record = os.path.join(out, f"{workload}-gpurt.json")
    env = dict(os.environ, GPU_RUNTIME_ALLOC_TRACE=ours_trace)
    run([sys.executable, script, "--allocator", "gpurt", "--lib", args.lib, "--out",
         ours_record] + extra, env=env, log=os.path.join(out, f"{workload}-gpurt.out"))
    torch_trace = os.path.join(out, f"{workload}-torch.trace")
    run([sys.executable, os.path.join(HERE, "snapshot_to_trace.py"), snapshot, "-o",
         torch_trace])
    with open(ours_record) as f:
        measured_record = json.load(f)
    device = measured_record["gpu"]
    measured = measured_record["figures"]
    tunables = measured_record.get("tunables", {})
    rows = []
    figures_of = {}
    for source, trace in (("PyTorch snapshot", torch_trace), ("our recorded trace", ours_trace)):
        report = replay(args.replay, trace, tunables)
        ours = device_figures(report, "ours", device)
        errors = {
            "peak_reserved": relative(ours["peak_reserved"], measured["peak_reserved"]),
            "driver_allocations": relative(ours["driver_allocations"],
                                           measured["driver_allocations"]),
        }
        lowest = min(report["configs"],
                     key=lambda c: device_figures(report, c["name"], device)["peak_reserved"])
        rows.append({
            "workload": workload,
            "source": source,
            "events": report["events"],
            "measured": {k: measured[k] for k in ("peak_reserved", "driver_allocations")},
            "predicted": {k: ours[k] for k in ("peak_reserved", "driver_allocations")},
            "errors": errors,
            "within_target": all(e <= args.target for e in errors.values()),
            "lowest_peak": {
                "config": lowest["name"],
                "peak_reserved": device_figures(report, lowest["name"], device)["peak_reserved"],
            },
            "configs": {c["name"]: device_figures(report, c["name"], device)
                        for c in report["configs"]},
        })
        figures_of[source] = rows[-1]
    # The answer, checked: the workload run under the setting predicted lowest for our trace.
    answer = figures_of["our recorded trace"]
    name = answer["lowest_peak"]["config"]
    if name in CANDIDATES:
        record = os.path.join(out, f"{workload}-lowest.json")
        env = dict(os.environ, **candidate_env(CANDIDATES[name]))
        run([sys.executable, script, "--allocator", "gpurt", "--lib", args.lib, "--out",
             record] + extra, env=env, log=os.path.join(out, f"{workload}-lowest.out"))
        with open(record) as f:
            lowest_measured = json.load(f)["figures"]
        predicted = answer["configs"][name]
        answer["lowest_peak"]["measured"] = {
            k: lowest_measured[k] for k in ("peak_reserved", "driver_allocations")}
        answer["lowest_peak"]["errors"] = {
            k: relative(predicted[k], lowest_measured[k])
            for k in ("peak_reserved", "driver_allocations")}
    return rows


def write_table(rows, path, target):
    mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
    lines = [
        f"Replay against measurement (target: within {target:.0%}); settings: our run's",
        "",
        "| workload | trace | events | peak reserved measured / predicted (error) | "
        "driver allocations measured / predicted (error) | within target | lowest predicted "
        "peak |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m, p, e = r["measured"], r["predicted"], r["errors"]
        lines.append(
            f"| {r['workload']} | {r['source']} | {r['events']} | {mib(m['peak_reserved'])} / "
            f"{mib(p['peak_reserved'])} ({e['peak_reserved']:.2%}) | "
            f"{m['driver_allocations']} / {p['driver_allocations']} "
            f"({e['driver_allocations']:.2%}) | {'yes' if r['within_target'] else 'NO'} | "
            f"{r['lowest_peak']['config']}: {mib(r['lowest_peak']['peak_reserved'])} |")
    lines += ["", "The lowest predicted peak, run on the GPU (our recorded trace's prediction "
              "against the measurement):", ""]
    for r in rows:
        lowest = r["lowest_peak"]
        if "measured" in lowest:
            predicted = r["configs"][lowest["config"]]
            m, e = lowest["measured"], lowest["errors"]
            lines.append(
                f"- {r['workload']}: `{lowest['config']}`: peak reserved predicted "
                f"{mib(predicted['peak_reserved'])}, measured {mib(m['peak_reserved'])} "
                f"({e['peak_reserved']:.2%}); driver allocations predicted "
                f"{predicted['driver_allocations']}, measured {m['driver_allocations']} "
                f"({e['driver_allocations']:.2%}); against the run's own settings: measured "
                f"{mib(r['measured']['peak_reserved'])}")
    lines += ["", "Every configuration's predicted peak reserved (MiB):", ""]
    for r in rows:
        configs = ", ".join(f"{name} {c['peak_reserved'] / 2**20:.1f}"
                            for name, c in r["configs"].items())
        lines.append(f"- {r['workload']}, {r['source']}: {configs}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", required=True, help="libgpu_capi.so")
    p.add_argument("--replay", required=True, help="the gpu-alloc-replay binary")
    p.add_argument("--out", required=True, help="folder for the records, traces and table")
    p.add_argument("--workloads", default="train,infer")
    p.add_argument("--target", type=float, default=0.02)
    p.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for workload in args.workloads.split(","):
        if workload not in QUICK:
            raise SystemExit(f"replay_check: unknown workload {workload!r} (train, infer)")
        rows += check_workload(args, workload)
    with open(os.path.join(args.out, "replay-check.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(write_table(rows, os.path.join(args.out, "replay-check.md"), args.target))
    if not all(r["within_target"] for r in rows):
        print("replay_check: FAILED: a prediction missed the target", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
