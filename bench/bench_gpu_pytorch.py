#!/usr/bin/env python3
"""PyTorch FSDP (fully_shard) comparator for bench/gpu_run.sh: the same GPT-2
(bench/lib/torch_models.py: tied head, pre-LN, tanh GELU), W=1, FSDP2
fully_shard per block and at the root with
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fsdp-train's
AdamW (fused); --compile wraps each block in torch.compile (compile time is
spent in the warm-up steps, not timed); prints one JSON line with
tokens_per_s (median of the steps after warm-up).  In the GPU kit
(bench/gpu_prepare.sh) torch_models.py lies beside this file."""
import argparse, json, os, statistics, sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "lib"), here]  # the tree, then the kit
from torch_models import GPT, PRESETS, adamw, timed_step  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2", choices=["gpt2", "gpt2-medium"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    L, C, NH, V, _ = PRESETS[a.model]
    model = GPT(L, C, NH, V, a.seq).cuda()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for b in model.h:
        fully_shard(b, mp_policy=mp)
        if a.compile:
            b.compile()
    fully_shard(model, mp_policy=mp)
    opt = adamw(model, "fused")
    times = []
    for s in range(a.steps):
        idx = torch.randint(0, V, (a.batch, a.seq), device="cuda")
        tgt = torch.randint(0, V, (a.batch, a.seq), device="cuda")
        ms, loss = timed_step(model, opt, idx, tgt, sync=torch.cuda.synchronize)
        times.append(ms / 1e3)
    med = statistics.median(times[a.warmup:])
    print(json.dumps({"model": a.model, "batch_size": a.batch, "torch": torch.__version__,
                      "step_time_ms_median": med * 1e3, "tokens_per_s": a.batch * a.seq / med, "compile": a.compile,
                      "loss": loss}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
