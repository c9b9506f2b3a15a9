#!/usr/bin/env bash
# Compiles gpu_recorder_torch.cpp against the installed torch (PYTHON, default python3) into
# DIR/libgpu_recorder_torch.so (DIR: $1, default this folder) with g++, no ninja needed; prints
# the library's path, or why it could not be built (exit 1).
# Then: GPU_RECORDER_TORCH_SHIM=THAT_PATH PYTHONPATH=THIS_FOLDER:$PYTHONPATH, beside
# CUDA_INJECTION64_PATH and GPU_TRACE_OUT, records PyTorch's blocks in any torch program.
set -u
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here}
python=${PYTHON:-python3}
mkdir -p "$dir"
flags=$("$python" - <<'PY' 2>&1
import os, torch
from torch.utils import cpp_extension as ext
try:
    includes = ext.include_paths(device_type="cuda")
except TypeError:
    includes = ext.include_paths(cuda=True)
if ext.CUDA_HOME:
    includes.append(os.path.join(ext.CUDA_HOME, "include"))
lib = os.path.join(os.path.dirname(torch.__file__), "lib")
abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
print(" ".join([f"-I{p}" for p in includes] + [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-L{lib}", f"-Wl,-rpath,{lib}"]))
PY
) || { echo "build.sh: torch's include paths not found: $(printf '%s\n' "$flags" | tail -n 1)"; exit 1; }
# shellcheck disable=SC2086
if ! g++ -O2 -std=c++17 -shared -fPIC $flags -o "$dir/libgpu_recorder_torch.so" \
    "$here/gpu_recorder_torch.cpp" -lc10_cuda -lc10 -ldl > "$dir/build.log" 2>&1; then
  echo "build.sh: compiling the PyTorch allocator shim failed (torch's headers differ?): $dir/build.log"
  tail -n 20 "$dir/build.log"
  exit 1
fi
echo "$dir/libgpu_recorder_torch.so"
