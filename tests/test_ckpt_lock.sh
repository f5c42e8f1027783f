#!/bin/sh
# test_ckpt_lock.sh: one job per checkpoint directory ([Note: checkpoint
# directory lock], lib/io/dirlock.h).  While job A trains in a directory,
# a second job there (another seed, -resume auto; or a fresh start) is
# refused on every rank at start-up -- exit status 2, one message naming
# A's host and pid, no hang -- and the directory is exactly as it was.
# Once A is killed its lock is free although the lock file still names
# it: the next job takes it over with a warning naming A, resumes A's
# checkpoint and removes the file at its end.  A requeued Slurm job (the
# same SLURM_JOB_ID in the stale file) says so.
#   usage: test_ckpt_lock.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, run NP OUT options... (124: hung)
testlib_tmpdir fsdp_test_lock
apid=
cleanup() { [ -n "$apid" ] && kill -KILL "$apid" 2>/dev/null; }
ck=$tmp/ck
lock=$ck/.fsdp.lock
common="-model tiny -batch_size 2 -log_every 0 -checkpoint_dir $ck"
# the directory's state: every file's name and checksum
state() { (cd "$ck" && md5sum ckpt_* 2>/dev/null) }

run 2 "$tmp/a0" $common -seed 1 -steps 5 -checkpoint_every 5 || fail "the first run failed: $(cat "$tmp/a0.err")"
[ -e "$lock" ] && fail "a finished job left its lock file: $(cat "$lock")"
# job A: resumes there and trains on (no save within this test)
# shellcheck disable=SC2086
"$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" $common -seed 1 -steps 100000000 -checkpoint_every 100000000 \
  -resume auto >"$tmp/a.out" 2>"$tmp/a.err" &
apid=$!
i=0
while [ ! -s "$lock" ] && [ $i -lt 600 ] && kill -0 "$apid" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
[ -s "$lock" ] || { fail "job A did not take the lock: $(cat "$tmp/a.err")"; exit 1; }
holder=$(cat "$lock")
pid=$(echo "$holder" | sed -n 's/.*pid \([0-9]*\).*/\1/p')
echo "job A holds the lock: $holder"
before=$(state)

# B: another seed, resuming there, 2 ranks; then a fresh start
run 2 "$tmp/b" $common -seed 2 -steps 10 -checkpoint_every 1 -resume auto
rc=$?
[ "$rc" -eq 124 ] && fail "job B hung"
[ "$rc" -eq 2 ] || fail "job B: exit status $rc, expected 2: $(cat "$tmp/b.err")"
n=$(grep -c "the directory is in use by another job (host $(hostname), pid $pid" "$tmp/b.err")
[ "$n" -eq 1 ] || fail "job B: $n messages naming job A (pid $pid), expected 1: $(cat "$tmp/b.err")"
grep -q "resumed" "$tmp/b" && fail "job B resumed job A's checkpoint"
run 1 "$tmp/b2" $common -seed 2 -steps 10 -checkpoint_every 1
[ $? -eq 2 ] && grep -q "in use by another job" "$tmp/b2.err" || fail "a fresh job B was not refused as in use: $(cat "$tmp/b2.err")"
[ "$(state)" = "$before" ] || fail "refused jobs changed the directory: before $before, after $(state)"
[ "$(cat "$lock")" = "$holder" ] || fail "refused jobs changed the lock file: $(cat "$lock")"
kill -0 "$apid" 2>/dev/null || fail "job A ended while B was refused: $(cat "$tmp/a.err")"

# A killed: its name stays, its lock is gone; C takes over and resumes
kill -TERM "$apid"
wait "$apid" 2>/dev/null
apid=
[ "$(cat "$lock")" = "$holder" ] || fail "the killed job's lock file changed: $(cat "$lock")"
run 2 "$tmp/c" $common -seed 1 -steps 7 -checkpoint_every 1 -resume auto
rc=$?
[ "$rc" -eq 0 ] || fail "job C after A was killed: exit status $rc: $(cat "$tmp/c.err")"
n=$(grep -c "taking over the lock $lock left by host $(hostname), pid $pid" "$tmp/c.err")
[ "$n" -eq 1 ] || fail "job C: $n warnings naming the killed job (pid $pid), expected 1: $(cat "$tmp/c.err")"
grep -q "resumed from $ck/ckpt_00000005.h5 at step 5" "$tmp/c" || fail "job C did not resume ckpt_00000005.h5: $(cat "$tmp/c")"
[ -f "$ck/ckpt_00000007.h5" ] || fail "job C did not save ckpt_00000007.h5: $(ls -A "$ck")"
[ -e "$lock" ] && fail "job C left its lock file: $(cat "$lock")"

# a requeued Slurm job finds its own job id in the stale file
echo "host $(hostname), pid 1, Slurm job 4242, since 2026-01-01T00:00:00+0000" >"$lock"
export SLURM_JOB_ID=4242
run 1 "$tmp/d" $common -seed 1 -steps 8 -checkpoint_every 1 -resume auto
rc=$?
unset SLURM_JOB_ID
[ "$rc" -eq 0 ] || fail "requeued job: exit status $rc: $(cat "$tmp/d.err")"
grep -q "left by host $(hostname), pid 1, Slurm job 4242, since .* (this Slurm job, requeued)" "$tmp/d.err" \
  || fail "requeued job: the warning does not say it is this Slurm job: $(cat "$tmp/d.err")"
# another job whose id starts the same is not this one
echo "host $(hostname), pid 1, Slurm job 42424, since 2026-01-01T00:00:00+0000" >"$lock"
export SLURM_JOB_ID=4242
run 1 "$tmp/e" $common -seed 1 -steps 9 -checkpoint_every 1 -resume auto
rc=$?
unset SLURM_JOB_ID
[ "$rc" -eq 0 ] && grep -q "Slurm job 42424" "$tmp/e.err" && ! grep -q "this Slurm job" "$tmp/e.err" \
  || fail "job 4242 after job 42424: exit status $rc: $(cat "$tmp/e.err")"

echo "test_ckpt_lock: $fails failed"
[ "$fails" -eq 0 ]
