#!/bin/sh
# test_stream_fault.sh: a task that fails on one rank's communication
# stream ends the whole job at once ([Note: a failed task ends the job] in
# lib/comm/stream.h), never a hang: fsdp-train on 4 ranks with a fault injected
# by the test-only FSDP_FAULT variable must exit non-zero within seconds,
# with one message naming the rank, the task (kind, unit, step) and the
# cause, printed by the stream thread before the compute thread ever sees
# the failure; steps before the faulty one complete.  A fault that never
# matches changes nothing; a malformed one is a usage error.
#   usage: test_stream_fault.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # $fails (fail and run are its own below)
testlib_tmpdir fsdp_test_stream_fault
# The job must end well inside the ctest timeout (300 s): a hang is caught
# by `timeout` (status 124) and by this bound.
max_s=60

fail() {
  echo "FAIL: $*"
  sed 's/^/    /' "$tmp/out" | tail -12
  fails=$((fails + 1))
}

# run FAULT: fsdp-train on 4 ranks with FSDP_FAULT=FAULT; sets status, secs
run() {
  t0=$(date +%s)
  # shellcheck disable=SC2086
  FSDP_FAULT=$1 timeout 200 "$MPIEXEC" $PREFLAGS -n 4 "$TRAIN" -model tiny -steps 6 \
    -log_every 1 >"$tmp/out" 2>&1
  status=$?
  secs=$(($(date +%s) - t0))
}

# expect_abort FAULT LINE_PATTERN LAST_STEP: the job fails fast with a line
# matching LINE_PATTERN; steps up to LAST_STEP completed, the next did not
expect_abort() {
  run "$1"
  if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
    fail "FSDP_FAULT=$1: exit status $status, expected a failure (not 0, not 124 = timeout)"
  elif [ "$secs" -ge "$max_s" ]; then
    fail "FSDP_FAULT=$1: the job took $secs s to end (at most $max_s s)"
  elif ! grep -q -- "$2" "$tmp/out"; then
    fail "FSDP_FAULT=$1: no line matches '$2'"
  elif ! grep -q "^step $3/6 " "$tmp/out" || grep -q "^step $(($3 + 1))/6 " "$tmp/out"; then
    fail "FSDP_FAULT=$1: expected steps 1..$3 logged and step $(($3 + 1)) not"
  elif grep -q "from FsdpRuntime\|gradient reduction\|all-gather of unit" "$tmp/out"; then
    # the failure is never recorded for the compute thread to find: the
    # stream thread ends the job first (no traceback from the runtime)
    fail "FSDP_FAULT=$1: the compute thread saw the failure: the stream did not end the job"
  else
    echo "ok: FSDP_FAULT=$1 -> status $status in $secs s: $(grep -m1 -- "$2" "$tmp/out" | cut -c1-160)"
  fi
}

# a reduce-scatter on the reduce stream of rank 2, mid-backward of step 3
expect_abort stream:rank=2:step=3:kind=reduce-scatter:unit=1 \
  "^\[fsdp rank 2 .*rank 2: task reduce-scatter (unit 1, step 3) on the 'reduce' communication stream failed: .*fault injected by FSDP_FAULT" 2
# the first all-gather of step 2 (the root unit's, forward) on rank 1's gather stream
expect_abort stream:rank=1:step=2:kind=all-gather \
  "^\[fsdp rank 1 .*rank 1: task all-gather (unit 0, step 2) on the 'gather' communication stream failed: .*fault injected" 1

# a fault that matches no task (step 99) changes nothing
run stream:rank=0:step=99
if [ "$status" -ne 0 ] || ! grep -q "^step 6/6 " "$tmp/out"; then
  fail "FSDP_FAULT=stream:rank=0:step=99 (never matches): status $status, expected 0 and 6 steps"
else
  echo "ok: FSDP_FAULT=stream:rank=0:step=99 -> status 0, 6 steps"
fi

# a malformed entry: usage error (status 2) naming it, on every rank
run stream:rank=two:step=3
if [ "$status" -ne 2 ] || ! grep -q "FSDP_FAULT entry 'stream:rank=two:step=3'" "$tmp/out"; then
  fail "FSDP_FAULT=stream:rank=two:step=3: status $status, expected 2 and a message naming the entry"
else
  echo "ok: FSDP_FAULT=stream:rank=two:step=3 -> status 2: $(grep -m1 FSDP_FAULT "$tmp/out")"
fi

if [ "$fails" -ne 0 ]; then
  echo "test_stream_fault: $fails failed"
  exit 1
fi
echo "test_stream_fault: all passed"
exit 0
