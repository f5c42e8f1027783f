#!/bin/sh
# test_cli.sh: fsdp-train as users run it -- bad input fails on every rank
# with a message naming the option or file (options files: FILE:LINE; a
# binary file is refused), exit status 2, no hang, and no file of the
# user's touched (outputs that collide, or a -checkpoint_dir that is no
# usable directory, are refused at start-up); -help lists the options;
# -summary json ends stdout with
# one JSON object holding the documented fields.  FSDP_OPTIONS is shared by
# fsdp-train, fsdp-plan and fsdp-ckpt (its siblings in FSDP_TRAIN's
# directory): each runs with every other one's options there, while an
# unknown option on its command line stays an error.
#   usage: test_cli.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
BIN=$(dirname "$TRAIN")
tmp=$(mktemp -d /tmp/fsdp_test_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
checks=0

# verdict WHAT STATUS PATTERN: judge the run just made (exit status $got,
# output in $tmp/stdout and $tmp/stderr): status and that the output matches
verdict() {
  what=$1 want=$2 pattern=$3
  checks=$((checks + 1))
  cat "$tmp/stdout" "$tmp/stderr" >"$tmp/out"
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: exit status $got, expected $want"
    sed 's/^/    /' "$tmp/out" | tail -5
    fails=$((fails + 1))
  elif ! grep -q -- "$pattern" "$tmp/out"; then
    echo "FAIL: $what: output lacks '$pattern'"
    sed 's/^/    /' "$tmp/out" | tail -5
    fails=$((fails + 1))
  else
    echo "ok: $what -> $got: $(grep -m1 -- "$pattern" "$tmp/out")"
  fi
}

# expect NP STATUS PATTERN [options...]: fsdp-train on NP ranks
expect() {
  np=$1 want=$2 pattern=$3
  shift 3
  # shellcheck disable=SC2086
  timeout 120 "$MPIEXEC" $PREFLAGS -n "$np" "$TRAIN" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  got=$?
  verdict "fsdp-train $* (np $np)" "$want" "$pattern"
}

# expect_tool PROGRAM STATUS PATTERN [args...]: fsdp-plan or fsdp-ckpt, one
# process as users run them
expect_tool() {
  prog=$1 want=$2 pattern=$3
  shift 3
  timeout 120 "$BIN/$prog" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  got=$?
  verdict "${FSDP_OPTIONS:+FSDP_OPTIONS='$FSDP_OPTIONS' }$prog $*" "$want" "$pattern"
}

tiny="-model tiny -steps 2 -log_every 0"
# options
expect 2 2 "unknown option -stpes" $tiny -stpes 10
expect 2 2 "option -steps: 'ten'" $tiny -steps ten
expect 2 2 "option -steps" -model tiny -steps -3
expect 2 2 "gpt2-medium" -model foo
expect 2 2 "nonexistent.opts" -options_file "$tmp/nonexistent.opts"
expect 2 2 "reshard_after_forward" $tiny -reshard_after_forward maybe
# options files: errors name FILE:LINE; binary files are refused, not truncated
printf '# lr below\n-steps 2\n-lr\n' >"$tmp/nolr.opts"
expect 2 2 "nolr.opts:3: option -lr: missing value" -model tiny -options_file "$tmp/nolr.opts"
printf -- '-model tiny\n-stpes 2\n' >"$tmp/typo.opts"
expect 2 2 "typo.opts:2: unknown option -stpes (did you mean -steps?)" -options_file "$tmp/typo.opts"
printf -- '-model tiny\n-steps 2\000garbage\n' >"$tmp/nul.opts"
expect 2 2 "nul.opts:2: NUL byte at column 9" -options_file "$tmp/nul.opts"
printf '\177ELF\002\001\001\000' >"$tmp/binary.opts"
expect 2 2 "binary.opts:1: byte 0x7f at column 1 is not text" -options_file "$tmp/binary.opts"
# topology and model
expect 4 2 "sharding_factor 3" $tiny -sharding_factor 3
expect 4 2 "ranks_per_node 3" $tiny -ranks_per_node 3
expect 2 2 "not divisible by -n_head" -model custom -n_embd 30 -n_head 4 -steps 2
expect 2 2 "cuda" $tiny -device cuda
# values that only make sense together (one check, FsdpOptimOptionsFromDb and
# FsdpRuntimeCheckWrap, for every program that reads them): the cosine
# schedule decays from -lr to -lr_min; -wrap at most the model's blocks;
# the stages (-n_layer / -wrap rounded up, plus 2) within the runtime's 4096
expect 2 2 "option -lr_min 5 is above -lr 0.001" $tiny -lr_min 5 -lr 1e-3
expect 2 2 "option -lr_min: -0.5 is out of range (expected a real number in \[0," $tiny -lr_min -0.5
expect 2 2 "option -wrap 100: the model has 2 transformer blocks (-n_layer 2); -wrap must be in \[1, 2\]" \
  $tiny -wrap 100
expect 2 2 "option -n_layer 5000 with -wrap 1 makes 5002 stages.*limit of 4096 stages; use -n_layer at most 4094, or -wrap at least 2" \
  $tiny -n_layer 5000
expect_tool fsdp-plan 2 "limit of 4096 stages; use -n_layer at most 8188, or -wrap at least 25" \
  -model tiny -n_layer 100000 -wrap 2
expect_tool fsdp-plan 2 "option -lr_min 0.5 is above -lr 0.1" -model tiny -lr 0.1 -lr_min 0.5
expect_tool fsdp-probe 2 "option -wrap 3: the model has 2 transformer blocks" -model tiny -wrap 3

# data files (written with python3: magic, version, count, then uint16 tokens)
mk() { # mk FILE MAGIC VERSION COUNT NTOKENS MAXTOKEN
  python3 - "$@" <<'PY'
import struct, sys
path, magic, version, count, ntok, maxtok = sys.argv[1], *map(int, sys.argv[2:])
hdr = [0] * 256
hdr[0], hdr[1], hdr[2] = magic, version, count
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % ntok, *[(i * 7) % (maxtok + 1) for i in range(ntok)]))
PY
}
mk "$tmp/good.bin" 20240520 1 4000 4000 63
mk "$tmp/magic.bin" 20240521 1 4000 4000 63
mk "$tmp/version.bin" 20240520 2 4000 4000 63
mk "$tmp/trunc.bin" 20240520 1 5000 4000 63
mk "$tmp/vocab.bin" 20240520 1 4000 4000 100
mk "$tmp/short.bin" 20240520 1 40 40 63
# pristine copies: after every run below, each input must still equal its copy
mkdir "$tmp/orig"
for f in good magic version trunc vocab short; do cp "$tmp/$f.bin" "$tmp/orig/$f.bin"; done
expect 2 2 "missing.bin" $tiny -data "$tmp/missing.bin"
expect 2 2 "magic" $tiny -data "$tmp/magic.bin"
expect 2 2 "version" $tiny -data "$tmp/version.bin"
expect 2 2 "5000 tokens" $tiny -data "$tmp/trunc.bin"
expect 2 2 "vocab_size" $tiny -data "$tmp/vocab.bin"
expect 2 2 "short.bin" $tiny -data "$tmp/short.bin"

# inputs_untouched: every token file equals its pristine copy, and the
# missing one was not created
inputs_untouched() {
  for f in good magic version trunc vocab short; do
    checks=$((checks + 1))
    if ! cmp -s "$tmp/orig/$f.bin" "$tmp/$f.bin"; then
      echo "FAIL: $1 modified the input file $f.bin"; fails=$((fails + 1))
    fi
  done
  checks=$((checks + 1))
  if [ -e "$tmp/missing.bin" ]; then echo "FAIL: $1 created missing.bin"; fails=$((fails + 1)); fi
}
inputs_untouched "a refused -data run"

# outputs ([Note: one job's files], lib/io/outputs.h): refused at start-up
# (-steps 2 never reaches a save at -checkpoint_every 1000), the option,
# the path and the errno text named, no file of the user's touched
printf 'keep me\n' >"$tmp/old.json" && cp "$tmp/old.json" "$tmp/orig/old.json"
expect 2 2 "option -trace $tmp/old.json: the file exists" $tiny -trace "$tmp/old.json"
mkdir -p "$tmp/outs/sub" && ln -s "$tmp/outs/sub" "$tmp/outs/link"
expect 2 2 "are one file ($tmp/outs/run.h5)" $tiny -metrics "$tmp/outs/run.h5" -trace "$tmp/outs/sub/../run.h5"
expect 2 2 "are one file ($tmp/outs/sub/run.h5)" $tiny -metrics "$tmp/outs/sub/run.h5" -trace "$tmp/outs/link/run.h5"
expect 2 2 "option -metrics $tmp/good.bin is the input of -data" $tiny -data "$tmp/good.bin" -metrics "$tmp/good.bin"
expect 2 2 "ckpt_00000002.h5 in -checkpoint_dir $tmp/outs/ck is a name the checkpoints take" \
  $tiny -checkpoint_dir "$tmp/outs/ck" -checkpoint_every 2 -metrics "$tmp/outs/ck/ckpt_00000002.h5"
expect 2 2 "option -trace $tmp/nodir/t.json: cannot create a file in $tmp/nodir: No such file or directory" \
  $tiny -trace "$tmp/nodir/t.json"
expect 2 2 "cannot create run file nodir/x/run.h5: No such file or directory" $tiny -metrics nodir/x/run.h5
expect 2 2 "option -checkpoint_dir $tmp/old.json: Not a directory" $tiny -checkpoint_dir "$tmp/old.json" -checkpoint_every 1000
expect 2 2 "option -checkpoint_dir /proc/fsdp_test_ck: /proc/fsdp_test_ck is on procfs" $tiny \
  -checkpoint_dir /proc/fsdp_test_ck -checkpoint_every 1000
expect 2 2 "is on sysfs" $tiny -checkpoint_dir /sys/kernel -checkpoint_every 1000
checks=$((checks + 1))
if ! cmp -s "$tmp/orig/old.json" "$tmp/old.json" || [ -n "$(ls -A "$tmp/outs/sub")" ] || [ -e "$tmp/outs/run.h5" ] \
   || [ -e "$tmp/outs/ck" ] || [ -e "$tmp/nodir" ]; then
  echo "FAIL: refused outputs changed files: $(ls -lAR "$tmp/outs" "$tmp/old.json")"; fails=$((fails + 1))
fi
inputs_untouched "a refused -metrics over -data"
# FSDP_OPTIONS with control bytes: named in hex, never echoed raw
export FSDP_OPTIONS
FSDP_OPTIONS="$(printf -- '-stpes\033[2J 3')"
expect 1 2 "FSDP_OPTIONS: byte 0x1b at column 7 is not text" $tiny
unset FSDP_OPTIONS
checks=$((checks + 1))
if grep -q "$(printf '\033')" "$tmp/out"; then echo "FAIL: FSDP_OPTIONS' escape byte reached the terminal"; fails=$((fails + 1)); fi

# -help lists every component's options with defaults
expect 1 0 "-sharding_factor" -help
for opt in -reshard_after_forward -limit_all_gathers -prefetch -wrap -batch_size -lr -grad_clip \
           -warmup -data -summary -ranks_per_node -topology_view -n_layer -options_file; do
  checks=$((checks + 1))
  grep -q -- "$opt" "$tmp/out" || { echo "FAIL: -help lacks $opt"; fails=$((fails + 1)); }
done

# a good run: the JSON summary is the last line of stdout and has the contract's fields
expect 4 0 "final_loss" -model tiny -steps 3 -log_every 1 -sharding_factor 2 -ranks_per_node 2 -summary json -data "$tmp/good.bin"
inputs_untouched "a run that read good.bin"
checks=$((checks + 1))
python3 - "$tmp/stdout" <<'PY' || fails=$((fails + 1))
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
s = json.loads(lines[-1])
need = {"world_size": 4, "sharding_factor": 2, "replica_size": 2, "ranks_per_node": 2, "steps": 3}
for k, v in need.items():
    assert s[k] == v, (k, s[k], v)
for k in ["n_layer", "n_embd", "n_head", "vocab_size", "seq_len", "param_count"]:
    assert k in s["model"], k
assert len(s["losses"]) == 3 and s["final_loss"] == s["losses"][-1]
assert all(set(u) >= {"name", "numel", "padded_numel"} for u in s["units"])
assert sum(u["numel"] for u in s["units"]) == s["model"]["param_count"]
# The values, from the tiny preset written out here (L = 2 blocks, C = 32,
# V = 64, T = 16) and the formulas of [Note: gather memory] (fsdp.h) and
# [Note: byte accounting] (coll.h), docs/design.md §4-5, for W = 4, F = 2,
# R = 2, fp32 (K = 4), RAF,
# prefetch backward, L = 2: units padded to a multiple of F * 32 elements.
F, R, K, C, V, T, nl = 2, 2, 4, 32, 64, 16, 2
assert (s["model"]["n_layer"], s["model"]["n_embd"], s["model"]["vocab_size"], s["model"]["seq_len"]) == (nl, C, V, T)
pad = lambda n: -(-n // (F * 32)) * (F * 32)
root, block = V * C + T * C + 2 * C, 12 * C * C + 13 * C  # wte wpe ln_f; attn, mlp, 2 norms
assert [(u["numel"], u["padded_numel"]) for u in s["units"]] == \
    [(root, pad(root))] + [(block, pad(block))] * nl, s["units"]
assert s["model"]["param_count"] == root + nl * block
Pr, Pb = pad(root), pad(block)
P = [Pr] + [Pb] * nl
m = s["memory"]
want = {"param_shard_bytes": K * sum(P) // F, "grad_shard_bytes": K * sum(P) // F,
        "optim_state_bytes": 2 * K * sum(P) // F,            # AdamW m and v
        "gather_buffer_bytes": K * (Pr + 2 * Pb),            # root + 1 + L blocks, at most both
        "peak_unsharded_param_bytes": K * (Pr + 2 * Pb),     # the ring is used to its last slot
        "peak_unsharded_grad_bytes": K * (Pr + Pb),          # root + the block in backward
        "grad_buffer_bytes": K * (Pr + 2 * Pb),              # root + 2 gradient slots
        "compute_buffer_bytes": 0}                           # fp32 computes in the gathered buffer
bad = {k: (m[k], v) for k, v in want.items() if m[k] != v}
assert not bad, ("memory (measured, expected)", bad)
# every buffer above lives in this process's memory on the CPU
assert sum(want.values()) < m["peak_rss_bytes"] < 1 << 32, m["peak_rss_bytes"]
c = s["comm_per_step"]
gathers = [1] + [2] * nl  # root once; RAF gathers a block in forward and again in backward
want = {"all_gather_bytes": sum(g * (F - 1) * p * K // F for g, p in zip(gathers, P)),
        "reduce_scatter_bytes": sum((F - 1) * p * K // F for p in P),
        "all_reduce_bytes": sum(2 * (R - 1) * (p // F) * K // R for p in P),
        "all_gather_calls": sum(gathers), "reduce_scatter_calls": len(P), "all_reduce_calls": len(P),
        "scalar_calls": 2}  # the gradient norm and the loss
# hybrid F=2 over 2 emulated nodes of 2: gathers and reduce-scatters stay
# inside nodes, the replica all-reduce crosses
want["intra_node_bytes"] = want["all_gather_bytes"] + want["reduce_scatter_bytes"]
want["inter_node_bytes"] = want["all_reduce_bytes"]
bad = {k: (c[k], v) for k, v in want.items() if c[k] != v}
assert not bad, ("comm_per_step (measured, expected)", bad)
# backward starts at the head (the root, unsharded): both blocks go ahead (L = 2)
assert s["comm_time_per_step"]["max_gathers_in_flight"] == 2
print("ok: JSON summary has the documented fields and the values of the formulas")
PY

# checkpoints out of range or not finite ([Note: checkpoint attributes],
# [Note: finite checkpoints] in lib/io/ckpt.h): refused on load with the
# attribute or the dataset and index named, exit 2, the file untouched
if /usr/bin/python3 -c 'import h5py' >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  timeout 120 "$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" $tiny -checkpoint_dir "$tmp/ckb" -checkpoint_every 2 \
    >"$tmp/ckb.out" 2>&1 || { echo "FAIL: no checkpoint for the bad-checkpoint cases"; fails=$((fails + 1)); }
  for kind in step:-7 data_position:-100 data_position:4611686018427387904 optim/step_count:-1 \
              world_size:0 sharding_factor:3 model/wpe:nan optim/exp_avg_sq/wpe:inf; do
    name=$(echo "$kind" | tr '/:' '__')
    /usr/bin/python3 - "$tmp/ckb/ckpt_00000002.h5" "$tmp/bad_$name.h5" "$kind" <<'PY'
import shutil, sys, h5py, numpy as np
src, dst, kind = sys.argv[1:4]
shutil.copyfile(src, dst)
where, value = kind.rsplit(":", 1)
with h5py.File(dst, "r+") as f:
    if value in ("nan", "inf"):
        d = f[where]; a = d[()]; a[1, 5] = float(value); d[...] = a
    elif "/" in where:
        group, attr = where.rsplit("/", 1); f[group].attrs[attr] = np.int64(value)
    else:
        f.attrs[where] = np.int64(value)
PY
    md5sum "$tmp/bad_$name.h5" >"$tmp/bad_$name.md5"
  done
  expect 2 2 "bad_step_-7.h5 has step -7; expected 0 to" -model tiny -steps 4 -resume "$tmp/bad_step_-7.h5"
  expect 2 2 "has data_position -100 at step 2" -model tiny -steps 4 -resume "$tmp/bad_data_position_-100.h5"
  expect 2 2 "has data_position 4611686018427387904 at step 2" -model tiny -steps 4 \
    -resume "$tmp/bad_data_position_4611686018427387904.h5"
  expect 2 2 "has /optim step_count -1 at step 2" -model tiny -steps 4 -resume "$tmp/bad_optim_step_count_-1.h5"
  expect 2 2 "records the topology world_size 0" -model tiny -steps 4 -resume "$tmp/bad_world_size_0.h5"
  expect 2 2 "world_size 2, sharding_factor 3" -model tiny -steps 4 -resume "$tmp/bad_sharding_factor_3.h5"
  expect 2 2 "bad_model_wpe_nan.h5: /model/wpe holds NaN at element 37 (index \[1, 5\])" -model tiny -steps 4 \
    -resume "$tmp/bad_model_wpe_nan.h5"
  expect 2 2 "/optim/exp_avg_sq/wpe holds +Inf at element 37 (index \[1, 5\])" -model tiny -steps 4 \
    -resume "$tmp/bad_optim_exp_avg_sq_wpe_inf.h5" -checkpoint_dir "$tmp/ckc" -checkpoint_every 1
  expect_tool fsdp-sample 2 "bad_model_wpe_nan.h5: /model/wpe holds NaN at element 37" \
    -resume "$tmp/bad_model_wpe_nan.h5" -max_new_tokens 2
  for f in "$tmp"/bad_*.md5; do
    checks=$((checks + 1))
    md5sum -c --status "$f" || { echo "FAIL: a refused resume modified ${f%.md5}.h5"; fails=$((fails + 1)); }
  done
  checks=$((checks + 1))
  [ -z "$(ls "$tmp/ckc"/ckpt_* 2>/dev/null)" ] || { echo "FAIL: a refused resume wrote $(ls "$tmp/ckc")"; fails=$((fails + 1)); }
else
  echo "skipped: the bad-checkpoint cases edit HDF5 files with h5py (apt-get install python3-h5py)"
fi

# FSDP_OPTIONS is shared: each program runs with every option that only the
# others list in their -help there (so also no option of one is a near miss
# of another's); on the command line such an option is unknown (exit 2).
options_of() { # the names a program's -help lists
  "$@" -help 2>/dev/null | sed -n 's/^  -\([a-z][a-z0-9_]*\) .*/\1/p' | sort -u
}
options_of "$TRAIN" >"$tmp/train.names"
options_of "$BIN/fsdp-plan" >"$tmp/plan.names"
options_of "$BIN/fsdp-ckpt" >"$tmp/ckpt.names"
options_of "$BIN/fsdp-probe" >"$tmp/probe.names"
options_of "$BIN/fsdp-sample" >"$tmp/sample.names"
foreign() { # "-name 1 ..." for the options of the others that $1 does not list
  sort -u "$tmp/train.names" "$tmp/plan.names" "$tmp/ckpt.names" "$tmp/probe.names" \
    "$tmp/sample.names" | comm -23 - "$tmp/$1.names" | sed 's/.*/-& 1/' | tr '\n' ' '
}
checks=$((checks + 1))
for p in train plan ckpt probe sample; do
  if ! grep -qx options_file "$tmp/$p.names" || [ -z "$(foreign $p)" ]; then
    echo "FAIL: -help of fsdp-$p gives no option list ($(wc -l <"$tmp/$p.names") names)"
    fails=$((fails + 1))
  fi
done
export FSDP_OPTIONS
FSDP_OPTIONS="$(foreign train)"
expect 2 0 "weights_only 1  (FSDP_OPTIONS)" $tiny -checkpoint_dir "$tmp/ck" -checkpoint_every 2 -options_left
FSDP_OPTIONS="$(foreign ckpt)"
expect_tool fsdp-ckpt 0 "n_layer" info "$tmp/ck/ckpt_00000002.h5"
FSDP_OPTIONS="$(foreign plan)"
expect_tool fsdp-plan 0 "all_gather" -model tiny -world_size 2 -steps 2 -summary json
FSDP_OPTIONS="$(foreign probe)"
expect_tool fsdp-probe 0 "profile written" -model tiny -probe_max_bytes 4096 -probe_reps 1 \
  -profile_out "$tmp/probe.h5"
FSDP_OPTIONS="$(foreign sample)"
expect_tool fsdp-sample 0 "" -resume "$tmp/ck/ckpt_00000002.h5" -max_new_tokens 2
FSDP_OPTIONS="-stpes 3"
expect 1 2 "FSDP_OPTIONS: unknown option -stpes (did you mean -steps?)" $tiny
unset FSDP_OPTIONS
expect_tool fsdp-ckpt 2 "unknown option -sharding_factor" info "$tmp/ck/ckpt_00000002.h5" -sharding_factor 2
expect_tool fsdp-plan 2 "unknown option -weights_only" -model tiny -world_size 2 -weights_only
expect 1 2 "unknown option -world_size" $tiny -world_size 2
# fsdp-sample holds -wrap against the checkpoint's model (tiny: 2 blocks)
expect_tool fsdp-sample 2 "option -wrap 3: the model has 2 transformer blocks" \
  -resume "$tmp/ck/ckpt_00000002.h5" -wrap 3 -max_new_tokens 2

echo "test_cli: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
