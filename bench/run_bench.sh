#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# run_bench.sh: fsdp-train against PyTorch (CPU) side by side, in one run.
#
#   bench/run_bench.sh [BUILD_DIR]        (default: build, beside this repo)
#
# Prints three ratios (ISSUE 3 and 12, "Performance"):
#   A. ours / PyTorch median step time, GPT-2 124M, B=4, T=64 (wpe has 64
#      rows on both sides), AdamW fp32, one process with 2 threads
#      (target <= 0.8);
#   B. F=W / F=1 median step time at W=2, one thread per rank, GPT-2 with
#      N_LAYER_B blocks (target <= 1.05).
# Runs are interleaved (ours, PyTorch, ours+MKL, ours, ...) REPEATS times
# so that the load of other users of the machine falls on all sides alike;
# each run's median leaves out its first WARMUP steps, and a ratio is the
# median of the per-repeat ratios (the spread is printed too).
#
# BLAS: fsdp-train calls OpenBLAS; OPENBLAS_CORETYPE selects its sgemm
# kernel (SkylakeX on an AVX-512 CPU, Haswell on AVX2, unless set).
# PyTorch's wheel calls the MKL linked into it.  As MKL is not OpenBLAS,
# ours is ALSO run with MKL's sgemm (libmkl_rt preloaded, sequential layer:
# the same threading as OpenBLAS here, one thread per call inside our
# OpenMP slabs) when libmkl_rt.so.2 is found: in $MKL_LIB_DIR, in python3's
# prefix/lib (python3 -m pip install mkl==2024.2.0, the release the torch
# 2.x wheels link), or through ldconfig.
#
#   C. ours / PyTorch FSDP2 (bench_fsdp2_pytorch.py: fully_shard over gloo)
#      median step time at W=2, F=2, one thread per rank, GPT-2 124M, B=4
#      T=64 per rank (target <= 0.6).
# Environment: PARTS ("A B C": the parts to run), STEPS (10), WARMUP (2),
# REPEATS (3), THREADS (2), N_LAYER_B (4), MKL_LIB_DIR, PYTHON (python3), QUIET_WAIT (0): before each
# run wait up to this many seconds for the CPUs to be >= 90% idle over 3 s
# (on a machine shared with other jobs; each run line shows the idle seen).
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/common.sh"
build=${1:-$BENCH_ROOT/build}
train="$build/src/fsdp-train"
[ -x "$train" ] || { echo "run_bench: $train not found (build first, or pass BUILD_DIR)" >&2; exit 2; }
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-10} WARMUP=${WARMUP:-2} REPEATS=${REPEATS:-3} THREADS=${THREADS:-2}
N_LAYER_B=${N_LAYER_B:-4} QUIET_WAIT=${QUIET_WAIT:-0} PARTS=${PARTS:-A B C}
has_part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
B=4 T=64
out=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-bench.XXXXXX")
# shellcheck disable=SC2016  # expanded at exit
bench_at_exit 'rm -rf "$out"'

bench_lock run_bench
export OMPI_MCA_rmaps_base_oversubscribe=1
bench_openblas_core

# ---- machine and libraries -------------------------------------------------
echo "== machine: $(bench_cpu), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== fsdp-train: $train; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
echo "== PyTorch build (torch.__config__.show(), BLAS lines):"
$PYTHON - <<'EOF' | sed 's/^/   /'
import re, torch
print("torch", torch.__version__, "| threads default", torch.get_num_threads())
for l in torch.__config__.show().splitlines():
    if re.search(r"Math Kernel|MKL-DNN|oneDNN|OpenBLAS|CPU capability|LAPACK is", l):
        print(l.strip())
m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
print("BLAS_INFO=" + (m.group(1) if m else "?"))
EOF

mkl_dir=""
for d in "${MKL_LIB_DIR:-}" "$($PYTHON -c 'import sys; print(sys.prefix)' 2>/dev/null)/lib" \
         "$(ldconfig -p 2>/dev/null | awk '/libmkl_rt.so.2/ {print $NF; exit}' | xargs -r dirname)"; do
  if [ -n "$d" ] && [ -e "$d/libmkl_rt.so.2" ]; then mkl_dir=$d; break; fi
done

# ---- helpers -----------------------------------------------------------------
idle_pct() { # CPU idle % over 3 s, from /proc/stat
  local a b c d e f g h i1 s1
  read -r _ a b c d e f g h _ </proc/stat; i1=$((d + e)); s1=$((a + b + c + d + e + f + g + h))
  sleep 3
  read -r _ a b c d e f g h _ </proc/stat
  echo $((100 * (d + e - i1) / (a + b + c + d + e + f + g + h - s1 + 1)))
}
quiet() { # wait up to QUIET_WAIT s for >= 90% idle; sets $idle_seen
  idle_seen=""
  [ "$QUIET_WAIT" -gt 0 ] || return 0
  local t=0 p
  while :; do
    p=$(idle_pct); t=$((t + 3))
    if [ "$p" -ge 90 ] || [ $t -ge "$QUIET_WAIT" ]; then idle_seen=" (idle ${p}% before)"; return 0; fi
  done
}

# run_ours TAG NP THREADS MPIEXEC_EXTRA... -- TRAIN_ARGS...
run_ours() {
  local tag=$1 np=$2 th=$3; shift 3
  local mpi=()
  while [ "$1" != "--" ]; do mpi+=("$1"); shift; done
  shift
  OMP_NUM_THREADS=$th mpiexec -n "$np" -x OMP_NUM_THREADS -x OPENBLAS_CORETYPE "${mpi[@]}" \
    "$train" -steps "$STEPS" -log_every 1 -summary json -batch_size $B -seq_len $T "$@" \
    >"$out/$tag.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then echo "run_bench: $tag failed (exit $rc):" >&2; tail -5 "$out/$tag.log" >&2; exit 1; fi
}

# median_of LOG: median per-step ms after WARMUP steps (our progress lines
# "step i/N | ... | X ms" or PyTorch's "step i/N | loss | X ms").
median_of() { $PYTHON "$BENCH_LIB/median_step.py" "$1" "$WARMUP"; }

ratios() { # ratios NUM_TAG DEN_TAG -> "median min max best" of per-repeat
  # ratios; best = fastest repeat of NUM / fastest repeat of DEN (the runs
  # least disturbed by other jobs)
  local r=()
  for i in $(seq 1 "$REPEATS"); do
    r+=("$(median_of "$out/$1.$i.log") $(median_of "$out/$2.$i.log")")
  done
  printf '%s\n' "${r[@]}" | $PYTHON -c '
import statistics, sys
p = [(float(a), float(b)) for a, b in (l.split() for l in sys.stdin)]
q = [a / b for a, b in p]
best = min(a for a, _ in p) / min(b for _, b in p)
print("%.3f %.3f %.3f %.3f" % (statistics.median(q), min(q), max(q), best))'
}

medians() { # medians TAG -> per-repeat medians, space separated
  for i in $(seq 1 "$REPEATS"); do printf '%s ' "$(median_of "$out/$1.$i.log")"; done
}

if has_part A; then
# ---- A: GPT-2 124M, 1 process x THREADS threads ---------------------------
echo
echo "== A: GPT-2 124M, B=$B T=$T, 1 process x $THREADS threads, $STEPS steps ($WARMUP warm-up left out), $REPEATS repeats"
# One rank with several OpenMP threads must not be bound to one core
# (OpenMPI binds a rank to a core by default when np <= 2).
for i in $(seq 1 "$REPEATS"); do
  quiet; q1=$idle_seen
  run_ours "ours.$i" 1 "$THREADS" --bind-to none -- -model gpt2
  quiet; q2=$idle_seen
  OMP_NUM_THREADS=$THREADS $PYTHON "$here/bench_pytorch.py" --model gpt2 --batch_size $B \
    --seq_len $T --steps "$STEPS" --warmup_steps "$WARMUP" --threads "$THREADS" \
    >"$out/torch.$i.log" 2>&1 || { echo "run_bench: PyTorch failed:" >&2; tail -5 "$out/torch.$i.log" >&2; exit 1; }
  q3=""
  if [ -n "$mkl_dir" ]; then
    quiet; q3=$idle_seen
    run_ours "mkl.$i" 1 "$THREADS" --bind-to none -x LD_PRELOAD="$mkl_dir/libmkl_rt.so.2" \
      -x LD_LIBRARY_PATH="$mkl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      -x MKL_THREADING_LAYER=SEQUENTIAL -- -model gpt2
  fi
  echo "   repeat $i: ours $(median_of "$out/ours.$i.log") ms$q1, PyTorch $(median_of "$out/torch.$i.log") ms$q2${mkl_dir:+, ours+MKL $(median_of "$out/mkl.$i.log") ms$q3}"
done
core=$(sed -n 's/.*BLAS core \([^ ,]*\).*/\1/p' "$out/ours.1.log" | head -1)
torch_blas=$(sed -n 's/.*BLAS \([^ ]*\) (\(.*\)), oneDNN.*/\1: \2/p' "$out/torch.1.log" | head -1)
if [ -n "$mkl_dir" ]; then
  # prove that the preload reached sgemm: a 1-step tiny run under MKL_VERBOSE
  n=$(OMP_NUM_THREADS=1 mpiexec -n 1 -x LD_PRELOAD="$mkl_dir/libmkl_rt.so.2" \
      -x LD_LIBRARY_PATH="$mkl_dir" -x MKL_THREADING_LAYER=SEQUENTIAL -x MKL_VERBOSE=1 \
      "$train" -model tiny -steps 1 -log_every 0 2>&1 | grep -c 'MKL_VERBOSE SGEMM')
  mkl_ver=$(OMP_NUM_THREADS=1 mpiexec -n 1 -x LD_PRELOAD="$mkl_dir/libmkl_rt.so.2" \
      -x LD_LIBRARY_PATH="$mkl_dir" -x MKL_THREADING_LAYER=SEQUENTIAL -x MKL_VERBOSE=1 \
      "$train" -model tiny -steps 1 -log_every 0 2>&1 | sed -n 's/^MKL_VERBOSE \(oneMKL [^,]*\) Product.*/\1/p' | head -1)
fi

fi

if has_part B; then
# ---- B: F=W vs F=1 at W=2, 1 thread per rank --------------------------------
echo
echo "== B: W=2, 1 thread per rank, GPT-2 with $N_LAYER_B blocks, B=$B T=$T per rank, $STEPS steps, $REPEATS repeats"
for i in $(seq 1 "$REPEATS"); do
  quiet; q1=$idle_seen
  run_ours "f2.$i" 2 1 --bind-to core -- -model gpt2 -n_layer "$N_LAYER_B" -sharding_factor 2
  quiet; q2=$idle_seen
  run_ours "f1.$i" 2 1 --bind-to core -- -model gpt2 -n_layer "$N_LAYER_B" -sharding_factor 1
  echo "   repeat $i: F=2 $(median_of "$out/f2.$i.log") ms$q1, F=1 $(median_of "$out/f1.$i.log") ms$q2"
done
comm=$($PYTHON - "$out/f2.1.log" "$out/f1.1.log" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    s = json.loads(open(path).read().strip().splitlines()[-1])
    c = s["comm_per_step"]
    print("   F=%d comm per step (rank 0): all-gather %.0f MB, reduce-scatter %.0f MB, "
          "all-reduce %.0f MB; param shard %.0f MB" % (
              s["sharding_factor"], c["all_gather_bytes"] / 1e6, c["reduce_scatter_bytes"] / 1e6,
              c["all_reduce_bytes"] / 1e6, s["memory"]["param_shard_bytes"] / 1e6))
EOF
)

fi

# ---- C: W=2 FSDP against PyTorch FSDP2, 1 thread per rank ------------------
if has_part C; then
echo
echo "== C: W=2, 1 thread per rank (each pinned to a core), GPT-2 124M, B=$B T=$T per rank: fsdp-train F=2 vs PyTorch FSDP2 (fully_shard, gloo), $STEPS steps, $REPEATS repeats"
for i in $(seq 1 "$REPEATS"); do
  quiet; q1=$idle_seen
  run_ours "c_ours.$i" 2 1 --bind-to core -- -model gpt2 -sharding_factor 2
  quiet; q2=$idle_seen
  $PYTHON "$here/bench_fsdp2_pytorch.py" --nproc 2 --model gpt2 --batch_size $B --seq_len $T \
    --steps "$STEPS" --warmup_steps "$WARMUP" --threads 1 >"$out/c_torch.$i.log" 2>&1 ||
    { echo "run_bench: PyTorch FSDP2 failed:" >&2; tail -5 "$out/c_torch.$i.log" >&2; exit 1; }
  echo "   repeat $i: ours $(median_of "$out/c_ours.$i.log") ms$q1, PyTorch FSDP2 $(median_of "$out/c_torch.$i.log") ms$q2"
done
fi
# ---- summary -----------------------------------------------------------------
for f in "$out"/ours.1.log "$out"/f2.1.log "$out"/c_ours.1.log; do
  [ -z "${core:-}" ] && [ -e "$f" ] && core=$(sed -n 's/.*BLAS core \([^ ,]*\).*/\1/p' "$f" | head -1)
done
echo
echo "== results: median of the per-repeat ratios [min, max over repeats]; best = fastest / fastest repeat"
echo "   BLAS: fsdp-train OpenBLAS core ${core:-?} (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}); PyTorch ${torch_blas:-?}"
if has_part A; then
read -r a amin amax abest <<<"$(ratios ours torch)"
echo "   A  ours (OpenBLAS $core) / PyTorch (MKL): $a  [$amin, $amax]  best $abest   target <= 0.8  -> $( $PYTHON -c "print('PASS' if $a <= 0.8 else 'MISS')")"
echo "      step ms per repeat: ours $(medians ours)| PyTorch $(medians torch)"
if [ -n "$mkl_dir" ]; then
  read -r m mmin mmax mbest <<<"$(ratios mkl torch)"
  echo "   A' ours (MKL sgemm, $mkl_ver, $n sgemm calls seen by MKL_VERBOSE) / PyTorch (MKL): $m  [$mmin, $mmax]  best $mbest   target <= 0.8  -> $( $PYTHON -c "print('PASS' if $m <= 0.8 else 'MISS')")"
  echo "      step ms per repeat: ours+MKL $(medians mkl)"
else
  echo "   A' ours with MKL: skipped (no libmkl_rt.so.2; python3 -m pip install mkl==2024.2.0, or set MKL_LIB_DIR)"
fi
fi
if has_part B; then
read -r f fmin fmax fbest <<<"$(ratios f2 f1)"
echo "   B  F=2 / F=1 at W=2: $f  [$fmin, $fmax]  best $fbest   target <= 1.05  -> $( $PYTHON -c "print('PASS' if $f <= 1.05 else 'MISS')")"
echo "      step ms per repeat: F=2 $(medians f2)| F=1 $(medians f1)"
echo "$comm"
fi
if has_part C; then
  read -r c cmin cmax cbest <<<"$(ratios c_ours c_torch)"
  echo "   C  ours F=2 / PyTorch FSDP2 at W=2: $c  [$cmin, $cmax]  best $cbest   target <= 0.6  -> $( $PYTHON -c "print('PASS' if $c <= 0.6 else 'MISS')")"
  echo "      step ms per repeat: ours $(medians c_ours)| PyTorch FSDP2 $(medians c_torch)"
  echo "      $(sed -n 's/^pytorch fsdp2: //p' "$out/c_torch.1.log" | head -1)"
fi
echo "   load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
