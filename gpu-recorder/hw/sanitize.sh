#!/usr/bin/env bash
# compute-sanitizer's slowdown on the clean real programs (issue 25), uncut: each program that
# clean.sh records, with a small fixed amount of work, run natively and under each tool (memcheck,
# racecheck, synccheck, and memcheck --track-stream-ordered-races all), every run to its end.
# Writes $OUT/sanitize.md (per program: the work, the native time, and per tool its time and
# ratio to the native run, with what the tool reported when it was not clean), $OUT/log.txt as
# it goes, each run's output under $OUT/NAME/, and $OUT/sanitize-detail.tgz.
#
# Times: every run is timed with the wall clock around the whole process (start-up included);
# the ratio ("x") is of those wall times. Where the program prints its own time per step, that
# is reported too ("step"), with its own ratio: train.py's median step after warm-up (over both
# ranks under DDP), torch_step.py's and jax_step.py's mean of the timed steps, the MLIR
# programs' time per iteration after the first, the pipeline example's one run. Each program
# runs once natively untimed first, so that no timed run pays for a cold file cache or a first
# JIT compilation (Triton's kernel cache, the driver's PTX cache).
#
# The work, sized so that the whole table takes about 7 minutes on one H100 (two GPUs for DDP):
# train.py (clients/torch, PyTorch's allocator) TRAIN_STEPS steps (default 3, the first one
# warm-up) of 4 sequences of 128 tokens, on one GPU and under torchrun on two (DDP); PyTorch
# eager (torch_step.py: 5 warm-up steps, then EAGER_STEPS, default 2, of width EAGER_WIDTH,
# default 1024: at clean.sh's 2048, racecheck was cut at 25 s within its 15 steps on an H100);
# the Triton kernel (10 launches); a JAX jit step (jax_step.py: 1 warm-up step, then JAX_STEPS,
# default 5); our pipeline example (one run); the MLIR programs of a test-hw bundle (our
# library, MLIR_ITERATIONS after the first, default 10); the IREE module (one call). Each run is
# cut at CAP seconds (default 90; its cell then says ">CAP s (cut)" and a lower bound on the
# ratio), and once BUDGET seconds (default 420) have passed the remaining runs are "skipped
# (budget)" (a program's untimed and native runs are not cut short): at these sizes neither
# should happen.
#
# Programs whose framework or files are missing are skipped with one line. SANITIZER names
# compute-sanitizer (default: the one on PATH); PYTHON, TORCH_DIR, MLIR_DIR, PIPELINE, IREE_DIR
# and ONLY (names of programs to run, default all) as in clean.sh.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd)
sanitizer=${SANITIZER:-$(command -v compute-sanitizer)}
python=${PYTHON:-python3}
out=${OUT:-$here/out-sanitize}
cap=${CAP:-90}
budget=${BUDGET:-420}
train_steps=${TRAIN_STEPS:-3}
eager_steps=${EAGER_STEPS:-2}
eager_width=${EAGER_WIDTH:-1024}
jax_steps=${JAX_STEPS:-5}
mlir_iterations=${MLIR_ITERATIONS:-10}
tools=(memcheck racecheck synccheck stream-ordered)
# shellcheck source-path=SCRIPTDIR source=programs.sh
. "$here/programs.sh"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $gpus GPU(s): $gpu_name; compute-sanitizer: ${sanitizer:-missing}"
[ -x "$sanitizer" ] || { say "compute-sanitizer not found: nothing to measure"; exit 1; }
say "$("$sanitizer" --version 2>&1 | tail -n 1)"

# timed OUTPUT COMMAND...: runs it under timeout (CAP), output to OUTPUT; sets rc, elapsed.
timed() {
  local output=$1 start end
  shift
  start=$(date +%s.%N)
  timeout -k 10 "$cap" "$@" > "$output" 2>&1
  rc=$?
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
}
spent() { [ $(( $(date +%s) - started )) -ge "$budget" ]; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "-" }'; }
# step_ms OUTPUT JSON: the program's own time per step in ms: the median after warm-up of
# train.py's JSON records (JSON, and JSON.rank1 under DDP), else the last time the program
# printed (ms/step, us per iteration, the pipeline's report); nothing when there is none.
step_ms() {
  local output=$1 json=$2
  if [ -f "$json" ]; then
    "$python" - "$json"* <<'PY' 2>/dev/null
import json, statistics, sys
steps = []
for path in sys.argv[1:]:
    record = json.load(open(path))
    steps += record["step_seconds"][record["warmup"]:]
if steps:
    print(f"{statistics.median(steps) * 1e3:.2f}")
PY
    return
  fi
  awk 'match($0, /[0-9.]+ ms\/step/) { ms = substr($0, RSTART, RLENGTH) + 0 }
       match($0, /[0-9.]+ us per iteration/) { ms = (substr($0, RSTART, RLENGTH) + 0) / 1000 }
       match($0, /^report \([0-9.]+ s\)/) { ms = (substr($0, RSTART + 8, RLENGTH - 8) + 0) * 1000 }
       END { if (ms != "") printf "%.3f\n", ms }' "$output"
}

{
  echo "compute-sanitizer's slowdown on the clean programs, $(date -u '+%Y-%m-%d'), $gpu_name:" \
    "each cell is the run's wall time (the whole process, start-up included) and its ratio to" \
    "the native run's (x); \"step\" is the program's own time per step where it prints one," \
    "and its ratio to the native step. A tool's cell names its summary when it reported" \
    "anything, and the exit status when not 0."
  echo
  echo "| program | work | native | memcheck | racecheck | synccheck | memcheck --track-stream-ordered-races all |"
  echo "|---|---|---|---|---|---|---|"
} > "$out/sanitize.md"

# program NAME WORK [--all-processes] -- COMMAND...: the row of NAME. WORK describes the work
# in the table; OUT_JSON in COMMAND's words becomes the run's own JSON path (train.py's --out).
program() {
  local name=$1 work=$2 all=()
  shift 2
  [ "$1" = --all-processes ] && { all=(--target-processes all); shift; }
  shift
  wanted "$name" || return 0
  if spent; then
    echo "| $name | $work | skipped (budget) |$(printf ' skipped (budget) |%.0s' "${tools[@]}")" >> "$out/sanitize.md"
    say "$name: skipped (budget)"
    return
  fi
  local dir=$out/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  local words=("$@")
  timed "$dir/warm-up.txt" "${words[@]//OUT_JSON/$dir/warm-up.json}"
  say "$name warm-up: exit $rc in $elapsed s"
  timed "$dir/native.txt" "${words[@]//OUT_JSON/$dir/native.json}"
  local native=$elapsed native_step
  native_step=$(step_ms "$dir/native.txt" "$dir/native.json")
  say "$name native: exit $rc in $elapsed s; step ${native_step:--} ms"
  local row="| $name | $work | $native s${native_step:+; step $native_step ms}"
  [ "$rc" -ne 0 ] && row="$row; exit $rc"
  row="$row |"
  local tool args summary step cell
  for tool in "${tools[@]}"; do
    if spent; then
      row="$row skipped (budget) |"
      continue
    fi
    case $tool in
      stream-ordered) args=(--tool memcheck --track-stream-ordered-races all) ;;
      *) args=(--tool "$tool") ;;
    esac
    timed "$dir/$tool.txt" "$sanitizer" "${args[@]}" ${all[@]+"${all[@]}"} --print-limit 20 \
      "${words[@]//OUT_JSON/$dir/$tool.json}"
    summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$dir/$tool.txt" | tail -n 1 | sed 's/^========= //')
    step=$(step_ms "$dir/$tool.txt" "$dir/$tool.json")
    say "$name $tool: exit $rc in $elapsed s; step ${step:--} ms; ${summary:-no summary}"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      row="$row >$cap s (cut), >$(ratio "$native" "$cap")x |"
      continue
    fi
    cell="$elapsed s, $(ratio "$native" "$elapsed")x"
    [ -n "$step" ] && cell="$cell; step $step ms${native_step:+, $(ratio "$native_step" "$step")x}"
    case $summary in
      *": 0 errors" | *"(0 errors, 0 warnings)") ;;
      "") cell="$cell; no summary" ;;
      *) cell="$cell; $summary" ;;
    esac
    [ "$rc" -ne 0 ] && cell="$cell; exit $rc"
    row="$row $cell |"
  done
  echo "$row" >> "$out/sanitize.md"
}

torch=no
has torch && torch=yes
if [ "$torch" = yes ] && [ -f "$torch_dir/train.py" ]; then
  train=("$torch_dir/train.py" --allocator torch --out OUT_JSON --steps "$train_steps" --warmup 1
    --batch 4 --min-length 128 --max-length 128)
  train_work="$train_steps steps (1 warm-up) of 4 x 128 tokens"
  program torch_train "$train_work" -- "$python" "${train[@]}"
  program torch_eager "5 warm-up + $eager_steps steps, width $eager_width" -- \
    "$python" "$here/torch_step.py" eager "$eager_steps" "$eager_width"
else
  say "torch: skipped (no torch, or no train.py in $torch_dir)"
fi
if [ "$torch" = yes ] && has triton; then
  program triton "10 launches" -- "$python" "$here/triton_kernel.py"
else
  say "triton: skipped (not installed)"
fi
if has jax; then
  # As clean.sh runs it: XLA's platform allocator, nothing preallocated.
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform \
    program jax "1 warm-up + $jax_steps steps" -- "$python" "$here/jax_step.py" "$jax_steps"
else
  say "jax: skipped (not installed)"
fi
if [ -x "$pipeline" ]; then
  program pipeline "one run, 32 MiB" -- "$pipeline"
else
  say "pipeline: skipped (no example at $pipeline)"
fi
mlir_programs=$(find "$mlir" -maxdepth 1 -type f -perm -u+x 2>/dev/null | sort)
if [ -n "$mlir_programs" ]; then
  for binary in $mlir_programs; do
    GPU_RUNTIME_BACKEND=cuda program "mlir_$(basename "$binary")" "1 + $mlir_iterations iterations" -- \
      "$binary" "$mlir_iterations"
  done
else
  say "mlir: skipped (no programs in $mlir)"
fi
if [ -x "$iree/iree-run-module" ] && [ -f "$iree/mlp_cuda.vmfb" ]; then
  program iree "one call" -- "$iree/iree-run-module" --device=cuda --module="$iree/mlp_cuda.vmfb" \
    --function=mlp --flagfile="$iree/mlp.flags" --flagfile="$iree/mlp.expected"
else
  say "iree: skipped (no iree-run-module and module in $iree)"
fi
# Last, as the most expensive: two processes, each under the tool. --standalone gives each run
# a free port, so that a run cut at CAP cannot leave the next one without its rendezvous port.
if [ "$torch" = yes ] && [ -f "$torch_dir/train.py" ] && [ "$gpus" -ge 2 ]; then
  program torch_ddp "$train_work, 2 GPUs" --all-processes -- "$python" -m torch.distributed.run \
    --standalone --nproc_per_node=2 "${train[@]}"
else
  say "torch_ddp: skipped (needs torch, train.py and 2 GPUs)"
fi

tar czf "$out/sanitize-detail.tgz" -C "$out" --exclude sanitize-detail.tgz . 2>/dev/null
say "done in $(( $(date +%s) - started )) s: $out/sanitize.md"
cat "$out/sanitize.md"
