"""The seeded PyTorch cross-stream memory bugs, each with its fixed twin, for the recorder and
compute-sanitizer side by side (run.sh). Traces of the same programs, written by hand, are
gpu-core/tests/races/*.trace.

    python torch_seeded.py PROGRAM bug|fixed
    PROGRAM: torch_no_record_stream | torch_no_wait_stream | runtime_no_foreign_mark

runtime_no_foreign_mark runs torch_no_record_stream's program on our allocator
(gpu_runtime_torch), whose record_stream hook is mark_used_on_foreign_stream. PyTorch does not
pass Tensor.record_stream on to a plug-in installed from Python, so the fixed twin also calls
gpu_runtime_torch.record_stream (without it, the "fixed" program still races on our allocator,
as the checker reported on the GPU).
"""

import sys

import torch


def spin(stream):
    """Keeps `stream` busy for a while, so that the racing work overlaps."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)


def no_record_stream(fixed, mark=None):
    side = torch.cuda.Stream()
    x = torch.empty(1 << 20, device="cuda").fill_(1)
    side.wait_stream(torch.cuda.current_stream())
    spin(side)
    with torch.cuda.stream(side):
        y = x * 2
    if fixed:
        x.record_stream(side)
        if mark is not None:
            mark(x, side)
    address = x.data_ptr()
    del x
    z = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    print(f"no_record_stream: z {'reuses' if z.data_ptr() == address else 'does not reuse'} x's block; y.sum() = {y.sum().item()} (expected {2 << 20})")


def no_wait_stream(fixed):
    side = torch.cuda.Stream()
    spin(torch.cuda.current_stream())
    x = torch.ones(1 << 20, device="cuda")
    if fixed:
        side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        total = x.sum()
    torch.cuda.synchronize()
    print(f"no_wait_stream: sum = {total.item()} (expected {1 << 20})")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("bug", "fixed"):
        sys.exit(__doc__)
    program, fixed = sys.argv[1], sys.argv[2] == "fixed"
    if program == "runtime_no_foreign_mark":
        import gpu_runtime_torch

        gpu_runtime_torch.enable()
        no_record_stream(fixed, gpu_runtime_torch.record_stream)
    elif program == "torch_no_record_stream":
        no_record_stream(fixed)
    elif program == "torch_no_wait_stream":
        no_wait_stream(fixed)
    else:
        sys.exit(f"unknown program {program}")


if __name__ == "__main__":
    main()
