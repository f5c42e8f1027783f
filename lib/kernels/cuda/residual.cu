/* residual.cu: residual connection (CUDA).  Elementwise, so out may alias
 * inp1 or inp2 (no __restrict__ on purpose). */
#include "common.cuh"

/* ---- kernels ------------------------------------------------------------- */

__global__ void residual_forward_kernel(float *out, const float *inp1, const float *inp2,
                                        size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = inp1[i] + inp2[i];
}

__global__ void residual_backward_kernel(float *dinp1, float *dinp2, const float *dout,
                                         size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float d = dout[i];
    dinp1[i] += d;
    dinp2[i] += d;
  }
}

/* ---- launchers ----------------------------------------------------------- */

extern "C" void residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N)
{
  CUDA_LAUNCHER_BEGIN();
  if (N == 0) return;
  const int block = 256;
  residual_forward_kernel<<<grid_stride_blocks(N, block), block, 0,
                            cuda_state.stream>>>(out, inp1, inp2, N);
  CUDA_CHECK_LAUNCH();
}

extern "C" void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N)
{
  CUDA_LAUNCHER_BEGIN();
  if (N == 0) return;
  const int block = 256;
  residual_backward_kernel<<<grid_stride_blocks(N, block), block, 0,
                             cuda_state.stream>>>(dinp1, dinp2, dout, N);
  CUDA_CHECK_LAUNCH();
}
