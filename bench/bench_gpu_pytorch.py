#!/usr/bin/env python3
"""PyTorch FSDP (fully_shard) comparator for bench/gpu_run.sh: the same GPT-2
(tied head, pre-LN, tanh GELU), W=1, FSDP2 fully_shard per block and at the
root with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), AdamW
(fused); --compile wraps each block in torch.compile (compile time is spent
in the warm-up steps, not timed); prints one JSON line with tokens_per_s
(median of the steps after warm-up)."""
import argparse, json, math, os, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"gpt2": (12, 768, 12), "gpt2-medium": (24, 1024, 16)}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V=50257, T=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
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
    L, C, NH = PRESETS[a.model]
    model = GPT(L, C, NH, T=a.seq).cuda()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for b in model.h:
        fully_shard(b, mp_policy=mp)
        if a.compile:
            b.compile()
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    V = 50257
    times = []
    for s in range(a.steps):
        idx = torch.randint(0, V, (a.batch, a.seq), device="cuda")
        tgt = torch.randint(0, V, (a.batch, a.seq), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times[a.warmup:])
    print(json.dumps({"model": a.model, "batch_size": a.batch, "torch": torch.__version__,
                      "step_time_ms_median": med * 1e3, "tokens_per_s": a.batch * a.seq / med, "compile": a.compile,
                      "loss": float(loss)}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
