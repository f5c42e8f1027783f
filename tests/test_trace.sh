#!/bin/sh
# test_trace.sh: the -trace timeline of a 4-rank run shows the schedule the
# prefetch options promise, and the gathers in flight are the planned ones.
#   usage: test_trace.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
PLAN=$(dirname "$TRAIN")/fsdp-plan
tmp=$(mktemp -d /tmp/fsdp_test_trace.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
command -v python3 >/dev/null || { echo "python3 missing: cannot read the trace"; exit 77; }
common="-model tiny -n_layer 4 -steps 3 -log_every 0 -summary json"
fails=0
for mode in none:2 backward:2 both:2 backward:1 both:4 both:0; do
  pf=${mode%:*} L=${mode#*:}
  # shellcheck disable=SC2086
  if ! timeout 120 "$MPIEXEC" $PREFLAGS -n 4 "$TRAIN" $common -prefetch "$pf" -limit_all_gathers "$L" \
      -trace "$tmp/t.json" >"$tmp/out" 2>&1; then
    echo "FAIL: fsdp-train -prefetch $pf -limit_all_gathers $L failed"; tail -5 "$tmp/out"
    fails=$((fails + 1)); continue
  fi
  # shellcheck disable=SC2086
  if ! "$PLAN" -world_size 4 $common -prefetch "$pf" -limit_all_gathers "$L" >"$tmp/plan" 2>&1; then
    echo "FAIL: fsdp-plan -prefetch $pf -limit_all_gathers $L failed"; tail -5 "$tmp/plan"
    fails=$((fails + 1)); continue
  fi
  python3 - "$tmp/t.json" "$tmp/out" "$pf" "$L" "$tmp/plan" <<'PY' || fails=$((fails + 1))
import json, sys
trace, out, pf, L = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
plan = json.loads([l for l in open(sys.argv[5]) if l.strip()][-1])
planned = plan["comm_time_per_step"]["max_gathers_in_flight"]
ev = json.load(open(trace))["traceEvents"]
summary = json.loads([l for l in open(out) if l.strip()][-1])
comm = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "comm"]
comp = [e for e in ev if e.get("ph") == "X" and e.get("tid") == 0]
assert {e["pid"] for e in comm} == {0, 1, 2, 3}, "every rank has a comm track"
for e in comm:
    a = e["args"]
    assert set(a) >= {"step", "unit", "kind", "phase", "bytes", "issue_ts"}, a
    assert a["issue_ts"] <= e["ts"] + 1e-3, "issued before it ran"
nunits = 5  # root + 4 blocks (forward order index, root = 0)
errors = []
for pid in range(4):
    c = [e for e in comm if e["pid"] == pid]
    issue = {}
    for e in c:
        a = e["args"]
        issue.setdefault((a["step"], a["kind"], a["phase"], a["unit"]), a["issue_ts"])
    for step in range(3):
        # backward: all-gather of unit i-1 vs reduce-scatter of unit i
        for i in range(2, nunits):
            ag = issue.get((step, "all_gather", "backward", i - 1))
            rs = issue[(step, "reduce_scatter", "backward", i)]
            before = ag is not None and ag < rs
            if pf in ("backward", "both") and not before:
                errors.append(f"rank {pid} step {step}: -prefetch {pf}: gather of unit {i-1} not issued before reduce-scatter of unit {i}")
            if pf == "none" and before:
                errors.append(f"rank {pid} step {step}: -prefetch none issued gather of unit {i-1} early")
        # forward prefetch from the second step: gather of unit i issued
        # before unit i-1's forward ends
        if pf == "both" and step >= 1:
            for i in range(2, nunits):
                ag = issue[(step, "all_gather", "forward", i)]
                fwd = [e for e in comp if e["pid"] == pid and e["cat"] == "forward"
                       and e["args"]["step"] == step and e["args"]["unit"] == i - 1]
                end = fwd[0]["ts"] + fwd[0]["dur"]
                if not ag < end:
                    errors.append(f"rank {pid} step {step}: forward gather of unit {i} after unit {i-1}'s forward ended")
# limiter: the runtime's own count of gathers issued and not yet consumed
# equals the planned count exactly -- one: each unit's gather is consumed
# before the next is issued and prefetching runs one unit ahead (no run
# here reaches L, so "<= L" would hold for any limiter)
mx = summary["comm_time_per_step"]["max_gathers_in_flight"]
if mx != 1 or planned != 1:
    errors.append(f"-prefetch {pf} -limit_all_gathers {L}: {mx} gathers in flight at most, "
                  f"fsdp-plan plans {planned}, expected 1")
if L > 0:
    # and from the timeline: gathers whose [issue, end] overlap never exceed L
    for pid in range(4):
        iv = sorted((e["args"]["issue_ts"], e["ts"] + e["dur"]) for e in comm
                    if e["pid"] == pid and e["args"]["kind"] == "all_gather")
        points = sorted([(b, 1) for b, _ in iv] + [(e, -1) for _, e in iv])
        cur = peak = 0
        for _, d in points:
            cur += d
            peak = max(peak, cur)
        if peak > L:
            errors.append(f"rank {pid}: {peak} gathers overlap in the timeline with L={L}")
m = summary["memory"]
if m["peak_unsharded_param_bytes"] != m["gather_buffer_bytes"]:
    errors.append(f"peak unsharded {m['peak_unsharded_param_bytes']} != planned ring {m['gather_buffer_bytes']}")
for e in errors[:10]:
    print("FAIL:", e)
print(f"-prefetch {pf} -limit_all_gathers {L}: {len(comm)} collectives checked, {len(errors)} problems")
sys.exit(1 if errors else 0)
PY
done
echo "test_trace: $fails failed"
[ "$fails" -eq 0 ]
