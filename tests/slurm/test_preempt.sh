#!/bin/bash
# test_preempt.sh: jobscripts/preemptible.sbatch under a real Slurm
# (cluster.sh).  A running job (2 ranks) is signalled with
# `scancel --signal=USR1`; then
#   - its first start stops after some step k with the checkpoint of step k
#     and status 75, and its JSON summary says preempted by USR1 after k
#     steps;
#   - the script requeues it (same job id): the second start resumes from
#     that checkpoint (-resume auto) and trains to k+5; the job ends
#     COMPLETED, exit 0, restarted once (preempt.log: start, end 75, start,
#     end 0);
#   - the losses of both starts, joined, equal exactly those of the same
#     k+5 steps unbroken (cpu-1node.sbatch).
# How it stays quick and safe on a loaded machine (findings of an earlier
# version): the first start runs with -steps 100000 at a constant learning
# rate after warmup (-lr_min = -lr, so -steps changes no loss) and cannot
# end before the signal; the options file the script reads is rewritten
# with the real -steps (k+5) once k is known, before the restart.  The
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
slurm_require || exit 77
slurm_start || exit 77
slurm_mpi_launchers
t=$SLURM_TEST_DIR
fails=0
checks=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

FSDP_TRAIN=$(slurm_train_wrapper "$train")
export FSDP_TRAIN OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
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
requeued() { [ "$(slurm_job_field "$jid" JobState)" = PENDING ] && slurm_nodes_idle; }
gone() { [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && [ -n "$(slurm_job_field "$1" JobState)" ]; }

jid=$(FSDP_RUN_DIR=$t/jobs/pre FSDP_CHECKPOINT_EVERY=10 sbatch --parsable "${small[@]}" \
  "$src/jobscripts/preemptible.sbatch" run.opts)
[ -n "$jid" ] || { echo "FAIL: sbatch refused preemptible.sbatch"; exit 1; }
echo "preemptible job $jid submitted"
wait_for "job $jid to train (step 5 in pre/train.log)" grep -qs '^step 5/' pre/train.log
scancel --signal=USR1 "$jid" || fail "scancel --signal=USR1 $jid failed"
wait_for "the preemption of job $jid (pre/train.log)" grep -qs '^preempted by SIGUSR1 after step' pre/train.log
k=$(sed -n 's/^preempted by SIGUSR1 after step \([0-9]*\)\/.*/\1/p' pre/train.log | head -n 1)
n=$((k + 5))
opts "$n"  # the second start (and the reference) train to k+5
echo "job $jid preempted after step $k; the restart trains to $n"
wait_for "job $jid requeued (PENDING) with both nodes idle" requeued
# slurmd revoked the killed start's credential before the node went idle;
# it refuses a new credential of the same second ("Job credential
# revoked": the relaunch FAILS at once), so release in a later second
idle_at=$(date +%s)
wait_for "the second after $idle_at" eval '[ "$(date +%s)" -gt "$idle_at" ]'
scontrol update JobId="$jid" EligibleTime=now || fail "could not release the requeued job $jid"
ref=$(FSDP_RUN_DIR=$t/jobs/ref sbatch --parsable "${small[@]}" "$src/jobscripts/cpu-1node.sbatch" run.opts)
[ -n "$ref" ] || { echo "FAIL: sbatch refused cpu-1node.sbatch"; exit 1; }
wait_for "job $jid (restarted) and the reference $ref to end" eval 'gone "$jid" && gone "$ref"'

checks=$((checks + 1))
st=$(slurm_job_field "$jid" JobState) ec=$(slurm_job_field "$jid" ExitCode) rs=$(slurm_job_field "$jid" Restarts)
if [ "$st" = COMPLETED ] && [ "$ec" = 0:0 ] && [ "$rs" = 1 ]; then ok "job $jid $st, exit code $ec, restarted $rs time"
else fail "job $jid is $st, exit code $ec, restarts $rs; expected COMPLETED 0:0 1"; slurm_dump "$jid"; fi
checks=$((checks + 1))
log=$(cut -d' ' -f2- pre/preempt.log 2>/dev/null | sed 's/^start \([0-9]*\) [0-9]*$/start \1/' | tr '\n' ',')
if [ "$log" = "start 0,end 0 status 75,start 1,end 1 status 0," ]; then ok "preempt.log: $log"
else fail "preempt.log is '$log', expected start 0, end 0 status 75, start 1, end 1 status 0"; fi
checks=$((checks + 1))
ck=$(printf '%s/jobs/pre/checkpoints/ckpt_%08d.h5' "$t" "$k")
if grep -q "^resumed from $ck at step $k\$" pre/train.log; then ok "the restart resumed from $ck"
else fail "the restart did not resume from $ck: $(grep resumed pre/train.log)"; fi
checks=$((checks + 1))
python3 - pre/train.log ref/summary.json "$k" <<'PY' || fails=$((fails + 1))
import json, sys
starts = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ref = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
k = int(sys.argv[3])
if len(starts) != 2 or len(ref) != 1:
    print(f"FAIL: {len(starts)} JSON summaries in pre/train.log (expected 2), {len(ref)} in ref/summary.json")
    sys.exit(1)
a, b, r = starts[0], starts[1], ref[0]
bad = []
if (a["preempted"], a.get("preempt_signal"), a["steps"]) != (True, "USR1", k):
    bad.append(f"first start: preempted {a['preempted']} by {a.get('preempt_signal')} after {a['steps']} steps")
if (b["preempted"], b["first_step"], b["steps"]) != (False, k, 5):
    bad.append(f"second start: preempted {b['preempted']}, first_step {b['first_step']}, steps {b['steps']}")
joined = a["losses"] + b["losses"]
if joined != r["losses"]:
    i = next((i for i, (x, y) in enumerate(zip(joined, r["losses"])) if x != y), min(len(joined), len(r["losses"])))
    bad.append(f"losses differ from the unbroken run at step {i + 1}: {joined[i:i + 2]} vs {r['losses'][i:i + 2]}")
for m in bad: print("FAIL:", m)
if bad: sys.exit(1)
print(f"ok: first start preempted by USR1 after {k} steps, second resumed there; the {len(joined)} "
      f"losses equal the unbroken run's exactly (last {joined[-1]})")
PY

if [ "$fails" -gt 0 ]; then echo "test_preempt (slurm): $fails of $checks checks failed"; exit 1; fi
echo "test_preempt (slurm): all $checks checks passed"
exit 0
