#!/bin/sh
# test_gradtail.sh: the order of the optimizer under the gradient tail in
# fsdp-train's -trace ([Note: the gradient tail] in runtime/optim.c), for
# 4 ranks, steps 2..3, every rank -- orders the program makes, not timings:
#   - -optim_overlap stream -grad_clip 0: each unit's optim_tail task runs
#     on the reduce stream right after that unit's reduction, so the tasks
#     of all but the last unit start before the step's last reduce-scatter
#     ends (FIFO), one task per unit per step; also with hybrid sharding;
#   - -optim_overlap poll -grad_clip 0: one "adamw UNIT" span per unit and
#     step on the compute thread, each after its unit's reduce-scatter
#     ended (the landed event) and before the step's "optimizer" span;
#   - with clipping on, the tail only checks ("grad check UNIT"): no AdamW
#     before the norm is known;
#   - -optim_overlap none: no tail at all.
#   usage: test_gradtail.sh MPIEXEC "PREFLAGS" BINDIR
set -u
MPIEXEC=$1
PREFLAGS=$2
BIN=$3
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # $fails, the temporary directory
testlib_tmpdir fsdp_test_gradtail
command -v python3 >/dev/null || { echo "SKIP: python3 missing: cannot read the trace"; exit 77; }
common="-model tiny -n_layer 2 -steps 3 -log_every 0"
for cfg in "stream 0" "stream 0 -sharding_factor 2" "poll 0" "poll 1" "none 0" "stream 1"; do
  set -- $cfg
  where=$1 clip=$2
  shift 2
  rm -f "$tmp/t.json" # -trace never overwrites a file
  # shellcheck disable=SC2086
  if ! timeout 120 "$MPIEXEC" $PREFLAGS -n 4 "$BIN/fsdp-train" $common -optim_overlap "$where" \
       -grad_clip "$clip" "$@" -trace "$tmp/t.json" >"$tmp/train.out" 2>&1; then
    echo "FAIL: fsdp-train -optim_overlap $cfg failed:"; tail -n 5 "$tmp/train.out"; fails=$((fails + 1)); continue
  fi
  python3 - "$tmp/t.json" "$cfg" <<'PY' || fails=$((fails + 1))
import json, sys
trace, cfg = sys.argv[1:]
where, clip = cfg.split()[0], float(cfg.split()[1])
ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
bad = []
for r in sorted({e["pid"] for e in ev}):
    mine = [e for e in ev if e["pid"] == r]
    units = sorted({e["args"]["unit"] for e in mine if e.get("cat") == "comm"})
    for s in (1, 2):
        comp = [e for e in mine if e["tid"] == 0 and e["args"].get("step") == s]
        b0 = min(e["ts"] for e in comp if e.get("cat") == "backward")
        opt = [e for e in comp if e.get("cat") == "optimizer"][0]
        rs = [e for e in mine if e.get("cat") == "comm" and e["args"].get("step") == s
              and e["args"]["kind"] == "reduce_scatter"]
        last_rs_end = max(e["ts"] + e["dur"] for e in rs)
        tasks = [e for e in mine if e.get("cat") == "stream" and e["name"] == "optim_tail"
                 and b0 <= e["ts"] <= opt["ts"]]
        spans = [e for e in comp if e.get("cat") == "optim_tail"]
        adamw = [e for e in spans if e["name"].startswith("adamw ")]
        where_s = "rank %d step %d" % (r, s + 1)
        if where == "none":
            if tasks or spans:
                bad.append("%s: %d tail events with -optim_overlap none" % (where_s, len(tasks) + len(spans)))
        elif where == "stream":
            if len(tasks) != len(units):
                bad.append("%s: %d optim_tail tasks, %d units" % (where_s, len(tasks), len(units)))
            early = [e for e in tasks if e["ts"] < last_rs_end]
            if len(early) < len(units) - 1:
                bad.append("%s: %d optim_tail tasks start before the last reduce-scatter ends, "
                           "want %d" % (where_s, len(early), len(units) - 1))
        else:
            if len(spans) != len(units) or sorted(e["args"]["unit"] for e in spans) != units:
                bad.append("%s: tail spans for units %s, want %s" % (where_s, sorted(e["args"]["unit"] for e in spans), units))
            if clip > 0 and adamw:
                bad.append("%s: AdamW of %s before the clipped norm was known" % (where_s, adamw[0]["name"]))
            if clip == 0 and len(adamw) != len(units):
                bad.append("%s: %d adamw spans in the tail, want %d" % (where_s, len(adamw), len(units)))
            for e in spans:
                red = [x for x in rs if x["args"]["unit"] == e["args"]["unit"]]
                if red and e["ts"] < red[0]["ts"] + red[0]["dur"]:
                    bad.append("%s: %s began before its reduce-scatter ended" % (where_s, e["name"]))
                if e["ts"] + e["dur"] > opt["ts"]:
                    bad.append("%s: %s ended after the optimizer span began" % (where_s, e["name"]))
if bad:
    print("FAIL: -optim_overlap %s:" % cfg)
    for b in bad[:8]:
        print("   ", b)
    sys.exit(1)
PY
done
if [ $fails -ne 0 ]; then
  echo "test_gradtail.sh: $fails configuration(s) failed"
  exit 1
fi
echo "test_gradtail.sh: all configurations passed"
