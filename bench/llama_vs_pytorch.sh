#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# llama_vs_pytorch.sh: fsdp-train against PyTorch on the CPU, GPT-2 124M and
# a Llama of similar size (12 layers, 768 wide, 12 heads, 4 kv heads, SwiGLU
# 2048, untied head), side by side in one run: one process with THREADS
# threads each, B sequences of T tokens, fp32 AdamW; REPS repetitions
# interleaved; prints each median step time and the ratios ours/PyTorch.
# PyTorch: bench/bench_pytorch.py (GPT-2, the same model as fsdp's) and
# bench/bench_llama_pytorch.py (transformers' LlamaForCausalLM, eager).
#   PYTHON=/opt/oracle-venv/bin/python REPS=3 bench/llama_vs_pytorch.sh [BINDIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
BIN=${1:-$BENCH_ROOT/build/src}
PYTHON=${PYTHON:-python3}
REPS=${REPS:-3} STEPS=${STEPS:-10} THREADS=${THREADS:-2} B=${B:-4} T=${T:-64}
bench_lock llama_vs_pytorch
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=1
bench_openblas_core
gpt="-model custom -n_layer 12 -n_embd 768 -n_head 12 -vocab_size 50257 -seq_len $T"
llama="-model custom -family llama -n_layer 12 -n_embd 768 -n_head 12 -n_kv_head 4 -ffn_hidden 2048 -vocab_size 50257 -seq_len $T -tie_embeddings 0"
tmp=$(mktemp -d)
# shellcheck disable=SC2016  # expanded at exit
bench_at_exit 'rm -rf "$tmp"'
med() { tail -n 1 "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_time_ms_median"])'; }
echo "llama_vs_pytorch: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), OPENBLAS_CORETYPE ${OPENBLAS_CORETYPE:-auto}, $THREADS threads, B $B, T $T, $STEPS steps, REPS $REPS"
for r in $(seq "$REPS"); do
  # shellcheck disable=SC2086
  mpiexec --bind-to none -n 1 "$BIN/fsdp-train" $gpt -batch_size "$B" -steps "$STEPS" -log_every 0 -summary json >"$tmp/og$r" 2>&1 || { cat "$tmp/og$r"; exit 1; }
  "$PYTHON" "$here/bench_pytorch.py" --model gpt2 --batch_size "$B" --seq_len "$T" --steps "$STEPS" --threads "$THREADS" >"$tmp/pg$r" 2>&1 || { tail -3 "$tmp/pg$r"; exit 1; }
  # shellcheck disable=SC2086
  mpiexec --bind-to none -n 1 "$BIN/fsdp-train" $llama -batch_size "$B" -steps "$STEPS" -log_every 0 -summary json >"$tmp/ol$r" 2>&1 || { cat "$tmp/ol$r"; exit 1; }
  "$PYTHON" "$here/bench_llama_pytorch.py" --batch_size "$B" --seq_len "$T" --steps "$STEPS" --threads "$THREADS" >"$tmp/pl$r" 2>&1 || { tail -3 "$tmp/pl$r"; exit 1; }
  printf 'rep %d: gpt2 ours %s ms, pytorch %s ms | llama ours %s ms, pytorch %s ms\n' "$r" \
    "$(med "$tmp/og$r")" "$(med "$tmp/pg$r")" "$(med "$tmp/ol$r")" "$(med "$tmp/pl$r")"
done | tee "$tmp/rows"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1   # a run failed (its error is above): no ratios
python3 - "$tmp/rows" <<'PY'
import statistics, sys
g, l = [], []
for line in open(sys.argv[1]):
    f = line.split()
    og, pg, ol, pl = float(f[4]), float(f[7]), float(f[12]), float(f[15])
    g.append(og / pg); l.append(ol / pl)
print("ours/PyTorch (median of per-repetition ratios [min, max]): gpt2 %.3f [%.3f, %.3f], llama %.3f [%.3f, %.3f]"
      % (statistics.median(g), min(g), max(g), statistics.median(l), min(l), max(l)))
PY
