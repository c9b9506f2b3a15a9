#!/usr/bin/env bash
# The end-of-session check on two GPUs: the CUDA and HIP hardware tests (conformance with the
# peer-copy and launch-check cases), the deliberate kernel fault and reset (GPU_FAULT_TEST=1),
# memcheck on the fault test (only the intended fault may show) and on the plain tests, a short
# 16-thread stress run over both GPUs, and the pipeline example. Logs in $OUT (default out/).
set -u
B=${B:-hw-bundle}
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$OUT/log.txt"
say() { printf '%s\n' "$*" | tee -a "$log"; }
S=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
say "commit: $(cat "$B/COMMIT") $(date -u '+%F %T UTC')"
# The deliberate fault runs in a process of its own: the driver's state after it is the test.
GPU_FAULT_TEST=1 timeout 120 "$B/tests/backend_hw" --test-threads=1 --nocapture a_kernel_fault >"$OUT/fault.out" 2>&1
say "fault test: exit $?; $(grep -E '^(test result|fault test)' "$OUT/fault.out" | tr '\n' ' ')"
for t in backend_hw hip_hw hip_library; do
  timeout 120 "$B/tests/$t" --test-threads=1 --nocapture >"$OUT/$t.out" 2>&1
  say "$t: exit $?; $(grep -E '^(test result|backend |fault test)' "$OUT/$t.out" | tr '\n' ' ')"
  grep -E '^(passed|skipped|FAILED|failed) ' "$OUT/$t.out" | sed "s/^/$t: /" >>"$log"
done
GPU_FAULT_TEST=1 timeout 150 "$S" --tool memcheck --leak-check full --report-api-errors no \
  "$B/tests/backend_hw" --test-threads=1 a_kernel_fault >"$OUT/fault-memcheck.out" 2>&1
say "memcheck fault test: exit $?; $(grep -cE 'Invalid __global__ write' "$OUT/fault-memcheck.out") invalid global write(s); $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/fault-memcheck.out" | tr '\n' ' ')"
timeout 200 "$S" --tool memcheck --leak-check full --report-api-errors no --error-exitcode 99 \
  "$B/tests/backend_hw" --test-threads=1 >"$OUT/backend_hw-memcheck.out" 2>&1
say "memcheck backend_hw: exit $?; $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/backend_hw-memcheck.out" | tr '\n' ' ')"
timeout 120 "$B/examples/stress" --seconds 20 --threads 16 --scaling 0 --seed 3 >"$OUT/stress.out" 2>&1
say "stress: exit $?; $(grep -E '^soak: (16|growth|shutdown|passed|FAILED)|counted' "$OUT/stress.out" | tr '\n' ' ')"
timeout 60 "$B/examples/pipeline" >"$OUT/pipeline.out" 2>&1
say "pipeline: exit $?; $(tail -n 2 "$OUT/pipeline.out" | tr '\n' ' ')"
say "done $(date -u '+%T')"
