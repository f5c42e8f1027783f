"""The PyTorch side of the comparisons: fsdp-train's GPT-2 as an nn.Module,
its optimizer and its timed step, shared by bench_pytorch.py (CPU, one
process), bench_fsdp2_pytorch.py (CPU, FSDP2 over gloo) and
bench_gpu_pytorch.py (GPU, FSDP2 over NCCL).  Needs torch (PyPI): a
benchmark comparator, never a runtime need of fsdp.

The model is fsdp-train's GPT-2: token + learned position embeddings (wpe
has -seq_len rows, as fsdp-train's wpe), pre-LayerNorm blocks with fused
qkv [3C, C] and output projection, MLP 4C with tanh GELU, final LayerNorm,
LM head tied to wte, mean cross-entropy (in fp32 whatever the parameters'
type)."""
import math
import re
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
    def __init__(self, C, NH, attn="sdpa"):
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
        else:  # the explicit softmax(QK^T) V
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, maxT, attn="sdpa"):
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
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def adamw(model, impl="foreach"):
    """torch.optim.AdamW with fsdp-train's hyper-parameters: betas (0.9,
    0.95), eps 1e-8, weight decay 0.1 on matrices and embeddings and none on
    vectors (a smaller lr than training would use: the data are random
    tokens, the loss only has to stay finite).  impl: foreach (PyTorch's
    default on the CPU) or fused."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                             **({"fused": True} if impl == "fused" else {"foreach": True}))


def timed_step(model, opt, x, y, sync=None):
    """One optimizer step, timed the way fsdp-train times a step
    (lib/driver/train.c): zero grads, forward, backward, clip at 1.0, AdamW,
    the loss to a Python float.  sync (torch.cuda.synchronize on a GPU) runs
    before the clock starts.  Returns (milliseconds, loss)."""
    if sync:
        sync()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    lv = loss.item()
    return (time.perf_counter() - t0) * 1e3, lv


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
