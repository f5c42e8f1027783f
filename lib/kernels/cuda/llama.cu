/* llama.cu: the Llama kernels (CUDA): RMSNorm, RoPE (rotate-half), SwiGLU,
 * grouped-query head repeat.  Semantics: kernels.h; the CPU versions in
 * kernels/cpu/llama.c are the reference (tests/test_kernels_cuda.c). */
#include "common.cuh"
#include "kernels/rope.h"

#define RMS_ROWS_PER_BLOCK 8 /* warps per block in the row kernels */
#define RMS_COL_ROWS 256     /* rows per block in the column kernel */

/* ---- kernels ------------------------------------------------------------- */

/* One warp per row: out = x rstd w, rstd = 1/sqrt(mean(x^2) + eps). */
__global__ void rmsnorm_forward_kernel(float *__restrict__ out, float *__restrict__ rstd,
                                       const float *__restrict__ inp,
                                       const float *__restrict__ weight, int N, int C,
                                       float eps)
{
  int lane = threadIdx.x % 32;
  int row = blockIdx.x * RMS_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= N) return;
  const float *x = inp + (size_t)row * C;
  float *o = out + (size_t)row * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
  float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
  for (int c = lane; c < C; c += 32) o[c] = x[c] * r * weight[c];
  if (lane == 0) rstd[row] = r;
}

/* One warp per row: dinp += r (g - xhat mean(g xhat)), g = dout w. */
__global__ void rmsnorm_backward_dinp_kernel(float *__restrict__ dinp,
                                             const float *__restrict__ dout,
                                             const float *__restrict__ inp,
                                             const float *__restrict__ weight,
                                             const float *__restrict__ rstd, int N, int C)
{
  int lane = threadIdx.x % 32;
  int row = blockIdx.x * RMS_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= N) return;
  const float *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
  float *di = dinp + (size_t)row * C;
  float r = rstd[row], gx = 0.0f;
  for (int c = lane; c < C; c += 32) gx += d[c] * weight[c] * x[c] * r;
  gx = warp_sum(gx) / C;
  for (int c = lane; c < C; c += 32) di[c] += r * (d[c] * weight[c] - x[c] * r * gx);
}

/* dweight[c] += sum over rows of dout xhat (layernorm.cu's column scheme). */
__global__ void rmsnorm_backward_weight_kernel(float *dweight, const float *__restrict__ dout,
                                               const float *__restrict__ inp,
                                               const float *__restrict__ rstd, int N, int C)
{
  __shared__ float sw[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  int r0 = blockIdx.y * RMS_COL_ROWS, r1 = min(r0 + RMS_COL_ROWS, N);
  float aw = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += 8)
      aw += dout[(size_t)r * C + c] * inp[(size_t)r * C + c] * rstd[r];
  block_column_sum_atomic(&dweight[c], aw, sw, c < C);
}

/* One thread per (b, t, h, j < HD/2) pair; sign -1: the inverse rotation;
 * acc: add into out.  The arithmetic is the CPU's (kernels/rope.h). */
__global__ void rope_kernel(float *out, const float *__restrict__ inp, int B, int T, int NH,
                            int HD, float theta, float sign, int acc)
{
  int half = HD / 2;
  size_t n = (size_t)B * T * NH * half;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int j = (int)(i % half);
    size_t bth = i / half;
    int t = (int)((bth / NH) % T);
    float c, s;
    FsdpRopeCosSin(t, j, HD, theta, sign, &c, &s);
    FsdpRopeRotatePair(out, inp, bth * HD, j, half, c, s, acc);
  }
}

__global__ void swiglu_forward_kernel(float *out, const float *gate, const float *up, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *dout,
                                       const float *gate, const float *up, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float g = gate[i], s = 1.0f / (1.0f + expf(-g));
    dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
    dup[i] += dout[i] * g * s;
  }
}

/* One thread per element of qkv (B,T,3C). */
__global__ void gqa_pack_forward_kernel(float *__restrict__ qkv, const float *__restrict__ q,
                                        const float *__restrict__ k,
                                        const float *__restrict__ v, int B, int T, int NH,
                                        int KVH, int HD)
{
  size_t C = (size_t)NH * HD, KC = (size_t)KVH * HD, n = (size_t)B * T * 3 * C;
  int rep = NH / KVH;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / (3 * C), c = i % (3 * C);
    if (c < C) {
      qkv[i] = q[bt * C + c];
    } else {
      size_t cc = (c - C) % C;
      size_t src = bt * KC + (cc / HD / rep) * HD + cc % HD;
      qkv[i] = c < 2 * C ? k[src] : v[src];
    }
  }
}

/* One thread per element of q and of k/v: each sums its repeats (no
 * atomics, a fixed order). */
__global__ void gqa_pack_backward_kernel(float *dq, float *dk, float *dv,
                                         const float *__restrict__ dqkv, int B, int T, int NH,
                                         int KVH, int HD)
{
  size_t C = (size_t)NH * HD, KC = (size_t)KVH * HD, BT = (size_t)B * T;
  size_t nq = BT * C, nk = BT * KC;
  int rep = NH / KVH;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nq + nk;
       i += (size_t)gridDim.x * blockDim.x) {
    if (i < nq) {
      size_t bt = i / C, c = i % C;
      dq[i] += dqkv[bt * 3 * C + c];
    } else {
      size_t e = i - nq, bt = e / KC, kc = e % KC, g = kc / HD, d = kc % HD;
      float sk = 0.0f, sv = 0.0f;
      for (int r = 0; r < rep; r++) {
        size_t h = g * rep + r;
        sk += dqkv[bt * 3 * C + C + h * HD + d];
        sv += dqkv[bt * 3 * C + 2 * C + h * HD + d];
      }
      dk[e] += sk;
      dv[e] += sv;
    }
  }
}

/* ---- launchers ----------------------------------------------------------- */

extern "C" void rmsnorm_forward_cuda(float *out, float *rstd, const float *inp,
                                     const float *weight, int N, int C, float eps)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0);
  if (N == 0) return;
  rmsnorm_forward_kernel<<<ceil_div(N, RMS_ROWS_PER_BLOCK), 32 * RMS_ROWS_PER_BLOCK, 0,
                           cuda_state.stream>>>(out, rstd, inp, weight, N, C, eps);
  CUDA_CHECK_LAUNCH();
}

extern "C" void rmsnorm_backward_cuda(float *dinp, float *dweight, const float *dout,
                                      const float *inp, const float *weight, const float *rstd,
                                      int N, int C)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0);
  if (N == 0) return;
  rmsnorm_backward_dinp_kernel<<<ceil_div(N, RMS_ROWS_PER_BLOCK), 32 * RMS_ROWS_PER_BLOCK, 0,
                                 cuda_state.stream>>>(dinp, dout, inp, weight, rstd, N, C);
  CUDA_CHECK_LAUNCH();
  dim3 grid(ceil_div(C, 32), ceil_div(N, RMS_COL_ROWS)), block(32, 8);
  rmsnorm_backward_weight_kernel<<<grid, block, 0, cuda_state.stream>>>(dweight, dout, inp,
                                                                         rstd, N, C);
  CUDA_CHECK_LAUNCH();
}

static void rope_launch(float *out, const float *inp, int B, int T, int NH, int HD,
                        float theta, float sign, int acc)
{
  size_t n = (size_t)B * T * NH * (HD / 2);
  if (n == 0) return;
  const int block = 256;
  rope_kernel<<<grid_stride_blocks(n, block), block, 0, cuda_state.stream>>>(
      out, inp, B, T, NH, HD, theta, sign, acc);
  CUDA_CHECK_LAUNCH();
}

extern "C" void rope_forward_cuda(float *out, const float *inp, int B, int T, int NH, int HD,
                                  float theta)
{
  CUDA_LAUNCHER_BEGIN();
  rope_launch(out, inp, B, T, NH, HD, theta, 1.0f, 0);
}

extern "C" void rope_backward_cuda(float *dinp, const float *dout, int B, int T, int NH, int HD,
                                   float theta)
{
  CUDA_LAUNCHER_BEGIN();
  rope_launch(dinp, dout, B, T, NH, HD, theta, -1.0f, 1);
}

extern "C" void swiglu_forward_cuda(float *out, const float *gate, const float *up, size_t n)
{
  CUDA_LAUNCHER_BEGIN();
  if (n == 0) return;
  const int block = 256;
  swiglu_forward_kernel<<<grid_stride_blocks(n, block), block, 0, cuda_state.stream>>>(
      out, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

extern "C" void swiglu_backward_cuda(float *dgate, float *dup, const float *dout,
                                     const float *gate, const float *up, size_t n)
{
  CUDA_LAUNCHER_BEGIN();
  if (n == 0) return;
  const int block = 256;
  swiglu_backward_kernel<<<grid_stride_blocks(n, block), block, 0, cuda_state.stream>>>(
      dgate, dup, dout, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

extern "C" void gqa_pack_forward_cuda(float *qkv, const float *q, const float *k,
                                      const float *v, int B, int T, int NH, int KVH, int HD)
{
  CUDA_LAUNCHER_BEGIN();
  size_t n = (size_t)B * T * 3 * NH * HD;
  if (n == 0) return;
  const int block = 256;
  gqa_pack_forward_kernel<<<grid_stride_blocks(n, block), block, 0, cuda_state.stream>>>(
      qkv, q, k, v, B, T, NH, KVH, HD);
  CUDA_CHECK_LAUNCH();
}

extern "C" void gqa_pack_backward_cuda(float *dq, float *dk, float *dv, const float *dqkv,
                                       int B, int T, int NH, int KVH, int HD)
{
  CUDA_LAUNCHER_BEGIN();
  size_t n = (size_t)B * T * (NH + KVH) * HD;
  if (n == 0) return;
  const int block = 256;
  gqa_pack_backward_kernel<<<grid_stride_blocks(n, block), block, 0, cuda_state.stream>>>(
      dq, dk, dv, dqkv, B, T, NH, KVH, HD);
  CUDA_CHECK_LAUNCH();
}
