# shellcheck shell=bash
# cluster.sh: bench runs across emulated nodes (tests/cluster/netcluster.sh:
# network + UTS namespaces, each node's link shaped by a tc token bucket;
# root).  Sourced after common.sh:
#
#   bench_cluster_up 2 1gbit          # node1, node2 (exit 77: cannot here)
#   bench_cluster_run "overlap: run none" "$tmp/none-1" -- "$BIN/fsdp-train" ...
#
# BENCH_CLUSTER_HOSTS (node1:2,node2:2) and BENCH_CLUSTER_NP (4) place the
# ranks.

# shellcheck source=/dev/null  # tests/cluster/netcluster.sh, checked on its own
. "$BENCH_ROOT/tests/cluster/netcluster.sh"
BENCH_CLUSTER_HOSTS=${BENCH_CLUSTER_HOSTS:-node1:2,node2:2}
BENCH_CLUSTER_NP=${BENCH_CLUSTER_NP:-4}

# bench_cluster_up N RATE: N emulated nodes, links shaped to RATE (tc's
# rate: 1gbit, 10gbit); they go when the script exits (bench_at_exit).
# Exits 77 (skip) where the machine cannot build them, 1 if it fails.
bench_cluster_up() {
  local rc
  nc_check || exit 77
  bench_at_exit nc_down
  nc_up "$1" "$2"
  rc=$?
  trap bench_run_at_exit EXIT   # nc_up set its own (nc_down alone)
  [ "$rc" = 0 ] || exit 1
  # the runs' inner shells (timeout bash -c) call these
  export -f nc_run nc_mpirun
  export NC_PREFIX NC_DIR
}

# bench_cluster_run WHAT OUT [MPIRUN_OPTION...] -- PROGRAM ARG...: one run
# across the nodes (BENCH_CLUSTER_HOSTS, BENCH_CLUSTER_NP ranks; the thread
# and OpenBLAS variables passed on), 600 s at most.  Writes OUT.out and
# OUT.err, OUT.json (stdout's last line: -summary json) and OUT.link (the
# bytes the nodes' links sent during the run).  On failure prints "WHAT
# failed:" with the end of OUT.err and exits 1.
bench_cluster_run() {
  local what=$1 out=$2 t0 mpi=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do mpi+=("$1"); shift; done
  shift
  t0=$(nc_link_bytes tx)
  # shellcheck disable=SC2016  # "$@" is the inner shell's
  if ! timeout 600 bash -c 'nc_mpirun "$@"' nc_mpirun "$BENCH_CLUSTER_HOSTS" -n "$BENCH_CLUSTER_NP" \
       "${mpi[@]}" -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OPENBLAS_CORETYPE "$@" \
       >"$out.out" 2>"$out.err"; then
    echo "$what failed:"; tail -n 8 "$out.err"; exit 1
  fi
  tail -n 1 "$out.out" > "$out.json"
  echo $(( $(nc_link_bytes tx) - t0 )) > "$out.link"
}
