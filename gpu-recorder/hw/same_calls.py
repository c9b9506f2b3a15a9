"""Whether two traces hold the same stream/event calls in the same order, names aside: each
name is replaced by its order of first appearance per kind; comments, default-stream
declarations and `exit` are left out. Exit status 0 when they agree."""
import sys

ARGS = {
    "stream_create": "sd", "launch": "sd", "event_create": "ed",
    "stream_destroy": "s", "stream_synchronize": "s", "stream_query": "s",
    "event_destroy": "e", "event_synchronize": "e", "event_query": "e",
    "event_record": "es", "stream_wait_event": "se",
}


def normalized(path):
    names, rows = {}, []
    for line in open(path):
        words = line.split("#")[0].split()
        if not words or words[0] in ("stream_default", "exit"):
            continue
        row = [words[0]]
        for kind, word in zip(ARGS[words[0]], words[1:]):
            if kind != "d":
                count = sum(1 for k in names if k[0] == kind)
                word = names.setdefault((kind, word), f"{kind}{count}")
            row.append(word)
        rows.append(" ".join(row))
    return rows


a, b = normalized(sys.argv[1]), normalized(sys.argv[2])
same = a == b
print(f"same calls as the backend recorded: {'yes' if same else 'no'} ({len(a)} and {len(b)} calls)")
if not same:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            print(f"first difference at call {i + 1}: {x} | {y}")
            break
sys.exit(0 if same else 1)
