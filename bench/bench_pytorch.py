#!/usr/bin/env python3
"""PyTorch CPU comparator for fsdp-train (bench/run_bench.sh runs both).

Trains the same GPT-2 as fsdp-train -- token + learned position embeddings
(wpe has -seq_len rows, as fsdp-train's wpe), pre-LayerNorm blocks with
fused qkv [3C, C] and output projection, MLP 4C with tanh GELU, final
LayerNorm, LM head tied to wte, mean cross-entropy -- in fp32 on the CPU with
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
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    # name: (n_layer, n_embd, n_head, vocab_size, seq_len), as lib/model/gpt.c
    "tiny": (2, 32, 4, 64, 16),
    "small": (4, 128, 4, 256, 64),
    "gpt2": (12, 768, 12, 50257, 1024),
    "gpt2-medium": (24, 1024, 16, 50257, 1024),
}


class Block(nn.Module):
    def __init__(self, C, NH, attn):
        super().__init__()
        self.NH, self.attn_impl = NH, attn
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.NH, -1).transpose(1, 2)
        k = k.view(B, T, self.NH, -1).transpose(1, 2)
        v = v.view(B, T, self.NH, -1).transpose(1, 2)
        if self.attn_impl == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, maxT, attn):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList([Block(C, NH, attn) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        # GPT-2 init: N(0, 0.02), residual projections 0.02/sqrt(2L), biases 0
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                std = 0.02
                if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight"):
                    std = 0.02 / math.sqrt(2 * L)
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def blas_names():
    """The BLAS/LAPACK and oneDNN PyTorch was built with (torch.__config__)."""
    cfg = torch.__config__.show()
    out = {}
    m = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    out["blas_info"] = m.group(1) if m else "unknown"
    m = re.search(r"(Intel\(R\) oneAPI Math Kernel Library Version [^\n]*)", cfg)
    out["mkl"] = m.group(1).strip() if m else None
    m = re.search(r"(Intel\(R\) MKL-DNN v[0-9.]+)", cfg)
    out["onednn"] = m.group(1) if m else None
    m = re.search(r"CPU capability usage: (\S+)", cfg)
    out["cpu_capability"] = m.group(1) if m else None
    return out


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
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    # fsdp-train's betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on
    # matrices and embeddings, clip 1.0 (a smaller lr: the data are random
    # tokens, the loss only has to stay finite).
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if a.adamw == "fused" else
                               {"foreach": True}))
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, V, (a.steps, B, T + 1), generator=g)
    print("pytorch: %s L=%d C=%d (%d parameters) B=%d T=%d, %d threads, "
          "BLAS %s (%s), oneDNN %s, attention %s, AdamW %s"
          % (a.model, L, C, nparams, B, T, torch.get_num_threads(),
             names["blas_info"], names["mkl"] or "-", names["onednn"] or "-",
             a.attn, a.adamw), flush=True)
    times, losses = [], []
    for s in range(a.steps):
        t0 = time.perf_counter()
        x, y = data[s, :, :-1], data[s, :, 1:]
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = loss.item()
        t1 = time.perf_counter()
        times.append((t1 - t0) * 1e3)
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
