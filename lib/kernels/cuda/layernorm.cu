/* layernorm.cu: layer normalization over the last dimension (CUDA).
 * Forward and the dinp part of backward use one warp per row (llm.c's
 * layernorm_forward_kernel3 shape); dweight/dbias are column sums over rows
 * done by a separate column-block kernel. */
#include "common.cuh"

#define LAYERNORM_EPS 1e-5f
#define LN_ROWS_PER_BLOCK 8   /* warps per block in the row kernels */
#define LN_COL_ROWS 256       /* rows per block in the column kernel */

/* ---- kernels ------------------------------------------------------------- */

/* The rest of a row once each lane of its warp holds s, its partial sum of
 * the row x: the mean, the two-pass variance, o = the normalized row
 * scaled and shifted, and lane 0 stores mean and rstd. */
__device__ __forceinline__ void layernorm_row_finish(const float *x, float *o, float s,
                                                     const float *__restrict__ weight,
                                                     const float *__restrict__ bias, int C,
                                                     int lane, float *mean, float *rstd)
{
  float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = x[c] - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(warp_sum(v) / C + LAYERNORM_EPS);
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * weight[c] + bias[c];
  if (lane == 0) {
    *mean = m;
    *rstd = r;
  }
}

/* One warp per row.  Two passes (mean, then the centred variance), like the
 * CPU kernel: E[x^2] - E[x]^2 cancels badly when |mean| >> std. */
__global__ void layernorm_forward_kernel(float *__restrict__ out, float *__restrict__ mean,
                                         float *__restrict__ rstd,
                                         const float *__restrict__ inp,
                                         const float *__restrict__ weight,
                                         const float *__restrict__ bias, int N, int C)
{
  int lane = threadIdx.x % 32;
  int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= N) return;
  const float *x = inp + (size_t)row * C;
  float *o = out + (size_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += x[c];
  layernorm_row_finish(x, o, s, weight, bias, C, lane, &mean[row], &rstd[row]);
}

/* [Note: fused residual and LayerNorm] (kernels.h): one warp per row as
 * layernorm_forward_kernel; each lane writes and later re-reads only its
 * own columns of res, so res may alias inp1 or inp2 (no __restrict__). */
__global__ void residual_layernorm_forward_kernel(float *res, float *__restrict__ out,
                                                  float *__restrict__ mean,
                                                  float *__restrict__ rstd, const float *inp1,
                                                  const float *inp2,
                                                  const float *__restrict__ weight,
                                                  const float *__restrict__ bias, int N, int C)
{
  int lane = threadIdx.x % 32;
  int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= N) return;
  size_t base = (size_t)row * C;
  float *x = res + base, *o = out + base;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float r = inp1[base + c] + inp2[base + c];
    x[c] = r;
    s += r;
  }
  layernorm_row_finish(x, o, s, weight, bias, C, lane, &mean[row], &rstd[row]);
}

/* One warp per row: dinp += rstd (g - mean(g) - xhat mean(g xhat)),
 * g = dout * weight. */
__global__ void layernorm_backward_dinp_kernel(float *__restrict__ dinp,
                                               const float *__restrict__ dout,
                                               const float *__restrict__ inp,
                                               const float *__restrict__ weight,
                                               const float *__restrict__ mean,
                                               const float *__restrict__ rstd, int N, int C)
{
  int lane = threadIdx.x % 32;
  int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= N) return;
  const float *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
  float *di = dinp + (size_t)row * C;
  float m = mean[row], r = rstd[row];
  float gm = 0.0f, gxm = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float g = d[c] * weight[c];
    gm += g;
    gxm += g * (x[c] - m) * r;
  }
  gm = warp_sum(gm) / C;
  gxm = warp_sum(gxm) / C;
  for (int c = lane; c < C; c += 32) {
    float xhat = (x[c] - m) * r;
    di[c] += r * (d[c] * weight[c] - gm - xhat * gxm);
  }
}

/* Block (32, 8): 32 columns, LN_COL_ROWS rows; each thread sums its column
 * over every 8th row of the block's rows, the 8 partial sums are added in
 * shared memory, and one atomicAdd per column lands the block's sum:
 * dweight[c] += sum dout xhat, dbias[c] += sum dout. */
__global__ void layernorm_backward_params_kernel(float *dweight, float *dbias,
                                                 const float *__restrict__ dout,
                                                 const float *__restrict__ inp,
                                                 const float *__restrict__ mean,
                                                 const float *__restrict__ rstd, int N, int C)
{
  __shared__ float sw[8][33], sb[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  int r0 = blockIdx.y * LN_COL_ROWS, r1 = min(r0 + LN_COL_ROWS, N);
  float aw = 0.0f, ab = 0.0f;
  if (c < C) {
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      float d = dout[(size_t)r * C + c];
      aw += d * (inp[(size_t)r * C + c] - mean[r]) * rstd[r];
      ab += d;
    }
  }
  block_column_sum_atomic(&dweight[c], aw, sw, c < C);
  block_column_sum_atomic(&dbias[c], ab, sb, c < C);
}

/* ---- launchers ----------------------------------------------------------- */

extern "C" void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                                       const float *weight, const float *bias, int N, int C)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0);
  if (N == 0) return;
  layernorm_forward_kernel<<<ceil_div(N, LN_ROWS_PER_BLOCK), 32 * LN_ROWS_PER_BLOCK, 0,
                             cuda_state.stream>>>(out, mean, rstd, inp, weight, bias, N, C);
  CUDA_CHECK_LAUNCH();
}

extern "C" void residual_layernorm_forward_cuda(float *res, float *out, float *mean, float *rstd,
                                                const float *inp1, const float *inp2,
                                                const float *weight, const float *bias, int N,
                                                int C)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0);
  if (N == 0) return;
  residual_layernorm_forward_kernel<<<ceil_div(N, LN_ROWS_PER_BLOCK), 32 * LN_ROWS_PER_BLOCK, 0,
                                      cuda_state.stream>>>(res, out, mean, rstd, inp1, inp2,
                                                           weight, bias, N, C);
  CUDA_CHECK_LAUNCH();
}

extern "C" void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp,
                                        const float *weight, const float *mean,
                                        const float *rstd, int N, int C)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0);
  if (N == 0) return;
  layernorm_backward_dinp_kernel<<<ceil_div(N, LN_ROWS_PER_BLOCK), 32 * LN_ROWS_PER_BLOCK, 0,
                                   cuda_state.stream>>>(dinp, dout, inp, weight, mean, rstd,
                                                        N, C);
  CUDA_CHECK_LAUNCH();
  dim3 grid(ceil_div(C, 32), ceil_div(N, LN_COL_ROWS)), block(32, 8);
  layernorm_backward_params_kernel<<<grid, block, 0, cuda_state.stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
}
