#!/bin/sh
# test_trace.sh: the -trace timeline of a 4-rank run shows the schedule the
# prefetch options promise ([Note: prefetch and the limiter] in
# lib/runtime/fsdp.c), the gathers in flight and the gather ring are the
# planned ones, and the losses do not depend on the schedule.  GPT tiny
# with 4 blocks (units: root 0, blocks 1..4), W = F = 4, RAF.  For each
# -prefetch / -limit_all_gathers L:
#   - while a unit computes, the gathers of the next L units of its phase
#     (backward: from the head, blocks 4..1; forward with -prefetch both,
#     from the first step on: blocks 1..4 after the embedding) were issued
#     before its compute ended, and the one after them only once it ended
#     (the limiter: no more than L ahead);
#   - max_gathers_in_flight is min(L, 4) with prefetching (L = 0: 4), 1
#     without, in the summary and in fsdp-plan, and the ring holds 1 + L
#     blocks (every block for L = 0) besides the root, its peak use equal
#     to it: L = 1, 2, 3 give 1, 2, 3 in flight and 2, 3, 4 slots;
#   - the summary's exposed_ms and exposed_ms_median are the mean and the
#     median over the steps of rank 0's waits in the trace;
#   - the losses are bit-identical across every mode and L, also with NRAF,
#     hybrid sharding, bf16, accumulation and recomputation together.
# A file made under the -trace name during the run is not overwritten.
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
for mode in none:2 backward:1 both:1 both:2 both:3 both:0; do
  pf=${mode%:*} L=${mode#*:}
  rm -f "$tmp/t.json" # -trace never overwrites a file
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
  grep . "$tmp/out" | tail -n 1 >"$tmp/summary.$pf.$L"
  python3 - "$tmp/t.json" "$tmp/out" "$pf" "$L" "$tmp/plan" <<'PY' || fails=$((fails + 1))
import json, sys
trace, out, pf, L = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
plan = json.loads([l for l in open(sys.argv[5]) if l.strip()][-1])
ev = json.load(open(trace))["traceEvents"]
summary = json.loads([l for l in open(out) if l.strip()][-1])
comm = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "comm"]
comp = [e for e in ev if e.get("ph") == "X" and e.get("tid") == 0]
assert {e["pid"] for e in comm} == {0, 1, 2, 3}, "every rank has a comm track"
for e in comm:
    a = e["args"]
    assert set(a) >= {"step", "unit", "kind", "phase", "bytes", "issue_ts"}, a
    assert a["issue_ts"] <= e["ts"] + 1e-3, "issued before it ran"
nblocks = 4
depth = 0 if pf == "none" else (L if L > 0 else nblocks)  # gathers ahead
errors = []
for pid in range(4):
    issue = {}
    for e in comm:
        a = e["args"]
        if e["pid"] == pid and a["kind"] == "all_gather":
            issue.setdefault((a["step"], a["phase"], a["unit"]), a["issue_ts"])
    def ends(step, cat):  # compute spans of a phase in program order: (unit, start, end)
        return sorted((e["ts"], e["ts"] + e["dur"], e["args"]["unit"]) for e in comp
                      if e["pid"] == pid and e["cat"] == cat and e["args"]["step"] == step)
    for step in range(3):
        phases = [("backward", [0, 4, 3, 2, 1], depth)]  # head, then blocks 4..1
        # forward prefetch from the static schedule: from the first step on
        phases.append(("forward", [0, 1, 2, 3, 4], depth if pf == "both" else 0))
        for phase, order, d in phases:
            spans = ends(step, phase)
            first = {}
            for b, e, u in spans:
                first.setdefault(u, (b, e))
            for p, u in enumerate(order):
                b, e = first[u]
                later = [v for v in order[p + 1:] if v != 0]
                for k, v in enumerate(later):
                    t = issue.get((step, phase, v))
                    if t is None:
                        errors.append(f"rank {pid} step {step}: no {phase} gather of unit {v}")
                        continue
                    if k < d and not t < e:
                        errors.append(f"rank {pid} step {step} {phase}: gather of unit {v} ({k + 1} ahead) "
                                      f"issued after unit {u}'s compute ended (L={L}, -prefetch {pf})")
                    if k >= d and not t >= b:
                        errors.append(f"rank {pid} step {step} {phase}: gather of unit {v} ({k + 1} ahead) "
                                      f"issued before unit {u}'s compute began (L={L}, -prefetch {pf})")
# the runtime's own count, the plan's and the one written here agree exactly
mx = summary["comm_time_per_step"]["max_gathers_in_flight"]
planned = plan["comm_time_per_step"]["max_gathers_in_flight"]
want = max(1, depth)
if mx != want or planned != want:
    errors.append(f"-prefetch {pf} -limit_all_gathers {L}: {mx} gathers in flight at most, "
                  f"fsdp-plan plans {planned}, expected {want}")
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
# the ring: root + (1 + depth) blocks, at most all 4; its peak use equals it
Pr, Pb = summary["units"][0]["padded_numel"], summary["units"][1]["padded_numel"]
slots = min(1 + depth, nblocks)
m = summary["memory"]
if m["gather_buffer_bytes"] != 4 * (Pr + slots * Pb) or plan["memory"]["gather_buffer_bytes"] != m["gather_buffer_bytes"]:
    errors.append(f"gather ring {m['gather_buffer_bytes']} bytes (plan {plan['memory']['gather_buffer_bytes']}), "
                  f"expected root + {slots} blocks = {4 * (Pr + slots * Pb)}")
if plan["memory"]["gather_slots"] != slots:
    errors.append(f"fsdp-plan: {plan['memory']['gather_slots']} gather slots, expected {slots}")
if m["peak_unsharded_param_bytes"] != m["gather_buffer_bytes"]:
    errors.append(f"peak unsharded {m['peak_unsharded_param_bytes']} != planned ring {m['gather_buffer_bytes']}")
# exposed communication in the summary: rank 0's waits per step, their
# mean and their median over the steps
waits = [sum(e["dur"] for e in comp if e["pid"] == 0 and e["cat"] == "wait" and e["args"]["step"] == st) / 1e3
         for st in range(3)]
ct = summary["comm_time_per_step"]
for key, want in (("exposed_ms", sum(waits) / 3), ("exposed_ms_median", sorted(waits)[1])):
    if abs(ct[key] - want) > 0.01 + 1e-3 * want:
        errors.append(f"summary {key} {ct[key]:.4f} ms, rank 0's waits in the trace give {want:.4f} ms {waits}")
for e in errors[:10]:
    print("FAIL:", e)
print(f"-prefetch {pf} -limit_all_gathers {L}: {len(comm)} collectives checked, "
      f"{mx} in flight, {slots} slots, {len(errors)} problems")
sys.exit(1 if errors else 0)
PY
done
# the same with everything else that meets the schedule: NRAF (forward
# prefetch only; every block kept), hybrid F = 2, bf16 parameters (cast
# tasks on the gather stream), accumulation, recomputation
knobs="-reshard_after_forward 0 -sharding_factor 2 -param_dtype bf16 -grad_accum 2 -recompute 1 -batch_size 2"
for mode in none:1 both:3; do
  pf=${mode%:*} L=${mode#*:}
  # shellcheck disable=SC2086
  if ! timeout 120 "$MPIEXEC" $PREFLAGS -n 4 "$TRAIN" $common $knobs -prefetch "$pf" -limit_all_gathers "$L" \
      >"$tmp/out" 2>&1; then
    echo "FAIL: fsdp-train $knobs -prefetch $pf -limit_all_gathers $L failed"; tail -5 "$tmp/out"
    fails=$((fails + 1)); continue
  fi
  grep . "$tmp/out" | tail -n 1 >"$tmp/knobs.$pf.$L"
done
python3 - "$tmp/knobs.none.1" "$tmp/knobs.both.3" <<'PY' || fails=$((fails + 1))
import json, sys
a, b = (json.loads(open(p).read()) for p in sys.argv[1:])
errors = []
if a["losses"] != b["losses"]:
    errors.append(f"losses differ: none {a['losses']} vs both, L=3 {b['losses']}")
for s, want in ((a, 1), (b, 3)):  # NRAF: forward gathers 3 blocks ahead of the root, backward none
    if s["comm_time_per_step"]["max_gathers_in_flight"] != want:
        errors.append(f"-prefetch {s['prefetch']}: {s['comm_time_per_step']['max_gathers_in_flight']} in flight, expected {want}")
    m = s["memory"]
    if m["peak_unsharded_param_bytes"] != m["gather_buffer_bytes"]:
        errors.append(f"-prefetch {s['prefetch']}: peak {m['peak_unsharded_param_bytes']} != ring {m['gather_buffer_bytes']}")
for e in errors:
    print("FAIL: NRAF, hybrid, bf16, accumulation, recompute:", e)
print(f"NRAF, hybrid, bf16, accumulation, recompute: {len(errors)} problems")
sys.exit(1 if errors else 0)
PY
# the schedule changes when gathers are issued, never what is computed
python3 - "$tmp"/summary.* <<'PY' || fails=$((fails + 1))
import json, sys
runs = {p.split("summary.", 1)[1]: json.loads(open(p).read())["losses"] for p in sys.argv[1:]}
ref = runs.get("none.2")
bad = [k for k, v in runs.items() if v != ref]
if len(runs) < 6 or ref is None or bad:
    print(f"FAIL: losses differ between prefetch modes / L ({len(runs)} runs): {bad}, e.g. {runs}")
    sys.exit(1)
print(f"losses bit-identical over {len(runs)} prefetch modes and limits: {ref}")
PY
# a file that appears under the -trace name while the run trains is not
# replaced ([Note: one job's files], lib/io/outputs.h: checked at start-up,
# written with O_EXCL): exit status 2 naming it, the file as it was.  The
# run file is created before step 1, so the trace name is taken mid-run.
rm -f "$tmp/late.json" "$tmp/late.h5"
# shellcheck disable=SC2086
timeout 120 "$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" -model tiny -steps 3000 -log_every 0 \
  -metrics "$tmp/late.h5" -trace "$tmp/late.json" >"$tmp/late.out" 2>&1 &
late=$!
i=0
while [ ! -e "$tmp/late.h5" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
echo "someone else's" >"$tmp/late.json"
wait "$late"
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "cannot create '$tmp/late.json': File exists" "$tmp/late.out" \
   || [ "$(cat "$tmp/late.json")" != "someone else's" ]; then
  echo "FAIL: a file made under the -trace name mid-run: exit $rc, now $(head -c 60 "$tmp/late.json"): $(tail -3 "$tmp/late.out")"
  fails=$((fails + 1))
else
  echo "ok: a file made under the -trace name mid-run is kept (exit 2, named)"
fi
# a resumed run (a requeued job run again with the same options) keeps the
# earlier run's trace and writes its own to FILE.1, then FILE.2
rm -rf "$tmp/rs" "$tmp/rs.json"*
ok=1
steps=0
for want in "" .1 .2; do
  steps=$((steps + 2))
  # shellcheck disable=SC2086
  timeout 120 "$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" -model tiny -steps $steps -log_every 0 \
    -checkpoint_dir "$tmp/rs" -checkpoint_every 2 -resume auto -trace "$tmp/rs.json" \
    >"$tmp/rs.out" 2>&1 || { ok=0; echo "FAIL: run for rs.json$want: $(tail -3 "$tmp/rs.out")"; }
  grep -q "trace written to $tmp/rs.json$want\$" "$tmp/rs.out" || ok=0
  [ -s "$tmp/rs.json$want" ] || ok=0
  [ "$want" = "" ] && sum0=$(md5sum <"$tmp/rs.json")
done
[ "$(md5sum <"$tmp/rs.json")" = "$sum0" ] || ok=0
if [ $ok = 1 ]; then
  echo "ok: resumed runs keep the first trace and write rs.json.1 and rs.json.2"
else
  echo "FAIL: a resumed run's -trace: $(grep -h 'trace\|error' "$tmp/rs.out" | tail -3)"
  fails=$((fails + 1))
fi
echo "test_trace: $fails failed"
[ "$fails" -eq 0 ]
