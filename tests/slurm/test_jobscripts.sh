#!/bin/bash
# test_jobscripts.sh: the scripts of jobscripts/ as users submit them, under
# a real Slurm (private, started and torn down here: cluster.sh), scaled
# down to the tiny model by options:
#   - cpu-1node.sbatch on 2 ranks: completes, its output shows every step,
#     summary.json in the run folder says 2 ranks and the steps asked for
#     (and run.h5 exists when fsdp-train has -metrics);
#   - the same with a misspelled option: the job FAILS with exit code 2 and
#     its output file names the option;
#   - the same launched with mpirun inside the allocation (FSDP_LAUNCHER);
#   - cpu-hybrid.sbatch on 2 nodes x 2 ranks: F = 2 from the allocation,
#     topology detected as 2 nodes, and only the replica all-reduce crosses
#     nodes (inter-node bytes = all-reduce bytes, gathers stay inside);
#   - sweep.sbatch as a 2-task array over 2 option files: each task ran its
#     own file (its steps);
#   - every script of jobscripts/ parses (bash -n; the GPU ones cannot run here).
# Exit 77 (skip) with the reason when Slurm cannot be installed or started.
#   usage: test_jobscripts.sh FSDP_TRAIN
set -u
train=${1:?usage: test_jobscripts.sh FSDP_TRAIN}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# shellcheck source=cluster.sh
. "$here/cluster.sh"
slurm_test_begin "$train"

for f in "$src"/jobscripts/*.sbatch; do  # the GPU scripts cannot run here: syntax at least
  checks=$((checks + 1))
  if bash -n "$f" 2>"$t/syntax.err"; then ok "bash -n $(basename "$f")"; else fail "$(basename "$f"): $(cat "$t/syntax.err")"; fi
done

cd "$t/jobs" || exit 1
printf -- '-model tiny\n-steps 4\n-log_every 1\n-seed 7\n' > tiny.opts
mkdir sweep
printf -- '-model tiny\n-steps 2\n-log_every 1\n-wrap 2\n' > sweep/a.opts
printf -- '-model tiny\n-steps 3\n-log_every 1\n-reshard_after_forward 0\n' > sweep/b.opts
small=(--time=5 --cpus-per-task=1)

j1=$(FSDP_RUN_DIR=$t/jobs/one sbatch --parsable "${small[@]}" --nodes=1 --ntasks-per-node=2 \
  "$src/jobscripts/cpu-1node.sbatch" tiny.opts)
j2=$(FSDP_RUN_DIR=$t/jobs/bad sbatch --parsable "${small[@]}" --nodes=1 --ntasks-per-node=2 \
  "$src/jobscripts/cpu-1node.sbatch" tiny.opts -stpes 3)
j3=$(FSDP_RUN_DIR=$t/jobs/hybrid sbatch --parsable "${small[@]}" --nodes=2 --ntasks-per-node=2 \
  "$src/jobscripts/cpu-hybrid.sbatch" tiny.opts)
j4=$(FSDP_LAUNCHER=mpirun FSDP_RUN_DIR=$t/jobs/mpirun sbatch --parsable "${small[@]}" --nodes=1 \
  --ntasks-per-node=2 "$src/jobscripts/cpu-1node.sbatch" tiny.opts)
j5=$(FSDP_RUN_DIR=$t/jobs/sweep sbatch --parsable "${small[@]}" --nodes=1 --ntasks-per-node=1 \
  --array=0-1 "$src/jobscripts/sweep.sbatch" sweep)
echo "submitted: 1node $j1, bad option $j2, hybrid $j3, mpirun $j4, sweep array $j5"
if [ -z "$j1" ] || [ -z "$j2" ] || [ -z "$j3" ] || [ -z "$j4" ] || [ -z "$j5" ]; then
  echo "FAIL: sbatch refused a job script"; exit 1
fi
slurm_wait 150 "$j1" "$j2" "$j3" "$j4" "$j5" || fail "jobs did not finish in time"

# json FILE KEY: a number from a summary line (flat or nested key)
json() { python3 -c 'import json,sys
d=json.loads(open(sys.argv[1]).read())
for k in sys.argv[2].split("."): d=d[k]
print(d)' "$1" "$2" 2>/dev/null; }

# expect_job ID STATE EXIT NAME: JobState and ExitCode
expect_job() {
  checks=$((checks + 1))
  local st ec
  st=$(slurm_job_field "$1" JobState)
  ec=$(slurm_job_field "$1" ExitCode)
  if [ "$st" = "$2" ] && [ "$ec" = "$3" ]; then ok "$4: job $1 $st, exit code $ec"
  else
    fail "$4: job $1 is $st with exit code $ec, expected $2 $3; its output:"
    sed 's/^/    /' "$(slurm_job_field "$1" StdOut)" 2>/dev/null | tail -n 15
  fi
}
# expect_eq WHAT GOT WANT
expect_eq() {
  checks=$((checks + 1))
  if [ "$2" = "$3" ]; then ok "$1 = $3"; else fail "$1 = '$2', expected '$3'"; fi
}
has_metrics=0
"$train" -help 2>/dev/null | grep -q -- '^ *-metrics ' && has_metrics=1

expect_job "$j1" COMPLETED 0:0 "cpu-1node.sbatch"
out1=$(slurm_job_field "$j1" StdOut)
checks=$((checks + 1))
if grep -q '^step 4/4 ' "$out1"; then ok "cpu-1node output shows step 4/4"; else fail "no 'step 4/4' in $out1"; fi
expect_eq "cpu-1node summary.json world_size" "$(json one/summary.json world_size)" 2
expect_eq "cpu-1node summary.json steps" "$(json one/summary.json steps)" 4
if [ $has_metrics = 1 ]; then
  checks=$((checks + 1))
  if [ -s one/run.h5 ]; then ok "cpu-1node wrote its run file"; else fail "no run file one/run.h5"; fi
else
  echo "note: fsdp-train has no -metrics yet: run file not checked"
fi

expect_job "$j2" FAILED 2:0 "bad option"
checks=$((checks + 1))
if grep -q 'unknown option -stpes' "$(slurm_job_field "$j2" StdOut)"; then
  ok "bad option named in the job output: $(grep -m1 'unknown option' "$(slurm_job_field "$j2" StdOut)")"
else fail "job output of $j2 does not name -stpes"; fi

expect_job "$j3" COMPLETED 0:0 "cpu-hybrid.sbatch on 2 nodes"
expect_eq "hybrid nodes (MPI_COMM_TYPE_SHARED)" "$(json hybrid/summary.json nodes)" 2
expect_eq "hybrid world_size" "$(json hybrid/summary.json world_size)" 4
expect_eq "hybrid sharding_factor (ranks per node)" "$(json hybrid/summary.json sharding_factor)" 2
ar=$(json hybrid/summary.json comm_per_step.all_reduce_bytes)
expect_eq "hybrid inter_node_bytes (only the replica all-reduce)" \
  "$(json hybrid/summary.json comm_per_step.inter_node_bytes)" "$ar"
ag=$(json hybrid/summary.json comm_per_step.all_gather_bytes)
rs=$(json hybrid/summary.json comm_per_step.reduce_scatter_bytes)
expect_eq "hybrid intra_node_bytes (gathers and reduce-scatters)" \
  "$(json hybrid/summary.json comm_per_step.intra_node_bytes)" "$((ag + rs))"

expect_job "$j4" COMPLETED 0:0 "cpu-1node.sbatch with mpirun"
expect_eq "mpirun summary.json world_size" "$(json mpirun/summary.json world_size)" 2

for k in 0 1; do expect_job "${j5}_$k" COMPLETED 0:0 "sweep.sbatch array task $k"; done
expect_eq "sweep a.opts steps" "$(json sweep/a/summary.json steps)" 2
expect_eq "sweep a.opts wrap" "$(json sweep/a/summary.json wrap)" 2
expect_eq "sweep b.opts steps" "$(json sweep/b/summary.json steps)" 3
expect_eq "sweep b.opts reshard_after_forward" "$(json sweep/b/summary.json reshard_after_forward)" 0

if [ "$fails" -gt 0 ]; then
  echo "test_jobscripts: $fails of $checks checks failed"
  for f in "$t"/log/slurmctld.log "$t"/log/slurmd-n1.log; do echo "--- tail $f"; tail -n 8 "$f"; done
  exit 1
fi
echo "test_jobscripts: all $checks checks passed"
exit 0
