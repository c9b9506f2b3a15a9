"""A launch-bound loop through PyTorch: N in-place adds on a tiny tensor."""
import sys
import time

import torch

n = int(sys.argv[1])
x = torch.zeros(16, device="cuda")
for _ in range(100):
    x.add_(1)
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(n):
    x.add_(1)
torch.cuda.synchronize()
print(f"torch_loop: {n} launches, {(time.perf_counter() - start) / n * 1e9:.1f} ns per launch")
