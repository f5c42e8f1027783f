#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# paper.sh: the experiments of "PyTorch FSDP: Experiences on Scaling Fully
# Sharded Data Parallel" (Zhao et al., PVLDB 16(12), 2023) in miniature, and
# issue 12's overlap targets.  Where a link matters the runs go across 2
# emulated nodes x 2 ranks (tests/cluster/netcluster.sh: W = 4, G = 2, each
# node's link shaped by a tc token bucket); memory against W runs on one node.
#
#   bench/paper.sh PART [BINDIR]    measure one part (root; each part < 10 min here)
#   bench/paper.sh report           figures (bench/paper/*.png) and the tables
#                                   behind them into bench/results/DATE-paper.md
#                                   (link it from bench/README.md)
#   bench/paper.sh all [BINDIR]     every part, then report
#
# Parts (results under $OUT, default bench/out/paper/PART/):
#   link1     1 Gbit/s, batch 8: sharding factor F = 4 / 2 / 1, RAF and NRAF,
#             bf16 against fp32 communication
#   prefetch  1 Gbit/s, batch 8: -prefetch none / backward / both (L = 2),
#             -prefetch both with L = 1 / 4, and the communication-alone run
#   link10    10 Gbit/s, batch 8: F = 4 / 2 / 1
#   overlap16 1 Gbit/s, batch 16: none / backward / both (L = 2), the default
#             prefetch mode with L = 1 and 3, and the communication-alone run
#   overlap24 the same at batch 24 without the L runs (where compute alone is
#             1.5x communication alone on the 2-core machine)
#   node      one node: memory per rank at W = 1, 2, 4, 8 with F = W
#
# Environment: REPS (3; overlap16: REPS16, 3), STEPS (4), OUT, FIGDIR
# (bench/paper), README (bench/results/DATE-paper.md, DATE today's, UTC),
# BENCH_LOCK and BENCH_NICE (bench/lib/common.sh: the bench lock), PYTHON (a python3 with
# matplotlib: /usr/bin/python3 from Debian's python3-matplotlib).
# Prerequisites: as tests/cluster (root, iproute2, OpenMPI) and, for the
# report, Debian's python3-matplotlib (apt-get install python3-matplotlib).
#
# Every configuration of a part runs REPS times, interleaved (all once, then
# again), so that other load on the machine falls on all alike.  Per run and
# per step (steps 1..STEPS-1, mean over ranks), from its -trace: step time
# (rank 0, between the ends of its optimizer work), compute (forward and
# backward spans), exposed communication (every wait of the compute thread
# on a communication event: gathers in forward and backward, grad buffers
# and the gradient tail), and from the summary the memory plan, the peak RSS
# and the bytes; link bytes from the nodes' interface counters.  A cell is
# the median over the repetitions, the spread (max-min)/median beside it.
# Communication alone: the union of the collectives' busy intervals per step
# of a run with almost no compute (-batch_size 1 -seq_len 8 -prefetch none),
# scaled to the measured model's bytes (its position table is 0.3 % of the
# parameters smaller); compute alone: forward + backward spans of
# -prefetch none.  floor = max(0, comm - compute): what no overlap can hide.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
root=$BENCH_ROOT
PART=${1:-}
BIN=${2:-$root/build/src}
REPS=${REPS:-3}
REPS16=${REPS16:-3}
STEPS=${STEPS:-4}
OUT=${OUT:-$root/bench/out/paper}
FIGDIR=${FIGDIR:-$here/paper}
README=${README:-$here/results/$(date -u +%Y-%m-%d)-paper.md}
PYTHON=${PYTHON:-/usr/bin/python3}
# GPT-2's shape at half width and depth as overlap.sh and hybrid_traffic.sh
# (13.8 M parameters, 7 units: root + 6 blocks); the batch comes per part
MODEL=${MODEL:-$BENCH_HALF_GPT2}
usage() { echo "usage: bench/paper.sh link1|prefetch|link10|overlap16|overlap24|node|all|report [BINDIR]"; exit 2; }

case "$PART" in
  link1|prefetch|link10|overlap16|overlap24|node|all|report) ;;
  *) usage ;;
esac
if [ "$PART" != report ]; then
  [ -x "$BIN/fsdp-train" ] || { echo "paper: $BIN/fsdp-train not found (give the folder holding fsdp-train)"; exit 2; }
  [ "$STEPS" -ge 2 ] 2>/dev/null || { echo "paper: STEPS must be at least 2"; exit 2; }
fi
[ "$PART" = report ] || bench_lock paper   # once for "all": the parts it starts do not wait again
if [ "$PART" = all ]; then
  for p in node link10 link1 prefetch overlap16 overlap24; do "$0" "$p" "$BIN" || exit 1; done
  exec "$0" report
fi

if [ "$PART" = report ]; then
  "$PYTHON" -c 'import matplotlib' 2>/dev/null ||
    { echo "paper: $PYTHON lacks matplotlib (Debian: apt-get install python3-matplotlib; or PYTHON=...)"; exit 2; }
  mkdir -p "$FIGDIR"
  exec "$PYTHON" "$here/paper_report.py" "$OUT" "$FIGDIR" "$README"
fi

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
bench_openblas_core
dir=$OUT/$PART
rm -rf "$dir"
mkdir -p "$dir"

# the runtime's defaults, as -help states them (the default prefetch mode is
# what the overlap targets are about)
help=$("$BIN/fsdp-train" -help 2>&1)
dflt() { printf '%s\n' "$help" | grep -A1 -- "^ *-$1 " | grep -o '(default [^)]*)' | head -n1 | sed 's/(default //; s/)//'; }
def_prefetch=$(dflt prefetch)
def_limit=$(dflt limit_all_gathers)
def_tail=$(dflt optim_overlap)   # empty where the runtime has no gradient tail option
# the machine, the BLAS core, the commit: every section names them
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | grep -c . || true)
# a tree measured with other branches merged in (a throwaway clone) names
# each merge on its first-parent line since main and the tip it brought in
mains=$(git -C "$root" for-each-ref --format='%(refname)' refs/heads/main refs/remotes/origin/main 2>/dev/null)
# shellcheck disable=SC2086  # mains: zero or more refs
merged=$(for m in $(git -C "$root" log --first-parent --merges -n 8 --format=%H HEAD --not $mains 2>/dev/null); do
           git -C "$root" log -1 --format='%s' "$m" | tr -d '\n'
           git -C "$root" log -1 --format=': %h %s' "$m^2"
         done | "$PYTHON" -c 'import json, sys; print(json.dumps(sys.stdin.read().splitlines()))')
blas=$(bench_blas_core "$BIN/fsdp-train")
"$PYTHON" - "$dir/meta.json" <<PY
import json, sys
json.dump({"part": "$PART", "commit": "$commit", "merged": $merged, "dirty_files": int("${dirty:-0}"),
           "date": "$(date -u '+%Y-%m-%d %H:%M UTC')", "cpu": "$(bench_cpu)",
           "avx512": $(grep -qw avx512f /proc/cpuinfo && echo True || echo False), "cores": $(grep -c ^processor /proc/cpuinfo),
           "openblas_coretype": "${OPENBLAS_CORETYPE:-}", "openblas_core": "$blas",
           "load_start": "$(cut -d' ' -f1-3 /proc/loadavg)", "nice": $(nice),
           "default_prefetch": "$def_prefetch", "default_limit": "$def_limit", "default_optim_overlap": "$def_tail",
           "model": "$MODEL", "steps": $STEPS}, open(sys.argv[1], "w"))
PY

# ---- one node: memory against W --------------------------------------------
if [ "$PART" = node ]; then
  for W in 1 2 4 8; do
    echo "paper: node: W=$W"
    # shellcheck disable=SC2086  # MODEL splits into options
    if ! timeout 600 mpirun --oversubscribe -n "$W" -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OPENBLAS_CORETYPE \
         "$BIN/fsdp-train" $MODEL -batch_size 1 -sharding_factor "$W" -steps 2 -log_every 0 -summary json \
         >"$dir/W$W.out" 2>"$dir/W$W.err"; then
      echo "paper: node run W=$W failed:"; tail -n 8 "$dir/W$W.err"; exit 1
    fi
    tail -n 1 "$dir/W$W.out" > "$dir/W$W-1.json"
  done
  echo "paper: node: done; bench/paper.sh report writes the figures"
  exit 0
fi

# ---- 2 emulated nodes x 2 ranks --------------------------------------------
. "$here/lib/cluster.sh"
rate=1gbit
[ "$PART" = link10 ] && rate=10gbit
batch=8
[ "$PART" = overlap16 ] && { batch=16; REPS=$REPS16; }
[ "$PART" = overlap24 ] && { batch=24; REPS=$REPS16; }
bench_cluster_up 2 "$rate"

# every run gets these first (a later value wins): the settings each
# comparison holds fixed, written out so that a change of default moves nothing
base=(-sharding_factor 4 -reshard_after_forward 1 -prefetch backward -limit_all_gathers 2
      -param_dtype fp32 -reduce_dtype fp32 -compute_dtype fp32 -batch_size "$batch")
comm_alone="-batch_size 1 -seq_len 8 -prefetch none"
declare -A conf
case "$PART" in
  link1)
    names=(F4 F2 F1 nraf bf16)
    conf=([F4]="" [F2]="-sharding_factor 2" [F1]="-sharding_factor 1" [nraf]="-reshard_after_forward 0"
          [bf16]="-param_dtype bf16 -reduce_dtype bf16") ;;
  link10)
    names=(F4 F2 F1)
    conf=([F4]="" [F2]="-sharding_factor 2" [F1]="-sharding_factor 1") ;;
  prefetch)
    names=(none backward both bothL1 bothL4 comm)
    conf=([none]="-prefetch none" [backward]="" [both]="-prefetch both"
          [bothL1]="-prefetch both -limit_all_gathers 1" [bothL4]="-prefetch both -limit_all_gathers 4"
          [comm]="$comm_alone") ;;
  overlap16)
    names=(none backward both L1 L3 comm)
    conf=([none]="-prefetch none" [backward]="" [both]="-prefetch both"
          [L1]="-prefetch $def_prefetch -limit_all_gathers 1" [L3]="-prefetch $def_prefetch -limit_all_gathers 3"
          [comm]="$comm_alone") ;;
  overlap24)
    names=(none backward both comm)
    conf=([none]="-prefetch none" [backward]="" [both]="-prefetch both" [comm]="$comm_alone") ;;
esac
printf '%s\n' "${names[@]}" > "$dir/names"
for n in "${names[@]}"; do printf '%s\t%s\n' "$n" "${conf[$n]}"; done > "$dir/configs"
echo "$rate" > "$dir/rate"
echo "$batch" > "$dir/batch"

# run NAME REP: one run across the nodes: NAME-REP.json (summary), .trace, .link
run() {
  local o=$dir/$1-$2
  # shellcheck disable=SC2086  # MODEL and conf split into options
  bench_cluster_run "paper: run $1 (repetition $2)" "$o" -- "$BIN/fsdp-train" $MODEL \
    "${base[@]}" ${conf[$1]} -steps "$STEPS" -log_every 0 -summary json -trace "$o.trace"
}
start=$(date +%s)
bench_interleaved "paper: $PART ($rate, batch $batch)" "$REPS" run "${names[@]}"
"$PYTHON" - "$dir/meta.json" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(( $(date +%s) - start ))" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["load_end"] = sys.argv[2]; m["seconds"] = int(sys.argv[3])
json.dump(m, open(sys.argv[1], "w"))
PY
echo "paper: $PART: done in $(( $(date +%s) - start )) s; bench/paper.sh report writes the figures"
