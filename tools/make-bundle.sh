#!/usr/bin/env bash
# make-bundle.sh -- a relocatable fsdp bundle for machines without MPI,
# HDF5 or OpenBLAS packages (clusters, containers, bare GPU nodes).
#
# Usage: make-bundle.sh [--tar] --bindir DIR --libdir DIR OUTDIR
#   --bindir DIR   installed fsdp programs (every fsdp-* file is carried)
#   --libdir DIR   installed libfsdp.so*
#   --tar          also write OUTDIR.tar.gz (top folder: basename of OUTDIR)
# `make bundle` runs it on a staged `make install-exec` (Makefile.am).
#
# OUTDIR (new or empty) gets:
#   bin/       the fsdp-* programs (fsdp-train, fsdp-plan, fsdp-ckpt,
#              fsdp-report) and fsdp-env; mpirun/mpiexec
#              (orterun), orted, ompi_info
#   lib/       libfsdp and every non-system shared library ldd finds for
#              them: OpenMPI, PMIx, hwloc, libevent, parallel HDF5 (+ szip,
#              zlib), OpenBLAS (+ gfortran, quadmath), ...
#   lib/openmpi, lib/pmix   the MCA components a single node needs (those
#              needing UCX, libfabric, verbs, PSM or OpenSHMEM left out)
#   share/openmpi, share/pmix, etc/openmpi   help files and parameters
#   env.sh     `source OUTDIR/env.sh` (bash/zsh): PATH, LD_LIBRARY_PATH,
#              OPAL_* / PMIX_* install directories pointing into OUTDIR
#   BUNDLE-INFO.txt   what is inside, source packages, glibc needed
# On the target:
#   OUTDIR/bin/fsdp-env mpirun -n 4 fsdp-train -model gpt2 ...
#   (or: source OUTDIR/env.sh; mpirun -n 4 fsdp-train ...)
# Not carried (the target's own are used): glibc and the loader, libgcc_s /
# libstdc++, and the CUDA / NCCL / NVIDIA driver libraries (env.sh looks
# for those in the usual places and pip wheels when the loader cannot find
# them: see there).  fsdp-report is
# a Python script: it needs python3 with h5py, numpy, matplotlib there.
#
# The recipe (component selection, relocation variables, HDF5's S3 stubs,
# the isolated launcher without ssh) is the runtime kit's, shown to work in
# a bare Debian 12 chroot: see notes/runtime-kit.md.
set -euo pipefail

die() { echo "make-bundle: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

bindir='' libdir='' make_tar=0 out=''
while (($#)); do
    case $1 in
        --bindir) bindir=${2:?--bindir needs a folder}; shift 2 ;;
        --libdir) libdir=${2:?--libdir needs a folder}; shift 2 ;;
        --tar) make_tar=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [[ -z $out ]] || die "one OUTDIR only"; out=$1; shift ;;
    esac
done
[[ -n $bindir && -n $libdir && -n $out ]] || { usage >&2; exit 2; }
[[ -x $bindir/fsdp-train ]] || die "$bindir/fsdp-train not found (run make install-exec first)"
compgen -G "$libdir/libfsdp.so*" >/dev/null || die "no libfsdp.so in $libdir"
# The bundle carries OpenMPI's launcher and components: an fsdp built against
# another MPI (configure --with-mpi=mpich) would start as singletons under it.
libfsdp=$(compgen -G "$libdir/libfsdp.so*" | head -1)
# grep reads all of ldd's output: with -q it would stop at the match, ldd
# could die of SIGPIPE, and pipefail would fail the test of a good library
ldd "$libfsdp" | grep 'libmpi\.so' >/dev/null ||
    die "$libfsdp is not linked against OpenMPI (libmpi.so): bundles are made of OpenMPI builds only (configure --with-mpi=openmpi)"
for t in ldd objdump orterun orted; do
    command -v "$t" >/dev/null || die "$t not found (need binutils and openmpi-bin)"
done

# ---- where Debian puts things ----------------------------------------------
ma=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
ompi_pkglib=/usr/lib/$ma/openmpi/lib/openmpi3
if command -v ompi_info >/dev/null; then
    p=$(ompi_info --path pkglibdir 2>/dev/null | awk '{print $2}')
    [[ -n $p && -d $p ]] && ompi_pkglib=$p
fi
ompi_data=/usr/share/openmpi
ompi_etc=/etc/openmpi
pmix_root=/usr/lib/$ma/pmix2
[[ -d $ompi_pkglib ]] || die "OpenMPI components not found in $ompi_pkglib"
[[ -d $ompi_data ]] || die "OpenMPI help files not found in $ompi_data"

drop_deps='^(libucp|libuct|libucs|libucm|libfabric|libibverbs|librdmacm|libefa|libpsm[a-z0-9_]*|libinfinipath|liboshmem)\.'
glibc_libs='^(ld-linux[-a-z0-9_]*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libBrokenLocale|libthread_db|libc_malloc_debug|libnss_[a-z0-9_]+|libmemusage|libpcprofile|libSegFault)\.so'
# (libOpenCL is carried: it is the vendor-neutral ICD loader Debian's oneDNN
# links, not a driver; the ICDs it finds stay the target's)
gpu_libs='^lib(cuda|cudart|nccl|nvidia-[a-z0-9_-]+|nvrtc[a-z0-9_.-]*|nvJitLink|nvToolsExt|cublas|cublasLt|cufft|cufftw|curand|cusolver|cusolverMg|cusparse|cudnn[a-z0-9_]*|cupti|nvml)\.so'
gpu_dirs='^(/usr/local/cuda|/opt/nvidia|/usr/lib/[^/]+/nvidia)'
gcc_libs='^(libgcc_s|libstdc\+\+)\.so'

if [[ -e $out ]]; then
    [[ -d $out && -z $(ls -A "$out") ]] || die "$out exists and is not an empty folder"
fi
mkdir -p "$out"/{bin,lib/openmpi,lib/pmix,lib/hwloc,share/openmpi,share/pmix,etc/openmpi,etc/pmix}
out=$(cd "$out" && pwd)

# ---- fsdp --------------------------------------------------------------------
for p in "$bindir"/fsdp-*; do  # fsdp-train, fsdp-plan, fsdp-ckpt, fsdp-report, ...
    [[ -f $p ]] && install -m 755 "$p" "$out/bin/"
done
cp -P "$libdir"/libfsdp.so* "$out/lib/"
# a CUDA build's back-end, loaded by libfsdp from its own folder on
# -device cuda only ([Note: the CUDA module] in lib/device/cuda_module.h)
if [[ -f $libdir/libfsdp-cuda.so ]]; then install -m 755 "$libdir/libfsdp-cuda.so" "$out/lib/"; fi

# ---- the MPI launcher and its daemons ------------------------------------------
for t in orterun orted ompi_info; do
    src=$(command -v "$t" || true)
    [[ -n $src ]] && install -m 755 "$(readlink -f "$src")" "$out/bin/$t"
done
ln -sf orterun "$out/bin/mpirun"
ln -sf orterun "$out/bin/mpiexec"

# ---- OpenMPI and PMIx components, help files, parameters ------------------------
dropped=()
for c in "$ompi_pkglib"/*.so; do
    if awk '{print $1}' <<<"$(ldd "$c" 2>/dev/null || true)" | grep -E "$drop_deps" >/dev/null; then
        dropped+=("$(basename "$c" .so)")
        continue
    fi
    install -m 644 "$c" "$out/lib/openmpi/"
done
if [[ -d $pmix_root/lib/pmix ]]; then install -m 644 "$pmix_root"/lib/pmix/*.so "$out/lib/pmix/"; fi
cp -r "$ompi_data"/. "$out/share/openmpi/"
rm -f "$out"/share/openmpi/*-wrapper-data.txt "$out"/share/openmpi/*.supp
if [[ -d $pmix_root/share/pmix ]]; then cp -r "$pmix_root"/share/pmix/. "$out/share/pmix/"; fi
for f in openmpi-mca-params.conf openmpi-default-hostfile; do
    [[ -f $ompi_etc/$f ]] && install -m 644 "$ompi_etc/$f" "$out/etc/openmpi/"
done
printf '# component path is set by env.sh (PMIX_MCA_mca_base_component_path)\n' \
    >"$out/etc/pmix/pmix-mca-params.conf"

# ---- HDF5 without its S3 driver's dependencies (needs patchelf) ------------------
# Debian's HDF5 links libcurl/libcrypto for the read-only S3 driver only;
# relink the bundle's copy against stubs that abort if that driver is used,
# so curl/OpenSSL/GnuTLS/Kerberos/LDAP stay out of the bundle (and out of
# LD_LIBRARY_PATH, where they would shadow the target's own).
stub_s3() {  # $1 = HDF5 library in $out/lib
    local lib=$1 dep stub src vers v f
    local -a syms
    for dep in libcurl.so.4 libcrypto.so.3; do
        grep -q "NEEDED  *$dep\$" <<<"$(objdump -p "$lib")" || continue
        stub=libkit-nos3-${dep%%.so*}.so
        stub=${stub/-lib/-}
        vers=$(objdump -p "$lib" | awk -v d="$dep" '
            /required from/ {on = ($3 == d ":")} on && NF == 4 {print $4}')
        src=$(mktemp -d)
        cat >"$src/stub.c" <<'STUB'
#include <stdio.h>
#include <stdlib.h>
static void nos3(const char *f) {
    fprintf(stderr, "%s: HDF5 read-only S3 (ros3) driver is not in this fsdp bundle\n", f);
    abort();
}
STUB
        : >"$src/syms"
        for v in $vers; do
            mapfile -t syms < <(objdump -T "$lib" |
                awk -v v="($v)" '$0 ~ /[*]UND[*]/ && $(NF-1) == v {print $NF}')
            ((${#syms[@]})) || continue
            for f in "${syms[@]}"; do
                printf 'void *%s(void) { nos3("%s"); return 0; }\n' "$f" "$f" >>"$src/stub.c"
            done
            { printf '%s { global: ' "$v"; printf '%s; ' "${syms[@]}"; printf '};\n'; } >>"$src/syms"
        done
        cc -shared -fPIC -O2 -o "$out/lib/$stub" -Wl,-soname,"$stub" \
            -Wl,--version-script,"$src/syms" "$src/stub.c"
        rm -rf "$src"
        patchelf --replace-needed "$dep" "$stub" "$lib"
        echo "  $(basename "$lib"): $dep -> $stub" >>"$out/.stubs"
    done
}
hdf5_srcs=()
if command -v patchelf >/dev/null && command -v cc >/dev/null; then
    while read -r name arrow path _; do
        [[ $arrow == "=>" && $name == libhdf5*.so* && -f $path ]] || continue
        grep -Eq 'NEEDED +(libcurl|libcrypto)\.' <<<"$(objdump -p "$path")" || continue
        install -m 644 "$(readlink -f "$path")" "$out/lib/$name"
        hdf5_srcs+=("$(readlink -f "$path")")
        stub_s3 "$out/lib/$name"
    done < <(LD_LIBRARY_PATH=$out/lib ldd "$out/bin/fsdp-train")
else
    echo "make-bundle: patchelf or cc missing: carrying HDF5's S3 dependencies (curl, OpenSSL, ...)" >&2
fi

# ---- shared libraries: the ldd closure of every ELF file ------------------------
mapfile -t elfs < <(find "$out/bin" "$out/lib" -type f | sort)
declare -A seen=()
missing=()
srcs=("$(readlink -f "$(command -v orterun)")" "${hdf5_srcs[@]}")
for e in "${elfs[@]}"; do
    head -c 4 "$e" | grep $'\x7fELF' >/dev/null || continue
    while read -r name arrow path _; do
        [[ $arrow == "=>" ]] || continue
        [[ $name =~ $glibc_libs ]] && continue
        [[ $name =~ $gpu_libs || $path =~ $gpu_dirs ]] && continue
        [[ $name =~ $gcc_libs ]] && continue
        if [[ $path == not ]]; then missing+=("$name (needed by ${e#"$out"/})"); continue; fi
        [[ -n ${seen[$name]:-} || $path == "$out"/* ]] && continue
        seen[$name]=1
        real=$(readlink -f "$path")
        srcs+=("$real")
        [[ -e $out/lib/$name ]] || install -m 644 "$real" "$out/lib/$name"
    done < <(LD_LIBRARY_PATH=$out/lib ldd "$e" 2>/dev/null || true)
done
if ((${#missing[@]})); then
    printf 'make-bundle: unresolved libraries on this machine:\n' >&2
    printf '  %s\n' "${missing[@]}" >&2
    die "install the packages that provide them"
fi

# ---- environment: env.sh (sourced) and bin/fsdp-env (wrapper) --------------------
cat >"$out/env.sh" <<'EOF'
# fsdp bundle environment.  From bash or zsh:  source /path/to/bundle/env.sh
# (another shell: FSDP_BUNDLE=/path/to/bundle; . "$FSDP_BUNDLE/env.sh")
if [ -n "${BASH_VERSION:-}" ]; then
    _fsdp_env=${BASH_SOURCE[0]}
elif [ -n "${ZSH_VERSION:-}" ]; then
    eval '_fsdp_env=${(%):-%x}'
else
    _fsdp_env=${FSDP_BUNDLE:?set FSDP_BUNDLE to the bundle folder first}/env.sh
fi
FSDP_BUNDLE=$(cd "$(dirname "$_fsdp_env")" && pwd -P)
unset _fsdp_env
export FSDP_BUNDLE
case ":${PATH:-}:" in *":$FSDP_BUNDLE/bin:"*) ;; *) PATH=$FSDP_BUNDLE/bin${PATH:+:$PATH} ;; esac
case ":${LD_LIBRARY_PATH:-}:" in *":$FSDP_BUNDLE/lib:"*) ;;
    *) LD_LIBRARY_PATH=$FSDP_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
export PATH LD_LIBRARY_PATH
# A CUDA build's back-end, lib/libfsdp-cuda.so (loaded on -device cuda
# only: -device cpu needs no CUDA library), needs cudart, cuBLAS and NCCL,
# which the bundle does not carry (the target's own match its driver) and
# finds through an rpath to the build machine's CUDA.  Where the loader
# finds them neither so nor on LD_LIBRARY_PATH, look where they usually
# are: $CUDA_HOME/lib64, /usr/local/cuda/lib64, the NVIDIA pip wheels of
# the python3 on PATH (site-packages/nvidia/*/lib: PyTorch's NCCL and
# cuBLAS); appended, so the target's own settings win.
_fsdp_lib=$(find "$FSDP_BUNDLE/lib" -maxdepth 1 -name 'libfsdp-cuda.so' 2>/dev/null | head -n 1)
if [ -n "$_fsdp_lib" ] && ldd "$_fsdp_lib" 2>/dev/null | grep -E '(cudart|cublas|nccl)[^ ]* => not found' >/dev/null; then
    for _fsdp_d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 \
        $(python3 -c 'import glob, os, site
for p in site.getsitepackages() + [site.getusersitepackages()]:
    print("\n".join(sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")))))' 2>/dev/null); do
        if [ -d "$_fsdp_d" ] && find "$_fsdp_d/" -maxdepth 1 \( -name 'libcudart.so*' -o \
            -name 'libcublas*.so*' -o -name 'libnccl.so*' \) 2>/dev/null | grep . >/dev/null; then
            case ":$LD_LIBRARY_PATH:" in *":$_fsdp_d:"*) ;; *) LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$_fsdp_d ;; esac
        fi
    done
    unset _fsdp_d
fi
unset _fsdp_lib
# OpenMPI install directories (relocation)
export OPAL_PREFIX=$FSDP_BUNDLE OPAL_EXEC_PREFIX=$FSDP_BUNDLE
export OPAL_BINDIR=$FSDP_BUNDLE/bin OPAL_SBINDIR=$FSDP_BUNDLE/bin OPAL_LIBEXECDIR=$FSDP_BUNDLE/bin
export OPAL_LIBDIR=$FSDP_BUNDLE/lib OPAL_PKGLIBDIR=$FSDP_BUNDLE/lib/openmpi
export OPAL_DATAROOTDIR=$FSDP_BUNDLE/share OPAL_DATADIR=$FSDP_BUNDLE/share
export OPAL_PKGDATADIR=$FSDP_BUNDLE/share/openmpi OPAL_SYSCONFDIR=$FSDP_BUNDLE/etc/openmpi
# PMIx install directories
export PMIX_PREFIX=$FSDP_BUNDLE PMIX_EXEC_PREFIX=$FSDP_BUNDLE
export PMIX_BINDIR=$FSDP_BUNDLE/bin PMIX_LIBDIR=$FSDP_BUNDLE/lib PMIX_PKGLIBDIR=$FSDP_BUNDLE/lib/pmix
export PMIX_DATAROOTDIR=$FSDP_BUNDLE/share PMIX_DATADIR=$FSDP_BUNDLE/share
export PMIX_PKGDATADIR=$FSDP_BUNDLE/share/pmix PMIX_SYSCONFDIR=$FSDP_BUNDLE/etc/pmix
export PMIX_MCA_mca_base_component_path=$FSDP_BUNDLE/lib/pmix
# hwloc: no plugins of another hwloc installed on the machine
export HWLOC_PLUGINS_PATH=$FSDP_BUNDLE/lib/hwloc
# Without ssh/rsh OpenMPI 4.1's rsh launcher refuses to start even on one
# node (mpirun and singletons alike): use the local-only launcher.
if [ -z "${OMPI_MCA_plm:-}${OMPI_MCA_plm_rsh_agent:-}" ] &&
   ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
    export OMPI_MCA_plm=isolated
fi
EOF

cat >"$out/bin/fsdp-env" <<'EOF'
#!/usr/bin/env bash
# fsdp-env [COMMAND [ARGS...]]: run COMMAND (default: print the settings)
# with this fsdp bundle's programs and libraries: PATH, LD_LIBRARY_PATH and
# OpenMPI's OPAL_* / PMIx's PMIX_* directories point into the bundle, so
#   /path/to/bundle/bin/fsdp-env mpirun -n 4 fsdp-train -model gpt2 ...
# works on a machine without MPI, HDF5 or OpenBLAS installed.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# shellcheck disable=SC1091
source "$here/env.sh"
if (($# == 0)); then
    env | grep -E '^(FSDP_BUNDLE|PATH|LD_LIBRARY_PATH|OPAL_|PMIX_|HWLOC_|OMPI_MCA_plm)' | sort
    exit 0
fi
exec "$@"
EOF
chmod 755 "$out/bin/fsdp-env"

# ---- what it holds -------------------------------------------------------------
# (objdump fails on the scripts in bin/: not an error here)
glibc_need=$({ find "$out/bin" "$out/lib" -type f -exec objdump -p {} + 2>/dev/null || true; } |
    grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -1)
{
    echo "fsdp bundle: $(basename "$out")"
    # shellcheck disable=SC1091
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME") $(uname -m)"
    echo "programs: $(find "$out/bin" -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ')"
    echo "needs on the target: Linux $(uname -m), glibc >= ${glibc_need#GLIBC_}, libgcc_s, libstdc++"
    if [[ -f $out/lib/libfsdp-cuda.so ]]; then
        echo "  and, for -device cuda (lib/libfsdp-cuda.so): the NVIDIA driver, CUDA runtime, cuBLAS and NCCL >= 2.11"
    else
        echo "  (no CUDA back-end: a CPU-only build)"
    fi
    echo "OpenMPI components left out (fabric/OpenSHMEM): ${dropped[*]:-none}"
    if [[ -f $out/.stubs ]]; then
        echo "HDF5 read-only S3 driver left out (stubbed):"; cat "$out/.stubs"; rm -f "$out/.stubs"
    fi
    if command -v dpkg-query >/dev/null; then
        echo "source packages:"
        # one query for all files (Debian 12 lists some under /lib, some
        # under /usr/lib: ask for both spellings)
        all=("${srcs[@]}" "$ompi_pkglib" "$pmix_root/lib/pmix")
        { dpkg-query -S "${all[@]}" "${all[@]#/usr}" 2>/dev/null || true; } |
            sed 's/: .*//; s/, /\n/g' | sort -u | while read -r pkg; do
            printf '  %s %s\n' "$pkg" "$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null)"
        done
    fi
    echo "use: $(basename "$out")/bin/fsdp-env mpirun -n 4 fsdp-train ...  (or source env.sh)"
} >"$out/BUNDLE-INFO.txt"

if ((make_tar)); then
    tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
fi
echo "bundle: $out ($(du -sh "$out" | cut -f1), $(find "$out" -type f | wc -l) files)"
((make_tar)) && echo "archive: $out.tar.gz ($(du -h "$out.tar.gz" | cut -f1))"
echo "use: $out/bin/fsdp-env mpirun -n 4 fsdp-train ..."
