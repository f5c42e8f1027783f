#!/bin/bash
# test_cluster.sh: fsdp-train on an emulated cluster of 2 nodes x 2 ranks
# (netcluster.sh: network + UTS namespaces, a bridge, 1 Gbit/s token-bucket
# links), launched by OpenMPI across the nodes:
#   - topology detects the nodes (MPI_COMM_TYPE_SHARED): 2 nodes of 2 ranks,
#     without -ranks_per_node; hybrid F = 2 keeps sharding groups in a node;
#   - shared memory inside a node, TCP across: the nodes' loopbacks carry
#     almost nothing while the gathers and reduce-scatters inside the nodes
#     move megabytes;
#   - only the replica all-reduce crosses the link: the bytes the links
#     carried per step (interface counters, difference of a 6-step and a
#     2-step run, so start-up traffic cancels) equal the engine's inter-node
#     bytes summed over ranks, which equal fsdp-plan's formula ([Note: byte
#     accounting] in coll.h, docs/design.md §5),
#     within 2%, plus TCP/IP and MPI headers (at most 1% more);
#   - the losses equal those of the same run on one machine (-ranks_per_node 2
#     emulating the same groups).
# Exit 77 (skip) with the reason when namespaces cannot be made here.
#   usage: test_cluster.sh BINDIR (holding fsdp-train and fsdp-plan)
set -u
BIN=${1:?usage: test_cluster.sh BINDIR}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=netcluster.sh
. "$here/netcluster.sh"
nc_check || exit 77
nc_up 2 1gbit || { echo "SKIP: could not build the emulated nodes"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d /tmp/fsdp_test_cluster.XXXXXX)
trap 'nc_down; rm -rf "$tmp"' EXIT

export -f nc_run nc_mpirun  # for timeout's shell
export NC_PREFIX NC_DIR
opts=(-model small -sharding_factor 2 -batch_size 2 -log_every 0 -summary json -seed 5)
# run STEPS NAME: fsdp-train across the nodes; link and loopback bytes it caused
run() {
  local t0 l0
  t0=$(nc_link_bytes tx)
  l0=$(nc_lo_bytes)
  # shellcheck disable=SC2016  # "$@" belongs to the inner shell
  if ! timeout 120 bash -c 'nc_mpirun "$@"' nc_mpirun node1:2,node2:2 -n 4 -x OMP_NUM_THREADS \
       -x OPENBLAS_NUM_THREADS "$BIN/fsdp-train" "${opts[@]}" -steps "$1" >"$tmp/$2.out" 2>"$tmp/$2.err"; then
    echo "FAIL: fsdp-train across the emulated nodes ($2) failed:"; tail -n 8 "$tmp/$2.err" | sed 's/^/    /'
    exit 1
  fi
  echo "$(( $(nc_link_bytes tx) - t0 )) $(( $(nc_lo_bytes) - l0 ))" > "$tmp/$2.bytes"
}
run 2 short
run 6 long
OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 mpiexec -n 4 "$BIN/fsdp-train" "${opts[@]}" -steps 6 \
  -ranks_per_node 2 >"$tmp/local.out" 2>"$tmp/local.err" || { echo "FAIL: local reference run failed"; exit 1; }
timeout 60 "$BIN/fsdp-plan" -world_size 4 -ranks_per_node 2 "${opts[@]}" -steps 6 >"$tmp/plan.out" 2>&1 ||
  { echo "FAIL: fsdp-plan failed: $(tail -n 3 "$tmp/plan.out")"; exit 1; }

python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
last = lambda f: json.loads(open(f"{d}/{f}").read().strip().splitlines()[-1])
short, long_, local, plan = last("short.out"), last("long.out"), last("local.out"), last("plan.out")
link_s, lo_s = map(int, open(f"{d}/short.bytes").read().split())
link_l, lo_l = map(int, open(f"{d}/long.bytes").read().split())
fails = checks = 0
def check(ok, msg):
    global fails, checks
    checks += 1
    fails += not ok
    print(("ok: " if ok else "FAIL: ") + msg)
check(long_["nodes"] == 2 and long_["ranks_per_node"] == 2,
      f"topology across the namespaces: {long_['nodes']} nodes of {long_['ranks_per_node']} ranks (MPI_COMM_TYPE_SHARED)")
c = long_["comm_per_step"]
check(c["inter_node_bytes"] == c["all_reduce_bytes"] and c["intra_node_bytes"] == c["all_gather_bytes"] + c["reduce_scatter_bytes"],
      f"hybrid F=2: gathers/reduce-scatters inside the node ({c['intra_node_bytes']} B/step/rank), "
      f"only the replica all-reduce across ({c['inter_node_bytes']} B/step/rank)")
p = plan["comm_per_step"]
check(p["inter_node_bytes"] == c["inter_node_bytes"] and p["intra_node_bytes"] == c["intra_node_bytes"],
      f"fsdp-plan's formula = engine counters: inter {p['inter_node_bytes']}, intra {p['intra_node_bytes']}")
steps = long_["steps"] - short["steps"]
link = (link_l - link_s) / steps
formula = 4 * c["inter_node_bytes"]
ratio = link / formula
check(0.98 <= ratio <= 1.03,
      f"link bytes per step {link:.0f} vs formula (4 ranks x inter-node) {formula}: ratio {ratio:.4f} "
      f"(allowed 0.98..1.03: 2% plus up to 1% TCP/IP and MPI headers)")
intra = 4 * c["intra_node_bytes"]
lo = (lo_l - lo_s) / steps
check(lo < 0.01 * intra,
      f"shared memory inside a node: loopback carried {lo:.0f} B/step against {intra} B/step of intra-node collectives")
diff = max(abs(a - b) for a, b in zip(long_["losses"], local["losses"]))
check(len(long_["losses"]) == len(local["losses"]) and diff <= 1e-6 * abs(local["losses"][0]),
      f"losses across the emulated nodes = on one machine (max difference {diff:.3g}): {long_['losses'][-1]:.6f}")
print(f"test_cluster: {checks - fails} of {checks} checks passed")
sys.exit(1 if fails else 0)
PY
exit $?
