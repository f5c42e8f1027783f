#!/bin/sh
# test_resume.sh: a checkpoint written at (W=4, F=4) after 5 of 10 steps
# resumes at (W=2, F=1) and at (W=4, F=2, 2 ranks per node) with the same
# losses as the uninterrupted run; -resume auto picks the newest complete
# checkpoint and skips (naming them) newer ones that fail verification; a
# resumed run appends to its run file, replacing the rows of the steps it
# does again (one row per step); a failed resume leaves every file as it
# was; a save of non-finite state is refused (exit 65) with the good
# checkpoint kept; divergence messages say whether the run or the
# checkpoint diverged; a changed -seed is warned about.
#   usage: test_resume.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, run NP OUT options...
RUN_TIMEOUT=300
testlib_tmpdir fsdp_test_resume
# the same global batch (8 sequences) at every W
common="-model tiny -steps 10 -lr 1e-2 -warmup 2 -seed 11 -summary json -log_every 1"

run 4 "$tmp/full" $common -batch_size 2 -checkpoint_dir "$tmp/ck" -checkpoint_every 5 \
  -metrics "$tmp/run.h5" -val_every 3 || { fail "the 10-step run failed"; cat "$tmp/full.err"; }
[ -f "$tmp/ck/ckpt_00000005.h5" ] && [ -f "$tmp/ck/ckpt_00000010.h5" ] || fail "checkpoints at steps 5 and 10 missing: $(ls "$tmp/ck")"
cp "$tmp/ck/ckpt_00000005.h5" "$tmp/five.h5"
sum_before=$(md5sum "$tmp/five.h5" | cut -d' ' -f1)

run 2 "$tmp/r2" $common -batch_size 4 -sharding_factor 1 -resume "$tmp/five.h5" \
  -metrics "$tmp/run.h5" -val_every 3 || { fail "resume at W=2 F=1 failed"; cat "$tmp/r2.err"; }
run 4 "$tmp/r4" $common -batch_size 2 -sharding_factor 2 -ranks_per_node 2 -resume "$tmp/five.h5" \
  || { fail "resume at W=4 F=2 G=2 failed"; cat "$tmp/r4.err"; }
mkdir -p "$tmp/auto" && cp "$tmp/five.h5" "$tmp/auto/ckpt_00000005.h5" && touch "$tmp/auto/ckpt_00000007.h5.tmp-1234"
run 1 "$tmp/r1" $common -batch_size 8 -checkpoint_dir "$tmp/auto" -resume auto \
  || { fail "-resume auto at W=1 failed"; cat "$tmp/r1.err"; }
grep -q "resumed from $tmp/auto/ckpt_00000005.h5 at step 5" "$tmp/r1" || fail "-resume auto did not pick ckpt_00000005.h5: $(grep resumed "$tmp/r1")"

python3 - "$tmp/full" "$tmp/r2" "$tmp/r4" "$tmp/r1" <<'PY' || fails=$((fails + 1))
import json, sys
def last_json(p):
    return json.loads([l for l in open(p) if l.startswith("{")][-1])
full = last_json(sys.argv[1])["losses"]
assert len(full) == 10
bad = 0
for path, name in zip(sys.argv[2:], ["W=2 F=1", "W=4 F=2 G=2", "W=1 (auto)"]):
    s = last_json(path)
    assert s["first_step"] == 5 and s["steps"] == 5, (name, s["first_step"], s["steps"])
    for i, l in enumerate(s["losses"]):
        ref = full[5 + i]
        rel = abs(l - ref) / ref
        if rel > 1e-4:
            print(f"FAIL: resumed {name} step {6 + i}: loss {l:.7f} vs uninterrupted {ref:.7f} (rel {rel:.1e})")
            bad += 1
    print(f"ok: resumed at {name}: steps 6-10 match the uninterrupted run: {[round(x, 6) for x in s['losses']]}")
sys.exit(1 if bad else 0)
PY

# the run file ([Note: run file after a resume], lib/io/metrics.h): one
# row per step, steps 1-5 of the first run (W=4), 6-10 of the run that
# resumed at step 5 (W=2) replacing the first run's; validations likewise
data() { # data DATASET: the values of a 1-D dataset of the run file, one line
  h5ls -d "$tmp/run.h5/$1" 2>/dev/null | sed -n '/Data:/,$p' | tail -n +2 | tr -d ' \n'
}
[ "$(data metrics/step)" = "1,2,3,4,5,6,7,8,9,10" ] || fail "run file steps: $(data metrics/step), expected 1,...,10 once each"
[ "$(data metrics/world_size)" = "4,4,4,4,4,2,2,2,2,2" ] || fail "run file world sizes: $(data metrics/world_size), expected 4 x 5 then 2 x 5"
[ "$(data metrics/val_step)" = "3,6,9,10" ] || fail "run file validation steps: $(data metrics/val_step), expected 3,6,9,10"
rows=$(h5ls "$tmp/run.h5/metrics/loss" 2>/dev/null | sed -n 's/.*{\([0-9]*\)\/.*/\1/p')
[ "$rows" = "10" ] || fail "run file has $rows loss rows, expected 10"
mem=$(h5ls "$tmp/run.h5/memory/rss" 2>/dev/null | sed -n 's/.*{\([0-9]*\)\/Inf, \([0-9]*\)\/Inf}.*/\1x\2/p')
[ "$mem" = "10x4" ] || fail "run file /memory/rss is $mem, expected 10 rows x 4 ranks"

# refused resumes leave files alone: mismatched model, corrupt file
run 2 "$tmp/bad1" -model small -steps 10 -resume "$tmp/five.h5" && fail "a tiny checkpoint loaded into the small model"
grep -q "five.h5" "$tmp/bad1.err" && grep -q "n_layer\|n_embd\|vocab_size\|seq_len" "$tmp/bad1.err" \
  || fail "mismatch message lacks the file or the field: $(cat "$tmp/bad1.err")"
head -c 20000 "$tmp/five.h5" >"$tmp/trunc.h5"
run 2 "$tmp/bad2" $common -batch_size 4 -resume "$tmp/trunc.h5" && fail "a truncated checkpoint loaded"
grep -q "trunc.h5" "$tmp/bad2.err" || fail "truncation message lacks the file name: $(cat "$tmp/bad2.err")"
[ "$(md5sum "$tmp/five.h5" | cut -d' ' -f1)" = "$sum_before" ] || fail "a resume modified the checkpoint it read"
run 2 "$tmp/bad3" $common -batch_size 4 -metrics "$tmp/run.h5" && fail "a fresh run overwrote an existing run file"
grep -q "run.h5" "$tmp/bad3.err" || fail "run-file refusal lacks the file name"
rows2=$(h5ls "$tmp/run.h5/metrics/loss" 2>/dev/null | sed -n 's/.*{\([0-9]*\)\/.*/\1/p')
[ "$rows2" = "10" ] || fail "the refused run changed the run file ($rows2 rows)"

# [Note: finite checkpoints] (lib/io/ckpt.h), edited with h5py
py=""
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import h5py, numpy' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -n "$py" ]; then
  edit() { # edit SRC DST KIND: a copy of checkpoint SRC with one change
    "$py" - "$@" <<'PY'
import shutil, sys, h5py, numpy as np
src, dst, kind = sys.argv[1:4]
shutil.copyfile(src, dst)
with h5py.File(dst, "r+") as f:
    if kind == "poisoned":  # a step-7 checkpoint with an Inf moment
        f.attrs["step"] = np.int64(7); f.attrs["data_position"] = np.int64(7)
        d = f["optim/exp_avg_sq/wpe"]; a = d[()]; a[2, 3] = np.inf; d[...] = a
    elif kind == "explodes":  # finite, but the next update overflows wpe
        d = f["optim/exp_avg/wpe"]; d[...] = np.full(d.shape, 3e38, np.float32)
        d = f["optim/exp_avg_sq/wpe"]; d[...] = np.zeros(d.shape, np.float32)
    elif kind == "overflows":  # finite, but the forward pass overflows
        d = f["model/ln_f.weight"]; d[...] = np.full(d.shape, 3e38, np.float32)
PY
  }
  # -resume auto skips, and names, a newer checkpoint that fails verification
  mkdir -p "$tmp/pois"
  cp "$tmp/five.h5" "$tmp/pois/ckpt_00000005.h5"
  edit "$tmp/five.h5" "$tmp/pois/ckpt_00000007.h5" poisoned
  run 2 "$tmp/p1" $common -steps 6 -batch_size 4 -checkpoint_dir "$tmp/pois" -resume auto \
    || { fail "-resume auto next to a poisoned checkpoint failed"; cat "$tmp/p1.err"; }
  grep -q "resumed from $tmp/pois/ckpt_00000005.h5 at step 5" "$tmp/p1" \
    || fail "-resume auto did not skip the poisoned ckpt_00000007.h5: $(grep resumed "$tmp/p1")"
  grep -q "skipping $tmp/pois/ckpt_00000007.h5 .*/optim/exp_avg_sq/wpe holds +Inf at element 67 (index \[2, 3\])" \
    "$tmp/p1.err" || fail "-resume auto did not name the poisoned file and value: $(cat "$tmp/p1.err")"
  [ -f "$tmp/pois/ckpt_00000007.h5" ] || fail "-resume auto deleted the poisoned file"
  # a save of non-finite state is refused: exit 65, the good checkpoint kept
  # (also with -checkpoint_keep 1), no temporary file left
  mkdir -p "$tmp/nf"
  edit "$tmp/five.h5" "$tmp/nf/ckpt_00000005.h5" explodes
  sum_nf=$(md5sum "$tmp/nf/ckpt_00000005.h5" | cut -d' ' -f1)
  run 2 "$tmp/n1" $common -steps 8 -batch_size 4 -checkpoint_dir "$tmp/nf" -resume auto \
    -checkpoint_every 1 -checkpoint_keep 1
  st=$?
  [ "$st" -eq 65 ] || fail "a save of non-finite state exited $st, expected 65: $(cat "$tmp/n1.err")"
  grep -q "checkpoint $tmp/nf/ckpt_00000006.h5 was not saved: the training state is not finite: on rank [01], /model/wpe holds [-+]Inf at element" \
    "$tmp/n1.err" || fail "the refusal does not name the file and the parameter: $(cat "$tmp/n1.err")"
  grep -q "the newest good checkpoint, $tmp/nf/ckpt_00000005.h5, is intact" "$tmp/n1.err" \
    || fail "the refusal does not name the good checkpoint kept: $(cat "$tmp/n1.err")"
  [ "$(ls -a "$tmp/nf" | grep -v '^\.')" = "ckpt_00000005.h5" ] \
    || fail "after the refused save the directory holds: $(ls -a "$tmp/nf")"
  [ "$(md5sum "$tmp/nf/ckpt_00000005.h5" | cut -d' ' -f1)" = "$sum_nf" ] || fail "the good checkpoint changed"
  # divergence without a save: the loss, one step later, says it diverged
  run 2 "$tmp/n2" $common -steps 8 -batch_size 4 -resume "$tmp/nf/ckpt_00000005.h5"
  st=$?
  [ "$st" -eq 65 ] || fail "a diverged run exited $st, expected 65"
  grep -q "loss became .* at step 7 after 1 good step: the training diverged; lower -lr" "$tmp/n2.err" \
    || fail "divergence message: $(cat "$tmp/n2.err")"
  # a finite checkpoint whose values overflow the first step is named; a
  # -seed other than the checkpoint's is warned about
  edit "$tmp/five.h5" "$tmp/over.h5" overflows
  run 2 "$tmp/n3" $common -steps 8 -batch_size 4 -resume "$tmp/over.h5" -seed 12
  st=$?
  [ "$st" -eq 65 ] || fail "an overflowing checkpoint exited $st, expected 65"
  grep -q "loss became .* at step 6, the first step after resuming from $tmp/over.h5" "$tmp/n3.err" \
    || fail "the divergence message does not blame the checkpoint: $(cat "$tmp/n3.err")"
  grep -q "checkpoint $tmp/over.h5 was written with -seed 11, this run uses -seed 12" "$tmp/n3.err" \
    || fail "no warning about the changed -seed: $(cat "$tmp/n3.err")"
  [ "$(grep -c "was written with -seed" "$tmp/n3.err")" = 1 ] || fail "the -seed warning is not printed once"
else
  echo "skipped: the non-finite cases edit checkpoints with h5py and numpy"
fi

echo "test_resume: $fails failed"
[ "$fails" -eq 0 ]
