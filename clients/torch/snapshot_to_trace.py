"""Converts a PyTorch memory snapshot into the allocation trace format that gpu-alloc-replay
replays (docs/alloc-trace-format.md). Needs no torch: the pickle is read by an unpickler that
builds only plain containers, numbers and strings, and refuses every class.

Record a snapshot with `torch.cuda.memory._record_memory_history(max_entries=N)`, run the
program, then `torch.cuda.memory._dump_snapshot(path)` (the workloads here do it with
`--memory-snapshot PATH`). Each device's `device_traces` entries become lines: `alloc` ->
`alloc ID DEVICE STREAM SIZE` (the block's address is the ID, PyTorch's stream handles are
numbered 0, 1, ... per device in order of appearance), `free_requested` -> `free ID`, and
`segment_alloc`, `segment_free` (counted in the closing comments, to compare with the replay's
driver allocations and frees), `free_completed`, `oom` and the rest -> nothing. Frees of blocks
allocated before the trace's ring buffer starts are dropped and counted.

Usage: python3 snapshot_to_trace.py SNAPSHOT.pickle [-o TRACE] (default: standard output).
Exit status 1, with the reason, for a file that is not such a snapshot.
"""

import argparse
import io
import pickle
import sys

HEADER = "# gpu-alloc-trace 1"


class PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings, bytes, numbers, booleans and None only: a snapshot
    holds nothing else, and a pickle that names a class could run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"refused: the pickle names {module}.{name}; a memory snapshot holds only plain "
            "containers")


def load(path):
    """The snapshot at `path` as plain Python objects (SystemExit with the reason if not)."""
    try:
        with open(path, "rb") as f:
            return PlainUnpickler(io.BufferedReader(f)).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        raise SystemExit(f"snapshot_to_trace: {path}: {e}") from None


def device_traces(snapshot, path):
    """The snapshot's per-device trace lists."""
    traces = snapshot.get("device_traces") if isinstance(snapshot, dict) else None
    if not isinstance(traces, list):
        raise SystemExit(
            f"snapshot_to_trace: {path}: no `device_traces` list (was the history recorded with "
            "torch.cuda.memory._record_memory_history() before _dump_snapshot?)")
    return traces


def field(entry, name, kind, where):
    """Entry field `name`, checked to be of `kind`."""
    value = entry.get(name) if isinstance(entry, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise SystemExit(f"snapshot_to_trace: {where}: field `{name}` is {value!r}, not "
                         f"{kind.__name__}")
    return value


def convert(traces, path, out):
    """Writes the trace lines; returns the counts written in the closing comments."""
    counts = {"alloc": 0, "free": 0, "segment_alloc": 0, "segment_free": 0,
              "dropped_frees": 0, "other": 0}
    out.write(HEADER + "\n")
    for device, entries in enumerate(traces):
        if not isinstance(entries, list):
            raise SystemExit(f"snapshot_to_trace: {path}: device_traces[{device}] is not a list")
        streams = {}
        live = set()
        for index, entry in enumerate(entries):
            where = f"{path}: device_traces[{device}][{index}]"
            action = field(entry, "action", str, where)
            if action == "alloc":
                addr = field(entry, "addr", int, where)
                size = field(entry, "size", int, where)
                stream = streams.setdefault(field(entry, "stream", int, where), len(streams))
                if addr in live:
                    # The free came before the ring buffer's start: free it here.
                    out.write(f"free {addr}\n")
                if size <= 0 or addr < 0:
                    raise SystemExit(f"snapshot_to_trace: {where}: alloc of {size} bytes at "
                                     f"{addr}")
                live.add(addr)
                out.write(f"alloc {addr} {device} {stream} {size}\n")
                counts["alloc"] += 1
            elif action == "free_requested":
                addr = field(entry, "addr", int, where)
                if addr in live:
                    live.discard(addr)
                    out.write(f"free {addr}\n")
                    counts["free"] += 1
                else:
                    counts["dropped_frees"] += 1
            elif action in ("segment_alloc", "segment_free"):
                counts[action] += 1
            else:
                counts["other"] += 1
    for name, count in counts.items():
        out.write(f"# {name} {count}\n")
    return counts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("snapshot", help="the pickle _dump_snapshot wrote")
    p.add_argument("-o", "--output", help="trace file to write (default: standard output)")
    args = p.parse_args(argv)
    traces = device_traces(load(args.snapshot), args.snapshot)
    if args.output:
        with open(args.output, "w") as out:
            counts = convert(traces, args.snapshot, out)
    else:
        counts = convert(traces, args.snapshot, sys.stdout)
    print(f"snapshot_to_trace: {counts['alloc']} allocations, {counts['free']} frees, "
          f"{counts['segment_alloc']} segment allocations in PyTorch's run, "
          f"{counts['dropped_frees']} frees dropped", file=sys.stderr)


if __name__ == "__main__":
    main()
