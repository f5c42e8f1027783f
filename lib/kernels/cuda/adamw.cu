/* adamw.cu: AdamW step and the sum of squares for gradient clipping (CUDA). */
#include <math.h>

#include "common.cuh"

#define SUMSQ_BLOCK 256
#define SUMSQ_MAX_BLOCKS 1024 /* partials buffer of ops.cu (SUMSQ_PARTIALS) */
#define SUMSQ_MIN_PER_BLOCK 4096

/* ---- kernels ------------------------------------------------------------- */

/* One AdamW step (kernels.h); the bias corrections come from the host, in
 * double, as in the CPU kernel. */
__global__ void adamw_kernel(float *param, const float *__restrict__ grad, float *m, float *v,
                             size_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, float inv_bc1, float inv_bc2)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    float p = param[i];
    param[i] = p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
  }
}

/* Stage 1: block b sums x[i]^2 in double over its grid-stride share. */
__global__ void sum_squares_partial_kernel(double *partial, const float *__restrict__ x,
                                           size_t n)
{
  __shared__ double shared[32];
  double s = 0.0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    double xi = x[i];
    s += xi * xi;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* Stage 2: one block adds the partials (in a fixed tree order). */
__global__ void sum_squares_final_kernel(double *out, const double *__restrict__ partial,
                                         int nparts)
{
  __shared__ double shared[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += partial[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *out = s;
}

/* ---- launchers ----------------------------------------------------------- */

extern "C" void adamw_update_cuda(float *param, const float *grad, float *m, float *v, size_t n,
                                  float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float grad_scale, int t)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(t >= 1);
  if (n == 0) return;
  const float inv_bc1 = (float)(1.0 / (1.0 - pow((double)beta1, t)));
  const float inv_bc2 = (float)(1.0 / (1.0 - pow((double)beta2, t)));
  const int block = 256;
  adamw_kernel<<<grid_stride_blocks(n, block), block, 0, cuda_state.stream>>>(
      param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, inv_bc1, inv_bc2);
  CUDA_CHECK_LAUNCH();
}

/* The number of stage-1 blocks depends on n only (not on the GPU), so the
 * result is the same bit for bit on every run and device. */
extern "C" void sum_squares_device_cuda(double *d_out, const float *x, size_t n)
{
  CUDA_LAUNCHER_BEGIN();
  size_t nb = (n + SUMSQ_MIN_PER_BLOCK - 1) / SUMSQ_MIN_PER_BLOCK;
  if (nb > SUMSQ_MAX_BLOCKS) nb = SUMSQ_MAX_BLOCKS;
  if (nb < 1) nb = 1;
  sum_squares_partial_kernel<<<(unsigned)nb, SUMSQ_BLOCK, 0, cuda_state.stream>>>(
      cuda_state.sumsq_partial, x, n);
  CUDA_CHECK_LAUNCH();
  sum_squares_final_kernel<<<1, 1024, 0, cuda_state.stream>>>(d_out, cuda_state.sumsq_partial,
                                                              (int)nb);
  CUDA_CHECK_LAUNCH();
}

extern "C" double sum_squares_cuda(const float *x, size_t n)
{
  if (!cuda_ready(__func__)) return NAN;
  sum_squares_device_cuda(cuda_state.sumsq_result, x, n);
  if (cuda_state.err_code != FSDP_SUCCESS) return NAN;
  cudaError_t e = cudaMemcpyAsync(cuda_state.sumsq_host, cuda_state.sumsq_result, sizeof(double),
                                  cudaMemcpyDeviceToHost, cuda_state.stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cuda_state.stream);
  if (e != cudaSuccess) {
    cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__, "sum_squares_cuda: %s",
                      cudaGetErrorString(e));
    return NAN;
  }
  return *cuda_state.sumsq_host;
}
