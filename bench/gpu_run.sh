#!/bin/sh
# gpu_run.sh: on a GPU machine, from bench/gpu_prepare.sh's kit (issue 14):
# the GPU tests, then the benchmark; within 8 minutes on one H200.
#   1. kernels: test_kernels_cuda (CUDA against CPU kernels), then again
#      under compute-sanitizer memcheck;
#   2. training against the CPU back-end (fp32: 1e-4 relative; bf16/fp16:
#      2e-2): W=1 on NCCL (test_gpu_train.sh: tiny, llama-tiny), W=2 and W=4
#      on the one GPU through MPI staging (-device_coll auto picks it:
#      [Note: MPI staging of device buffers]) over every precision and
#      prefetch mode, hybrid sharding and accumulation, and gpt2 at T=1024
#      (V=50257, head size 64, 1024 rows); in every GPU run device memory
#      allocations are never retried and none happens after step 1;
#   3. (the CPU references compared; they ran in the background)
#   4. benchmark: gpt2 and gpt2-medium, bf16, T=1024, tokens/s and MFU of
#      fsdp-train and of PyTorch FSDP2 (fully_shard, bf16
#      MixedPrecisionPolicy) without and with torch.compile; MFU against
#      the dense bf16 peak measured here (gpu_peak.py: cuBLAS 8192^3);
#   5. gpu_checks.sh (contexts, GPU selection, NCCL at set-up, abort), in
#      what is left of the time.
# CPU reference runs go in the background at the start (the GPU machine's
# cores are idle while the GPU tests run) and are waited for before the
# benchmark, which must have the CPU to itself.  Every step has a time budget;
# a step that no longer fits before the 8-minute mark is skipped and said
# so.  Lines: "ok:", "FAIL:", "skip:"; exit status = number of FAILs.
# Results (logs, JSON, summary.txt) into $OUT (default ./gpu-results).
#   usage: sh gpu_run.sh [--dry-run]
#   --dry-run (or DRY_RUN=1): no GPU needed; prints each command with its
#   budget instead of running it (checks the script's logic and timing plan).
set -u
kit=$(cd "$(dirname "$0")" && pwd)
res=${OUT:-$PWD/gpu-results}
DRY=${DRY_RUN:-0}
[ "${1:-}" = "--dry-run" ] && DRY=1
LIMIT=${GPU_RUN_LIMIT:-470} # seconds: 8 minutes less margin
t_start=$(date +%s)
fails=0
exec 3>&1
mkdir -p "$res"
say() { echo "$*" | tee -a "$res/summary.txt"; }
ok() { say "ok: $*"; }
fail() { say "FAIL: $*"; fails=$((fails + 1)); }
skip() { say "skip: $*"; }
left() { echo $((LIMIT - ($(date +%s) - t_start))); }
# fits SECONDS WHAT: 0 when SECONDS still fit before the limit
fits() {
  if [ "$(left)" -lt "$1" ]; then
    skip "$2: needs ${1}s, $(left)s left of ${LIMIT}s"
    return 1
  fi
  return 0
}
# x TIMEOUT CMD...: run under timeout (dry run: print)
x() {
  t=$1
  shift
  if [ "$DRY" = 1 ]; then
    echo "  [dry-run ${t}s] $*" >&3 # fd 3: the terminal, past the callers' redirections
    echo "$t" >>"$res/.planned"
    return 0
  fi
  timeout "$t" "$@" </dev/null # mpirun reads stdin: not the loops' lists
}

if [ "$DRY" = 1 ]; then
  B=/tmp/fsdp-bundle-DRYRUN
  say "dry run: kit $kit, results $res, limit ${LIMIT}s"
  : >"$res/.planned"
else
  rm -rf /tmp/fsdp-bundle-*
  tar -xzf "$kit"/fsdp-bundle-*.tar.gz -C /tmp || { echo "FAIL: no bundle in $kit"; exit 1; }
  B=
  for d in /tmp/fsdp-bundle-*; do [ -d "$d" ] && B=$d; done
  [ -n "$B" ] || { echo "FAIL: the bundle did not unpack into /tmp"; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$res/gpu.txt"
  date -u | tee -a "$res/gpu.txt"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ENV=$B/bin/fsdp-env
TRAIN=$B/bin/fsdp-train
mpi() { t=$1; shift; x "$t" "$ENV" mpirun --allow-run-as-root --oversubscribe "$@"; }

# ---- the training matrix: NAME NP TOLERANCE ARGS (the same on cuda and cpu)
tiny="-model tiny -steps 8 -lr 1e-2 -warmup 2 -seed 5 -summary json -log_every 0 -batch_size 4"
matrix() {
  echo "w2_fp32_none 2 1e-4 $tiny -prefetch none"
  echo "w2_fp32_both 2 1e-4 $tiny -prefetch both"
  echo "w4_fp32_hybrid_accum 4 1e-4 $tiny -sharding_factor 2 -grad_accum 2"
  echo "w4_fp32_noaccumcomm 4 1e-4 $tiny -grad_accum 2 -accum_comm 0 -prefetch none"
  echo "w2_bf16_backward 2 2e-2 $tiny -param_dtype bf16"
  echo "w4_bf16_both 4 2e-2 $tiny -param_dtype bf16 -reduce_dtype bf16 -prefetch both"
  echo "w2_fp16_both 2 2e-2 $tiny -param_dtype fp16 -prefetch both"
  echo "w1_nccl_bf16 1 2e-2 $tiny -param_dtype bf16"
  # realistic shapes: V=50257, head size 64, T=1024 rows per sequence
  echo "w1_gpt2_t1024 1 1e-4 -model gpt2 -batch_size 1 -steps 3 -lr 1e-4 -warmup 1 -seed 5 -summary json -log_every 0"
}

# ---- CPU references, in the background from the start
say "== CPU references (background)"
if [ "$DRY" = 1 ]; then
  matrix | while read -r name np tol args; do
    echo "  [dry-run bg] mpirun -n $np fsdp-train $args -device cpu > $res/cpu_$name.json"
  done
else
  (
    export OMP_NUM_THREADS=4
    matrix | while read -r name np tol args; do
      # shellcheck disable=SC2086
      timeout 300 "$ENV" mpirun --allow-run-as-root --oversubscribe -n "$np" "$TRAIN" $args \
        -device cpu >"$res/cpu_$name.json" 2>"$res/cpu_$name.err" </dev/null
    done
    touch "$res/cpu.done"
  ) &
  cpu_job=$!
fi

# ---- 1. kernels
say "== 1. CUDA kernels against the CPU kernels"
if fits 60 "test_kernels_cuda"; then
  mpi 60 -n 1 "$kit/test_kernels_cuda" >"$res/test_kernels_cuda.txt" 2>&1
  rc=$?
  if [ "$DRY" = 1 ]; then :
  elif [ $rc -eq 0 ]; then ok "test_kernels_cuda: $(tail -1 "$res/test_kernels_cuda.txt")"
  else fail "test_kernels_cuda: exit $rc: $(grep -m3 FAIL "$res/test_kernels_cuda.txt")"; fi
fi
if command -v compute-sanitizer >/dev/null || [ "$DRY" = 1 ]; then
  if fits 90 "compute-sanitizer memcheck"; then
    # singleton MPI (no mpirun): the sanitizer follows one process
    x 90 "$ENV" compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
      "$kit/test_kernels_cuda" >"$res/memcheck.txt" 2>&1
    rc=$?
    [ "$DRY" = 1 ] || case $rc in
      0) ok "memcheck: $(grep -m1 'ERROR SUMMARY' "$res/memcheck.txt")" ;;
      124) fail "memcheck: did not finish in 90 s (see memcheck.txt)" ;;
      *) fail "memcheck: exit $rc: $(grep -m1 'ERROR SUMMARY' "$res/memcheck.txt")" ;;
    esac
  fi
else
  skip "memcheck: compute-sanitizer not on PATH (CUDA toolkit's bin)"
fi

# ---- 2. training against the CPU back-end
say "== 2. training: -device cuda against -device cpu"
if fits 90 "test_gpu_train.sh (W=1 NCCL)"; then
  x 90 sh "$kit/test_gpu_train.sh" "$ENV" "mpirun --allow-run-as-root" "$TRAIN" >"$res/test_gpu_train.txt" 2>&1
  rc=$?
  if [ "$DRY" = 1 ]; then :
  elif [ $rc -eq 0 ]; then ok "test_gpu_train.sh: $(tail -1 "$res/test_gpu_train.txt")"
  else fail "test_gpu_train.sh: exit $rc: $(tail -3 "$res/test_gpu_train.txt")"; fi
fi
compare() { # compare NAME TOL NP: GPU JSON against CPU JSON
  python3 - "$res/gpu_$1.json" "$res/cpu_$1.json" "$1" "$2" "$3" <<'PY'
import json, sys
gp, cp, name, tol, np_ = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
def last(p):
    try:
        return json.loads([l for l in open(p) if l.startswith("{")][-1])
    except Exception:
        return None
g, c = last(gp), last(cp)
if not g or not c:
    print(f"FAIL: {name}: no summary from the {'GPU' if not g else 'CPU'} run"); sys.exit(1)
bad = []
worst = 0.0
for i, (a, b) in enumerate(zip(g["losses"], c["losses"])):
    r = abs(a - b) / max(abs(b), 1e-30)
    worst = max(worst, r)
    if r > tol:
        bad.append(f"step {i + 1}: cuda {a:.6f} cpu {b:.6f}")
if len(g["losses"]) != len(c["losses"]) or not g["losses"]:
    bad.append(f"{len(g['losses'])} vs {len(c['losses'])} losses")
want = "nccl" if np_ == 1 else "mpi-staged"
if g.get("device_coll") != want:
    bad.append(f"device_coll {g.get('device_coll')}, expected {want}")
dm = g.get("device_memory", {})
if dm.get("alloc_retries", -1) != 0 or dm.get("alloc_failures", -1) != 0:
    bad.append(f"device allocations retried/failed: {dm.get('alloc_retries')}/{dm.get('alloc_failures')}")
if dm.get("allocs_after_step1", -1) != 0:
    bad.append(f"{dm.get('allocs_after_step1')} device allocations after step 1")
if bad:
    print(f"FAIL: {name}: " + "; ".join(bad[:4])); sys.exit(1)
print(f"ok: {name}: {len(g['losses'])} losses within {tol:g} (worst {worst:.1e}), "
      f"{g.get('device_coll')}, peak {dm.get('peak_bytes', 0) / 2**20:.0f} MiB, 0 retries, "
      f"0 allocations after step 1")
PY
}
matrix >"$res/matrix.txt"
while read -r name np tol args; do
  fits 40 "train $name" || continue
  # shellcheck disable=SC2086
  mpi 60 -n "$np" "$TRAIN" $args -device cuda >"$res/gpu_$name.json" 2>"$res/gpu_$name.err"
  rc=$?
  [ "$DRY" = 1 ] && continue
  [ $rc -eq 0 ] || { fail "train $name: -device cuda exit $rc: $(tail -2 "$res/gpu_$name.err")"; continue; }
  if [ "$np" -gt 1 ] && ! grep -q "ranks share a GPU" "$res/gpu_$name.json"; then
    say "note: $name: no 'ranks share a GPU' message (more than one GPU here?)"
  fi
done <"$res/matrix.txt"

# ---- 3. the CPU references are done by now (or are waited for)
say "== 3. GPU losses against the CPU references"
if [ "$DRY" != 1 ]; then
  while [ ! -f "$res/cpu.done" ] && [ "$(left)" -gt 200 ]; do sleep 2; done
  [ -f "$res/cpu.done" ] || { kill "$cpu_job" 2>/dev/null; say "note: CPU references cut short"; }
  while read -r name np tol args; do
    [ -s "$res/gpu_$name.json" ] || continue
    out=$(compare "$name" "$tol" "$np")
    rc=$?
    say "$out"
    [ $rc -eq 0 ] || fails=$((fails + 1))
  done <"$res/matrix.txt"
fi

# ---- 4. benchmark
say "== 4. benchmark: bf16, T=1024, W=1 (MFU against the measured bf16 peak)"
peak=${GPU_BF16_PEAK:-}
if [ -z "$peak" ] && fits 30 "bf16 peak (gpu_peak.py)"; then
  x 30 python3 "$kit/gpu_peak.py" >"$res/peak.json" 2>"$res/peak.err"
  [ "$DRY" = 1 ] || peak=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bf16_flops"])' \
    "$res/peak.json" 2>/dev/null)
fi
[ -n "$peak" ] || { peak=989e12; [ "$DRY" = 1 ] || say "note: bf16 peak not measured: MFU against the datasheet's 989 TFLOP/s"; }
bench_b=${GPU_BENCH_BATCH:-8}
for model in gpt2 gpt2-medium; do
  if fits 45 "fsdp-train $model"; then
    mpi 60 -n 1 "$TRAIN" -device cuda -model "$model" -batch_size "$bench_b" -steps 12 -warmup 2 \
      -param_dtype bf16 -log_every 0 -summary json >"$res/bench_fsdp_$model.json" 2>"$res/bench_fsdp_$model.err"
  fi
  if fits 40 "torch FSDP2 $model"; then
    x 60 python3 "$kit/bench_gpu_pytorch.py" --model "$model" --batch "$bench_b" --steps 12 \
      >"$res/bench_torch_$model.json" 2>"$res/bench_torch_$model.err"
  fi
done
for model in gpt2 gpt2-medium; do
  if fits 90 "torch FSDP2 + torch.compile $model"; then
    x 120 python3 "$kit/bench_gpu_pytorch.py" --model "$model" --batch "$bench_b" --steps 14 \
      --warmup 4 --compile >"$res/bench_torchc_$model.json" 2>"$res/bench_torchc_$model.err"
  fi
done
[ "$DRY" = 1 ] || python3 - "$res" "$peak" <<'PY' | tee -a "$res/summary.txt"
import json, os, sys
res, peak = sys.argv[1], float(sys.argv[2])
PRESETS = {"gpt2": (12, 768, 124439808), "gpt2-medium": (24, 1024, 354823168)}
def last(p):
    try:
        return json.loads([l for l in open(p) if l.startswith("{")][-1])
    except Exception:
        return None
print(f"peak bf16 {peak / 1e12:.0f} TFLOP/s (MFU = tokens/s x (6N + 12 L C T) / peak)")
print(f"{'model':12} {'run':22} {'tokens/s':>10} {'MFU':>7}")
for model, (L, C, N) in PRESETS.items():
    s = last(os.path.join(res, f"bench_fsdp_{model}.json"))
    if s and isinstance(s.get("model"), dict) and s["model"].get("param_count"):
        N = s["model"]["param_count"]
    flops_tok = 6 * N + 12 * L * C * 1024
    for tag, f in (("fsdp-train", "fsdp"), ("torch FSDP2", "torch"), ("torch FSDP2 compile", "torchc")):
        r = last(os.path.join(res, f"bench_{f}_{model}.json"))
        if not r or not r.get("tokens_per_s"):
            print(f"{model:12} {tag:22} {'-':>10} {'-':>7}  (no result: bench_{f}_{model}.err)")
            continue
        t = r["tokens_per_s"]
        print(f"{model:12} {tag:22} {t:>10.0f} {100 * t * flops_tok / peak:>6.1f}%")
PY
# ---- 5. issue 14's multi-GPU checks (most mean something on >= 2 GPUs)
say "== 5. gpu_checks.sh (what is left of the time)"
if fits 60 "gpu_checks.sh"; then
  x "$(left)" sh "$kit/gpu_checks.sh" "$B" "$res/issue14" >"$res/gpu_checks.txt" 2>&1
  rc=$?
  if [ "$DRY" != 1 ]; then
    grep -E '^(FAIL|skip):' "$res/gpu_checks.txt" | tee -a "$res/summary.txt"
    if [ $rc -eq 0 ]; then ok "gpu_checks.sh: $(grep -c '^ok:' "$res/gpu_checks.txt") checks ok"
    else fail "gpu_checks.sh: exit $rc"; fi
  fi
fi

[ "$DRY" = 1 ] && say "dry run: every budget together $(awk '{s += $1} END {print s}' "$res/.planned")s (the last, gpu_checks, is what is left); steps that no longer fit are skipped at run time"
say "== gpu_run.sh: $fails failure(s), $(( $(date +%s) - t_start ))s"
exit $fails
