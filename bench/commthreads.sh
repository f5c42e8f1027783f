#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# commthreads.sh: how the communication thread waits for a collective
# (FSDP_COMM_WAIT, [Note: waiting for a collective] in lib/comm/coll_mpi.c),
# measured as run_bench.sh part B measures F=2 against F=1: W=2 on one
# node, one thread per rank (mpiexec --bind-to core), GPT-2 with N_LAYER
# blocks, B=4 T=64 per rank.
#
#   bench/commthreads.sh [BUILD_DIR [BASE_BUILD_DIR]]
#
# Variants, run interleaved REPEATS times (F=1 and F=2 of one variant
# back to back): base (BASE_BUILD_DIR, e.g. a build of the tree before
# this change; skipped when not given), then each mode in MODES of
# BUILD_DIR.  Prints per run the median step after WARMUP steps, per
# variant the median over repeats with [min, max], and F=2/F=1 (median of
# the per-repeat ratios [min, max]).
# Environment: STEPS (8), WARMUP (2), REPEATS (3), N_LAYER (4),
# MODES ("block yield sleep").
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
build=${1:-$BENCH_ROOT/build}
base=${2:-}
STEPS=${STEPS:-8} WARMUP=${WARMUP:-2} REPEATS=${REPEATS:-3} N_LAYER=${N_LAYER:-4}
MODES=${MODES:-block yield sleep}
out=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-commthreads.XXXXXX")
# shellcheck disable=SC2016  # expanded at exit
bench_at_exit 'rm -rf "$out"'
bench_lock commthreads
bench_openblas_core
echo "== machine: $(bench_cpu), $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== OpenBLAS: $(OPENBLAS_VERBOSE=2 OMP_NUM_THREADS=1 "$build/src/fsdp-train" -model tiny -steps 1 -log_every 0 2>&1 | grep -m1 -i 'core' | sed 's/^ *//')"
echo "== W=2, 1 thread per rank, --bind-to core, GPT-2 $N_LAYER blocks, B=4 T=64 per rank, $STEPS steps ($WARMUP left out), $REPEATS repeats"

variants=()
[ -n "$base" ] && variants+=(base)
for m in $MODES; do variants+=("$m"); done

run() { # run VARIANT F REPEAT
  local v=$1 f=$2 i=$3 bin="$build/src/fsdp-train" env=()
  if [ "$v" = base ]; then bin="$base/src/fsdp-train"; else env=(-x "FSDP_COMM_WAIT=$v"); fi
  OMP_NUM_THREADS=1 mpiexec -n 2 --bind-to core -x OMP_NUM_THREADS -x OPENBLAS_CORETYPE "${env[@]}" \
    "$bin" -model gpt2 -n_layer "$N_LAYER" -sharding_factor "$f" -steps "$STEPS" -log_every 1 \
    -batch_size 4 -seq_len 64 >"$out/$v.f$f.$i.log" 2>&1 ||
    { echo "commthreads: $v F=$f failed:" >&2; tail -5 "$out/$v.f$f.$i.log" >&2; exit 1; }
}
median_of() { python3 "$BENCH_LIB/median_step.py" "$1" "$WARMUP"; }
for i in $(seq 1 "$REPEATS"); do
  line="   repeat $i:"
  for v in "${variants[@]}"; do
    run "$v" 1 "$i"; run "$v" 2 "$i"
    line="$line $v F=1 $(median_of "$out/$v.f1.$i.log") F=2 $(median_of "$out/$v.f2.$i.log") |"
  done
  echo "$line"
done
echo "== per variant: median step ms over repeats [min, max]; F=2/F=1 = median of per-repeat ratios [min, max]"
for v in "${variants[@]}"; do
  for i in $(seq 1 "$REPEATS"); do
    echo "$(median_of "$out/$v.f1.$i.log") $(median_of "$out/$v.f2.$i.log")"
  done | python3 -c '
import statistics, sys
p = [tuple(map(float, l.split())) for l in sys.stdin]
f1 = [a for a, _ in p]; f2 = [b for _, b in p]; q = [b / a for a, b in p]
print("   %-6s F=1 %7.1f [%.1f, %.1f]  F=2 %7.1f [%.1f, %.1f]  F=2/F=1 %.3f [%.3f, %.3f]" % (
    sys.argv[1], statistics.median(f1), min(f1), max(f1), statistics.median(f2), min(f2), max(f2),
    statistics.median(q), min(q), max(q)))' "$v"
done
echo "   load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
