#!/usr/bin/env bash
# MLIR programs on the GPU box: each against our library and against upstream's
# CudaRuntimeWrappers.cpp (built here), timed, driver calls counted through CUPTI, checked by
# the trace checker (ours) and compute-sanitizer (ours). Usage: bash run.sh OUTDIR
set -u
B=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: bash run.sh OUTDIR}
mkdir -p "$OUT"
W=$(mktemp -d); mkdir -p "$W/upstream"
CUDA=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
CUPTI_LIB=$(dirname "$(find "$CUDA"/ -name 'libcupti.so*' | head -1)")
CUPTI_INC=$(dirname "$(find "$CUDA"/ -name cupti.h | head -1)")
log() { echo "$@" | tee -a "$OUT/summary.txt"; }
log "host: $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | paste -sd ';')"
log "cuda: $CUDA cupti: $CUPTI_LIB commit: $(cat "$B/COMMIT")"
g++ -O2 -shared -fPIC -o "$W/upstream/libmlir_cuda_runtime.so" "$B/upstream/CudaRuntimeWrappers.cpp" \
  -I"$B/upstream" -I"$CUDA/include" -L"$CUDA/lib64/stubs" -lcuda 2>&1 | tail -5
gcc -O2 -shared -fPIC -o "$W/counter.so" "$B/counter.c" -I"$CUPTI_INC" -I"$CUDA/include" \
  -L"$CUPTI_LIB" -lcupti -Wl,-rpath,"$CUPTI_LIB" 2>&1 | tail -5
nvcc -O2 -o "$W/forkjoin_raw" "$B/forkjoin_raw.cu" 2>&1 | tail -5
ls -la "$W/upstream/libmlir_cuda_runtime.so" "$W/counter.so" "$W/forkjoin_raw" | tee -a "$OUT/summary.txt"

# side: ours (the RUNPATH's lib/) or upstream (LD_LIBRARY_PATH first).
env_of() { if [ "$1" = upstream ]; then echo "LD_LIBRARY_PATH=$W/upstream"; else echo "GPU_RUNTIME_BACKEND=cuda"; fi; }
run() { # side program iterations [extra env VAR=value... | one more program argument]
  local side=$1 p=$2 n=$3; shift 3
  local envs=() args=()
  for a in "$@"; do case $a in *=*) envs+=("$a");; *) args+=("$a");; esac; done
  env $(env_of "$side") "${envs[@]}" timeout 120 "$B/bin/$p" "$n" "${args[@]}"
}
count() { # side program iterations -> file of "count name"
  local f="$W/count-$1-$2-$3"
  run "$1" "$2" "$3" CUDA_INJECTION64_PATH="$W/counter.so" COUNTER_OUT="$f" >/dev/null 2>&1
  echo "$f"
}
total() { [ -f "$1" ] || { echo 0; return; }; awk '{s+=$1} END {print s+0}' "$1"; }
one() { [ -f "$1" ] || { echo 0; return; }; awk -v n="$2" '$2==n {s+=$1} END {print s+0}' "$1"; }
per_iter_line() { # side program n1 n2
  local a b; a=$(count "$1" "$2" "$3"); b=$(count "$1" "$2" "$4")
  local d=$(( $4 - $3 ))
  local calls=$(( $(total "$b") - $(total "$a") ))
  local sc=$(( $(one "$b" cuStreamCreate) - $(one "$a" cuStreamCreate) ))
  local sd=$(( $(one "$b" cuStreamDestroy) + $(one "$b" cuStreamDestroy_v2) - $(one "$a" cuStreamDestroy) - $(one "$a" cuStreamDestroy_v2) ))
  local ec=$(( $(one "$b" cuEventCreate) - $(one "$a" cuEventCreate) ))
  local ed=$(( $(one "$b" cuEventDestroy) + $(one "$b" cuEventDestroy_v2) - $(one "$a" cuEventDestroy) - $(one "$a" cuEventDestroy_v2) ))
  local alive_s=$(( $(one "$b" cuStreamCreate) - $(one "$b" cuStreamDestroy) - $(one "$b" cuStreamDestroy_v2) ))
  local alive_e=$(( $(one "$b" cuEventCreate) - $(one "$b" cuEventDestroy) - $(one "$b" cuEventDestroy_v2) ))
  log "  $1 $2: driver calls per iteration $(awk -v c=$calls -v d=$d 'BEGIN{printf "%.2f", c/d}'); streams created/destroyed per iteration $(awk -v a=$sc -v b=$sd -v d=$d 'BEGIN{printf "%.2f/%.2f", a/d, b/d}'), events $(awk -v a=$ec -v b=$ed -v d=$d 'BEGIN{printf "%.2f/%.2f", a/d, b/d}'); after $4 iterations, before exit cleanup: $alive_s streams and $alive_e events alive"
  log "  $1 $2: time inside driver calls per iteration (us): $(join -1 2 -2 2 <(sort -k2,2 "$a") <(sort -k2,2 "$b") | awk -v d=$d '{t=($5-$3)/d/1000; s+=t; if (t>=0.5) printf "%s %.1f, ", $1, t} END {printf "total %.1f", s}')"
  { echo "## $1 $2 ($4 iterations): count name nanoseconds"; sort -rn "$b"; } >> "$OUT/calls.txt"
}
log "== forkjoin floor: the same work by hand on the CUDA runtime (clients/mlir/baseline), interleaved with ours and upstream, 3 rounds"
for elems in 4096 65536 1048576; do
  n=$([ "$elems" = 1048576 ] && echo 200 || echo 1000)
  for round in 1 2 3; do
    log "  $elems ours: $(run ours forkjoin "$n" "$elems" 2>&1 | grep -E '^forkjoin: ok|FAILED' | paste -sd ' ')"
    log "  $elems upstream: $(run upstream forkjoin "$n" "$elems" 2>&1 | grep -E '^forkjoin: ok|FAILED' | paste -sd ' ')"
    log "  $elems raw: $(timeout 120 "$W/forkjoin_raw" "$n" "$elems" 2>&1 | grep -vE 'elements,' | paste -sd ' ')"
  done
done
[ "${FLOOR_ONLY:-0}" = 1 ] && exit 0
PROGRAMS="forkjoin chain alloc memcpy_memset shared_memory host_register two_devices"
iters() { case $1 in forkjoin) echo 1000;; chain) echo 20;; *) echo 200;; esac; }
for p in $PROGRAMS; do
  n=$(iters "$p")
  log "== $p"
  for side in ours upstream ours upstream; do
    out=$(run "$side" "$p" "$n" 2>&1); rc=$?
    log "  $side: rc=$rc $(echo "$out" | grep -E "^$p:|FAILED" | paste -sd ' ')"
    echo "$out" | grep -vE "^$p:" | sort | uniq -c | head -8 | sed 's/^/      /' | tee -a "$OUT/summary.txt" >/dev/null
  done
  small=$(( n / 10 > 2 ? n / 10 : 2 ))
  per_iter_line ours "$p" "$small" $(( small * 2 ))
  per_iter_line upstream "$p" "$small" $(( small * 2 ))
  run ours "$p" 5 GPU_RUNTIME_TRACE="$W/trace-$p.txt" 2>&1 | grep -v "^$p:" | head -12 | sed 's/^/  trace: /' | tee -a "$OUT/summary.txt" >/dev/null
done
log "== compute-sanitizer memcheck, ours"
for p in $PROGRAMS; do
  env GPU_RUNTIME_BACKEND=cuda timeout 120 compute-sanitizer --tool memcheck --leak-check full "$B/bin/$p" 3 > "$W/san-$p.txt" 2>&1
  log "  $p: rc=$? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|leaked' "$W/san-$p.txt" | paste -sd ' ')"
done
cat "$W"/san-*.txt > "$OUT/sanitizer.txt"
ls "$W"/trace-*.txt >/dev/null 2>&1 && tar -C "$W" -czf "$OUT/traces.tar.gz" $(cd "$W" && ls trace-*.txt)
