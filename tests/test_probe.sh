#!/bin/sh
# test_probe.sh: fsdp-probe measures and writes a profile that says what it
# measured, and fsdp-plan -profile predicts from it by the stated rule.
#  1. fsdp-probe on 4 ranks as 2 emulated nodes x 2 (-model tiny): the
#     profile's attributes name the run (4 ranks, 2 nodes, 2 per node,
#     backend mpi, the model, the BLAS core); node, cross-node and world
#     levels have groups of 2, 2 and 4 whose members lie where they should
#     (node: same node; cross: the other node; world: both); every curve has one point per
#     doubling from -probe_min_bytes to -probe_max_bytes with exactly the
#     received volume of [Note: byte accounting] and positive times, and a
#     fit of non-negative terms; the matmul shapes are the tiny model's
#     block weights and its head with N = B*T; rates and memory positive.
#     The model's stages are timed at B = 2 and 1 (-wrap 1: 4 stages) in
#     3 rounds of one pass at each (every time positive, stage_rounds 3),
#     and again beside an all-reduce (the factor, the all-reduce's time and
#     volume, the cores per node recorded: the host's halved, as both
#     emulated nodes share it, nodes_per_host 2, and a quarter of its
#     memory per rank), and once more with a join after
#     each stage (what the lockstep costs beyond the slowest rank's stage
#     times positive), and two world all-gathers at
#     once against one (a factor recorded).
#  1b. With the default -probe_max_bytes the sizes reach the model's
#     largest unit (2 MiB for a 1.28 MB root, past the 1 MiB floor).
#  2. fsdp-plan -profile on the same topology: every predicted collective
#     time equals calls x latency + intra bytes / node bandwidth + inter
#     bytes / cross-node bandwidth recomputed here from the profile and the
#     plan's own byte counters; compute equals the probe's stage times plus
#     the optimizer; the gathers of the world-wide sharding group take the
#     world curve (at most the contended communication factor and the
#     two-at-once factor times it, plus a join per gather); the plan charges
#     the profile's join and factor, and multiplies every time by its
#     sustained factor (measured: above 0).
#  2b. [Note: sustained speed]: two described clusters alike but for a
#     sustained factor of 2.5 (against none): the plan's step, exposed
#     communication and compute are exactly 2.5 times as long.
#  3. fsdp-probe -describe: a 2-node x 8 cluster on paper gives the
#     stated latency and bandwidth at each level (the network's per-node
#     bandwidth shared by the node's ranks), and fsdp-plan's MFU and
#     tokens/s follow from its predicted step by their definitions.
#  4. Bad input, each a usage error (exit 2) naming what is wrong: no
#     -profile_out; a -profile_out in a missing directory (every rank
#     exits 2 and no file appears); a missing profile; an HDF5 file that is
#     not a profile; a profile of fewer nodes, other ranks per node, or
#     another back-end than the plan.
#   usage: test_probe.sh MPIEXEC "PREFLAGS" BINDIR
set -u
MPIEXEC=$1
PREFLAGS=$2
BIN=$3
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, $fails, $checks
testlib_tmpdir fsdp_test_probe

py=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import h5py, numpy' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: the profile checks need h5py and numpy (apt-get install python3-h5py python3-numpy)"
  exit 77
fi

# ---- 1. a probe and its file ------------------------------------------------
# shellcheck disable=SC2086
if ! timeout 240 "$MPIEXEC" $PREFLAGS -n 4 "$BIN/fsdp-probe" -model tiny -batch_size 2 \
     -ranks_per_node 2 -probe_min_bytes 1024 -probe_max_bytes 16384 -probe_reps 3 \
     -profile_out "$tmp/prof.h5" >"$tmp/probe.out" 2>"$tmp/probe.err"; then
  fail "fsdp-probe failed:"; tail -n 5 "$tmp/probe.err" | sed 's/^/    /'
  exit 1
fi
"$py" - "$tmp/prof.h5" <<'PY' || fail "the profile's contents (above)"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
a = f.attrs
def s(x): return x.decode() if isinstance(x, bytes) else str(x)
bad = []
def want(what, have, expect):
    if have != expect: bad.append("%s: %r, expected %r" % (what, have, expect))
want("kind", s(a["kind"]), "fsdp-profile")
want("world_size", int(a["world_size"]), 4)
want("nodes", int(a["nodes"]), 2)
want("ranks_per_node", int(a["ranks_per_node"]), 2)
want("backend", s(a["backend"]), "mpi")
want("model", s(a["model"]), "tiny")
if not s(a["blas_core"]): bad.append("blas_core empty")
if int(a["mem_available_bytes"]) <= 0: bad.append("mem_available_bytes not positive")
for k in ("attention_flops_per_s", "stream_bytes_per_s", "adamw_bytes_per_s"):
    if not float(a[k]) > 0: bad.append("%s = %r" % (k, a[k]))
# the tiny model (tests' preset: n_embd 32, vocab 64, seq_len 16) at B = 2
C, V, T, B = 32, 64, 16, 2
g = f["compute"]
names = [s(x) for x in g["gemm_name"][()]]
shapes = list(zip(g["gemm_N"][()].tolist(), g["gemm_C"][()].tolist(), g["gemm_OC"][()].tolist()))
expect = [("h.0/h.0.attn.c_attn.weight", (B * T, C, 3 * C)), ("h.0/h.0.attn.c_proj.weight", (B * T, C, C)),
          ("h.0/h.0.mlp.c_fc.weight", (B * T, C, 4 * C)), ("h.0/h.0.mlp.c_proj.weight", (B * T, 4 * C, C)),
          ("root/wte", (B * T, C, V))]
want("matmul shapes", list(zip(names, shapes)), expect)
if not all(r > 0 for r in g["gemm_flops_per_s"][()]): bad.append("a matmul rate is not positive")
sizes = {"node": 2, "cross": 2, "world": 4}
nbytes = [1024 * 2 ** i for i in range(5)]  # 1 KiB .. 16 KiB, doubling
# rank 0's groups: its node partner; the rank with its place on the other
# node; everyone
peers = {"node": (1, 0), "cross": (0, 1), "world": (1, 2)}
for lvl, n in sizes.items():
    la = f["collectives"][lvl].attrs
    want(lvl + " size", int(la["size"]), n)
    want(lvl + " peers (intra, inter)", (int(la["peers_intra"]), int(la["peers_inter"])), peers[lvl])
    for kind in ("all-gather", "reduce-scatter", "all-reduce"):
        c = f["collectives"][lvl][kind]
        elems = [b // 4 // n * n for b in nbytes]
        # received volume per rank ([Note: byte accounting] in coll.h)
        vol = [(2 if kind == "all-reduce" else 1) * (n - 1) * e * 4 // n for e in elems]
        want("%s/%s bytes" % (lvl, kind), c["bytes"][()].astype(int).tolist(), vol)
        if not all(t > 0 for t in c["seconds"][()]): bad.append("%s/%s: a time is not positive" % (lvl, kind))
        lat, bw = float(c.attrs["latency_s"]), float(c.attrs["bandwidth_bytes_per_s"])
        if lat < 0 or bw < 0 or (lat == 0 and bw == 0):
            bad.append("%s/%s: fit latency %g bandwidth %g" % (lvl, kind, lat, bw))
# the model run stage by stage ([Note: stages measured]): at B = 2 and its
# divisor 1, -wrap 1 (root, 2 blocks, root: 4 stages), every time positive
want("stage_batch", g["stage_batch"][()].tolist(), [2, 1])
want("stage_seq_len", int(g.attrs["stage_seq_len"]), T)
want("stage_params", int(g.attrs["stage_params"]), 2 * (12 * C * C + 13 * C) + V * C + T * C + 2 * C)
for k in ("stage_forward_s", "stage_backward_s"):
    x = g[k][()]
    want(k + " length", len(x), 2 * 4)
    if not all(t > 0 for t in x): bad.append("%s: a time is not positive" % k)
# [Note: micro-batches timed in turn]: -probe_reps 3 rounds of a pass at
# each micro-batch (a round that left a batch's pass untimed leaves a zero
# that the median of 3 keeps: the check above)
want("stage_rounds", int(g.attrs["stage_rounds"]), 3)
# [Note: contended compute]: the stages again beside an all-reduce, its
# mean time and received volume, and the cores the ranks see
if not float(g.attrs["contended_factor"]) > 0: bad.append("contended_factor %r" % g.attrs["contended_factor"])
# [Note: nodes sharing a host]: both emulated nodes run on this host, so
# each gets half its cores (at least 1) and a quarter of its memory per rank
import os
want("nodes_per_host", int(g.attrs["nodes_per_host"]), 2)
want("cores_per_node", int(g.attrs["cores_per_node"]), max(1, os.sysconf("SC_NPROCESSORS_ONLN") // 2))
avail = [int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable:")][0]
if not int(a["mem_available_bytes"]) < 0.375 * avail:
    bad.append("mem_available_bytes %d: not this host's MemAvailable (%d) over its 4 ranks"
               % (int(a["mem_available_bytes"]), avail))
if not float(g.attrs["contended_allreduce_s"]) > 0: bad.append("contended_allreduce_s %r" % g.attrs["contended_allreduce_s"])
if not float(g.attrs["contended_allreduce_bytes"]) > 0: bad.append("contended_allreduce_bytes %r" % g.attrs["contended_allreduce_bytes"])
# [Note: joining a collective]: what a join after each stage costs beyond
# the slowest rank's stage times (4 ranks time-sliced on the cores of one
# machine: never 0; test_probe_join.sh: a slow core is not drift); [Note: two collectives
# at once]: two world all-gathers against one
if not 0 < float(g.attrs["join_fraction"]) < 10: bad.append("join_fraction %r" % g.attrs["join_fraction"])
if not float(f["collectives"].attrs["concurrent_factor"]) > 0:
    bad.append("concurrent_factor %r" % f["collectives"].attrs["concurrent_factor"])
for b in bad: print("   ", b)
sys.exit(1 if bad else 0)
PY
grep -q "profile written to $tmp/prof.h5" "$tmp/probe.out" || fail "fsdp-probe did not say where it wrote"
# [Note: AdamW from memory]: timed over twice the last-level cache, split
# among the node's ranks (at least the scratch the model's kernels use)
# shellcheck disable=SC2046
set -- $(sed -n 's/.*AdamW timed over \([0-9]*\) MiB per rank (last-level cache \([0-9]*\) MiB, \([0-9]*\) ranks per node).*/\1 \2 \3/p' "$tmp/probe.out")
if [ $# -ne 3 ]; then
  fail "fsdp-probe did not say what it timed AdamW over"
elif [ "$2" -gt 0 ] && [ $(($1 * $3)) -lt $((2 * $2 - $3)) ] || [ "$3" -ne 2 ]; then
  fail "AdamW timed over $1 MiB per rank: under twice the $2 MiB cache over $3 ranks per node (want 2 per node)"
fi

# ---- 2. fsdp-plan -profile ---------------------------------------------------
if ! timeout 60 "$BIN/fsdp-plan" -world_size 4 -ranks_per_node 2 -model tiny -batch_size 2 \
     -profile "$tmp/prof.h5" -summary json >"$tmp/plan.out" 2>"$tmp/plan.err"; then
  fail "fsdp-plan -profile failed:"; tail -n 5 "$tmp/plan.err" | sed 's/^/    /'
else
  "$py" - "$tmp/prof.h5" "$tmp/plan.out" <<'PY' || fail "fsdp-plan's prediction from the profile (above)"
import sys, json, h5py
f = h5py.File(sys.argv[1], "r")
p = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
pr, cm = p["prediction"], p["comm_per_step"]
bad = []
# [Note: sustained speed]: every time of the profile at the speed the
# machine sustains (its mean stage times over their medians, at least 1)
sus = max(1.0, float(f["compute"].attrs["sustained_factor"]))
if not float(f["compute"].attrs["sustained_factor"]) > 0:
    bad.append("sustained_factor %r: not measured" % f["compute"].attrs["sustained_factor"])
if pr["sustained_factor"] != sus:
    bad.append("the plan charged a sustained factor of %r, the profile says %r" % (pr["sustained_factor"], sus))
def curve(lvl, kind):
    a = f["collectives"][lvl][kind].attrs
    bw = float(a["bandwidth_bytes_per_s"])
    return float(a["latency_s"]) * sus, bw / sus
# W = 4 in 2 nodes, full sharding: the sharding group leaves the node, no replicas
for kind, key in (("all-gather", "all_gather"), ("reduce-scatter", "reduce_scatter")):
    calls = cm[key + "_calls"]
    intra, inter = cm[key + "_intra_node_bytes"], cm[key + "_inter_node_bytes"]
    (nl, nb), (cl, cb) = curve("node", kind), curve("cross", kind)
    want = calls * cl + (intra / nb if nb else 0) + (inter / cb if cb else 0)
    have = pr[key + "_s"]
    if abs(have - want) > 1e-12 + 1e-9 * abs(want):
        bad.append("%s: plan %r, from the profile %r" % (key, have, want))
if pr["all_reduce_s"] != 0: bad.append("all_reduce_s %r without replicas" % pr["all_reduce_s"])
# the probe ran this model at this micro-batch: compute is its stages'
# times (B = 2: the first row) plus the optimizer ([Note: stages measured])
g = f["compute"]
n = len(g["stage_forward_s"]) // len(g["stage_batch"])
stages = float(sum(g["stage_forward_s"][:n]) + sum(g["stage_backward_s"][:n])) * sus
if pr.get("stages_measured") is not True: bad.append("stages_measured %r" % pr.get("stages_measured"))
# [Note: the optimizer's bytes]: AdamW 28, the norm 4 and zeroing 8 bytes
# per shard element, at the profile's AdamW rate
opt = 40.0 * (p["memory"]["param_shard_bytes"] / 4) / float(f.attrs["adamw_bytes_per_s"]) * sus
if abs(pr["optimizer_s"] - opt) > 1e-12 + 1e-9 * opt:
    bad.append("optimizer_s %r, 40 bytes per shard element at the AdamW rate give %r" % (pr["optimizer_s"], opt))
parts = stages + pr["optimizer_s"]
if abs(pr["compute_s"] - parts) > 1e-12 + 1e-9 * parts:
    bad.append("compute_s %r is not the measured stages + optimizer %r" % (pr["compute_s"], parts))
# the sharding group is the world the probe measured: each gather takes the
# world curve for its volume (fsdp-plan's CallSeconds), not the split
q = p["predicted"]
lat, bw = curve("world", "all-gather")
gb = cm["all_gather_calls"] * lat + (cm["all_gather_bytes"] / bw if bw else 0)
# [Note: contended compute]: prefetched gathers at the contended rate, the
# on-demand ones alone: between the two (equal at factor 1)
# [Note: joining a collective]: each at most the join fraction of the
# compute before it longer (at most the step's compute); [Note: two
# collectives at once]: at most the factor beside a reduction
fc = pr["contended_comm_factor"]
join, fb = float(g.attrs["join_fraction"]), max(1.0, float(f["collectives"].attrs["concurrent_factor"]))
if pr["join_fraction"] != join or pr["concurrent_factor"] != fb:
    bad.append("the plan charged a join of %r and two at once x%r, the profile says %r and %r" % (pr["join_fraction"], pr["concurrent_factor"], join, fb))
busy = q["gather_stream_busy_ms"] * 1e-3
top = fc * fb * gb + cm["all_gather_calls"] * join * q["compute_ms"] * 1e-3
if not (gb * (1 - 1e-9) <= busy <= top * (1 + 1e-9)):
    bad.append("gather stream busy %r s, the world curve gives %r (comm factor %r, join %r, two at once x%r)" % (busy, gb, fc, join, fb))
if not pr["gemm_s"] > 0: bad.append("gemm_s %r" % pr["gemm_s"])
comm = pr["intra_comm_s"] + pr["inter_comm_s"]
if abs(comm - (pr["all_gather_s"] + pr["reduce_scatter_s"])) > 1e-12 + 1e-9 * comm:
    bad.append("intra + inter comm is not the collectives' sum")
if abs(pr["step_time_s_no_overlap"] - (pr["compute_s"] + comm)) > 1e-12 + 1e-9 * comm:
    bad.append("step_time_s_no_overlap is not compute + comm")
for b in bad: print("   ", b)
sys.exit(1 if bad else 0)
PY
fi

# ---- 1b. the default message range: up to the model's largest unit ---------------
# (a root of 5000 x 64 + 16 x 64 + 128 parameters, 1.28 MB in fp32: the
# sizes double from 64 KiB to 2 MiB, past the 1 MiB floor)
# shellcheck disable=SC2086
if ! timeout 120 "$MPIEXEC" $PREFLAGS -n 2 "$BIN/fsdp-probe" -model custom -n_layer 1 -n_embd 64 \
     -n_head 2 -vocab_size 5000 -seq_len 16 -batch_size 1 -probe_compute 0 -probe_reps 1 \
     -probe_min_bytes 65536 -profile_out "$tmp/unit.h5" >"$tmp/unit.out" 2>&1; then
  fail "fsdp-probe (default -probe_max_bytes) failed:"; tail -n 5 "$tmp/unit.out" | sed 's/^/    /'
else
  "$py" - "$tmp/unit.h5" <<'PY' || fail "the default message range (above)"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
got = f["collectives"]["node"]["all-gather"]["bytes"][()].astype(int).tolist()
want = [65536 * 2 ** i // 2 for i in range(6)]  # received: half the buffer of 2 ranks
if got != want:
    print("    node all-gather received bytes %r, expected %r" % (got, want))
    sys.exit(1)
if "stage_forward_s" in f["compute"] and len(f["compute"]["stage_forward_s"]):
    print("    -probe_compute 0 timed the stages"); sys.exit(1)
PY
fi

# ---- 3. a cluster on paper (-describe) ----------------------------------------
if ! timeout 60 "$BIN/fsdp-probe" -describe -describe_nodes 2 -describe_ranks_per_node 8 \
     -describe_backend nccl -describe_gemm_flops 4e14 -describe_stream_bw 2e12 -describe_memory 7e10 \
     -describe_node_bw 3e11 -describe_node_latency 1e-5 -describe_net_bw_per_node 4e11 \
     -describe_net_latency 2e-5 -probe_peak_flops 1e15 -profile_out "$tmp/paper.h5" \
     >"$tmp/desc.out" 2>&1; then
  fail "fsdp-probe -describe failed:"; tail -n 5 "$tmp/desc.out" | sed 's/^/    /'
elif ! timeout 60 "$BIN/fsdp-plan" -world_size 16 -ranks_per_node 8 -device cuda -model gpt2 \
     -batch_size 4 -param_dtype bf16 -profile "$tmp/paper.h5" -summary json >"$tmp/plan2.out" 2>&1; then
  fail "fsdp-plan with the described profile failed:"; tail -n 5 "$tmp/plan2.out" | sed 's/^/    /'
else
  "$py" - "$tmp/paper.h5" "$tmp/plan2.out" <<'PY' || fail "the described profile or its prediction (above)"
import sys, json, h5py
f = h5py.File(sys.argv[1], "r")
p = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
bad = []
a = f.attrs
def s(x): return x.decode() if isinstance(x, bytes) else str(x)
if s(a["source"]) != "described": bad.append("source %r" % s(a["source"]))
if (int(a["world_size"]), int(a["nodes"]), int(a["ranks_per_node"])) != (16, 2, 8): bad.append("shape")
# node: 8 ranks at 3e11; cross: 2 nodes, each node's 4e11 shared by its 8 ranks; world: the slower
want = {"node": (1e-5, 3e11, 8, 7, 0), "cross": (2e-5, 5e10, 2, 0, 1), "world": (2e-5, 5e10, 16, 7, 8)}
for lvl, (lat, bw, n, pi, pe) in want.items():
    g = f["collectives"][lvl]
    if (int(g.attrs["size"]), int(g.attrs["peers_intra"]), int(g.attrs["peers_inter"])) != (n, pi, pe):
        bad.append("%s group" % lvl)
    for kind in ("all-gather", "reduce-scatter", "all-reduce"):
        c = g[kind].attrs
        if abs(c["latency_s"] - lat) > 1e-9 * lat or abs(c["bandwidth_bytes_per_s"] - bw) > 1e-6 * bw:
            bad.append("%s/%s: %r %r" % (lvl, kind, c["latency_s"], c["bandwidth_bytes_per_s"]))
pr, q = p["prediction"], p["predicted"]
mfu = pr["flop_per_step"] / (q["step_time_ms"] * 1e-3 * 1e15)
if abs(q["mfu"] - mfu) > 1e-9 * mfu: bad.append("mfu %r, expected %r" % (q["mfu"], mfu))
tps = 16 * 4 * 1024 / (q["step_time_ms"] * 1e-3)
if abs(q["tokens_per_s"] - tps) > 1e-9 * tps: bad.append("tokens_per_s %r, expected %r" % (q["tokens_per_s"], tps))
if not (q["step_time_ms"] >= q["compute_ms"] > 0): bad.append("step %r < compute %r" % (q["step_time_ms"], q["compute_ms"]))
if abs(q["step_time_ms"] - q["compute_ms"] - q["exposed_comm_ms"]) > 1e-9 * q["step_time_ms"]:
    bad.append("step != compute + exposed")
for b in bad: print("   ", b)
sys.exit(1 if bad else 0)
PY
fi

# ---- 4. bad input --------------------------------------------------------------
# expect_usage NAME PATTERN COMMAND...: exit 2 and PATTERN on stderr
expect_usage() {
  name=$1 pattern=$2
  shift 2
  "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  st=$?
  if [ $st -ne 2 ]; then fail "$name: exit $st, expected 2"; tail -n 3 "$tmp/bad.err" | sed 's/^/    /'
  elif ! grep -q -- "$pattern" "$tmp/bad.err"; then
    fail "$name: message lacks '$pattern':"; sed 's/^/    /' "$tmp/bad.err" | head -n 5
  fi
}
# shellcheck disable=SC2086
expect_usage "no -profile_out" "needs -profile_out" timeout 60 "$MPIEXEC" $PREFLAGS -n 2 "$BIN/fsdp-probe" -model tiny
# shellcheck disable=SC2086
expect_usage "missing directory" "$tmp/nodir.*not writable" timeout 60 "$MPIEXEC" $PREFLAGS -n 2 \
  "$BIN/fsdp-probe" -model tiny -profile_out "$tmp/nodir/p.h5"
[ -e "$tmp/nodir" ] && fail "a directory appeared for the bad -profile_out"
expect_usage "missing profile" "$tmp/none.h5: cannot read" "$BIN/fsdp-plan" -world_size 4 \
  -ranks_per_node 2 -model tiny -profile "$tmp/none.h5"
"$py" -c "import h5py; h5py.File('$tmp/other.h5', 'w').create_dataset('x', data=[1])"
expect_usage "foreign HDF5" "other.h5 is an HDF5 file but not an fsdp profile" "$BIN/fsdp-plan" \
  -world_size 4 -ranks_per_node 2 -model tiny -profile "$tmp/other.h5"
echo "not hdf5" >"$tmp/text.h5"
expect_usage "not HDF5" "text.h5 is not an HDF5 file" "$BIN/fsdp-plan" -world_size 4 \
  -ranks_per_node 2 -model tiny -profile "$tmp/text.h5"
expect_usage "more nodes than measured" "measured on 2 node(s) but the plan spans 4" \
  "$BIN/fsdp-plan" -world_size 8 -ranks_per_node 2 -model tiny -profile "$tmp/prof.h5"
expect_usage "other ranks per node" "measured with 2 ranks per node but the plan has 4" \
  "$BIN/fsdp-plan" -world_size 8 -ranks_per_node 4 -model tiny -profile "$tmp/prof.h5"
expect_usage "other back-end" "measured with the mpi back-end but this plan runs on nccl" \
  "$BIN/fsdp-plan" -world_size 4 -ranks_per_node 2 -model tiny -device cuda -profile "$tmp/prof.h5"

# ---- 2b. the sustained factor: every time of the profile, nothing else -------
for sf in 0 2.5; do
  "$BIN/fsdp-probe" -describe -describe_nodes 2 -describe_ranks_per_node 2 -describe_backend mpi \
    -describe_gemm_flops 4e10 -describe_stream_bw 2e10 -describe_memory 7e9 -describe_node_bw 3e9 \
    -describe_net_bw_per_node 1e9 -describe_join_fraction 0.1 -describe_concurrent_factor 1.3 \
    -describe_contended_factor 1.5 -describe_cores_per_node 2 -describe_sustained_factor "$sf" \
    -profile_out "$tmp/sus$sf.h5" >/dev/null 2>&1 || fail "fsdp-probe -describe_sustained_factor $sf"
  "$BIN/fsdp-plan" -world_size 4 -ranks_per_node 2 -model tiny -batch_size 2 -sharding_factor 2 \
    -profile "$tmp/sus$sf.h5" -summary json >"$tmp/sus$sf.json" 2>&1 ||
    fail "fsdp-plan on the described profile with sustained factor $sf"
done
"$py" - "$tmp/sus0.json" "$tmp/sus2.5.json" <<'PY' || fail "the sustained factor (above)"
import sys, json
a, b = (json.loads(open(x).read().strip().splitlines()[-1]) for x in sys.argv[1:3])
bad = []
if (a["prediction"]["sustained_factor"], b["prediction"]["sustained_factor"]) != (1, 2.5):
    bad.append("factors charged %r and %r, expected 1 and 2.5" % (a["prediction"]["sustained_factor"], b["prediction"]["sustained_factor"]))
for k in ("step_time_ms", "exposed_comm_ms", "compute_ms"):
    x, y = a["predicted"][k], b["predicted"][k]
    if not (x > 0 and abs(y - 2.5 * x) <= 1e-9 * y):
        bad.append("%s: %r without the factor, %r with 2.5" % (k, x, y))
    else:
        print("ok: %s %.6g ms -> %.6g ms at a sustained factor of 2.5" % (k, x, y))
for x in bad: print("   ", x)
sys.exit(1 if bad else 0)
PY

expect_usage "describe without a rate" "-describe needs -describe_gemm_flops" "$BIN/fsdp-probe" \
  -describe -describe_nodes 2 -profile_out "$tmp/x.h5"

if [ $fails -ne 0 ]; then
  echo "test_probe: $fails failure(s)"
  exit 1
fi
echo "test_probe: probe file, plan prediction, a described cluster and 9 bad inputs checked"
