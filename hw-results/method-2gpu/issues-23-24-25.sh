#!/usr/bin/env bash
# Issues 23, 24 and 25 on a test-hw bundle (B, default hw-bundle), in three parts that each fit
# one device call; logs go to $OUT (default out/) as each step ends, every step bounded.
#
# PART=alloc (issue 23): the replay's check on the training workload (our trace and PyTorch's
#   snapshot replayed against the measured run, and the setting predicted lowest run too), then
#   growable segments in four columns (clients/torch/segments.py: PyTorch default and
#   expandable, ours default and growable) on the KV-cache inference, then the conformance
#   suite (its growable-segments case on real virtual memory) under memcheck.
# PART=capture (issue 23): our allocation trace of the KV-cache inference with growable segments.
# PART=races (issue 25): the seeded races beside compute-sanitizer (recorder/races/run.sh; our
#   allocator's case from the bundle's gpu_runtime_torch) and the clean real programs recorded
#   and checked (recorder/clean.sh, without its sanitizer runs: PART=sanitize has them whole).
# PART=sanitize (issue 25): compute-sanitizer's slowdown on the clean real programs, every run to
#   its end on a small amount of work (recorder/sanitize.sh: native and memcheck, racecheck,
#   synccheck, memcheck --track-stream-ordered-races all; about 7 minutes on H100s).
# PART=graphs (issue 24): the hardware bench (cases 10 and 11 with their kernels compiled here),
#   the same MLP step captured by torch.cuda.graphs (clients/torch/mlp_graph.py), and the MLIR
#   programs with the graph mode against our library without it, upstream's wrappers (built
#   here from hw-upstream/, carried beside the bundle) and the hand-written floor. PART=mlir:
#   the MLIR comparison alone.
# PART=graphmem (issue 24): graphs with their own memory: the conformance suites of the CUDA
#   backend and of HIP on NVIDIA (graphs_with_own_memory among them) under memcheck, then the
#   hardware bench (case 9's scratch-block rows; cases 10 and 11 skip without their PTX).
set -u
B=${B:-hw-bundle}
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$OUT/log.txt"
say() { printf '%s\n' "$*" | tee -a "$log"; }
step() { local name=$1 limit=$2; shift 2; timeout "$limit" "$@" >"$OUT/$name.out" 2>&1; local rc=$?; say "$name: exit $rc"; return $rc; }
say "commit: $(cat "$B/COMMIT") part ${PART:-alloc} $(date -u '+%F %T UTC')"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | sed 's/^/device: /' | tee -a "$log"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)

case ${PART:-alloc} in
alloc)
  step replay-train 240 python3 "$B/torch/replay_check.py" --lib "$B/torch/libgpu_capi.so" \
    --replay "$B/torch/gpu-alloc-replay" --out "$OUT/replay" --workloads train
  sed 's/^/replay: /' "$OUT/replay/replay-check.md" >>"$log" 2>/dev/null
  rm -f "$OUT"/replay/*.trace "$OUT"/replay/*.pickle
  step segments "${SEGMENTS_LIMIT:-300}" python3 "$B/torch/segments.py" --lib "$B/torch/libgpu_capi.so" \
    --out "$OUT/segments" --only "${SEGMENTS_ONLY:-infer}" --repeats "${SEGMENTS_REPEATS:-1}"
  sed 's/^/segments: /' "$OUT/segments/segments.md" >>"$log" 2>/dev/null
  tar czf "$OUT/alloc-detail.tgz" -C "$OUT" replay segments && rm -rf "$OUT/replay" "$OUT/segments"
  step memcheck-backend_hw 120 "$sanitizer" --tool memcheck --leak-check full --error-exitcode 99 \
    "$B/tests/backend_hw" conformance --test-threads=1 --nocapture
  grep -E 'growable|ERROR SUMMARY|LEAK SUMMARY|test result|passed|FAILED' "$OUT/memcheck-backend_hw.out" | sed 's/^/memcheck-backend_hw: /' >>"$log"
  ;;
capture)
  # Our allocation trace of the KV-cache inference under growable segments, for replaying
  # the policy's variants against the measured columns without a GPU.
  GPU_RUNTIME_GROWABLE_SEGMENTS=1 GPU_RUNTIME_ALLOC_TRACE="$OUT/infer-growable.trace" step capture-infer 150 \
    python3 "$B/torch/infer.py" --allocator gpurt --lib "$B/torch/libgpu_capi.so" --out "$OUT/infer-growable.json"
  gzip -f "$OUT/infer-growable.trace"
  ;;
races)
  step races 300 env OUT="$OUT/races" LIMIT=60 bash "$B/recorder/races/run.sh"
  sed 's/^/races: /' "$OUT/races/races.md" >>"$log" 2>/dev/null
  step clean 240 env OUT="$OUT/clean" TOOLS= bash "$B/recorder/clean.sh"
  sed 's/^/clean: /' "$OUT/clean/clean.md" >>"$log" 2>/dev/null
  ;;
sanitize)
  step sanitize 570 env OUT="$OUT/sanitize" SANITIZER="$sanitizer" bash "$B/recorder/sanitize.sh"
  sed 's/^/sanitize: /' "$OUT/sanitize/sanitize.md" >>"$log" 2>/dev/null
  ;;
graphmem)
  for test in backend_hw hip_hw; do
    step "memcheck-$test" 200 "$sanitizer" --tool memcheck --leak-check full --error-exitcode 99 \
      "$B/tests/$test" conformance --test-threads=1 --nocapture
    grep -E 'graphs|ERROR SUMMARY|LEAK SUMMARY|test result|FAILED' "$OUT/memcheck-$test.out" | sed "s/^/memcheck-$test: /" >>"$log"
  done
  GIT_COMMIT=$(cat "$B/COMMIT") HW_BENCH_OUT="$OUT/bench-hw.md" step bench-hw 150 "$B/benches/hw" --bench
  grep -E '^\| 9 ' "$OUT/bench-hw.md" | sed 's/^/bench-hw: /' >>"$log"
  ;;
graphs|mlir)
  if [ "${PART}" = graphs ]; then
  nvcc -ptx -o "$OUT/forkjoin.ptx" clients/mlir/baseline/forkjoin_raw.cu >"$OUT/nvcc.out" 2>&1
  nvcc -ptx -o "$OUT/mlp.ptx" gpu-cuda-ffi/benches/hw/mlp.cu >>"$OUT/nvcc.out" 2>&1
  GIT_COMMIT=$(cat "$B/COMMIT") HW_BENCH_OUT="$OUT/bench-hw.md" \
    GPU_BENCH_FORKJOIN_PTX="$OUT/forkjoin.ptx" GPU_BENCH_MLP_PTX="$OUT/mlp.ptx" \
    step bench-hw 240 "$B/benches/hw" --bench
  ours_ns=$(awk '/^mlp-graph-replay-ns/ {print $2}' "$OUT/bench-hw.out")
  step mlp-graph 120 python3 clients/torch/mlp_graph.py --cu gpu-cuda-ffi/benches/hw/mlp.cu \
    ${ours_ns:+--ours-ns "$ours_ns"} --out "$OUT/mlp-graph.json"
  sed 's/^/mlp-graph: /' "$OUT/mlp-graph.out" >>"$log"
  fi
  # The MLIR programs: ours without and with the graph mode, upstream's wrappers, the floor.
  cuda=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  mkdir -p "$OUT/upstream"
  # Linked against the driver's stub where the toolkit has one, else the driver itself.
  for libcuda in "-L$cuda/lib64/stubs -lcuda" "-L$cuda/lib/stubs -lcuda" \
      "-L/usr/lib/x86_64-linux-gnu -l:libcuda.so.1" "-L/usr/lib64 -l:libcuda.so.1"; do
    # shellcheck disable=SC2086 # the -L and -l words
    g++ -O2 -shared -fPIC -o "$OUT/upstream/libmlir_cuda_runtime.so" hw-upstream/CudaRuntimeWrappers.cpp \
      -Ihw-upstream -I"$cuda/include" $libcuda >>"$OUT/upstream.out" 2>&1 && break
  done
  [ -f "$OUT/upstream/libmlir_cuda_runtime.so" ] || { say "upstream: did not build:"; tail -5 "$OUT/upstream.out" | sed 's/^/upstream: /' | tee -a "$log"; }
  nvcc -O2 -o "$OUT/forkjoin_raw" clients/mlir/baseline/forkjoin_raw.cu >>"$OUT/nvcc.out" 2>&1
  side() {
    local side=$1 program=$2 said; shift 2
    said=$(case $side in
      ours) GPU_RUNTIME_BACKEND=cuda timeout 60 "$B/mlir/$program" "$@" ;;
      graphs) GPU_RUNTIME_BACKEND=cuda GPU_RUNTIME_MLIR_GRAPHS=1 timeout 60 "$B/mlir/$program" "$@" ;;
      upstream) LD_LIBRARY_PATH="$OUT/upstream" timeout 60 "$B/mlir/$program" "$@" ;;
      raw) timeout 60 "$OUT/forkjoin_raw" "$@" ;;
    esac 2>&1)
    # The time lines, or what the program said when it printed none.
    printf '%s\n' "$said" | grep -E "us per iteration|FAILED|failed" | paste -sd ' ' | grep . \
      || printf '%s\n' "$said" | head -n 2 | paste -sd ' '
  }
  for round in 1 2 3; do
    for s in ours graphs upstream raw; do say "forkjoin 4096 round $round $s: $(side $s forkjoin 1000 4096)"; done
    for s in ours graphs upstream; do say "chain round $round $s: $(side $s chain 20)"; done
  done
  GPU_RUNTIME_BACKEND=cuda GPU_RUNTIME_MLIR_GRAPHS=1 step memcheck-forkjoin-graphs 120 "$sanitizer" \
    --tool memcheck --leak-check full --error-exitcode 99 "$B/mlir/forkjoin" 50 4096
  grep -E 'ERROR SUMMARY|LEAK SUMMARY|forkjoin:' "$OUT/memcheck-forkjoin-graphs.out" | sed 's/^/memcheck-forkjoin-graphs: /' >>"$log"
  rm -rf "$OUT/upstream" "$OUT/forkjoin_raw"
  ;;
esac
say "done $(date -u '+%T UTC')"
