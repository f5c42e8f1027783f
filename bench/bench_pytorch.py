#!/usr/bin/env python3
"""PyTorch CPU comparator for fsdp-train (bench/run_bench.sh runs both).

Trains the same GPT-2 as fsdp-train (bench/lib/torch_models.py) in fp32 on the CPU with
torch.optim.AdamW and gradient-norm clipping, one optimizer step per
iteration, and reports the median step time over the steps after the
warm-up ones.  A step is timed the way fsdp-train times it (lib/driver/train.c):
batch, zero grads, forward, backward, clip, AdamW step, loss to a Python
float.

Attention goes through F.scaled_dot_product_attention(is_causal=True) (the
fastest path PyTorch offers on the CPU, as nanoGPT uses it); --attn manual
uses the explicit softmax(QK^T) V that fsdp-train computes instead.

The last stdout line is one JSON object (step_time_ms_median, ...), like
fsdp-train -summary json.
"""

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from torch_models import GPT, PRESETS, adamw, blas_names, timed_step  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--n_layer", type=int)
    ap.add_argument("--seq_len", type=int, default=64,
                    help="T and the rows of wpe (fsdp-train -seq_len)")
    ap.add_argument("--batch_size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup_steps", type=int, default=2,
                    help="first steps left out of the median")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--attn", choices=["sdpa", "manual"], default="sdpa")
    ap.add_argument("--adamw", choices=["foreach", "fused"], default="foreach",
                    help="torch.optim.AdamW implementation (default: PyTorch's own default on CPU)")
    ap.add_argument("--show_config", action="store_true",
                    help="print torch.__config__.show() first")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    L, C, NH, V, _ = PRESETS[a.model]
    if a.n_layer:
        L = a.n_layer
    T, B = a.seq_len, a.batch_size
    names = blas_names()
    if a.show_config:
        print(torch.__config__.show(), flush=True)
    model = GPT(L, C, NH, V, T, a.attn)
    nparams = sum(p.numel() for p in model.parameters())
    # fsdp-train's AdamW (bench/lib/torch_models.py: adamw)
    opt = adamw(model, a.adamw)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, V, (a.steps, B, T + 1), generator=g)
    print("pytorch: %s L=%d C=%d (%d parameters) B=%d T=%d, %d threads, "
          "BLAS %s (%s), oneDNN %s, attention %s, AdamW %s"
          % (a.model, L, C, nparams, B, T, torch.get_num_threads(),
             names["blas_info"], names["mkl"] or "-", names["onednn"] or "-",
             a.attn, a.adamw), flush=True)
    times, losses = [], []
    for s in range(a.steps):
        ms, lv = timed_step(model, opt, data[s, :, :-1], data[s, :, 1:])
        times.append(ms)
        losses.append(lv)
        print("step %d/%d | loss %.4f | %.1f ms" % (s + 1, a.steps, lv,
                                                   times[-1]), flush=True)
    timed = times[a.warmup_steps:] or times
    med = statistics.median(timed)
    print(json.dumps({
        "impl": "pytorch", "torch": torch.__version__, "model": a.model,
        "n_layer": L, "n_embd": C, "n_head": NH, "vocab_size": V,
        "seq_len": T, "batch_size": B, "param_count": nparams,
        "threads": torch.get_num_threads(), "attn": a.attn, "adamw": a.adamw,
        "steps": a.steps, "warmup_steps": a.warmup_steps,
        "step_ms": [round(t, 3) for t in times],
        "step_time_ms_median": round(med, 4),
        "step_time_ms_min": round(min(timed), 4),
        "losses": losses, **names}))


if __name__ == "__main__":
    sys.exit(main())
