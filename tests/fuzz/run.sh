#!/bin/sh
# tests/fuzz/run.sh: build the fuzz harnesses with clang's libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer into a scratch directory,
# then run each for SECONDS (default 20) starting from its checked-in seed
# corpus (tests/fuzz/NAME/corpus, copied: new inputs stay in the scratch
# directory).  Fails on any crash, sanitizer report, leak or broken
# invariant, naming the input that triggers it; such an input belongs in
# tests/fuzz/NAME/regress/ (ctest replays it in every normal build).
#
#   tests/fuzz/run.sh [SECONDS] [NAME...]     NAME: opts data ckpt safetensors
# Environment: CLANG (default clang), FSDP_FUZZ_DIR (scratch directory,
# default a new one under /tmp, removed unless something was found).
# Needs clang and its libFuzzer runtime (Debian 12: clang-14 and
# libclang-rt-14-dev), the MPI C wrapper (mpicc) and the project's build
# dependencies; MPI runs as one process (no mpiexec).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
secs=20
case "${1:-}" in [0-9]*) secs=$1; shift ;; esac
names=${*:-opts data ckpt safetensors}
CLANG=${CLANG:-clang}
scratch=${FSDP_FUZZ_DIR:-$(mktemp -d /tmp/fsdp_fuzz.XXXXXX)}
mkdir -p "$scratch"

# mpicc compiles with clang (OpenMPI and MPICH wrappers both take an override)
export OMPI_CC="$CLANG" MPICH_CC="$CLANG"
san="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; return (int)n * 0; }\n' \
  >"$scratch/probe.c"
if ! "$CLANG" $san -fsanitize=fuzzer "$scratch/probe.c" -o "$scratch/probe" >"$scratch/probe.log" 2>&1; then
  echo "fuzz: '$CLANG' cannot build libFuzzer programs (on Debian 12: apt-get install clang-14 libclang-rt-14-dev):" >&2
  sed 's/^/    /' "$scratch/probe.log" >&2
  exit 1
fi

# the library, instrumented, through the project's own build (static)
[ -x "$top/configure" ] || (cd "$top" && ./autogen.sh)
mkdir -p "$scratch/build"
cd "$scratch/build"
if [ ! -f Makefile ]; then
  echo "fuzz: configuring an instrumented build in $scratch/build"
  "$top/configure" -q --enable-static --disable-shared CC=mpicc \
    CFLAGS="$san -fsanitize=fuzzer-no-link" >"$scratch/configure.log" 2>&1 ||
    { tail -n 20 "$scratch/configure.log" >&2; exit 1; }
fi
make -j"$(nproc 2>/dev/null || echo 2)" lib/libfsdp.la >"$scratch/make.log" 2>&1 ||
  { tail -n 30 "$scratch/make.log" >&2; exit 1; }
flags=$(printf 'fuzz-flags:\n\t@echo $(AM_CPPFLAGS) $(CPPFLAGS) $(AM_CFLAGS)\n' | make -s -f Makefile -f - fuzz-flags)
libs=$(printf 'fuzz-libs:\n\t@echo $(FSDP_DEP_LIBS) $(LIBS)\n' | make -s -f Makefile -f - fuzz-libs)

# MPI's and HDF5's allocations that live until exit are not ours (their
# modules are unloaded by then, so the check at exit is off and libFuzzer's
# check after each input, which sees our leaks, stays on)
printf 'leak:libmpi\nleak:libopen-pal\nleak:libopen-rte\nleak:libhwloc\nleak:libpmix\nleak:libhdf5\nleak:libevent\n' \
  >"$scratch/lsan.supp"
export LSAN_OPTIONS="suppressions=$scratch/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="leak_check_at_exit=0:${ASAN_OPTIONS:-}"  # per-input leak checks stay on
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

found=0
for name in $names; do
  src="$top/tests/fuzz/fuzz_$name.c"
  [ -f "$src" ] || { echo "fuzz: no harness $src" >&2; exit 2; }
  # shellcheck disable=SC2086
  mpicc $san -fsanitize=fuzzer $flags -I"$top/tests/fuzz" "$src" lib/.libs/libfsdp.a $libs -lm \
    -o "fuzz_$name" >"$scratch/link_$name.log" 2>&1 ||
    { cat "$scratch/link_$name.log" >&2; exit 1; }
  work="$scratch/corpus_$name"
  mkdir -p "$work"
  cp "$top/tests/fuzz/$name/corpus/"* "$work/"
  echo "fuzz: $name for ${secs}s from $(ls "$top/tests/fuzz/$name/corpus" | wc -l) seeds"
  if ./"fuzz_$name" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -max_len=4096 \
       -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$scratch/${name}-" \
       "$work" >"$scratch/run_$name.log" 2>&1; then
    echo "fuzz: $name: nothing found ($(grep -m1 'stat::number_of_executed_units' "$scratch/run_$name.log" | awk '{print $2}') inputs run)"
  else
    found=1
    echo "fuzz: $name: FOUND a failure; the input is $(ls "$scratch/${name}-"* 2>/dev/null | head -n 1)"
    echo "      (keep it as tests/fuzz/$name/regress/NAME); the report:"
    grep -v '^#[0-9]\|^INFO:' "$scratch/run_$name.log" | tail -n 40 | sed 's/^/    /'
  fi
done
if [ "$found" -ne 0 ]; then
  echo "fuzz: failures found; the scratch directory $scratch is kept"
  exit 1
fi
[ -n "${FSDP_FUZZ_DIR:-}" ] || rm -rf "$scratch"
echo "fuzz: every harness ran ${secs}s without a failure"
