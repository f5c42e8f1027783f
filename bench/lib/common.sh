# shellcheck shell=bash
# common.sh: what every bench script starts with (sourced after `set -u`):
#
#   here=$(cd "$(dirname "$0")" && pwd)
#   . "$here/lib/common.sh"
#   bench_start overlap            # the bench lock (BENCH_LOCK=FILE), one thread
#                                  # per rank, OPENBLAS_CORETYPE, $tmp
# or its pieces: bench_lock, bench_openblas_core, bench_at_exit.
#
# Sets BENCH_LIB (this folder) and BENCH_ROOT (the repository).  The
# emulated cluster is in cluster.sh, beside this file.

BENCH_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034  # the scripts that source this use it
BENCH_ROOT=$(cd "$BENCH_LIB/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The benches' model: GPT-2's shape at half width and depth (13.8 M
# parameters, 7 units: root + 6 blocks), vocabulary and context cut so that
# a step takes about a second here; each script adds its batch.
# shellcheck disable=SC2034  # the scripts'
BENCH_HALF_GPT2="-model custom -n_layer 6 -n_embd 384 -n_head 6 -vocab_size 8192 -seq_len 128"

# bench_openblas_core: name OpenBLAS's sgemm kernel unless OPENBLAS_CORETYPE
# is set: Debian's OpenBLAS detects some virtual CPUs as Prescott (generic
# kernels, 4-5x slower), which would time the BLAS build, not fsdp.
bench_openblas_core() {
  [ -z "${OPENBLAS_CORETYPE:-}" ] || return 0
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
}

# bench_cpu: the CPU's model name (every result names its CPU and BLAS core).
bench_cpu() { grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'; }

# bench_blas_core PROGRAM: the OpenBLAS core PROGRAM (an fsdp program) runs on.
bench_blas_core() {
  OPENBLAS_VERBOSE=2 "$1" -help 2>&1 | grep -m1 '^Core:' | sed 's/^Core: *//'
}

# bench_at_exit COMMAND: run COMMAND (eval'ed) when the script exits, after
# the ones registered later: the emulated cluster's nc_down and a script's
# temporary folder share one EXIT trap.
BENCH_AT_EXIT=()
bench_run_at_exit() {
  local i
  for ((i = ${#BENCH_AT_EXIT[@]} - 1; i >= 0; i--)); do eval "${BENCH_AT_EXIT[$i]}"; done
}
bench_at_exit() {
  BENCH_AT_EXIT+=("$1")
  trap bench_run_at_exit EXIT
}

# bench_lock WHO: the bench lock.  Timings on a machine shared with other
# jobs mean something only when no other benchmark runs beside them: with
# BENCH_LOCK=FILE the script waits for an exclusive flock(1) on FILE and
# holds it until it exits (its children inherit the descriptor, so a
# left-over daemon holds it too), at BENCH_NICE (e.g. -15, root) if set.
# A bench script started by one that holds the lock (paper.sh all) does not
# wait for it again.  Without BENCH_LOCK: nothing.
#   BENCH_LOCK=/work/notes/bench.lock BENCH_NICE=-15 bench/overlap.sh
bench_lock() {
  local who=$1
  [ -n "${BENCH_LOCK:-}" ] || return 0
  [ "${BENCH_LOCK_HELD:-}" = "$BENCH_LOCK" ] && return 0
  command -v flock >/dev/null 2>&1 ||
    { echo "$who: BENCH_LOCK needs flock(1) (package util-linux)" >&2; exit 2; }
  exec 9>>"$BENCH_LOCK" || { echo "$who: cannot open the bench lock $BENCH_LOCK" >&2; exit 2; }
  if ! flock -n 9; then
    echo "$who: waiting for the bench lock $BENCH_LOCK" >&2
    flock 9 || { echo "$who: cannot take the bench lock $BENCH_LOCK" >&2; exit 2; }
  fi
  export BENCH_LOCK_HELD=$BENCH_LOCK
  if [ -n "${BENCH_NICE:-}" ]; then
    renice -n "$BENCH_NICE" -p $$ >/dev/null ||
      { echo "$who: BENCH_NICE=$BENCH_NICE: renice refused (a negative value needs root)" >&2; exit 2; }
  fi
}

# bench_start WHO: what a script that times ranks of one thread does
# first: the bench lock, one BLAS/OpenMP thread per rank, the OpenBLAS
# core, and a temporary folder $tmp that goes at exit.
bench_start() {
  bench_lock "$1"
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  bench_openblas_core
  # shellcheck disable=SC2034  # the script's
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/fsdp_$1.XXXXXX") || exit 1
  # shellcheck disable=SC2016  # expanded at exit
  bench_at_exit 'rm -rf "$tmp"'
}

# bench_interleaved WHO REPS RUN NAME...: RUN NAME REP for every name, then
# again, REPS times: other load on the machine falls on every configuration
# alike.  Prints each run as it starts, with the seconds since the first.
bench_interleaved() {
  local who=$1 reps=$2 run=$3 rep name start
  shift 3
  start=$(date +%s)
  for rep in $(seq "$reps"); do
    for name in "$@"; do
      echo "$who: repetition $rep/$reps: $name ($(( $(date +%s) - start )) s)"
      "$run" "$name" "$rep"
    done
  done
}
