#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# steptime_validate.sh: does fsdp-plan's predicted step time hold against
# fsdp-train on the same machine?  One setting per call:
#   node     one node, W = 2 (plain mpirun)
#   1gbit    2 emulated nodes x 2 ranks, a 1 Gbit/s shaped link
#   10gbit   the same at 10 Gbit/s        (tests/cluster/netcluster.sh; root)
# PER_NODE: ranks per emulated node, 1 or 2; by default as many as the
# machine's cores allow (2 where it has 4 or more, else 1): the emulated
# nodes share this machine's cores, and at 2 per node a 2-core machine ran
# 4 ranks and their stream threads on 2 cores, more than the project times
# anything with (bench/results/2026-12-02-steptime-validation.md, "One rank
# per emulated node").  At 1 per
# node W = 2 and the configurations are the node setting's (F 2 shards
# across the link, F 1 replicates over it).
# In one run: fsdp-probe measures the machine the way the runs are launched
# (the profile), then for each configuration (sharding factor, -wrap,
# -prefetch, RAF/NRAF, -limit_all_gathers) fsdp-train runs REPS times,
# interleaved, and fsdp-plan -profile predicts it (from each repetition's
# own probe with PROBES=each, the default: the median of the predictions
# against the median of the runs).  Printed: per
# configuration the measured median step time and exposed communication
# (fsdp-train's summary: median step, exposed_ms_median), the predicted ones, and
# predicted/measured; then how many predictions fall within 20%, Kendall's
# tau between predicted and measured exposed communication, and the
# tuner's pick (fsdp-plan -tune over the space, its winner measured as the
# last row) against the fastest measured configuration of the sweep.
#
#   bench/steptime_validate.sh node|1gbit|10gbit [BINDIR]
#   REPS=3 STEPS=6 MODEL="-model custom ..." bench/steptime_validate.sh 1gbit
#   PER_NODE=2 bench/steptime_validate.sh 10gbit     # 2 x 2 (needs 4 cores to time fairly)
# In pieces (each call under ~10 minutes, e.g. under the bench lock): with
# DIR set, results are kept there and a call does only what is missing:
# the probe and the tuner, then the repetitions REP_FIRST..REP_LAST of
# every configuration not yet measured, then (all measured) the report,
# also written to DIR/rows.csv for bench/steptime_plot.py.
#   DIR=/tmp/v1g REPS=3 REP_LAST=1 bench/steptime_validate.sh 1gbit   # probe, tune, repetition 1
#   DIR=/tmp/v1g REPS=3 bench/steptime_validate.sh 1gbit              # repetitions 2, 3, report
# SWEEP=slurm (node only): the way a user sweeps, under a private Slurm
# (tests/slurm/cluster.sh): the probe runs with srun, and each repetition
# of the sweep is one job array of jobscripts/sweep.sbatch over an options
# file per configuration (%1: one task at a time, so that none times
# beside another).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
root=$BENCH_ROOT
MODE=${1:-node}
BIN=${2:-$root/build/src}
REPS=${REPS:-3}
STEPS=${STEPS:-6}
MODEL=${MODEL:-$BENCH_HALF_GPT2 -batch_size 4}
[ -x "$BIN/fsdp-train" ] || { echo "steptime_validate: $BIN/fsdp-train not found"; exit 2; }
bench_lock steptime_validate
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
bench_openblas_core
if [ -n "${DIR:-}" ]; then
  mkdir -p "$DIR" || exit 1
  tmp=$(cd "$DIR" && pwd) keep=1
else
  tmp=$(mktemp -d /tmp/fsdp_steptime.XXXXXX) keep=0
fi
cleanup() { [ "$keep" = 1 ] || rm -rf "$tmp"; }
two_rank_configs=("-sharding_factor 2 -prefetch none" "-sharding_factor 2 -prefetch backward"
                  "-sharding_factor 2 -prefetch both" "-sharding_factor 2 -prefetch backward -wrap 2"
                  "-sharding_factor 2 -prefetch both -wrap 3" "-sharding_factor 2 -prefetch backward -reshard_after_forward 0"
                  "-sharding_factor 2 -prefetch both -limit_all_gathers 1" "-sharding_factor 1 -prefetch backward"
                  "-sharding_factor 1 -prefetch none -wrap 2" "-sharding_factor 1 -prefetch both -wrap 3"
                  "-sharding_factor 2 -prefetch none -wrap 6")
if [ -z "${PER_NODE:-}" ]; then
  PER_NODE=1
  [ "$(nproc)" -ge 4 ] && PER_NODE=2
fi
case "$PER_NODE" in 1|2) ;; *) echo "steptime_validate: PER_NODE must be 1 or 2"; exit 2 ;; esac
case "$MODE" in
  node)
    W=2 G=2
    launch() { mpirun --oversubscribe -n 2 "$@"; }
    configs=("${two_rank_configs[@]}")
    bench_at_exit cleanup ;;
  1gbit|10gbit)
    . "$here/lib/cluster.sh"
    bench_at_exit cleanup
    bench_cluster_up 2 "$MODE"
    G=$PER_NODE W=$((2 * PER_NODE))
    launch() { bash -c 'nc_mpirun "$@"' nc_mpirun "node1:$G,node2:$G" -n "$W" -x OMP_NUM_THREADS \
                 -x OPENBLAS_NUM_THREADS -x OPENBLAS_CORETYPE "$@"; }
    if [ "$PER_NODE" = 1 ]; then configs=("${two_rank_configs[@]}")
    else configs=("-sharding_factor 4 -prefetch none" "-sharding_factor 4 -prefetch backward"
             "-sharding_factor 4 -prefetch both" "-sharding_factor 4 -prefetch backward -wrap 2"
             "-sharding_factor 4 -prefetch backward -reshard_after_forward 0"
             "-sharding_factor 4 -prefetch both -limit_all_gathers 1" "-sharding_factor 2 -prefetch none"
             "-sharding_factor 2 -prefetch backward" "-sharding_factor 2 -prefetch both -wrap 2"
             "-sharding_factor 1 -prefetch backward" "-sharding_factor 1 -prefetch none -wrap 3"
             "-sharding_factor 4 -prefetch both -wrap 3"); fi ;;
  *) echo "steptime_validate: MODE must be node, 1gbit or 10gbit"; exit 2 ;;
esac
SWEEP=${SWEEP:-mpirun}
if [ "$SWEEP" = slurm ]; then
  [ "$MODE" = node ] || { echo "steptime_validate: SWEEP=slurm is for node"; exit 2; }
  # shellcheck source=../tests/slurm/cluster.sh
  . "$root/tests/slurm/cluster.sh"
  slurm_require || exit 77
  slurm_start || exit 77
  slurm_mpi_launchers
  bench_at_exit slurm_stop
  FSDP_TRAIN=$(slurm_train_wrapper "$BIN/fsdp-train")
  export FSDP_TRAIN
  launch() { srun --mpi="${FSDP_SRUN_MPI:-pmix}" -N 1 -n 2 --cpus-per-task=1 "$@"; }
elif [ "$SWEEP" != mpirun ]; then
  echo "steptime_validate: SWEEP must be mpirun or slurm"; exit 2
fi
cpu=$(bench_cpu)
echo "steptime_validate: $MODE, W $W ($G per node), $cpu, OPENBLAS_CORETYPE ${OPENBLAS_CORETYPE:-auto}, REPS $REPS, STEPS $STEPS"
echo "model: $MODEL"
# the probe measures messages up to the model's largest unit (its default
# -probe_max_bytes), the sizes a step moves
if [ ! -s "$tmp/prof.h5" ]; then
  # shellcheck disable=SC2086
  launch "$BIN/fsdp-probe" $MODEL -profile_out "$tmp/prof.h5" >"$tmp/probe.out" 2>&1 ||
    { echo "fsdp-probe failed"; tail -n 5 "$tmp/probe.out"; rm -f "$tmp/prof.h5"; exit 1; }
fi
grep -E 'BLAS core|matmuls|messages|cross|node |share|beside|join' "$tmp/probe.out"
# the tuner's pick over the same space (same sequences per rank), measured
# with the others
# shellcheck disable=SC2086
"$BIN/fsdp-plan" -world_size "$W" -ranks_per_node "$G" $MODEL -profile "$tmp/prof.h5" -tune -tune_top 3 \
  -tune_options_out "$tmp/win.opts" >"$tmp/tune.out" 2>&1 || { echo "tune failed"; cat "$tmp/tune.out"; exit 1; }
configs+=("$(grep -v '^#' "$tmp/win.opts" | tr '\n' ' ')")
# Each repetition runs the configurations in its own shuffled order (seeded
# by the repetition): the host's slow and fast phases last minutes, and a
# fixed order would hand one phase to the same configurations every time
# (the tuner's pick, measured last, ran in a slow phase twice of three).
# With PROBES=each (the default) every repetition after the first also
# probes the machine again, at its own place in the shuffled order ("p"):
# the prediction of a configuration is the median of its predictions from
# the REPS profiles, as its measurement is the median of REPS runs.  One
# probe samples the host in one minute of its phases (seen: a probe in a
# slow minute, every prediction 3-30% high; another in a fast minute with
# the runs in a slow stretch, 4 of 12 within 20%).  PROBES=once: the first
# profile predicts every repetition.
PROBES=${PROBES:-each}
case "$PROBES" in each|once) ;; *) echo "steptime_validate: PROBES must be each or once"; exit 2 ;; esac
rep_order() { python3 -c 'import random, sys
n, rep, probe = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "each" and int(sys.argv[2]) > 1
o = list(range(n)) + (["p"] if probe else []); random.Random(rep).shuffle(o); print(" ".join(map(str, o)))' \
  "${#configs[@]}" "$1" "$PROBES"; }
# probe_rep REP: this repetition's profile (the first's is prof.h5)
probe_rep() {
  [ -s "$tmp/prof-$1.h5" ] && return 0
  # shellcheck disable=SC2086
  launch "$BIN/fsdp-probe" $MODEL -profile_out "$tmp/prof-$1.h5" >"$tmp/probe-$1.out" 2>&1 ||
    { echo "fsdp-probe (repetition $1) failed"; tail -n 5 "$tmp/probe-$1.out"; rm -f "$tmp/prof-$1.h5"; exit 1; }
}
for rep in $(seq "${REP_FIRST:-1}" "${REP_LAST:-$REPS}"); do
  order=$(rep_order "$rep")
  if [ "$SWEEP" = slurm ]; then # one job array per repetition
    case " $order " in *" p "*) probe_rep "$rep" ;; esac # before the array (srun, not one of its tasks)
    order=${order//p/}
    sw=$tmp/sweep-$rep
    rm -rf "$sw"
    mkdir -p "$sw"
    todo=()
    for i in $order; do
      [ -s "$tmp/run-$i-$rep.out" ] && continue
      # an option and its value per line; the model's first, the configuration's after;
      # the array runs the files in name order: the repetition's order first
      # shellcheck disable=SC2086
      printf -- '%s %s\n' $MODEL ${configs[$i]} >"$sw/p$(printf %02d "${#todo[@]}")-c$(printf %02d "$i").opts"
      todo+=("$i")
    done
    [ ${#todo[@]} -eq 0 ] && continue
    jid=$(FSDP_RUN_DIR=$sw/runs sbatch --parsable --time=60 --nodes=1 --ntasks-per-node=2 \
            --cpus-per-task=1 --array=0-$((${#todo[@]} - 1))%1 --output="$sw/%a.out" \
            "$root/jobscripts/sweep.sbatch" "$sw" -steps "$STEPS" -log_every 0) ||
      { echo "sbatch failed"; exit 1; }
    slurm_wait 3600 "$jid" || exit 1
    for k in "${!todo[@]}"; do
      i=${todo[$k]}
      s=$sw/runs/p$(printf %02d "$k")-c$(printf %02d "$i")/summary.json
      grep -q step_time_ms_median "$s" 2>/dev/null ||
        { echo "sweep task $k (${configs[$i]}) failed:"; tail -n 5 "$sw/$k.out"; exit 1; }
      cp "$s" "$tmp/run-$i-$rep.out"
    done
    echo "steptime_validate: repetition $rep/$REPS done (job array $jid)"
    continue
  fi
  for i in $order; do
    if [ "$i" = p ]; then probe_rep "$rep"; continue; fi
    [ -s "$tmp/run-$i-$rep.out" ] && continue
    # shellcheck disable=SC2086
    launch "$BIN/fsdp-train" $MODEL ${configs[$i]} -steps "$STEPS" -log_every 0 -summary json \
      >"$tmp/run-$i-$rep.part" 2>&1 || { echo "run ${configs[$i]} failed"; tail -n 5 "$tmp/run-$i-$rep.part"; exit 1; }
    mv "$tmp/run-$i-$rep.part" "$tmp/run-$i-$rep.out"
  done
  echo "steptime_validate: repetition $rep/$REPS done"
done
for rep in $(seq "$REPS"); do
  for i in "${!configs[@]}"; do
    [ -s "$tmp/run-$i-$rep.out" ] || { echo "steptime_validate: repetition $rep not measured yet (results in $tmp)"; exit 0; }
  done
done
# every configuration predicted from every profile: plan-I.out from the
# first, plan-I-R.out from repetition R's
for i in "${!configs[@]}"; do
  for rep in $(seq "$REPS"); do
    prof=$tmp/prof-$rep.h5 out=$tmp/plan-$i-$rep.out
    if [ "$rep" = 1 ]; then prof=$tmp/prof.h5 out=$tmp/plan-$i.out; fi
    [ -s "$prof" ] || continue
    # shellcheck disable=SC2086
    "$BIN/fsdp-plan" -world_size "$W" -ranks_per_node "$G" $MODEL ${configs[$i]} -profile "$prof" \
      -summary json >"$out" 2>&1 || { echo "plan ${configs[$i]} failed"; cat "$out"; exit 1; }
  done
done
printf '%s\n' "${configs[@]}" >"$tmp/configs"
label=$MODE # rows.csv's mode: "10gbit/1" at one rank per emulated node
[ "$MODE" != node ] && [ "$PER_NODE" = 1 ] && label=$MODE/1
python3 - "$tmp" "$REPS" "$label" <<'PY'
import json, os, statistics, sys
d, reps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
configs = open(d + "/configs").read().splitlines()
def last(path): return json.loads([l for l in open(path) if l.strip()][-1])
# a configuration's predictions, one per profile (the first, then each
# repetition's where it probed)
def plans(i):
    paths = ["%s/plan-%d.out" % (d, i)] + ["%s/plan-%d-%d.out" % (d, i, r) for r in range(2, reps + 1)]
    return [last(p)["predicted"] for p in paths if os.path.exists(p)]
# rank 0's exposed time: its median over the steps (as the step time's),
# where the summary has it, else the mean
def exposed(run):
    ct = run["comm_time_per_step"]
    return ct.get("exposed_ms_median", ct["exposed_ms"])
rows, spans, steps, predicted = [], [], [], []
for i, c in enumerate(configs):
    runs = [last("%s/run-%d-%d.out" % (d, i, r)) for r in range(1, reps + 1)]
    steps.append([r["step_time_ms_median"] for r in runs])
    meas = statistics.median(steps[-1])
    exp = [exposed(r) for r in runs]
    ps = plans(i)
    predicted.append([p["step_time_ms"] for p in ps])
    rows.append((c, meas, statistics.median(exp), statistics.median(predicted[-1]),
                 statistics.median([p["exposed_comm_ms"] for p in ps])))
    spans.append(exp)
with open(d + "/rows.csv", "w") as f:
    f.write("mode,configuration,measured_ms,measured_exposed_ms,predicted_ms,predicted_exposed_ms,tuner\n")
    for i, (c, m, me, p, pe) in enumerate(rows):
        f.write('%s,"%s",%.2f,%.2f,%.2f,%.2f,%d\n' % (mode, c.strip(), m, me, p, pe, i == len(rows) - 1))
if len(predicted[0]) > 1:
    # how far the host moved between the probes: the first configuration's
    # predictions from each profile
    print("%d profiles (one per repetition); the first configuration predicted from each: %s ms"
          % (len(predicted[0]), " ".join("%.1f" % x for x in predicted[0])))
print("%-58s %10s %10s %10s %10s %7s" % ("configuration", "meas ms", "meas exp", "pred ms", "pred exp", "pred/m"))
within = 0
for c, m, me, p, pe in rows:
    within += abs(p / m - 1) <= 0.2
    print("%-58s %10.1f %10.1f %10.1f %10.1f %7.3f" % (c, m, me, p, pe, p / m))
def tau(a, b):
    n, s = len(a), 0
    for i in range(n):
        for j in range(i + 1, n):
            x, y = a[i] - a[j], b[i] - b[j]
            s += (x * y > 0) - (x * y < 0)
    return s / (n * (n - 1) / 2)
print("within 20%%: %d of %d; Kendall tau of exposed communication (predicted vs measured): %.2f"
      % (within, len(rows), tau([r[4] for r in rows], [r[2] for r in rows])))
# the pairs whose order the measurement itself settles: the repeats'
# exposed times of one configuration all above the other's
conc = disc = nres = 0
for i in range(len(rows)):
    for j in range(i + 1, len(rows)):
        if min(spans[i]) > max(spans[j]) or min(spans[j]) > max(spans[i]):
            nres += 1
            x = (rows[i][2] - rows[j][2]) * (rows[i][4] - rows[j][4])
            conc += x > 0
            disc += x < 0
npairs = len(rows) * (len(rows) - 1) // 2
print("pairs the repeats order (exposed ranges apart): %d of %d; predicted in the same order: %d, "
      "opposite: %d; tau over them: %s" % (nres, npairs, conc, disc,
      "%.2f" % ((conc - disc) / nres) if nres else "-"))
fastest = min(rows[:-1], key=lambda r: r[1])
pick = rows[-1]
print("fastest measured of the sweep: %s (%.1f ms); the tuner's pick (last row) measured %.1f ms: %.3f of it"
      % (fastest[0], fastest[1], pick[1], pick[1] / fastest[1]))
# the same comparison repetition by repetition (each repetition runs every
# configuration within minutes, so the host's slower and faster phases
# divide out): the pick against that fastest configuration, and against
# the fastest of the repetition's own sweep
ifast = rows.index(fastest)
by_rep = [steps[-1][r] / steps[ifast][r] for r in range(reps)]
by_min = [steps[-1][r] / min(x[r] for x in steps[:-1]) for r in range(reps)]
print("repetition by repetition, the pick over that configuration: median %.3f [%.3f, %.3f]; "
      "over the repetition's fastest: median %.3f [%.3f, %.3f]"
      % (statistics.median(by_rep), min(by_rep), max(by_rep),
         statistics.median(by_min), min(by_min), max(by_min)))
tune = open(d + "/tune.out").read().splitlines()
print("\n".join(l for l in tune if l.strip()[:1].isdigit() or l.startswith("fsdp-plan -tune") or l.strip().startswith("rank")))
PY
