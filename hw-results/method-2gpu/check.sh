#!/usr/bin/env bash
# A check of a test-hw bundle (B, default hw-bundle) that fits one device call: every bundled
# test binary, the pipeline example, a 16-thread stress run over every GPU, and memcheck (with
# the leak check) on a short stress run and on the CUDA backend's hardware test (whose
# deliberate failing calls, out of memory and the like, are not memcheck errors: API errors
# are not reported there). Logs go to $OUT (default out/) as each step ends; each step is
# bounded, so a hang cannot eat the lease.
set -u
B=${B:-hw-bundle}
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$OUT/log.txt"
say() { printf '%s\n' "$*" | tee -a "$log"; }
step() { local name=$1 limit=$2; shift 2; timeout "$limit" "$@" >"$OUT/$name.out" 2>&1; local rc=$?; say "$name: exit $rc"; return $rc; }
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
say "commit: $(cat "$B/COMMIT") $(date -u '+%F %T UTC')"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | sed 's/^/device: /' | tee -a "$log"
for test in "$B"/tests/*; do
  name=$(basename "$test")
  step "test-$name" 90 "$test" --test-threads=1 --nocapture
  grep -E '^(backend |passed |skipped |FAILED |failed |test result)' "$OUT/test-$name.out" | sed "s/^/$name: /" >>"$log"
done
step pipeline 60 "$B/examples/pipeline"
grep -E 'defect|verified|peer' "$OUT/pipeline.out" | head -5 | sed 's/^/pipeline: /' >>"$log"
step stress 90 "$B/examples/stress" --seconds 30 --threads 16 --scaling 0 --seed 1
grep -E '^(peer|soak|stress)|failures|left' "$OUT/stress.out" | head -12 | sed 's/^/stress: /' >>"$log"
step memcheck-stress 120 "$sanitizer" --tool memcheck --leak-check full --error-exitcode 99 \
  "$B/examples/stress" --seconds 4 --threads 4 --scaling 0 --seed 2
grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$OUT/memcheck-stress.out" | sed 's/^/memcheck-stress: /' >>"$log"
step memcheck-backend 150 "$sanitizer" --tool memcheck --leak-check full --error-exitcode 99 \
  --report-api-errors no "$B/tests/backend_hw" --test-threads=1
grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck-backend.out" | sed 's/^/memcheck-backend: /' >>"$log"
