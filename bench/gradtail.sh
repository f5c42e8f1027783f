#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# gradtail.sh: the optimizer under the gradient tail ([Note: the gradient
# tail] in lib/runtime/optim.c), measured where the tail is long: 2
# emulated nodes x 2 ranks across a tc-shaped link (W = F = 4, as
# bench/overlap.sh, tests/cluster/netcluster.sh), side by side in one run:
# -optim_overlap none / poll / stream, with clipping on (-grad_clip 1, the
# default: AdamW must wait for the global norm, only the per-unit sums of
# squares move into the tail) and off (-grad_clip 0: each unit's AdamW
# runs as its reduction lands).  Per configuration, from each run's -trace
# (steps 1..STEPS-1, means over the 4 ranks): "wait gradients" (the
# compute thread blocked on the last reductions after backward), the
# optimizer span after it, the tail's own spans (poll), and rank 0's step
# time (between the ends of its optimizer spans).  Cells are medians over
# REPS interleaved repetitions, spread (max-min)/median in brackets.
#
#   bench/gradtail.sh [BINDIR]        (BINDIR holds fsdp-train; default build/src)
#   REPS=3 STEPS=5 RATE=1gbit MODEL="..." bench/gradtail.sh
# Needs root (namespaces).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
. "$here/lib/cluster.sh"
BIN=${1:-$BENCH_ROOT/build/src}
RATE=${RATE:-1gbit}
STEPS=${STEPS:-5}
REPS=${REPS:-3}
# bench/overlap.sh's model: GPT-2's shape at half width and depth
MODEL=${MODEL:-$BENCH_HALF_GPT2 -batch_size 8}
[ -x "$BIN/fsdp-train" ] || { echo "gradtail: $BIN/fsdp-train not found (give the folder holding fsdp-train)"; exit 2; }
bench_start gradtail
bench_cluster_up 2 "$RATE"
names=(none-clip poll-clip stream-clip none-noclip poll-noclip stream-noclip)
declare -A conf=(
  [none-clip]="-optim_overlap none -grad_clip 1"
  [poll-clip]="-optim_overlap poll -grad_clip 1"
  [stream-clip]="-optim_overlap stream -grad_clip 1"
  [none-noclip]="-optim_overlap none -grad_clip 0"
  [poll-noclip]="-optim_overlap poll -grad_clip 0"
  [stream-noclip]="-optim_overlap stream -grad_clip 0"
)
# run NAME REP: one run across the nodes, its trace NAME-REP.trace
run() {
  local out=$tmp/$1-$2
  # shellcheck disable=SC2086  # MODEL and conf split into options
  bench_cluster_run "gradtail: run $1 (repetition $2)" "$out" -- "$BIN/fsdp-train" $MODEL \
    -prefetch backward ${conf[$1]} -steps "$STEPS" -log_every 0 -summary json -trace "$out.trace"
}
bench_interleaved gradtail "$REPS" run "${names[@]}"
python3 - "$tmp" "$STEPS" "$REPS" "$RATE" "$MODEL" "${names[*]}" <<'PY'
import json, statistics, sys
d, steps, reps, rate, model, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6].split()

def stats(path):
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    tot = dict(wait=0.0, optim=0.0, tail=0.0)
    n = 0
    for r in sorted({e["pid"] for e in ev}):
        comp = [e for e in ev if e["pid"] == r and e["tid"] == 0]
        for s in range(1, steps):
            for e in comp:
                if e["args"].get("step") != s:
                    continue
                if e["name"] == "wait gradients":
                    tot["wait"] += e["dur"]
                elif e.get("cat") == "optimizer":
                    tot["optim"] += e["dur"]
                elif e.get("cat") == "optim_tail":
                    tot["tail"] += e["dur"]
            n += 1
    out = {k: v / n / 1e3 for k, v in tot.items()}
    ends = {e["args"]["step"]: e["ts"] + e["dur"] for e in ev if e["pid"] == 0 and e.get("cat") == "optimizer"}
    out["step"] = (ends[steps - 1] - ends[0]) / (steps - 1) / 1e3
    return out

R = {n: [stats(f"{d}/{n}-{r}.trace") for r in range(1, reps + 1)] for n in names}
def cell(n, k):
    v = [x[k] for x in R[n]]
    m = statistics.median(v)
    return f"{m:8.1f} ({(max(v) - min(v)) / m if m else 0:4.2f})"
print(f"\ngradient tail, W=4 (2 nodes x 2 ranks, {rate} link), {model}; ms per step, median (spread) of {reps}")
print(f"{'configuration':16s} {'wait gradients':>16s} {'optimizer span':>16s} {'tail spans':>16s} {'step time':>16s}")
for n in names:
    print(f"{n:16s} {cell(n, 'wait'):>16s} {cell(n, 'optim'):>16s} {cell(n, 'tail'):>16s} {cell(n, 'step'):>16s}")
for c in ("clip", "noclip"):
    for w in ("poll", "stream"):
        rw = [a["wait"] / b["wait"] for a, b in zip(R[f"{w}-{c}"], R[f"none-{c}"]) if b["wait"] > 0]
        rs = [a["step"] / b["step"] for a, b in zip(R[f"{w}-{c}"], R[f"none-{c}"])]
        print(f"{w}/none ({c}): wait gradients {statistics.median(rw):.3f}, step time {statistics.median(rs):.3f}"
              f" (per-repetition {min(rs):.3f}..{max(rs):.3f})")
PY
