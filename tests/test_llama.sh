#!/bin/sh
# test_llama.sh: fsdp-train trains the Llama family with the FSDP features
# GPT has, and the programs around it know the family.
# - llama-tiny (untied, GQA) at W=4 with checkpoints, a run file and a
#   trace; resumed at (W=2, F=1) and at (W=4, F=2 hybrid) from step 5, the
#   losses of steps 6-10 equal the uninterrupted run's (1e-4);
# - the FSDP knobs do not change the math at fp32: NRAF + wrap 2 +
#   prefetch both + limiter 1, and grad_accum 2 of half batches, give the
#   default run's losses (1e-4); -recompute 1 gives the same losses bit for
#   bit with fewer activation bytes; bf16 and fp16 (with the scaler) runs are
#   finite and learn; the tied variant learns;
# - the JSON summary names the family and every attribute;
# - fsdp-ckpt info/verify read a Llama checkpoint (Hugging Face names) and
#   refuse an impossible one; an llm.c LLaMA-3 (uint32) token file trains;
# - validation (-val_every) and fsdp-sample (greedy, W=1 = W=2) work on it;
# - Hugging Face Llama weights imported with fsdp-ckpt import-hf give
#   transformers' next-token argmax at every prefix (tied and untied);
# - usage errors name the option and exit 2.
#   usage: test_llama.sh MPIEXEC "PREFLAGS" BINDIR
set -u
MPIEXEC=$1
PREFLAGS=$2
BIN=$3
TRAIN=$BIN/fsdp-train
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, run NP OUT options...
RUN_TIMEOUT=300
testlib_tmpdir fsdp_test_llama
common="-model llama-tiny -steps 10 -lr 1e-2 -warmup 2 -seed 11 -summary json -log_every 0"

run 4 "$tmp/full" $common -batch_size 2 -checkpoint_dir "$tmp/ck" -checkpoint_every 5 \
  -metrics "$tmp/run.h5" -trace "$tmp/trace.json" -val_every 5 || { fail "the 10-step run failed"; cat "$tmp/full.err"; }
[ -f "$tmp/ck/ckpt_00000005.h5" ] || fail "no checkpoint at step 5: $(ls "$tmp/ck")"
[ -s "$tmp/trace.json" ] || fail "no trace written"
run 2 "$tmp/r2" $common -batch_size 4 -sharding_factor 1 -resume "$tmp/ck/ckpt_00000005.h5" \
  || { fail "resume at W=2 F=1 failed"; cat "$tmp/r2.err"; }
run 4 "$tmp/r4" $common -batch_size 2 -sharding_factor 2 -ranks_per_node 2 \
  -resume "$tmp/ck/ckpt_00000005.h5" || { fail "resume at W=4 F=2 failed"; cat "$tmp/r4.err"; }
run 4 "$tmp/knobs" $common -batch_size 2 -reshard_after_forward 0 -wrap 2 -prefetch both \
  -limit_all_gathers 1 || { fail "NRAF/wrap/prefetch run failed"; cat "$tmp/knobs.err"; }
run 4 "$tmp/recompute" $common -batch_size 2 -recompute 1 -wrap 2 -n_layer 3 \
  || { fail "recompute run failed"; cat "$tmp/recompute.err"; }
run 4 "$tmp/keep" $common -batch_size 2 -recompute 0 -wrap 2 -n_layer 3 \
  || { fail "3-layer run failed"; cat "$tmp/keep.err"; }
run 4 "$tmp/accum" $common -batch_size 1 -grad_accum 2 -sharding_factor 2 \
  || { fail "grad_accum run failed"; cat "$tmp/accum.err"; }
run 2 "$tmp/bf16" $common -batch_size 4 -param_dtype bf16 -reduce_dtype bf16 \
  || { fail "bf16 run failed"; cat "$tmp/bf16.err"; }
run 2 "$tmp/fp16" $common -batch_size 4 -param_dtype fp16 -reduce_dtype fp16 \
  || { fail "fp16 run failed"; cat "$tmp/fp16.err"; }
run 2 "$tmp/tied" $common -batch_size 4 -tie_embeddings 1 -n_kv_head 1 \
  || { fail "tied MQA run failed"; cat "$tmp/tied.err"; }

python3 - "$tmp" <<'PY' || fails=$((fails + 1))
import json, sys
d = sys.argv[1]
def last_json(n):
    return json.loads([l for l in open(f"{d}/{n}") if l.startswith("{")][-1])
bad = 0
full = last_json("full")
m = full["model"]
want = {"name": "llama-tiny", "family": "llama", "n_layer": 2, "n_embd": 32, "n_head": 4,
        "n_kv_head": 2, "ffn_hidden": 96, "vocab_size": 64, "seq_len": 16, "tie_embeddings": 0,
        "rope_theta": 500000.0, "norm_eps": 1e-5, "param_count": 28832}
if any(m.get(k) != v for k, v in want.items()):
    print(f"FAIL: summary model {m}, expected {want}"); bad += 1
val = full.get("val_losses")
if not val or [s for s, _ in val] != [5, 10] or not all(2.0 < v < 6.0 for _, v in val):
    print(f"FAIL: validation losses of the Llama run: {val}"); bad += 1
units = [u["name"] for u in full["units"]]
if units != ["root", "model.layers.0", "model.layers.1"]:
    print(f"FAIL: units {units}"); bad += 1
ref = full["losses"]
def same(name, losses, first=0):
    global bad
    worst = max(abs(a - b) / b for a, b in zip(losses, ref[first:]))
    if worst > 1e-4 or len(losses) != len(ref) - first:
        print(f"FAIL: {name}: losses {losses} vs {ref[first:]} (rel {worst:.1e})"); bad += 1
    else:
        print(f"ok: {name}: losses equal the W=4 run's (worst rel {worst:.1e})")
for n, label in (("r2", "resumed at W=2 F=1"), ("r4", "resumed at W=4 F=2")):
    s = last_json(n)
    if s["first_step"] != 5: print(f"FAIL: {label}: first_step {s['first_step']}"); bad += 1
    same(label, s["losses"], 5)
same("NRAF, wrap 2, prefetch both, limiter 1", last_json("knobs")["losses"])
same("grad_accum 2 of batch 1, hybrid", last_json("accum")["losses"])
rc, kp = last_json("recompute"), last_json("keep")
if rc["losses"] != kp["losses"] or not rc["memory"]["activation_bytes"] < kp["memory"]["activation_bytes"]:
    print(f"FAIL: -recompute 1: losses {rc['losses']} vs {kp['losses']}, activation bytes "
          f"{rc['memory']['activation_bytes']} vs {kp['memory']['activation_bytes']}"); bad += 1
else:
    print(f"ok: -recompute 1 (wrap 2, 3 layers): the same losses bit for bit, activations "
          f"{rc['memory']['activation_bytes']} B instead of {kp['memory']['activation_bytes']} B")
for n in ("bf16", "fp16", "tied"):
    l = last_json(n)["losses"]
    ok = all(x == x and x < 10 for x in l) and l[-1] < l[0] - 0.1
    print(("ok" if ok else "FAIL") + f": {n} learns: {l[0]:.4f} -> {l[-1]:.4f}")
    bad += not ok
t = last_json("tied")["model"]
if t["tie_embeddings"] != 1 or t["param_count"] != 28832 - 64 * 32 - 2 * 2 * 32 * 8:
    print(f"FAIL: tied MQA model {t}"); bad += 1
sys.exit(1 if bad else 0)
PY

# the run file holds the family
fam=$(h5dump -a /model_family "$tmp/run.h5" 2>/dev/null | grep -o '"llama"')
[ "$fam" = '"llama"' ] || fail "run file lacks model_family llama: $(h5dump -A "$tmp/run.h5" 2>&1 | grep -A3 model_ | head -5)"

# fsdp-ckpt reads the checkpoint through the family
"$BIN/fsdp-ckpt" info "$tmp/ck/ckpt_00000005.h5" >"$tmp/info" 2>&1 || fail "fsdp-ckpt info: $(cat "$tmp/info")"
grep -q "^family *llama" "$tmp/info" && grep -q "model.layers.1.self_attn.k_proj.weight *\[16, 32\]" "$tmp/info" \
  && grep -q "lm_head.weight" "$tmp/info" || fail "fsdp-ckpt info output: $(head -20 "$tmp/info")"
"$BIN/fsdp-ckpt" verify "$tmp/ck/ckpt_00000005.h5" >"$tmp/verify" 2>&1 || fail "fsdp-ckpt verify: $(cat "$tmp/verify")"
"$BIN/fsdp-ckpt" export-llmc "$tmp/ck/ckpt_00000005.h5" "$tmp/x.bin" >"$tmp/exp" 2>&1
[ $? -eq 2 ] && grep -q "llama model" "$tmp/exp" || fail "export-llmc of a llama checkpoint: $(cat "$tmp/exp")"

# fsdp-sample from a Llama checkpoint: greedy, the same tokens at W=1 and W=2 (F 2)
for np in 1 2; do
  # shellcheck disable=SC2086
  timeout 120 "$MPIEXEC" $PREFLAGS -n $np "$BIN/fsdp-sample" -resume "$tmp/ck/ckpt_00000005.h5" \
    -max_new_tokens 8 -temperature 0 -prompt_tokens 3,5,7 >"$tmp/sample$np" 2>"$tmp/sample$np.err" \
    || fail "fsdp-sample at $np ranks: $(cat "$tmp/sample$np.err")"
done
[ "$(wc -w <"$tmp/sample1")" -eq 8 ] && cmp -s "$tmp/sample1" "$tmp/sample2" \
  || fail "fsdp-sample: W=1 gave '$(cat "$tmp/sample1")', W=2 '$(cat "$tmp/sample2")'"

# a Llama checkpoint with an impossible shape is refused naming the file
cp "$tmp/ck/ckpt_00000005.h5" "$tmp/badkv.h5"
py=""
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import h5py, numpy' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -n "$py" ] && "$py" -c "import h5py, numpy; f = h5py.File('$tmp/badkv.h5', 'r+'); f['/model'].attrs['n_kv_head'] = numpy.int64(3)"; then
  "$BIN/fsdp-ckpt" verify "$tmp/badkv.h5" >"$tmp/badkv" 2>&1
  [ $? -eq 2 ] && grep -q "badkv.h5 holds an invalid llama model" "$tmp/badkv" \
    || fail "a checkpoint with n_kv_head 3 of 4 heads: $(cat "$tmp/badkv")"
else
  echo "note: no h5py: the invalid-checkpoint check is skipped"
fi

# an llm.c LLaMA-3 token file (uint32 ids above 65535) trains
python3 - "$tmp/l3.bin" <<'PY'
import struct, sys
n = 2000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<3i", 20240801, 7, n) + bytes(1012))
    f.write(struct.pack(f"<{n}I", *[(69000 + 37 * i) % 70000 for i in range(n)]))
PY
run 1 "$tmp/l3" -model llama-tiny -vocab_size 70000 -steps 2 -batch_size 2 -log_every 0 \
  -data "$tmp/l3.bin" -summary json || fail "training on a uint32 token file: $(cat "$tmp/l3.err")"

# Hugging Face Llama weights (tests/oracle/hf, fsdp-ckpt import-hf) predict
# what transformers predicts: for every prefix of the golden tokens the
# greedy next token of fsdp-sample is the argmax of transformers' float64
# logits at that position (the golden margins are checked to exceed 1e-3)
SRC=${FSDP_SRCDIR:-$(dirname "$0")/..}
for d in llama-tied llama-untied; do
  if ! "$BIN/fsdp-ckpt" import-hf "$SRC/tests/oracle/hf/$d" "$tmp/$d.h5" >"$tmp/$d.imp" 2>&1; then
    fail "import-hf $d: $(cat "$tmp/$d.imp")"; continue
  fi
  python3 - "$SRC/tests/oracle/hf/$d/oracle.json" >"$tmp/$d.want" <<'PY' || fail "$d golden margins"
import json, sys
d = json.load(open(sys.argv[1]))
for L in range(1, len(d["tokens"]) + 1):
    row = d["logits"][L - 1]
    order = sorted(range(len(row)), key=lambda v: -row[v])
    assert row[order[0]] - row[order[1]] > 1e-3, (L, row[order[0]] - row[order[1]])
    print(",".join(map(str, d["tokens"][:L])), order[0])
PY
  while read -r prompt want; do
    got=$("$BIN/fsdp-sample" -resume "$tmp/$d.h5" -prompt_tokens "$prompt" -max_new_tokens 1 \
          -temperature 0 2>"$tmp/$d.err")
    [ "$got" = "$want" ] || fail "$d: after $prompt fsdp predicts '$got', transformers $want ($(cat "$tmp/$d.err"))"
  done <"$tmp/$d.want"
done

# a GPT checkpoint does not load into a Llama model
run 1 "$tmp/g" -model tiny -steps 2 -checkpoint_dir "$tmp/gck" -checkpoint_every 2 -log_every 0 || fail "gpt run"
run 1 "$tmp/bad" -model llama-tiny -steps 4 -resume "$tmp/gck/ckpt_00000002.h5" -log_every 0
[ $? -eq 2 ] && grep -q "gpt2" "$tmp/bad.err" || fail "gpt checkpoint into llama: $(cat "$tmp/bad.err")"

# usage errors: status 2, the option named
for bad in "-model llama-tiny -n_kv_head 3" "-model llama-tiny -n_head 5" "-model tiny -family llama" \
           "-model custom -family llama -rope_theta 0.5" "-model llama-tiny -device cuda"; do
  # shellcheck disable=SC2086
  "$BIN/fsdp-train" $bad -steps 1 >"$tmp/u.out" 2>&1
  st=$?
  set -- $bad
  opt=$(echo "$bad" | awk '{print $NF=="3"||$NF=="5"||$NF=="0.5"||$NF=="llama"||$NF=="cuda" ? $(NF-1) : $NF}')
  if [ $st -eq 2 ] && grep -q -- "$opt" "$tmp/u.out"; then echo "ok: fsdp-train $bad -> 2: $(grep -m1 -- "$opt" "$tmp/u.out")"
  else fail "fsdp-train $bad: status $st: $(head -3 "$tmp/u.out")"; fi
done

if [ "$fails" -gt 0 ]; then echo "test_llama: $fails failed"; exit 1; fi
echo "test_llama: all passed"
exit 0
