#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# recompute.sh: activation recomputation (-recompute 1) against keeping all
# activations (-recompute 0): memory and step time measured by fsdp-train,
# and the largest GPT-2 preset whose planned memory fits this machine.
#
#   bench/recompute.sh [BINDIR]        (BINDIR: fsdp-train, fsdp-plan; default build/src)
#   NP=2 STEPS=4 ROUNDS=2 MODEL="-model custom ..." bench/recompute.sh
#
# Part 1 (runs): for -recompute 0 and 1, fsdp-train MODEL on NP ranks (full
# sharding, one BLAS/OpenMP thread per rank) for STEPS steps, ROUNDS times
# alternating (the machine's load drifts); prints the
# activation bytes the run allocated and fsdp-plan's for the same options,
# the peak RSS (largest rank), the median step time, the CPU seconds of
# the whole run (all ranks) and the final loss (which must be identical).
# Part 2 (plan): for each GPT-2 preset and -recompute 0/1, fsdp-plan's
# per-rank total (shards, optimizer state, buffers, activations) at
# -world_size PW with -batch_size PB (seq_len 1024), against the memory of
# this machine (MemTotal) divided among the PW ranks.  PRESET_RUN=name also
# trains that preset for one step with -recompute 1 and 0 to confirm
# (slow: minutes per step on 2 cores).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
BIN=${1:-$BENCH_ROOT/build/src}
NP=${NP:-2}
STEPS=${STEPS:-4}
ROUNDS=${ROUNDS:-2}
MODEL=${MODEL:--model custom -n_layer 8 -n_embd 256 -n_head 8 -vocab_size 4096 -seq_len 256 -batch_size 4}
PW=${PW:-1}
PB=${PB:-2}
PRESET_RUN=${PRESET_RUN:-}
for p in fsdp-train fsdp-plan; do
  [ -x "$BIN/$p" ] || { echo "recompute: $BIN/$p not found (give the folder holding fsdp-train and fsdp-plan)"; exit 2; }
done
bench_start recompute
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIEXEC=${MPIEXEC:-mpiexec}

echo "cpu: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2-) ($(getconf _NPROCESSORS_ONLN) cores)," \
     "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "openblas: $(OPENBLAS_VERBOSE=2 "$BIN/fsdp-plan" -world_size 1 -model tiny 2>&1 | grep -m1 "^Core")"

echo "== runs: $NP ranks, $STEPS steps, $ROUNDS rounds of -recompute 0 then 1, $MODEL"
printf '%-10s %14s %14s %12s %12s %12s %12s\n' recompute act_run_MiB act_plan_MiB rss_MiB step_ms cpu_s final_loss
TIMEFORMAT='%U %S'
for _ in $(seq "$ROUNDS"); do
  for r in 0 1; do
    # cpu_s: user + system seconds of all ranks (bash's time of mpiexec and
    # its children), less sensitive than wall time to other load
    # shellcheck disable=SC2086
    { time $MPIEXEC -n "$NP" "$BIN/fsdp-train" $MODEL -steps "$STEPS" -log_every 0 -recompute $r \
        -summary json >"$tmp/run$r.json" 2>"$tmp/run$r.err"; } 2>"$tmp/time$r" ||
      { echo "fsdp-train -recompute $r failed:"; tail -5 "$tmp/run$r.err"; exit 1; }
    # shellcheck disable=SC2086
    "$BIN/fsdp-plan" -world_size "$NP" $MODEL -recompute $r -summary json >"$tmp/plan$r.json"
    python3 - "$r" "$tmp/run$r.json" "$tmp/plan$r.json" "$(cat "$tmp/time$r")" <<'PY'
import json, sys
r, tf, pf, cpu = sys.argv[1:]
t = json.loads(open(tf).read().strip().splitlines()[-1])
p = json.loads(open(pf).read().strip().splitlines()[-1])
M = 1048576.0
print("%-10s %14.2f %14.2f %12.1f %12.1f %12.1f %12.6f" % (r, t["memory"]["activation_bytes"] / M,
      p["memory"]["activation_bytes"] / M, t["memory"]["peak_rss_bytes"] / M,
      t["step_time_ms_median"], sum(map(float, cpu.split())), t["final_loss"]))
PY
  done
done

echo "== plan: GPT-2 presets, -world_size $PW, -batch_size $PB, seq_len 1024, fp32"
mem=$(awk '/MemTotal/ {print $2 * 1024}' /proc/meminfo)
printf '%-12s %10s %16s %16s %14s %14s\n' preset params act_MiB_rc0 act_MiB_rc1 total_GiB_rc0 total_GiB_rc1
for m in gpt2 gpt2-medium gpt2-large gpt2-xl; do
  for r in 0 1; do
    "$BIN/fsdp-plan" -world_size "$PW" -model $m -batch_size "$PB" -recompute $r -summary json >"$tmp/p$m$r.json"
  done
  python3 - "$m" "$tmp/p${m}0.json" "$tmp/p${m}1.json" "$mem" "$PW" <<'PY'
import json, sys
m, a, b, mem, pw = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), float(sys.argv[4]), int(sys.argv[5])
G, M = 2.0**30, 2.0**20
fit = lambda d: "fits" if d["memory"]["total_bytes"] * pw <= mem else "no"
print("%-12s %10d %16.0f %16.0f %9.2f %-4s %9.2f %-4s" % (m, a["model"]["param_count"],
      a["memory"]["activation_bytes"] / M, b["memory"]["activation_bytes"] / M,
      a["memory"]["total_bytes"] / G, fit(a), b["memory"]["total_bytes"] / G, fit(b)))
PY
done

if [ -n "$PRESET_RUN" ]; then
  echo "== one step of $PRESET_RUN, -world_size $PW -batch_size $PB"
  for r in 1 0; do
    # shellcheck disable=SC2086
    if $MPIEXEC -n "$PW" "$BIN/fsdp-train" -model "$PRESET_RUN" -batch_size "$PB" -steps 1 -log_every 0 \
         -recompute $r -summary json >"$tmp/big$r.json" 2>"$tmp/big$r.err"; then
      python3 -c "import json,sys; t=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print('recompute', sys.argv[2], 'loss %.4f' % t['final_loss'], 'step %.0f ms' % t['step_time_ms_median'], 'activations %.0f MiB' % (t['memory']['activation_bytes']/2**20), 'peak rss %.0f MiB' % (t['memory']['peak_rss_bytes']/2**20))" "$tmp/big$r.json" $r
    else
      echo "recompute $r: failed: $(tail -1 "$tmp/big$r.err")"
    fi
  done
fi
