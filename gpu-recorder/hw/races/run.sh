#!/usr/bin/env bash
# The seeded race programs (seeded.cu, torch_seeded.py), each bug and its fixed twin, on a GPU
# machine: run plain, recorded (then checked by gpu-trace-check) and under compute-sanitizer's
# memcheck, racecheck, synccheck and memcheck --track-stream-ordered-races all; writes
# $OUT/races.md (which tool reports each program, and each tool's time) and $OUT/log.txt, and
# the traces and tool outputs under $OUT/NAME.VARIANT/. No Rust needed.
# Beside this script or in its parent folder (a test-hw bundle's recorder/), or named by
# RECORDER, CHECKER: libgpu_recorder.so, gpu-trace-check.
# PYTHON (default python3) runs the PyTorch programs, skipped where torch is missing.
# runtime_no_foreign_mark runs on our allocator: the gpu_runtime_torch package installed from
# its wheel, else the package and library of a test-hw bundle's torch/ folder (TORCH_DIR,
# default ../../torch: the package on PYTHONPATH, libgpu_capi.so passed as --lib); skipped
# only without either, said in bold above the table.
# Recorded runs go through ../record.sh: the recorder writes footprints (copies', fills' and
# launches' ranges, allocations and frees, non-blocking streams) and the blocks of the
# sub-allocators that say where they are: our PyTorch plug-in's (runtime_no_foreign_mark),
# PyTorch's own caching allocator's through the tracker shim (../torch_blocks, compiled here
# once; if it cannot be, one line says so and launches count as whole allocations), and the C
# pool's NVTX memory regions (c_pool_wrong_stream; the recorder is NVTX's injection library).
# A launch's parameter pointing into a block counts as that block. The "ours" column is
# gpu-trace-check's verdict. The compute-sanitizer columns and times stand alone. Above the
# table, in bold, what weakens a verdict: seeded.cu rebuilt without NVTX (-DSEEDED_NO_NVTX,
# when nvcc cannot build it with nvtx3/nvToolsExtMem.h), or a c_pool_wrong_stream trace
# without the recorder's "# nvtx: memory extension attached" line.
set -u
here=$(cd "$(dirname "$0")" && pwd)
recorder=${RECORDER:-$here/libgpu_recorder.so}
[ -f "$recorder" ] || recorder=$here/../libgpu_recorder.so
checker=${CHECKER:-$here/gpu-trace-check}
[ -x "$checker" ] || checker=$here/../gpu-trace-check
python=${PYTHON:-python3}
torch_dir=${TORCH_DIR:-$here/../../torch}
runtime_lib=
out=${OUT:-$here/out}
limit=${LIMIT:-300}
mkdir -p "$out"
log=$out/log.txt
: > "$log"
say() { printf '%s\n' "$*" | tee -a "$log"; }

# Notes for races.md, above its table: what makes a row's verdict mean less than it says.
notes=()
if ! nvcc -O2 -lineinfo -o "$out/seeded" "$here/seeded.cu" -ldl 2> "$out/nvcc.txt"; then
  notes+=("**NVTX annotations missing:** nvcc with NVTX's memory API failed ($(head -n 1 "$out/nvcc.txt"); all of it in nvcc.txt): seeded.cu was rebuilt with -DSEEDED_NO_NVTX, so c_pool_wrong_stream's footprints are whole allocations and its fixed twin is reported")
  say "${notes[-1]}"
  nvcc -O2 -lineinfo -DSEEDED_NO_NVTX -o "$out/seeded" "$here/seeded.cu" || { say "nvcc failed"; exit 1; }
fi
programs="c_pool_wrong_stream mlir_missing_async_dependency async_free_raced"
if "$python" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  programs="$programs torch_no_record_stream torch_no_wait_stream"
  export SHIM_DIR=$out/torch-shim
  mkdir -p "$SHIM_DIR"
  if PYTHON=$python "$here/../torch_blocks/build.sh" "$SHIM_DIR" > "$SHIM_DIR/build.txt" 2>&1; then
    say "torch shim: built"
  else
    touch "$SHIM_DIR/failed"
    say "torch shim: NOT built, PyTorch's blocks are not traced: $(head -n 1 "$SHIM_DIR/build.txt")"
  fi
  # Our allocator's program needs the gpu_runtime_torch package: installed (its wheel carries
  # the library), else the bundle's copy of it, Python only, put on PYTHONPATH from a folder of
  # its own (TORCH_DIR's workload scripts would shadow modules), with the bundle's library
  # passed as --lib. Without either, the program is skipped, in bold above the table.
  if "$python" -c 'import gpu_runtime_torch; gpu_runtime_torch.library_path()' 2>/dev/null; then
    programs="$programs runtime_no_foreign_mark"
    say "gpu_runtime_torch: installed, with its own library"
  elif [ -f "$torch_dir/gpu_runtime_torch/__init__.py" ] && [ -f "$torch_dir/libgpu_capi.so" ]; then
    mkdir -p "$out/python"
    cp -r "$torch_dir/gpu_runtime_torch" "$out/python/"
    export PYTHONPATH="$out/python${PYTHONPATH:+:$PYTHONPATH}"
    runtime_lib=$torch_dir/libgpu_capi.so
    if why=$("$python" -c 'import gpu_runtime_torch' 2>&1); then
      programs="$programs runtime_no_foreign_mark"
      say "gpu_runtime_torch: the bundle's package ($torch_dir/gpu_runtime_torch) with --lib $runtime_lib"
    else
      notes+=("**runtime_no_foreign_mark NOT RUN:** the bundle's gpu_runtime_torch ($torch_dir) does not import: $(printf '%s\n' "$why" | tail -n 1)")
      say "${notes[-1]}"
    fi
  else
    notes+=("**runtime_no_foreign_mark NOT RUN:** gpu_runtime_torch is not installed and $torch_dir lacks gpu_runtime_torch/ or libgpu_capi.so (a test-hw bundle's torch/ has both): install the wheel or set TORCH_DIR")
    say "${notes[-1]}"
  fi
else
  say "torch with CUDA missing: the PyTorch programs are skipped"
fi

# command_of PROGRAM VARIANT: sets cmd to the command that runs it.
command_of() {
  case $1 in
    torch_*) cmd=("$python" "$here/torch_seeded.py" "$1" "$2") ;;
    runtime_*) cmd=("$python" "$here/torch_seeded.py" "$1" "$2" ${runtime_lib:+--lib "$runtime_lib"}) ;;
    *) cmd=("$out/seeded" "$1" "$2") ;;
  esac
}

# seconds COMMAND...: runs it, prints its wall time in seconds (its status in $rc).
seconds() {
  local start end
  start=$(date +%s.%N)
  timeout "$limit" "$@"
  rc=$?
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
}

{
  echo "| program | variant | ours (gpu-trace-check) | memcheck | racecheck | synccheck | memcheck --track-stream-ordered-races all | time: plain / recorded / memcheck / racecheck / synccheck / stream-ordered (s) |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$out/races.md"
for program in $programs; do
  for variant in bug fixed; do
    dir=$out/$program.$variant
    mkdir -p "$dir"
    command_of "$program" "$variant"
    seconds "${cmd[@]}" > "$dir/plain.txt" 2>&1; plain=$elapsed
    say "$program $variant plain: exit $rc; $(tail -n 1 "$dir/plain.txt")"
    seconds env RECORDER="$recorder" PYTHON="$python" "$here/../record.sh" "$dir" "${cmd[@]}" > "$dir/recorded.txt" 2>&1
    recorded=$elapsed
    "$checker" "$dir"/*.trace > "$dir/check.txt" 2>&1
    # The recorder notes NVTX's memory extension in the trace when NVTX attaches it.
    if [ "$program" = c_pool_wrong_stream ]; then
      attached=$(grep -h '^# nvtx: memory extension' "$dir"/*.trace 2>/dev/null | head -n 1)
      say "$program $variant nvtx: ${attached:-no '# nvtx: memory extension' line}"
      case $attached in
        "# nvtx: memory extension attached"*) ;;
        *) notes+=("**NVTX regions not recorded** in $program $variant (${attached:-the trace has no \`# nvtx: memory extension\` line}): its footprints are whole allocations") ;;
      esac
    fi
    races=$(grep -cE 'race\)|without an ordering edge\)|use after free\)|after a use on another stream\)' "$dir/check.txt")
    ours="$races race(s)"
    say "$program $variant ours: $ours; $(tail -n 1 "$dir/check.txt")"
    cells=""
    times=""
    for tool in memcheck racecheck synccheck stream-ordered; do
      if [ "$tool" = stream-ordered ]; then
        args=(--tool memcheck --track-stream-ordered-races all)
      else
        args=(--tool "$tool")
      fi
      seconds compute-sanitizer "${args[@]}" --print-limit 20 "${cmd[@]}" > "$dir/$tool.txt" 2>&1
      summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$dir/$tool.txt" | tail -n 1 | sed 's/^========= //')
      say "$program $variant $tool: exit $rc; ${summary:-no summary}"
      cells="$cells | ${summary:-no summary (exit $rc)}"
      times="$times / $elapsed"
    done
    echo "| $program | $variant | $ours$cells | $plain / $recorded$times |" >> "$out/races.md"
  done
done
if [ ${#notes[@]} -gt 0 ]; then
  { printf '%s\n\n' "${notes[@]}"; cat "$out/races.md"; } > "$out/races.md.new"
  mv "$out/races.md.new" "$out/races.md"
fi
say "table: $out/races.md"
cat "$out/races.md" | tee -a "$log"
