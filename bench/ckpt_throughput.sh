#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# ckpt_throughput.sh: checkpoint write and read throughput (GB/s) at
# W = 1, 2, 4 for the gpt2 preset, and the time a checkpoint adds to the
# step it is written at (ISSUE 4, "Performance").
#
#   bench/ckpt_throughput.sh [BUILD_DIR]        (default: build, beside this repo)
#
# A. bench/ckpt_io (built here with `make bench/ckpt_io` if missing) builds
#    the model as fsdp-train does at W ranks (F = W) and times, REPEATS
#    times, FsdpCkptSave (parameters + AdamW moments, with the temporary
#    name, fsync and rename) and FsdpCkptLoad, cold (page cache dropped,
#    root only) and warm; medians; GB/s = file bytes / 1e9 / seconds of the
#    slowest rank.
# B. fsdp-train -steps STEPS -checkpoint_every EVERY -metrics RUN.h5 at the
#    same W: the run file's /metrics/step_time_s (steps without a
#    checkpoint and not right after one, first step left out) against the
#    seconds of its /events "checkpoint" rows (the whole FsdpCkptWriteStep
#    the step waits for: directory, save, prune).  The step time does not
#    include the checkpoint, so the time added is the checkpoint's seconds,
#    and the step that writes one takes (step + ckpt) / step times as long.
#    The step right after a checkpoint is shown too (a cold cache, or
#    write-back still running, would show there).
# A and B run once per OpenMPI MPI-IO component in IO_COMPONENTS
# (OMPI_MCA_io: OpenMPI 4.1 uses ompio by default; romio321 is the other).
# C. The disk itself: dd of a file of the checkpoint's size with
#    conv=fsync, then read back cold and warm -- the ceiling for A and B.
#
# Memory: gpt2 at -seq_len 64 holds ~2 GB on one rank (params, grads, two
# moments) plus activations; the checkpoint is ~1.5 GB, and a periodic
# checkpoint keeps one (plus the one being written): the script refuses to
# start with less than 4 GiB free where it writes (TMPDIR, default /tmp),
# and deletes everything it wrote.  About 15 minutes on 2 busy cores.
#
# Environment: WORLDS ("1 2 4"), REPEATS (3), STEPS (6), EVERY (3),
# IO_COMPONENTS ("ompio romio321"),
# MODEL_OPTS ("-model gpt2 -seq_len 64 -batch_size 1"), TMPDIR, PYTHON
# (/usr/bin/python3: h5py reads the run file).
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
build=${1:-$BENCH_ROOT/build}
train="$build/src/fsdp-train"
io="$build/bench/ckpt_io"
[ -x "$train" ] || { echo "ckpt_throughput: $train not found (build first, or pass BUILD_DIR)" >&2; exit 2; }
if [ ! -x "$io" ]; then
  make -C "$build" bench/ckpt_io >/dev/null || { echo "ckpt_throughput: cannot build $io" >&2; exit 2; }
fi
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import h5py, numpy' 2>/dev/null ||
  { echo "ckpt_throughput: $PYTHON needs h5py and numpy (apt-get install python3-h5py)" >&2; exit 2; }
WORLDS=${WORLDS:-1 2 4} REPEATS=${REPEATS:-3} STEPS=${STEPS:-6} EVERY=${EVERY:-3}
IO_COMPONENTS=${IO_COMPONENTS:-ompio romio321}
MODEL_OPTS=${MODEL_OPTS:--model gpt2 -seq_len 64 -batch_size 1}
tmpdir=${TMPDIR:-/tmp}
free_kb=$(df -Pk "$tmpdir" | awk 'NR == 2 { print $4 }')
if [ "$free_kb" -lt $((4 * 1024 * 1024)) ]; then
  echo "ckpt_throughput: only $((free_kb / 1024)) MiB free in $tmpdir, need 4 GiB (set TMPDIR)" >&2
  exit 2
fi
out=$(mktemp -d "$tmpdir/fsdp-ckpt-bench.XXXXXX")
# shellcheck disable=SC2016  # expanded at exit
bench_at_exit 'rm -rf "$out"'

bench_lock ckpt_throughput
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
bench_openblas_core

echo "ckpt_throughput: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $(getconf _NPROCESSORS_ONLN) cores," \
     "$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
     "$(bench_cpu), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "writing to $out ($(df -PT "$tmpdir" | awk 'NR == 2 { print $2 " on " $1 }')); model options: $MODEL_OPTS"

# ---- A: save / load throughput ------------------------------------------
for io_c in $IO_COMPONENTS; do
  for W in $WORLDS; do
    tag=${io_c}_$W
    echo "== A: W=$W: OMPI_MCA_io=$io_c mpiexec -n $W bench/ckpt_io $MODEL_OPTS -repeats $REPEATS"
    # shellcheck disable=SC2086
    OMPI_MCA_io=$io_c mpiexec -n "$W" "$io" $MODEL_OPTS -file "$out/io.h5" -repeats "$REPEATS" 2>&1 |
      grep -v OpenBLAS | tee "$out/io_$tag.txt"
    grep -q '^RESULT' "$out/io_$tag.txt" || { echo "ckpt_io failed at W=$W ($io_c)" >&2; exit 1; }
  done
done

# ---- B: what a checkpoint adds to its step -------------------------------
for io_c in $IO_COMPONENTS; do
  for W in $WORLDS; do
    tag=${io_c}_$W
    echo "== B: W=$W: OMPI_MCA_io=$io_c mpiexec -n $W fsdp-train $MODEL_OPTS -steps $STEPS" \
         "-log_every 1 -checkpoint_every $EVERY -checkpoint_keep 1 -metrics RUN.h5"
    # shellcheck disable=SC2086
    OMPI_MCA_io=$io_c mpiexec -n "$W" "$train" $MODEL_OPTS -steps "$STEPS" -log_every 1 \
      -checkpoint_every "$EVERY" -checkpoint_keep 1 -checkpoint_dir "$out/ck$tag" \
      -metrics "$out/run$tag.h5" 2>&1 | grep -v OpenBLAS >"$out/train_$tag.txt"
    grep -E '^(checkpoint|summary)' "$out/train_$tag.txt" ||
      { echo "fsdp-train failed at W=$W ($io_c)" >&2; tail -5 "$out/train_$tag.txt" >&2; exit 1; }
    bytes=$(stat -c %s "$out/ck$tag"/ckpt_*.h5 | head -1)
    rm -rf "$out/ck$tag"
    "$PYTHON" - "$out/run$tag.h5" "$bytes" >"$out/step_$tag.txt" <<'PY' || exit 1
import sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
nbytes = int(sys.argv[2])
steps = f["metrics/step"][()]
t = f["metrics/step_time_s"][()]
ev = f["events"][()]
ck = {int(e["step"]): float(e["seconds"]) for e in ev if e["kind"].startswith(b"checkpoint")}
plain = [ti for s, ti in zip(steps, t) if s != steps.min() and s not in ck and s - 1 not in ck]
after = [ti for s, ti in zip(steps, t) if s - 1 in ck]
step = float(np.median(plain))
c = float(np.mean(list(ck.values())))
print("STEP step_s=%.3f ckpt_s=%.3f ratio=%.3f after_s=%.3f run_write_GBps=%.3f nckpt=%d nplain=%d" % (
    step, c, (step + c) / step, float(np.median(after)) if after else float("nan"),
    nbytes / 1e9 / c, len(ck), len(plain)))
PY
    cat "$out/step_$tag.txt"
    rm -f "$out/run$tag.h5"
  done
done

# ---- C: the disk ----------------------------------------------------------
bytes=$(sed -n 's/^RESULT.* bytes=\([0-9]*\).*/\1/p' "$out"/io_*.txt | head -1)
mib=$(((bytes + 1048575) / 1048576))
now() { date +%s.%N; }
t0=$(now)
dd if=/dev/zero of="$out/dd.bin" bs=1M count="$mib" conv=fsync status=none
t1=$(now)
cold=n/a
if sync && echo 1 2>/dev/null >/proc/sys/vm/drop_caches; then
  t2=$(now)
  dd if="$out/dd.bin" of=/dev/null bs=1M status=none
  t3=$(now)
  cold=$(awk -v m="$mib" -v a="$t2" -v b="$t3" 'BEGIN { printf "%.3f", m * 1048576 / 1e9 / (b - a) }')
fi
t4=$(now)
dd if="$out/dd.bin" of=/dev/null bs=1M status=none
t5=$(now)
rm -f "$out/dd.bin"
disk=$(awk -v m="$mib" -v t0="$t0" -v t1="$t1" -v t4="$t4" -v t5="$t5" -v cold="$cold" 'BEGIN {
  b = m * 1048576
  printf "disk (dd, %d MiB): write+fsync %.3f GB/s, cold read %s GB/s, warm read %.3f GB/s", \
         m, b / 1e9 / (t1 - t0), cold, b / 1e9 / (t5 - t4) }')
echo "== C: $disk"

# ---- table -----------------------------------------------------------------
echo
echo "checkpoint throughput, $MODEL_OPTS (GB = 1e9 bytes; A: medians of $REPEATS rounds)"
echo "$disk"
printf '%-9s %2s %2s %6s | %7s %6s | %7s %6s | %7s %6s | %6s %6s %9s %6s %8s\n' \
  io W F "GB" "write s" "GB/s" "cold s" "GB/s" "warm s" "GB/s" \
  "step s" "ckpt s" "step+ckpt" "next s" "run GB/s"
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
for io_c in $IO_COMPONENTS; do
  for W in $WORLDS; do
    r=$(grep '^RESULT' "$out/io_${io_c}_$W.txt")
    s=$(cat "$out/step_${io_c}_$W.txt")
    printf '%-9s %2s %2s %6.3f | %7s %6s | %7s %6s | %7s %6s | %6s %6s %8sx %6s %8s\n' \
      "$io_c" "$W" "$(get "$r" F)" "$(get "$r" bytes | awk '{ print $1 / 1e9 }')" \
      "$(get "$r" write_s)" "$(get "$r" write_GBps)" "$(get "$r" cold_read_s)" \
      "$(get "$r" cold_read_GBps)" "$(get "$r" warm_read_s)" "$(get "$r" warm_read_GBps)" \
      "$(get "$s" step_s)" "$(get "$s" ckpt_s)" "$(get "$s" ratio)" "$(get "$s" after_s)" \
      "$(get "$s" run_write_GBps)"
  done
done
