#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# hybrid_traffic.sh: cross-node traffic of full sharding, hybrid sharding and
# replication, measured on 2 emulated nodes x 2 ranks joined by a slow link
# (tests/cluster/netcluster.sh: network + UTS namespaces, tc token bucket).
#
#   bench/hybrid_traffic.sh [BINDIR]        (BINDIR: fsdp-train, fsdp-plan; default build/src)
#   RATE=1gbit SHORT=2 LONG=5 MODEL="-model custom ..." bench/hybrid_traffic.sh
#
# For F = 4 (full), 2 (hybrid: shard inside a node, replicate across) and 1
# (replicate) it prints, per optimizer step:
#   engine   inter-node bytes the collectives' counters charged, summed over
#            the 4 ranks (each rank's JSON summary; they are alike here);
#   formula  the same from fsdp-plan (FsdpCollVolume: docs/design.md,
#            section 5 "Communication");
#   link     bytes the nodes' links carried (interface tx counters), from
#            the difference of a LONG-step and a SHORT-step run so that
#            start-up and shutdown traffic cancel;
#   step     the median step time of the LONG run.
# and the hybrid/full ratios.  Counters and links are compared twice: with
# OpenMPI's collective algorithms pinned to pairwise-exchange ones
# (recursive doubling all-gather and all-reduce, recursive halving
# reduce-scatter), under which every rank receives each peer's contribution
# once -- the model behind the formula, so the link carries the formula's
# bytes; and with OpenMPI's default choices (ring algorithms, for example,
# send fewer bytes across a 2-node cut than the formula charges).
# Needs root (namespaces); takes 3-4 minutes on 2 cores.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
. "$here/lib/cluster.sh"
BIN=${1:-$BENCH_ROOT/build/src}
RATE=${RATE:-1gbit}
SHORT=${SHORT:-2}
LONG=${LONG:-5}
# "gpt2-small-like": GPT-2's shape at half width and depth, vocabulary and
# context cut so that a step takes about a second of compute here
MODEL=${MODEL:-$BENCH_HALF_GPT2 -batch_size 1}
for p in fsdp-train fsdp-plan; do
  [ -x "$BIN/$p" ] || { echo "hybrid_traffic: $BIN/$p not found (give the folder holding fsdp-train and fsdp-plan)"; exit 2; }
done
bench_start hybrid_traffic
bench_cluster_up 2 "$RATE"

pinned=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allgather_algorithm 3
        --mca coll_tuned_allreduce_algorithm 3 --mca coll_tuned_reduce_scatter_block_algorithm 3)
# run NAME F STEPS ALGOS: one run across the nodes; writes NAME.json and NAME.link
run() {
  local name=$1 F=$2 steps=$3 algos=$4 extra=()
  [ "$algos" = pinned ] && extra=("${pinned[@]}")
  # shellcheck disable=SC2086  # MODEL splits into options
  bench_cluster_run "hybrid_traffic: run $name" "$tmp/$name" "${extra[@]}" -- "$BIN/fsdp-train" $MODEL \
    -sharding_factor "$F" -steps "$steps" -log_every 0 -summary json
}
for algos in pinned default; do
  for F in 4 2 1; do
    echo "hybrid_traffic: F=$F, $algos algorithms: $SHORT and $LONG steps ..."
    run "$algos-F$F-short" "$F" "$SHORT" "$algos"
    run "$algos-F$F-long" "$F" "$LONG" "$algos"
    for r in 0 1 2 3; do
      # shellcheck disable=SC2086
      "$BIN/fsdp-plan" -world_size 4 -ranks_per_node 2 $MODEL -sharding_factor "$F" -plan_rank $r \
        -summary json > "$tmp/plan-F$F-r$r.json" || exit 1
    done
  done
done

python3 - "$tmp" "$SHORT" "$LONG" "$RATE" "$MODEL" <<'PY'
import json, sys
d, short, long_, rate, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
ld = lambda f: json.loads(open(f"{d}/{f}").read())
rows, bad = {}, []
print(f"\n2 emulated nodes x 2 ranks, links {rate}; {model}")
for algos in ("pinned", "default"):
    print(f"\nOpenMPI collective algorithms: {algos}"
          + (" (recursive doubling all-gather/all-reduce, recursive halving reduce-scatter)" if algos == "pinned" else " (tuned decisions)"))
    print(f"{'mode':<11}{'F':>2}{'R':>3}{'engine B/step':>16}{'formula B/step':>16}{'link B/step':>14}"
          f"{'link/formula':>14}{'step ms':>10}")
    for F, mode in ((4, "full"), (2, "hybrid"), (1, "replicated")):
        j = ld(f"{algos}-F{F}-long.json")
        plans = [ld(f"plan-F{F}-r{r}.json") for r in range(4)]
        engine = 4 * j["comm_per_step"]["inter_node_bytes"]  # every rank's groups alike here
        formula = sum(p["comm_per_step"]["inter_node_bytes"] for p in plans)
        if j["comm_per_step"]["inter_node_bytes"] != plans[0]["comm_per_step"]["inter_node_bytes"]:
            bad.append(f"{mode}: engine counters differ from fsdp-plan")
        link = (int(open(f"{d}/{algos}-F{F}-long.link").read()) - int(open(f"{d}/{algos}-F{F}-short.link").read())) / (long_ - short)
        rows[(algos, mode)] = (engine, formula, link, j["step_time_ms_median"])
        print(f"{mode:<11}{F:>2}{4 // F:>3}{engine:>16}{formula:>16}{link:>14.0f}{link / formula:>14.4f}"
              f"{j['step_time_ms_median']:>10.0f}")
    e = rows[(algos, "hybrid")][0] / rows[(algos, "full")][0]
    f = rows[(algos, "hybrid")][1] / rows[(algos, "full")][1]
    l = rows[(algos, "hybrid")][2] / rows[(algos, "full")][2]
    t = rows[(algos, "hybrid")][3] / rows[(algos, "full")][3]
    print(f"hybrid/full: engine {e:.4f}, formula {f:.4f}, link {l:.4f}, step time {t:.3f}")
    if algos == "pinned":
        for mode in ("full", "hybrid", "replicated"):
            engine, formula, link, _ = rows[(algos, mode)]
            if abs(link / formula - 1) > 0.02:
                bad.append(f"{mode}: link bytes {link:.0f} not within 2% of the formula {formula}")
print()
if bad:
    print("hybrid_traffic: OFF TARGET: " + "; ".join(bad))
    sys.exit(1)
print("hybrid_traffic: engine counters = formula exactly; with pinned algorithms the links carried the formula's bytes within 2%")
PY
