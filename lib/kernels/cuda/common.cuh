/* common.cuh: what every CUDA kernel file shares (internal to kernels/cuda).
 *
 * [Note: CUDA kernel errors] The FsdpKernelOps entries return void (the CPU
 * kernels cannot fail), so a CUDA launcher cannot return an error code.
 * Instead the first failure -- a launch error from cudaGetLastError, a
 * cuBLAS status, a broken precondition such as a shape that does not
 * divide -- is recorded here (file, line, the library's message) and later
 * launches are skipped.  FsdpKernelsCudaCheck() raises the recorded error
 * through the fsdp convention (FSDP_ERR_CUDA / FSDP_ERR_INTERNAL) and clears
 * it; the runtime calls it once per unit or step, and after
 * FsdpKernelsCudaSynchronize() for errors that only show when the stream
 * runs (an illegal address).  No kernel ever calls exit().
 *
 * Layout follows llm.c (llmc/gelu.cuh and friends): kernels first, then launchers; a
 * launcher checks its preconditions, computes the grid, launches on the
 * compute stream (cuda_state.stream) and checks cudaGetLastError.
 */
#ifndef FSDP_KERNELS_CUDA_COMMON_CUH
#define FSDP_KERNELS_CUDA_COMMON_CUH

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "base/error.h"
}
#include "kernels/cuda/kernels_cuda.h"

/* ---- state shared by the launchers (state.cu) ------------------------------ */

struct CudaKernelState {
  int initialized;
  int device;
  int sm_count;
  int tf32; /* fp32 GEMMs on TF32 tensor cores (FsdpKernelsCudaSetTF32) */
  cudaStream_t stream; /* every launch goes here */
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  void *lt_workspace;
  size_t lt_workspace_size;
  double *sumsq_partial; /* SUMSQ_MAX_BLOCKS doubles (adamw.cu) */
  double *sumsq_result;  /* 1 double on the device */
  double *sumsq_host;    /* 1 double, pinned */
  /* [Note: CUDA kernel errors] */
  int err_code;
  char err_msg[768];
};

extern CudaKernelState cuda_state;

/* matmul.cu: destroys the cached cuBLASLt plans ([Note: GEMM plans per
 * shape], kernels/gemm_plan.h); FsdpKernelsCudaFinalize calls it while the
 * cuBLASLt handle still exists. */
void lt_plans_release(void);
/* state.cu: the kernel table's alloc and free entries ([Note: buffers
 * from the kernel table] in kernels.h), through the installed allocator. */
int alloc_cuda(FsdpMemTag tag, size_t bytes, void *ptr);
int free_cuda(void *ptr);
/* state.cu: *ptr = bytes of device memory through the installed allocator
 * (FsdpKernelsCudaSetAllocator; *accounted = 1) or, before one is
 * installed, cudaMalloc (*accounted = 0); FSDP_SUCCESS or an error code
 * with FsdpErrorLastMessage set.  cuda_free_accounted frees what the
 * installed allocator gave. */
int cuda_alloc_accounted(size_t bytes, void *ptr, int *accounted);
void cuda_free_accounted(void *ptr);
/* matmul.cu: frees the bf16 operand scratch of the table's bf16 matmuls. */
void bf16_scratch_release(void);

/* Record the first error (later ones are dropped: they are consequences). */
void cuda_record_error(int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* 1 when launches may go ahead (initialized, no error recorded). */
static inline int cuda_ready(const char *func)
{
  if (!cuda_state.initialized) {
    cuda_record_error(FSDP_ERR_STATE, __FILE__, __LINE__,
                      "%s: CUDA kernels used before FsdpKernelsCudaInit", func);
    return 0;
  }
  return cuda_state.err_code == FSDP_SUCCESS;
}

/* Launcher prologue: skip the launch after an error. */
#define CUDA_LAUNCHER_BEGIN()            \
  do {                                   \
    if (!cuda_ready(__func__)) return;   \
  } while (0)

/* Precondition of a launcher (shape divisibility, non-NULL operands). */
#define CUDA_KASSERT(cond)                                                       \
  do {                                                                           \
    if (!(cond)) {                                                               \
      cuda_record_error(FSDP_ERR_INTERNAL, __FILE__, __LINE__,                   \
                        "%s: precondition failed: %s", __func__, #cond);         \
      return;                                                                    \
    }                                                                            \
  } while (0)

/* After a launch. */
#define CUDA_CHECK_LAUNCH()                                                      \
  do {                                                                           \
    cudaError_t cuda_launch_err_ = cudaGetLastError();                           \
    if (cuda_launch_err_ != cudaSuccess) {                                       \
      cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__, "%s: launch failed: %s", \
                        __func__, cudaGetErrorString(cuda_launch_err_));         \
      return;                                                                    \
    }                                                                            \
  } while (0)

/* A CUDA runtime call inside a void launcher. */
#define CUDA_CHECK(expr)                                                         \
  do {                                                                           \
    cudaError_t cuda_check_err_ = (expr);                                        \
    if (cuda_check_err_ != cudaSuccess) {                                        \
      cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__, "%s: %s failed: %s",  \
                        __func__, #expr, cudaGetErrorString(cuda_check_err_));   \
      return;                                                                    \
    }                                                                            \
  } while (0)

/* A cuBLAS / cuBLASLt call inside a void launcher. */
#define CUBLAS_CHECK(expr)                                                       \
  do {                                                                           \
    cublasStatus_t cublas_check_st_ = (expr);                                    \
    if (cublas_check_st_ != CUBLAS_STATUS_SUCCESS) {                             \
      cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__, "%s: %s failed: %s",  \
                        __func__, #expr, cublasGetStatusString(cublas_check_st_)); \
      return;                                                                    \
    }                                                                            \
  } while (0)

/* ---- launch geometry ----------------------------------------------------- */

static inline int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

/* Blocks for a grid-stride loop over n elements: enough to fill the GPU,
 * never more than the elements need. */
static inline unsigned grid_stride_blocks(size_t n, int block)
{
  size_t need = (n + (size_t)block - 1) / (size_t)block;
  size_t cap = (size_t)(cuda_state.sm_count > 0 ? cuda_state.sm_count : 80) * 32;
  if (need > cap) need = cap;
  return (unsigned)(need > 0 ? need : 1);
}

/* ---- element types ------------------------------------------------------- */

/* bf16 and fp16 are stored as uint16_t in the C interface; conversions here
 * round exactly like lib/base/dtype.h (nearest even; NaN stays a quiet NaN with
 * its sign), so a device cast equals the host cast bit for bit. */
__device__ __forceinline__ float bf16_bits_to_float(uint16_t h)
{
  return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f)
{
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Bit manipulation as in lib/base/dtype.h (subnormals normalized, NaN payload
 * and sign kept), not the hardware conversion, whose NaN is unspecified. */
__device__ __forceinline__ float fp16_bits_to_float(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0) {
    if (m == 0) {
      u = sign;
    } else {
      int k = __clz((int)m) - 21; /* shifts that bring the top bit to 0x400 */
      m = (m << k) & 0x3ffu;
      u = sign | ((uint32_t)(113 - k) << 23) | (m << 13);
    }
  } else if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  return __uint_as_float(u);
}

__device__ __forceinline__ uint16_t float_to_fp16_bits(float f)
{
  if (isnan(f)) return (uint16_t)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
}

/* Load element i of a buffer of dtype dt as float / store a float. */
__device__ __forceinline__ float load_as_float(const void *x, int dt, size_t i)
{
  if (dt == FSDP_DTYPE_FP32) return ((const float *)x)[i];
  uint16_t h = ((const uint16_t *)x)[i];
  return dt == FSDP_DTYPE_BF16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
}

__device__ __forceinline__ void store_from_float(void *x, int dt, size_t i, float v)
{
  if (dt == FSDP_DTYPE_FP32) ((float *)x)[i] = v;
  else if (dt == FSDP_DTYPE_BF16) ((uint16_t *)x)[i] = float_to_bf16_bits(v);
  else ((uint16_t *)x)[i] = float_to_fp16_bits(v);
}

/* ---- reductions ---------------------------------------------------------- */

template <typename T> __device__ __forceinline__ T warp_sum(T v)
{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v)
{
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Column sums of a (32, 8) block: each thread holds v, its partial sum of
 * column threadIdx.x over every 8th row of the block's rows; the 8
 * partials of a column are added in shared memory (a [8][33] array, padded
 * against bank conflicts) in row order, and one atomicAdd per column lands
 * the block's sum in *dst (only where valid: a column inside the matrix).
 * Every thread of the block must call it (it synchronizes). */
__device__ __forceinline__ void block_column_sum_atomic(float *dst, float v, float (*shared)[33],
                                                        int valid)
{
  shared[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && valid) {
    for (int k = 1; k < 8; k++) v += shared[k][threadIdx.x];
    atomicAdd(dst, v);
  }
}

/* Sum over a block of up to 1024 threads (blockDim.x a multiple of 32);
 * every thread gets the result.  shared: 32 elements of T. */
template <typename T> __device__ T block_sum(T v, T *shared)
{
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads(); /* shared may be reused from a previous call */
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? shared[lane] : (T)0;
  return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v, float *shared)
{
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(r);
}

/* ---- shared launchers (matmul.cu) ---------------------------------------- */

/* Column sums: out[c] += sum over rows r < N of x[r*C + c] (dt = the
 * element type of x).  Used for dbias. */
void column_sum_accumulate(float *out, const void *x, int dt, int N, int C);

#endif
