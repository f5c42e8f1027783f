#!/bin/sh
# gpu_run.sh: on a GPU machine, from bench/gpu_prepare.sh's kit: the GPU
# tests, then the benchmark (fsdp-train vs PyTorch FSDP, bf16, W=1, gpt2 and
# gpt2-medium); results into $OUT (or ./gpu-results) for bench/README.md.
set -u
kit=$(cd "$(dirname "$0")" && pwd)
res=${OUT:-$PWD/gpu-results}
mkdir -p "$res"
tar -xzf "$kit"/fsdp-bundle-*.tar.gz -C /tmp
B=$(ls -d /tmp/fsdp-bundle-* | grep -v tar.gz | head -1)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=4
run() { "$B/bin/fsdp-env" mpirun --allow-run-as-root "$@"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$res/gpu.txt"
date -u | tee -a "$res/gpu.txt"

echo "== CUDA kernels against the CPU kernels"
run -n 1 "$B/bin/fsdp-env" "$kit/test_kernels_cuda" 2>&1 | tee "$res/test_kernels_cuda.txt" | tail -5
echo "== tiny model: cuda vs cpu losses, NCCL at W=1, no allocation retries"
sh "$kit/test_gpu_train.sh" "$B/bin/fsdp-env" "mpirun --allow-run-as-root" "$B/bin/fsdp-train" \
  2>&1 | tee "$res/test_gpu_train.txt" | tail -3

echo "== issue 14: contexts per GPU, GPU selection, NCCL at setup, abort, two NCCL streams"
sh "$kit/gpu_checks.sh" "$B" "$res/issue14" 2>&1 | tee "$res/gpu_checks.txt" | grep -v '^ok:' | tail -12

echo "== benchmark: tokens/s and MFU, bf16, W=1, T=1024"
peak=${GPU_BF16_PEAK:-989e12}  # H100/H200 SXM dense bf16 FLOP/s
for model in gpt2 gpt2-medium; do
  for b in 4 8 16; do
    timeout 120 "$B/bin/fsdp-env" mpirun --allow-run-as-root -n 1 "$B/bin/fsdp-train" -device cuda \
      -model "$model" -batch_size "$b" -steps 12 -warmup 2 -param_dtype bf16 -log_every 0 \
      -summary json >"$res/fsdp_${model}_b$b.json" 2>"$res/fsdp_${model}_b$b.err" || true
    timeout 120 python3 "$kit/bench_gpu_pytorch.py" --model "$model" --batch "$b" --steps 12 \
      >"$res/torch_${model}_b$b.json" 2>"$res/torch_${model}_b$b.err" || true
  done
done
python3 - "$res" "$peak" <<'PY'
import json, glob, os, sys
res, peak = sys.argv[1], float(sys.argv[2])
def last(p):
    try:
        return json.loads([l for l in open(p) if l.startswith("{")][-1])
    except Exception:
        return None
print(f"{'model':12} {'B':>3} {'fsdp tok/s':>11} {'fsdp MFU':>9} {'torch tok/s':>12} {'ratio':>6}")
for f in sorted(glob.glob(os.path.join(res, "fsdp_*.json"))):
    s = last(f)
    name = os.path.basename(f)[5:-5]
    t = last(os.path.join(res, "torch_" + name + ".json"))
    if not s:
        print(f"{name}: fsdp-train failed (see .err)"); continue
    m = s["model"]; L, C, T = m["n_layer"], m["n_embd"], m["seq_len"]
    flops_tok = 6 * m["param_count"] + 12 * L * C * T  # + attention
    mfu = s["tokens_per_s"] * flops_tok / peak
    tt = t["tokens_per_s"] if t else float("nan")
    print(f"{m['name']:12} {s['batch_size']:>3} {s['tokens_per_s']:>11.0f} {100*mfu:>8.1f}% {tt:>12.0f} {s['tokens_per_s']/tt if t else float('nan'):>6.2f}")
PY
