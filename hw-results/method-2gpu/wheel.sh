#!/usr/bin/env bash
# Issue 26: the wheel CI builds, installed as a user would (pip, no network: its one dependency,
# torch, is already there) and turned on with the README's three lines, then a short training
# step on the GPU. WHEEL: the wheel file (default: the one under wheels/). Logs to $OUT.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
wheel=${WHEEL:-$(ls wheels/*.whl | head -n 1)}
site=$(mktemp -d)
python3 -m pip install --no-deps --no-index --target "$site" "$wheel" >"$OUT/pip.txt" 2>&1
echo "pip: exit $? ($(basename "$wheel"))" | tee "$OUT/wheel-log.txt"
PYTHONPATH="$site" python3 - <<'PY' 2>&1 | tee -a "$OUT/wheel-log.txt"
import torch, gpu_runtime_torch
gpu_runtime_torch.enable()  # before CUDA starts
x = torch.ones(1 << 20, device="cuda")  # allocated by the toolkit's allocator

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data, labels = torch.randn(256, 512, device="cuda"), torch.randint(0, 10, (256,), device="cuda")
losses = []
for step in range(20):
    loss = torch.nn.functional.cross_entropy(model(data), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
stats = gpu_runtime_torch.memory_stats()
ours = {k: v for k, v in stats.items() if k.startswith("gpurt.")}
print("loss first/last:", round(losses[0], 4), round(losses[-1], 4))
print("reserved_bytes.all.current:", stats["reserved_bytes.all.current"], "hits:", ours.get("gpurt.hits"),
      "misses:", ours.get("gpurt.misses"))
assert losses[-1] < losses[0], "the step trains"
assert ours.get("gpurt.hits", 0) > 0, "PyTorch's allocations came through the toolkit"
del x, model, opt, data, labels
gpu_runtime_torch.shutdown()
print("wheel: ok")
PY
echo "python: exit ${PIPESTATUS[0]}" | tee -a "$OUT/wheel-log.txt"
