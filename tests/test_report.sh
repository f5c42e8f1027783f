#!/bin/sh
# test_report.sh: fsdp-report on run files written by tests/test_metrics --
# the table and CSV hold the values the file holds (medians, final loss,
# peak memory per rank), the PNG is written, a run killed mid-way still
# reports its rows, a missing or non-HDF5 file is exit status 2.
#   usage: test_report.sh MPIEXEC "PREFLAGS" TEST_METRICS FSDP_REPORT
# Skips (77) without h5py, numpy or matplotlib.
set -u
MPIEXEC=$1
PREFLAGS=$2
METRICS=$3
REPORT=$4

# fsdp-report re-executes itself with /usr/bin/python3 (where Debian's
# packages live) when the python3 first on PATH lacks them
have=""
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import h5py, numpy, matplotlib' >/dev/null 2>&1; then have=$py; break; fi
done
if [ -z "$have" ]; then
  echo "SKIP: fsdp-report needs h5py, numpy and matplotlib (apt-get install python3-h5py python3-numpy python3-matplotlib)"
  exit 77
fi

tmp=$(mktemp -d /tmp/fsdp_test_report.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
checks=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# check NAME GOT WANT: exact string comparison
check() {
  checks=$((checks + 1))
  if [ "$2" = "$3" ]; then ok "$1 = $2"; else fail "$1 is '$2', expected '$3'"; fi
}
# close NAME GOT WANT: numbers equal to 1e-9 relative
close() {
  checks=$((checks + 1))
  if awk -v g="$2" -v w="$3" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(d <= 1e-9 * (w < 0 ? -w : w) + 1e-12) }'; then
    ok "$1 = $2"
  else
    fail "$1 is '$2', expected $3"
  fi
}

# shellcheck disable=SC2086
if ! "$MPIEXEC" $PREFLAGS -n 2 "$METRICS" write "$tmp/sweep_a.h5" 20 >"$tmp/log" 2>&1; then
  cat "$tmp/log"
  echo "FAIL: test_metrics write failed"
  exit 1
fi
# shellcheck disable=SC2086
"$MPIEXEC" $PREFLAGS -n 1 "$METRICS" write "$tmp/sweep_b.h5" 9 >"$tmp/log" 2>&1 || fail "test_metrics write (np 1)"

# CSV of run a: known values of tests/test_metrics.c (known_row, known_mem)
"$REPORT" --csv "$tmp/sweep_a.h5" >"$tmp/csv" 2>"$tmp/err"
check "fsdp-report --csv exit status" "$?" 0
row=$(sed -n 2p "$tmp/csv")
field() { echo "$row" | awk -F, -v i="$1" '{ print $i }'; }
check "CSV header" "$(head -1 "$tmp/csv")" "run,path,world_size,rows,steps,final_loss,median_step_time_s,tokens_per_s,comm_intra_bytes_per_step,comm_inter_bytes_per_step,peak_bytes_max,peak_bytes_per_rank,final_val_loss,final_val_step"
check "run name" "$(field 1)" "sweep_a"
check "world size" "$(field 3)" 2
check "rows" "$(field 4)" 20
check "steps" "$(field 5)" 200
close "final loss" "$(field 6)" 3.1
close "median step time (s)" "$(field 7)" 0.042
close "median tokens/s" "$(field 8)" "$(awk 'BEGIN { printf "%.10f", 8192 / 0.042 }')"
check "intra bytes per step" "$(field 9)" 1000000
check "inter bytes per step" "$(field 10)" 250000
# peak of rank r over rows i < 20: (r+1)*10 MiB + 19*4096
check "peak bytes (max rank)" "$(field 11)" 21049344
check "peak bytes per rank" "$(field 12)" "10563584;21049344"

# the table, two runs side by side, and the plot
"$REPORT" "$tmp/sweep_a.h5" "$tmp/sweep_b.h5" --plot "$tmp/report.png" >"$tmp/table" 2>"$tmp/err"
check "fsdp-report table exit status" "$?" 0
sed 's/^/    /' "$tmp/table"
checks=$((checks + 1))
if grep -Eq '^sweep_a +2 +20 +200 +3\.1000 +- +42\.0 +195048 +976\.56 KiB +244\.14 KiB +20\.07 MiB' "$tmp/table"; then
  ok "table row of sweep_a"
else
  fail "table row of sweep_a wrong"
fi
checks=$((checks + 1))
if grep -Eq '^sweep_b +1 +9 +90 +4\.2000 ' "$tmp/table"; then ok "table row of sweep_b"; else fail "table row of sweep_b wrong"; fi
checks=$((checks + 1))
if grep -q 'sweep_a: r0 10.1, r1 20.1' "$tmp/table"; then ok "per-rank peaks"; else fail "per-rank peaks missing"; fi
checks=$((checks + 1))
size=$(wc -c <"$tmp/report.png" 2>/dev/null || echo 0)
magic=$(head -c 8 "$tmp/report.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
if [ "$size" -gt 10000 ] && [ "$magic" = "89504e470d0a1a0a" ]; then
  ok "PNG written ($size bytes)"
else
  fail "PNG $tmp/report.png: $size bytes, magic '$magic'"
fi

# a run killed after 5 rows (SWMR writer mark left in the file)
# shellcheck disable=SC2086
"$MPIEXEC" $PREFLAGS -n 1 "$METRICS" crash "$tmp/killed.h5" >"$tmp/log" 2>&1
checks=$((checks + 1))
if [ -s "$tmp/killed.h5" ]; then ok "killed run left its file"; else fail "killed run left no file"; fi
"$REPORT" --csv "$tmp/killed.h5" >"$tmp/csv" 2>"$tmp/err"
check "fsdp-report on a killed run: exit status" "$?" 0
row=$(sed -n 2p "$tmp/csv")
check "killed run rows" "$(field 4)" 5
check "killed run steps" "$(field 5)" 50

# bad input: exit status 2, message naming the file
expect2() {
  checks=$((checks + 1))
  "$REPORT" "$1" >"$tmp/out" 2>&1
  st=$?
  if [ "$st" -eq 2 ] && grep -q -- "$2" "$tmp/out"; then
    ok "$1 -> 2: $(head -1 "$tmp/out")"
  else
    fail "$1: exit status $st, output: $(head -2 "$tmp/out")"
  fi
}
expect2 "$tmp/missing.h5" "missing.h5: no such file"
echo "not hdf5" >"$tmp/text.h5"
expect2 "$tmp/text.h5" "text.h5: not an HDF5 file"
"$have" -c "import h5py; h5py.File('$tmp/other.h5', 'w').create_dataset('x', data=[1])"
expect2 "$tmp/other.h5" "not an fsdp run file"

echo "test_report: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
