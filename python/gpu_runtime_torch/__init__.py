"""The GPU runtime toolkit's caching allocator in PyTorch.

Owns the Python side of the plug-in: the allocator's options mapped to the GPU_RUNTIME_*
settings the library reads, turning it on before CUDA initialises, and its figures in PyTorch's
terms. The library itself (gpu-capi) ships inside the package as the module `_native`.

    import gpu_runtime_torch
    gpu_runtime_torch.enable()          # before anything initialises CUDA
    x = torch.ones(1 << 20, device="cuda")  # allocated by the toolkit's allocator

`enable(**options)` takes the allocator's options as keyword arguments (see `settings`),
`memory_stats(device)` gives the fields of `torch.cuda.memory_stats` the allocator can fill,
`empty_cache()` returns its wholly free cached segments to the driver, `record_stream(tensor,
stream)` does what `tensor.record_stream(stream)` does for PyTorch's own allocator (PyTorch does
not pass that call on to a plug-in), and `shutdown()` gives everything back and writes the trace
(`trace=`), last thing in a run.
"""

import ctypes
import importlib.util
import os

__all__ = [
    "enable", "settings", "memory_stats", "torch_stats", "empty_cache", "record_stream", "shutdown",
    "library_path",
]

# The settings gpu-capi reads when its runtime opens (gpu_capi::shared::config).
RELEASE_BEFORE_GROWING = "GPU_RUNTIME_RELEASE_BEFORE_GROWING"
WAIT_BEFORE_GROWING = "GPU_RUNTIME_WAIT_BEFORE_GROWING"
MAX_SPLIT_SIZE = "GPU_RUNTIME_MAX_SPLIT_SIZE"
GROWABLE_SEGMENTS = "GPU_RUNTIME_GROWABLE_SEGMENTS"
PEER_ACCESS = "GPU_RUNTIME_PEER_ACCESS"
TRACE = "GPU_RUNTIME_TRACE"

# The allocator's figures, field for field of gpu-capi's `GpurtTorchStats`.
STATS_FIELDS = (
    "allocated",
    "peak_allocated",
    "reserved",
    "peak_reserved",
    "hits",
    "cross_stream_hits",
    "misses",
    "driver_calls",
    "segment_allocations",
    "segment_frees",
    "oom_retries",
    "oom_errors",
)


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in STATS_FIELDS]


class _Report(ctypes.Structure):
    """gpu-capi's `GpurtReport`: what `gpurt_shutdown` found."""

    _fields_ = [
        ("released_objects", ctypes.c_uint64),
        ("unwaited_tokens", ctypes.c_uint64),
        ("trimmed_bytes", ctypes.c_uint64),
        ("unpinned_ranges", ctypes.c_uint64),
        ("trace_written", ctypes.c_uint32),
        ("trace_calls", ctypes.c_uint64),
        ("trace_defects", ctypes.c_uint64),
    ]


_UNSET = object()
_lib = None


def _flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return "1" if value else "0"


def settings(release_before_growing=_UNSET, wait_before_growing=_UNSET, max_split_size=_UNSET,
             peer_access=_UNSET, trace=_UNSET, growable_segments=_UNSET):
    """The GPU_RUNTIME_* settings for these options, as a dict (nothing is changed). An option
    not given keeps the environment's value if it is set, else takes the default for PyTorch:

    - release_before_growing (bool, default False): whether a cache miss returns wholly free
      cached segments to the driver before growing (False keeps them until out of memory, as
      PyTorch's own allocator does).
    - wait_before_growing (bool, default True): whether such a miss first merges free blocks
      other streams freed, the host waiting for their frees (False grows instead of waiting;
      with True, reserved memory stays bounded without any empty_cache()).
    - max_split_size (int bytes > 0, or None for no limit; default None): blocks of at least
      this size are never split (None: any block may be, PyTorch's default).
    - growable_segments (bool, default False): whether each stream's pools grow one
      reserved address range each in granules instead of allocating new segments, where the driver
      has virtual memory (PyTorch's expandable_segments).
    - peer_access (bool, default True): whether devices that can reach each other's memory do.
    - trace (path or None, default None): record the stream/event calls into this file, written
      and checked at `shutdown()`.

    Raises TypeError or ValueError naming the option for a value of the wrong type or range.
    """
    chosen = {}
    if release_before_growing is not _UNSET:
        chosen[RELEASE_BEFORE_GROWING] = _flag("release_before_growing", release_before_growing)
    if wait_before_growing is not _UNSET:
        chosen[WAIT_BEFORE_GROWING] = _flag("wait_before_growing", wait_before_growing)
    if max_split_size is not _UNSET:
        if max_split_size is None:
            chosen[MAX_SPLIT_SIZE] = "none"
        elif isinstance(max_split_size, bool) or not isinstance(max_split_size, int):
            raise TypeError(f"max_split_size must be a byte count or None, not {max_split_size!r}")
        elif max_split_size <= 0:
            raise ValueError(f"max_split_size must be positive, not {max_split_size}")
        else:
            chosen[MAX_SPLIT_SIZE] = str(max_split_size)
    if peer_access is not _UNSET:
        chosen[PEER_ACCESS] = _flag("peer_access", peer_access)
    if growable_segments is not _UNSET:
        chosen[GROWABLE_SEGMENTS] = _flag("growable_segments", growable_segments)
    if trace is not _UNSET and trace is not None:
        if not isinstance(trace, (str, os.PathLike)):
            raise TypeError(f"trace must be a path or None, not {trace!r}")
        chosen[TRACE] = os.fspath(trace)
    defaults = {RELEASE_BEFORE_GROWING: "0", WAIT_BEFORE_GROWING: "1", MAX_SPLIT_SIZE: "none",
                PEER_ACCESS: "1", GROWABLE_SEGMENTS: "0"}
    result = {name: os.environ.get(name, value) for name, value in defaults.items()}
    if TRACE in os.environ:
        result[TRACE] = os.environ[TRACE]
    result.update(chosen)
    return result


def library_path():
    """The path of the library the package carries (gpu-capi, as the module `_native`)."""
    spec = importlib.util.find_spec(__name__ + "._native")
    if spec is None or spec.origin is None:
        raise ImportError(
            f"{__name__}._native is missing: install the package's wheel (pip install ./python "
            "from the repository), or pass library= to enable()")
    return spec.origin


def _load(path):
    lib = ctypes.CDLL(path)
    lib.gpurt_open.argtypes = (ctypes.c_char_p,)
    lib.gpurt_open.restype = ctypes.c_int
    lib.gpurt_last_error.restype = ctypes.c_char_p
    lib.gpurt_torch_stats.argtypes = (ctypes.c_int, ctypes.POINTER(_Stats))
    lib.gpurt_torch_stats.restype = ctypes.c_int
    lib.gpurt_torch_empty_cache.restype = None
    lib.gpurt_torch_record_stream.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    lib.gpurt_torch_record_stream.restype = None
    lib.gpurt_shutdown.argtypes = (ctypes.POINTER(_Report),)
    lib.gpurt_shutdown.restype = ctypes.c_int
    return lib


def _last_error(lib):
    message = lib.gpurt_last_error()
    return message.decode(errors="replace") if message else "(no message)"


def enable(library=None, **options):
    """Makes the toolkit's caching allocator PyTorch's CUDA allocator, with `options` (the
    keyword arguments of `settings`). Call it before anything initialises CUDA in the process
    (`torch.cuda.set_device`, a CUDA tensor, `torch.cuda.current_device`, ...): PyTorch swaps
    its allocator only then. `library` is the path of a gpu-capi library to use instead of the
    package's own. Returns the settings used.

    Raises TypeError/ValueError for a bad option (before anything changes), ImportError without
    torch, RuntimeError when CUDA is already initialised, when the allocator was already
    enabled, or when the library cannot open its CUDA backend (the message says why)."""
    global _lib
    chosen = settings(**options)
    import torch  # noqa: PLC0415 (torch is needed from here on only)

    if _lib is not None:
        raise RuntimeError("gpu_runtime_torch.enable() was already called in this process")
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "gpu_runtime_torch.enable() must come before anything initialises CUDA in this "
            "process (torch.cuda.set_device, a CUDA tensor, torch.cuda.current_device or "
            "mem_get_info, init_process_group with device_id): PyTorch can no longer swap its "
            "allocator")
    path = os.fspath(library) if library is not None else library_path()
    previous = {name: os.environ.get(name) for name in chosen}
    os.environ.update(chosen)
    # dlopen of the same path hands PyTorch this library below: one runtime in the process.
    lib = _load(path)
    # On CUDA now: without a GPU the library would fall back to its host backend, whose memory
    # no CUDA kernel can use.
    if lib.gpurt_open(b"cuda") != 0:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        raise RuntimeError(f"gpu_runtime_torch: cannot open CUDA: {_last_error(lib)}")
    plugin = torch.cuda.memory.CUDAPluggableAllocator(path, "gpurt_torch_alloc", "gpurt_torch_free")
    torch.cuda.memory.change_current_allocator(plugin)
    _lib = lib
    return chosen


def _enabled():
    if _lib is None:
        raise RuntimeError("gpu_runtime_torch.enable() has not been called")
    return _lib


def torch_stats(raw):
    """The fields of `torch.cuda.memory_stats` that the allocator's figures (`raw`: a dict of
    STATS_FIELDS) fill, plus the allocator's own under `gpurt.`."""
    stats = {
        "allocated_bytes.all.current": raw["allocated"],
        "allocated_bytes.all.peak": raw["peak_allocated"],
        "reserved_bytes.all.current": raw["reserved"],
        "reserved_bytes.all.peak": raw["peak_reserved"],
        "allocation.all.allocated": raw["hits"] + raw["cross_stream_hits"] + raw["misses"],
        "segment.all.allocated": raw["segment_allocations"],
        "segment.all.freed": raw["segment_frees"],
        "segment.all.current": raw["segment_allocations"] - raw["segment_frees"],
        "num_device_alloc": raw["segment_allocations"],
        "num_device_free": raw["segment_frees"],
        "num_alloc_retries": raw["oom_retries"],
        "num_ooms": raw["oom_errors"],
    }
    stats.update({f"gpurt.{name}": value for name, value in raw.items()})
    return stats


def memory_stats(device=None):
    """The allocator's figures on `device` (an index or a torch.device; None: the current
    one) as `torch.cuda.memory_stats` names them (see `torch_stats`)."""
    lib = _enabled()
    if device is None:
        import torch  # noqa: PLC0415

        device = torch.cuda.current_device()
    index = device if isinstance(device, int) else device.index
    out = _Stats()
    if lib.gpurt_torch_stats(index, ctypes.byref(out)) != 0:
        raise RuntimeError(f"gpurt_torch_stats: {_last_error(lib)}")
    return torch_stats({name: getattr(out, name) for name in STATS_FIELDS})


def record_stream(tensor, stream):
    """Marks `tensor`'s memory used on `stream` (a torch.cuda.Stream) too: once freed, it is
    reused only after the work enqueued on `stream` before the free. What
    `tensor.record_stream(stream)` does for PyTorch's own allocator: PyTorch does not pass that
    call on to a plug-in installed from Python, so with this allocator call this instead (or
    too). Raises RuntimeError when the memory is no live allocation of this allocator."""
    lib = _enabled()
    before = lib.gpurt_last_error()
    lib.gpurt_torch_record_stream(tensor.data_ptr(), stream.cuda_stream)
    after = lib.gpurt_last_error()
    if after and after != before:
        raise RuntimeError(f"gpurt_torch_record_stream: {after.decode(errors='replace')}")


def empty_cache():
    """Returns the allocator's wholly free cached segments to the driver (what
    `torch.cuda.empty_cache()` does for PyTorch's own allocator; PyTorch does not pass that call
    on to a plug-in)."""
    _enabled().gpurt_torch_empty_cache()


def shutdown():
    """Shuts the allocator's runtime down, last thing in a run: gives every byte back and
    writes the trace file (`trace=`). Tensors PyTorch frees afterwards, at exit, are refused
    without opening a new runtime. Returns what the shutdown found, as a dict."""
    lib = _enabled()
    report = _Report()
    if lib.gpurt_shutdown(ctypes.byref(report)) != 0:
        raise RuntimeError(f"gpurt_shutdown: {_last_error(lib)}")
    return {name: getattr(report, name) for name, _ in _Report._fields_}
