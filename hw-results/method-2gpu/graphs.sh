#!/usr/bin/env bash
# Issue 24's graphs on a test-hw bundle (B, default hw-bundle), after hot-paths.sh's two parts
# (whose bench now has cases 9 and 10: the 1,000-kernel chain, in-place updates, the fork/join
# work as a graph): the conformance suites of the CUDA backend and of HIP on NVIDIA, graph case
# included, under compute-sanitizer memcheck with leak checking, and the hand-written fork/join
# floor's variants for reference. Logs go to $OUT (default out/) as each step ends.
set -u
B=${B:-hw-bundle}
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$OUT/log.txt"
say() { printf '%s\n' "$*" | tee -a "$log"; }
step() { local name=$1 limit=$2; shift 2; timeout "$limit" "$@" >"$OUT/$name.out" 2>&1; local rc=$?; say "$name: exit $rc"; return $rc; }
say "commit: $(cat "$B/COMMIT") graphs $(date -u '+%F %T UTC')"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
for test in backend_hw hip_hw; do
  step "memcheck-$test" 240 "$sanitizer" --tool memcheck --leak-check full --error-exitcode 99 \
    "$B/tests/$test" conformance --test-threads=1 --nocapture
  grep -E 'graphs|ERROR SUMMARY|LEAK SUMMARY|test result|passed|FAILED' "$OUT/memcheck-$test.out" | sed "s/^/memcheck-$test: /" >>"$log"
done
nvcc -O2 -o "$OUT/forkjoin_raw" clients/mlir/baseline/forkjoin_raw.cu >"$OUT/nvcc.out" 2>&1
for round in 1 2 3; do
  say "forkjoin_raw round $round: $(timeout 60 "$OUT/forkjoin_raw" 1000 4096 2>&1 | grep -vE 'elements,' | paste -sd ' ')"
done
rm -f "$OUT/forkjoin_raw"
say "done $(date -u '+%T UTC')"
