#!/bin/sh
# test_validation.sh: -val_every / -val_batches / -val_data of fsdp-train
# (tiny model):
#   - the same validation loss at W = 1 (batch 8), W = 4 fully sharded and
#     W = 4 hybrid (F 2) (batch 2: the same global batch), after steps 2
#     and 4 (1e-6 relative: parameters differ only by reduction order);
#   - it is on the progress line of those steps, in the JSON summary as
#     val_losses [[step, loss], ...], in the run file as /metrics/val_step
#     and /metrics/val_loss (rows of their own), and in fsdp-report's table
#     and CSV; a resumed run appends its validations to the run file (also
#     to one written before validation existed);
#   - with -val_data the training file and -lr 0, the validation loss after
#     step 1 equals the training loss of step 1 (validation batch 0 is
#     training micro-batch 0; 1e-12 relative) at W = 1 and W = 2: the
#     forward-only pass and the mean over ranks are right;
#   - the built-in task's held-out stream is not the training stream (with
#     -lr 0 the two losses differ) but text of the same task (its loss falls
#     while the model trains);
#   - bad input: a missing -val_data file, -val_data without -val_every,
#     -val_batches 0, a token out of range: a message naming the option or
#     file, exit status 2.
#   usage: test_validation.sh MPIEXEC "PREFLAGS" BUILD_SRC_DIR FSDP_REPORT
# Skips (77) without h5py for python3 (the run file checks).
set -u
MPIEXEC=$1
PREFLAGS=$2
SRC=$3
REPORT=$4
TRAIN="$SRC/fsdp-train"

# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail
testlib_python "h5py, numpy" "needs h5py and numpy (apt-get install python3-h5py python3-numpy)"
testlib_tmpdir fsdp_test_val

# train NAME NP ARGS...: fsdp-train -model tiny on NP ranks, output in $tmp/NAME.out
train() {
  name=$1 np=$2
  shift 2
  # shellcheck disable=SC2086
  timeout 300 "$MPIEXEC" $PREFLAGS -n "$np" "$TRAIN" -model tiny -summary json "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
  if [ "$rc" -ne 0 ]; then fail "$name: exit status $rc"; tail -5 "$tmp/$name.err"; fi
}
# pycheck NAME SCRIPT ARGS...: a Python check; its last line is reported
pycheck() {
  checks=$((checks + 1))
  name=$1 script=$2
  shift 2
  if "$py" -c "$script" "$tmp" "$@" >"$tmp/py.out" 2>&1; then echo "ok: $name: $(tail -1 "$tmp/py.out")"
  else fail "$name: $(tail -3 "$tmp/py.out")"; fi
}
# bad PATTERN ARGS...: fsdp-train on 2 ranks exits 2 with PATTERN once on stderr
bad() {
  pattern=$1
  shift
  checks=$((checks + 1))
  # shellcheck disable=SC2086
  timeout 120 "$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" -model tiny -steps 2 "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  rc=$?
  if [ "$rc" -ne 2 ]; then fail "fsdp-train $*: exit status $rc, expected 2"; tail -3 "$tmp/bad.err"
  elif [ "$(grep -E -c -- "$pattern" "$tmp/bad.err")" -ne 1 ]; then fail "fsdp-train $*: stderr lacks /$pattern/ once"; tail -3 "$tmp/bad.err"
  else echo "ok: fsdp-train $* -> 2: $(grep -E -m1 -- "$pattern" "$tmp/bad.err")"; fi
}

# a JSON summary's field: last line of NAME.out
JSON='import json, sys
def summary(name):
    return json.loads(open("%s/%s.out" % (sys.argv[1], name)).read().strip().splitlines()[-1])'

# ---- the same validation loss at any W and F -----------------------------------
common="-steps 4 -val_every 2 -val_batches 2 -log_every 1 -lr 3e-3"
train w1 1 -batch_size 8 $common -metrics "$tmp/w1.h5"
train w4 4 -batch_size 2 $common -metrics "$tmp/w4.h5"
train w4h 4 -batch_size 2 -sharding_factor 2 $common
pycheck "val loss at W 1, 4 (F 4), 4 (F 2)" "$JSON
a, b, c = summary('w1'), summary('w4'), summary('w4h')
assert [s for s, _ in a['val_losses']] == [2, 4], a['val_losses']
for x in (b, c):
    assert [s for s, _ in x['val_losses']] == [2, 4], x['val_losses']
    for (_, u), (_, v) in zip(a['val_losses'], x['val_losses']):
        assert abs(u - v) <= 1e-6 * abs(u), (u, v)
assert a['val_losses'][1][1] < a['val_losses'][0][1] + 0.5
print('val_losses %s; W 4: %s; hybrid: %s' % (a['val_losses'], b['val_losses'], c['val_losses']))"
checks=$((checks + 1))
if [ "$(grep -c '^step [24]/4 | loss [0-9.]* | val [0-9.]* |' "$tmp/w4.out")" -eq 2 ] &&
   [ "$(grep -c '| val ' "$tmp/w4.out")" -eq 2 ]; then
  echo "ok: progress lines: $(grep -m1 '| val ' "$tmp/w4.out")"
else fail "progress lines with val: $(grep '^step' "$tmp/w4.out")"; fi

# ---- run file and fsdp-report ---------------------------------------------------------
pycheck "run file /metrics/val_step, val_loss" "$JSON
import h5py
s = summary('w4')
with h5py.File(sys.argv[1] + '/w4.h5', 'r', swmr=True) as f:
    st, vl = f['metrics/val_step'][()], f['metrics/val_loss'][()]
    assert list(st) == [2, 4], st
    for (a, b), v in zip(s['val_losses'], vl):
        assert abs(b - v) <= 1e-12 * abs(b), (b, v)
    assert len(f['metrics/step']) == 4 and len(f['metrics/loss']) == 4
print('val_step %s val_loss %s' % (list(st), list(vl)))"
"$REPORT" "$tmp/w4.h5" >"$tmp/report" 2>&1
"$REPORT" --csv "$tmp/w4.h5" >"$tmp/csv" 2>&1
pycheck "fsdp-report shows the validation loss" "$JSON
import csv
s = summary('w4')
last = s['val_losses'][-1][1]
text = open(sys.argv[1] + '/report').read()
assert 'val loss (step)' in text and ('%.4f (4)' % last) in text, text
assert ('step 2 %.4f' % s['val_losses'][0][1]) in text, text
row = list(csv.DictReader(open(sys.argv[1] + '/csv')))[0]
assert abs(float(row['final_val_loss']) - last) <= 1e-12 * last and row['final_val_step'] == '4', row
print('table and CSV: %.4f after step 4' % last)"

# ---- a resumed run appends its validations to the run file ------------------------------
train r1 4 -batch_size 2 $common -steps 2 -metrics "$tmp/r.h5" -checkpoint_dir "$tmp/ck" -checkpoint_every 2
cp "$tmp/r.h5" "$tmp/old.h5"
"$py" -c 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:   # a run file written before validation existed
    del f["metrics/val_step"], f["metrics/val_loss"]' "$tmp/old.h5"
train r2 4 -batch_size 2 $common -metrics "$tmp/r.h5" -resume "$tmp/ck/ckpt_00000002.h5"
train r3 4 -batch_size 2 $common -metrics "$tmp/old.h5" -resume "$tmp/ck/ckpt_00000002.h5"
pycheck "resumed runs append validation rows" "$JSON
import h5py
want = summary('w4')['val_losses']
for name, steps in (('r.h5', [2, 4]), ('old.h5', [4])):
    with h5py.File(sys.argv[1] + '/' + name, 'r') as f:
        st, vl = list(f['metrics/val_step'][()]), list(f['metrics/val_loss'][()])
    assert st == steps, (name, st)
    for s, v in zip(st, vl):
        w = dict(want)[s]
        assert abs(v - w) <= 1e-6 * w, (name, s, v, w)
print('r.h5: val_step [2, 4]; a file without validation datasets gets them: [4]')"

# ---- -val_data: validation batch k is global batch k ---------------------------------
"$py" -c 'import struct, sys
n = 3000
toks = [(i * 7 + i // 5) % 64 for i in range(n)]
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) + struct.pack("<%dH" % n, *toks))
bad = toks[:]; bad[2000] = 64
open(sys.argv[2], "wb").write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) + struct.pack("<%dH" % n, *bad))' \
  "$tmp/tokens.bin" "$tmp/bad_tokens.bin"
fixed="-data $tmp/tokens.bin -val_data $tmp/tokens.bin -lr 0 -lr_min 0 -steps 1 -val_every 1 -val_batches 1"
train d1 1 -batch_size 4 $fixed
train d2 2 -batch_size 2 $fixed
pycheck "-val_data = -data, lr 0: val loss = training loss of step 1" "$JSON
for n in ('d1', 'd2'):
    s = summary(n)
    (st, v), = s['val_losses']
    assert st == 1 and abs(v - s['losses'][0]) <= 1e-12 * v, (n, s['val_losses'], s['losses'])
print('W 1: %r, W 2: %r' % (summary('d1')['val_losses'], summary('d2')['val_losses']))"

# ---- the built-in held-out stream ------------------------------------------------------
train h0 1 -batch_size 8 -lr 0 -lr_min 0 -steps 1 -val_every 1 -val_batches 1
train h60 2 -batch_size 4 -lr 3e-3 -steps 60 -val_every 30 -val_batches 4 -log_every 0
pycheck "built-in held-out stream: other windows, the same task" "$JSON
s = summary('h0')
(_, v), = s['val_losses']
assert abs(v - s['losses'][0]) > 1e-4, (v, s['losses'])
t = summary('h60')
v0 = s['val_losses'][0][1]
(_, v30), (_, v60) = t['val_losses']
# the held-out text is the task training learns: its loss falls with training
# (tests/test_data.c checks that it shares the successor table)
assert v60 < v30 < v0 - 0.3, (v0, v30, v60, t['final_loss'])
print('untrained: val %.4f vs train %.4f; after 60 steps: val %.4f, train %.4f' % (v, s['losses'][0], v60, t['final_loss']))"

# ---- bad input ---------------------------------------------------------------------------
bad "nothere.bin" -val_every 1 -val_data "$tmp/nothere.bin"
bad "-val_data .*-val_every" -val_data "$tmp/tokens.bin"
bad "-val_batches" -val_every 1 -val_batches 0
bad "bad_tokens.bin.*position 2000 has value 64" -val_every 1 -val_data "$tmp/bad_tokens.bin"

echo "$checks checks, $fails failures"
[ "$fails" -eq 0 ]
