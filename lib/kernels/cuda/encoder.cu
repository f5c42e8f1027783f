/* encoder.cu: token + position embedding (CUDA). */
#include "common.cuh"

/* ---- kernels ------------------------------------------------------------- */

/* out (B,T,C) = wte[inp[b,t]] + wpe[t]; one thread per element. */
__global__ void encoder_forward_kernel(float *out, const int *inp, const float *wte,
                                       const float *wpe, int T, int C, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
  }
}

/* dwte[inp[b,t]] += dout[b,t]; dwpe[t] += dout[b,t].  Two positions may hold
 * the same token, and every batch row shares wpe: atomics (the order of the
 * additions, hence the last bits, may vary between runs). */
__global__ void encoder_backward_kernel(float *dwte, float *dwpe, const float *dout,
                                        const int *inp, int T, int C, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    float d = dout[i];
    atomicAdd(&dwte[(size_t)inp[bt] * C + c], d);
    atomicAdd(&dwpe[(size_t)t * C + c], d);
  }
}

/* ---- launchers ----------------------------------------------------------- */

extern "C" void encoder_forward_cuda(float *out, const int *inp, const float *wte,
                                     const float *wpe, int B, int T, int C)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(B >= 0 && T >= 0 && C >= 0);
  size_t n = (size_t)B * T * C;
  if (n == 0) return;
  const int block = 256;
  encoder_forward_kernel<<<grid_stride_blocks(n, block), block, 0, cuda_state.stream>>>(
      out, inp, wte, wpe, T, C, n);
  CUDA_CHECK_LAUNCH();
}

extern "C" void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout,
                                      const int *inp, int B, int T, int C)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(B >= 0 && T >= 0 && C >= 0);
  size_t n = (size_t)B * T * C;
  if (n == 0) return;
  const int block = 256;
  encoder_backward_kernel<<<grid_stride_blocks(n, block), block, 0, cuda_state.stream>>>(
      dwte, dwpe, dout, inp, T, C, n);
  CUDA_CHECK_LAUNCH();
}
