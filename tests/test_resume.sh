#!/bin/sh
# test_resume.sh: a checkpoint written at (W=4, F=4) after 5 of 10 steps
# resumes at (W=2, F=1) and at (W=4, F=2, 2 ranks per node) with the same
# losses as the uninterrupted run; -resume auto picks the newest complete
# checkpoint; a resumed run appends to its run file, replacing the rows of
# the steps it does again (one row per step); a failed resume leaves
# every file as it was.
#   usage: test_resume.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
tmp=$(mktemp -d /tmp/fsdp_test_resume.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
run() { # run NP OUT options...
  np=$1 out=$2
  shift 2
  # shellcheck disable=SC2086
  timeout 300 "$MPIEXEC" $PREFLAGS -n "$np" "$TRAIN" "$@" >"$out" 2>"$out.err"
}
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
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

echo "test_resume: $fails failed"
[ "$fails" -eq 0 ]
