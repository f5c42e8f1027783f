#!/usr/bin/env python3
"""hf_oracle.py: golden Hugging Face folders for fsdp-ckpt import-hf/export-hf.

Developer script (needs torch, transformers, safetensors; the C tests do not):

    python3 tests/oracle/hf_oracle.py --out tests/oracle/hf        # regenerate
    python3 tests/oracle/hf_oracle.py --check-export DIR... --golden tests/oracle/hf/gpt2/oracle.json...

--out writes tiny random models with save_pretrained (see tests/oracle/README.md):
  gpt2/          GPT2LMHeadModel, F32, one model.safetensors
  gpt2-sharded/  the same weights, sharded (model.safetensors.index.json)
  gpt2-bf16/     the same model saved in bfloat16
  llama-tied/    LlamaForCausalLM, tie_word_embeddings true, F32
  llama-untied/  LlamaForCausalLM, untied head, saved in float16
and in each folder oracle.json: tokens, targets, the model's logits on the
tokens in float64 (from the saved weights, loaded back with from_pretrained),
the mean cross-entropy loss for `targets`, and for every v the loss with all
targets equal to v (loss_const[v]): V + 1 losses that pin every logit.

--check-export loads a folder written by fsdp-ckpt export-hf with
from_pretrained, computes its logits on the golden tokens in float64 and
compares them with the golden logits (max |diff| <= --tol, default 1e-5).
"""
import argparse
import json
import os
import shutil
import sys

import torch


def losses(logits, targets):
    lp = torch.log_softmax(logits, dim=-1)  # [T, V]
    T, V = lp.shape
    main = -lp[torch.arange(T), targets].mean().item()
    const = [-lp[:, v].mean().item() for v in range(V)]
    return main, const


def logits_of(folder, tokens):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    m = m.double().eval()
    with torch.no_grad():
        return m(torch.tensor([tokens])).logits[0]


def write_oracle(folder, tokens, targets):
    lg = logits_of(folder, tokens)
    main, const = losses(lg, torch.tensor(targets))
    with open(os.path.join(folder, "oracle.json"), "w") as f:
        json.dump({"tokens": tokens, "targets": targets, "loss": main, "loss_const": const,
                   "logits": [[float(x) for x in row] for row in lg]}, f, separators=(",", ":"))


def keep_only(folder, names):
    for n in os.listdir(folder):
        if n not in names and not n.startswith("model"):
            os.remove(os.path.join(folder, n))


def randomize(model, gen):
    # not the library init: every tensor visibly non-trivial (norm weights
    # around 1, biases non-zero), so a dropped or transposed tensor shows
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))


def generate(out, seed):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    gen = torch.Generator().manual_seed(seed)
    os.makedirs(out, exist_ok=True)
    V, T = 16, 8
    tokens = torch.randint(0, V, (T,), generator=gen).tolist()
    targets = torch.randint(0, V, (T,), generator=gen).tolist()

    gcfg = GPT2Config(n_layer=2, n_embd=8, n_head=2, vocab_size=V, n_positions=T,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    g = GPT2LMHeadModel(gcfg).float()
    randomize(g, gen)
    g.eval()
    for name, kw in [("gpt2", {}), ("gpt2-sharded", {"max_shard_size": "4KB"})]:
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        g.save_pretrained(d, safe_serialization=True, **kw)
        keep_only(d, {"config.json"})
        write_oracle(d, tokens, targets)
    d = os.path.join(out, "gpt2-bf16")
    shutil.rmtree(d, ignore_errors=True)
    g.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    keep_only(d, {"config.json"})
    write_oracle(d, tokens, targets)

    for name, tie, dtype in [("llama-tied", True, torch.float32),
                             ("llama-untied", False, torch.float16)]:
        lcfg = LlamaConfig(num_hidden_layers=2, hidden_size=8, num_attention_heads=2,
                           num_key_value_heads=1, intermediate_size=16, vocab_size=V,
                           max_position_embeddings=T, tie_word_embeddings=tie,
                           rope_theta=10000.0, rms_norm_eps=1e-5)
        lm = LlamaForCausalLM(lcfg).float()
        randomize(lm, gen)
        if tie:
            lm.tie_weights()
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        lm.to(dtype).save_pretrained(d, safe_serialization=True)
        keep_only(d, {"config.json"})
        write_oracle(d, tokens, targets)


def check_export(folder, golden, tol):
    with open(golden) as f:
        gd = json.load(f)
    lg = logits_of(folder, gd["tokens"])
    ref = torch.tensor(gd["logits"], dtype=torch.float64)
    diff = (lg - ref).abs().max().item()
    main, _ = losses(lg, torch.tensor(gd["targets"]))
    print(f"{folder}: logits max|diff| {diff:.3e} vs {golden} (tol {tol:g}); "
          f"loss {main:.12f} golden {gd['loss']:.12f}")
    return 0 if diff <= tol else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--check-export", nargs="+", help="folders written by export-hf")
    ap.add_argument("--golden", nargs="+", help="their oracle.json files, in the same order")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    if a.out:
        generate(a.out, a.seed)
    if a.check_export:
        if not a.golden or len(a.golden) != len(a.check_export):
            ap.error("--check-export and --golden need as many folders as oracle files")
        return max(check_export(d, g, a.tol) for d, g in zip(a.check_export, a.golden))
    return 0


if __name__ == "__main__":
    sys.exit(main())
