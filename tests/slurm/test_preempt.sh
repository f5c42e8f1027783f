#!/bin/bash
# test_preempt.sh: jobscripts/preemptible.sbatch under a real Slurm
# (cluster.sh).  A running job (2 ranks) is signalled with
# `scancel --signal=USR1` (to the ranks), and once requeued and running
# again with `scancel --batch --signal=USR1` (to the batch shell, as
# --signal=B:USR1@120 does: the script forwards it); then
#   - each of those starts stops after some step (k1, k2) with the
#     checkpoint of that step and status 75, and its JSON summary says
#     preempted by USR1;
#   - the script requeues the job each time (same job id): the next start
#     resumes from that checkpoint (-resume auto); the last trains to k2+5;
#     the job ends COMPLETED, exit 0, restarted twice (preempt.log: start,
#     end 75, start, end 75, start, end 0);
#   - the losses of the three starts, joined, equal exactly those of the
#     same k2+5 steps unbroken (cpu-1node.sbatch).
# How it stays quick and safe on a loaded machine (findings of an earlier
# version): the first start runs with -steps 100000 at a constant learning
# rate after warmup (-lr_min = -lr, so -steps changes no loss) and cannot
# end before the signal; the options file the script reads is rewritten
# with the real -steps (k2+5) once k2 is known, before the last restart.  The
# requeued job is released early (EligibleTime=now, skipping Slurm's
# requeue delay) only once it is PENDING and both nodes are idle, and in a
# later second than that: released while a node still cleaned up the killed
# start, or within the second its credential was revoked, it was relaunched
# at once and FAILED with no output.  One deadline bounds every wait; a stuck stage
# prints squeue, scontrol and the daemons' logs (slurm_dump).
# Skips (77) with the reason when fsdp-train has no -preempt_signals, or
# when Slurm cannot be installed or started.
#   usage: test_preempt.sh FSDP_TRAIN
set -u
train=${1:?usage: test_preempt.sh FSDP_TRAIN}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
if ! OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$train" -help 2>/dev/null \
     | grep -q -- '^ *-preempt_signals '; then
  echo "SKIP: $train -help lists no -preempt_signals"
  exit 77
fi
# shellcheck source=cluster.sh
. "$here/cluster.sh"
slurm_test_begin "$train"
cd "$t/jobs" || exit 1
opts() { # opts STEPS: the options file both starts and the reference read
  printf -- '-model tiny\n-batch_size 2\n-lr 1e-3\n-lr_min 1e-3\n-warmup 2\n-seed 5\n-log_every 1\n-steps %d\n' \
    "$1" > run.opts
}
opts 100000
small=(--time=5 --cpus-per-task=1 --nodes=1 --ntasks-per-node=2)
deadline=$((SECONDS + 240))
jid=""
ref=""
# wait_for WHAT COMMAND...: poll COMMAND until it succeeds; past the
# deadline, say which stage is stuck, show the cluster's state and stop
wait_for() {
  local what=$1
  shift
  until "$@"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "FAIL: stuck waiting for $what (test deadline passed)"
      echo "--- run folder:"; tail -n 5 pre/train.log pre/preempt.log 2>/dev/null | sed 's/^/    /'
      slurm_dump $jid $ref
      exit 1
    fi
    sleep 0.2
  done
}
requeued() {
  local st
  st=$(slurm_job_field "$jid" JobState)
  case $st in
    PENDING) slurm_nodes_idle ;;
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)
      # ended instead of going back to the queue: no use waiting
      echo "FAIL: job $jid ended ($st) instead of being requeued after its preemption"
      tail -n 5 pre/preempt.log "$(slurm_job_field "$jid" StdOut)" 2>/dev/null | sed 's/^/    /'
      slurm_dump "$jid"
      exit 1 ;;
    *) return 1 ;;
  esac
}
gone() { [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && [ -n "$(slurm_job_field "$1" JobState)" ]; }

# training: at least 3 steps logged since the current start began (since
# its "resumed from" line)
training() {
  awk '/^resumed from/ { n = 0 } /^step / { n++ } END { exit !(n >= 3) }' pre/train.log 2>/dev/null
}
# release JOBID: after a requeue, start the job now rather than after
# Slurm's requeue delay -- but only once it is PENDING with both nodes idle,
# and in a later second: slurmd revoked the killed start's credential
# before the node went idle and refuses a new credential of the same second
# ("Job credential revoked": the relaunch FAILS at once)
release() {
  wait_for "job $jid requeued (PENDING) with both nodes idle" requeued
  local idle_at
  idle_at=$(date +%s)
  wait_for "the second after $idle_at" eval '[ "$(date +%s)" -gt "$idle_at" ]'
  scontrol update JobId="$jid" EligibleTime=now || fail "could not release the requeued job $jid"
}

jid=$(FSDP_RUN_DIR=$t/jobs/pre FSDP_CHECKPOINT_EVERY=10 sbatch --parsable "${small[@]}" \
  "$src/jobscripts/preemptible.sbatch" run.opts)
[ -n "$jid" ] || { echo "FAIL: sbatch refused preemptible.sbatch"; exit 1; }
echo "preemptible job $jid submitted"
# two preemptions: the ranks signalled directly (scancel --signal), then the
# batch shell (scancel --batch, as --signal=B:USR1@120 does), which forwards
ks=()
for how in "" --batch; do
  wait_for "job $jid to train (3 steps in this start)" training
  scancel $how --signal=USR1 "$jid" || fail "scancel $how --signal=USR1 $jid failed"
  wait_for "preemption $(( ${#ks[@]} + 1 )) of job $jid (pre/train.log)" \
    eval '[ "$(grep -c "^preempted by SIGUSR1 after step" pre/train.log 2>/dev/null)" -gt "${#ks[@]}" ]'
  ks+=("$(sed -n 's/^preempted by SIGUSR1 after step \([0-9]*\)\/.*/\1/p' pre/train.log | tail -n 1)")
  echo "job $jid preempted (scancel ${how:-to the ranks} --signal=USR1) after step ${ks[-1]}"
  # before the last restart: it (and the reference) train to 5 more steps
  [ "$how" = --batch ] && opts $(( ${ks[-1]} + 5 ))
  release
done
k1=${ks[0]} k2=${ks[1]}
n=$((k2 + 5))
ref=$(FSDP_RUN_DIR=$t/jobs/ref sbatch --parsable "${small[@]}" "$src/jobscripts/cpu-1node.sbatch" run.opts)
[ -n "$ref" ] || { echo "FAIL: sbatch refused cpu-1node.sbatch"; exit 1; }
wait_for "job $jid (restarted) and the reference $ref to end" eval 'gone "$jid" && gone "$ref"'

checks=$((checks + 1))
st=$(slurm_job_field "$jid" JobState) ec=$(slurm_job_field "$jid" ExitCode) rs=$(slurm_job_field "$jid" Restarts)
if [ "$st" = COMPLETED ] && [ "$ec" = 0:0 ] && [ "$rs" = 2 ]; then ok "job $jid $st, exit code $ec, restarted $rs times"
else fail "job $jid is $st, exit code $ec, restarts $rs; expected COMPLETED 0:0 2"; slurm_dump "$jid"; fi
checks=$((checks + 1))
log=$(cut -d' ' -f2- pre/preempt.log 2>/dev/null | sed 's/^start \([0-9]*\) [0-9]*$/start \1/' | tr '\n' ',')
want="start 0,end 0 status 75,start 1,end 1 status 75,start 2,end 2 status 0,"
if [ "$log" = "$want" ]; then ok "preempt.log: $log"
else fail "preempt.log is '$log', expected '$want'"; fi
checks=$((checks + 1))
for k in "$k1" "$k2"; do
  ck=$(printf '%s/jobs/pre/checkpoints/ckpt_%08d.h5' "$t" "$k")
  if grep -q "^resumed from $ck at step $k\$" pre/train.log; then ok "a restart resumed from $ck"
  else fail "no restart resumed from $ck: $(grep resumed pre/train.log | tr '\n' ' ')"; fi
done
checks=$((checks + 1))
python3 - pre/train.log ref/summary.json "$k1" "$k2" <<'PY' || fails=$((fails + 1))
import json, sys
starts = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ref = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
k1, k2 = int(sys.argv[3]), int(sys.argv[4])
if len(starts) != 3 or len(ref) != 1:
    print(f"FAIL: {len(starts)} JSON summaries in pre/train.log (expected 3), {len(ref)} in ref/summary.json")
    sys.exit(1)
want = [(True, "USR1", 0, k1), (True, "USR1", k1, k2 - k1), (False, None, k2, 5)]
got = [(s["preempted"], s.get("preempt_signal"), s["first_step"], s["steps"]) for s in starts]
bad = [f"start {i + 1}: (preempted, signal, first_step, steps) = {g}, expected {w}"
       for i, (g, w) in enumerate(zip(got, want)) if g != w]
joined = [x for s in starts for x in s["losses"]]
r = ref[0]["losses"]
if joined != r:
    i = next((i for i, (x, y) in enumerate(zip(joined, r)) if x != y), min(len(joined), len(r)))
    bad.append(f"losses differ from the unbroken run at step {i + 1}: {joined[i:i + 2]} vs {r[i:i + 2]}")
for m in bad: print("FAIL:", m)
if bad: sys.exit(1)
print(f"ok: preempted after {k1} and {k2} steps, resumed each time; the {len(joined)} losses of the "
      f"3 starts equal the unbroken run's exactly (last {joined[-1]})")
PY

if [ "$fails" -gt 0 ]; then echo "test_preempt (slurm): $fails of $checks checks failed"; exit 1; fi
echo "test_preempt (slurm): all $checks checks passed"
exit 0
