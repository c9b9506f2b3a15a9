#!/usr/bin/env bash
# Why IREE's two-device module fails on two GPUs (issue 19): `iree-run-module --device=cuda://0
# --device=cuda://1 --module=mlp_two_devices_cuda.vmfb ...` exits 1 with "INVALID_ARGUMENT;
# while invoking native function hal.device.queue.dealloca", while the same module on one GPU
# twice passes. Runs the variants that tell the candidate causes apart, each under `timeout 60`,
# prints one line per variant
#
#   iree-two-gpus: VARIANT: exit N; LAST LINE OF OUTPUT
#
# (for a failure also IREE's status line, and the CUDA error and IREE source line when the
# output names them), and keeps each variant's whole output in OUTDIR/VARIANT.txt.
#
#   bash clients/iree/two_gpus.sh DIR OUTDIR
#
# DIR holds what `cargo xtask iree` writes (target/iree, or a test-hw bundle's recorder/iree):
# iree-run-module, mlp_cuda.vmfb, mlp_two_devices_cuda.vmfb, mlp.flags, mlp.expected.
# RECORDER=PATH/libgpu_recorder.so (optional) also records the two-GPU run with gpu-recorder
# (GPU_RECORDER_CALLS=1) and prints each driver call that returned an error, with the context
# current at the call (ctx=) and the line that created the stream it was issued on. IREE's
# message carries only the status code of a failure that happened on its worker thread, so the
# recording is what names the failing driver call.
#
# What it showed on two H100s (IREE 3.13.0): every two-GPU variant fails the same way and every
# one-GPU variant passes; the recording shows device_a's cuLaunchKernel failing with
# CUDA_ERROR_INVALID_HANDLE (400) on device_a's stream in device_a's context: its kernel was
# loaded into GPU 1's context. IREE's CUDA HAL loads an executable with cuModuleLoadDataEx in
# whatever context the loading thread has current (native_executable.c) and the last device
# created leaves its context current, so device_a's kernels belong to device_b's GPU. The
# launch fails on IREE's worker thread, device_a's semaphore is failed with the status code
# (INVALID_HANDLE becomes INVALID_ARGUMENT, cuda_status_util.c), and the VM's next host wait,
# inside queue_dealloca, reports it. Next in line (IR of the module, not reachable yet): the
# compiler treats two `cuda` devices as one memory space and lets device_b's dispatch read
# device_a's stream-ordered pool memory in place, which the CUDA HAL never opens to the other
# GPU (cuMemPoolSetAccess).
#
# Variants: one GPU at a time (the single-device module), both orders of the two GPUs, each GPU
# twice (controls), synchronous allocations (no pools, no cuMemFreeAsync), CUDA graphs instead
# of streams, the shared buffers on device_b (--device_lead_allocator=1), the devices named by
# UUID, and synchronous launches (a kernel's fault is reported at its launch). (The release
# tools' --trace_execution prints nothing: VM tracing is compiled out of them.) Exit status: 0
# once every variant ran (their results are the data), 2 for a missing file.
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 DIR OUTDIR" >&2
  exit 2
fi
dir=$(cd "$1" && pwd) || exit 2
out=$2
mkdir -p "$out" || exit 2
tool=$dir/iree-run-module
for file in iree-run-module mlp_cuda.vmfb mlp_two_devices_cuda.vmfb mlp.flags mlp.expected; do
  [ -f "$dir/$file" ] || { echo "iree-two-gpus: no $file in $dir" >&2; exit 2; }
done
say() { printf 'iree-two-gpus: %s\n' "$*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"

inputs=(--flagfile="$dir/mlp.flags" --flagfile="$dir/mlp.expected")
single=(--module="$dir/mlp_cuda.vmfb" --function=mlp "${inputs[@]}")
two=(--module="$dir/mlp_two_devices_cuda.vmfb" --function=mlp_two_devices "${inputs[@]}")

# variant NAME [VAR=VALUE...] -- IREE-RUN-MODULE ARGUMENTS...: one run, its line(s) printed.
variant() {
  local name=$1 log=$out/$1.txt
  shift
  local environment=()
  while [ "$1" != "--" ]; do environment+=("$1"); shift; done
  shift
  printf '$ %s %s %s\n' "${environment[*]}" "$tool" "$*" >"$log"
  env "${environment[@]}" timeout 60 "$tool" "$@" >>"$log" 2>&1
  local rc=$?
  say "$name: exit $rc; $(tail -n 1 "$log")"
  [ "$rc" -eq 0 ] && return
  # IREE's status line, and the CUDA error and IREE source line where the output names them.
  local codes='CANCELLED|UNKNOWN|INVALID_ARGUMENT|DEADLINE_EXCEEDED|NOT_FOUND|ALREADY_EXISTS'
  codes+='|PERMISSION_DENIED|RESOURCE_EXHAUSTED|FAILED_PRECONDITION|ABORTED|OUT_OF_RANGE'
  codes+='|UNIMPLEMENTED|INTERNAL|UNAVAILABLE|DATA_LOSS|UNAUTHENTICATED|DEFERRED|INCOMPATIBLE'
  local status cuda where
  status=$(grep -m 1 -E "($codes);" "$log" | cut -c1-200)
  cuda=$(grep -o 'CUDA_ERROR_[A-Z_]*' "$log" | head -n 1)
  where=$(grep -oE '[A-Za-z_/]+\.(c|cc|h):[0-9]+' "$log" | head -n 1)
  say "$name: status: ${status:-none printed}${cuda:+; $cuda}${where:+ at $where}"
}

say "GPUs: $(nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader 2>/dev/null | tr '\n' ';')"
"$tool" --list_devices >"$out/devices.txt" 2>&1
mapfile -t uuids < <(grep -o 'cuda://GPU-[0-9a-fA-F-]*' "$out/devices.txt")
say "IREE's CUDA devices: ${uuids[*]:-none listed (see devices.txt)}"

variant single_gpu0 -- --device=cuda://0 "${single[@]}"
variant single_gpu1 -- --device=cuda://1 "${single[@]}"
variant two_0_1 -- --device=cuda://0 --device=cuda://1 "${two[@]}"
variant two_1_0 -- --device=cuda://1 --device=cuda://0 "${two[@]}"
variant two_0_0 -- --device=cuda://0 --device=cuda://0 "${two[@]}"
variant two_1_1 -- --device=cuda://1 --device=cuda://1 "${two[@]}"
variant two_0_1_sync_alloc -- --device=cuda://0 --device=cuda://1 "${two[@]}" \
  --cuda_async_allocations=false
variant two_0_1_graphs -- --device=cuda://0 --device=cuda://1 "${two[@]}" --cuda_use_streams=false
variant two_0_1_graphs_sync_alloc -- --device=cuda://0 --device=cuda://1 "${two[@]}" \
  --cuda_use_streams=false --cuda_async_allocations=false
variant two_0_1_sync_caching -- --device=cuda://0 --device=cuda://1 "${two[@]}" \
  --cuda_async_allocations=false --device_allocator=caching
variant two_0_1_lead1 -- --device=cuda://0 --device=cuda://1 "${two[@]}" --device_lead_allocator=1
if [ "${#uuids[@]}" -ge 2 ]; then
  variant two_uuid -- --device="${uuids[0]}" --device="${uuids[1]}" "${two[@]}"
else
  say "two_uuid: not run (fewer than two CUDA devices listed)"
fi
variant two_0_1_blocking CUDA_LAUNCH_BLOCKING=1 -- --device=cuda://0 --device=cuda://1 "${two[@]}"

if [ -n "${RECORDER:-}" ]; then
  rm -rf "$out/recorded" && mkdir -p "$out/recorded"
  variant two_0_1_recorded CUDA_INJECTION64_PATH="$RECORDER" GPU_TRACE_OUT="$out/recorded" \
    GPU_RECORDER_CALLS=1 -- --device=cuda://0 --device=cuda://1 "${two[@]}"
  # Each failed driver call, then the creation of the stream it named (context and device).
  for calls in "$out"/recorded/*.calls; do
    [ -f "$calls" ] || continue
    grep -E ' ret=[1-9][0-9]*' "$calls" | head -n 5 | while read -r line; do
      say "two_0_1_recorded: failed: $line"
      stream=$(grep -oE 'stream=0x[0-9a-f]+' <<<"$line")
      if [ -n "$stream" ]; then
        created=$(grep -E "^cuStreamCreate[A-Za-z_]* .*${stream}( |$)" "$calls" | head -n 1)
        say "two_0_1_recorded: its stream: ${created:-creation not recorded}"
      fi
    done
  done
fi
say "outputs in $out"
exit 0
