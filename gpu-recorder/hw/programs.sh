# Sourced by clean.sh and sanitize.sh, once they have set `here`, `python` and `out`: where the
# clean real programs are (TORCH_DIR, MLIR_DIR, PIPELINE, IREE_DIR), the log under $out, the
# helpers both use, and the GPUs present.
# shellcheck shell=bash disable=SC2034,SC2154 # the variables are the sourcing script's
torch_dir=${TORCH_DIR:-$here/../torch}
mlir=${MLIR_DIR:-$here/../mlir}
pipeline=${PIPELINE:-$here/../examples/pipeline}
iree=${IREE_DIR:-$here/iree}
started=$(date +%s)
mkdir -p "$out"
log=$out/log.txt
: > "$log"
say() { printf '%s\n' "$*" | tee -a "$log"; }
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
has() { "$python" -c "import $1" 2>/dev/null; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
