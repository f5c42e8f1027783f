#!/bin/sh
# test_example.sh: examples/ used the way a user uses it, against an
# installed libfsdp only:
# - `make install DESTDIR=TMP`, then examples/ (copied out of the tree)
#   built with its own Makefile, the MPI wrapper and that prefix's fsdp.pc
#   alone (PKG_CONFIG_LIBDIR: no other .pc is seen); its compile lines name
#   no source or build directory and the programs load the installed
#   libfsdp;
# - FsdpModelFamilyRegister (tests/example/family_register.c): the family is
#   found by name; a duplicate name, a preset GPT has and a missing
#   operation are usage errors that register nothing;
# - gradcheck_mixer: every parameter's backward gradient matches finite
#   differences of the forward (within 2%);
# - train_mixer on 2 ranks (full sharding): 16 steps uninterrupted, then 8
#   steps writing checkpoints and a run file and 8 more resumed from the
#   step-8 checkpoint: the loss falls; the resumed steps' losses equal the
#   uninterrupted run's bit for bit; the run file has one row per step
#   1-16 with those losses and family mixer; the last checkpoint holds the
#   family mixer and exactly the model's parameters (names, shapes, count =
#   the summary's param_count), the token mixing's upper triangle still 0
#   (causal) and its lower triangle trained away from the running mean.
#   usage: test_example.sh BUILDDIR SRCDIR MPIEXEC "PREFLAGS"
set -u
builddir=$1 srcdir=$2 mpiexec=$3 preflags=$4
tmp=$(mktemp -d /tmp/fsdp_test_example.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

for tool in make pkg-config h5dump python3; do
    command -v $tool >/dev/null || { echo "$tool not found: skipped"; exit 77; }
done
mpicc=$(sed -n 's/^MPICC = //p' "$builddir/Makefile")
[ -n "$mpicc" ] || { echo "FAIL: no MPICC in $builddir/Makefile"; exit 1; }
srcdir=$(cd "$srcdir" && pwd -P) builddir=$(cd "$builddir" && pwd -P)

root=$tmp/root
if ! make -s -C "$builddir" install DESTDIR="$root" >"$tmp/install.log" 2>&1; then
    echo "FAIL: make install DESTDIR=$root"; tail -20 "$tmp/install.log"; exit 1
fi
pc=$(find "$root" -name fsdp.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no fsdp.pc installed"; exit 1; }
pcdir=$(dirname "$pc")

# ---- build: the examples' Makefile, that prefix's pkg-config only ---------
# --define-prefix: fsdp.pc's prefix becomes where the .pc lies (DESTDIR's
# copy of the prefix), what a user with PKG_CONFIG_PATH=<prefix>/lib/pkgconfig gets
ex=$tmp/examples
# (a distcheck source tree is read-only: so would the copy be)
cp -R "$srcdir/examples" "$ex" && chmod -R u+w "$ex" && make -s -C "$ex" clean >/dev/null
cp "$srcdir/tests/example/family_register.c" "$ex/"
if ! PKG_CONFIG_LIBDIR=$pcdir PKG_CONFIG_PATH= make -C "$ex" MPICC="$mpicc" \
        PKG_CONFIG="pkg-config --define-prefix" CFLAGS="-O2 -Werror" \
        PROGRAMS="train_mixer gradcheck_mixer family_register" >"$tmp/build.log" 2>&1; then
    echo "FAIL: make -C examples:"; cat "$tmp/build.log"; exit 1
fi
grep "^$mpicc" "$tmp/build.log"
grep -q -e "$srcdir" -e "$builddir" "$tmp/build.log" &&
    fail "the examples' build names the source or build tree"
grep -q -- "-I$root/.*include/fsdp" "$tmp/build.log" || fail "the examples' build does not use the installed headers"
for p in train_mixer gradcheck_mixer family_register; do
    loaded=$(ldd "$ex/$p" | awk '$1 ~ /^libfsdp\.so/ {print $3}')
    case $loaded in
        "$root"/*) ;;
        *) fail "$p loads libfsdp from '$loaded', not from $root" ;;
    esac
done

run() { # run NP OUT program options...
    np=$1 out=$2
    shift 2
    # shellcheck disable=SC2086
    (cd "$tmp" && timeout 120 "$mpiexec" $preflags -n "$np" "$@" >"$out" 2>"$out.err")
}

# ---- the registry -----------------------------------------------------------
run 1 "$tmp/register" "$ex/family_register" || fail "family_register exited $?"
cat "$tmp/register"
n=$(grep -c '^ok:' "$tmp/register")
[ "$n" -eq 9 ] || fail "family_register: $n of 9 checks ok"

# ---- gradients ----------------------------------------------------------------
run 1 "$tmp/grad" "$ex/gradcheck_mixer" || fail "gradcheck_mixer exited $?"
cat "$tmp/grad"
n=$(grep -c ' ok$' "$tmp/grad")
[ "$n" -eq 22 ] || fail "gradcheck_mixer: $n of the 22 parameters' gradients ok"

# ---- training, checkpoints, resume, run file ---------------------------------
# a constant rate (-lr_min = -lr, no warmup): the 8-step run's steps are the
# 16-step run's first 8
common="-lr 1e-2 -lr_min 1e-2 -warmup 0 -seed 5 -log_every 1 -summary json"
run 2 "$tmp/full" "$ex/train_mixer" $common -steps 16 ||
    { fail "the 16-step run exited $?"; cat "$tmp/full.err"; }
ckpt="-checkpoint_dir $tmp/ck -checkpoint_every 4 -metrics $tmp/run.h5"
run 2 "$tmp/first" "$ex/train_mixer" $common $ckpt -steps 8 ||
    { fail "the first 8 steps exited $?"; cat "$tmp/first.err"; }
run 2 "$tmp/rest" "$ex/train_mixer" $common $ckpt -steps 16 -resume auto ||
    { fail "the resumed run exited $?"; cat "$tmp/rest.err"; }
grep -q "^resumed from $tmp/ck/ckpt_00000008.h5 at step 8\$" "$tmp/rest" ||
    fail "the resumed run did not resume from ckpt_00000008.h5: $(grep resumed "$tmp/rest")"
ls "$tmp/ck"

python3 - "$tmp" <<'PY' || fails=$((fails + 1))
import json, re, subprocess, sys
tmp = sys.argv[1]
bad = []
def summary(name):
    return json.loads([l for l in open(f"{tmp}/{name}") if l.startswith("{")][-1])
def h5(args):
    return subprocess.run(["h5dump"] + args, capture_output=True, text=True, check=True).stdout
def data(path, dset):
    text = h5(["-m", "%.17g", "-y", "-w", "0", "-d", dset, path])
    body = text.split("DATA {", 1)[1].split("}", 1)[0]
    return [float(x) for x in re.split(r"[,\s]+", body) if x]
def attr(path, name):
    return re.search(r'\(0\): "([^"]*)"', h5(["-a", name, path])).group(1)

full, first, rest = summary("full"), summary("first"), summary("rest")
L = full["losses"]
if len(L) != 16: bad.append(f"the 16-step run has {len(L)} losses")
if full["model"].get("family") != "mixer": bad.append(f"summary's family {full['model'].get('family')}")
if full["world_size"] != 2 or full["sharding_factor"] != 2: bad.append("not 2 ranks fully sharded")
# the loss falls: the last four steps' mean well below the first four's
head, tail = sum(L[:4]) / 4, sum(L[-4:]) / 4
print(f"losses {[round(x, 4) for x in L]}: mean of steps 1-4 {head:.4f}, 13-16 {tail:.4f}")
if not tail < head - 0.15: bad.append(f"the loss did not fall: {head:.4f} -> {tail:.4f}")
# checkpoint and resume reproduce the uninterrupted run bit for bit
if first["losses"] != L[:8]: bad.append(f"first 8 steps {first['losses']} != {L[:8]}")
if rest["first_step"] != 8 or rest["losses"] != L[8:]:
    bad.append(f"resumed at {rest['first_step']}: {rest['losses']} != {L[8:]}")
else:
    print("ok: steps 9-16 resumed from the step-8 checkpoint equal the uninterrupted run's")

# the run file: one row per step, the losses, the family
run = f"{tmp}/run.h5"
steps, losses = data(run, "/metrics/step"), data(run, "/metrics/loss")
if steps != list(range(1, 17)): bad.append(f"run file steps {steps}")
if losses != L: bad.append(f"run file losses {losses} != {L}")
if attr(run, "/model_family") != "mixer": bad.append("run file's model_family is not mixer")
print(f"run file: {len(steps)} step rows, family {attr(run, '/model_family')}")

# the checkpoint: family, the model's parameters, the causal token mixing
ck = f"{tmp}/ck/ckpt_00000016.h5"
if attr(ck, "/model/family") != "mixer": bad.append("checkpoint's /model/family is not mixer")
shapes = {m.group(1): tuple(int(d) for d in m.group(2).split(","))
          for m in re.finditer(r'DATASET "([^"]+)" \{\s*DATATYPE[^\n]*\n\s*DATASPACE\s+SIMPLE \{ \(([^)]*)\)',
                               h5(["-H", "-g", "/model", ck]))}
want = {"wte": (64, 32), "wpe": (16, 32), "ln_f.weight": (32,), "ln_f.bias": (32,)}
for l in range(2):
    for n, s in [("ln_1.weight", (32,)), ("ln_1.bias", (32,)), ("token_mix.weight", (16, 16)),
                 ("ln_2.weight", (32,)), ("ln_2.bias", (32,)), ("fc.weight", (128, 32)),
                 ("fc.bias", (128,)), ("proj.weight", (32, 128)), ("proj.bias", (32,))]:
        want[f"mix.{l}.{n}"] = s
if shapes != want: bad.append(f"checkpoint parameters {sorted(shapes.items())} != {sorted(want.items())}")
count = 0
for s in shapes.values():
    n = 1
    for d in s: n *= d
    count += n
if count != full["model"]["param_count"]: bad.append(f"checkpoint holds {count} values, param_count {full['model']['param_count']}")
W = data(ck, "/model/mix.0.token_mix.weight")
upper = [W[t * 16 + s] for t in range(16) for s in range(t + 1, 16)]
moved = sum(abs(W[t * 16 + s] - 1.0 / (t + 1)) > 1e-4 for t in range(16) for s in range(t + 1))
if any(upper): bad.append("token_mix.weight's upper triangle is not 0: a token sees later ones")
if moved < 100: bad.append(f"only {moved} of 136 causal token-mixing weights trained")
print(f"checkpoint: family mixer, {len(shapes)} parameters, {count} values; token mixing: "
      f"upper triangle 0, {moved} of 136 causal weights trained")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY

[ $fails -eq 0 ] && echo "PASS" && exit 0
echo "$fails failure(s)"; exit 1
