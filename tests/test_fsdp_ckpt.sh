#!/bin/sh
# test_fsdp_ckpt.sh: fsdp-ckpt as users run it, on a checkpoint written by
# fsdp-train (tiny model, 2 ranks, 3 steps):
#   - info prints the step, config, written topology, data position and the
#     parameter list whose total is the model's parameter count;
#   - verify passes it, and fails (exit 2, naming the file and the first
#     problem) on copies with a NaN, an Inf, a missing, mis-shaped, f64 or
#     extra dataset, no /optim, a truncated or non-HDF5 file, and root or
#     /optim attributes out of range or inconsistent (a negative step,
#     data position or seed, a data position beyond what the steps
#     consumed, a step_count of -1 or above the step, a world size 0, a
#     sharding factor not dividing it); export-hf and export-llmc refuse
#     a NaN checkpoint and write nothing;
#   - export-llmc writes llm.c's layout (checked tensor by tensor against
#     the HDF5 datasets by an independent reader in Python);
#     export -> import -> export is byte-identical; the imported file is
#     step 0 with zero moments, and fsdp-train loads it (2 ranks, lr 0)
#     and writes back the same weights;
#   - import-llmc of llm.c files made here from scratch (fp32 version 3 and
#     bf16 version 5, a vocabulary needing no padding) holds their values
#     exactly; bad magic / version / length fail with a message and leave
#     no output; existing outputs are never overwritten.
#   usage: test_fsdp_ckpt.sh MPIEXEC "PREFLAGS" BUILD_SRC_DIR
# Skips (77) without h5py and numpy for /usr/bin/python3 or python3.
set -u
MPIEXEC=$1
PREFLAGS=$2
SRC=$3
CKPT="$SRC/fsdp-ckpt"
TRAIN="$SRC/fsdp-train"
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, expect, has (fsdp-ckpt = $CKPT)

testlib_python "h5py, numpy" "this test edits and reads HDF5 files with h5py and numpy (apt-get install python3-h5py python3-numpy)"
testlib_tmpdir fsdp_test_ckpt

# pycheck NAME ARGS...: run a check of the Python helper below
pycheck() {
  checks=$((checks + 1))
  name=$1
  shift
  if "$py" "$tmp/helper.py" "$@" >"$tmp/py.out" 2>&1; then echo "ok: $name: $(tail -1 "$tmp/py.out")"
  else fail "$name"; sed 's/^/    /' "$tmp/py.out" | tail -12; fi
}
# absent FILE...: none of these exist (nothing written by a failed command)
absent() {
  checks=$((checks + 1))
  for f in "$@"; do
    if [ -e "$f" ]; then fail "$f exists but should not"; return; fi
  done
  # no temporary files of fsdp-ckpt either
  left=""
  for f in "$tmp"/*.tmp-* "$tmp"/*.import-*; do
    if [ -e "$f" ]; then left="$left $f"; fi
  done
  if [ -n "$left" ]; then fail "temporary files left behind: $left"; else echo "ok: no output, no temporary file"; fi
}

cat >"$tmp/helper.py" <<'PY'
# Independent reader/writer of the llm.c GPT-2 checkpoint layout
# (../shared notes: header 256 int32; wte (Vp,C) with zero pad rows, wpe,
# stacked per-layer tensors, lnfw, lnfb) and h5py edits of checkpoints.
import shutil, struct, sys
import h5py
import numpy as np

MAGIC = 20240326
LAYER = [("ln1w", "ln_1.weight"), ("ln1b", "ln_1.bias"), ("qkvw", "attn.c_attn.weight"),
         ("qkvb", "attn.c_attn.bias"), ("attprojw", "attn.c_proj.weight"),
         ("attprojb", "attn.c_proj.bias"), ("ln2w", "ln_2.weight"), ("ln2b", "ln_2.bias"),
         ("fcw", "mlp.c_fc.weight"), ("fcb", "mlp.c_fc.bias"), ("fcprojw", "mlp.c_proj.weight"),
         ("fcprojb", "mlp.c_proj.bias")]

def shapes(maxT, V, L, C, Vp):
    """llm.c tensors in file order: (llm.c name, fsdp name or None, per-layer shape)."""
    per = {"ln1w": (C,), "ln1b": (C,), "qkvw": (3 * C, C), "qkvb": (3 * C,), "attprojw": (C, C),
           "attprojb": (C,), "ln2w": (C,), "ln2b": (C,), "fcw": (4 * C, C), "fcb": (4 * C,),
           "fcprojw": (C, 4 * C), "fcprojb": (C,)}
    out = [("wte", "wte", (Vp, C)), ("wpe", "wpe", (maxT, C))]
    out += [(k, n, per[k]) for k, n in LAYER]
    out += [("lnfw", "ln_f.weight", (C,)), ("lnfb", "ln_f.bias", (C,))]
    return out

def read_llmc(path):
    """{fsdp name: fp32 array}, header; bf16 (version 5) expanded exactly."""
    data = open(path, "rb").read()
    h = struct.unpack("<256i", data[:1024])
    assert h[0] == MAGIC and h[1] in (3, 5), h[:2]
    maxT, V, L, NH, C, Vp = h[2:8]
    elem = 4 if h[1] == 3 else 2
    off, tensors = 1024, {}
    for k, name, shp in shapes(maxT, V, L, C, Vp):
        layers = L if (k, name) in LAYER else 1
        n = layers * int(np.prod(shp))
        raw = np.frombuffer(data, dtype="<f4" if elem == 4 else "<u2", count=n, offset=off)
        off += n * elem
        a = raw if elem == 4 else (raw.astype("<u4") << 16).view("<f4")
        a = a.reshape((layers,) + shp)
        if layers == 1 and (k, name) not in LAYER:
            tensors[name] = a[0]
        else:
            for l in range(L):
                tensors["h.%d.%s" % (l, name)] = a[l]
    assert off == len(data), ("file length", off, len(data))
    return tensors, dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp, version=h[1])

def check_export(ckpt, binfile):
    """Every /model dataset equals the llm.c tensor it became; pad rows zero."""
    t, h = read_llmc(binfile)
    with h5py.File(ckpt, "r") as f:
        m = f["model"]
        assert (h["maxT"], h["V"], h["L"], h["NH"], h["C"]) == tuple(
            int(m.attrs[k]) for k in ("seq_len", "vocab_size", "n_layer", "n_head", "n_embd")), h
        assert h["Vp"] == (h["V"] + 127) // 128 * 128 and h["version"] == 3, h
        wte = t.pop("wte")
        assert np.all(wte[h["V"]:] == 0), "wte pad rows are not zero"
        t["wte"] = wte[:h["V"]]
        assert set(t) == set(m.keys()), set(t) ^ set(m.keys())
        for name, a in t.items():
            b = m[name][()]
            if a.shape != b.shape or not np.array_equal(a.view("<u4"), b.astype("<f4").view("<u4")):
                bad = np.flatnonzero(a.ravel() != b.ravel())
                raise SystemExit("%s differs: shape %s vs %s, first elements %s, max |diff| %g" % (
                    name, a.shape, b.shape, bad[:5], np.abs(a.ravel() - b.ravel()).max()))
    print("%d tensors of %s equal /model of %s bit for bit, %d pad rows zero" % (
        len(t), binfile, ckpt, h["Vp"] - h["V"]))

def check_import(h5, binfile):
    """An imported checkpoint: /model equals the llm.c tensors bit for bit,
    step 0, zero moments, the llm.c config."""
    t, h = read_llmc(binfile)
    t["wte"] = t["wte"][:h["V"]]
    with h5py.File(h5, "r") as f:
        assert int(f.attrs["step"]) == 0 and int(f.attrs["data_position"]) == 0
        assert int(f["optim"].attrs["step_count"]) == 0
        m = f["model"]
        cfg = tuple(int(m.attrs[k]) for k in ("n_layer", "n_embd", "n_head", "vocab_size", "seq_len"))
        assert cfg == (h["L"], h["C"], h["NH"], h["V"], h["maxT"]), cfg
        assert set(m.keys()) == set(t), set(m.keys()) ^ set(t)
        for name, a in t.items():
            b = m[name][()]
            assert b.dtype == np.float32 and b.shape == a.shape, (name, b.dtype, b.shape, a.shape)
            if not np.array_equal(a.view("<u4"), b.view("<u4")):
                bad = np.flatnonzero(a.ravel() != b.ravel())
                raise SystemExit("%s: first wrong elements %s: %s vs %s" % (
                    name, bad[:5], b.ravel()[bad[:5]], a.ravel()[bad[:5]]))
            for g in ("exp_avg", "exp_avg_sq"):
                z = f["optim"][g][name][()]
                assert z.shape == a.shape and not np.any(z), (g, name)
    print("%s holds the %d tensors of %s (version %d) exactly, step 0, zero moments" % (
        h5, len(t), binfile, h["version"]))

def make_llmc(path, version, maxT, V, L, NH, C, magic=MAGIC, truncate=0):
    """A random llm.c checkpoint (pad rows zero); bf16 values for version 5."""
    Vp = (V + 127) // 128 * 128
    rng = np.random.default_rng(7)
    hdr = [0] * 256
    hdr[:8] = [magic, version, maxT, V, L, NH, C, Vp]
    body = []
    for k, name, shp in shapes(maxT, V, L, C, Vp):
        layers = L if (k, name) in LAYER else 1
        a = rng.normal(0, 0.3, size=(layers,) + shp).astype("<f4")
        if k == "wte":
            a[:, V:] = 0
        body.append(a.ravel())
    x = np.concatenate(body)
    raw = x.tobytes() if version != 5 else (x.view("<u4") >> 16).astype("<u2").tobytes()
    data = struct.pack("<256i", *hdr) + raw
    open(path, "wb").write(data[:len(data) - truncate])
    print("wrote %s: %d bytes" % (path, len(data) - truncate))

def corrupt(src, dst, kind):
    """A copy of checkpoint src with one defect."""
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        if kind == "nan":
            d = f["model/h.1.attn.c_attn.weight"]; a = d[()]; a[5, 7] = np.nan; d[...] = a
        elif kind == "inf":
            d = f["optim/exp_avg_sq/wpe"]; a = d[()]; a[3, 1] = np.inf; d[...] = a
        elif kind == "missing":
            del f["optim/exp_avg/h.0.ln_2.bias"]
        elif kind == "shape":
            a = f["model/wpe"][()]; del f["model/wpe"]; f["model/wpe"] = a[:15]
        elif kind == "f64":
            a = f["model/ln_f.bias"][()]; del f["model/ln_f.bias"]
            f.create_dataset("model/ln_f.bias", data=a.astype(np.float64))
        elif kind == "extra":
            f["model/foo"] = np.zeros(3, np.float32)
        elif kind == "nooptim":
            del f["optim"]
        elif kind == "nofamily":  # as written before model families
            del f["model"].attrs["family"]
        elif kind == "llama":
            f["model"].attrs["family"] = np.bytes_("llama")
        # [Note: checkpoint attributes]: out of range or inconsistent
        elif kind == "negstep":
            f.attrs["step"] = np.int64(-7)
        elif kind == "negpos":
            f.attrs["data_position"] = np.int64(-100)
        elif kind == "bigpos":
            f.attrs["data_position"] = np.int64(1 << 62)
        elif kind == "negcount":
            f["optim"].attrs["step_count"] = np.int64(-1)
        elif kind == "bigcount":
            f["optim"].attrs["step_count"] = np.int64(4)
        elif kind == "world":
            f.attrs["world_size"] = np.int64(0)
        elif kind == "shard":
            f.attrs["sharding_factor"] = np.int64(3)
        elif kind == "negseed":
            f.attrs["seed"] = np.int64(-5)
        elif kind == "wpenan":
            d = f["model/wpe"]; a = d[()]; a[2, 9] = np.nan; d[...] = a
        else:
            raise SystemExit("unknown corruption " + kind)
    print("corrupted copy %s (%s)" % (dst, kind))

cmd = sys.argv[1]
if cmd == "check-export": check_export(sys.argv[2], sys.argv[3])
elif cmd == "check-import": check_import(sys.argv[2], sys.argv[3])
elif cmd == "make": make_llmc(sys.argv[2], *map(int, sys.argv[3:]))
elif cmd == "corrupt": corrupt(*sys.argv[2:5])
else: raise SystemExit("unknown command " + cmd)
PY

# ---- a checkpoint written by fsdp-train --------------------------------
checks=$((checks + 1))
# shellcheck disable=SC2086
if ! timeout 300 "$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" -model tiny -steps 3 -log_every 0 \
    -checkpoint_dir "$tmp/D" -checkpoint_every 3 >"$tmp/train.out" 2>&1; then
  fail "fsdp-train did not write the test checkpoint"; cat "$tmp/train.out"
  echo "test_fsdp_ckpt: $checks checks, $fails failed"
  exit 1
fi
C="$tmp/D/ckpt_00000003.h5"
[ -f "$C" ] || { fail "no $C"; exit 1; }
echo "ok: fsdp-train wrote $C"

# ---- info ----------------------------------------------------------------
expect 0 "^step +3$" info "$C"
has "^format_version +1$"
has "^data_position +3 micro-batches$"
has "^written at +W 2, F 2, G 2 "
has "^model +tiny: n_layer 2, n_embd 32, n_head 4, vocab_size 64, seq_len 16$"
has "^family +gpt2$"
has "^optimizer +adamw, step_count 3$"
has "^created +[0-9]{4}-[0-9]{2}-[0-9]{2}T"
has "^  wte +\[64, 32\] +2048$"
has "^  h\.1\.mlp\.c_proj\.weight +\[32, 128\] +4096$"
has "^total +28 tensors, 28032 elements \(model config: 28032 parameters\)$"

# ---- verify --------------------------------------------------------------
expect 0 "ok: step 3, 84 datasets" verify "$C"
for kind in nan inf missing shape f64 extra nooptim nofamily llama; do
  pycheck "corrupt ($kind)" corrupt "$C" "$tmp/bad_$kind.h5" "$kind"
done
expect 2 "bad_nan.h5: /model/h.1.attn.c_attn.weight holds NaN at element 167 \(index \[5, 7\]\)" verify "$tmp/bad_nan.h5"
expect 2 "bad_inf.h5: /optim/exp_avg_sq/wpe holds \+Inf at element 97 \(index \[3, 1\]\)" verify "$tmp/bad_inf.h5"
expect 2 "bad_missing.h5 has no dataset /optim/exp_avg/h.0.ln_2.bias" verify "$tmp/bad_missing.h5"
expect 2 "bad_shape.h5: /model/wpe has shape \[15, 32\], the model config expects \[16, 32\]" verify "$tmp/bad_shape.h5"
expect 2 "bad_f64.h5: /model/ln_f.bias has floating-point elements of 8 bytes, expected fp32" verify "$tmp/bad_f64.h5"
expect 2 "bad_extra.h5 has /model/foo, which is not a parameter" verify "$tmp/bad_extra.h5"
expect 2 "bad_nooptim.h5 has no /optim group" verify "$tmp/bad_nooptim.h5"
expect 0 "ok: step 3, 28 datasets \(/model only\)" verify "$tmp/bad_nooptim.h5" -weights_only
# attributes in range and consistent, as every reader checks them
for kind in negstep negpos bigpos negcount bigcount world shard negseed wpenan; do
  pycheck "corrupt ($kind)" corrupt "$C" "$tmp/bad_$kind.h5" "$kind"
done
expect 2 "bad_negstep.h5 has step -7; expected 0 to " verify "$tmp/bad_negstep.h5"
expect 2 "bad_negpos.h5 has data_position -100 at step 3; expected 3 to 3145728" verify "$tmp/bad_negpos.h5"
expect 2 "bad_bigpos.h5 has data_position 4611686018427387904 at step 3" verify "$tmp/bad_bigpos.h5"
expect 2 "bad_negcount.h5 has /optim step_count -1 at step 3; expected 0 to 3" verify "$tmp/bad_negcount.h5"
expect 2 "bad_bigcount.h5 has /optim step_count 4 at step 3" verify "$tmp/bad_bigcount.h5"
expect 2 "bad_world.h5 records the topology world_size 0, sharding_factor 2" verify "$tmp/bad_world.h5"
expect 2 "bad_shard.h5 records the topology world_size 2, sharding_factor 3" verify "$tmp/bad_shard.h5"
expect 2 "bad_negseed.h5 has seed -5" verify "$tmp/bad_negseed.h5"
expect 2 "bad_wpenan.h5: /model/wpe holds NaN at element 73 \(index \[2, 9\]\)" verify "$tmp/bad_wpenan.h5"
# [Note: finite checkpoints]: the converters export no NaN/Inf and create nothing
expect 2 "bad_wpenan.h5: /model/wpe holds NaN at element 73 \(index \[2, 9\]\): not exported" \
  export-hf "$tmp/bad_wpenan.h5" "$tmp/hf_nan"
checks=$((checks + 1))
[ ! -e "$tmp/hf_nan" ] || fail "export-hf of a NaN checkpoint created $tmp/hf_nan"
expect 2 "bad_nan.h5: /model/h.1.attn.c_attn.weight holds NaN at element 167" export-llmc "$tmp/bad_nan.h5" "$tmp/nan.bin"
checks=$((checks + 1))
[ ! -e "$tmp/nan.bin" ] || fail "export-llmc of a NaN checkpoint wrote $tmp/nan.bin"
# a file of before model families is a gpt2 model; another family is named
expect 0 "ok: step 3, 84 datasets" verify "$tmp/bad_nofamily.h5"
expect 0 "^family +gpt2$" info "$tmp/bad_nofamily.h5"
# a gpt2 file relabelled llama lacks the llama attributes
expect 2 "bad_llama.h5 lacks the model attribute n_kv_head" verify "$tmp/bad_llama.h5"
head -c 200000 "$C" >"$tmp/trunc.h5"
expect 2 "trunc.h5" verify "$tmp/trunc.h5"
echo "not a checkpoint" >"$tmp/text.h5"
expect 2 "text.h5 is not an HDF5 file" verify "$tmp/text.h5"
expect 2 "missing.h5 cannot be read" verify "$tmp/missing.h5"
expect 2 "trunc.h5" info "$tmp/trunc.h5"

# ---- export-llmc / import-llmc round trip ---------------------------------
expect 0 "version 3 \(fp32\), step 3" export-llmc "$C" "$tmp/a.bin"
checks=$((checks + 1))
size=$(wc -c <"$tmp/a.bin")
# 1024 + 4 * (Vp*C + maxT*C + L*(12C^2 + 13C) + 2C), Vp = 128
if [ "$size" -eq $((1024 + 4 * (128 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32))) ]; then
  echo "ok: a.bin is $size bytes"
else fail "a.bin is $size bytes"; fi
pycheck "export layout" check-export "$C" "$tmp/a.bin"
expect 0 "at step 0, zero AdamW moments" import-llmc "$tmp/a.bin" "$tmp/b.h5"
has "-model custom -n_layer 2 -n_embd 32 -n_head 4 -vocab_size 64 -seq_len 16 -resume"
expect 0 "ok: step 0, 84 datasets" verify "$tmp/b.h5"
pycheck "imported checkpoint" check-import "$tmp/b.h5" "$tmp/a.bin"
expect 0 "step 0 of" export-llmc "$tmp/b.h5" "$tmp/c.bin"
checks=$((checks + 1))
if cmp "$tmp/a.bin" "$tmp/c.bin"; then echo "ok: export -> import -> export is byte-identical"
else fail "export -> import -> export differs"; fi

# fsdp-train loads the imported file at W=2, F=2 and, with lr 0, writes
# the same weights back (the engine's own reshardable load and save)
checks=$((checks + 1))
# shellcheck disable=SC2086
if timeout 300 "$MPIEXEC" $PREFLAGS -n 2 "$TRAIN" -model custom -n_layer 2 -n_embd 32 -n_head 4 \
    -vocab_size 64 -seq_len 16 -resume "$tmp/b.h5" -steps 1 -lr 0 -lr_min 0 -log_every 0 \
    -checkpoint_dir "$tmp/E" -checkpoint_every 1 >"$tmp/train.out" 2>&1 &&
   grep -q "resumed from $tmp/b.h5 at step 0" "$tmp/train.out"; then
  echo "ok: fsdp-train -resume of the imported checkpoint"
else fail "fsdp-train -resume of the imported checkpoint"; sed 's/^/    /' "$tmp/train.out" | tail -5; fi
expect 0 "step 1 of" export-llmc "$tmp/E/ckpt_00000001.h5" "$tmp/e.bin"
checks=$((checks + 1))
if cmp "$tmp/a.bin" "$tmp/e.bin"; then echo "ok: weights through fsdp-train (lr 0) unchanged, bit for bit"
else fail "weights changed through fsdp-train -resume with lr 0"; fi

# ---- import of llm.c files made here: fp32, bf16, no padding ---------------
# L 1, C 16, NH 2, V 128 (= Vp: no pad rows), maxT 8
pycheck "make v3" make "$tmp/v3.bin" 3 8 128 1 2 16
pycheck "make v5" make "$tmp/v5.bin" 5 8 128 1 2 16
expect 0 "from llm.c version 3 \(fp32\)" import-llmc "$tmp/v3.bin" "$tmp/v3.h5"
pycheck "import v3" check-import "$tmp/v3.h5" "$tmp/v3.bin"
expect 0 "version 3 \(fp32\), step 0" export-llmc "$tmp/v3.h5" "$tmp/v3_again.bin"
checks=$((checks + 1))
if cmp "$tmp/v3.bin" "$tmp/v3_again.bin"; then echo "ok: import -> export of an llm.c file is byte-identical"
else fail "import -> export of v3.bin differs"; fi
expect 0 "from llm.c version 5 \(bf16\)" import-llmc "$tmp/v5.bin" "$tmp/v5.h5"
pycheck "import v5 (bf16 expanded exactly)" check-import "$tmp/v5.h5" "$tmp/v5.bin"

# ---- bad llm.c files: a message, exit 2, no output -------------------------
pycheck "make bad magic" make "$tmp/magic.bin" 3 8 128 1 2 16 20240520
pycheck "make version 4" make "$tmp/v4.bin" 4 8 128 1 2 16
pycheck "make truncated" make "$tmp/short.bin" 3 8 128 1 2 16 20240326 4
expect 2 "magic.bin is not an llm.c GPT-2 checkpoint: magic 20240520, expected 20240326" \
  import-llmc "$tmp/magic.bin" "$tmp/x.h5"
absent "$tmp/x.h5"
expect 2 "v4.bin has version 4" import-llmc "$tmp/v4.bin" "$tmp/x.h5"
absent "$tmp/x.h5"
expect 2 "short.bin is [0-9]+ bytes, but its header .* makes [0-9]+: truncated" \
  import-llmc "$tmp/short.bin" "$tmp/x.h5"
absent "$tmp/x.h5"
# a crafted header whose 4 + 12 L tensors wrap an int (L = 357913942), in a
# sparse file of exactly the size it claims: refused by its bounds, never
# laid out (the layout would be written past its end)
python3 -c '
import struct, sys
h = [20240326, 3, 2, 2, 357913942, 1, 1, 2] + [0] * 248
open(sys.argv[1], "wb").write(struct.pack("<256i", *h))' "$tmp/wrap.bin"
truncate -s $((1024 + 4 * (6 + 25 * 357913942))) "$tmp/wrap.bin"
expect 2 "wrap.bin has an invalid header: maxT 2, V 2, L 357913942" \
  import-llmc "$tmp/wrap.bin" "$tmp/x.h5"
absent "$tmp/x.h5"
rm -f "$tmp/wrap.bin"
head -c 100 "$tmp/a.bin" >"$tmp/hdr.bin"
expect 2 "hdr.bin is not an llm.c GPT-2 checkpoint: shorter than the 1024-byte header" \
  import-llmc "$tmp/hdr.bin" "$tmp/x.h5"
absent "$tmp/x.h5"
expect 2 "cannot open llm.c checkpoint .*nothere.bin" import-llmc "$tmp/nothere.bin" "$tmp/x.h5"
expect 2 "bad_shape.h5: /model/wpe has shape" export-llmc "$tmp/bad_shape.h5" "$tmp/x.bin"
absent "$tmp/x.bin"

# ---- existing outputs are never overwritten --------------------------------
echo keep >"$tmp/exists.h5"
echo keep >"$tmp/exists.bin"
expect 2 "output file .*exists.h5 exists" import-llmc "$tmp/a.bin" "$tmp/exists.h5"
expect 2 "output file .*exists.bin exists" export-llmc "$C" "$tmp/exists.bin"
expect 2 "output file .*a.bin exists" export-llmc "$C" "$tmp/a.bin"
checks=$((checks + 1))
if [ "$(cat "$tmp/exists.h5")" = keep ] && [ "$(cat "$tmp/exists.bin")" = keep ] &&
   cmp -s "$tmp/a.bin" "$tmp/c.bin"; then echo "ok: existing files untouched"
else fail "an existing output file was modified"; fi
absent

# ---- usage ------------------------------------------------------------------
expect 0 "20240326" -help
has "-weights_only"
has "/optim/exp_avg"
expect 2 "no subcommand" -weights_only
expect 2 "unknown subcommand 'inspect'" inspect "$C"
expect 2 "fsdp-ckpt export-llmc takes 2 files, got 1" export-llmc "$C"
expect 2 "unknown option -bogus" info "$C" -bogus 1

echo "test_fsdp_ckpt: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
