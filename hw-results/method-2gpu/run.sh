#!/usr/bin/env bash
# Issue 19's two-GPU runs over a test-hw bundle (B, default hw-bundle), in two parts that each
# fit one device call: PART=core (the bundle's test binaries, the stress program's scaling,
# peer tables and a 16-thread soak, compute-sanitizer on short stress runs) and PART=clients
# (PyTorch DDP and the NCCL all-reduce with each allocator, the recorder's NCCL run).
# Logs go to $OUT (default out/); each step is bounded, so a hang cannot eat the lease.
set -u
B=${B:-hw-bundle}
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$OUT/log.txt"
say() { printf '%s\n' "$*" | tee -a "$log"; }
step() { local name=$1 limit=$2; shift 2; timeout "$limit" "$@" >"$OUT/$name.out" 2>&1; local rc=$?; say "$name: exit $rc"; return $rc; }
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
say "commit: $(cat "$B/COMMIT") part ${PART:-core} $(date -u '+%F %T UTC')"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | sed 's/^/device: /' | tee -a "$log"

if [ "${PART:-core}" = memcheck ]; then
  # The stress program's short run under memcheck alone (with the leak check).
  step sanitizer-memcheck 150 "$sanitizer" --tool memcheck --leak-check full --error-exitcode 99 \
    "$B/examples/stress" --seconds 4 --threads 4 --scaling 0 --seed 2
  grep -E 'ERROR SUMMARY|LEAK SUMMARY|soak: (passed|FAILED)|peer copies, .*counted' "$OUT/sanitizer-memcheck.out" | sed "s/^/memcheck: /" >>"$log"
elif [ "${PART:-core}" = core ]; then
  for test in "$B"/tests/*; do
    name=$(basename "$test")
    step "test-$name" 120 "$test" --test-threads=1 --nocapture
    grep -E '^(backend |passed |skipped |FAILED |failed |test result)' "$OUT/test-$name.out" | sed "s/^/$name: /" >>"$log"
  done
  step stress-soak 330 "$B/examples/stress" --seconds 120 --threads 16 --scaling 2 --seed 1
  grep -E '^(\||peer|busy|soak: (16|growth|shutdown|passed|FAILED)|stress)' "$OUT/stress-soak.out" >>"$log"
  for tool in memcheck racecheck synccheck; do
    extra=(); [ "$tool" = memcheck ] && extra=(--leak-check full)
    step "sanitizer-$tool" 100 "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 99 \
      "$B/examples/stress" --seconds 4 --threads 4 --scaling 0 --seed 2
    grep -E 'ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|soak: (passed|FAILED)|peer copies, .*counted' "$OUT/sanitizer-$tool.out" | sed "s/^/$tool: /" >>"$log"
  done
else
  step torch-compare 420 python3 "$B/torch/compare.py" --lib "$B/torch/libgpu_capi.so" \
    --out "$OUT/torch" --only ddp,nccl --train-steps 60
  grep -E '^(\||FAILED|ddp|nccl)' "$OUT/torch-compare.out" >>"$log"
  mkdir -p "$OUT/recorder"
  PROGRAMS=nccl OVERHEAD=none COMMIT_FILE="$B/COMMIT" \
    step recorder-nccl 150 env OUT="$OUT/recorder" bash "$B/recorder/run.sh"
  grep -E '^(nccl|recorder)' "$OUT/recorder/log.txt" >>"$log" 2>/dev/null
fi
say "done $(date -u '+%T')"
