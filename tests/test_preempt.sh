#!/bin/bash
# test_preempt.sh: graceful preemption (-preempt_signals, [Note: preemption]
# in lib/driver/preempt.h) under the MPI launcher, 2 ranks:
#   - SIGUSR1 sent to ONE rank, then again and again to it while the run
#     saves and exits: every rank stops after the same step k, the run
#     writes ckpt_k and exits with status 75; the JSON summary says
#     preempted, by USR1, with that checkpoint and k losses; every
#     checkpoint left (the periodic one before k too) verifies, and no
#     temporary file is left;
#   - the run resumed from it (-resume auto) to k+5 steps, appended to the
#     preempted run's losses, gives exactly (bitwise) the losses of the
#     same k+5 steps run unbroken;
#   - -preempt_signals with an unknown signal is a usage error (status 2)
#     naming the value.
# The training runs at a constant learning rate after warmup (-lr_min =
# -lr), so its -steps (huge, until the signal) changes no loss.
#   usage: test_preempt.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
CKPT=$(dirname "$TRAIN")/fsdp-ckpt
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, run NP OUT options...
RUN_TIMEOUT=300
testlib_tmpdir fsdp_test_preempt
launcher=""
cleanup() { [ -n "$launcher" ] && kill -KILL "$launcher" 2>/dev/null; }
ok() { echo "ok: $*"; }
common="-model tiny -batch_size 2 -lr 1e-3 -lr_min 1e-3 -warmup 2 -seed 5 -summary json -log_every 1"

# the ranks: fsdp-train processes below the launcher (its children under
# OpenMPI, grandchildren under MPICH's hydra), found through our own tree
ranks_of() {
  local p c
  for c in $(pgrep -P "$1" 2>/dev/null); do
    p=$(ps -o comm= -p "$c" 2>/dev/null)
    case $p in *fsdp-train*) echo "$c" ;; *) ranks_of "$c" ;; esac
  done
}

# ---- the preempted run -------------------------------------------------
# shellcheck disable=SC2086
timeout 300 "$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" $common -steps 100000 -preempt_signals USR1,TERM \
  -checkpoint_dir "$tmp/ck" -checkpoint_every 10 -checkpoint_keep 2 >"$tmp/a" 2>"$tmp/a.err" &
launcher=$!
deadline=$((SECONDS + 90))
# past the periodic checkpoint of step 10 (a previous checkpoint to keep valid)
until grep -q '^step 12/' "$tmp/a" 2>/dev/null || ! kill -0 "$launcher" 2>/dev/null \
      || [ $SECONDS -ge $deadline ]; do sleep 0.1; done
target=$(ranks_of "$launcher" | tail -n 1)
nranks=$(ranks_of "$launcher" | wc -l)
if [ -z "$target" ] || [ "$nranks" != 2 ]; then
  fail "found $nranks rank processes below the launcher (expected 2); output:"; tail -n 3 "$tmp/a" "$tmp/a.err"
else
  # the first signal to one rank; then more, to the same rank, until the
  # run is over: some arrive while it saves
  kill -USR1 "$target"
  while kill -0 "$launcher" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
    kill -USR1 "$target" 2>/dev/null
    sleep 0.02
  done
fi
if kill -0 "$launcher" 2>/dev/null; then
  # a rank that stopped alone leaves the others in a collective: end it
  fail "the run still runs at the test's deadline (a rank waiting for one that stopped?)"
  kill -TERM "$launcher" 2>/dev/null
fi
status=0
wait "$launcher" || status=$?
launcher=""
if [ "$status" = 75 ]; then ok "the preempted run exited with status 75"
else fail "the preempted run exited with status $status, expected 75:"; tail -n 5 "$tmp/a" "$tmp/a.err"; fi
k=$(sed -n 's/^preempted by SIGUSR1 after step \([0-9]*\)\/100000: checkpoint .*/\1/p' "$tmp/a")
if [ -n "$k" ] && [ "$k" -ge 12 ]; then ok "rank 0 reports the preemption after step $k"
else fail "no 'preempted by SIGUSR1 after step k/100000' line in the output"; k=12; fi
ck=$(printf '%s/ck/ckpt_%08d.h5' "$tmp" "$k")
python3 - "$tmp/a" "$k" "$ck" <<'PY' || fails=$((fails + 1))
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
k, ck = int(sys.argv[2]), sys.argv[3]
if not lines:
    print("FAIL: the preempted run printed no JSON summary"); sys.exit(1)
s = json.loads(lines[-1])
got = (s.get("preempted"), s.get("preempt_signal"), s.get("preempt_checkpoint"), s["steps"], len(s["losses"]))
want = (True, "USR1", ck, k, k)
if got != want:
    print(f"FAIL: summary (preempted, preempt_signal, preempt_checkpoint, steps, len(losses)) = {got}, expected {want}")
    sys.exit(1)
print(f"ok: the summary says preempted by USR1 after {k} steps, checkpoint {ck}")
PY
left=$(ls "$tmp/ck" 2>/dev/null | tr '\n' ' ')
prev=$(printf 'ckpt_%08d.h5' $(( (k - 1) / 10 * 10 )))
[ -f "$ck" ] || fail "the preempted step's checkpoint $ck is missing: $left"
case $left in *tmp*) fail "a temporary file was left: $left" ;; esac
nvalid=0
for f in "$tmp"/ck/ckpt_*.h5; do
  if "$CKPT" verify "$f" >"$tmp/verify" 2>&1; then nvalid=$((nvalid + 1))
  else fail "fsdp-ckpt verify $f: $(tail -n 2 "$tmp/verify")"; fi
done
[ "$nvalid" -ge 2 ] && ok "the $nvalid checkpoints left ($left) verify, $prev among them"
[ -f "$tmp/ck/$prev" ] || fail "the previous periodic checkpoint $prev is gone: $left"

# ---- resumed to k+5, against the unbroken k+5 steps --------------------
n=$((k + 5))
run 2 "$tmp/b" $common -steps "$n" -preempt_signals USR1 -checkpoint_dir "$tmp/ck" \
  -checkpoint_every 10 -checkpoint_keep 2 -resume auto || { fail "the resumed run failed"; tail -n 5 "$tmp/b.err"; }
grep -q "^resumed from $ck at step $k\$" "$tmp/b" || fail "the resumed run did not start from $ck: $(grep resumed "$tmp/b")"
run 2 "$tmp/c" $common -steps "$n" || { fail "the unbroken run failed"; tail -n 5 "$tmp/c.err"; }
python3 - "$tmp/a" "$tmp/b" "$tmp/c" "$k" <<'PY' || fails=$((fails + 1))
import json, sys
def last_json(p):
    lines = [l for l in open(p) if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
a, b, c = (last_json(p) for p in sys.argv[1:4])
k = int(sys.argv[4])
if not (a and b and c):
    print("FAIL: a run printed no JSON summary"); sys.exit(1)
if b["first_step"] != k or b["preempted"] is not False:
    print(f"FAIL: resumed run: first_step {b['first_step']} (expected {k}), preempted {b['preempted']}")
    sys.exit(1)
joined, ref = a["losses"] + b["losses"], c["losses"]
if joined != ref:
    i = next((i for i, (x, y) in enumerate(zip(joined, ref)) if x != y), min(len(joined), len(ref)))
    print(f"FAIL: preempted + resumed losses differ from the unbroken run at step {i + 1} "
          f"(lengths {len(joined)}, {len(ref)}): {joined[i:i + 2]} vs {ref[i:i + 2]}")
    sys.exit(1)
print(f"ok: the {len(ref)} losses of the preempted ({k}) + resumed (5) run equal the unbroken run's exactly; last {ref[-1]}")
PY

# ---- usage error -------------------------------------------------------
run 1 "$tmp/d" -model tiny -steps 2 -preempt_signals USR1,USR9
st=$?
if [ "$st" = 2 ] && grep -q "preempt_signals.*USR9" "$tmp/d.err"; then ok "-preempt_signals USR9 is a usage error naming it"
else fail "-preempt_signals USR1,USR9: status $st, stderr: $(head -n 2 "$tmp/d.err")"; fi

echo "test_preempt: $fails failed"
[ "$fails" -eq 0 ]
