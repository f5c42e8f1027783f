#!/usr/bin/env python3
"""Golden files from Hugging Face transformers for fsdp's model families.

Builds small random LlamaForCausalLM models (tied and untied head,
n_kv_head = n_head, 2 and 1) and a GPT2LMHeadModel in float64 (eager
attention), and records, for one fixed batch of tokens and targets:
the loss (mean cross-entropy over all B*T positions, targets NOT shifted),
the gradient of every parameter, and a few AdamW steps on the same batch
(torch.optim.AdamW, constant lr, decoupled weight decay on fsdp's decay
set: not norms, biases or embeddings).  tests/test_hf_oracle.c reads them,
so the C test suite never needs Python.  Layout: tests/oracle/README.md.

Usage (developers only; the files are committed):
    /opt/oracle-venv/bin/python tests/oracle/hf_grad_oracle.py --outdir tests/oracle
"""

import argparse
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = 20261201
VERSION = 1
NSTEPS = 3
OPT = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-6, weight_decay=0.1)

CASES = {
    # name: family, n_layer, n_embd, n_head, n_kv_head, ffn_hidden, vocab, seq_len, tie,
    #       rope_theta, norm_eps, B, T, seed
    "llama_mha_untied": ("llama", 2, 16, 4, 4, 16, 16, 8, 0, 500000.0, 1e-5, 2, 8, 11),
    "llama_gqa_tied": ("llama", 2, 16, 4, 2, 16, 16, 8, 1, 10000.0, 1e-3, 2, 8, 12),
    "llama_mqa_untied": ("llama", 2, 16, 4, 1, 24, 16, 8, 0, 10000.0, 1e-5, 2, 8, 13),
    "gpt2": ("gpt2", 2, 8, 2, 2, 32, 16, 8, 1, 0.0, 1e-5, 2, 8, 14),
}


def rmsnorm_float64(self, hidden_states):
    """LlamaRMSNorm.forward without its cast to float32 (transformers computes
    the norm in float32 even in a float64 model): the same formula in the
    input's dtype, so that the golden values and the finite differences below
    are float64."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def eager_attention_float64(module, query, key, value, attention_mask, scaling, dropout=0.0,
                            **kwargs):
    """transformers' Llama eager_attention_forward with the softmax in the
    query's dtype (transformers takes it in float32)."""
    from transformers.models.llama.modeling_llama import repeat_kv
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
    attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
    return attn_output, attn_weights


def llama_model(L, C, NH, KVH, H, V, maxT, tie, theta, eps):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama
    modeling_llama.LlamaRMSNorm.forward = rmsnorm_float64
    modeling_llama.eager_attention_forward = eager_attention_float64
    cfg = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=H, num_hidden_layers=L,
                      num_attention_heads=NH, num_key_value_heads=KVH,
                      max_position_embeddings=maxT, rms_norm_eps=eps, rope_theta=theta,
                      tie_word_embeddings=bool(tie), attention_bias=False, mlp_bias=False,
                      hidden_act="silu", attention_dropout=0.0)
    cfg._attn_implementation = "eager"
    m = LlamaForCausalLM(cfg).double().eval()
    got = m.model.rotary_emb.inv_freq
    want = 1.0 / theta ** (torch.arange(0, C // NH, 2, dtype=torch.float64) / (C // NH))
    assert torch.allclose(got.double(), want, rtol=1e-6), "rope_theta not applied"
    names = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if tie else ["lm_head.weight"])
    blk = ["input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
           "self_attn.v_proj.weight", "self_attn.o_proj.weight",
           "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
           "mlp.down_proj.weight"]
    names += [f"model.layers.{i}.{b}" for i in range(L) for b in blk]
    params = dict(m.named_parameters())
    if tie:
        assert "lm_head.weight" not in params or params["lm_head.weight"] is params[
            "model.embed_tokens.weight"]
    # fsdp name -> (torch tensor, transpose?)
    table = [(n, params[n], False) for n in names]
    assert len({id(p) for _, p, _ in table}) == len(set(id(p) for p in m.parameters()))
    decays = lambda n: "norm" not in n and n != "model.embed_tokens.weight"
    return m, table, decays


def gpt2_model(L, C, NH, V, maxT):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=V, n_positions=maxT, n_embd=C, n_layer=L, n_head=NH,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                     bos_token_id=None, eos_token_id=None)
    cfg._attn_implementation = "eager"
    m = GPT2LMHeadModel(cfg).double().eval()
    p = dict(m.named_parameters())
    # fsdp's GPT names; transformers' Conv1D stores [in, out], fsdp [out, in]
    table = [("wte", p["transformer.wte.weight"], False), ("wpe", p["transformer.wpe.weight"], False),
             ("ln_f.weight", p["transformer.ln_f.weight"], False),
             ("ln_f.bias", p["transformer.ln_f.bias"], False)]
    for i in range(L):
        h = f"transformer.h.{i}."
        for fs, hf in [("ln_1.weight", "ln_1.weight"), ("ln_1.bias", "ln_1.bias"),
                       ("attn.c_attn.weight", "attn.c_attn.weight"),
                       ("attn.c_attn.bias", "attn.c_attn.bias"),
                       ("attn.c_proj.weight", "attn.c_proj.weight"),
                       ("attn.c_proj.bias", "attn.c_proj.bias"), ("ln_2.weight", "ln_2.weight"),
                       ("ln_2.bias", "ln_2.bias"), ("mlp.c_fc.weight", "mlp.c_fc.weight"),
                       ("mlp.c_fc.bias", "mlp.c_fc.bias"), ("mlp.c_proj.weight", "mlp.c_proj.weight"),
                       ("mlp.c_proj.bias", "mlp.c_proj.bias")]:
            t = p[h + hf]
            table.append((f"h.{i}.{fs}", t, t.dim() == 2))
    decays = lambda n: not n.endswith(".bias") and "ln_" not in n and n not in ("wte", "wpe")
    return m, table, decays


def fsdp_view(t, transpose):
    return t.detach().t() if transpose else t.detach()


def make(name, outdir):
    fam, L, C, NH, KVH, H, V, maxT, tie, theta, eps, B, T, seed = CASES[name]
    torch.manual_seed(0)
    if fam == "llama":
        m, table, decays = llama_model(L, C, NH, KVH, H, V, maxT, tie, theta, eps)
    else:
        m, table, decays = gpt2_model(L, C, NH, V, maxT)
    rng = np.random.default_rng(seed)
    # random weights (not any init: every gradient exercised), rounded to fp32
    with torch.no_grad():
        for n, t, _ in table:
            if "norm" in n or "ln_" in n:
                v = (1.0 + rng.normal(0, 0.1, t.shape)) if not n.endswith("bias") else rng.normal(0, 0.05, t.shape)
            elif n.endswith("bias"):
                v = rng.normal(0, 0.05, t.shape)
            else:
                v = rng.normal(0, 0.2, t.shape)
            t.copy_(torch.from_numpy(v.astype(np.float32).astype(np.float64)))
    inputs = rng.integers(0, V, size=(B, T))
    targets = rng.integers(0, V, size=(B, T))
    x = torch.from_numpy(inputs)
    y = torch.from_numpy(targets)
    w0 = [fsdp_view(t, tr).numpy().astype(np.float32).copy() for _, t, tr in table]

    def loss_fn():
        logits = m(input_ids=x).logits
        return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))

    m.zero_grad()
    loss = loss_fn()
    loss.backward()
    grads = [fsdp_view(t.grad, tr).numpy().copy() for _, t, tr in table]
    # independent check of the gradient: central differences (float64)
    for (n, t, tr), g in zip(table, grads):
        gi = np.unravel_index(np.argmax(np.abs(g)), g.shape)
        ti = gi[::-1] if tr else gi
        with torch.no_grad():
            x0 = t[ti].item()
            t[ti] = x0 + 1e-6
            lp = loss_fn().item()
            t[ti] = x0 - 1e-6
            lm = loss_fn().item()
            t[ti] = x0
        fd = (lp - lm) / 2e-6
        assert abs(fd - g[gi]) <= 1e-5 * max(abs(g[gi]), 1e-3), (n, fd, g[gi])
    groups = [{"params": [t for n, t, _ in table if decays(n)], "weight_decay": OPT["weight_decay"]},
              {"params": [t for n, t, _ in table if not decays(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]),
                            eps=OPT["eps"])
    step_losses = []
    for _ in range(NSTEPS):
        opt.zero_grad()
        l = loss_fn()
        l.backward()
        step_losses.append(l.item())
        opt.step()
    w1 = [fsdp_view(t, tr).numpy().astype(np.float32).copy() for _, t, tr in table]
    N = sum(w.size for w in w0)
    hdr = [MAGIC, VERSION, 1 if fam == "llama" else 0, L, C, NH, KVH, H, V, maxT, tie, B, T,
           len(table), N, NSTEPS]
    hdr += [0] * (64 - len(hdr))
    reals = [theta, eps, OPT["lr"], OPT["beta1"], OPT["beta2"], OPT["eps"], OPT["weight_decay"]]
    reals += [0.0] * (16 - len(reals))
    path = os.path.join(outdir, f"hf_{name}.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<64i", *hdr))
        f.write(struct.pack("<16d", *reals))
        f.write(inputs.astype("<i4").tobytes())
        f.write(targets.astype("<i4").tobytes())
        for w in w0:
            f.write(w.astype("<f4").tobytes())
        f.write(struct.pack("<d", loss.item()))
        for g in grads:
            f.write(g.astype("<f4").tobytes())
        f.write(struct.pack(f"<{NSTEPS}d", *step_losses))
        for w in w1:
            f.write(w.astype("<f4").tobytes())
    print(f"{path}: {len(table)} tensors, {N} parameters, loss {loss.item():.12f}, "
          f"step losses {[round(v, 9) for v in step_losses]}, {os.path.getsize(path)} bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--outdir", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--case", choices=sorted(CASES), action="append")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    for name in a.case or sorted(CASES):
        make(name, a.outdir)


if __name__ == "__main__":
    main()
