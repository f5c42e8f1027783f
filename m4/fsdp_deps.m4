# fsdp_deps.m4: dependency checks.  Each failure stops configure with one
# message naming the Debian package that provides the missing piece.

# FSDP_PKG_FLAGS(VAR, MODULE): set VAR_CFLAGS/VAR_LIBS from pkg-config when
# the module is known; leave them alone otherwise.
AC_DEFUN([FSDP_PKG_FLAGS], [
  if test -n "$PKG_CONFIG" && $PKG_CONFIG --exists $2 2>/dev/null; then
    test -n "$$1[]_CFLAGS" || $1[]_CFLAGS=`$PKG_CONFIG --cflags $2`
    test -n "$$1[]_LIBS" || $1[]_LIBS=`$PKG_CONFIG --libs $2`
  fi
])

# MPI: which MPI to build against.  --with-mpi=openmpi|mpich picks Debian's
# wrapper for it (mpicc.openmpi / mpicc.mpich); without --with-mpi OpenMPI's
# is preferred, so a machine with both (Debian's "mpi" alternative may point
# at either) keeps building against OpenMPI, and a machine with neither
# Debian wrapper (Cray, modules) uses the mpicc on PATH.  MPICC or CC set by
# the user win over both.
AC_DEFUN([FSDP_PROG_MPICC], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi=openmpi|mpich],
      [the MPI to build against: its mpicc, launcher and parallel HDF5 (default: OpenMPI when installed, else the mpicc on PATH)])],
    [], [with_mpi=default])
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper])
  case $with_mpi in
    default) fsdp_mpicc_names="mpicc.openmpi mpicc mpicc.mpich" ;;
    openmpi) fsdp_mpicc_names="mpicc.openmpi mpicc" ;;
    mpich)   fsdp_mpicc_names="mpicc.mpich mpicc" ;;
    *) AC_MSG_ERROR([--with-mpi=$with_mpi: expected openmpi or mpich]) ;;
  esac
  AC_CHECK_PROGS([MPICC], [$fsdp_mpicc_names], [])
  if test -z "$MPICC"; then
    case $with_mpi in
      mpich) AC_MSG_ERROR([--with-mpi=mpich: no mpicc.mpich or mpicc found: install the Debian package libmpich-dev]) ;;
      *) AC_MSG_ERROR([no MPI C compiler (mpicc) found: install the Debian package libopenmpi-dev]) ;;
    esac
  fi
  test -n "$CC" || CC=$MPICC
])

# MPI: the C compiler must be an MPI wrapper (mpicc) and mpiexec must be the
# launcher of the same MPI (another MPI's mpiexec starts W singletons).
# Sets FSDP_MPI (openmpi, mpich for MPICH and its derivatives, or other),
# MPIEXEC and MPIEXEC_PREFLAGS.
AC_DEFUN([FSDP_CHECK_MPI], [
  AC_MSG_CHECKING([whether $CC compiles and links MPI programs])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
      [[int p; MPI_Init_thread(0, 0, MPI_THREAD_MULTIPLE, &p);
        MPI_Comm c; MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &c);
        MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([no MPI-3 C compiler: install the Debian package libopenmpi-dev (or libmpich-dev and --with-mpi=mpich, or set MPICC to your MPI's mpicc)])])
  AC_MSG_CHECKING([which MPI $CC builds against])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef OPEN_MPI
#error not OpenMPI
#endif]])], [FSDP_MPI=openmpi],
    [AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef MPICH_VERSION
#error not MPICH
#endif]])], [FSDP_MPI=mpich], [FSDP_MPI=other])])
  AC_MSG_RESULT([$FSDP_MPI])
  if test "x$with_mpi" != xdefault && test "x$with_mpi" != "x$FSDP_MPI"; then
    AC_MSG_ERROR([--with-mpi=$with_mpi but $CC builds against $FSDP_MPI: set MPICC (and CC) to the $with_mpi wrapper, e.g. MPICC=mpicc.$with_mpi])
  fi
  AC_SUBST([FSDP_MPI])

  AC_ARG_VAR([MPIEXEC], [MPI launcher of the MPI that CC builds against])
  case $FSDP_MPI in
    openmpi) AC_PATH_PROGS([MPIEXEC], [mpiexec.openmpi mpiexec mpirun.openmpi mpirun], []) ;;
    mpich) AC_PATH_PROGS([MPIEXEC], [mpiexec.mpich mpiexec.hydra mpiexec mpirun.mpich mpirun], []) ;;
    *) AC_PATH_PROGS([MPIEXEC], [mpiexec mpirun], []) ;;
  esac
  if test -z "$MPIEXEC"; then
    case $FSDP_MPI in
      mpich) AC_MSG_ERROR([no mpiexec.mpich/mpiexec found: install the Debian package mpich]) ;;
      *) AC_MSG_ERROR([no mpiexec/mpirun found: install the Debian package openmpi-bin]) ;;
    esac
  fi
  # Which MPI the launcher belongs to, from its --version banner (OpenMPI:
  # "Open MPI" or "OpenRTE"; MPICH: "HYDRA"); unknown banners pass.
  AC_MSG_CHECKING([which MPI $MPIEXEC launches])
  fsdp_mpiexec_version=`$MPIEXEC --version 2>&1 </dev/null`
  if echo "$fsdp_mpiexec_version" | grep -Eqi "open ?mpi|openrte"; then
    fsdp_mpiexec_mpi=openmpi
  elif echo "$fsdp_mpiexec_version" | grep -Eqi "hydra|mpich"; then
    fsdp_mpiexec_mpi=mpich
  else
    fsdp_mpiexec_mpi=unknown
  fi
  AC_MSG_RESULT([$fsdp_mpiexec_mpi])
  if test $fsdp_mpiexec_mpi != unknown && test $FSDP_MPI != other && test $fsdp_mpiexec_mpi != $FSDP_MPI; then
    AC_MSG_ERROR([$MPIEXEC launches $fsdp_mpiexec_mpi but $CC builds against $FSDP_MPI: its ranks would start as separate singletons; set MPIEXEC to the $FSDP_MPI launcher (e.g. mpiexec.$FSDP_MPI)])
  fi
  # OpenMPI needs --oversubscribe to start more ranks than cores (tests do);
  # MPICH oversubscribes by default and rejects that flag.
  AC_MSG_CHECKING([for the launcher's oversubscribe flag])
  MPIEXEC_PREFLAGS=""
  if test $fsdp_mpiexec_mpi = openmpi; then
    MPIEXEC_PREFLAGS="--oversubscribe"
  fi
  AC_MSG_RESULT([${MPIEXEC_PREFLAGS:-none}])
  AC_SUBST([MPIEXEC_PREFLAGS])
])

# Parallel HDF5 (MPI-IO driver).
AC_DEFUN([FSDP_CHECK_HDF5], [
  AC_ARG_VAR([HDF5_CFLAGS], [C flags for parallel HDF5])
  AC_ARG_VAR([HDF5_LIBS], [linker flags for parallel HDF5])
  # Debian's parallel HDF5 of the MPI that CC builds against first: the
  # plain hdf5.pc is an alternative that may point at another MPI's.
  case $FSDP_MPI in
    openmpi|mpich) FSDP_PKG_FLAGS([HDF5], [hdf5-$FSDP_MPI]) ;;
  esac
  FSDP_PKG_FLAGS([HDF5], [hdf5])
  # An HDF5 built for the other Debian MPI links but starts a second MPI
  # library in every rank: refuse it by its Debian paths.
  case "$FSDP_MPI:$HDF5_CFLAGS $HDF5_LIBS" in
    openmpi:*/mpich*|mpich:*/openmpi*)
      AC_MSG_ERROR([HDF5 flags ($HDF5_CFLAGS $HDF5_LIBS) are for another MPI than $FSDP_MPI: install the Debian package libhdf5-$FSDP_MPI-dev (or set HDF5_CFLAGS/HDF5_LIBS)]) ;;
  esac
  test -n "$HDF5_LIBS" || HDF5_LIBS="-lhdf5"
  fsdp_save_CFLAGS=$CFLAGS; fsdp_save_LIBS=$LIBS
  CFLAGS="$CFLAGS $HDF5_CFLAGS"; LIBS="$HDF5_LIBS $LIBS"
  AC_MSG_CHECKING([for parallel HDF5 (H5Pset_fapl_mpio)])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#include <hdf5.h>]],
      [[hid_t p = H5Pcreate(H5P_FILE_ACCESS);
        H5Pset_fapl_mpio(p, MPI_COMM_WORLD, MPI_INFO_NULL);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     fsdp_hdf5_pkg=libhdf5-openmpi-dev
     test $FSDP_MPI != mpich || fsdp_hdf5_pkg=libhdf5-mpich-dev
     AC_MSG_ERROR([parallel HDF5 not found: install the Debian package $fsdp_hdf5_pkg (or set HDF5_CFLAGS/HDF5_LIBS)])])
  CFLAGS=$fsdp_save_CFLAGS; LIBS=$fsdp_save_LIBS
])

# CBLAS (OpenBLAS preferred: fsdp-train reports its core).
AC_DEFUN([FSDP_CHECK_CBLAS], [
  AC_ARG_VAR([CBLAS_CFLAGS], [C flags for CBLAS])
  AC_ARG_VAR([CBLAS_LIBS], [linker flags for CBLAS])
  FSDP_PKG_FLAGS([CBLAS], [openblas])
  test -n "$CBLAS_LIBS" || CBLAS_LIBS="-lopenblas"
  fsdp_save_CFLAGS=$CFLAGS; fsdp_save_LIBS=$LIBS
  CFLAGS="$CFLAGS $CBLAS_CFLAGS"; LIBS="$CBLAS_LIBS $LIBS"
  AC_MSG_CHECKING([for CBLAS (cblas_sgemm)])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
      [[float a = 1, b = 1, c = 0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([CBLAS not found: install the Debian package libopenblas-dev (or set CBLAS_CFLAGS/CBLAS_LIBS)])])
  AC_CHECK_FUNCS([openblas_get_corename openblas_set_num_threads])
  CFLAGS=$fsdp_save_CFLAGS; LIBS=$fsdp_save_LIBS
])

# Optional oneDNN (--with-onednn=yes|no|auto, default auto): the bf16
# matmuls of -compute_dtype bf16 on the CPU back-end (a real bf16 kernel,
# fp32 accumulation).  Without it those matmuls round their inputs to bf16
# and run fp32 sgemm (same numerics, no bf16 speed).  Defines HAVE_ONEDNN.
AC_DEFUN([FSDP_CHECK_ONEDNN], [
  AC_ARG_WITH([onednn],
    [AS_HELP_STRING([--with-onednn@<:@=yes|no|auto@:>@],
      [bf16 matmuls through oneDNN (libdnnl) for -compute_dtype bf16 on the CPU (default: auto, when installed)])],
    [], [with_onednn=auto])
  AC_ARG_VAR([ONEDNN_CFLAGS], [C flags for oneDNN])
  AC_ARG_VAR([ONEDNN_LIBS], [linker flags for oneDNN])
  fsdp_have_onednn=no
  case $with_onednn in
    yes|auto)
      FSDP_PKG_FLAGS([ONEDNN], [dnnl])
      test -n "$ONEDNN_LIBS" || ONEDNN_LIBS="-ldnnl"
      fsdp_save_CFLAGS=$CFLAGS; fsdp_save_LIBS=$LIBS
      CFLAGS="$CFLAGS $ONEDNN_CFLAGS"; LIBS="$ONEDNN_LIBS $LIBS"
      AC_MSG_CHECKING([for oneDNN (dnnl_matmul_desc_init)])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <oneapi/dnnl/dnnl.h>]],
          [[dnnl_matmul_desc_t d; (void)dnnl_matmul_desc_init(&d, 0, 0, 0, 0);
            (void)dnnl_get_effective_cpu_isa();]])],
        [fsdp_have_onednn=yes], [])
      AC_MSG_RESULT([$fsdp_have_onednn])
      CFLAGS=$fsdp_save_CFLAGS; LIBS=$fsdp_save_LIBS
      if test "$fsdp_have_onednn" = no && test "$with_onednn" = yes; then
        AC_MSG_ERROR([--with-onednn: oneDNN not found: install the Debian package libdnnl-dev (or set ONEDNN_CFLAGS/ONEDNN_LIBS)])
      fi ;;
    no) ;;
    *) AC_MSG_ERROR([--with-onednn=$with_onednn: expected yes, no or auto]) ;;
  esac
  if test "$fsdp_have_onednn" = yes; then
    AC_DEFINE([HAVE_ONEDNN], [1], [Define to 1 to run bf16 matmuls through oneDNN])
  else
    ONEDNN_CFLAGS=; ONEDNN_LIBS=
  fi
  AC_SUBST([ONEDNN_CFLAGS])
  AC_SUBST([ONEDNN_LIBS])
])

# Jansson: the JSON parser of fsdp-ckpt's Hugging Face interop (safetensors
# headers, config.json); a maintained library instead of a parser by hand.
AC_DEFUN([FSDP_CHECK_JANSSON], [
  AC_ARG_VAR([JANSSON_CFLAGS], [C flags for Jansson])
  AC_ARG_VAR([JANSSON_LIBS], [linker flags for Jansson])
  FSDP_PKG_FLAGS([JANSSON], [jansson])
  test -n "$JANSSON_LIBS" || JANSSON_LIBS="-ljansson"
  fsdp_save_CFLAGS=$CFLAGS; fsdp_save_LIBS=$LIBS
  CFLAGS="$CFLAGS $JANSSON_CFLAGS"; LIBS="$JANSSON_LIBS $LIBS"
  AC_MSG_CHECKING([for Jansson (json_loadb)])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <jansson.h>]],
      [[json_error_t e; json_t *j = json_loadb("{}", 2, 0, &e); json_decref(j);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([Jansson not found: install the Debian package libjansson-dev (or set JANSSON_CFLAGS/JANSSON_LIBS)])])
  CFLAGS=$fsdp_save_CFLAGS; LIBS=$fsdp_save_LIBS
])

# POSIX threads (the communication stream's thread).
AC_DEFUN([FSDP_CHECK_PTHREADS], [
  AC_CHECK_HEADER([pthread.h], [],
    [AC_MSG_ERROR([pthread.h not found: install the Debian package libc6-dev])])
  AC_SEARCH_LIBS([pthread_create], [pthread], [],
    [AC_MSG_ERROR([POSIX threads not found: install the Debian package libc6-dev])])
])

# Optional CUDA (--with-cuda[=DIR]): nvcc, cudart, cuBLAS(Lt), NCCL.
AC_DEFUN([FSDP_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA back-end (default: no; DIR defaults to /usr/local/cuda)])],
    [], [with_cuda=no])
  fsdp_have_cuda=no
  if test "x$with_cuda" != xno; then
    if test "x$with_cuda" = xyes; then CUDA_HOME=/usr/local/cuda; else CUDA_HOME=$with_cuda; fi
    AC_PATH_PROG([NVCC], [nvcc], [], [$CUDA_HOME/bin:$PATH])
    if test -z "$NVCC"; then
      AC_MSG_ERROR([--with-cuda: nvcc not found under $CUDA_HOME/bin: install the CUDA toolkit (Debian package nvidia-cuda-toolkit) or pass --with-cuda=DIR])
    fi
    AC_ARG_VAR([CUDA_ARCHS], [CUDA architectures to build (default: 80 90)])
    test -n "$CUDA_ARCHS" || CUDA_ARCHS="80 90"
    CUDA_CFLAGS="-I$CUDA_HOME/include"
    CUDA_LIBS="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcublasLt -lcublas -lcudart"
    fsdp_save_CFLAGS=$CFLAGS; fsdp_save_LIBS=$LIBS
    CFLAGS="$CFLAGS $CUDA_CFLAGS"; LIBS="$CUDA_LIBS -lnccl $LIBS"
    AC_MSG_CHECKING([for NCCL and cuBLAS])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <nccl.h>
#include <cublas_v2.h>]], [[ncclUniqueId id; ncclGetUniqueId(&id); cublasHandle_t h; cublasCreate(&h);]])],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--with-cuda: NCCL or cuBLAS not found under $CUDA_HOME: install libnccl-dev and the CUDA toolkit])])
    # bf16 reductions and ncclPreMulSum (scaled reduce-scatters) need 2.11;
    # the library loaded at run time is checked too (coll_nccl.c)
    AC_MSG_CHECKING([for NCCL >= 2.11])
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <nccl.h>
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 11, 0)
#error NCCL older than 2.11
#endif]], [[]])],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--with-cuda: the NCCL headers under $CUDA_HOME are older than 2.11 (fsdp needs bf16 reductions and ncclPreMulSum): install a newer libnccl-dev])])
    CFLAGS=$fsdp_save_CFLAGS; LIBS=$fsdp_save_LIBS
    CUDA_LIBS="$CUDA_LIBS -lnccl"
    fsdp_have_cuda=yes
  fi
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([CUDA_ARCHS])
  AM_CONDITIONAL([FSDP_CUDA], [test "x$fsdp_have_cuda" = xyes])
])
