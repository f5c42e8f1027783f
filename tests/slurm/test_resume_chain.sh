#!/bin/bash
# test_resume_chain.sh: jobscripts/resume-chain.sbatch under a real Slurm
# (cluster.sh): a run of the small model cut into jobs of a few seconds
# (FSDP_SEGMENT_SECONDS sends the signal Slurm sends before a time limit)
# must
#   - take more than one job, each stopped early and resubmitted by the
#     previous one with --dependency=afterany, until a job finishes the
#     target and ends the chain (chain.log); a stopped job checkpoints the
#     step it is in (-preempt_signals USR1);
#   - end with the target step in the last job's output and summary.json;
#   - keep at most -checkpoint_keep checkpoints;
#   - reach the same final loss as the same run unbroken (cpu-1node.sbatch,
#     run first; its training time sets the job length so that the chain
#     takes about three jobs on any machine): resuming restores parameters,
#     optimizer state and data position.
# Skips (77) with the reason while fsdp-train has no -resume (checkpoints),
# or when Slurm cannot be installed or started.
#   usage: test_resume_chain.sh FSDP_TRAIN
set -u
train=${1:?usage: test_resume_chain.sh FSDP_TRAIN}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
if ! OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$train" -help 2>/dev/null \
     | grep -q -- '^ *-resume '; then
  echo "SKIP: $train -help lists no -resume: this build has no checkpoints to resume a chain from"
  exit 77
fi
# shellcheck source=cluster.sh
. "$here/cluster.sh"
slurm_test_begin "$train"
cd "$t/jobs" || exit 1
steps=100
printf -- '-model small\n-steps %d\n-log_every 5\n-seed 11\n-batch_size 2\n' "$steps" > run.opts
keep=2
small=(--time=5 --cpus-per-task=1 --nodes=1 --ntasks-per-node=2)
# the unbroken run first: its length sets the chain's job length, so that
# every machine cuts the run into about three jobs
ref=$(FSDP_RUN_DIR=$t/jobs/ref sbatch --parsable "${small[@]}" "$src/jobscripts/cpu-1node.sbatch" run.opts)
[ -n "$ref" ] || { echo "FAIL: sbatch refused cpu-1node.sbatch"; exit 1; }
slurm_wait 120 "$ref" || fail "the reference job did not finish"
train_s=$(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read()); print(d["step_time_ms_median"] * d["steps"] / 1e3)' ref/summary.json 2>/dev/null)
[ -n "$train_s" ] || { echo "FAIL: the reference run left no summary:"; tail -n 5 "$(slurm_job_field "$ref" StdOut)"; exit 1; }
segment=$(python3 -c 'import sys; print(round(1.0 + 0.4 * float(sys.argv[1]), 2))' "$train_s")
first=$(FSDP_SEGMENT_SECONDS=$segment FSDP_CHECKPOINT_EVERY=10 FSDP_CHECKPOINT_KEEP=$keep FSDP_MAX_JOBS=30 \
  sbatch --parsable "${small[@]}" "$src/jobscripts/resume-chain.sbatch" run.opts "$t/jobs/chain")
echo "unbroken reference $ref trained $steps steps in $train_s s; chain starts with $first, jobs stopped after $segment s"
[ -n "$first" ] || { echo "FAIL: sbatch refused resume-chain.sbatch"; exit 1; }
# the chain is over when its last job logged its end status and no job of
# this private cluster is left (squeue alone can look empty for a moment
# between one job and the one it resubmitted, or fail under load)
for _ in $(seq 900); do
  if tail -n 1 chain/chain.log 2>/dev/null | grep -q ' end status ' && [ -z "$(squeue -h 2>/dev/null)" ]; then
    break
  fi
  sleep 0.2
done
echo "chain.log:"; sed 's/^/    /' chain/chain.log 2>/dev/null

json() { python3 -c 'import json,sys
d=json.loads(open(sys.argv[1]).read())
for k in sys.argv[2].split("."): d=d[k]
print(d)' "$1" "$2" 2>/dev/null; }

checks=$((checks + 1))
njobs=$(grep -c ' start ' chain/chain.log 2>/dev/null)
nstopped=$(grep -c ' end stopped next ' chain/chain.log 2>/dev/null)
if [ "${njobs:-0}" -ge 2 ] && [ "$nstopped" -eq $((njobs - 1)) ] && grep -q ' end status 0$' chain/chain.log; then
  ok "the chain took $njobs jobs: $nstopped stopped early and resubmitted, the last finished"
else
  fail "chain of ${njobs:-0} jobs, $nstopped resubmitted, last status: $(tail -n 1 chain/chain.log 2>/dev/null)"
  for f in chain/job-*.log "$t"/jobs/fsdp-chain-*.out; do echo "--- $f"; tail -n 6 "$f"; done 2>/dev/null
fi
checks=$((checks + 1))
npre=$(cat chain/job-*.log 2>/dev/null | grep -c '^preempted by SIGUSR1 after step')
if [ "${nstopped:-0}" -ge 1 ] && [ "$npre" -ge 1 ]; then
  ok "$npre of the $nstopped stopped jobs checkpointed the step they were in (-preempt_signals USR1)"
else fail "no stopped job checkpointed on the signal ('preempted by SIGUSR1' in none of chain/job-*.log)"; fi
last=$(tail -n 1 chain/chain.log 2>/dev/null | cut -d' ' -f1)
checks=$((checks + 1))
if grep -q "^step $steps/$steps " "chain/job-$last.log" 2>/dev/null; then ok "the last job ($last) reached step $steps"
else fail "the last job's log (chain/job-$last.log) has no 'step $steps/$steps'"; fi
checks=$((checks + 1))
nck=$(find chain/checkpoints -mindepth 1 -maxdepth 1 2>/dev/null | grep -vc '\.tmp')
if [ "$nck" -ge 1 ] && [ "$nck" -le "$keep" ]; then ok "$nck checkpoints kept (-checkpoint_keep $keep)"
else fail "$nck entries in chain/checkpoints, expected 1..$keep: $(find chain/checkpoints -mindepth 1 -printf '%f ' 2>/dev/null)"; fi
checks=$((checks + 1))
a=$(json chain/summary.json final_loss)
b=$(json ref/summary.json final_loss)
if python3 -c 'import sys; a,b=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b) <= 1e-4*abs(b) else 1)' "$a" "$b" 2>/dev/null; then
  ok "final loss after the chain $a = unbroken run $b (within 1e-4 relative)"
else
  fail "final loss after the chain '$a' differs from the unbroken run '$b'"
fi

if [ "$fails" -gt 0 ]; then echo "test_resume_chain: $fails of $checks checks failed"; exit 1; fi
echo "test_resume_chain: all $checks checks passed"
exit 0
