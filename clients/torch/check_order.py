"""Checks, without torch or a GPU, that every workload installs its allocator before anything
initialises CUDA: in each script's main(), the first `common.Allocator(...)` call comes before
the first call that initialises CUDA (`common.select_device`, `torch.cuda.set_device`,
`torch.cuda.current_device`, `torch.distributed.init_process_group`, `.to(...)`, `.cuda(...)`).
PyTorch refuses to swap its allocator once CUDA is initialised ("Can't swap an already
initialized allocator": the DDP run failed at start that way). Run by CI; exits 1 naming the
script and line of each call out of order."""

import ast
import pathlib
import sys

INITIALISING = {
    ("common", "select_device"),
    ("cuda", "set_device"),
    ("cuda", "current_device"),
    ("distributed", "init_process_group"),
    ("dist", "init_process_group"),
}


def calls_in_order(function):
    """The calls of `function`'s body in source order, as (line, owner, name)."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            found.append((node.lineno, owner_name, node.func.attr))
    return sorted(found)


def check(path):
    """Problems in one script: an initialising call before the allocator is built."""
    tree = ast.parse(path.read_text(), str(path))
    main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
    if main is None:
        return []
    calls = calls_in_order(main)
    built = next((line for line, owner, name in calls if (owner, name) == ("common", "Allocator")), None)
    if built is None:
        return []
    return [
        f"{path.name}:{line}: {owner}.{name} initialises CUDA before common.Allocator (line {built})"
        for line, owner, name in calls
        if line < built and ((owner, name) in INITIALISING or name in ("to", "cuda"))
    ]


def main():
    folder = pathlib.Path(__file__).resolve().parent
    problems = [p for script in sorted(folder.glob("*.py")) for p in check(script)]
    for problem in problems:
        print(problem)
    print(f"check_order: {len(problems)} call(s) out of order")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
