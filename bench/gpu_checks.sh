#!/bin/sh
# gpu_checks.sh (issue 14, "GPUs for real"): on the GPU machine, called by
# gpu_run.sh; what the CPU build cannot run.  Each check prints "ok:",
# "FAIL:" or "skip:" (with why) and the exit status counts the FAILs.
#   - each rank's CUDA context is on its own GPU only (stream threads bind
#     the rank's device: no context on GPU 0 from the others);
#   - emulated nodes (-ranks_per_node 1) on one machine pick distinct GPUs
#     from the real node; with too few GPUs and -device_coll nccl: a usage
#     error, never NCCL's "Duplicate GPU" or a hang; with the default
#     (auto) the ranks share the GPU through MPI staging;
#   - one visible GPU per rank (per-rank CUDA_VISIBLE_DEVICES) works;
#   - no NCCL communicator is created after setup (no "created inside a
#     collective" line; NCCL's "Init COMPLETE" lines all before step 1);
#   - a task failing on one rank ends the job fast (NCCL aborted, MPI_Abort);
#   - the two NCCL streams: the JSON summary of a gpt2 run kept for the
#     exposed-communication numbers (>= 2 GPUs).
# About 1-2 minutes on one GPU (most checks need 2 or more to mean much).
#   usage: gpu_checks.sh BUNDLE_DIR RESULTS_DIR
set -u
B=$1
res=$2
mkdir -p "$res"
fails=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skip() { echo "skip: $*"; }
mpi() { "$B/bin/fsdp-env" mpirun --allow-run-as-root "$@"; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
W=$ngpu
[ "$W" -gt 4 ] && W=4
[ "$W" -lt 1 ] && { skip "no GPU visible to nvidia-smi"; exit 0; }
tiny="-model tiny -steps 8 -batch_size 4 -log_every 1 -summary json"
echo "== issue 14 checks: $ngpu GPUs, W=$W"

# 1. contexts: sample nvidia-smi while W ranks train; a pid on two GPUs is
# a stray context (the old stream threads opened one on GPU 0)
mpi -n "$W" "$B/bin/fsdp-train" -device cuda -model gpt2 -batch_size 4 -steps 20 -log_every 0 \
  >"$res/ctx.out" 2>"$res/ctx.err" &
job=$!
: >"$res/ctx.smi"
i=0
while kill -0 "$job" 2>/dev/null && [ $i -lt 240 ]; do
  nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader >>"$res/ctx.smi" 2>/dev/null
  sleep 0.5
  i=$((i + 1))
done
wait "$job"
rc=$?
if [ $rc -ne 0 ]; then
  fail "contexts: the W=$W gpt2 run failed ($rc): $(tail -3 "$res/ctx.err")"
elif [ ! -s "$res/ctx.smi" ]; then
  skip "contexts: nvidia-smi lists no compute processes here (PID namespace?)"
else
  multi=$(sort -u "$res/ctx.smi" | awk -F, '{n[$1]++} END {for (p in n) if (n[p] > 1) print p}')
  shared=$(sort -u "$res/ctx.smi" | awk -F, '{n[$2]++} END {for (g in n) if (n[g] > 1) print g}')
  if [ -n "$multi" ]; then
    fail "contexts: processes with a context on more than one GPU: $multi (see ctx.smi)"
  elif [ -n "$shared" ]; then
    fail "contexts: two ranks on one GPU: $shared (see ctx.smi)"
  else
    ok "contexts: $(sort -u "$res/ctx.smi" | wc -l) rank(s), each on one GPU of its own"
  fi
fi

# 2. emulated nodes: -ranks_per_node 1 with 2 ranks on one machine (with
# one GPU: -device_coll nccl is refused, the default shares it over MPI)
mpi -n 2 "$B/bin/fsdp-train" -device cuda -device_coll nccl -ranks_per_node 1 $tiny >"$res/emul.out" 2>"$res/emul.err"
rc=$?
if [ "$ngpu" -ge 2 ]; then
  [ $rc -eq 0 ] && ok "emulated nodes: 2 ranks, -ranks_per_node 1: trained" ||
    fail "emulated nodes: exit $rc: $(grep -m2 -i 'error\|duplicate' "$res/emul.err")"
else
  if [ $rc -eq 2 ] && grep -q "2 ranks on node .* only 1 distinct GPUs" "$res/emul.err"; then
    ok "emulated nodes on 1 GPU: usage error $(grep -m1 -o '2 ranks on node.*GPUs' "$res/emul.err")"
  else
    fail "emulated nodes on 1 GPU: exit $rc, expected 2 with '2 ranks on node ... only 1 distinct GPUs': $(tail -2 "$res/emul.err")"
  fi
  mpi -n 2 "$B/bin/fsdp-train" -device cuda -ranks_per_node 1 $tiny >"$res/emul_shared.out" 2>"$res/emul_shared.err"
  rc=$?
  if [ $rc -eq 0 ] && grep -q '"device_coll": "mpi-staged"' "$res/emul_shared.out"; then
    ok "emulated nodes on 1 GPU, -device_coll auto: the ranks share it over MPI staging"
  else
    fail "emulated nodes on 1 GPU, -device_coll auto: exit $rc: $(tail -2 "$res/emul_shared.err")"
  fi
fi

# 3. one visible GPU per rank (Slurm --gpus-per-task=1 style)
n3=2
[ "$ngpu" -lt 2 ] && n3=1
mpi -n $n3 sh -c 'CUDA_VISIBLE_DEVICES=${OMPI_COMM_WORLD_LOCAL_RANK:-0} exec "$@"' sh \
  "$B/bin/fsdp-train" -device cuda $tiny >"$res/visible.out" 2>"$res/visible.err"
rc=$?
[ $rc -eq 0 ] && ok "one visible GPU per rank ($n3 ranks): trained" ||
  fail "one visible GPU per rank ($n3 ranks): exit $rc: $(tail -2 "$res/visible.err")"

# 4. every NCCL communicator made at setup
NCCL_DEBUG=INFO mpi -n "$W" "$B/bin/fsdp-train" -device cuda $tiny >"$res/init.out" 2>&1
rc=$?
inits=$(grep -c "Init COMPLETE" "$res/init.out")
first_step=$(grep -n "^step 1/" "$res/init.out" | head -1 | cut -d: -f1)
last_init=$(grep -n "Init COMPLETE" "$res/init.out" | tail -1 | cut -d: -f1)
if [ $rc -ne 0 ]; then
  fail "NCCL at setup: the run failed ($rc)"
elif grep -q "created inside a collective" "$res/init.out"; then
  fail "NCCL at setup: $(grep -m1 'created inside a collective' "$res/init.out")"
elif [ -n "$first_step" ] && [ -n "$last_init" ] && [ "$last_init" -gt "$first_step" ]; then
  fail "NCCL at setup: an 'Init COMPLETE' (line $last_init) after step 1 (line $first_step)"
else
  ok "NCCL at setup: $inits communicator inits, none inside a step"
fi

# 5. a failed task on one rank ends the job (needs >= 2 ranks: collectives)
if [ "$W" -ge 2 ]; then
  t0=$(date +%s)
  FSDP_FAULT=stream:rank=1:step=3:kind=all-gather timeout 200 \
    "$B/bin/fsdp-env" mpirun --allow-run-as-root -n "$W" "$B/bin/fsdp-train" -device cuda $tiny \
    >"$res/abort.out" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $secs -ge 60 ]; then
    fail "abort: exit $rc after $secs s (expected a failure well within 60 s)"
  else
    ok "abort: exit $rc in $secs s: $(grep -m1 'FSDP_FAULT' "$res/abort.out" | cut -c1-120)"
  fi
else
  skip "abort: one GPU, no collective to fail"
fi

# 6. two NCCL streams, gathers waited on the device: keep the numbers
# (W=1 has no collectives: gpu_run.sh's benchmark covers it)
if [ "$W" -ge 2 ]; then
  mpi -n "$W" "$B/bin/fsdp-train" -device cuda -model gpt2 -batch_size 8 -steps 12 -warmup 2 \
    -param_dtype bf16 -log_every 0 -summary json >"$res/streams_gpt2.json" 2>"$res/streams_gpt2.err" &&
    ok "streams: gpt2 W=$W summary kept in streams_gpt2.json" ||
    fail "streams: gpt2 W=$W run failed: $(tail -2 "$res/streams_gpt2.err")"
else
  skip "streams: one GPU, no collectives"
fi

echo "== issue 14 checks: $fails failure(s)"
exit $fails
