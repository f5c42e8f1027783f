#!/bin/sh
# test_device_coll.sh (label cpu): [Note: MPI staging of device buffers]
# (lib/comm/coll_staged.c) on the CPU.  FSDP_COLL_STAGED=1 makes -device cpu
# run its collectives through the staging path (copies through the device
# interface into host staging buffers, MPI there, copies back), the path
# ranks sharing one GPU take with -device cuda; the losses must equal the
# plain MPI run's bit for bit (W=2 fp32, W=4 bf16 with prefetch, W=4 hybrid
# with accumulation) and the summary must name the path (device_coll).
# -device_coll nccl with -device cpu and a bad value are usage errors (2).
#   usage: test_device_coll.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
tmp=$(mktemp -d /tmp/fsdp_test_dcoll.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
common="-model tiny -steps 6 -lr 1e-2 -warmup 2 -seed 7 -summary json -log_every 0 -batch_size 2"
pair() { # pair NAME NP ARGS...: plain MPI vs staged, identical losses
  name=$1 np=$2
  shift 2
  # shellcheck disable=SC2086
  "$MPIEXEC" $PREFLAGS -n "$np" "$TRAIN" $common "$@" >"$tmp/$name.mpi" 2>"$tmp/$name.err" \
    || { echo "FAIL: $name: plain MPI run"; cat "$tmp/$name.err"; fail=1; return; }
  # shellcheck disable=SC2086
  FSDP_COLL_STAGED=1 "$MPIEXEC" $PREFLAGS -n "$np" "$TRAIN" $common "$@" \
    >"$tmp/$name.staged" 2>"$tmp/$name.err" \
    || { echo "FAIL: $name: staged run"; cat "$tmp/$name.err"; fail=1; return; }
  python3 - "$tmp/$name.mpi" "$tmp/$name.staged" "$name" <<'PY' || fail=1
import json, sys
a = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
b = json.loads([l for l in open(sys.argv[2]) if l.startswith("{")][-1])
name = sys.argv[3]
bad = 0
if a.get("device_coll") != "mpi" or b.get("device_coll") != "mpi-staged":
    print(f"FAIL: {name}: device_coll {a.get('device_coll')} / {b.get('device_coll')}, expected mpi / mpi-staged"); bad = 1
if not a["losses"] or [x.hex() for x in a["losses"]] != [x.hex() for x in b["losses"]]:
    print(f"FAIL: {name}: losses differ\n  mpi    {a['losses']}\n  staged {b['losses']}"); bad = 1
print(f"{name}: {len(a['losses'])} losses bit-identical, last {a['losses'][-1]!r}" if not bad else "")
sys.exit(bad)
PY
}
pair fp32_w2 2
pair bf16_w4 4 -param_dtype bf16 -reduce_dtype bf16 -prefetch both
pair hybrid_w4 4 -sharding_factor 2 -grad_accum 2
# usage errors: exit 2, the option named
# shellcheck disable=SC2086
"$MPIEXEC" $PREFLAGS -n 1 "$TRAIN" $common -device_coll nccl >"$tmp/u1" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q -- "-device_coll nccl" "$tmp/u1"; then
  echo "FAIL: -device cpu -device_coll nccl: status $rc"; cat "$tmp/u1"; fail=1
fi
# shellcheck disable=SC2086
"$MPIEXEC" $PREFLAGS -n 1 "$TRAIN" $common -device_coll gloo >"$tmp/u2" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "device_coll" "$tmp/u2"; then
  echo "FAIL: -device_coll gloo: status $rc"; cat "$tmp/u2"; fail=1
fi
exit $fail
