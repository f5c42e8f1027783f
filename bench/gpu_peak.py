#!/usr/bin/env python3
"""Dense bf16 peak of this GPU as measured, for MFU in bench/gpu_run.sh: the
best of several timed bf16 x bf16 -> bf16 matmuls (fp32 accumulation) of
M=N=K=8192 through torch.matmul, which is a cuBLAS(Lt) GEMM.  Prints one
JSON line: {"bf16_flops": ..., "shape": ..., "gpu": ...}."""
import json, torch

n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    a @ b
torch.cuda.synchronize()
best = 0.0
for _ in range(5):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(20):
        a @ b
    e.record()
    torch.cuda.synchronize()
    best = max(best, 20 * 2 * n**3 / (s.elapsed_time(e) / 1e3))
print(json.dumps({"bf16_flops": best, "shape": [n, n, n], "gpu": torch.cuda.get_device_name(),
                  "torch": torch.__version__, "cuda": torch.version.cuda}))
