#!/bin/sh
# gpu_prepare.sh: build here (where MPI, HDF5 and OpenBLAS are installed)
# everything a GPU session needs, into one folder to carry to the GPU
# machine (which has the NVIDIA driver, CUDA, NCCL and PyTorch, but no MPI,
# HDF5 or OpenBLAS):
#   bench/out/gpu-kit/  (git-ignored; carry it, e.g. the run tool's carry)
#     fsdp-bundle-*.tar.gz  make bundle: programs, libfsdp, the CUDA
#                           back-end lib/libfsdp-cuda.so, and the MPI /
#                           HDF5 / OpenBLAS runtime (tools/make-bundle.sh,
#                           the same method as shared/tools/make-runtime-kit:
#                           ldd closure, relocated OpenMPI, HDF5's S3 driver
#                           stubbed; CUDA and NCCL are the target's own)
#     test_kernels_cuda     the kernel test (runs with the bundle's libraries)
#     gpu_run.sh, gpu_checks.sh, test_gpu_train.sh, bench_gpu_pytorch.py
#     (and the model it imports, bench/lib/torch_models.py), gpu_peak.py,
#     KIT-INFO.txt
# Then on the GPU machine: sh bench/out/gpu-kit/gpu_run.sh (under 8 min;
# --dry-run prints the plan).
#   usage: bench/gpu_prepare.sh    (CUDA_ARCHS=90 by default: H100/H200)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build-gpu
out=$top/bench/out/gpu-kit
mkdir -p "$build"
cd "$build"
[ -f Makefile ] || CUDA_ARCHS="${CUDA_ARCHS:-90}" "$top/configure" -q --with-cuda
make -j"$(nproc)"
make tests/test_kernels_cuda
[ -f lib/.libs/libfsdp-cuda.so ] || { echo "gpu_prepare: no lib/.libs/libfsdp-cuda.so: not a CUDA build" >&2; exit 1; }
rm -rf fsdp-bundle-*
make bundle BUNDLE_DIR="$build"
tar -tzf fsdp-bundle-*.tar.gz | grep -q '/lib/libfsdp-cuda.so$' ||
  { echo "gpu_prepare: the bundle lacks lib/libfsdp-cuda.so" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
cp fsdp-bundle-*.tar.gz "$out/"
# the real test binary (tests/test_kernels_cuda is libtool's wrapper)
cp tests/.libs/test_kernels_cuda "$out/" 2>/dev/null || cp tests/test_kernels_cuda "$out/"
cp "$top/tests/test_gpu_train.sh" "$top/bench/gpu_run.sh" "$top/bench/gpu_checks.sh" \
  "$top/bench/bench_gpu_pytorch.py" "$top/bench/lib/torch_models.py" "$top/bench/gpu_peak.py" "$out/"
{
  echo "fsdp GPU kit, built $(date -u +%Y-%m-%dT%H:%MZ) from $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "CUDA_ARCHS: $(sed -n 's/^CUDA_ARCHS = //p' Makefile)"
  echo "nvcc: $(sed -n 's/^NVCC = //p' Makefile)"
  tar -xzOf fsdp-bundle-*.tar.gz --wildcards '*/BUNDLE-INFO.txt' 2>/dev/null | sed -n '1,6p'
} >"$out/KIT-INFO.txt"
du -sh "$out"
# the run tool carries at most 64 MiB
kb=$(du -sk "$out" | cut -f1)
[ "$kb" -le 65536 ] || echo "gpu_prepare: warning: the kit is $((kb / 1024)) MiB, over the 64 MiB a carry holds" >&2
echo "carry bench/out/gpu-kit and run: sh bench/out/gpu-kit/gpu_run.sh"
