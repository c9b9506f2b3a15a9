#!/usr/bin/env bash
# The replay's validation on one GPU (issue 23, step 3), from a test-hw bundle B (default
# hw-bundle) built with `cargo xtask test-hw --bundle`: clients/torch/replay_check.py records a
# PyTorch memory snapshot of the training and inference workloads and our own allocation trace
# under our allocator (the measured run), replays both with the bundled gpu-alloc-replay under
# the measured run's settings and others, and compares predicted peak reserved bytes and driver
# allocations with the measurement (target: within 2%). QUICK=1: short runs first, as a smoke
# test. Results in $OUT (default out/replay): replay-check.md, replay-check.json, the records,
# traces and logs (the snapshots and traces compressed at the end); exit status 1 when a
# prediction misses the target.
set -u
B=${B:-hw-bundle}
OUT=${OUT:-out/replay}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$OUT/log.txt"
say() { printf '%s\n' "$*" | tee -a "$log"; }
say "commit: $(cat "$B/COMMIT") $(date -u '+%F %T UTC')"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | sed 's/^/device: /' | tee -a "$log"
python3 -c 'import torch; print("torch", torch.__version__)' | tee -a "$log" || exit 2
check() {
  timeout "$1" python3 "$B/torch/replay_check.py" --lib "$B/torch/libgpu_capi.so" \
    --replay "$B/torch/gpu-alloc-replay" --out "$2" "${@:3}" >"$2.out" 2>&1
  local rc=$?
  say "replay_check $2: exit $rc"
  sed 's/^/replay: /' "$2/replay-check.md" >>"$log" 2>/dev/null
  return $rc
}
if [ "${QUICK:-0}" = 1 ]; then
  check 300 "$OUT/quick" --quick || exit $?
fi
check 540 "$OUT/full"
rc=$?
tar czf "$OUT/traces.tgz" -C "$OUT" $(cd "$OUT" && ls -d */*.trace */*.pickle 2>/dev/null) \
  && (cd "$OUT" && rm -f */*.trace */*.pickle)
exit $rc
