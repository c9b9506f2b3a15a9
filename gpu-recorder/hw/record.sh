#!/usr/bin/env bash
# record.sh DIR COMMAND...: runs COMMAND recorded by gpu-recorder into DIR (its
# gpu-trace.PID.trace), with the sub-allocators' blocks the recorder can be told of: PyTorch's
# caching allocator through the tracker shim (torch_blocks/, built once into $SHIM_DIR by
# torch_blocks/build.sh when torch is importable; a failed build is one line and the run goes
# on with whole-allocation footprints) and NVTX memory regions (the recorder is the NVTX
# injection library too). RECORDER names libgpu_recorder.so (default: beside this script,
# then its parent folder); PYTHON the Python with torch (default python3).
set -u
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
shift
recorder=${RECORDER:-$here/libgpu_recorder.so}
[ -f "$recorder" ] || recorder=$here/../libgpu_recorder.so
python=${PYTHON:-python3}
shim_dir=${SHIM_DIR:-$dir/../torch-shim}
mkdir -p "$dir"
shim=$shim_dir/libgpu_recorder_torch.so
if [ ! -f "$shim" ] && [ ! -f "$shim_dir/failed" ] && "$python" -c 'import torch' 2>/dev/null; then
  mkdir -p "$shim_dir"
  PYTHON=$python "$here/torch_blocks/build.sh" "$shim_dir" > "$shim_dir/build.txt" 2>&1 \
    || { touch "$shim_dir/failed"; echo "record.sh: $(head -n 1 "$shim_dir/build.txt")" >&2; }
fi
extra=()
if [ -f "$shim" ]; then
  extra+=(GPU_RECORDER_TORCH_SHIM="$shim" PYTHONPATH="$here/torch_blocks${PYTHONPATH:+:$PYTHONPATH}")
fi
exec env CUDA_INJECTION64_PATH="$recorder" NVTX_INJECTION64_PATH="$recorder" GPU_TRACE_OUT="$dir" \
  ${extra[@]+"${extra[@]}"} "$@"
