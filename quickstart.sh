#!/bin/sh
# quickstart.sh: install what is missing, build, then run the demo or the tests.
#
#   ./quickstart.sh demo    # train the default model on 4 ranks
#   ./quickstart.sh test    # the whole test suite (ctest)
#   ./quickstart.sh build   # only install and build
#
# Works on a fresh Debian 12 machine as root or with sudo.  Idempotent: packages
# already installed and an existing build are reused.  Environment knobs:
#   FSDP_BUILD_DIR   build directory (default: build, out of tree)
#   FSDP_NP          ranks for the demo (default 4)
#   CONFIGURE_FLAGS  extra flags for ./configure (e.g. --with-cuda)
#   FSDP_MPI         openmpi (default) or mpich: the MPI (and its parallel
#                    HDF5) to install and build against (configure --with-mpi)
#   FSDP_DEMO_OPTIONS extra fsdp-train options for the demo
set -eu

cd "$(dirname "$0")"
top=$(pwd)
what=${1:-}
case "$what" in
  demo|test|build) ;;
  *) echo "usage: $0 demo|test|build" >&2; exit 2 ;;
esac

# ---- 1. Debian packages -----------------------------------------------------
packages="build-essential autoconf automake libtool pkg-config openmpi-bin
libopenmpi-dev libhdf5-openmpi-dev hdf5-tools libopenblas-dev libjansson-dev libdnnl-dev cmake python3
python3-h5py python3-numpy python3-matplotlib slurm-wlm munge iproute2"
# MPICH beside OpenMPI: Debian's alternatives keep mpicc/mpiexec OpenMPI's
# (higher priority) and configure --with-mpi=mpich names MPICH's own.
mpi=${FSDP_MPI:-openmpi}
case "$mpi" in
  openmpi) ;;
  mpich) packages="$packages mpich libmpich-dev libhdf5-mpich-dev" ;;
  *) echo "quickstart: FSDP_MPI=$mpi: expected openmpi or mpich" >&2; exit 2 ;;
esac
missing=""
for p in $packages; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "quickstart: installing Debian packages:$missing"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
fi

# ---- 2. build -----------------------------------------------------------------
build=${FSDP_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
[ -x configure ] && [ configure -nt configure.ac ] || ./autogen.sh
mkdir -p "$build"
cd "$build"
[ -f Makefile ] && [ config.status -nt "$top/configure" ] || "$top/configure" --with-mpi="$mpi" ${CONFIGURE_FLAGS:-}
make -j"$jobs"

# ---- 3. run ---------------------------------------------------------------------
# OpenMPI refuses root and more ranks than cores unless told; one BLAS thread
# per rank keeps 4 ranks on a small machine from thrashing.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
case "$what" in
  build) exit 0 ;;
  demo) launcher=$(command -v "mpiexec.$mpi" || echo mpiexec)  # not another MPI's mpiexec
        exec "$launcher" -n "${FSDP_NP:-4}" ./src/fsdp-train ${FSDP_DEMO_OPTIONS:-} ;;
  test) exec make check ;;
esac
