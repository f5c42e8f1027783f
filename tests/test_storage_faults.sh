#!/bin/sh
# test_storage_faults.sh: a checkpoint save the file system refuses never
# hangs.  Every rank stops with one message (the checkpoint's path, the
# errno text) and a non-zero exit, or with -checkpoint_on_error continue
# warns once and trains on; no temporary file stays behind; the previous
# checkpoint verifies and -resume auto continues from it.  The run file
# stops cleanly on a full disk (exit status 2, one message with the errno
# text, no HDF5 stack) and keeps what it held, readable.
#   usage: test_storage_faults.sh MPIEXEC "PREFLAGS" SRCDIR MODE
#   MODE inject: a write failing with ENOSPC on one rank (FSDP_TEST_CKPT_FAULT,
#                [Note: storage fault injection] in lib/io/ckpt.c), W=2 and W=4
#   MODE tmpfs:  a real full disk: a 6 MB tmpfs (skips, exit 77, where
#                mount is not permitted)
set -u
MPIEXEC=$1
PREFLAGS=$2
SRC=$3
MODE=$4
TRAIN=$SRC/fsdp-train
CKPT=$SRC/fsdp-ckpt
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, run NP OUT options... (124: hung)
testlib_tmpdir fsdp_test_storage
mnt=
cleanup() { [ -n "$mnt" ] && umount "$mnt" 2>/dev/null; }
common="-model tiny -batch_size 2 -lr 1e-2 -warmup 2 -seed 5 -log_every 1 -summary json"

# no_leftovers DIR WHAT: no temporary (*.tmp-*, their headroom) file in DIR
no_leftovers() {
  left=$(ls "$1" | grep '\.tmp-' || true)
  [ -z "$left" ] || fail "$2: temporary files left in $1: $left"
}

# stopped OUT CKDIR STEP WHAT: exit status 2, one message naming the
# checkpoint and the errno text, nothing left over
stopped() {
  out=$1 dir=$2 step=$3 what=$4 rc=$5
  if [ "$rc" -eq 124 ]; then # the rest would hang too
    fail "$what: the job hung (killed after 120 s)"
    exit 1
  fi
  [ "$rc" -eq 2 ] || fail "$what: exit status $rc, expected 2"
  n=$(grep -c "was not saved" "$out.err")
  [ "$n" -eq 1 ] || fail "$what: $n messages about the failed save, expected 1: $(cat "$out.err")"
  grep "was not saved" "$out.err" | grep -q "$dir/ckpt_$step.h5" || fail "$what: message lacks the path $dir/ckpt_$step.h5: $(cat "$out.err")"
  grep "was not saved" "$out.err" | grep -q "No space left on device" || fail "$what: message lacks the errno text: $(cat "$out.err")"
  [ -f "$dir/ckpt_$step.h5" ] && fail "$what: ckpt_$step.h5 exists after its save failed"
  no_leftovers "$dir" "$what"
}

# resumes NP DIR FROM STEPS WHAT: the previous checkpoint verifies and
# -resume auto continues from it to the end
resumes() {
  np=$1 dir=$2 from=$3 steps=$4 what=$5
  "$CKPT" verify "$dir/ckpt_$from.h5" >"$tmp/verify.out" 2>&1 || fail "$what: fsdp-ckpt verify ckpt_$from.h5: $(cat "$tmp/verify.out")"
  run "$np" "$tmp/resume.out" $common -steps "$steps" -checkpoint_dir "$dir" -checkpoint_every 5 -resume auto \
    || fail "$what: -resume auto failed: $(cat "$tmp/resume.out.err")"
  grep -q "resumed from $dir/ckpt_$from.h5 at step $(echo "$from" | sed 's/^0*//')" "$tmp/resume.out" \
    || fail "$what: -resume auto did not take ckpt_$from.h5: $(grep resumed "$tmp/resume.out")"
  last=$(printf '%08d' "$steps")
  [ -f "$dir/ckpt_$last.h5" ] || fail "$what: the resumed run did not write ckpt_$last.h5"
}

# json_steps OUT: steps the summary of OUT reports
json_steps() {
  python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]["steps"])' "$1"
}

if [ "$MODE" = inject ]; then
  for np in 2 4; do
    bad=$((np - 1))
    # stop: the 3rd tensor write of the 2nd save fails on the last rank
    ck=$tmp/ck_stop$np
    FSDP_TEST_CKPT_FAULT=$bad:2:3 run "$np" "$tmp/stop$np" $common -steps 10 -checkpoint_dir "$ck" -checkpoint_every 5
    rc=$?
    stopped "$tmp/stop$np" "$ck" 00000010 "W=$np write fault" "$rc"
    grep "was not saved" "$tmp/stop$np.err" | grep -q "on rank $bad" || fail "W=$np: message does not name rank $bad"
    resumes "$np" "$ck" 00000005 10 "W=$np write fault"

    # continue: the 2nd save fails (in its close on W=2, a write on W=4);
    # the run ends, warned once, and the 3rd save succeeds
    ck=$tmp/ck_cont$np
    site=close
    [ "$np" -eq 4 ] && site=7
    FSDP_TEST_CKPT_FAULT=$bad:2:$site run "$np" "$tmp/cont$np" $common -steps 15 -checkpoint_dir "$ck" \
      -checkpoint_every 5 -checkpoint_on_error continue
    rc=$?
    [ "$rc" -eq 0 ] || fail "W=$np continue: exit status $rc: $(cat "$tmp/cont$np.err")"
    n=$(grep -c "warning.*was not saved" "$tmp/cont$np.err")
    [ "$n" -eq 1 ] || fail "W=$np continue: $n warnings, expected 1: $(cat "$tmp/cont$np.err")"
    grep "was not saved" "$tmp/cont$np.err" | grep -q "No space left on device" || fail "W=$np continue: warning lacks the errno text"
    [ "$(json_steps "$tmp/cont$np")" = 15 ] || fail "W=$np continue: the run did not reach step 15"
    [ -f "$ck/ckpt_00000010.h5" ] && fail "W=$np continue: ckpt_00000010.h5 exists"
    for s in 05 15; do
      "$CKPT" verify "$ck/ckpt_000000$s.h5" >/dev/null 2>&1 || fail "W=$np continue: ckpt_000000$s.h5 missing or does not verify"
    done
    no_leftovers "$ck" "W=$np continue"
  done
  # the very first save refused (rank 0's reservation): no checkpoint, no leftovers
  ck=$tmp/ck_first
  FSDP_TEST_CKPT_FAULT=0:1:reserve run 2 "$tmp/first" $common -steps 5 -checkpoint_dir "$ck" -checkpoint_every 5
  rc=$?
  stopped "$tmp/first" "$ck" 00000005 "first save refused" "$rc"
  grep -q "no earlier complete checkpoint" "$tmp/first.err" || fail "first save refused: message does not say there is no earlier checkpoint"
  echo "test_storage_faults inject: $fails failed"
  [ "$fails" -eq 0 ]
  exit
fi

# ---- tmpfs: a real full disk ---------------------------------------------
mnt=$tmp/mnt
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=6m tmpfs "$mnt" 2>"$tmp/mount.err"; then
  mnt=
  echo "skipped: cannot mount a 6 MB tmpfs (needs root or CAP_SYS_ADMIN): $(cat "$tmp/mount.err")"
  exit 77
fi
# fill KB: leave about KB kilobytes free on the tmpfs
fill() {
  rm -f "$mnt/filler"
  avail=$(($(df -k --output=avail "$mnt" | tail -1)))
  [ "$avail" -gt "$1" ] && dd if=/dev/zero of="$mnt/filler" bs=1k count=$((avail - $1)) 2>/dev/null
  return 0
}
for np in 2 4; do
  # room for the first save (about 0.54 MB at its peak, 0.37 MB after),
  # not for the second
  ck=$mnt/ck$np
  fill 720
  run "$np" "$tmp/full$np" $common -steps 10 -checkpoint_dir "$ck" -checkpoint_every 5
  rc=$?
  stopped "$tmp/full$np" "$ck" 00000010 "W=$np full tmpfs" "$rc"
  grep "was not saved" "$tmp/full$np.err" | grep -q "needs about [0-9]* bytes.* has [0-9]* bytes .* free" \
    || fail "W=$np full tmpfs: message lacks bytes needed vs free: $(cat "$tmp/full$np.err")"
  rm -f "$mnt/filler"
  resumes "$np" "$ck" 00000005 10 "W=$np full tmpfs"
  rm -rf "$ck"
done

# continue on a disk that stays full: both later saves warned, run ends
ck=$mnt/cont
fill 720
run 2 "$tmp/cont" $common -steps 15 -checkpoint_dir "$ck" -checkpoint_every 5 -checkpoint_on_error continue
rc=$?
[ "$rc" -eq 0 ] || fail "full tmpfs continue: exit status $rc: $(cat "$tmp/cont.err")"
n=$(grep -c "warning.*was not saved" "$tmp/cont.err")
[ "$n" -eq 2 ] || fail "full tmpfs continue: $n warnings, expected 1 for each of the 2 failed saves: $(cat "$tmp/cont.err")"
[ "$(json_steps "$tmp/cont")" = 15 ] || fail "full tmpfs continue: the run did not reach step 15"
"$CKPT" verify "$ck/ckpt_00000005.h5" >/dev/null 2>&1 || fail "full tmpfs continue: ckpt_00000005.h5 does not verify"
no_leftovers "$ck" "full tmpfs continue"
rm -rf "$ck"

# clean_stop OUT RC FILE WHAT: [Note: run file on a full disk] (metrics.h):
# exit status 2, one message naming FILE and the errno text, no HDF5 error
# stack, no crash
clean_stop() {
  [ "$2" -eq 2 ] || fail "$4: exit status $2, expected 2: $(cat "$1.err")"
  n=$(grep -c "error: .*$3.*No space left on device" "$1.err")
  [ "$n" -eq 1 ] || fail "$4: $n messages naming $3 and the errno text, expected 1: $(cat "$1.err")"
  grep -q "HDF5 error\|Segmentation\|signal" "$1.err" && fail "$4: raw HDF5 errors or a crash: $(cat "$1.err")"
  return 0
}

# rows fill the disk: the job stops before a write fails, the file closes
# cleanly (plain h5dump reads it) with the rows it had.  At 160 KB free a
# run without the reserved room ([Note: room to close the run file],
# lib/io/metrics.c) had an HDF5 write fail mid-row and crashed at exit.
fill 160
run 2 "$tmp/rows" $common -steps 100000 -log_every 1 -metrics "$mnt/rows.h5"
rc=$?
[ "$rc" -eq 124 ] && fail "rows: the job hung on a full disk"
clean_stop "$tmp/rows" "$rc" "$mnt/rows.h5" "rows filling the disk"
grep -q "writing row [0-9]* (step [0-9]*)" "$tmp/rows.err" || fail "rows: message lacks the row: $(cat "$tmp/rows.err")"
rm -f "$mnt/filler"
rows=$(h5dump -H "$mnt/rows.h5" 2>/dev/null | grep -A3 'DATASET "loss"' | sed -n 's/.*DATASPACE.*( \([0-9]*\) ).*/\1/p')
[ -n "$rows" ] && [ "$rows" -ge 10 ] || fail "rows: plain h5dump reads $rows loss rows, expected the rows before the disk filled"
rm -f "$mnt/rows.h5"

# the run file: a resumed run appending to it on a full disk stops with a
# message naming it; the file stays with every row it had
rm -f "$mnt/filler"
ck=$mnt/runck
run 2 "$tmp/rf" $common -steps 5 -checkpoint_dir "$ck" -checkpoint_every 5 -metrics "$mnt/run.h5" \
  || fail "run file: the first run failed: $(cat "$tmp/rf.err")"
fill 0
run 2 "$tmp/rf2" $common -steps 1000 -checkpoint_dir "$ck" -checkpoint_every 1000 -resume auto -metrics "$mnt/run.h5"
rc=$?
[ "$rc" -eq 124 ] && fail "run file: the job hung on a full disk"
clean_stop "$tmp/rf2" "$rc" "$mnt/run.h5" "run file"
[ -f "$mnt/run.h5" ] || fail "run file: $mnt/run.h5 is gone"
rm -f "$mnt/filler"
h5clear -s "$mnt/run.h5" >/dev/null 2>&1
rows=$(h5ls "$mnt/run.h5/metrics/loss" 2>/dev/null | sed -n 's/.*{\([0-9]*\)\/.*/\1/p')
[ -n "$rows" ] && [ "$rows" -ge 5 ] || fail "run file: $rows loss rows readable, expected the first run's 5 at least"
"$CKPT" verify "$ck/ckpt_00000005.h5" >/dev/null 2>&1 || fail "run file: the checkpoint resumed from does not verify"
# a fresh run on a full disk: refused with the file named, nothing else touched
fill 0
run 2 "$tmp/rf3" $common -steps 1000 -metrics "$mnt/new.h5"
rc=$?
[ "$rc" -eq 124 ] && fail "new run file: the job hung on a full disk"
clean_stop "$tmp/rf3" "$rc" "$mnt/new.h5" "new run file"
[ -e "$mnt/new.h5" ] && fail "new run file: the refused run left $mnt/new.h5"
echo "test_storage_faults tmpfs: $fails failed"
[ "$fails" -eq 0 ]
