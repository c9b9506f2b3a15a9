"""Loads the recorder's PyTorch allocator shim into an unchanged program that imports torch.

On PYTHONPATH with GPU_RECORDER_TORCH_SHIM naming libgpu_recorder_torch.so (build.sh): when
the program imports torch, a tracker is attached to PyTorch's caching allocator as soon as its
CUDA is initialised (torch.cuda's lazy calls), so the recorder's trace has its blocks. Programs
that never import torch are untouched; a failure is one line on stderr, never an exception.
"""

import importlib.abc
import importlib.machinery
import os
import sys

_REASONS = {1: "the recorder is not loaded", 2: "the allocator is not PyTorch's native one"}


def _attach():
    try:
        import ctypes

        result = ctypes.CDLL(os.environ["GPU_RECORDER_TORCH_SHIM"]).gpu_recorder_torch_attach()
    except Exception as error:  # the program must run on whatever happens here
        result, reason = -1, str(error)
    else:
        reason = _REASONS.get(result, f"result {result}")
    if result != 0:
        print(f"gpu-recorder: PyTorch's blocks are not traced: {reason}", file=sys.stderr)


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps torch's loader so that _attach is queued after it ran."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            try:
                module.cuda._lazy_call(_attach)
            except Exception as error:
                print(f"gpu-recorder: PyTorch's blocks are not traced: {error}", file=sys.stderr)

        loader.exec_module = exec_module
        return spec


if os.environ.get("GPU_RECORDER_TORCH_SHIM"):
    sys.meta_path.insert(0, _AfterTorch())
