#!/bin/sh
# test_flight.sh: the hang watchdog and flight recorder ([Note: hang
# watchdog] in lib/comm/flight.h), fsdp-train on 4 ranks of the tiny model:
#  1. -coll_timeout with a bad value: usage error naming the option, exit 2
#     (and so is a malformed FSDP_FAULT=skip:... entry).
#  2. one rank stopped with SIGSTOP mid-run, -coll_timeout 5: the job ends
#     (not by the test's own timeout) within timeout + 30 s -- the issue's
#     bound is timeout + 10 s; 20 s more of slack for a loaded machine --
#     with a message naming the stopped rank as not arrived.
#  2b. -coll_warn 2 -coll_timeout 8 on 2 ranks, rank 1 stopped: a warning
#     naming the collective, its unit and step and rank 1 as not arrived
#     comes before the timeout's message, and the waiting rank 0 uses
#     under 30% of a core meanwhile (utime + stime from /proc/PID/stat
#     over 3 s of the wait; a rank polling in MPI takes most of a core:
#     a bound, not a timing).  -coll_warn not below -coll_timeout: exit 2.
#  3. one rank made to skip an all-gather (FSDP_FAULT=skip:..., test only):
#     the message names the first sequence number at which the ranks'
#     calls differ and what each rank issued there.
#  4. SIGUSR2 to one rank of a healthy run: every rank writes its ring (to
#     stderr and next to the run file) and the run ends with the same
#     losses as a run without the signal.
# Every process started here is found by pid (descendants of the launcher)
# and SIGCONT/SIGKILLed at the end, so nothing lingers.
#   usage: test_flight.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
tmp=$(mktemp -d /tmp/fsdp_test_flight.XXXXXX)
launcher=""
pids="" # the job's processes, saved while it runs (they outlive a killed launcher)
# cleanup_job: SIGCONT and SIGKILL whatever is left of the job, by pid (a
# saved pid is only signalled while it still runs fsdp-train or the launcher)
cleanup_job() {
  [ -n "$launcher" ] && pids="$pids $launcher $(descendants "$launcher")"
  for p in $pids; do
    if grep -q -e fsdp-train -e mpiexec -e mpirun -e hydra "/proc/$p/cmdline" 2>/dev/null; then
      kill -CONT "$p" 2>/dev/null
      kill -KILL "$p" 2>/dev/null
    fi
  done
  launcher=""
  pids=""
}
cleanup() {
  cleanup_job
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0

fail() {
  echo "FAIL: $*"
  grep -v "flight #" "$tmp/out" | sed 's/^/    /' | tail -12
  fails=$((fails + 1))
}

# descendants PID: every process below PID (the launcher's children, and
# theirs: MPICH's hydra puts a proxy in between)
descendants() {
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$c"
    descendants "$c"
  done
}

# rank_pid R: the pid of world rank R among the launcher's descendants
rank_pid() {
  for p in $(descendants "$launcher"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
      grep -q -x -e "OMPI_COMM_WORLD_RANK=$1" -e "PMI_RANK=$1"; then
      echo "$p"
      return
    fi
  done
}

# start ARGS...: fsdp-train on $NP ranks (4 unless set) in the background,
# stdout to $tmp/out, stderr there too or to $ERR; sets launcher
start() {
  if [ -n "${ERR:-}" ]; then
    # shellcheck disable=SC2086
    timeout 240 "$MPIEXEC" $PREFLAGS -n "${NP:-4}" "$TRAIN" -model tiny -log_every 1 "$@" \
      >"$tmp/out" 2>"$ERR" &
  else
    # shellcheck disable=SC2086
    timeout 240 "$MPIEXEC" $PREFLAGS -n "${NP:-4}" "$TRAIN" -model tiny -log_every 1 "$@" \
      >"$tmp/out" 2>&1 &
  fi
  launcher=$!
}

# wait_step N: until step N is logged (or the job ended); 0 if it was
wait_step() {
  i=0
  while [ $i -lt 1200 ]; do
    grep -q "^step $1/" "$tmp/out" && return 0
    kill -0 "$launcher" 2>/dev/null || return 1
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}

# 1. bad values name the option, exit 2
for bad in -1 abc; do
  # shellcheck disable=SC2086
  timeout 120 "$MPIEXEC" $PREFLAGS -n 4 "$TRAIN" -model tiny -steps 2 -coll_timeout "$bad" \
    >"$tmp/out" 2>&1
  status=$?
  if [ "$status" -ne 2 ] || ! grep -q "coll_timeout" "$tmp/out"; then
    fail "-coll_timeout $bad: status $status, expected 2 and a message naming -coll_timeout"
  else
    echo "ok: -coll_timeout $bad -> status 2: $(grep -m1 coll_timeout "$tmp/out" | cut -c1-140)"
  fi
done

# a malformed skip: entry of the test-only FSDP_FAULT is a usage error too
# shellcheck disable=SC2086
FSDP_FAULT=skip:rank=two:step=2 timeout 120 "$MPIEXEC" $PREFLAGS -n 4 "$TRAIN" -model tiny \
  -steps 2 >"$tmp/out" 2>&1
status=$?
if [ "$status" -ne 2 ] || ! grep -q "FSDP_FAULT entry 'skip:rank=two:step=2'" "$tmp/out"; then
  fail "FSDP_FAULT=skip:rank=two:step=2: status $status, expected 2 and a message naming the entry"
else
  echo "ok: FSDP_FAULT=skip:rank=two:step=2 -> status 2"
fi

# 2. SIGSTOP one rank mid-run
timeout_s=5
start -steps 100000 -coll_timeout $timeout_s
if ! wait_step 5; then
  fail "SIGSTOP: the run did not reach step 5"
else
  victim=$(rank_pid 2)
  if [ -z "$victim" ]; then
    fail "SIGSTOP: cannot find the pid of rank 2"
  else
    pids=$(descendants "$launcher")
    kill -STOP "$victim"
    t0=$(date +%s)
    wait "$launcher"
    status=$?
    launcher=""
    secs=$(($(date +%s) - t0))
    line=$(grep -m1 "rank 2 has not arrived: no heartbeat" "$tmp/out")
    if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
      fail "SIGSTOP rank 2: status $status, expected the watchdog to end the job (not 0, not 124)"
    elif [ "$secs" -gt $((timeout_s + 30)) ]; then
      fail "SIGSTOP rank 2: the job ended $secs s after the stop (at most $timeout_s + 30 s)"
    elif [ -z "$line" ] || ! echo "$line" | grep -q "not complete after .* (-coll_timeout 5)"; then
      fail "SIGSTOP rank 2: no watchdog message naming rank 2 as not arrived"
    elif ! grep -q "flight recorder (collective timeout)" "$tmp/out"; then
      fail "SIGSTOP rank 2: the ring was not dumped"
    else
      echo "ok: SIGSTOP rank 2 -> status $status after $secs s: $(echo "$line" | cut -c1-300)"
    fi
  fi
fi
cleanup_job

# 2b. the warning before the timeout, and waiting that costs no core
# shellcheck disable=SC2086
timeout 120 "$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" -model tiny -steps 2 -coll_warn 8 -coll_timeout 8 \
  >"$tmp/out" 2>&1
status=$?
if [ "$status" -ne 2 ] || ! grep -q "option -coll_warn 8 is not below -coll_timeout 8" "$tmp/out"; then
  fail "-coll_warn 8 -coll_timeout 8: status $status, expected 2 and a message naming both"
else
  echo "ok: -coll_warn 8 -coll_timeout 8 -> status 2"
fi
NP=2 start -steps 100000 -coll_warn 2 -coll_timeout 8
if ! wait_step 5; then
  fail "-coll_warn: the run did not reach step 5"
else
  victim=$(rank_pid 1)
  waiter=$(rank_pid 0)
  if [ -z "$victim" ] || [ -z "$waiter" ]; then
    fail "-coll_warn: cannot find the pids of ranks 0 and 1"
  else
    pids=$(descendants "$launcher")
    kill -STOP "$victim"
    t0=$(date +%s)
    # from 3 s on, when every wait has gone on for more than a second
    sleep 3
    cpu() { awk '{print $14 + $15}' "/proc/$waiter/stat" 2>/dev/null; }
    c1=$(cpu) w1=$(date +%s.%N)
    sleep 3
    c2=$(cpu) w2=$(date +%s.%N)
    wait "$launcher"
    status=$?
    launcher=""
    secs=$(($(date +%s) - t0))
    share=$(python3 -c "import os, sys; c1, c2, w1, w2 = sys.argv[1:]; \
print('%.3f' % ((float(c2) - float(c1)) / os.sysconf('SC_CLK_TCK') / (float(w2) - float(w1))))" \
      "${c1:-0}" "${c2:-0}" "$w1" "$w2")
    warn='warning: rank 0: collective [a-z-]* #[0-9]* on the .* comm (2 ranks; unit -\{0,1\}[0-9]*, step [0-9]*, .*) still running after [0-9.]* s (-coll_warn 2); rank 1 has not arrived: no heartbeat'
    wline=$(grep -n -m1 "$warn" "$tmp/out" | cut -d: -f1)
    eline=$(grep -n -m1 "not complete after .* (-coll_timeout 8); rank 1 has not arrived" "$tmp/out" | cut -d: -f1)
    if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
      fail "-coll_warn: status $status, expected the watchdog to end the job (not 0, not 124)"
    elif [ "$secs" -gt $((8 + 30)) ]; then
      fail "-coll_warn: the job ended $secs s after the stop (at most 8 + 30 s)"
    elif [ -z "$wline" ]; then
      fail "-coll_warn: no warning naming the collective, its unit and step, and rank 1"
    elif [ -z "$eline" ] || [ "$wline" -gt "$eline" ]; then
      fail "-coll_warn: the warning (line ${wline}) does not come before the timeout (line ${eline:-none})"
    elif [ -z "$c1" ] || [ -z "$c2" ] || ! python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 0.30)" "$share"; then
      fail "-coll_warn: rank 0 used ${share} of a core while it waited (at most 0.30)"
    else
      echo "ok: rank 1 stopped -> warned, then status $status after $secs s; rank 0 used $share of a core waiting: $(grep -m1 "$warn" "$tmp/out" | cut -c1-300)"
    fi
  fi
fi
cleanup_job

# 3. rank 2 skips the all-gather of unit 1 in step 2.  On the gathers'
# communicator step 1 issues #1..#5 (forward 0, 1, 2; backward 2, 1) and
# step 2 starts with the root's #6, so the skipped one is #7: from there
# rank 2's call #n is the others' #n+1 (unit 2's gather,
# the same size, so MPI matches them and the ranks run on until the others'
# last gather of the step finds no partner).
export FSDP_FAULT=skip:rank=2:step=2:kind=all-gather:unit=1
start -steps 6 -coll_timeout $timeout_s
unset FSDP_FAULT
wait "$launcher"
status=$?
launcher=""
if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
  fail "skip: status $status, expected the watchdog to end the job"
elif ! grep -q "ranks disagree first at #7 on the 'sharding (gathers)' comm: .*rank 2 issued #7 all-gather (unit 2, step 2" "$tmp/out"; then
  fail "skip: no message naming #7 and rank 2's different call (all-gather of unit 2)"
elif ! grep -q "has not arrived" "$tmp/out"; then
  fail "skip: no rank named as not arrived"
else
  echo "ok: skip -> status $status: $(grep -m1 -o "ranks disagree first.*" "$tmp/out" | cut -c1-240)"
fi

# 4. SIGUSR2 on a healthy run
steps=400
# shellcheck disable=SC2086
timeout 240 "$MPIEXEC" $PREFLAGS -n 4 "$TRAIN" -model tiny -log_every 1 -steps $steps \
  -summary json >"$tmp/ref" 2>&1
ref_status=$?
# stderr apart: the rings (tens of KiB) must not land inside the JSON line
ERR="$tmp/err" start -steps $steps -summary json -metrics "$tmp/run.h5"
if ! wait_step 20; then
  fail "SIGUSR2: the run did not reach step 20"
else
  p1=$(rank_pid 1)
  pids=$(descendants "$launcher")
  [ -n "$p1" ] && kill -USR2 "$p1"
  wait "$launcher"
  status=$?
  launcher=""
  ref_losses=$(tail -1 "$tmp/ref" | grep -o '"losses": \[[^]]*\]')
  losses=$(tail -1 "$tmp/out" | grep -o '"losses": \[[^]]*\]')
  dumps=$(grep -c "flight recorder (SIGUSR2)" "$tmp/err")
  files=$(ls "$tmp"/run.h5.flight-rank*.txt 2>/dev/null | wc -l)
  if [ -z "$p1" ]; then
    fail "SIGUSR2: cannot find the pid of rank 1"
  elif [ "$status" -ne 0 ] || [ "$ref_status" -ne 0 ]; then
    fail "SIGUSR2: status $status (reference $ref_status), expected 0"
  elif ! grep -q "^step $steps/$steps " "$tmp/out"; then
    fail "SIGUSR2: the run did not finish its $steps steps"
  elif [ "$dumps" -ne 4 ] || [ "$files" -ne 4 ]; then
    fail "SIGUSR2: $dumps rings on stderr and $files dump files, expected 4 of each"
  elif ! grep -q "flight #[0-9]* comm 'sharding (gathers)' all-gather unit [0-9]* step [0-9]* .* done" "$tmp"/run.h5.flight-rank0.txt; then
    fail "SIGUSR2: rank 0's dump file has no completed all-gather"
  elif [ -z "$losses" ] || [ "$losses" != "$ref_losses" ]; then
    fail "SIGUSR2: the losses differ from a run without the signal"
  else
    echo "ok: SIGUSR2 to rank 1 -> 4 rings dumped ($files files), $steps steps, losses equal"
  fi
fi

[ "$fails" -eq 0 ] || exit 1
echo "all flight recorder checks passed"
