#!/bin/sh
# gpu_prepare.sh: build everything a GPU session needs, here (where MPI,
# HDF5 and OpenBLAS are installed), into one folder to carry to the GPU
# machine (which has CUDA, NCCL and PyTorch but none of those):
#   bench/out/gpu-kit/  fsdp bundle tarball (make bundle: programs, libfsdp,
#                       OpenMPI, HDF5, OpenBLAS), test_kernels_cuda, the
#                       GPU test and benchmark scripts.
# Then on the GPU machine: sh bench/out/gpu-kit/gpu_run.sh (under 8 min).
#   usage: bench/gpu_prepare.sh        (CUDA_ARCHS=90 by default: H200)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build-gpu
out=$top/bench/out/gpu-kit
mkdir -p "$build"
cd "$build"
[ -f Makefile ] || CUDA_ARCHS="${CUDA_ARCHS:-90}" "$top/configure" -q --with-cuda
make -j"$(nproc)"
make tests/test_kernels_cuda
rm -rf fsdp-bundle-*
make bundle BUNDLE_DIR="$build"
rm -rf "$out"
mkdir -p "$out"
cp fsdp-bundle-*.tar.gz "$out/"
# the real test binary (tests/test_kernels_cuda is libtool's wrapper)
cp tests/.libs/test_kernels_cuda "$out/" 2>/dev/null || cp tests/test_kernels_cuda "$out/"
cp "$top/tests/test_gpu_train.sh" "$top/bench/gpu_run.sh" "$top/bench/gpu_checks.sh" \
  "$top/bench/bench_gpu_pytorch.py" "$out/"
du -sh "$out"
echo "carry bench/out/gpu-kit and run: sh bench/out/gpu-kit/gpu_run.sh"
