# shellcheck shell=bash
# netcluster.sh: N emulated cluster nodes on one machine, joined by a slow
# link, for tests/cluster/ and bench/ (sourced).
#
#   . netcluster.sh
#   nc_check || exit 77            # root, network namespaces, veth, bridge, tbf: else says why
#   nc_up 2 1gbit || exit 77       # node1..node2, each shaped to 1 Gbit/s each way
#   nc_mpirun "node1:2,node2:2" -n 4 fsdp-train ...   # OpenMPI across the nodes
#   nc_link_bytes                  # bytes the nodes' links have sent so far (sum over nodes)
#   (nc_down runs at exit: every namespace and process of this cluster goes)
#
# A node is a network namespace with its own loopback and one veth
# interface eth0 addressed 10.99.0.K/24, joined to the others through a
# bridge in a "switch" namespace.  The addresses exist only inside these
# namespaces (no route leaves them), so nothing reaches the machine's
# network.  Each node's eth0 sends through a token bucket (tc tbf) at the
# given rate: the inter-node link is the slow one, shared memory inside a
# node is not.  Commands run in a node under a UTS namespace with hostname
# nodeK: OpenMPI then sees distinct hosts, so it uses shared memory inside
# a node and TCP across, MPI_COMM_TYPE_SHARED groups the ranks of a node,
# and shared-memory backing files (named after the host) do not clash.
# mpirun runs in node1 and starts its daemons in the other nodes through
# nsrsh, an rsh agent that maps nodeK to its namespace.
# Recipes: ../shared/notes/cluster-emulation.md.

NC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NC_PREFIX=""
NC_N=0

nc_log() { echo "netcluster: $*"; }

# Can this machine build the cluster?  Prints the reason and returns 1 if not.
nc_check() {
  # nc_mpirun starts OpenMPI's daemons through nsrsh: no recipe for another MPI.
  if [ "${FSDP_MPI:-openmpi}" != openmpi ]; then nc_log "SKIP: the emulated nodes launch with OpenMPI only; this build uses $FSDP_MPI"; return 1; fi
  if [ "$(id -u)" != 0 ]; then nc_log "SKIP: network namespaces need root (CAP_NET_ADMIN)"; return 1; fi
  local c
  if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      nc_log "installing iproute2 (ip, tc)"
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
        --no-install-recommends iproute2 >/dev/null 2>&1
    fi
  fi
  for c in ip tc unshare mpirun; do
    command -v "$c" >/dev/null 2>&1 || { nc_log "SKIP: '$c' not found (packages iproute2, util-linux, openmpi-bin)"; return 1; }
  done
  local probe="fsdpprobe$$"
  if ! ip netns add "$probe" 2>/tmp/fsdp-nc-probe.$$; then
    nc_log "SKIP: cannot create a network namespace: $(cat /tmp/fsdp-nc-probe.$$)"
    rm -f /tmp/fsdp-nc-probe.$$; return 1
  fi
  local err=""
  ip -n "$probe" link add b0 type bridge 2>/tmp/fsdp-nc-probe.$$ || err="bridge: $(cat /tmp/fsdp-nc-probe.$$)"
  [ -z "$err" ] && { ip -n "$probe" link add v0 type veth peer name v1 2>/tmp/fsdp-nc-probe.$$ || err="veth: $(cat /tmp/fsdp-nc-probe.$$)"; }
  [ -z "$err" ] && { ip -n "$probe" link set v0 up; tc -n "$probe" qdisc add dev v0 root tbf rate 1gbit burst 1mb limit 8mb 2>/tmp/fsdp-nc-probe.$$ || err="tc tbf: $(cat /tmp/fsdp-nc-probe.$$)"; }
  [ -z "$err" ] && { ip netns exec "$probe" unshare --uts true 2>/tmp/fsdp-nc-probe.$$ || err="UTS namespace: $(cat /tmp/fsdp-nc-probe.$$)"; }
  ip netns del "$probe" 2>/dev/null
  rm -f /tmp/fsdp-nc-probe.$$
  if [ -n "$err" ]; then nc_log "SKIP: the kernel or container lacks $err"; return 1; fi
  return 0
}

# nc_up N [RATE]: build node1..nodeN (RATE: tc rate of each node's link, default 1gbit).
nc_up() {
  local n=$1 rate=${2:-1gbit} k ns sw
  NC_PREFIX="fsdpc$$"
  NC_N=$n
  sw="${NC_PREFIX}sw"
  trap 'nc_down' EXIT
  trap 'exit 130' INT TERM
  ip netns add "$sw" || return 1
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up
  for k in $(seq "$n"); do
    ns="${NC_PREFIX}n$k"
    ip netns add "$ns" || return 1
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "p$k" type veth peer name eth0 netns "$ns" || return 1
    ip -n "$sw" link set "p$k" master br0 up
    ip -n "$ns" addr add "10.99.0.$k/24" dev eth0
    ip -n "$ns" link set eth0 up
    # the slow link: a token bucket on the node's sending side (smaller
    # bursts drop packets at this rate)
    tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 1mb limit 8mb || return 1
  done
  # wait until the bridge forwards (its ports may start in a listening state)
  for k in $(seq 50); do
    [ "$(ip -n "$sw" -o link show "p$n" 2>/dev/null | grep -c 'state UP')" = 1 ] && break
    sleep 0.1
  done
  export NETCLUSTER_PREFIX=$NC_PREFIX
  nc_log "up: $n nodes (node1..node$n, 10.99.0.1-$n), links shaped to $rate"
  return 0
}

# nc_run K COMMAND...: run a command in node K, with hostname nodeK.
nc_run() {
  local k=$1
  shift
  # shellcheck disable=SC2016  # $0 and $@ belong to the inner shell
  ip netns exec "${NC_PREFIX}n$k" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$k" "$@"
}

# nc_mpirun HOSTS MPIRUN-ARGS...: mpirun in node1 across the nodes; HOSTS is
# OpenMPI's --host list (node1:2,node2:2).  OpenMPI's TCP traffic (ranks
# and daemons) goes over eth0, shared memory inside a node; ranks yield
# when idle (more ranks than cores here).
nc_mpirun() {
  local hosts=$1
  shift
  nc_run 1 mpirun --allow-run-as-root --oversubscribe \
    --mca plm_rsh_agent "$NC_DIR/nsrsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 --mca mpi_yield_when_idle 1 \
    --host "$hosts" "$@"
}

# nc_link_bytes [rx|tx]: bytes sent (tx, default) or received on the nodes'
# eth0, summed over nodes; every byte crossing between nodes is counted once
# in tx (and once in rx).
nc_link_bytes() {
  local dir=${1:-tx} k sum=0 b
  for k in $(seq "$NC_N"); do
    b=$(ip netns exec "${NC_PREFIX}n$k" cat "/sys/class/net/eth0/statistics/${dir}_bytes")
    sum=$((sum + b))
  done
  echo "$sum"
}

# nc_lo_bytes: bytes on the nodes' loopback interfaces (TCP inside a node).
nc_lo_bytes() {
  local k sum=0 b
  for k in $(seq "$NC_N"); do
    b=$(ip netns exec "${NC_PREFIX}n$k" cat /sys/class/net/lo/statistics/tx_bytes)
    sum=$((sum + b))
  done
  echo "$sum"
}

nc_down() {
  [ -n "$NC_PREFIX" ] || return 0
  local ns p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${NC_PREFIX}"); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  NC_PREFIX=""
}
