#!/bin/sh
# test_tune.sh: fsdp-plan -tune searches the options and its answer is the
# plan's own.  On a described 2-node x 8 cluster (fsdp-probe -describe) and
# the gpt2 preset at 16 ranks:
#  1. the listed candidates are sorted by predicted tokens/s, all within
#     the memory limit; the winner written with -tune_options_out, planned again
#     as an ordinary fsdp-plan run, has exactly the listed step time,
#     tokens/s and memory; fsdp-train accepts the file (tiny model, 1 step);
#  2. with a network 10^5 times slower than NVLink the winner keeps its
#     sharding groups inside a node (F <= 8); with ample memory and a fast
#     network, no candidate listed is slower than one that was not (the
#     first row is the maximum of a full listing); candidates that
#     predict alike (F 1: -prefetch, RAF, L change nothing) are listed
#     nearest the defaults first;
#  3. a memory limit just under the smallest configuration without
#     activation recomputation leaves only candidates with it;
#  4. a memory limit nothing fits is a usage error naming the smallest
#     memory any configuration needs, which is that configuration's
#     planned total; -tune without -profile is a usage error;
#  5. [Note: contended compute]: on one node of 8 ranks described with a
#     contended factor of 1.5, F 1 (all-reduces under the backward)
#     predicts a longer step and contention > 0 where the 8 ranks fill the
#     8 cores, the same step as without the factor (and as a profile of
#     before it, which says so) where the node has 16 cores; one rank on
#     one core (nothing communicated) predicts the same step with and
#     without the factor; -tune at -grad_accum 2 on the filled node lists,
#     for F 1 and K 2, -accum_comm 0 faster than -accum_comm 1 (whose
#     first micro-step's all-reduces run beside the second's compute), by
#     more than on the idle node (where -accum_comm 1 costs only the
#     zeroing of its gradient buffers every micro-step).
#   usage: test_tune.sh MPIEXEC "PREFLAGS" BINDIR
set -u
MPIEXEC=$1
PREFLAGS=$2
BIN=$3
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, $fails, $checks
testlib_tmpdir fsdp_test_tune
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }

describe() { # describe NAME NET_BW_PER_NODE
  "$BIN/fsdp-probe" -describe -describe_nodes 2 -describe_ranks_per_node 8 -describe_backend nccl \
    -describe_gemm_flops 4e14 -describe_stream_bw 2e12 -describe_memory 7e10 -describe_node_bw 3e11 \
    -describe_net_bw_per_node "$2" -probe_peak_flops 1e15 -profile_out "$tmp/$1.h5" >/dev/null 2>&1 ||
    fail "fsdp-probe -describe ($1)"
}
describe fast 4e11
describe slow 3e6
common="-world_size 16 -ranks_per_node 8 -device cuda -model gpt2 -param_dtype bf16 -batch_size 4 -grad_accum 2"

# ---- 1. the listing and the winner -------------------------------------------
# shellcheck disable=SC2086
if ! timeout 120 "$BIN/fsdp-plan" $common -profile "$tmp/fast.h5" -tune -tune_top 5000 \
     -tune_options_out "$tmp/win.opts" >"$tmp/tune.out" 2>&1; then
  fail "fsdp-plan -tune failed:"; tail -n 5 "$tmp/tune.out" | sed 's/^/    /'
else
  # shellcheck disable=SC2086
  timeout 60 "$BIN/fsdp-plan" $common -profile "$tmp/fast.h5" -options_file "$tmp/win.opts" \
    -summary json >"$tmp/win.json" 2>&1 || fail "planning the winner's options failed"
  python3 - "$tmp/tune.out" "$tmp/win.json" "$tmp/win.opts" <<'PY' || fail "the tuner's listing (above)"
import json, sys
rows = []
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 14 and f[0].isdigit():
        rows.append(dict(F=int(f[1]), wrap=int(f[2]), prefetch=f[3], raf=int(f[4]), rc=int(f[5]), B=int(f[6]),
                         K=int(f[7]), ac=int(f[8]), L=int(f[9]), step=float(f[10]), exposed=float(f[11]),
                         tps=float(f[12]), gib=float(f[13])))
head = [l for l in open(sys.argv[1]) if l.startswith("fsdp-plan -tune:")][0]
limit = float(head.split(" fit ")[1].split()[0])
bad = []
if len(rows) < 20: bad.append("only %d candidates listed" % len(rows))
if any(rows[i]["tps"] < rows[i + 1]["tps"] for i in range(len(rows) - 1)): bad.append("not sorted by tokens/s")
if any(r["gib"] > limit + 1e-3 for r in rows): bad.append("a candidate over the memory limit")
if any(r["B"] * r["K"] != 8 for r in rows): bad.append("B x K is not the 8 sequences per rank")
if {r["F"] for r in rows} - {1, 2, 4, 8, 16}: bad.append("an F that splits a node unevenly")
# -accum_comm searched where K > 1 (both listed), fixed (the default 1) where K = 1;
# -limit_all_gathers 1, 2, 4 where gathers are prefetched, else as given (the default 2)
if {r["ac"] for r in rows if r["K"] > 1} != {0, 1}: bad.append("-accum_comm 0 and 1 not both listed for K > 1")
if {r["ac"] for r in rows if r["K"] == 1} - {1}: bad.append("-accum_comm searched at K = 1")
if {r["L"] for r in rows if r["F"] > 1 and r["prefetch"] != "none"} != {1, 2, 4}: bad.append("L 1, 2, 4 not all listed")
if {r["L"] for r in rows if r["F"] == 1 or r["prefetch"] == "none"} - {2}: bad.append("L searched without prefetched gathers")
# equal predictions in a fixed order: at F 1 nothing is gathered, so
# candidates that differ only in -prefetch, RAF and L predict alike; the
# one nearest the defaults (backward, RAF, L 2) is listed first
groups = {}
for i, r in enumerate(rows):
    if r["F"] == 1: groups.setdefault((r["wrap"], r["rc"], r["B"], r["K"], r["ac"]), []).append(i)
for key, idx in groups.items():
    first = rows[idx[0]]
    if len({(rows[i]["step"], rows[i]["gib"]) for i in idx}) != 1:
        bad.append("F 1 %r: -prefetch, RAF or L change the prediction" % (key,))
    elif len(idx) > 1 and (first["prefetch"], first["raf"], first["L"]) != ("backward", 1, 2):
        bad.append("F 1 %r: equal predictions listed first as %s RAF %d L %d, not the defaults"
                   % (key, first["prefetch"], first["raf"], first["L"]))
w = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
top = rows[0]
got = (w["sharding_factor"], w["wrap"], w["prefetch"], w["reshard_after_forward"], int(w["recompute"]),
       w["batch_size"], w["grad_accum"], w["accum_comm"], w["limit_all_gathers"])
if got != (top["F"], top["wrap"], top["prefetch"], top["raf"], top["rc"], top["B"], top["K"], top["ac"], top["L"]):
    bad.append("the options file gives %r, the listing's first row %r" % (got, top))
p = w["predicted"]
def close(a, b, rel=2e-4): return abs(a - b) <= rel * abs(b)
if not close(p["step_time_ms"], top["step"]): bad.append("step %r vs listed %r" % (p["step_time_ms"], top["step"]))
if not close(p["tokens_per_s"], top["tps"]): bad.append("tokens/s %r vs listed %r" % (p["tokens_per_s"], top["tps"]))
if not close(w["memory"]["total_bytes"] / 2**30, top["gib"], 2e-3): bad.append("memory %r vs listed %r" % (w["memory"]["total_bytes"] / 2**30, top["gib"]))
for b in bad: print("   ", b)
sys.exit(1 if bad else 0)
PY
  # the file is an ordinary options file: fsdp-train takes it (after the
  # run's own options; the model here is tiny, the sharding must divide 4)
  sed -e 's/^-sharding_factor .*/-sharding_factor 2/' "$tmp/win.opts" >"$tmp/win4.opts"
  # shellcheck disable=SC2086
  timeout 120 "$MPIEXEC" $PREFLAGS -n 4 "$BIN/fsdp-train" -model tiny -steps 1 -log_every 0 \
    -options_file "$tmp/win4.opts" >"$tmp/train.out" 2>&1 || {
    fail "fsdp-train -options_file (the tuner's file) failed:"; tail -n 5 "$tmp/train.out" | sed 's/^/    /'; }
fi

# ---- 2. recomputation where memory needs it --------------------------------------
# a limit just under the smallest configuration without recomputation: every
# candidate left recomputes
limit=$(python3 - "$tmp/tune.out" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 14 and l.split()[0].isdigit()]
print(int(min(float(r[13]) for r in rows if r[5] == "0") * 2**30 * 0.999))
PY
)
# shellcheck disable=SC2086
if "$BIN/fsdp-plan" $common -profile "$tmp/fast.h5" -tune -tune_top 1000 -memory_limit "$limit" \
     >"$tmp/rc.out" 2>&1; then
  n0=$(awk 'NF == 14 && $1 ~ /^[0-9]+$/ && $6 == "0"' "$tmp/rc.out" | wc -l)
  n1=$(awk 'NF == 14 && $1 ~ /^[0-9]+$/ && $6 == "1"' "$tmp/rc.out" | wc -l)
  [ "$n0" -eq 0 ] && [ "$n1" -gt 0 ] || fail "memory limit $limit: $n0 candidates without and $n1 with recomputation listed"
else
  fail "fsdp-plan -tune -memory_limit $limit failed"; tail -n 3 "$tmp/rc.out"
fi

# ---- 3. a slow network keeps the groups inside a node ----------------------------
# shellcheck disable=SC2086
if "$BIN/fsdp-plan" $common -profile "$tmp/slow.h5" -tune -tune_top 1 >"$tmp/slow.out" 2>&1; then
  F=$(awk '$1 == "1" && NF == 14 {print $2}' "$tmp/slow.out")
  [ -n "$F" ] && [ "$F" -le 8 ] || { fail "slow network: the winner has F '$F', expected <= 8"; cat "$tmp/slow.out"; }
else
  fail "fsdp-plan -tune (slow network) failed"; tail -n 3 "$tmp/slow.out"
fi

# ---- 4. bad input -------------------------------------------------------------------
# shellcheck disable=SC2086
"$BIN/fsdp-plan" $common -profile "$tmp/fast.h5" -tune -memory_limit 1000 >"$tmp/bad.out" 2>"$tmp/bad.err"
st=$?
if [ $st -ne 2 ] || ! grep -q "none of .* configurations fits the memory limit of 1000 bytes" "$tmp/bad.err"; then
  fail "memory limit nothing fits: exit $st"; cat "$tmp/bad.err"
else
  # the smallest named is that configuration's planned total
  need=$(sed -n 's/.*the smallest needs \([0-9]*\) bytes.*/\1/p' "$tmp/bad.err")
  opts=$(sed -n 's/.*GiB: \(-sharding_factor [^)]*\)).*/\1/p' "$tmp/bad.err")
  # shellcheck disable=SC2086
  have=$("$BIN/fsdp-plan" $common $opts -summary json | tail -n 1 |
         python3 -c 'import json,sys; print(json.load(sys.stdin)["memory"]["total_bytes"])')
  [ -n "$need" ] && [ "$need" = "$have" ] || fail "the smallest memory named ($need, $opts) is not its plan's ($have)"
fi
# shellcheck disable=SC2086
"$BIN/fsdp-plan" $common -tune >"$tmp/bad.out" 2>"$tmp/bad.err"
st=$?
[ $st -eq 2 ] && grep -q -- "-tune needs -profile FILE" "$tmp/bad.err" || { fail "-tune without -profile: exit $st"; cat "$tmp/bad.err"; }

# ---- 5. contended compute ---------------------------------------------------------
onenode() { # onenode NAME RANKS CORES FACTOR
  "$BIN/fsdp-probe" -describe -describe_nodes 1 -describe_ranks_per_node "$2" -describe_backend nccl \
    -describe_gemm_flops 1e12 -describe_stream_bw 2e11 -describe_memory 7e10 -describe_node_bw 3e9 \
    -describe_cores_per_node "$3" -describe_contended_factor "$4" -profile_out "$tmp/$1.h5" >/dev/null 2>&1 ||
    fail "fsdp-probe -describe ($1)"
}
onenode busy 8 8 1.5
onenode idle 8 16 1.5
onenode old 8 8 0
onenode one 1 1 1.5
onenode one0 1 1 0
one="-ranks_per_node 8 -world_size 8 -device cuda -model gpt2 -batch_size 4 -sharding_factor 1 -prefetch backward"
for p in busy idle old; do
  # shellcheck disable=SC2086
  "$BIN/fsdp-plan" $one -profile "$tmp/$p.h5" -summary json 2>&1 | tail -n 1 >"$tmp/c-$p.json"
done
for p in one one0; do
  "$BIN/fsdp-plan" -ranks_per_node 1 -world_size 1 -device cuda -model gpt2 -batch_size 4 \
    -profile "$tmp/$p.h5" -summary json 2>&1 | tail -n 1 >"$tmp/c-$p.json"
done
python3 - "$tmp" <<'PY' || fail "contended compute (above)"
import json, sys
d = {}
for p in ("busy", "idle", "old", "one", "one0"):
    w = json.load(open("%s/c-%s.json" % (sys.argv[1], p)))
    d[p] = (w["predicted"]["step_time_ms"], w["predicted"]["contention_ms"],
            w["prediction"]["contended_factor"], w["prediction"]["contended_factor_from"])
bad = []
b, i, o = d["busy"], d["idle"], d["old"]
if not (b[0] > i[0] * 1.01 and b[1] > 0 and b[2] == 1.5): bad.append("filled node: %r against idle %r" % (b, i))
if not (i[0] == o[0] and i[1] == 0 and o[1] == 0 and i[2] == 1 and o[2] == 1): bad.append("idle core %r, old profile %r" % (i, o))
if "not in the profile" not in o[3] or "idle core" not in i[3]: bad.append("why: %r / %r" % (o[3], i[3]))
if not (d["one"][0] == d["one0"][0] and d["one"][1] == 0): bad.append("one rank: %r against %r" % (d["one"], d["one0"]))
for x in bad: print("   ", x)
sys.exit(1 if bad else 0)
PY
for p in busy idle; do
  # shellcheck disable=SC2086
  "$BIN/fsdp-plan" $one -batch_size 2 -grad_accum 2 -profile "$tmp/$p.h5" -tune -tune_top 100000 \
    >"$tmp/ac-$p.out" 2>&1 || fail "fsdp-plan -tune ($p)"
done
python3 - "$tmp/ac-busy.out" "$tmp/ac-idle.out" <<'PY' || fail "-tune and -accum_comm (above)"
import sys
def rows(path):
    r = {}
    for line in open(path):
        f = line.split()
        if len(f) == 14 and f[0].isdigit() and f[1] == "1" and f[7] == "2":
            r[tuple(f[2:6]) + (f[8],)] = float(f[10])
    return r
bad = []
margin = {}
for name, path in (("filled", sys.argv[1]), ("idle", sys.argv[2])):
    r = rows(path)
    keys = [k[:4] for k in r if k[4] == "0" and k[:4] + ("1",) in r]
    if not keys: bad.append("%s: no F 1, K 2 rows with both -accum_comm" % name)
    # what -accum_comm 1 costs over 0: on the idle node only the zeroing of
    # its gradient buffers every micro-step (-accum_comm 0 accumulates in
    # the shard, zeroed once), on the filled node also the contention
    margin[name] = {k: r[k + ("1",)] - r[k + ("0",)] for k in keys}
f, i = margin.get("filled", {}), margin.get("idle", {})
common = [k for k in f if k in i]
if f and not all(v > 0 for v in f.values()):
    bad.append("filled: -accum_comm 0 not faster in %d of %d" % (sum(v <= 0 for v in f.values()), len(f)))
if not common: bad.append("no F 1, K 2 configuration on both nodes")
elif not all(f[k] > i[k] * 1.001 + 1e-6 for k in common):
    bad.append("contention does not widen -accum_comm 1's cost: filled %r, idle %r" %
               ([round(f[k], 4) for k in common], [round(i[k], 4) for k in common]))
for x in bad: print("   ", x)
sys.exit(1 if bad else 0)
PY

if [ $fails -ne 0 ]; then
  echo "test_tune: $fails failure(s)"
  exit 1
fi
echo "test_tune: listing, winner, recomputation under a memory limit, slow network, 2 bad inputs and contended compute checked"
