#!/usr/bin/env bash
# Runs a test-hw bundle on a GPU machine (no Rust toolchain needed): every bundled test binary,
# then the examples, then the benchmark programs (their tables go to bench-NAME.md), then the
# test binaries again under compute-sanitizer (memcheck, leak check) where it is installed, then
# the recorder on real programs (recorder/run.sh, results in recorder/). Prints which backends ran and which were skipped, writes hw-log.txt
# (and each program's full output) into $OUT_DIR (default: beside this script), and exits
# non-zero if a test fails, the sanitizer reports an error or a leak, or a backend named in
# EXPECT (default: the bundle's EXPECT file) did not run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT_DIR:-$here}
mkdir -p "$out"
expect=${EXPECT:-$(cat "$here/EXPECT" 2>/dev/null)}
log="$out/hw-log.txt"
status=0
say() { printf '%s\n' "$*" | tee -a "$log"; }
# HIP on NVIDIA: the shim and the CUDA 11.8 runtime it needs travel in lib/.
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Each program gets at most this many seconds (a hang must not eat a GPU lease).
limit=${HW_TIMEOUT:-600}
bounded() { if command -v timeout >/dev/null 2>&1; then timeout "$limit" "$@"; else "$@"; fi; }

: > "$log"
say "commit: $(cat "$here/COMMIT")"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host: $(uname -srm)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader |
    while read -r line; do say "device: $line"; done
else
  say "device: no nvidia-smi on this machine"
fi

for test in "$here"/tests/*; do
  name=$(basename "$test")
  bounded "$test" --test-threads=1 --nocapture >"$out/$name.out" 2>&1
  rc=$?
  grep -E '^(backend |passed |skipped |FAILED |test result)' "$out/$name.out" | sed "s/^/$name: /" | tee -a "$log"
  if [ "$rc" -ne 0 ]; then say "$name: FAILED (exit $rc), see $name.out"; status=1; fi
done

for example in "$here"/examples/*; do
  name=$(basename "$example")
  bounded "$example" >"$out/example-$name.out" 2>&1
  rc=$?
  tail -n 4 "$out/example-$name.out" | sed "s/^/example $name: /" | tee -a "$log"
  if [ "$rc" -ne 0 ]; then say "example $name: FAILED (exit $rc)"; status=1; fi
done
# The examples named in HIP_EXAMPLES run again on the HIP backend (through the shim on NVIDIA).
for name in $(cat "$here/HIP_EXAMPLES" 2>/dev/null); do
  GPU_RUNTIME_BACKEND=hip bounded "$here/examples/$name" >"$out/example-$name-hip.out" 2>&1
  rc=$?
  tail -n 4 "$out/example-$name-hip.out" | sed "s/^/example $name-hip: /" | tee -a "$log"
  if [ "$rc" -ne 0 ]; then say "example $name-hip: FAILED (exit $rc)"; status=1; fi
done

for bench in "$here"/benches/*; do
  [ -e "$bench" ] || continue
  name=$(basename "$bench")
  GIT_COMMIT=$(cat "$here/COMMIT") HW_BENCH_OUT="$out/bench-$name.md" bounded "$bench" --bench >"$out/bench-$name.out" 2>&1
  rc=$?
  grep -E '^(backend |\|)' "$out/bench-$name.out" | sed "s/^/bench $name: /" | tee -a "$log"
  if [ "$rc" -ne 0 ]; then say "bench $name: FAILED (exit $rc), see bench-$name.out"; status=1; fi
done

# The PyTorch workloads (issue 12): each with PyTorch's allocator and with ours, compared.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
if [ -d "$here/torch" ]; then
  if python3 -c "import torch" >/dev/null 2>&1; then
    bounded python3 "$here/torch/compare.py" --lib "$here/torch/libgpu_capi.so" --out "$out/torch" >"$out/torch.out" 2>&1
    rc=$?
    grep -E '^(\||FAILED|ddp|nccl)' "$out/torch.out" | sed 's/^/torch: /' | tee -a "$log"
    if [ "$rc" -ne 0 ]; then say "torch: FAILED (exit $rc), see torch.out"; status=1; fi
    if [ -n "$sanitizer" ] && [ -z "${NO_SANITIZER:-}" ]; then
      # A short run of the training workload (a small model) under memcheck.
      bounded "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 99 \
        python3 "$here/torch/train.py" --allocator gpurt --lib "$here/torch/libgpu_capi.so" \
        --out "$out/torch-sanitizer.json" --steps 3 --warmup 1 --batch 2 --layers 2 \
        --max-length 128 --min-length 64 >"$out/torch.sanitizer.out" 2>&1
      rc=$?
      say "sanitizer torch train: exit $rc; $(grep -E 'ERROR SUMMARY' "$out/torch.sanitizer.out" | tr '\n' ' ')"
      if [ "$rc" -ne 0 ]; then status=1; fi
    fi
  else
    say "torch: skipped: torch not installed"
  fi
fi

# The MLIR programs (issue 11), each against our library (its lib/ folder), then under
# memcheck; `hw-results/*-mlir-*` has the comparison with upstream's wrappers.
if [ -d "$here/mlir" ]; then
  for program in "$here"/mlir/*; do
    [ -f "$program" ] && [ -x "$program" ] || continue
    name=$(basename "$program")
    GPU_RUNTIME_BACKEND=cuda bounded "$program" 20 >"$out/mlir-$name.out" 2>&1
    rc=$?
    grep -E "^$name:" "$out/mlir-$name.out" | sed 's/^/mlir: /' | tee -a "$log"
    if [ "$rc" -ne 0 ]; then say "mlir $name: FAILED (exit $rc), see mlir-$name.out"; status=1; fi
    if [ -n "$sanitizer" ] && [ -z "${NO_SANITIZER:-}" ]; then
      GPU_RUNTIME_BACKEND=cuda bounded "$sanitizer" --tool memcheck --leak-check full \
        --error-exitcode 99 "$program" 3 >"$out/mlir-$name.sanitizer.out" 2>&1
      rc=$?
      say "sanitizer mlir $name: exit $rc; $(grep -E 'ERROR SUMMARY' "$out/mlir-$name.sanitizer.out" | tr '\n' ' ')"
      if [ "$rc" -ne 0 ]; then status=1; fi
    fi
  done
else
  say "mlir: skipped: no MLIR programs in the bundle (LLVM 22 was not installed where it was built)"
fi

# The MLIR graph mode (issue 24): forkjoin and chain per iteration, interleaved over rounds,
# against our library without the mode ("ours"), with it ("graphs", GPU_RUNTIME_MLIR_GRAPHS=1),
# upstream's wrappers ("upstream", where UPSTREAM names a folder holding upstream's
# libmlir_cuda_runtime.so, built from LLVM 22's CudaRuntimeWrappers.cpp) and, for forkjoin, the
# same work written by hand ("raw", mlir-baseline/forkjoin_raw.cu, built where nvcc is).
# MLIR_ROUNDS rounds (default 3; 0 skips it).
if [ -x "$here/mlir/forkjoin" ] && [ "${MLIR_ROUNDS:-3}" -gt 0 ]; then
  raw=""
  if command -v nvcc >/dev/null 2>&1 && [ -f "$here/mlir-baseline/forkjoin_raw.cu" ]; then
    raw="$out/forkjoin_raw"
    nvcc -O2 -o "$raw" "$here/mlir-baseline/forkjoin_raw.cu" >"$out/forkjoin_raw.nvcc.out" 2>&1 || raw=""
  fi
  upstream=""
  if [ -n "${UPSTREAM:-}" ] && [ -f "$UPSTREAM/libmlir_cuda_runtime.so" ]; then upstream=$UPSTREAM; fi
  # side program iterations [elements]: the lines with the time per iteration, or what failed.
  mlir_side() {
    local side=$1 program=$2; shift 2
    case $side in
      ours) GPU_RUNTIME_BACKEND=cuda bounded "$here/mlir/$program" "$@" ;;
      graphs) GPU_RUNTIME_BACKEND=cuda GPU_RUNTIME_MLIR_GRAPHS=1 bounded "$here/mlir/$program" "$@" ;;
      upstream) LD_LIBRARY_PATH="$upstream" bounded "$here/mlir/$program" "$@" ;;
      raw) bounded "$raw" "$@" ;;
    esac 2>&1 | grep -E "us per iteration|FAILED" | paste -sd ' '
  }
  sides="ours graphs${upstream:+ upstream}"
  for round in $(seq 1 "${MLIR_ROUNDS:-3}"); do
    for side in $sides${raw:+ raw}; do
      say "mlir-graphs forkjoin 4096 round $round $side: $(mlir_side "$side" forkjoin 1000 4096)"
    done
    for side in $sides; do
      say "mlir-graphs chain round $round $side: $(mlir_side "$side" chain 20)"
    done
  done
  [ -n "$upstream" ] || say "mlir-graphs: no upstream column (set UPSTREAM=DIR holding upstream's libmlir_cuda_runtime.so)"
  [ -n "$raw" ] || say "mlir-graphs: no raw column (nvcc not found, or the floor did not build)"
fi

if [ -n "$sanitizer" ] && [ -z "${NO_SANITIZER:-}" ]; then
  for test in "$here"/tests/*; do
    name=$(basename "$test")
    bounded "$sanitizer" --tool memcheck --leak-check full --report-api-errors no --error-exitcode 99 \
      "$test" --test-threads=1 >"$out/$name.sanitizer.out" 2>&1
    rc=$?
    summary=$(grep -E 'ERROR SUMMARY|LEAK SUMMARY|Target application returned' "$out/$name.sanitizer.out" | tr '\n' ' ')
    if grep -q 'terminated before first instrumented API call' "$out/$name.sanitizer.out"; then
      # A test binary that never calls the driver (unit tests with fakes) has nothing to check.
      say "sanitizer $name: not applicable (the program makes no CUDA call)"
      continue
    fi
    say "sanitizer $name: exit $rc; ${summary:-no summary (see $name.sanitizer.out)}"
    if [ "$rc" -ne 0 ]; then status=1; fi
  done
elif [ -n "${NO_SANITIZER:-}" ]; then
  say "sanitizer: not run (NO_SANITIZER is set)"
else
  say "sanitizer: not run (compute-sanitizer not found)"
fi

if [ -f "$here/recorder/run.sh" ]; then
  # The recorder on real programs (gpu-recorder/hw/run.sh): its log lines are copied here.
  OUT="$out/recorder" PIPELINE="$here/examples/pipeline" COMMIT_FILE="$here/COMMIT" \
    bounded bash "$here/recorder/run.sh" >"$out/recorder.out" 2>&1
  rc=$?
  grep -E '^(recorder|overhead|no_cupti|[a-z_]+: )' "$out/recorder/log.txt" 2>/dev/null | sed 's/^/recorder: /' >>"$log"
  if [ "$rc" -ne 0 ]; then say "recorder: FAILED (exit $rc), see recorder.out"; status=1; fi
fi

for backend in cuda hip hsa; do
  if grep -qh "^backend $backend: ran" "$out"/*.out 2>/dev/null; then
    say "backend $backend: ran"
  elif line=$(grep -h "^backend $backend: skipped" "$out"/*.out 2>/dev/null | head -n 1) && [ -n "$line" ]; then
    say "$line"
  else
    say "backend $backend: not in this bundle"
  fi
done
for backend in ${expect//,/ }; do
  if ! grep -q "^backend $backend: ran" "$log"; then
    say "expected backend $backend did not run"
    status=1
  fi
done
say "result: $([ "$status" -eq 0 ] && echo passed || echo FAILED)"
exit "$status"
