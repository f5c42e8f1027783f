#!/usr/bin/env python3
"""PyTorch FSDP2 comparator for fsdp-train at W ranks (bench/run_bench.sh part C).

Trains bench/lib/torch_models.py's GPT-2 (the same model as fsdp-train: learned
position embeddings with -seq_len rows, fused qkv, tanh GELU, LM head tied
to wte) with torch.distributed.fsdp.fully_shard (FSDP2) over the gloo
backend: one fully_shard per transformer block, one for the root (wte, wpe,
ln_f and the tied head), reshard after forward (FSDP's RAF, fsdp-train's
default), fp32 parameters, gradients and communication, torch.optim.AdamW
with fsdp-train's hyper-parameters and gradient-norm clipping at 1.0.  Each
rank takes its own batch of B sequences of T tokens, runs one thread and,
as fsdp-train under `mpiexec --bind-to core`, is pinned to one core (rank r
to the r-th CPU of the affinity mask, --no_pin: not pinned).

A step is timed as fsdp-train times it: batch, zero grads, forward,
backward (with FSDP's reduce-scatters), clip, AdamW step, loss to a Python
float; rank 0 prints "step i/N | loss | X ms" lines and, last, one JSON
object with the median after the warm-up steps.

    python3 bench/bench_fsdp2_pytorch.py --nproc 2 --model gpt2 --batch_size 4 --seq_len 64
"""

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from torch_models import GPT, PRESETS, adamw, blas_names, timed_step  # noqa: E402


def worker(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if not a.no_pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    from torch.distributed.fsdp import fully_shard

    L, C, NH, V, _ = PRESETS[a.model]
    if a.n_layer:
        L = a.n_layer
    T, B = a.seq_len, a.batch_size
    torch.manual_seed(1337)  # the same initial model on every rank
    model = GPT(L, C, NH, V, T, a.attn)
    nparams = sum(p.numel() for p in model.parameters())
    for blk in model.h:
        fully_shard(blk, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)
    opt = adamw(model, "foreach")
    g = torch.Generator().manual_seed(1 + rank)
    data = torch.randint(0, V, (a.steps, B, T + 1), generator=g)
    if rank == 0:
        names = blas_names()
        print("pytorch fsdp2: %s L=%d C=%d (%d parameters) W=%d B=%d T=%d per rank, %d thread(s) "
              "per rank, gloo, BLAS %s (%s), attention %s"
              % (a.model, L, C, nparams, a.nproc, B, T, torch.get_num_threads(),
                 names["blas_info"], names["mkl"] or "-", a.attn), flush=True)
    times, losses = [], []
    dist.barrier()
    for s in range(a.steps):
        ms, lv = timed_step(model, opt, data[s, :, :-1], data[s, :, 1:])
        times.append(ms)
        losses.append(lv)
        if rank == 0:
            print("step %d/%d | loss %.4f | %.1f ms" % (s + 1, a.steps, lv, times[-1]), flush=True)
    if rank == 0:
        timed = times[a.warmup_steps:] or times
        print(json.dumps({
            "impl": "pytorch-fsdp2", "torch": torch.__version__, "model": a.model,
            "n_layer": L, "world_size": a.nproc, "seq_len": T, "batch_size": B,
            "param_count": nparams, "threads": torch.get_num_threads(),
            "steps": a.steps, "warmup_steps": a.warmup_steps,
            "step_ms": [round(t, 3) for t in times],
            "step_time_ms_median": round(statistics.median(timed), 4),
            "losses": losses}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--model", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--n_layer", type=int)
    ap.add_argument("--seq_len", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=4, help="per rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup_steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="per rank")
    ap.add_argument("--attn", choices=["sdpa", "manual"], default="sdpa")
    ap.add_argument("--no_pin", action="store_true", help="do not pin rank r to one CPU")
    ap.add_argument("--port", type=int, default=0, help="rendezvous port (0: pick a free one)")
    a = ap.parse_args()
    port = a.port
    if not port:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.nproc, join=True)


if __name__ == "__main__":
    sys.exit(main())
