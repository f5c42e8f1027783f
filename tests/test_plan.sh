#!/bin/sh
# test_plan.sh: fsdp-plan's numbers equal what fsdp-train measures.
# For each configuration (full, hybrid, replicated, RAF/NRAF, fp32/bf16,
# wrap and limiter, gradient accumulation, cyclic placement, sharding
# across nodes, odd sizes that need padding, activation recomputation) fsdp-train runs 2 steps at W
# ranks and fsdp-plan plans the same options with -world_size W; every
# unit's numel and padded numel, the shard, optimizer, gather-ring, compute
# and gradient buffer bytes, the activation bytes, per-step bytes and calls of every collective
# kind with their intra/inter-node split, and the most gathers in flight
# must be equal, exactly.
# Then: -recompute 1 adds the recomputed forward to the predicted step's
# time, not to the model FLOP; gpt-175b on 512 ranks (8 per node) plans in seconds (without touching the model), with
# shards summing to the model; so do 100000 layers (one unit, or 4000
# units); bad topology options and -wrap / -n_layer beyond the model or
# the runtime's stage limit are usage errors.
#   usage: test_plan.sh MPIEXEC "PREFLAGS" BINDIR   (BINDIR holds fsdp-train and fsdp-plan)
set -u
MPIEXEC=$1
PREFLAGS=$2
BIN=$3
# shellcheck source=tests/testlib.sh
. "$(dirname "$0")/testlib.sh"   # fail, $fails, $checks
testlib_tmpdir fsdp_test_plan

# compare NAME NP OPTIONS...: run both, compare the JSON summaries
compare() {
  name=$1 np=$2
  shift 2
  checks=$((checks + 1))
  # shellcheck disable=SC2086
  if ! timeout 120 "$MPIEXEC" $PREFLAGS -n "$np" "$BIN/fsdp-train" -steps 2 -log_every 0 \
       -summary json "$@" >"$tmp/train.out" 2>"$tmp/train.err"; then
    echo "FAIL: $name: fsdp-train $* at $np ranks failed:"; tail -n 5 "$tmp/train.err" | sed 's/^/    /'
    fails=$((fails + 1)); return
  fi
  if ! timeout 60 "$BIN/fsdp-plan" -world_size "$np" -steps 2 -summary json "$@" \
       >"$tmp/plan.out" 2>"$tmp/plan.err"; then
    echo "FAIL: $name: fsdp-plan -world_size $np $* failed:"; tail -n 5 "$tmp/plan.err" | sed 's/^/    /'
    fails=$((fails + 1)); return
  fi
  if python3 - "$name" "$tmp/train.out" "$tmp/plan.out" <<'PY'
import json, sys
name, tf, pf = sys.argv[1:]
t = json.loads(open(tf).read().strip().splitlines()[-1])
p = json.loads(open(pf).read().strip().splitlines()[-1])
keys = ["world_size", "sharding_factor", "replica_size", "ranks_per_node", "nodes"]
keys += ["memory." + k for k in ("param_shard_bytes", "grad_shard_bytes", "optim_state_bytes",
                                "gather_buffer_bytes", "compute_buffer_bytes", "grad_buffer_bytes",
                                "activation_bytes")]
keys += ["comm_per_step." + k for k in ("all_gather_bytes", "reduce_scatter_bytes", "all_reduce_bytes",
                                        "all_gather_calls", "reduce_scatter_calls", "all_reduce_calls",
                                        "intra_node_bytes", "inter_node_bytes")]
keys += ["comm_time_per_step.max_gathers_in_flight"]
def get(d, k):
    for part in k.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d
bad = [(k, get(t, k), get(p, k)) for k in keys if get(t, k) is None or get(t, k) != get(p, k)]
tu = [(u["name"], u["numel"], u["padded_numel"]) for u in t["units"]]
pu = [(u["name"], u["numel"], u["padded_numel"]) for u in p["units"]]
if tu != pu:
    first = next((i for i in range(min(len(tu), len(pu))) if tu[i] != pu[i]), min(len(tu), len(pu)))
    bad.append(("units (%d vs %d), first differing #%d" % (len(tu), len(pu), first),
                tu[first] if first < len(tu) else None, pu[first] if first < len(pu) else None))
# the members both programs write (driver/summary.c): the same key set in
# each shared part, and for the configuration the same values
shared = {"": ["world_size", "sharding_factor", "replica_size", "ranks_per_node", "nodes", "model",
               "batch_size", "wrap", "reshard_after_forward", "limit_all_gathers", "grad_accum",
               "accum_comm", "prefetch", "recompute", "attention", "units", "memory", "comm_per_step", "comm_time_per_step",
               "precision"],
          "model": ["name", "n_layer", "n_embd", "n_head", "vocab_size", "seq_len", "param_count"],
          "memory": [k[7:] for k in keys if k.startswith("memory.")],
          "comm_per_step": [k[14:] for k in keys if k.startswith("comm_per_step.")],
          "comm_time_per_step": ["max_gathers_in_flight"],
          "precision": ["param_dtype", "reduce_dtype", "compute_dtype", "tf32", "gemm"]}
for part, want in shared.items():
    a, b = (get(d, part) if part else d for d in (t, p))
    both = set(a or {}) & set(b or {})
    if not both >= set(want):
        bad.append(("keys of %s missing in one" % (part or "the summary"), sorted(set(want) - set(a or {})),
                    sorted(set(want) - set(b or {}))))
for part in ("model", "units"):
    ka = [sorted(x) for x in (t[part] if part == "units" else [t[part]])]
    kb = [sorted(x) for x in (p[part] if part == "units" else [p[part]])]
    if ka != kb:
        bad.append(("key sets of %s" % part, ka[:1], kb[:1]))
config = ["model", "batch_size", "wrap", "reshard_after_forward", "limit_all_gathers", "grad_accum",
          "accum_comm", "prefetch", "recompute", "attention", "precision.param_dtype", "precision.reduce_dtype",
          "precision.compute_dtype", "precision.tf32", "precision.gemm", "units"]
bad += [(k, get(t, k), get(p, k)) for k in config if get(t, k) != get(p, k)]
if bad:
    print("FAIL: %s: fsdp-plan differs from fsdp-train's measured counters:" % name)
    for k, a, b in bad:
        print("    %-36s measured %-14s planned %s" % (k, a, b))
    sys.exit(1)
c = t["comm_per_step"]
print("ok: %s: %d units, shard %d B, gather ring %d B, per step AG %d RS %d AR %d B, inter-node %d B"
      % (name, len(tu), t["memory"]["param_shard_bytes"], t["memory"]["gather_buffer_bytes"],
         c["all_gather_bytes"], c["reduce_scatter_bytes"], c["all_reduce_bytes"], c["inter_node_bytes"]))
PY
  then :; else fails=$((fails + 1)); fi
}

compare "full sharding F=4" 4 -model tiny
compare "full sharding across 2 nodes" 4 -model tiny -ranks_per_node 2
compare "hybrid F=2 on 2 nodes" 4 -model tiny -sharding_factor 2 -ranks_per_node 2
compare "hybrid, cyclic placement" 4 -model tiny -sharding_factor 2 -ranks_per_node 2 -rank_placement cyclic
compare "replicated F=1 on 2 nodes" 4 -model tiny -sharding_factor 1 -ranks_per_node 2
compare "NRAF" 4 -model tiny -reshard_after_forward 0
compare "bf16 params and reductions, hybrid" 4 -model tiny -sharding_factor 2 -ranks_per_node 2 \
  -param_dtype bf16 -reduce_dtype bf16
compare "bf16 params, fp32 reductions, NRAF" 4 -model tiny -param_dtype bf16 -reshard_after_forward 0
compare "bf16 params, fp32 compute" 2 -model tiny -param_dtype bf16 -compute_dtype fp32
compare "fp32 params, bf16 compute" 2 -model tiny -compute_dtype bf16
compare "replicated with bf16 reductions" 2 -model tiny -sharding_factor 1 -reduce_dtype bf16
compare "wrap 2, no prefetch, limit 1" 2 -model custom -n_layer 3 -n_embd 24 -n_head 3 \
  -vocab_size 50 -seq_len 8 -wrap 2 -prefetch none -limit_all_gathers 1
compare "prefetch both, no limit" 4 -model tiny -prefetch both -limit_all_gathers 0
compare "grad_accum 2, reduce once" 4 -model tiny -sharding_factor 2 -ranks_per_node 2 -grad_accum 2 \
  -accum_comm 0
compare "grad_accum 2, reduce every micro-step, bf16" 4 -model tiny -grad_accum 2 -accum_comm 1 \
  -reduce_dtype bf16
# the Llama family: untied head in the root, GQA shapes, padding
compare "llama-tiny full sharding" 4 -model llama-tiny
compare "llama-tiny hybrid, NRAF, bf16" 4 -model llama-tiny -sharding_factor 2 -ranks_per_node 2 \
  -reshard_after_forward 0 -param_dtype bf16
compare "llama-tiny recompute, wrap 2" 4 -model llama-tiny -n_layer 3 -wrap 2 -recompute 1
compare "llama-tiny naive attention, recompute" 2 -model llama-tiny -attention naive -recompute 1
compare "llama custom tied MQA, wrap 2, odd sizes" 2 -model custom -family llama -n_layer 3 \
  -n_embd 24 -n_head 3 -n_kv_head 1 -multiple_of 7 -vocab_size 37 -seq_len 8 -tie_embeddings 1 -wrap 2

# activation recomputation: the activation bytes the model allocates with
# only block inputs kept and a working set of one unit's blocks
compare "recompute, hybrid NRAF" 4 -model tiny -sharding_factor 2 -ranks_per_node 2 \
  -reshard_after_forward 0 -recompute 1
compare "recompute, wrap 2 over 3 blocks, batch 3" 2 -model custom -n_layer 3 -n_embd 24 -n_head 3 \
  -vocab_size 50 -seq_len 8 -wrap 2 -batch_size 3 -recompute 1

# the predicted step counts the recomputed forward (2 N_blocks + 2 L T C
# FLOP a token) as time, not as model FLOP
checks=$((checks + 1))
for r in 0 1; do
  "$BIN/fsdp-plan" -world_size 1 -model gpt2 -batch_size 2 -flops 1e12 -recompute $r -summary json \
    >"$tmp/flop$r.out" 2>&1 || { echo "FAIL: fsdp-plan -flops 1e12 -recompute $r failed"; fails=$((fails + 1)); }
done
python3 - "$tmp/flop0.out" "$tmp/flop1.out" <<'PY' || fails=$((fails + 1))
import json, sys
a, b = (json.loads(open(f).read().strip().splitlines()[-1])["prediction"] for f in sys.argv[1:])
L, C, T, tokens = 12, 768, 1024, 2 * 1024
rf = tokens * (2 * L * (12 * C * C + 13 * C) + 2 * L * T * C)
bad = []
if a["flop_per_step"] != b["flop_per_step"]: bad.append("model FLOP differs: %r vs %r" % (a["flop_per_step"], b["flop_per_step"]))
if "recompute_flop_per_step" in a or abs(b.get("recompute_flop_per_step", 0) - rf) > 1e-9 * rf:
    bad.append("recompute FLOP %r, expected %r (and none without)" % (b.get("recompute_flop_per_step"), rf))
if abs(b["compute_s"] - (b["flop_per_step"] + rf) / 1e12) > 1e-9 * b["compute_s"]:
    bad.append("compute_s %r is not (model + recompute FLOP) / 1e12" % b["compute_s"])
if bad:
    print("FAIL: the predicted step with -recompute 1:", "; ".join(bad)); sys.exit(1)
print("ok: -recompute 1 adds %.3g FLOP (%.1f%%) to the predicted step, not to the model FLOP" % (rf, 100 * rf / a["flop_per_step"]))
PY

# [Note: flash attention]: gpt2 at T = 1024, B 4: flash keeps a (B,NH,T)
# lse per layer and as scratch where naive keeps two (B,NH,T,T) each;
# the plan reports both, and the difference is exactly that
checks=$((checks + 1))
for a in flash naive; do
  "$BIN/fsdp-plan" -world_size 1 -model gpt2 -batch_size 4 -attention $a -summary json \
    >"$tmp/att_$a.out" 2>&1 || { echo "FAIL: fsdp-plan -attention $a failed"; fails=$((fails + 1)); }
done
python3 - "$tmp/att_flash.out" "$tmp/att_naive.out" <<'PY' || fails=$((fails + 1))
import json, sys
f, n = (json.loads(open(x).read().strip().splitlines()[-1]) for x in sys.argv[1:])
L, NH, T, B = 12, 12, 1024, 4
diff = 4 * (L + 1) * (2 * B * NH * T * T - B * NH * T)
fa, na = f["memory"]["activation_bytes"], n["memory"]["activation_bytes"]
bad = []
if f["attention"] != "flash" or n["attention"] != "naive": bad.append("attention keys %r %r" % (f["attention"], n["attention"]))
if na - fa != diff: bad.append("naive - flash = %d bytes, expected %d" % (na - fa, diff))
if f["memory"]["naive_attention_activation_bytes"] != na or n["memory"]["naive_attention_activation_bytes"] != na:
    bad.append("naive_attention_activation_bytes %r / %r, expected %d" % (f["memory"]["naive_attention_activation_bytes"], n["memory"]["naive_attention_activation_bytes"], na))
if bad:
    print("FAIL: -attention flash vs naive in the plan:", "; ".join(bad)); sys.exit(1)
print("ok: gpt2 T=1024 B=4: activations %.0f MiB with flash attention, %.0f MiB naive" % (fa / 2**20, na / 2**20))
PY

# gpt-175b at scale: quick, and the shards add up to the model
checks=$((checks + 1))
start=$(date +%s.%N)
if "$BIN/fsdp-plan" -world_size 512 -ranks_per_node 8 -model gpt-175b -summary json >"$tmp/big.out" 2>&1; then
  end=$(date +%s.%N)
  if python3 - "$tmp/big.out" "$start" "$end" <<'PY'
import json, sys
p = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
secs = float(sys.argv[3]) - float(sys.argv[2])
n = p["model"]["param_count"]
shard = p["memory"]["param_shard_bytes"]
padded = sum(u["padded_numel"] for u in p["units"])
# 60 s: a guard against a plan that touches every element (minutes), not a
# timing target (0.5-1.2 s here, depending on the load of a shared machine)
ok = secs < 60.0 and len(p["units"]) == 97 and shard * 512 == 4 * padded and 0 <= padded - n < 97 * 512 * 32
ok = ok and p["comm_per_step"]["inter_node_bytes"] > 0 and p["nodes"] == 64
print("%s: gpt-175b on 512 ranks planned in %.2f s: %d params, %d units, %.2f GiB of shards per rank, "
      "%.1f GB inter-node per step" % ("ok" if ok else "FAIL", secs, n, len(p["units"]),
                                        shard / 2**30, p["comm_per_step"]["inter_node_bytes"] / 1e9))
sys.exit(0 if ok else 1)
PY
  then :; else fails=$((fails + 1)); fi
else
  echo "FAIL: fsdp-plan gpt-175b: $(tail -n 3 "$tmp/big.out")"; fails=$((fails + 1))
fi

# -n_layer at the option's maximum plans in seconds: one unit of 100000
# blocks (1.2 million parameters, where comparing their names pairwise took
# half an hour) and units of 25 blocks (4002 stages, near the runtime's
# limit); the 60 s of timeout guard against a quadratic plan, they are
# not a timing target (about 1.5 s each here)
for w in 100000 25; do
  checks=$((checks + 1))
  if timeout 60 "$BIN/fsdp-plan" -world_size 2 -model tiny -n_layer 100000 -wrap $w -summary json \
       >"$tmp/deep.out" 2>&1; then
    python3 - "$tmp/deep.out" "$w" <<'PY' || fails=$((fails + 1))
import json, sys
p = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
L, w, C, V, T = 100000, int(sys.argv[2]), 32, 64, 16
root, block = V * C + T * C + 2 * C, 12 * C * C + 13 * C
units = p["units"]
want = [root] + [block * min(w, L - l) for l in range(0, L, w)]
ok = [u["numel"] for u in units] == want and p["model"]["param_count"] == root + L * block
ok = ok and units[1]["name"] == ("h.0-%d" % (w - 1))
print("%s: -n_layer %d -wrap %d planned: %d units, %d parameters"
      % ("ok" if ok else "FAIL", L, w, len(units), p["model"]["param_count"]))
sys.exit(0 if ok else 1)
PY
  else
    echo "FAIL: fsdp-plan -n_layer 100000 -wrap $w (status $?): $(tail -n 3 "$tmp/deep.out")"
    fails=$((fails + 1))
  fi
done

# Llama 3 presets at scale: llama3-8b on 64 ranks (8 per node), full and
# hybrid; llama3.2-1b (tied): the real parameter counts and unit lists
for spec in "llama3-8b 0 8030261248 33" "llama3-8b 8 8030261248 33" "llama3.2-1b 0 1235814400 17"; do
  set -- $spec
  checks=$((checks + 1))
  start=$(date +%s.%N)
  if "$BIN/fsdp-plan" -world_size 64 -ranks_per_node 8 -model "$1" -sharding_factor "$2" -summary json \
       >"$tmp/llama.out" 2>&1; then
    end=$(date +%s.%N)
    if python3 - "$tmp/llama.out" "$start" "$end" "$@" <<'PY'
import json, sys
p = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
secs = float(sys.argv[3]) - float(sys.argv[2])
name, F, count, nunits = sys.argv[4], int(sys.argv[5]) or 64, int(sys.argv[6]), int(sys.argv[7])
n = p["model"]["param_count"]
padded = sum(u["padded_numel"] for u in p["units"])
shard = p["memory"]["param_shard_bytes"]
root = [u for u in p["units"] if u["name"] == "root"][0]
C, V = p["model"]["n_embd"], p["model"]["vocab_size"]
tied = p["model"]["tie_embeddings"]
# 60 s (loaded CI machines): a guard against touching every element, not a timing target
ok = secs < 60.0 and n == count and len(p["units"]) == nunits and shard * F == 4 * padded
ok = ok and root["numel"] == (1 if tied else 2) * V * C + C and p["sharding_factor"] == F
ok = ok and p["model"]["family"] == "llama" and p["units"][1]["name"] == "model.layers.0"
print("%s: %s on 64 ranks, F %d, planned in %.2f s: %d params, %d units, %.2f GiB of shards per rank"
      % ("ok" if ok else "FAIL", name, F, secs, n, len(p["units"]), shard / 2**30))
sys.exit(0 if ok else 1)
PY
    then :; else fails=$((fails + 1)); fi
  else
    echo "FAIL: fsdp-plan $1: $(tail -n 3 "$tmp/llama.out")"; fails=$((fails + 1))
  fi
done

# [Note: bf16 compute]: -param_dtype bf16 means bf16 compute on the CPU
# (precision.compute_dtype bf16, a bf16 GEMM named), -compute_dtype fp32
# keeps fp32 sgemm, and -device cuda computes in bf16 too (cuBLASLt, bf16
# operands rounded from fp32, fp32 accumulation)
for c in "bf16:-param_dtype bf16" "fp32:-param_dtype bf16 -compute_dtype fp32" \
         "bf16:-param_dtype bf16 -device cuda"; do
  checks=$((checks + 1))
  want=${c%%:*}
  # shellcheck disable=SC2086
  if "$BIN/fsdp-plan" -world_size 2 -model tiny -summary json ${c#*:} >"$tmp/cd.out" 2>&1 &&
     python3 - "$tmp/cd.out" "$want" "${c#*:}" <<'PY'
import json, sys
p = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["precision"]
want, opts = sys.argv[2], sys.argv[3]
g = p.get("gemm", {})
ok = p.get("compute_dtype") == want and g.get("library") and g.get("kernel")
if ok and want == "fp32" and "cuda" not in opts:
    ok = g["library"] == "OpenBLAS" and g["kernel"].endswith(" sgemm")
if ok and want == "bf16" and "cuda" in opts:
    ok = g["library"] == "cuBLASLt" and "bf16 operands" in g["kernel"]
elif ok and want == "bf16":
    ok = g["library"].startswith("oneDNN") or "bf16-rounded" in g["kernel"]
print("%s: fsdp-plan %s: compute_dtype %s, gemm %s / %s" % ("ok" if ok else "FAIL", opts,
      p.get("compute_dtype"), g.get("library"), g.get("kernel")))
sys.exit(0 if ok else 1)
PY
  then :; else fails=$((fails + 1)); fi
done

# usage errors name the option
for bad in "-sharding_factor 3" "-ranks_per_node 3" "-plan_rank 9" "-wrap 3 -model tiny" \
           "-n_layer 4095 -model tiny"; do
  checks=$((checks + 1))
  opt=${bad%% *}
  # shellcheck disable=SC2086
  "$BIN/fsdp-plan" -world_size 4 $bad >"$tmp/bad.out" 2>&1
  st=$?
  if [ $st -eq 2 ] && grep -q -- "$opt" "$tmp/bad.out"; then echo "ok: fsdp-plan $bad -> 2: $(grep -m1 -- "$opt" "$tmp/bad.out")"
  else echo "FAIL: fsdp-plan -world_size 4 $bad: status $st, output: $(head -n 2 "$tmp/bad.out")"; fails=$((fails + 1)); fi
done

if [ "$fails" -gt 0 ]; then echo "test_plan: $fails of $checks checks failed"; exit 1; fi
echo "test_plan: all $checks checks passed"
exit 0
