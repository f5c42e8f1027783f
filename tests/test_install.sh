#!/bin/sh
# test_install.sh: `make install DESTDIR=TMP` from the build tree, then what
# a program outside the tree sees of it:
# - headers only under include/fsdp, and exactly the public ones: none of
#   the internal headers (back-end adapters, HDF5 helpers, kernel
#   implementations), each installed header compiles on its own with only
#   fsdp.pc's flags (so it includes no uninstalled header and needs no
#   HDF5/CUDA include path), none names a macro of the uninstalled config.h,
#   and <libfsdp.h> reaches every installed header;
# - fsdp.pc, libfsdp.so under lib;
# - tests/install/external.c built with the MPI wrapper and
#   `pkg-config --cflags --libs fsdp` (relocated into TMP), loading the
#   installed libfsdp, run on 2 ranks: its collective sums 1 + 2 = 3 and its
#   two training steps print the losses the build tree's fsdp-train prints
#   for the same options.
#   usage: test_install.sh BUILDDIR SRCDIR MPIEXEC "PREFLAGS"
set -u
builddir=$1 srcdir=$2 mpiexec=$3 preflags=$4
tmp=$(mktemp -d /tmp/fsdp_test_install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

command -v make >/dev/null || { echo "make not found: skipped"; exit 77; }
command -v pkg-config >/dev/null || { echo "pkg-config not found (Debian package pkg-config): skipped"; exit 77; }
mpicc=$(sed -n 's/^MPICC = //p' "$builddir/Makefile")
[ -n "$mpicc" ] || { echo "FAIL: no MPICC in $builddir/Makefile"; exit 1; }

root=$tmp/root
if ! make -s -C "$builddir" install DESTDIR="$root" >"$tmp/install.log" 2>&1; then
    echo "FAIL: make install DESTDIR=$root"; tail -20 "$tmp/install.log"; exit 1
fi

# ---- the installed tree --------------------------------------------------
pc=$(find "$root" -name fsdp.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no fsdp.pc installed"; exit 1; }
pcdir=$(dirname "$pc")
pkg() { PKG_CONFIG_PATH=$pcdir pkg-config "$@" fsdp; }
libdir=$root$(pkg --variable=libdir)
incdir=$root$(pkg --variable=includedir)
ls "$libdir"/libfsdp.so >/dev/null 2>&1 || fail "no libfsdp.so in $libdir"
ls "$pcdir" | grep -qx fsdp.pc || fail "fsdp.pc is not in $pcdir"
[ -f "$incdir/fsdp/libfsdp.h" ] || { echo "FAIL: no include/fsdp/libfsdp.h"; exit 1; }
# nothing next to fsdp/: error.h there would shadow glibc's <error.h>
extra=$(ls "$incdir" | grep -vx fsdp)
[ -z "$extra" ] && echo "ok: include/ holds only fsdp/" || fail "installed outside include/fsdp: $extra"
(cd "$incdir/fsdp" && find . -type f | sed 's|^\./||' | sort) >"$tmp/headers"
echo "installed headers: $(wc -l <"$tmp/headers")"
for internal in device/cuda_util.h io/h5util.h kernels/cpu/kernels_cpu.h kernels/cuda/kernels_cuda.h; do
    grep -qx "$internal" "$tmp/headers" && fail "internal header $internal is installed"
done

# Each header alone, with only the installed tree's flags: an include of an
# uninstalled header, or of <hdf5.h> / CUDA headers, fails here.
cflags="-I$incdir/fsdp"
while read -r h; do
    printf '#include "%s"\n#include "%s"\n' "$h" "$h" >"$tmp/one.c"
    if ! $mpicc -std=c11 -Wall -Wextra -Werror -fsyntax-only $cflags "$tmp/one.c" >"$tmp/one.log" 2>&1; then
        fail "$h does not compile on its own:"; head -5 "$tmp/one.log" | sed 's/^/    /'
    fi
done <"$tmp/headers"
# Macros only config.h defines (FSDP_HAVE_CUDA, HAVE_*, PACKAGE_*): a program
# outside the tree never sees config.h, so a header testing one is wrong.
sed -n 's/^#define \([A-Za-z_0-9]*\).*/\1/p; s|^/\* #undef \([A-Za-z_0-9]*\) \*/|\1|p' \
    "$builddir/config.h" | sort -u >"$tmp/config_macros"
[ -s "$tmp/config_macros" ] || fail "no macros read from $builddir/config.h"
if (cd "$incdir/fsdp" && grep -wnF -f "$tmp/config_macros" $(cat "$tmp/headers")) >"$tmp/uses"; then
    fail "installed headers name config.h macros:"; sed 's/^/    /' "$tmp/uses"
else
    echo "ok: no installed header names one of $(wc -l <"$tmp/config_macros") config.h macros"
fi
# <libfsdp.h> is the one public include: it reaches every installed header.
printf '#include <libfsdp.h>\n' >"$tmp/all.c"
if $mpicc -std=c11 -M $cflags "$tmp/all.c" >"$tmp/deps.mk" 2>&1; then
    tr ' \\' '\n\n' <"$tmp/deps.mk" >"$tmp/deps"
    while read -r h; do
        grep -q "/include/fsdp/$h\$" "$tmp/deps" || fail "<libfsdp.h> does not include $h"
    done <"$tmp/headers"
else
    fail "<libfsdp.h> does not preprocess:"; head -3 "$tmp/deps.mk" | sed 's/^/    /'
fi

# ---- an external program -------------------------------------------------
# pkg-config with the prefix moved into the DESTDIR tree (what a user with
# PKG_CONFIG_PATH=<prefix>/lib/pkgconfig gets without DESTDIR).
flags=$(pkg --define-variable=libdir="$libdir" --define-variable=includedir="$incdir" --cflags --libs)
echo "pkg-config --cflags --libs fsdp: $flags"
case $flags in *"-I$incdir/fsdp"*"-L$libdir"*"-lfsdp"*) ;; *) fail "unexpected pkg-config flags" ;; esac
case $flags in *"$srcdir"*|*"$builddir"*) fail "pkg-config flags point into the source/build tree" ;; esac
if ! $mpicc -std=c11 -Wall -Wextra -Werror "$srcdir/tests/install/external.c" $flags \
        -Wl,-rpath,"$libdir" -o "$tmp/external" >"$tmp/cc.log" 2>&1; then
    echo "FAIL: building tests/install/external.c:"; cat "$tmp/cc.log"; exit 1
fi
loaded=$(ldd "$tmp/external" | awk '$1 ~ /^libfsdp\.so/ {print $3}')
case $loaded in
    "$libdir"/*) echo "ok: external loads $loaded" ;;
    *) fail "external loads libfsdp from '$loaded', not from $libdir" ;;
esac

opts="-model tiny -steps 2 -log_every 0"
# shellcheck disable=SC2086
$mpiexec $preflags -n 2 "$tmp/external" $opts >"$tmp/ext.out" 2>"$tmp/ext.err"
rc=$?
cat "$tmp/ext.out"
[ $rc -eq 0 ] || { fail "external exited $rc"; cat "$tmp/ext.err"; }
grep -qx "ranks 2 sum 3" "$tmp/ext.out" || fail "collective: expected 'ranks 2 sum 3'"
ext_losses=$(sed -n 's/^step [0-9]* loss //p' "$tmp/ext.out" | tr '\n' ' ')
# shellcheck disable=SC2086
$mpiexec $preflags -n 2 "$builddir/src/fsdp-train" $opts -summary json >"$tmp/ref.out" 2>&1 ||
    { fail "build tree fsdp-train failed"; tail -5 "$tmp/ref.out"; }
ref_losses=$(sed -n 's/.*"losses": \[\([^]]*\)\].*/\1/p' "$tmp/ref.out" | tr -d ',' | tr -s ' ')
ref_losses="${ref_losses% } "
echo "losses: external [ $ext_losses] build tree fsdp-train [ $ref_losses]"
n=$(echo "$ext_losses" | wc -w)
[ "$n" -eq 2 ] || fail "external printed $n step losses, expected 2"
[ "$ext_losses" = "$ref_losses" ] || fail "external's losses differ from fsdp-train's"
for l in $ext_losses; do
    case $l in *nan*|*inf*|0) fail "loss $l is not a finite positive number" ;; esac
done

[ $fails -eq 0 ] && echo "PASS" && exit 0
echo "$fails failure(s)"; exit 1
