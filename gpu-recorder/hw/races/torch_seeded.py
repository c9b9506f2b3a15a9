"""The seeded PyTorch cross-stream memory bugs, each with its fixed twin, for the recorder and
compute-sanitizer side by side (run.sh). Traces of the same programs, written by hand, are
gpu-core/tests/races/*.trace.

    python torch_seeded.py PROGRAM bug|fixed [--lib LIBRARY]
    PROGRAM: torch_no_record_stream | torch_no_wait_stream | runtime_no_foreign_mark

runtime_no_foreign_mark runs torch_no_record_stream's program on our allocator
(gpu_runtime_torch), whose record_stream hook is mark_used_on_foreign_stream. PyTorch does not
pass Tensor.record_stream on to a plug-in installed from Python, so the fixed twin also calls
gpu_runtime_torch.record_stream (without it, the "fixed" program still races on our allocator,
as the checker reported on the GPU). --lib plugs in that gpu-capi library instead of the
package's own (a test-hw bundle carries the package without its library: torch/libgpu_capi.so).
"""

import argparse

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
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("program", choices=("torch_no_record_stream", "torch_no_wait_stream",
                                        "runtime_no_foreign_mark"))
    p.add_argument("variant", choices=("bug", "fixed"))
    p.add_argument("--lib", help="runtime_no_foreign_mark: the gpu-capi library to plug in "
                   "instead of the package's own")
    args = p.parse_args()
    fixed = args.variant == "fixed"
    if args.program == "runtime_no_foreign_mark":
        import gpu_runtime_torch

        gpu_runtime_torch.enable(library=args.lib)
        no_record_stream(fixed, gpu_runtime_torch.record_stream)
    elif args.program == "torch_no_record_stream":
        no_record_stream(fixed)
    else:
        no_wait_stream(fixed)


if __name__ == "__main__":
    main()
