#!/usr/bin/env bash
# Real programs that should be clean, on a GPU machine: each is run plain, recorded (record.sh:
# the recorder, PyTorch's blocks through the tracker shim, NVTX regions) and checked by
# gpu-trace-check, and under compute-sanitizer's memcheck, racecheck and synccheck. Writes
# $OUT/clean.md (per program: operations in the trace, races reported (the goal is 0), defects,
# times plain / recorded and the ratio, each sanitizer's time, slowdown and summary),
# $OUT/log.txt as it goes, and per program $OUT/NAME/ with its traces, the checker's output
# (check.txt: every race named with both lines) and each run's output; $OUT/clean-detail.tgz.
#
# Programs (each skipped with a line saying why when its framework or files are missing):
# PyTorch training (clients/torch/train.py, one GPU; the step time's median after warm-up,
# plain and recorded), DDP training (the same under torchrun on two GPUs), a JAX jit step, a
# Triton kernel, PyTorch eager steps (torch_step.py), our pipeline example, the MLIR programs
# of a test-hw bundle (our library), an IREE module. Every run is under `timeout` (LIMIT,
# default 90 s; SAN_LIMIT for a sanitizer run, default 25 s: a run cut there reports its
# slowdown as more than that); once BUDGET seconds (default 420) have passed, the remaining
# sanitizer runs are skipped, so the whole stays under about 8 minutes.
#
# Beside this script (a test-hw bundle's recorder/ folder) or named by RECORDER, CHECKER:
# libgpu_recorder.so, gpu-trace-check. TORCH_DIR (default ../torch: clients/torch), MLIR_DIR
# (../mlir), PIPELINE (../examples/pipeline), IREE_DIR (./iree), PYTHON (python3), TOOLS
# (default "memcheck racecheck synccheck"; empty: none, sanitize.sh measures them uncut), ONLY
# (names of programs to run, default all).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd)
recorder=${RECORDER:-$here/libgpu_recorder.so}
checker=${CHECKER:-$here/gpu-trace-check}
python=${PYTHON:-python3}
out=${OUT:-$here/out-clean}
limit=${LIMIT:-90}
san_limit=${SAN_LIMIT:-25}
budget=${BUDGET:-420}
tools=${TOOLS-memcheck racecheck synccheck}
# shellcheck source-path=SCRIPTDIR source=programs.sh
. "$here/programs.sh"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $gpus GPU(s): $gpu_name"
[ -f "$recorder" ] || { say "no recorder at $recorder"; exit 1; }
[ -x "$checker" ] || { say "no checker at $checker"; exit 1; }
command -v compute-sanitizer > /dev/null || { say "compute-sanitizer missing: its columns are empty"; tools=""; }

# PyTorch's allocator shim, built once before anything is timed (record.sh finds it there).
export SHIM_DIR=$out/torch-shim RECORDER=$recorder PYTHON=$python
if has torch; then
  mkdir -p "$SHIM_DIR"
  if "$here/torch_blocks/build.sh" "$SHIM_DIR" > "$SHIM_DIR/build.txt" 2>&1; then
    say "torch shim: built ($(tail -n 1 "$SHIM_DIR/build.txt"))"
  else
    touch "$SHIM_DIR/failed"
    say "torch shim: NOT built, PyTorch's blocks are not traced: $(head -n 1 "$SHIM_DIR/build.txt")"
  fi
else
  say "torch missing: the PyTorch programs are skipped"
fi

# seconds LIMIT OUTPUT COMMAND...: runs it under timeout, output to OUTPUT; sets rc, elapsed.
seconds() {
  local cap=$1 output=$2 start end
  shift 2
  start=$(date +%s.%N)
  timeout "$cap" "$@" > "$output" 2>&1
  rc=$?
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "-" }'; }
# The median step time after warm-up of train.py's JSON records (ms), or "-".
median_step() {
  "$python" - "$@" <<'PY' 2>/dev/null || echo -
import json, statistics, sys
steps = []
for path in sys.argv[1:]:
    record = json.load(open(path))
    steps += record["step_seconds"][record["warmup"]:]
print(f"{statistics.median(steps) * 1e3:.1f}" if steps else "-")
PY
}

{
  printf '| program | operations | races | defects | plain (s) | recorded (s) | ratio | step median plain / recorded (ms) |'
  for tool in $tools; do printf ' %s: s, slowdown, summary |' "$tool"; done
  printf '\n|---|---|---|---|---|---|---|---|'
  for tool in $tools; do printf -- '---|'; done
  printf '\n'
} > "$out/clean.md"

# program NAME [--all-processes] -- COMMAND...: the runs above; OUT_JSON in COMMAND's words is
# replaced by the run's own JSON path (train.py's --out).
program() {
  local name=$1 all=""
  shift
  [ "$1" = --all-processes ] && { all="--target-processes all"; shift; }
  shift
  wanted "$name" || return 0
  local dir=$out/$name
  mkdir -p "$dir/trace"
  local words=("$@")
  seconds "$limit" "$dir/plain.txt" "${words[@]//OUT_JSON/$dir/plain.json}"
  local plain=$elapsed plain_rc=$rc
  seconds "$limit" "$dir/recorded.txt" "$here/record.sh" "$dir/trace" "${words[@]//OUT_JSON/$dir/recorded.json}"
  local recorded=$elapsed recorded_rc=$rc
  "$checker" "$dir"/trace/*.trace > "$dir/check.txt" 2>&1
  local operations races defects steps="-"
  operations=$(cat "$dir"/trace/*.trace 2>/dev/null | grep -cvE '^[[:space:]]*(#|$)')
  races=$(grep -cE 'race\)|without an ordering edge\)|use after free\)|after a use on another stream\)' "$dir/check.txt")
  defects=$(grep -hoE '[0-9]+ defect\(s\)' "$dir/check.txt" | awk '{ n += $1 } END { print n + 0 }')
  if ls "$dir"/plain.json* > /dev/null 2>&1; then
    steps="$(median_step "$dir"/plain.json*) / $(median_step "$dir"/recorded.json*)"
  fi
  say "$name: plain exit $plain_rc in $plain s, recorded exit $recorded_rc in $recorded s; $operations operations in $(ls "$dir"/trace/*.trace 2>/dev/null | wc -l) trace(s); $races race(s), $defects defect(s); steps $steps ms; $(grep -h '^gpu-recorder' "$dir/recorded.txt" | sort -u | tr '\n' ' ')"
  local row="| $name | $operations | $races | $defects | $plain | $recorded | $(ratio "$plain" "$recorded") | $steps |"
  for tool in $tools; do
    if [ $(( $(date +%s) - started )) -ge "$budget" ]; then
      row="$row skipped (budget) |"
      continue
    fi
    # shellcheck disable=SC2086
    seconds "$san_limit" "$dir/$tool.txt" compute-sanitizer --tool "$tool" $all --print-limit 20 \
      "${words[@]//OUT_JSON/$dir/$tool.json}"
    local summary
    summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$dir/$tool.txt" | tail -n 1 | sed 's/^========= //')
    if [ "$rc" -eq 124 ]; then
      row="$row $elapsed, >$(ratio "$plain" "$elapsed")x, cut at ${san_limit} s |"
    else
      row="$row $elapsed, $(ratio "$plain" "$elapsed")x, ${summary:-exit $rc} |"
    fi
    say "$name $tool: exit $rc in $elapsed s; ${summary:-no summary}"
  done
  echo "$row" >> "$out/clean.md"
}

if has torch && [ -f "$torch_dir/train.py" ]; then
  train=("$torch_dir/train.py" --allocator torch --out OUT_JSON --max-length 512)
  program torch_train -- "$python" "${train[@]}" --steps 30 --warmup 10
  if [ "$gpus" -ge 2 ]; then
    program torch_ddp --all-processes -- "$python" -m torch.distributed.run --nproc_per_node=2 \
      "${train[@]}" --steps 20 --warmup 5
  else
    say "torch_ddp: skipped (needs 2 GPUs)"
  fi
  program torch_eager -- "$python" "$here/torch_step.py" eager 10
else
  say "torch training: skipped (no torch, or no train.py in $torch_dir)"
fi
if has jax; then
  # XLA's BFC pool is not annotated: its platform allocator makes each buffer an allocation.
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform \
    program jax -- "$python" "$here/jax_step.py" 10
else
  say "jax: skipped (not installed)"
fi
if has triton && has torch; then
  program triton -- "$python" "$here/triton_kernel.py"
else
  say "triton: skipped (not installed)"
fi
if [ -x "$pipeline" ]; then
  program pipeline -- "$pipeline"
else
  say "pipeline: skipped (no example at $pipeline)"
fi
# The bundle's MLIR programs lie in mlir/ beside their library folder (mlir/lib).
mlir_programs=$(find "$mlir" -maxdepth 1 -type f -perm -u+x 2>/dev/null | sort)
if [ -n "$mlir_programs" ]; then
  for binary in $mlir_programs; do
    GPU_RUNTIME_BACKEND=cuda program "mlir_$(basename "$binary")" -- "$binary" 3
  done
else
  say "mlir: skipped (no programs in $mlir)"
fi
if [ -x "$iree/iree-run-module" ] && [ -f "$iree/mlp_cuda.vmfb" ]; then
  program iree -- "$iree/iree-run-module" --device=cuda --module="$iree/mlp_cuda.vmfb" \
    --function=mlp --flagfile="$iree/mlp.flags" --flagfile="$iree/mlp.expected"
else
  say "iree: skipped (no iree-run-module and module in $iree)"
fi

tar czf "$out/clean-detail.tgz" -C "$out" --exclude clean-detail.tgz --exclude torch-shim . 2>/dev/null
say "done in $(( $(date +%s) - started )) s: $out/clean.md"
cat "$out/clean.md"
