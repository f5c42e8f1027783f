#!/bin/sh
# test_steptime.sh: fsdp-plan's step replay (plan/steptime.h) runs the
# schedule fsdp-train runs.  For each configuration -- prefetch none,
# backward and both; RAF and NRAF; limiter 1; hybrid sharding; gradient
# accumulation with and without communication -- fsdp-train writes a
# -trace of 2 steps on 4 ranks and fsdp-plan -profile -plan_schedule 1
# replays the same options; the second step's events in time order on rank
# 0 (gathers issued, forward and backward stages begun, gradient
# reductions issued: reduce-scatter, or the all-reduce when F = 1) must be
# the replay's, one for one.  The profile (fsdp-probe, collectives only)
# sets no order: the order is the program's.
#   usage: test_steptime.sh MPIEXEC "PREFLAGS" BINDIR
set -u
MPIEXEC=$1
PREFLAGS=$2
BIN=$3
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # $fails, the temporary directory
testlib_tmpdir fsdp_test_steptime
command -v python3 >/dev/null || { echo "SKIP: python3 missing: cannot read the trace"; exit 77; }
# shellcheck disable=SC2086
if ! timeout 120 "$MPIEXEC" $PREFLAGS -n 4 "$BIN/fsdp-probe" -model tiny -probe_compute 0 \
     -probe_min_bytes 1024 -probe_max_bytes 4096 -probe_reps 1 -profile_out "$tmp/prof.h5" \
     >"$tmp/probe.out" 2>&1; then
  echo "FAIL: fsdp-probe failed:"; tail -n 5 "$tmp/probe.out"; exit 1
fi
common="-model tiny -n_layer 3 -steps 2 -log_every 0 -summary json"
for cfg in "-prefetch none" "-prefetch backward" "-prefetch both" \
           "-prefetch both -reshard_after_forward 0" "-prefetch both -limit_all_gathers 1" \
           "-prefetch backward -sharding_factor 2" "-prefetch both -sharding_factor 1" \
           "-prefetch both -grad_accum 2 -accum_comm 1" "-prefetch backward -grad_accum 2 -accum_comm 0"; do
  rm -f "$tmp/t.json" # -trace never overwrites a file
  # shellcheck disable=SC2086
  if ! timeout 120 "$MPIEXEC" $PREFLAGS -n 4 "$BIN/fsdp-train" $common $cfg -trace "$tmp/t.json" \
       >"$tmp/train.out" 2>&1; then
    echo "FAIL: fsdp-train $cfg failed:"; tail -n 5 "$tmp/train.out"; fails=$((fails + 1)); continue
  fi
  # shellcheck disable=SC2086
  if ! "$BIN/fsdp-plan" -world_size 4 $common $cfg -profile "$tmp/prof.h5" -plan_schedule 1 \
       >"$tmp/plan.out" 2>&1; then
    echo "FAIL: fsdp-plan $cfg failed:"; tail -n 5 "$tmp/plan.out"; fails=$((fails + 1)); continue
  fi
  python3 - "$tmp/t.json" "$tmp/plan.out" "$cfg" <<'PY' || fails=$((fails + 1))
import json, sys
trace, plan, cfg = sys.argv[1:]
ev = json.load(open(trace))["traceEvents"]
p = json.loads([l for l in open(plan) if l.strip()][-1])
F = p["sharding_factor"]
mine = [e for e in ev if e.get("ph") == "X" and e.get("pid") == 0]
steps = sorted({e["args"]["step"] for e in mine if "step" in e.get("args", {})})
step = steps[1]
seq = []
for e in mine:
    a = e.get("args", {})
    if a.get("step") != step:
        continue
    if e.get("tid") == 0 and e.get("cat") in ("forward", "backward"):
        seq.append((e["ts"], e["cat"], a["unit"]))
    elif e.get("cat") == "comm":
        k = a["kind"]
        if k == "all_gather":
            seq.append((a["issue_ts"], "gather", a["unit"]))
        elif k == "reduce_scatter" or (k == "all_reduce" and F == 1):
            seq.append((a["issue_ts"], "reduce", a["unit"]))
seq.sort()
have = [(k, u) for _, k, u in seq]
want = [(x["event"], x["unit"]) for x in p["predicted"]["schedule"]]
if have != want:
    first = next((i for i in range(min(len(have), len(want))) if have[i] != want[i]), min(len(have), len(want)))
    print("FAIL: %s: the replay's step differs from the trace's at event %d of %d/%d:" % (cfg, first, len(want), len(have)))
    print("    trace :", have[max(0, first - 3):first + 4])
    print("    replay:", want[max(0, first - 3):first + 4])
    sys.exit(1)
if not want:
    print("FAIL: %s: no events" % cfg); sys.exit(1)
PY
done
if [ $fails -ne 0 ]; then
  echo "test_steptime: $fails configuration(s) failed"
  exit 1
fi
echo "test_steptime: the replayed schedule equals fsdp-train's trace in 9 configurations"
