#!/usr/bin/env bash
# Issue 22's hot paths on a test-hw bundle (B, default hw-bundle), in two parts that each fit
# one device call. PART=bench: the CUDA backend's hardware bench (cases 1-8: alloc hit, pinned
# lookup, pools, k-way join, copies, launch, 16 threads), the MLIR fork/join program through
# our library interleaved with the same work written by hand (the floor), and the PyTorch
# small-MLP pair. PART=check: every bundled test binary, a 16-thread stress soak and memcheck
# on a short stress run (what the hot-path changes must not break). Logs go to $OUT (default
# out/) as each step ends; each step is bounded, so a hang cannot eat the lease.
set -u
B=${B:-hw-bundle}
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$OUT/log.txt"
say() { printf '%s\n' "$*" | tee -a "$log"; }
step() { local name=$1 limit=$2; shift 2; timeout "$limit" "$@" >"$OUT/$name.out" 2>&1; local rc=$?; say "$name: exit $rc"; return $rc; }
say "commit: $(cat "$B/COMMIT") part ${PART:-bench} $(date -u '+%F %T UTC')"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | sed 's/^/device: /' | tee -a "$log"

if [ "${PART:-bench}" = bench ]; then
  GIT_COMMIT=$(cat "$B/COMMIT") HW_BENCH_OUT="$OUT/bench-hw.md" step bench-hw 420 "$B/benches/hw" --bench
  # The fork/join floor: ours (the MLIR program on our library) and by hand, interleaved.
  nvcc -O2 -o "$OUT/forkjoin_raw" clients/mlir/baseline/forkjoin_raw.cu >"$OUT/nvcc.out" 2>&1
  for round in 1 2 3 4 5; do
    say "forkjoin 4096 round $round ours: $(GPU_RUNTIME_BACKEND=cuda timeout 60 "$B/mlir/forkjoin" 1000 4096 2>&1 | grep -E '^forkjoin: ok|FAILED' | paste -sd ' ')"
    say "forkjoin 4096 round $round raw: $(timeout 60 "$OUT/forkjoin_raw" 1000 4096 2>&1 | grep -vE 'elements,' | paste -sd ' ')"
  done
  rm -f "$OUT/forkjoin_raw"
  if [ -n "${TORCH_ONLY:-}" ]; then
    step torch-compare 200 python3 "$B/torch/compare.py" --lib "$B/torch/libgpu_capi.so" \
      --out "$OUT/torch" --only "$TORCH_ONLY" --repeats "${TORCH_REPEATS:-5}"
    sed 's/^/torch: /' "$OUT/torch/results.md" >>"$log" 2>/dev/null
    # One file back instead of one per run (a call returns a limited number of files).
    tar czf "$OUT/torch.tgz" -C "$OUT" torch && rm -rf "$OUT/torch"
  fi
else
  for test in "$B"/tests/*; do
    name=$(basename "$test")
    step "test-$name" 90 "$test" --test-threads=1 --nocapture
    grep -E '^(backend |passed |skipped |FAILED |failed |test result)' "$OUT/test-$name.out" | sed "s/^/$name: /" >>"$log"
  done
  step stress 90 "$B/examples/stress" --seconds 30 --threads 16 --scaling 2 --seed 1
  grep -E '^(scaling|\| (1|4|16) \||soak: (16|growth|shutdown|passed|FAILED))' "$OUT/stress.out" | sed 's/^/stress: /' >>"$log"
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
  step memcheck-stress 120 "$sanitizer" --tool memcheck --leak-check full --error-exitcode 99 \
    "$B/examples/stress" --seconds 4 --threads 4 --scaling 0 --seed 2
  grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$OUT/memcheck-stress.out" | sed 's/^/memcheck-stress: /' >>"$log"
fi
say "done $(date -u '+%T UTC')"
