#!/bin/sh
# test_affinity.sh: [Note: threads beyond the affinity mask] (lib/base/init.c).
# fsdp-train started with more OpenMP threads than the cores its affinity
# mask allows warns once per rank, naming the fix (--bind-to none,
# --map-by slot:PE=T); with as many threads as cores it says nothing.
# The mask comes from taskset (skipped without it); Open MPI is told
# --bind-to none so that the mask is taskset's, not its own binding.
#   usage: test_affinity.sh MPIEXEC "PREFLAGS" FSDP_TRAIN
set -u
MPIEXEC=$1
PREFLAGS=$2
TRAIN=$3
command -v taskset >/dev/null 2>&1 || { echo "SKIP: no taskset"; exit 77; }
tmp=$(mktemp -d /tmp/fsdp_test_affinity.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
bind=""
[ "${FSDP_MPI:-}" = openmpi ] && bind="--bind-to none"
# the CPUs this test may use: the first one, and a second if there is one
cpus=$(taskset -cp $$ | sed 's/.*: *//')
first=$(echo "$cpus" | sed 's/[-,].*//')
second=$(python3 - "$cpus" <<'PY' 2>/dev/null
import sys
ids = []
for part in sys.argv[1].split(","):
    a, _, b = part.partition("-")
    ids += range(int(a), int(b or a) + 1)
print(ids[1] if len(ids) > 1 else "")
PY
)

# run CPULIST THREADS NP: fsdp-train on NP ranks restricted to CPULIST
run() {
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$2 timeout 200 taskset -c "$1" "$MPIEXEC" $PREFLAGS $bind -n "$3" "$TRAIN" \
    -model tiny -steps 1 -log_every 0 >"$tmp/out" 2>&1
  status=$?
  warned=$(grep -c 'OpenMP threads (OMP_NUM_THREADS) but this process may run on only' "$tmp/out")
}
fail() {
  echo "FAIL: $*"
  sed 's/^/    /' "$tmp/out" | tail -12
  fails=$((fails + 1))
}

# 2 threads on 1 core, 2 ranks: one warning from each rank, with the fix
run "$first" 2 2
[ $status -eq 0 ] || fail "2 threads on cpu $first: exit $status"
[ "$warned" -eq 2 ] || fail "2 threads on 1 core, 2 ranks: $warned warnings, expected one per rank"
for r in 0 1; do
  grep -q "rank $r .*2 OpenMP threads .* on only 1 core" "$tmp/out" ||
    fail "no warning from rank $r naming 2 threads and 1 core"
done
grep -q -- '--bind-to none' "$tmp/out" || fail "the warning does not name --bind-to none"
grep -q -- '--map-by slot:PE=2' "$tmp/out" || fail "the warning does not name --map-by slot:PE=2"

# 1 thread on 1 core: nothing to say
run "$first" 1 1
[ $status -eq 0 ] || fail "1 thread on cpu $first: exit $status"
[ "$warned" -eq 0 ] || fail "1 thread on 1 core warned"

# 2 threads on 2 cores: nothing to say
if [ -n "$second" ]; then
  run "$first,$second" 2 1
  [ $status -eq 0 ] || fail "2 threads on cpus $first,$second: exit $status"
  [ "$warned" -eq 0 ] || fail "2 threads on 2 cores warned"
fi

[ $fails -eq 0 ] && echo "test_affinity: all checks passed"
[ $fails -eq 0 ]
