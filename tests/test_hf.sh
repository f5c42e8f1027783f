#!/bin/sh
# test_hf.sh: fsdp-ckpt import-hf / export-hf on the golden Hugging Face
# folders of tests/oracle/hf (made by hf_oracle.py with transformers; see
# tests/oracle/README.md), no Python ML stack needed:
#   - import-hf of each folder (GPT-2 F32, sharded, BF16; Llama tied F32,
#     untied F16) prints the fsdp-train line that loads it; the checkpoint
#     passes fsdp-ckpt verify;
#   - GPT2Model's names (no "transformer."), attention mask buffers and a
#     tied lm_head.weight equal to wte import to the same checkpoint; a
#     tensor present under both names is refused;
#   - every /model tensor equals the safetensors value exactly, read by an
#     independent reader (numpy: BF16 and F16 widened by numpy, GPT-2's
#     Conv1D weights transposed), moments zero, the description right;
#   - fsdp's GPT forward on the imported GPT-2 (2 ranks) matches
#     transformers' float64 losses to 1e-5 (tests/test_hf_gpt2);
#   - fsdp-train resumes from the imported file with the printed options;
#   - export-hf then import-hf gives byte-identical tensors and the same
#     description; the exported config.json holds the original's shape
#     fields; -hf_dtype bf16 rounds each fp32 to nearest even;
#   - refusals (exit 2, message naming file/tensor/problem, no output left):
#     existing outputs, no config.json, a foreign model_type, a tensor of
#     the wrong shape, a missing tensor, a tied head that differs, RoPE
#     scaling, a truncated safetensors file;
#   - streaming: converting a synthetic GPT-2 (10x its largest
#     tensor) with import-hf, export-hf, export-llmc and import-llmc peaks
#     below the peak RSS of the same command on the tiny model plus twice
#     the largest tensor (fp32).
#   usage: test_hf.sh MPIEXEC "PREFLAGS" BUILD_DIR SRC_DIR
# Skips (77) without h5py and numpy for /usr/bin/python3 or python3.
set -u
MPIEXEC=$1
PREFLAGS=$2
BUILD=$3
SRCDIR=$4
CKPT="$BUILD/src/fsdp-ckpt"
GOLD="$SRCDIR/tests/oracle/hf"
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, expect (fsdp-ckpt = $CKPT)

testlib_python "h5py, numpy" "this test reads HDF5 and safetensors files with h5py and numpy (apt-get install python3-h5py python3-numpy)"
testlib_tmpdir fsdp_test_hf

# ---- import every golden folder --------------------------------------------
for d in gpt2 gpt2-sharded gpt2-bf16 llama-tied llama-untied; do
  expect 0 "^fsdp-train -model custom .* -resume $tmp/$d.h5\$" import-hf "$GOLD/$d" "$tmp/$d.h5"
  cp "$tmp/stdout" "$tmp/$d.out"
done
checks=$((checks + 2))
grep -x -q -- "fsdp-train -model custom -n_layer 2 -n_embd 8 -n_head 2 -vocab_size 16 -seq_len 8 -resume $tmp/gpt2.h5" "$tmp/gpt2.out" ||
  fail "gpt2 load line: $(grep '^fsdp-train' "$tmp/gpt2.out")"
grep -x -q -- "fsdp-train -model custom -family llama -n_layer 2 -n_embd 8 -n_head 2 -n_kv_head 1 -ffn_hidden 16 -vocab_size 16 -seq_len 8 -tie_embeddings 0 -rope_theta 10000.0 -norm_eps 1.0000000000000001e-05 -resume $tmp/llama-untied.h5" "$tmp/llama-untied.out" ||
  fail "llama load line: $(grep '^fsdp-train' "$tmp/llama-untied.out")"
expect 0 "ok: step 0, 84 datasets" verify "$tmp/gpt2.h5"
expect 0 "tensors" info "$tmp/gpt2-sharded.h5"

# ---- values against an independent reader ----------------------------------
cat >"$tmp/st.py" <<'EOF'
import json, os, struct, sys
import numpy as np

def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        raw = data[b:e]
        if v["dtype"] == "F32":
            a = np.frombuffer(raw, "<f4")
        elif v["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float32)
        elif v["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit("dtype " + v["dtype"])
        out[k] = (a.reshape(v["shape"]), v["dtype"])
    return out

def read_folder(d):
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return read_st(os.path.join(d, "model.safetensors"))
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    out = {}
    for f in sorted(set(idx["weight_map"].values())):
        out.update(read_st(os.path.join(d, f)))
    return out

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

def to_fsdp(name):
    """fsdp name and transpose flag of a Hugging Face tensor name"""
    if name.startswith("model.") or name == "lm_head.weight":
        return name, False
    n = name[len("transformer."):] if name.startswith("transformer.") else name
    if n in ("wte.weight", "wpe.weight"):
        n = n[:-len(".weight")]
    return n, n.endswith(CONV1D)
EOF

cat >"$tmp/values.py" <<'EOF'
import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[1])
from st import read_folder, to_fsdp
folder, h5 = sys.argv[2], sys.argv[3]
t = read_folder(folder)
bad = []
with h5py.File(h5, "r") as f:
    m = f["/model"]
    names = set(m.keys())
    used = set()
    for k, (a, dt) in t.items():
        n, tr = to_fsdp(k)
        if n == "lm_head.weight" and n not in names:
            continue  # tied
        want = a.T if tr else a
        got = m[n][...]
        used.add(n)
        if got.dtype != np.float32 or got.shape != want.shape or got.tobytes() != np.ascontiguousarray(want).tobytes():
            bad.append(n)
    if used != names:
        bad.append("unaccounted datasets: %s" % sorted(names - used))
    for g in ("exp_avg", "exp_avg_sq"):
        for n in names:
            if np.any(f["/optim/" + g][n][...] != 0):
                bad.append(g + "/" + n)
    if f.attrs["step"] != 0 or f["/optim"].attrs["step_count"] != 0:
        bad.append("step")
print("%s: %d tensors compared, %s" % (h5, len(t), "bad: %s" % bad if bad else "all exact"))
sys.exit(1 if bad else 0)
EOF
for d in gpt2 gpt2-sharded gpt2-bf16 llama-tied llama-untied; do
  checks=$((checks + 1))
  "$py" "$tmp/values.py" "$tmp" "$GOLD/$d" "$tmp/$d.h5" || fail "import-hf $d: values differ from the safetensors file"
done

# ---- fsdp's GPT forward against transformers -------------------------------
for d in gpt2 gpt2-sharded gpt2-bf16; do
  checks=$((checks + 1))
  # shellcheck disable=SC2086
  timeout 120 "$MPIEXEC" $PREFLAGS -n 2 "$BUILD/tests/test_hf_gpt2" "$tmp/$d.h5" "$GOLD/$d/oracle.json" >"$tmp/out" 2>&1 ||
    { fail "test_hf_gpt2 $d"; tail -20 "$tmp/out"; }
  grep "worst relative" "$tmp/out"
done

# ---- fsdp-train loads the imported file with the printed options -----------
checks=$((checks + 1))
line=$(grep '^fsdp-train ' "$tmp/gpt2.out" | sed 's/^fsdp-train //')
# shellcheck disable=SC2086
if timeout 120 "$MPIEXEC" $PREFLAGS -n 2 "$BUILD/src/fsdp-train" $line -steps 1 -batch_size 2 \
    -checkpoint_dir "$tmp/run" >"$tmp/out" 2>&1 && grep -q "step 1/1" "$tmp/out"; then
  echo "ok: fsdp-train $line -steps 1: $(grep -m1 'step 1/1' "$tmp/out")"
else
  fail "fsdp-train does not resume from the imported checkpoint"; tail -10 "$tmp/out"
fi

# ---- export, re-import: exact round trips ----------------------------------
cat >"$tmp/same.py" <<'EOF'
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
bad = [n for n in a["/model"] if n not in b["/model"] or a["/model"][n][...].tobytes() != b["/model"][n][...].tobytes()]
if set(a["/model"]) != set(b["/model"]):
    bad.append("different dataset lists")
da = {k: v for k, v in a["/model"].attrs.items()}
db = {k: v for k, v in b["/model"].attrs.items()}
if da != db:
    bad.append("descriptions differ: %s vs %s" % (da, db))
print("%s vs %s: %s" % (sys.argv[1], sys.argv[2], bad if bad else "identical tensors and description"))
sys.exit(1 if bad else 0)
EOF
cat >"$tmp/config.py" <<'EOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
if a["model_type"] == "gpt2":
    keys = ["model_type", "n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "layer_norm_epsilon", "activation_function"]
else:
    keys = ["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "hidden_act"]
    a.setdefault("rope_theta", a.get("rope_parameters", {}).get("rope_theta"))
    keys += ["rope_theta"]
tie = lambda c: c.get("tie_word_embeddings", c["model_type"] == "gpt2")
bad = [k for k in keys if a.get(k) != b.get(k)] + (["tie_word_embeddings"] if tie(a) != tie(b) else [])
print("%s: %s" % (sys.argv[2], "differs from %s in %s" % (sys.argv[1], bad) if bad else "same shape fields as the original"))
sys.exit(1 if bad else 0)
EOF
for d in gpt2 gpt2-bf16 llama-tied llama-untied; do
  expect 0 "model.safetensors with [0-9]+ F32 tensors" export-hf "$tmp/$d.h5" "$tmp/ex-$d"
  expect 0 "^fsdp-train " import-hf "$tmp/ex-$d" "$tmp/re-$d.h5"
  checks=$((checks + 3))
  "$py" "$tmp/same.py" "$tmp/$d.h5" "$tmp/re-$d.h5" || fail "export-hf/import-hf round trip of $d"
  "$py" "$tmp/config.py" "$GOLD/$d/config.json" "$tmp/ex-$d/config.json" || fail "config.json round trip of $d"
  "$py" -c "
import sys; sys.path.insert(0, '$tmp')
from st import read_folder
a, b = read_folder('$GOLD/$d'), read_folder('$tmp/ex-$d')
ok = set(a) == set(b) and all(a[k][0].shape == b[k][0].shape for k in a)
print('$d: exported tensor names and shapes', 'as transformers saved them' if ok else 'DIFFER: %s' % sorted(set(a) ^ set(b)))
sys.exit(0 if ok else 1)" || fail "export-hf $d: names or shapes differ from transformers' own"
done
expect 0 "28 BF16 tensors" export-hf "$tmp/gpt2.h5" "$tmp/ex-bf16" -hf_dtype bf16
checks=$((checks + 1))
"$py" -c "
import sys; sys.path.insert(0, '$tmp')
import numpy as np
from st import read_folder
a, b = read_folder('$tmp/ex-gpt2'), read_folder('$tmp/ex-bf16')
def rne(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.astype(np.uint32).view(np.float32)
bad = [k for k in a if b[k][1] != 'BF16' or rne(a[k][0]).tobytes() != b[k][0].tobytes()]
print('bf16 export:', 'every value the nearest-even bf16 of the fp32 export' if not bad else 'bad: %s' % bad)
sys.exit(1 if bad else 0)" || fail "export-hf -hf_dtype bf16 rounding"

# ---- GPT2Model's names (no "transformer."), mask buffers, a tied lm_head ----
# as in the Hub's gpt2/model.safetensors: the same checkpoint comes out
cat >"$tmp/hub.py" <<'EOF2'
import json, os, shutil, struct, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from st import read_folder
src, out, twice = sys.argv[2], sys.argv[3], sys.argv[4] == "1"
t = read_folder(src)
os.makedirs(out)
shutil.copy(os.path.join(src, "config.json"), out)
items = [(k[len("transformer."):], a) for k, (a, dt) in t.items()]
items.append(("h.0.attn.bias", np.tril(np.ones((8, 8), np.float32)).reshape(1, 1, 8, 8)))
items.append(("lm_head.weight", t["transformer.wte.weight"][0]))
if twice:
    items.append(("transformer.wpe.weight", t["transformer.wpe.weight"][0]))
hdr, off, blobs = {}, 0, []
for k, a in items:
    b = np.ascontiguousarray(a, "<f4").tobytes()
    hdr[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(hdr).encode()
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
EOF2
checks=$((checks + 1))
"$py" "$tmp/hub.py" "$tmp" "$GOLD/gpt2" "$tmp/hub" 0 || fail "making the GPT2Model-style folder"
expect 0 "^fsdp-train " import-hf "$tmp/hub" "$tmp/hub.h5"
"$py" "$tmp/same.py" "$tmp/gpt2.h5" "$tmp/hub.h5" || fail "GPT2Model names, mask buffers, tied lm_head: another checkpoint"
"$py" "$tmp/hub.py" "$tmp" "$GOLD/gpt2" "$tmp/hub2" 1
expect 2 "holds tensor wpe twice \\(as wpe.weight and transformer.wpe.weight\\)" import-hf "$tmp/hub2" "$tmp/bad0.h5"

# ---- refusals: exit 2, a message naming the problem, no output left --------
expect 2 "$tmp/gpt2.h5 exists" import-hf "$GOLD/gpt2" "$tmp/gpt2.h5"
expect 2 "ex-gpt2/config.json exists" export-hf "$tmp/gpt2.h5" "$tmp/ex-gpt2"
mkdir "$tmp/noconf" && cp "$GOLD/gpt2/model.safetensors" "$tmp/noconf/"
expect 2 "noconf/config.json" import-hf "$tmp/noconf" "$tmp/bad1.h5"
# bad FOLDER SED_EXPR: a copy of golden FOLDER with config.json edited
bad() {
  rm -rf "$tmp/bad" && cp -r "$GOLD/$1" "$tmp/bad" && chmod -R u+w "$tmp/bad" &&
    sed -i "$2" "$tmp/bad/config.json"
}
bad gpt2 's/"model_type": "gpt2"/"model_type": "bert"/'
expect 2 'model_type "bert": fsdp-ckpt imports gpt2 and llama' import-hf "$tmp/bad" "$tmp/bad2.h5"
bad gpt2 's/"n_positions": 8/"n_positions": 9/'
expect 2 'tensor transformer.wpe.weight has shape \[8, 8\] but .*makes it \[9, 8\]' import-hf "$tmp/bad" "$tmp/bad3.h5"
bad llama-tied 's/"tie_word_embeddings": true/"tie_word_embeddings": false/'
expect 2 'has no tensor lm_head.weight' import-hf "$tmp/bad" "$tmp/bad4.h5"
bad llama-untied 's/"tie_word_embeddings": false/"tie_word_embeddings": true/'
expect 2 'lm_head.weight differs from model.embed_tokens.weight' import-hf "$tmp/bad" "$tmp/bad5.h5"
bad llama-tied 's/"rope_type": "default"/"rope_type": "llama3"/'
expect 2 'rope_scaling' import-hf "$tmp/bad" "$tmp/bad6.h5"
bad gpt2 's/"activation_function": "gelu_new"/"activation_function": "relu"/'
expect 2 'activation_function is "relu"' import-hf "$tmp/bad" "$tmp/bad7.h5"
bad gpt2-sharded 's/x/x/'
truncate -s -100 "$tmp/bad/model-00002-of-00003.safetensors"
expect 2 'safetensors file .*bad/model-00002-of-00003.safetensors is [0-9]+ bytes .*truncated' import-hf "$tmp/bad" "$tmp/bad8.h5"
checks=$((checks + 1))
# shellcheck disable=SC2012
[ -z "$(ls "$tmp" | grep -E '^bad[0-9].h5|tmp|import-')" ] || fail "a refused import left files: $(ls "$tmp")"
expect 0 "import-hf DIR OUT.h5" -help

# ---- streaming: peak memory about the largest tensor -----------------------
# A GPT-2 of 24 layers, n_embd 256, vocab 8192 in BF16: 21.1 M parameters
# (80 MiB in fp32), the largest tensor wte 2.1 M (8 MiB in fp32): 10x.
cat >"$tmp/gen.py" <<'EOF'
import json, os, struct, sys
import numpy as np
d = sys.argv[1]
L, C, V, T = 24, 256, 8192, 64
os.makedirs(d)
json.dump({"model_type": "gpt2", "n_layer": L, "n_embd": C, "n_head": 4, "vocab_size": V,
           "n_positions": T}, open(os.path.join(d, "config.json"), "w"))
shapes = [("transformer.wte.weight", [V, C]), ("transformer.wpe.weight", [T, C]),
          ("transformer.ln_f.weight", [C]), ("transformer.ln_f.bias", [C])]
for l in range(L):
    p = "transformer.h.%d." % l
    shapes += [(p + "ln_1.weight", [C]), (p + "ln_1.bias", [C]),
               (p + "attn.c_attn.weight", [C, 3 * C]), (p + "attn.c_attn.bias", [3 * C]),
               (p + "attn.c_proj.weight", [C, C]), (p + "attn.c_proj.bias", [C]),
               (p + "ln_2.weight", [C]), (p + "ln_2.bias", [C]),
               (p + "mlp.c_fc.weight", [C, 4 * C]), (p + "mlp.c_fc.bias", [4 * C]),
               (p + "mlp.c_proj.weight", [4 * C, C]), (p + "mlp.c_proj.bias", [C])]
hdr, off = {}, 0
for n, s in shapes:
    k = int(np.prod(s)) * 2
    hdr[n] = {"dtype": "BF16", "shape": s, "data_offsets": [off, off + k]}
    off += k
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
rng = np.random.default_rng(7)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for n, s in shapes:
        x = rng.standard_normal(int(np.prod(s)), dtype=np.float32)
        f.write((x.view(np.uint32) >> 16).astype("<u2").tobytes())
print(sum(int(np.prod(s)) for n, s in shapes), max(int(np.prod(s)) for n, s in shapes))
EOF
set -- $("$py" "$tmp/gen.py" "$tmp/big")
total=$1 largest=$2
# peak RSS in KiB of one fsdp-ckpt command
peak() {
  /usr/bin/time -f %M -o "$tmp/rss" "$CKPT" "$@" >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo 0 >"$tmp/rss"; }
  tail -1 "$tmp/rss"
}
if [ -x /usr/bin/time ]; then
  limit_kib=$((2 * largest * 4 / 1024))
  echo "synthetic model: $total parameters ($((total * 4 / 1048576)) MiB fp32), largest tensor $largest ($((largest * 4 / 1024)) KiB fp32)"
  # command on the tiny model (fixed overhead) | the same on the big one
  for step in "import-hf $GOLD/gpt2 $tmp/s1.h5|import-hf $tmp/big $tmp/b1.h5" \
              "export-hf $tmp/gpt2.h5 $tmp/s2|export-hf $tmp/b1.h5 $tmp/b2" \
              "export-llmc $tmp/gpt2.h5 $tmp/s3.bin|export-llmc $tmp/b1.h5 $tmp/b3.bin" \
              "import-llmc $tmp/s3.bin $tmp/s4.h5|import-llmc $tmp/b3.bin $tmp/b4.h5"; do
    small=${step%%|*} big=${step#*|}
    # shellcheck disable=SC2086
    base=$(peak $small)
    # shellcheck disable=SC2086
    got=$(peak $big)
    checks=$((checks + 1))
    echo "peak RSS: fsdp-ckpt ${big%% *} on the synthetic model $got KiB; on the tiny model $base KiB; bound $base + $limit_kib KiB"
    if [ "$base" -le 0 ] || [ "$got" -le 0 ] || [ "$got" -ge $((base + limit_kib)) ]; then
      fail "fsdp-ckpt ${big%% *}: peak RSS $got KiB is not below $base + 2 x largest tensor ($limit_kib KiB)"
    fi
  done
  checks=$((checks + 1))
  "$py" "$tmp/same.py" "$tmp/b1.h5" "$tmp/b4.h5" >/dev/null || fail "synthetic model: import-hf and export-llmc/import-llmc disagree"
else
  echo "note: /usr/bin/time missing: peak memory not measured"
fi

echo "test_hf: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
