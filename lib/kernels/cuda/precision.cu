/* precision.cu: dtype casts, "add scaled into fp32", in-place scaling and
 * the inf/NaN check (CUDA) -- what the FSDP runtime does around
 * low-precision gathers and reductions.  Rounding matches lib/base/dtype.h bit
 * for bit (common.cuh). */
#include "common.cuh"

/* ---- kernels ------------------------------------------------------------- */

__global__ void cast_from_float_kernel(void *dst, int dt, const float *__restrict__ src, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    store_from_float(dst, dt, i, src[i]);
}

__global__ void cast_to_float_kernel(float *dst, const void *__restrict__ src, int dt, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = load_as_float(src, dt, i);
}

__global__ void add_scaled_kernel(float *dst, const void *__restrict__ src, int dt, float scale,
                                  size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] += scale * load_as_float(src, dt, i);
}

/* x *= scale.  A NaN stays the NaN it was, quieted, as the host loop of
 * coll_mpi.c leaves it (x86 keeps a NaN operand's payload; the GPU would
 * return its canonical NaN instead). */
__global__ void scale_inplace_kernel(void *x, int dt, float scale, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = load_as_float(x, dt, i);
    store_from_float(x, dt, i, isnan(v) ? __uint_as_float(__float_as_uint(v) | 0x400000u)
                                        : v * scale);
  }
}

/* Any thread that sees inf/NaN writes 1 (all writers store the same value). */
__global__ void nonfinite_check_kernel(int *flag, const void *__restrict__ x, int dt, size_t n)
{
  int bad = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    bad |= !isfinite(load_as_float(x, dt, i));
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

/* ---- launchers ----------------------------------------------------------- */

#define PRECISION_BLOCK 256

extern "C" void cast_from_float_cuda(void *dst, FsdpDtype dt, const float *src, size_t n)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT((int)dt >= 0 && dt < FSDP_NDTYPES);
  if (n == 0) return;
  if (dt == FSDP_DTYPE_FP32) {
    if (dst != src)
      CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                 cuda_state.stream));
    return;
  }
  cast_from_float_kernel<<<grid_stride_blocks(n, PRECISION_BLOCK), PRECISION_BLOCK, 0,
                           cuda_state.stream>>>(dst, (int)dt, src, n);
  CUDA_CHECK_LAUNCH();
}

extern "C" void cast_to_float_cuda(float *dst, const void *src, FsdpDtype dt, size_t n)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT((int)dt >= 0 && dt < FSDP_NDTYPES);
  if (n == 0) return;
  if (dt == FSDP_DTYPE_FP32) {
    if (dst != src)
      CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                 cuda_state.stream));
    return;
  }
  cast_to_float_kernel<<<grid_stride_blocks(n, PRECISION_BLOCK), PRECISION_BLOCK, 0,
                         cuda_state.stream>>>(dst, src, (int)dt, n);
  CUDA_CHECK_LAUNCH();
}

extern "C" void add_scaled_cuda(float *dst, const void *src, FsdpDtype dt, float scale, size_t n)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT((int)dt >= 0 && dt < FSDP_NDTYPES);
  if (n == 0) return;
  add_scaled_kernel<<<grid_stride_blocks(n, PRECISION_BLOCK), PRECISION_BLOCK, 0,
                      cuda_state.stream>>>(dst, src, (int)dt, scale, n);
  CUDA_CHECK_LAUNCH();
}

extern "C" void scale_inplace_cuda(void *x, FsdpDtype dt, float scale, size_t n)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT((int)dt >= 0 && dt < FSDP_NDTYPES);
  if (n == 0 || scale == 1.0f) return;
  scale_inplace_kernel<<<grid_stride_blocks(n, PRECISION_BLOCK), PRECISION_BLOCK, 0,
                         cuda_state.stream>>>(x, (int)dt, scale, n);
  CUDA_CHECK_LAUNCH();
}

/* For lib/comm/coll_nccl.c's NCCL path (post-scaling a reduction on the comm
 * stream, from the thread that launched it): a launch error is returned
 * through the fsdp convention at once instead of being recorded. */
extern "C" int scale_inplace_on_stream_cuda(void *x, FsdpDtype dt, float scale, size_t n,
                                            void *stream)
{
  if ((int)dt < 0 || dt >= FSDP_NDTYPES)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "scale_inplace_on_stream_cuda: bad dtype %d", (int)dt);
  if (n == 0 || scale == 1.0f) return FSDP_SUCCESS;
  scale_inplace_kernel<<<grid_stride_blocks(n, PRECISION_BLOCK), PRECISION_BLOCK, 0,
                         (cudaStream_t)stream>>>(x, (int)dt, scale, n);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    FSDP_ERROR(FSDP_ERR_CUDA, "scaling a reduced buffer of %zu elements: launch failed: %s", n,
               cudaGetErrorString(e));
  return FSDP_SUCCESS;
}

extern "C" void nonfinite_check_cuda(int *d_flag, const void *x, FsdpDtype dt, size_t n)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT((int)dt >= 0 && dt < FSDP_NDTYPES && d_flag);
  if (n == 0) return;
  nonfinite_check_kernel<<<grid_stride_blocks(n, PRECISION_BLOCK), PRECISION_BLOCK, 0,
                           cuda_state.stream>>>(d_flag, x, (int)dt, n);
  CUDA_CHECK_LAUNCH();
}
