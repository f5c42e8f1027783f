#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# overlap.sh: does FSDP keep communication off the critical path?  Measured
# on 2 emulated nodes x 2 ranks (W = 4, F = 4: every all-gather and
# reduce-scatter crosses a tc-shaped link; tests/cluster/netcluster.sh),
# side by side in one run:
#   (a) exposed communication per step (time the compute thread was blocked
#       on a communication event) and step time, -prefetch none / backward /
#       both; from each run's -trace file the exposed time split into
#       "wait all_gather" (forward and backward), "wait grad buffer" and
#       "wait gradients"; and the ratios backward/none, both/none;
#   (b) step time, gathers in flight and gather memory (the ring and its
#       peak use) with -limit_all_gathers 1, 2, 4, 0;
#   (c) -param_dtype bf16 -reduce_dtype bf16 against fp32: bytes per step
#       (engine counters and the links' interface counters) and step time.
#
#   bench/overlap.sh [BINDIR]          (BINDIR holds fsdp-train; default build/src)
#   REPS=3 STEPS=4 RATE=1gbit MODEL="-model custom ..." TRACES=DIR bench/overlap.sh
#
# Every configuration runs REPS times, the repetitions interleaved (all
# configurations once, then again) so that other load on the machine falls
# on all of them alike.  Per run, per-step figures are means over the 4
# ranks and over steps 1..STEPS-1 (step 0 warms up), all from the run's
# trace: step time is
# rank 0's, between the ends of its optimizer steps; compute: forward and
# backward spans; comm busy: the communication stream's tasks; exposed: the
# compute track's waits.  A table cell is the median over the REPS runs,
# with the spread (max-min)/median in brackets; a ratio is the median of
# the per-repetition ratios.  The ASCII timeline at the end is one backward
# pass of rank 0 (none and backward, last repetition, last step);
# TRACES=DIR keeps every trace for Perfetto.
#
# Overlap can hide at most the compute there is: per unit, backward compute
# must cover the reduce-scatter of the unit before, and the gathers
# prefetched ahead run on their own stream.  Compute per unit grows with tokens per rank
# (batch_size x seq_len), communication does not; the default batch of 8
# sequences makes them comparable across the 1 Gbit/s link.  With
# hybrid_traffic.sh's batch of 1 the link dominates (MODEL=... to try).
# Needs root (namespaces); about 10 minutes on 2 cores with the defaults.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
. "$here/lib/cluster.sh"
BIN=${1:-$BENCH_ROOT/build/src}
RATE=${RATE:-1gbit}
STEPS=${STEPS:-4}
REPS=${REPS:-3}
TRACES=${TRACES:-}
# GPT-2's shape at half width and depth, as hybrid_traffic.sh (13.8 M
# parameters, 7 units: root + 6 blocks), with 8 sequences per rank
MODEL=${MODEL:-$BENCH_HALF_GPT2 -batch_size 8}
[ -x "$BIN/fsdp-train" ] || { echo "overlap: $BIN/fsdp-train not found (give the folder holding fsdp-train)"; exit 2; }
[ "$STEPS" -ge 2 ] 2>/dev/null || { echo "overlap: STEPS must be at least 2"; exit 2; }
bench_start overlap
bench_cluster_up 2 "$RATE"

# name and options; every run gets the base options first (a later value wins)
base=(-prefetch backward -limit_all_gathers 2 -param_dtype fp32 -reduce_dtype fp32)
names=(none backward both L1 L4 L0 bf16)
declare -A conf=(
  [none]="-prefetch none"
  [backward]=""            # also the L = 2 and the fp32 row
  [both]="-prefetch both"
  [L1]="-limit_all_gathers 1"
  [L4]="-limit_all_gathers 4"
  [L0]="-limit_all_gathers 0"
  [bf16]="-param_dtype bf16 -reduce_dtype bf16"
)
# run NAME REP: one run across the nodes: NAME-REP.json (summary), .trace, .link
run() {
  local out=$tmp/$1-$2
  # shellcheck disable=SC2086  # MODEL and conf split into options
  bench_cluster_run "overlap: run $1 (repetition $2)" "$out" -- "$BIN/fsdp-train" $MODEL \
    "${base[@]}" ${conf[$1]} -steps "$STEPS" -log_every 0 -summary json -trace "$out.trace"
}
bench_interleaved overlap "$REPS" run "${names[@]}"
if [ -n "$TRACES" ]; then mkdir -p "$TRACES" && cp "$tmp"/*.trace "$TRACES"/; fi

python3 - "$tmp" "$STEPS" "$REPS" "$RATE" "$MODEL" "${names[*]}" <<'PY'
import json, statistics, sys
d, steps, reps, rate, model, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6].split()
MB = 1e6

def trace_stats(path):
    """Per-step times (ms) from a trace, steps >= 1: exposed time by kind and
    compute, means over ranks; step time from rank 0's optimizer ends."""
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    ranks = sorted({e["pid"] for e in ev})
    keys = ("gather_fwd", "gather_bwd", "grad_buffer", "gradients", "compute", "busy")
    tot = dict.fromkeys(keys, 0.0)
    n = 0
    for r in ranks:
        comp = [e for e in ev if e["pid"] == r and e["tid"] == 0]
        tot["busy"] += sum(e["dur"] for e in ev if e["pid"] == r and e["tid"] >= 1
                           and e["args"].get("step", 0) >= 1)
        for s in range(1, steps):
            cs = [e for e in comp if e["args"].get("step") == s]
            tb = min((e["ts"] for e in cs if e.get("cat") == "backward"), default=float("inf"))
            for e in cs:
                if e["name"] == "wait all_gather":
                    tot["gather_fwd" if e["ts"] < tb else "gather_bwd"] += e["dur"]
                elif e["name"] == "wait grad buffer":
                    tot["grad_buffer"] += e["dur"]
                elif e["name"] == "wait gradients":
                    tot["gradients"] += e["dur"]
                elif e.get("cat") in ("forward", "backward"):
                    tot["compute"] += e["dur"]
            n += 1
    out = {k: v / n / 1e3 for k, v in tot.items()}
    out["gather"] = out["gather_fwd"] + out["gather_bwd"]
    out["total"] = out["gather"] + out["grad_buffer"] + out["gradients"]
    opt_end = {e["args"]["step"]: e["ts"] + e["dur"] for e in ev
               if e["pid"] == 0 and e.get("cat") == "optimizer"}
    out["step"] = (opt_end[steps - 1] - opt_end[0]) / (steps - 1) / 1e3
    return out

R = {}
for name in names:
    for rep in range(1, reps + 1):
        p = f"{d}/{name}-{rep}"
        j = json.loads(open(p + ".json").read())
        t = trace_stats(p + ".trace")
        c = j["comm_per_step"]
        R.setdefault(name, []).append(dict(
            inflight=j["comm_time_per_step"]["max_gathers_in_flight"],
            ring=j["memory"]["gather_buffer_bytes"], peak=j["memory"]["peak_unsharded_param_bytes"],
            ag=c["all_gather_bytes"], rs=c["reduce_scatter_bytes"], inter=c["inter_node_bytes"],
            link=int(open(p + ".link").read()) / j["steps"], loss=j["final_loss"], **t))

def med(name, key):
    return statistics.median(r[key] for r in R[name])
def spread(name, key):
    v = [r[key] for r in R[name]]
    m = statistics.median(v)
    return (max(v) - min(v)) / m if m else 0.0
def cell(name, key, w=8, f="{:.0f}"):
    s = f.format(med(name, key))
    if reps > 1: s += f" ({100 * spread(name, key):.0f}%)"
    return f"{s:>{w}}"

print(f"\n2 emulated nodes x 2 ranks (W=4, F=4), links {rate}; {model}")
print(f"{steps} steps per run, {reps} interleaved runs per configuration; ms per step: median over runs "
      f"(spread (max-min)/median); exposed = compute thread blocked on communication, mean over ranks, steps 1..{steps - 1}")

print("\n(a) prefetch: exposed communication per step")
hdr = ["prefetch", "step ms", "compute", "comm busy", "exposed", "gather", "fwd gath", "bwd gath", "grad buf", "wait grads"]
ws = [9, 14, 14, 14, 14, 14, 14, 14, 13, 13]
print("".join(f"{h:>{w}}" if i else f"{h:<{w}}" for i, (h, w) in enumerate(zip(hdr, ws))))
for name in ("none", "backward", "both"):
    keys = ("step", "compute", "busy", "total", "gather", "gather_fwd", "gather_bwd", "grad_buffer", "gradients")
    print(f"{name:<9}" + "".join(cell(name, k, w) for k, w in zip(keys, ws[1:])))
def ratio(a, b, key):
    rs = [x[key] / y[key] if y[key] else float("nan") for x, y in zip(R[a], R[b])]  # same repetition
    return statistics.median(rs), min(rs), max(rs)
for a in ("backward", "both"):
    for key, what in (("total", "exposed communication"), ("gather", "exposed gather time"),
                      ("gather_bwd", "exposed backward gather time"), ("step", "step time")):
        m, lo, hi = ratio(a, "none", key)
        print(f"{a}/none {what}: {m:.2f} (per-repetition ratios {lo:.2f}..{hi:.2f})")
m, lo, hi = ratio("backward", "none", "gather")
verdict = "MET" if m <= 0.5 else "NOT MET"
print(f"target: backward prefetch removes at least half of the exposed gather time of none "
      f"(ratio <= 0.5): {verdict} ({m:.2f})")

print("\n(b) rate limiter (-prefetch backward)")
print(f"{'L':<9}{'step ms':>14}{'exposed':>14}{'gather':>14}{'max in flight':>15}{'gather ring MB':>16}{'peak gathered MB':>18}")
for name, L in (("L1", 1), ("backward", 2), ("L4", 4), ("L0", 0)):
    inflight = max(r["inflight"] for r in R[name])
    print(f"{L:<9}{cell(name, 'step', 14)}{cell(name, 'total', 14)}{cell(name, 'gather', 14)}{inflight:>15}"
          f"{med(name, 'ring') / MB:>16.2f}{max(r['peak'] for r in R[name]) / MB:>18.2f}")

print("\n(c) communication precision (-prefetch backward, L = 2)")
print(f"{'dtype':<9}{'step ms':>14}{'exposed':>14}{'all-gather MB':>15}{'reduce-sc. MB':>15}"
      f"{'inter-node MB':>15}{'link MB':>10}{'final loss':>12}")
for name, lab in (("backward", "fp32"), ("bf16", "bf16")):
    print(f"{lab:<9}{cell(name, 'step', 14)}{cell(name, 'total', 14)}{med(name, 'ag') / MB:>15.2f}"
          f"{med(name, 'rs') / MB:>15.2f}{med(name, 'inter') / MB:>15.2f}{med(name, 'link') / MB:>10.1f}"
          f"{med(name, 'loss'):>12.4f}")
print("(all-gather, reduce-scatter, inter-node: engine counters per rank per step; link: bytes both nodes' "
      "links sent per step, start-up included)")
for key, what in (("ag", "all-gather bytes"), ("rs", "reduce-scatter bytes"), ("link", "link bytes"),
                  ("step", "step time")):
    m, lo, hi = ratio("bf16", "backward", key)
    print(f"bf16/fp32 {what}: {m:.3f}" + (f" (per-repetition {lo:.3f}..{hi:.3f})" if key in ("link", "step") else ""))

def timeline(path, step, width=100):
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0
          and e["args"].get("step") == step]
    comp = [e for e in ev if e["tid"] == 0]
    comm = [e for e in ev if e["tid"] >= 1 and e["args"].get("phase") == "backward"]
    b0 = min(e["ts"] for e in comp if e.get("cat") == "backward")
    b1 = min(e["ts"] + e["dur"] for e in comp if e["name"] == "wait gradients")
    sc = (b1 - b0) / width
    rows = {"compute": [" "] * width, "comm   ": [" "] * width}
    def paint(row, e, ch):
        a = int((e["ts"] - b0) / sc)
        z = max(a + 1, int((e["ts"] + e["dur"] - b0) / sc))
        for i in range(max(a, 0), min(z, width)):
            rows[row][i] = ch
    for e in comp:
        if e.get("cat") == "backward":
            paint("compute", e, str(e["args"]["unit"]))
        elif e["name"] == "wait all_gather":
            paint("compute", e, "w")
        elif e.get("cat") == "wait":
            paint("compute", e, ".")
    for e in comm:
        paint("comm   ", e, chr(ord("a") + e["args"]["unit"]) if e["args"]["kind"] == "all_gather"
              else chr(ord("A") + e["args"]["unit"]))
    return b1 - b0, sc, rows

print(f"\nbackward pass of rank 0, step {steps - 1}, repetition {reps} (one character = width/100)")
print("compute: digit = backward of unit k, w = wait all_gather, . = other waits; "
      "comm: letter = collective of unit k (a=0, b=1, ...), lower case all-gather, upper case reduce-scatter")
for name in ("none", "backward"):
    total, sc, rows = timeline(f"{d}/{name}-{reps}.trace", steps - 1)
    print(f"-prefetch {name}: backward {total / 1e3:.0f} ms, {sc / 1e3:.1f} ms per character")
    for k, v in rows.items():
        print(f"  {k} |{''.join(v)}|")
PY
