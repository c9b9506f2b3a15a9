"""The installed gpu_runtime_torch package without a GPU, and without torch where it is absent:
it imports, checks and maps its options, carries the plug-in's library, maps the allocator's
figures to PyTorch's names, and refuses to enable after CUDA initialisation or without a CUDA
driver, leaving the environment as it was. Run: python3 python/tests/test_package.py (CI runs
it in a virtual environment with the wheel installed)."""

import ctypes
import os
import sys
import types
import unittest
from unittest import mock

import gpu_runtime_torch as gt

VARIABLES = (gt.RELEASE_BEFORE_GROWING, gt.WAIT_BEFORE_GROWING, gt.MAX_SPLIT_SIZE, gt.PEER_ACCESS,
             gt.TRACE, gt.GROWABLE_SEGMENTS)


def fake_torch(initialised):
    """A stand-in for torch with just what enable() asks of it, recording the swap."""
    torch = types.ModuleType("torch")
    swapped = []

    class Plugin:
        def __init__(self, path, alloc, free):
            self.names = (path, alloc, free)

    torch.cuda = types.SimpleNamespace(
        is_initialized=lambda: initialised,
        memory=types.SimpleNamespace(
            CUDAPluggableAllocator=Plugin,
            change_current_allocator=lambda plugin: swapped.append(plugin.names),
        ),
    )
    return torch, swapped


class CleanEnvironment(unittest.TestCase):
    """Each test starts without the package's variables and leaves the environment as it was."""

    def setUp(self):
        patcher = mock.patch.dict(os.environ, clear=False)
        patcher.start()
        self.addCleanup(patcher.stop)
        for name in VARIABLES:
            os.environ.pop(name, None)


class Settings(CleanEnvironment):
    def test_defaults_are_pytorchs_and_each_option_sets_its_variable(self):
        self.assertEqual(gt.settings(), {
            gt.RELEASE_BEFORE_GROWING: "0", gt.WAIT_BEFORE_GROWING: "1",
            gt.MAX_SPLIT_SIZE: "none", gt.PEER_ACCESS: "1", gt.GROWABLE_SEGMENTS: "0"})
        chosen = gt.settings(release_before_growing=True, wait_before_growing=False,
                             max_split_size=64 << 20, peer_access=False, trace="run.trace",
                             growable_segments=True)
        self.assertEqual(chosen, {
            gt.RELEASE_BEFORE_GROWING: "1", gt.WAIT_BEFORE_GROWING: "0",
            gt.MAX_SPLIT_SIZE: str(64 << 20), gt.PEER_ACCESS: "0", gt.TRACE: "run.trace",
            gt.GROWABLE_SEGMENTS: "1"})
        self.assertEqual(gt.settings(max_split_size=None)[gt.MAX_SPLIT_SIZE], "none")

    def test_the_environment_wins_over_defaults_and_options_over_the_environment(self):
        os.environ[gt.MAX_SPLIT_SIZE] = "1048576"
        os.environ[gt.TRACE] = "env.trace"
        self.assertEqual(gt.settings()[gt.MAX_SPLIT_SIZE], "1048576")
        self.assertEqual(gt.settings()[gt.TRACE], "env.trace")
        self.assertEqual(gt.settings(max_split_size=4096)[gt.MAX_SPLIT_SIZE], "4096")

    def test_bad_values_are_refused_naming_the_option(self):
        for options, error, name in [
            ({"release_before_growing": 1}, TypeError, "release_before_growing"),
            ({"wait_before_growing": "no"}, TypeError, "wait_before_growing"),
            ({"growable_segments": 1}, TypeError, "growable_segments"),
            ({"peer_access": "yes"}, TypeError, "peer_access"),
            ({"max_split_size": "64MiB"}, TypeError, "max_split_size"),
            ({"max_split_size": True}, TypeError, "max_split_size"),
            ({"max_split_size": 0}, ValueError, "max_split_size"),
            ({"max_split_size": -5}, ValueError, "max_split_size"),
            ({"trace": 3}, TypeError, "trace"),
        ]:
            with self.assertRaises(error) as refused:
                gt.settings(**options)
            self.assertIn(name, str(refused.exception))
        with self.assertRaises(TypeError):
            gt.settings(max_split=5)  # not an option

    def test_a_bad_option_is_refused_by_enable_before_torch_is_needed(self):
        with mock.patch.dict(sys.modules, {"torch": None}):
            with self.assertRaises(ValueError):
                gt.enable(max_split_size=0)
            with self.assertRaises(ImportError):
                gt.enable()
        self.assertFalse(any(name in os.environ for name in VARIABLES))


class Library(unittest.TestCase):
    def test_the_package_carries_the_plugin_and_its_functions(self):
        path = gt.library_path()
        self.assertTrue(os.path.isfile(path), path)
        lib = ctypes.CDLL(path)
        for symbol in ("gpurt_torch_alloc", "gpurt_torch_free", "gpurt_torch_stats",
                       "gpurt_torch_empty_cache", "gpurt_torch_record_stream", "gpurt_open",
                       "gpurt_shutdown"):
            self.assertTrue(hasattr(lib, symbol), symbol)

    def test_figures_map_to_pytorchs_names(self):
        raw = dict.fromkeys(gt.STATS_FIELDS, 0)
        raw.update(allocated=10, peak_allocated=20, reserved=30, peak_reserved=40, hits=5,
                   cross_stream_hits=2, misses=1, segment_allocations=7, segment_frees=3,
                   oom_retries=1, oom_errors=0)
        stats = gt.torch_stats(raw)
        self.assertEqual(stats["allocated_bytes.all.current"], 10)
        self.assertEqual(stats["allocated_bytes.all.peak"], 20)
        self.assertEqual(stats["reserved_bytes.all.current"], 30)
        self.assertEqual(stats["reserved_bytes.all.peak"], 40)
        self.assertEqual(stats["allocation.all.allocated"], 8)
        self.assertEqual(stats["segment.all.current"], 4)
        self.assertEqual(stats["num_alloc_retries"], 1)
        self.assertEqual(stats["gpurt.cross_stream_hits"], 2)

    def test_figures_and_cache_calls_need_enable_first(self):
        for call in (gt.memory_stats, gt.empty_cache, gt.shutdown,
                     lambda: gt.record_stream(None, None)):
            with self.assertRaises(RuntimeError) as refused:
                call()
            self.assertIn("enable()", str(refused.exception))


class Enable(CleanEnvironment):
    def test_after_cuda_initialisation_it_refuses_and_changes_nothing(self):
        torch, swapped = fake_torch(initialised=True)
        with mock.patch.dict(sys.modules, {"torch": torch}):
            with self.assertRaises(RuntimeError) as refused:
                gt.enable(max_split_size=1 << 20)
        self.assertIn("before anything initialises CUDA", str(refused.exception))
        self.assertEqual(swapped, [])
        self.assertFalse(any(name in os.environ for name in VARIABLES))

    def test_before_cuda_initialisation_it_opens_cuda_then_swaps_the_allocator(self):
        torch, swapped = fake_torch(initialised=False)
        with mock.patch.dict(sys.modules, {"torch": torch}):
            try:
                chosen = gt.enable(release_before_growing=True)
            except RuntimeError as refused:
                # No CUDA driver or GPU here: refused with the library's reason, nothing
                # swapped and the environment restored.
                self.assertIn("cannot open CUDA", str(refused))
                self.assertEqual(swapped, [])
                self.assertFalse(any(name in os.environ for name in VARIABLES))
                return
        # A GPU machine: the plug-in is the package's library, and the settings stay.
        path = gt.library_path()
        self.assertEqual(swapped, [(path, "gpurt_torch_alloc", "gpurt_torch_free")])
        self.assertEqual(os.environ[gt.RELEASE_BEFORE_GROWING], "1")
        self.assertEqual(chosen[gt.RELEASE_BEFORE_GROWING], "1")


if __name__ == "__main__":
    unittest.main(verbosity=2)
