#!/bin/bash
# test_bundle.sh: `make bundle` into a temporary folder, unpack the tarball
# at another path (relocation), and run the bundled programs from there
# with a cleared environment (env -i: no LD_LIBRARY_PATH, PATH without the
# bundle):
# - every library of every ELF file in the bundle resolves, and only to the
#   bundle, glibc, libgcc_s/libstdc++ or the CUDA toolkit;
# - mpirun inside fsdp-env is the bundle's, and OpenMPI's components
#   directory is the bundle's (OPAL relocation works);
# - bin/fsdp-env mpirun -n 2 fsdp-train -model tiny -steps 2 prints its
#   two step lines with a finite loss, equal to the build tree's run;
# - env.sh finds CUDA libraries the loader cannot (CUDA_HOME/lib64), and
#   leaves LD_LIBRARY_PATH alone when nothing is missing.
#   usage: test_bundle.sh BUILDDIR
set -u
builddir=$1
if [ "${FSDP_MPI:-openmpi}" != openmpi ]; then  # tools/make-bundle.sh carries OpenMPI only
    echo "SKIP: make bundle packs OpenMPI builds only; this build uses $FSDP_MPI"; exit 77
fi
tmp=$(mktemp -d /tmp/fsdp_test_bundle.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

command -v make >/dev/null || { echo "make not found: skipped"; exit 77; }
if ! make -s -C "$builddir" bundle BUNDLE_DIR="$tmp/build" >"$tmp/make.log" 2>&1; then
    echo "FAIL: make bundle"; tail -20 "$tmp/make.log"; exit 1
fi
tail -3 "$tmp/make.log"
tarball=$(find "$tmp/build" -maxdepth 1 -name 'fsdp-bundle-*.tar.gz' | head -1)
[ -n "$tarball" ] || { echo "FAIL: no fsdp-bundle-*.tar.gz"; exit 1; }
mkdir -p "$tmp/elsewhere"
tar -C "$tmp/elsewhere" -xzf "$tarball" || { echo "FAIL: unpacking $tarball"; exit 1; }
rm -rf "$tmp/build" # the copy at the build path is gone: only the unpacked one exists
b=$(find "$tmp/elsewhere" -mindepth 1 -maxdepth 1 -name 'fsdp-bundle-*' | head -1)
for f in bin/fsdp-train bin/fsdp-env bin/mpirun bin/orted env.sh BUNDLE-INFO.txt lib/openmpi; do
    [ -e "$b/$f" ] || fail "bundle lacks $f"
done
ls "$b"/lib/libfsdp.so* >/dev/null 2>&1 || fail "bundle lacks lib/libfsdp.so"
ls "$b"/lib/libmpi.so* >/dev/null 2>&1 || fail "bundle lacks libmpi"
ls "$b"/lib/libhdf5*.so* >/dev/null 2>&1 || fail "bundle lacks parallel HDF5"
ls "$b"/lib/libopenblas*.so* >/dev/null 2>&1 || fail "bundle lacks OpenBLAS"

# A clean environment, as on a machine without the packages.
run() { env -i PATH=/usr/bin:/bin HOME="$tmp" OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    "$b/bin/fsdp-env" "$@"; }

# Libraries: resolved, and from the bundle unless system/GPU.
allowed='^(/lib|/usr/lib)/[^/]*/?(ld-linux|libc\.|libm\.|libmvec|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+)|^/usr/local/cuda|^/lib64/ld-linux'
nelf=0
while IFS= read -r -d '' e; do
    head -c 4 "$e" | grep -q "$(printf '\177ELF')" || continue
    nelf=$((nelf + 1))
    run ldd "$e" >"$tmp/ldd" 2>&1
    if grep -q "not found" "$tmp/ldd"; then
        fail "${e#"$b"/}: $(grep 'not found' "$tmp/ldd" | head -2 | tr '\n' ' ')"
    fi
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' "$tmp/ldd" | while read -r p; do
        case $p in "$b"/*) ;; *) echo "$p" ;; esac
    done | grep -Ev "$allowed" | sed "s|^|${e#"$b"/} loads |" >>"$tmp/outside"
done < <(find "$b/bin" "$b/lib" -type f -print0)
if [ -s "$tmp/outside" ]; then
    fail "libraries from outside the bundle:"; sort -u "$tmp/outside" | head -10 | sed 's/^/    /'
else
    echo "ok: $nelf ELF files resolve to the bundle, glibc, libgcc/libstdc++ or CUDA"
fi

mpirun_path=$(run sh -c 'command -v mpirun')
[ "$mpirun_path" = "$b/bin/mpirun" ] || fail "mpirun in fsdp-env is '$mpirun_path', not the bundle's"
pkglib=$(run ompi_info --path pkglibdir 2>&1 | awk '{print $2}')
[ "$pkglib" = "$b/lib/openmpi" ] || fail "OpenMPI components from '$pkglib', not $b/lib/openmpi"

# The bundled fsdp-train, 2 ranks, against the build tree's fsdp-train.
run timeout 60 mpirun --oversubscribe -n 2 fsdp-train -model tiny -steps 2 >"$tmp/out" 2>&1
st=$?
if [ $st -ne 0 ]; then
    fail "bundled fsdp-train exited $st"; tail -15 "$tmp/out" | sed 's/^/    /'
fi
line=$(grep -E '^step 2/2 \| loss [0-9]+\.[0-9]+' "$tmp/out")
if [ -z "$line" ]; then
    fail "no 'step 2/2 | loss X' line"; tail -5 "$tmp/out" | sed 's/^/    /'
else
    echo "ok: bundled run: $line"
    ref=$(OMP_NUM_THREADS=1 timeout 60 "${FSDP_MPIEXEC:-mpiexec}" --oversubscribe -n 2 \
        "$builddir/src/fsdp-train" -model tiny -steps 2 2>/dev/null | grep -E '^step 2/2')
    loss() { sed -E 's/.*\| loss ([0-9.]+) .*/\1/'; }
    if [ -n "$ref" ] && [ "$(echo "$line" | loss)" != "$(echo "$ref" | loss)" ]; then
        fail "bundled loss $(echo "$line" | loss) differs from the build tree's $(echo "$ref" | loss)"
    fi
fi

# a CUDA build's bundle carries its CUDA back-end next to libfsdp
if [ -f "$builddir/lib/.libs/libfsdp-cuda.so" ]; then
    [ -f "$b/lib/libfsdp-cuda.so" ] && echo "ok: the CUDA back-end lib/libfsdp-cuda.so is carried" ||
        fail "CUDA build: the bundle has no lib/libfsdp-cuda.so"
fi

# env.sh and CUDA libraries the loader cannot find (a CUDA build moved to
# a machine whose NCCL is elsewhere: a pip wheel, another CUDA_HOME): a
# stand-in CUDA back-end (lib/libfsdp-cuda.so, [Note: the CUDA module])
# that needs a missing libnccl* gets CUDA_HOME/lib64
# appended to LD_LIBRARY_PATH; the real bundle (nothing missing) does not.
if command -v cc >/dev/null; then
    fb=$tmp/fakebundle
    mkdir -p "$fb/lib" "$tmp/fakecuda/lib64" "$tmp/fakenccl"
    cp "$b/env.sh" "$fb/env.sh"
    echo 'int fsdp_fake(void) { return 0; }' >"$tmp/fake.c"
    cc -shared -fPIC -o "$tmp/fakenccl/libnccl_fsdptest.so.2" -Wl,-soname,libnccl_fsdptest.so.2 "$tmp/fake.c" &&
        cp "$tmp/fakenccl/libnccl_fsdptest.so.2" "$tmp/fakecuda/lib64/libnccl.so.2" &&
        cc -shared -fPIC -o "$fb/lib/libfsdp-cuda.so" "$tmp/fake.c" -L"$tmp/fakenccl" \
            -Wl,--no-as-needed -l:libnccl_fsdptest.so.2 &&
        rm -rf "$tmp/fakenccl"
    ld=$(env -i PATH=/usr/bin:/bin CUDA_HOME="$tmp/fakecuda" bash -c \
        "source '$fb/env.sh' && echo \"\$LD_LIBRARY_PATH\"")
    case ":$ld:" in
        *":$tmp/fakecuda/lib64:"*) echo "ok: env.sh adds CUDA_HOME/lib64 for a missing NCCL: $ld" ;;
        *) fail "env.sh with a missing libnccl: LD_LIBRARY_PATH '$ld' lacks $tmp/fakecuda/lib64" ;;
    esac
    ld=$(env -i PATH=/usr/bin:/bin CUDA_HOME="$tmp/fakecuda" bash -c \
        "source '$b/env.sh' && echo \"\$LD_LIBRARY_PATH\"")
    [ "$ld" = "$b/lib" ] || fail "env.sh of a bundle missing nothing changed LD_LIBRARY_PATH to '$ld'"
fi

if [ $fails -ne 0 ]; then echo "test_bundle: $fails failed"; exit 1; fi
echo "test_bundle: all checks passed"
