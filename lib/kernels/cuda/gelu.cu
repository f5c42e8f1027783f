/* gelu.cu: GELU, tanh approximation (CUDA).  Elementwise, so out may alias
 * inp (no __restrict__ on purpose). */
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBE 0.044715f

/* ---- kernels ------------------------------------------------------------- */

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

/* dinp += dout * gelu'(inp); sech^2 = 1 - tanh^2 as in llm.c (tanhf is
 * accurate to a few ulp, so no cancellation trick is needed in fp32). */
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                     size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
  }
}

/* ---- launchers ----------------------------------------------------------- */

extern "C" void gelu_forward_cuda(float *out, const float *inp, size_t N)
{
  CUDA_LAUNCHER_BEGIN();
  if (N == 0) return;
  const int block = 256;
  gelu_forward_kernel<<<grid_stride_blocks(N, block), block, 0, cuda_state.stream>>>(
      out, inp, N);
  CUDA_CHECK_LAUNCH();
}

extern "C" void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N)
{
  CUDA_LAUNCHER_BEGIN();
  if (N == 0) return;
  const int block = 256;
  gelu_backward_kernel<<<grid_stride_blocks(N, block), block, 0, cuda_state.stream>>>(
      dinp, inp, dout, N);
  CUDA_CHECK_LAUNCH();
}
