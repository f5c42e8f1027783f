#!/usr/bin/env python3
"""Numerical oracle for the C GPT-2 implementation (forward loss + all gradients).

Writes a golden file (default tests/oracle/tiny_gpt2.bin) holding a small
GPT-2 model's fp32 weights, a batch of tokens/targets, the float64 loss and
every parameter's gradient, all computed in float64 with PyTorch autograd from
the fp32-rounded weights.  The C test (tests/test_oracle.c) reads this file, so
the C test suite never needs PyTorch.  See tests/oracle/README.md for the
layout.

Golden file committed in the repository was made with torch 2.15.0 (CPU,
float64), numpy 2.x, Python 3.11.

Usage:
    python3 tests/oracle/gpt2_oracle.py --out tests/oracle/tiny_gpt2.bin
    python3 tests/oracle/gpt2_oracle.py --check tests/oracle/tiny_gpt2.bin

Verification performed on every run:
  * a second, independent forward in plain numpy float64 must reproduce the
    torch loss (checks the model definition: qkv channel order, head split,
    causal mask, tied head, parameter order);
  * central finite differences in float64 for a few elements of every
    parameter tensor (including each tensor's largest-|grad| element) must
    match the autograd gradients.
"""

import argparse
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = 20261130
VERSION = 1
HEADER_INTS = 256
LN_EPS = 1e-5

PRESETS = {
    # name: (n_layer, n_head, n_embd, vocab_size, max_seq_len, B, T)
    "tiny": (2, 4, 32, 64, 16, 4, 16),
}


# --------------------------------------------------------------------------
# Model specification: parameter names, shapes, registration order.
# --------------------------------------------------------------------------

def param_specs(n_layer, C, V, maxT):
    """Return [(name, shape)] in registration order (the order in the file)."""
    specs = [
        ("wte", (V, C)),
        ("wpe", (maxT, C)),
        ("ln_f.weight", (C,)),
        ("ln_f.bias", (C,)),
    ]
    for i in range(n_layer):
        p = "h.%d." % i
        specs += [
            (p + "ln_1.weight", (C,)),
            (p + "ln_1.bias", (C,)),
            (p + "attn.c_attn.weight", (3 * C, C)),
            (p + "attn.c_attn.bias", (3 * C,)),
            (p + "attn.c_proj.weight", (C, C)),
            (p + "attn.c_proj.bias", (C,)),
            (p + "ln_2.weight", (C,)),
            (p + "ln_2.bias", (C,)),
            (p + "mlp.c_fc.weight", (4 * C, C)),
            (p + "mlp.c_fc.bias", (4 * C,)),
            (p + "mlp.c_proj.weight", (C, 4 * C)),
            (p + "mlp.c_proj.bias", (C,)),
        ]
    return specs


def make_case(n_layer, C, V, maxT, B, T, seed):
    """Seeded random weights (NOT the GPT-2 init: varied scales so that every
    gradient is well exercised), tokens and targets.  Weights are rounded to
    fp32; returns (params: list of float32 arrays, inputs, targets)."""
    rng = np.random.default_rng(seed)
    params = []
    for name, shape in param_specs(n_layer, C, V, maxT):
        if name in ("wte", "wpe"):
            a = rng.normal(0.0, 0.2, shape)
        elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                or name == "ln_f.weight":
            a = 1.0 + rng.normal(0.0, 0.1, shape)
        elif name.endswith(".bias"):
            a = rng.normal(0.0, 0.05, shape)
        else:  # linear weight matrices
            a = rng.normal(0.0, 0.1, shape)
        params.append(a.astype(np.float32))
    inputs = rng.integers(0, V, size=(B, T), dtype=np.int64).astype(np.int32)
    targets = rng.integers(0, V, size=(B, T), dtype=np.int64).astype(np.int32)
    return params, inputs, targets


# --------------------------------------------------------------------------
# Forward in torch (float64) -- used for loss and autograd gradients.
# --------------------------------------------------------------------------

def torch_forward(P, inputs, targets, n_layer, n_head):
    """P: dict name -> float64 tensor.  inputs/targets: int64 tensors [B,T].
    Returns the scalar mean cross-entropy loss."""
    B, T = inputs.shape
    C = P["wte"].shape[1]
    hs = C // n_head
    pos = torch.arange(T)
    x = P["wte"][inputs] + P["wpe"][pos][None, :, :]          # [B,T,C]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(n_layer):
        p = "h.%d." % i
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"],
                         LN_EPS)
        qkv = h @ P[p + "attn.c_attn.weight"].T + P[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)                          # Q, K, V order
        q = q.view(B, T, n_head, hs).transpose(1, 2)           # [B,NH,T,hs]
        k = k.view(B, T, n_head, hs).transpose(1, 2)
        v = v.view(B, T, n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        y = y @ P[p + "attn.c_proj.weight"].T + P[p + "attn.c_proj.bias"]
        x = x + y
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"],
                         LN_EPS)
        h = h @ P[p + "mlp.c_fc.weight"].T + P[p + "mlp.c_fc.bias"]
        h = F.gelu(h, approximate="tanh")
        h = h @ P[p + "mlp.c_proj.weight"].T + P[p + "mlp.c_proj.bias"]
        x = x + h
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], LN_EPS)
    logits = x @ P["wte"].T                                    # tied head
    return F.cross_entropy(logits.view(-1, logits.shape[-1]),
                           targets.reshape(-1), reduction="mean")


# --------------------------------------------------------------------------
# Independent forward in plain numpy (float64) -- cross-checks the model.
# --------------------------------------------------------------------------

def numpy_forward(P, inputs, targets, n_layer, n_head):
    """Straight-line loops-and-matmuls version written independently of the
    torch one (explicit per-head slicing, explicit LayerNorm/GELU formulas)."""
    B, T = inputs.shape
    C = P["wte"].shape[1]
    hs = C // n_head

    def ln(x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)   # biased
        return (x - mu) / np.sqrt(var + LN_EPS) * w + b

    def gelu(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                        * (x + 0.044715 * x ** 3)))

    x = P["wte"][inputs] + P["wpe"][:T][None]
    for i in range(n_layer):
        p = "h.%d." % i
        h = ln(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
        W, bq = P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"]
        y = np.zeros_like(x)
        for b in range(B):
            for hd in range(n_head):
                sl = slice(hd * hs, (hd + 1) * hs)
                q = h[b] @ W[0 * C:1 * C][sl].T + bq[0 * C:1 * C][sl]
                k = h[b] @ W[1 * C:2 * C][sl].T + bq[1 * C:2 * C][sl]
                v = h[b] @ W[2 * C:3 * C][sl].T + bq[2 * C:3 * C][sl]
                for t in range(T):
                    s = (k[:t + 1] @ q[t]) / math.sqrt(hs)
                    s = np.exp(s - s.max())
                    s /= s.sum()
                    y[b, t, sl] = s @ v[:t + 1]
        x = x + y @ P[p + "attn.c_proj.weight"].T + P[p + "attn.c_proj.bias"]
        h = ln(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
        h = gelu(h @ P[p + "mlp.c_fc.weight"].T + P[p + "mlp.c_fc.bias"])
        x = x + h @ P[p + "mlp.c_proj.weight"].T + P[p + "mlp.c_proj.bias"]
    x = ln(x, P["ln_f.weight"], P["ln_f.bias"])
    logits = x @ P["wte"].T
    m = logits.max(axis=-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)))[..., 0]
    picked = np.take_along_axis(logits, targets[..., None].astype(np.int64),
                                axis=-1)[..., 0]
    return float((lse - picked).mean())


# --------------------------------------------------------------------------
# Loss + gradients, self-checks.
# --------------------------------------------------------------------------

def compute(params32, inputs, targets, n_layer, n_head, names):
    """float64 loss and gradients (float64 arrays) from fp32 weights."""
    P = {n: torch.tensor(a.astype(np.float64), requires_grad=True)
         for n, a in zip(names, params32)}
    inp = torch.tensor(inputs.astype(np.int64))
    tgt = torch.tensor(targets.astype(np.int64))
    loss = torch_forward(P, inp, tgt, n_layer, n_head)
    loss.backward()
    grads = [P[n].grad.detach().numpy().copy() for n in names]
    return float(loss.item()), grads


def check_numpy_forward(params32, inputs, targets, n_layer, n_head, names,
                        loss):
    P = {n: a.astype(np.float64) for n, a in zip(names, params32)}
    ref = numpy_forward(P, inputs, targets, n_layer, n_head)
    rel = abs(ref - loss) / abs(loss)
    print("numpy forward loss %.17g  torch %.17g  rel diff %.3g"
          % (ref, loss, rel))
    if rel > 1e-12:
        raise SystemExit("FAIL: numpy and torch forward disagree")


def check_finite_differences(params32, inputs, targets, n_layer, n_head,
                             names, grads, seed, per_tensor=3):
    """Central differences in float64 (h = 1e-5) for a few elements of every
    tensor: the element with the largest |grad| plus random ones."""
    P = {n: torch.tensor(a.astype(np.float64)) for n, a in zip(names, params32)}
    inp = torch.tensor(inputs.astype(np.int64))
    tgt = torch.tensor(targets.astype(np.int64))
    rng = np.random.default_rng(seed + 1)
    h = 1e-5
    worst = 0.0
    n_checked = 0
    with torch.no_grad():
        for n, g in zip(names, grads):
            flat = P[n].view(-1)
            idx = [int(np.argmax(np.abs(g)))]
            idx += [int(i) for i in rng.integers(0, flat.numel(),
                                                 per_tensor - 1)]
            for j in idx:
                old = flat[j].item()
                flat[j] = old + h
                lp = torch_forward(P, inp, tgt, n_layer, n_head).item()
                flat[j] = old - h
                lm = torch_forward(P, inp, tgt, n_layer, n_head).item()
                flat[j] = old
                fd = (lp - lm) / (2 * h)
                ag = g.reshape(-1)[j]
                err = abs(fd - ag) / max(abs(ag), 1e-3)
                worst = max(worst, err)
                n_checked += 1
                if err > 1e-6:
                    raise SystemExit("FAIL: finite difference %s[%d]: "
                                     "autograd %.10g fd %.10g"
                                     % (n, j, ag, fd))
    print("finite differences: %d elements over %d tensors, worst "
          "|fd-autograd|/max(|g|,1e-3) = %.3g" % (n_checked, len(names), worst))


# --------------------------------------------------------------------------
# File I/O.
# --------------------------------------------------------------------------

def write_file(path, cfg, inputs, targets, params32, loss, grads):
    n_layer, n_head, C, V, maxT, B, T = cfg
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:10] = [MAGIC, VERSION, n_layer, n_head, C, V, maxT, B, T,
                   len(params32)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(inputs.astype("<i4").tobytes())
        f.write(targets.astype("<i4").tobytes())
        for a in params32:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
        f.write(struct.pack("<d", loss))
        for g in grads:
            f.write(np.ascontiguousarray(g.astype(np.float32),
                                         dtype="<f4").tobytes())


def expected_size(cfg, n_params_elems):
    n_layer, n_head, C, V, maxT, B, T = cfg
    return 4 * HEADER_INTS + 2 * 4 * B * T + 4 * n_params_elems + 8 \
        + 4 * n_params_elems


def read_file(path):
    data = open(path, "rb").read()
    header = np.frombuffer(data, dtype="<i4", count=HEADER_INTS)
    if header[0] != MAGIC or header[1] != VERSION:
        raise SystemExit("FAIL: bad magic/version %d/%d"
                         % (header[0], header[1]))
    if np.any(header[10:] != 0):
        raise SystemExit("FAIL: reserved header words not zero")
    n_layer, n_head, C, V, maxT, B, T, nt = (int(v) for v in header[2:10])
    cfg = (n_layer, n_head, C, V, maxT, B, T)
    specs = param_specs(n_layer, C, V, maxT)
    if nt != len(specs):
        raise SystemExit("FAIL: header says %d tensors, spec has %d"
                         % (nt, len(specs)))
    n_elems = sum(int(np.prod(s)) for _, s in specs)
    if len(data) != expected_size(cfg, n_elems):
        raise SystemExit("FAIL: file size %d, expected %d"
                         % (len(data), expected_size(cfg, n_elems)))
    off = 4 * HEADER_INTS
    inputs = np.frombuffer(data, "<i4", B * T, off).reshape(B, T)
    off += 4 * B * T
    targets = np.frombuffer(data, "<i4", B * T, off).reshape(B, T)
    off += 4 * B * T
    params = []
    for _, s in specs:
        n = int(np.prod(s))
        params.append(np.frombuffer(data, "<f4", n, off).reshape(s))
        off += 4 * n
    loss = struct.unpack_from("<d", data, off)[0]
    off += 8
    grads = []
    for _, s in specs:
        n = int(np.prod(s))
        grads.append(np.frombuffer(data, "<f4", n, off).reshape(s))
        off += 4 * n
    assert off == len(data)
    return cfg, inputs, targets, params, loss, grads


# --------------------------------------------------------------------------

def self_checks(cfg, params, inputs, targets, names, loss, grads, seed):
    n_layer, n_head = cfg[0], cfg[1]
    check_numpy_forward(params, inputs, targets, n_layer, n_head, names, loss)
    check_finite_differences(params, inputs, targets, n_layer, n_head, names,
                             grads, seed)
    T = inputs.shape[1]
    for n, g in zip(names, grads):
        # wpe rows T..maxT-1 are unused when T < maxT: their gradient is 0.
        used = g[:T] if n == "wpe" else g
        if not np.all(np.isfinite(g)) or np.min(np.max(np.abs(used), axis=-1)) == 0.0:
            raise SystemExit("FAIL: gradient of %s has an all-zero row or is "
                             "not finite" % n)


def print_summary(names, grads):
    for n, g in zip(names, grads):
        print("  %-24s %-12s max|g| %.4e" % (n, "x".join(map(str, g.shape)),
                                             float(np.max(np.abs(g)))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write a golden file here")
    ap.add_argument("--check", metavar="FILE",
                    help="re-read FILE, recompute and verify it")
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--n_layer", type=int)
    ap.add_argument("--n_head", type=int)
    ap.add_argument("--n_embd", type=int)
    ap.add_argument("--vocab_size", type=int)
    ap.add_argument("--seq_len", type=int, help="max sequence length (wpe rows)")
    ap.add_argument("--B", type=int, help="batch size")
    ap.add_argument("--T", type=int, help="sequence length of the batch")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-fd", action="store_true",
                    help="skip the finite-difference self-check")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("torch %s, numpy %s" % (torch.__version__, np.__version__))

    if args.check:
        cfg, inputs, targets, params, loss_f, grads_f = read_file(args.check)
        n_layer, n_head, C, V, maxT, B, T = cfg
        names = [n for n, _ in param_specs(n_layer, C, V, maxT)]
        print("file %s: n_layer %d n_head %d n_embd %d vocab %d maxT %d "
              "B %d T %d, %d tensors" % (args.check, *cfg, len(names)))
        if inputs.min() < 0 or inputs.max() >= V or targets.min() < 0 \
                or targets.max() >= V:
            raise SystemExit("FAIL: token out of range")
        loss, grads = compute(params, inputs, targets, n_layer, n_head, names)
        rel = abs(loss - loss_f) / abs(loss_f)
        print("loss: file %.17g recomputed %.17g rel diff %.3g"
              % (loss_f, loss, rel))
        ok = rel <= 1e-12
        worst = 0.0
        for n, gf, g in zip(names, grads_f, grads):
            g32 = g.astype(np.float32)
            r = float(np.max(np.abs(g32.astype(np.float64) - gf))
                      / np.max(np.abs(gf)))
            worst = max(worst, r)
            if r > 1e-6:
                print("  MISMATCH %s: max|diff|/max|gold| = %.3g" % (n, r))
                ok = False
        print("gradients: worst max|diff|/max|gold| over tensors = %.3g"
              % worst)
        if not args.no_fd:
            self_checks(cfg, params, inputs, targets, names, loss, grads,
                        args.seed)
        if not ok:
            raise SystemExit("FAIL: %s does not match recomputation"
                             % args.check)
        print("OK")
        return

    if not args.out:
        ap.error("give --out FILE or --check FILE")
    pre = PRESETS[args.preset]
    over = (args.n_layer, args.n_head, args.n_embd, args.vocab_size,
            args.seq_len, args.B, args.T)
    cfg = tuple(o if o is not None else p for o, p in zip(over, pre))
    n_layer, n_head, C, V, maxT, B, T = cfg
    if C % n_head != 0 or T > maxT or min(cfg) <= 0:
        ap.error("need n_embd %% n_head == 0 and 0 < T <= seq_len")
    names = [n for n, _ in param_specs(n_layer, C, V, maxT)]
    params, inputs, targets = make_case(n_layer, C, V, maxT, B, T, args.seed)
    loss, grads = compute(params, inputs, targets, n_layer, n_head, names)
    print("config: n_layer %d n_head %d n_embd %d vocab %d maxT %d B %d T %d "
          "seed %d" % (*cfg, args.seed))
    print("loss %.17g" % loss)
    print_summary(names, grads)
    if not args.no_fd:
        self_checks(cfg, params, inputs, targets, names, loss, grads,
                    args.seed)
    write_file(args.out, cfg, inputs, targets, params, loss, grads)
    print("wrote %s (%d bytes)" % (args.out, os.path.getsize(args.out)))


if __name__ == "__main__":
    main()
