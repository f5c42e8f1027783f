#!/usr/bin/env python3
"""Greedy-decoding oracle for fsdp-sample (tests/test_sample.sh).

The model is the one in tiny_gpt2.bin (the GPT-2 numerical oracle's weights,
see README.md): fsdp-sample must continue a prompt, greedily, with exactly
the tokens a plain float64 numpy GPT-2 forward picks.

    python3 greedy_oracle.py --golden tiny_greedy.txt   # write the golden file (numpy)
    python3 greedy_oracle.py --check tiny_greedy.txt    # recompute and compare (numpy)
    python3 greedy_oracle.py --llmc OUT.bin             # the weights as an llm.c file (no numpy)
    python3 greedy_oracle.py --tokenizer OUT.bin        # a 64-token llm.c tokenizer (no numpy)

Decoding: the context is the last max_seq_len (16) tokens at most, at
positions 0..L-1; the next token is the argmax of the logits at L-1 (lowest
id on ties).  Every step's margin (largest minus second largest logit) is
recorded; fp32 C agrees with float64 only where it is far above fp32
rounding, so --golden refuses a prompt whose smallest margin is below 1e-3.
Before decoding, the forward is checked against the oracle's golden loss on
its stored batch (1e-12 relative): the forward is the oracle's model.
"""

import argparse
import array
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHTS = os.path.join(HERE, "tiny_gpt2.bin")
PROMPT = [1, 7, 3, 42, 9]
NEW_TOKENS = 24  # 5 + 24 > 16: the context window slides
MIN_MARGIN = 1e-3


def read_weights(path=WEIGHTS):
    """(header dict, inputs, targets, [(name, shape, floats)], golden loss), no numpy."""
    raw = open(path, "rb").read()
    h = struct.unpack_from("<256i", raw, 0)
    if h[0] != 20261130 or h[1] != 1:
        raise SystemExit("%s: not the GPT-2 oracle file (magic %d)" % (path, h[0]))
    L, NH, C, V, maxT, B, T = h[2:9]
    hdr = dict(n_layer=L, n_head=NH, n_embd=C, vocab_size=V, seq_len=maxT, B=B, T=T)
    off = 1024
    inputs = list(struct.unpack_from("<%di" % (B * T), raw, off)); off += 4 * B * T
    targets = list(struct.unpack_from("<%di" % (B * T), raw, off)); off += 4 * B * T
    specs = [("wte", (V, C)), ("wpe", (maxT, C)), ("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    for i in range(L):
        p = "h.%d." % i
        specs += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                  (p + "attn.c_attn.weight", (3 * C, C)), (p + "attn.c_attn.bias", (3 * C,)),
                  (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
                  (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                  (p + "mlp.c_fc.weight", (4 * C, C)), (p + "mlp.c_fc.bias", (4 * C,)),
                  (p + "mlp.c_proj.weight", (C, 4 * C)), (p + "mlp.c_proj.bias", (C,))]
    params = []
    for name, shape in specs:
        n = 1
        for d in shape:
            n *= d
        a = array.array("f")
        a.frombytes(raw[off:off + 4 * n])
        if sys.byteorder != "little":
            a.byteswap()
        params.append((name, shape, a))
        off += 4 * n
    loss = struct.unpack_from("<d", raw, off)[0]
    return hdr, inputs, targets, params, loss


def write_llmc(path):
    """llm.c GPT-2 checkpoint, version 3 (fp32): header, then wte (Vp, C) with
    zero pad rows, wpe, the per-layer tensors stacked over layers, lnfw, lnfb."""
    hdr, _, _, params, _ = read_weights()
    L, C, V, maxT = hdr["n_layer"], hdr["n_embd"], hdr["vocab_size"], hdr["seq_len"]
    Vp = (V + 127) // 128 * 128
    P = {name: a for name, _, a in params}
    h = [0] * 256
    h[:8] = [20240326, 3, maxT, V, L, hdr["n_head"], C, Vp]
    out = array.array("f")
    out.extend(P["wte"])
    out.extend([0.0] * ((Vp - V) * C))
    out.extend(P["wpe"])
    for k in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
              "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
              "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
        for i in range(L):
            out.extend(P["h.%d.%s" % (i, k)])
    out.extend(P["ln_f.weight"])
    out.extend(P["ln_f.bias"])
    if sys.byteorder != "little":
        out.byteswap()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *h))
        f.write(out.tobytes())
    print("wrote %s (llm.c version 3, V %d, Vp %d)" % (path, V, Vp))


def token_text(i):
    return "w%d " % i


def write_tokenizer(path, n=64, eot=63):
    """llm.c tokenizer, version 2: token i is the text 'w<i> '."""
    h = [0] * 256
    h[:4] = [20240328, 2, n, eot]
    with open(path, "wb") as f:
        f.write(struct.pack("<256I", *h))
        for i in range(n):
            b = token_text(i).encode()
            f.write(struct.pack("<B", len(b)) + b)
    print("wrote %s (%d tokens)" % (path, n))


def forward_logits(P, tokens, n_layer, n_head):
    """float64 GPT-2 forward of one sequence: logits (T, V)."""
    import numpy as np
    T = len(tokens)
    C = P["wte"].shape[1]
    hs = C // n_head

    def ln(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * w + b

    def gelu(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    x = P["wte"][tokens] + P["wpe"][:T]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(n_layer):
        p = "h.%d." % i
        h = ln(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
        qkv = h @ P[p + "attn.c_attn.weight"].T + P[p + "attn.c_attn.bias"]
        y = np.zeros_like(x)
        for hd in range(n_head):
            sl = slice(hd * hs, (hd + 1) * hs)
            q, k, v = qkv[:, 0:C][:, sl], qkv[:, C:2 * C][:, sl], qkv[:, 2 * C:3 * C][:, sl]
            s = q @ k.T / math.sqrt(hs) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            y[:, sl] = s @ v
        x = x + y @ P[p + "attn.c_proj.weight"].T + P[p + "attn.c_proj.bias"]
        h = ln(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
        h = gelu(h @ P[p + "mlp.c_fc.weight"].T + P[p + "mlp.c_fc.bias"])
        x = x + h @ P[p + "mlp.c_proj.weight"].T + P[p + "mlp.c_proj.bias"]
    x = ln(x, P["ln_f.weight"], P["ln_f.bias"])
    return x @ P["wte"].T


def greedy():
    import numpy as np
    hdr, inputs, targets, params, gold = read_weights()
    P = {n: np.array(a, dtype=np.float64).reshape(s) for n, s, a in params}
    L, NH, maxT, B, T = hdr["n_layer"], hdr["n_head"], hdr["seq_len"], hdr["B"], hdr["T"]
    # the forward is the oracle's model: its loss on the stored batch
    total = 0.0
    for b in range(B):
        z = forward_logits(P, inputs[b * T:(b + 1) * T], L, NH)
        m = z.max(axis=-1, keepdims=True)
        lse = (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))[:, 0]
        total += float((lse - z[np.arange(T), targets[b * T:(b + 1) * T]]).sum())
    loss = total / (B * T)
    rel = abs(loss - gold) / abs(gold)
    if rel > 1e-12:
        raise SystemExit("FAIL: forward loss %.17g, oracle's %.17g (rel %.3g)" % (loss, gold, rel))
    print("forward checked: loss %.17g equals the oracle's (rel %.2g)" % (loss, rel))
    ids = list(PROMPT)
    margins = []
    for _ in range(NEW_TOKENS):
        ctx = ids[-maxT:]
        z = forward_logits(P, ctx, L, NH)[len(ctx) - 1]
        order = np.argsort(-z, kind="stable")
        margins.append(float(z[order[0]] - z[order[1]]))
        ids.append(int(order[0]))
    return ids[len(PROMPT):], margins


def write_golden(path):
    new, margins = greedy()
    if min(margins) < MIN_MARGIN:
        raise SystemExit("FAIL: smallest margin %.3g < %g: choose another prompt" % (min(margins), MIN_MARGIN))
    with open(path, "w") as f:
        f.write("# fsdp-sample greedy golden (tests/oracle/greedy_oracle.py, README.md)\n")
        f.write("# model: tests/oracle/tiny_gpt2.bin; decoding: argmax, context = last 16 tokens\n")
        f.write("prompt %s\n" % " ".join(map(str, PROMPT)))
        f.write("greedy %s\n" % " ".join(map(str, new)))
        f.write("min_margin %.6g\n" % min(margins))
    print("wrote %s: %d tokens, smallest margin %.3g" % (path, len(new), min(margins)))


def check_golden(path):
    lines = dict(l.split(None, 1) for l in open(path) if l.strip() and not l.startswith("#"))
    new, margins = greedy()
    want = [int(t) for t in lines["greedy"].split()]
    prompt = [int(t) for t in lines["prompt"].split()]
    if prompt != PROMPT or want != new:
        raise SystemExit("FAIL: %s differs from the recomputed continuation %s" % (path, new))
    print("ok: %s reproduced (smallest margin %.3g)" % (path, min(margins)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--golden", metavar="OUT")
    p.add_argument("--check", metavar="GOLDEN")
    p.add_argument("--llmc", metavar="OUT.bin")
    p.add_argument("--tokenizer", metavar="OUT.bin")
    a = p.parse_args()
    if not (a.golden or a.check or a.llmc or a.tokenizer):
        p.error("nothing to do")
    if a.llmc:
        write_llmc(a.llmc)
    if a.tokenizer:
        write_tokenizer(a.tokenizer)
    if a.golden:
        write_golden(a.golden)
    if a.check:
        check_golden(a.check)


if __name__ == "__main__":
    main()
