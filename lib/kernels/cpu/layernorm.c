/* layernorm.c: layer normalization over the last dimension (CPU).  Row
 * bodies are FSDP_CPU_CLONES functions [Note: ISA clones]. */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

#define LAYERNORM_EPS 1e-5f

/* One row; returns mean and rstd through m, r.  Two passes (mean, then the
 * centred variance) rather than E[x^2] - E[x]^2, which cancels badly when
 * |mean| >> std; the row is in cache for the second pass. */
FSDP_CPU_CLONES
static void layernorm_row_forward(float *restrict o, float *m_out,
                                  float *r_out, const float *restrict x,
                                  const float *restrict w,
                                  const float *restrict bb, int C)
{
  float s = 0.0f;
  #pragma omp simd reduction(+:s)
  for (int c = 0; c < C; c++) s += x[c];
  float m = s / C;
  float v = 0.0f;
  #pragma omp simd reduction(+:v)
  for (int c = 0; c < C; c++) {
    float d = x[c] - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(v / C + LAYERNORM_EPS);
  #pragma omp simd
  for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + bb[c];
  *m_out = m;
  *r_out = r;
}

/* out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) saved. */
void layernorm_forward_cpu(float *out, float *mean, float *rstd,
                           const float *inp, const float *weight,
                           const float *bias, int N, int C)
{
  #pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    layernorm_row_forward(out + (size_t)n * C, &mean[n], &rstd[n],
                          inp + (size_t)n * C, weight, bias, C);
}

/* [Note: fused residual and LayerNorm] (kernels.h): per row, the sum
 * then the row's LayerNorm while the row is in cache; the same arithmetic
 * as residual_forward_cpu and layernorm_forward_cpu. */
void residual_layernorm_forward_cpu(float *res, float *out, float *mean, float *rstd,
                                    const float *inp1, const float *inp2, const float *weight,
                                    const float *bias, int N, int C)
{
  #pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    size_t o = (size_t)n * C;
    for (int c = 0; c < C; c++) res[o + c] = inp1[o + c] + inp2[o + c];
    layernorm_row_forward(out + o, &mean[n], &rstd[n], res + o, weight, bias, C);
  }
}

/* One row of dinp += rstd (g - mean(g) - xhat mean(g xhat)), g = dout w. */
FSDP_CPU_CLONES
static void layernorm_row_backward(float *restrict di,
                                   const float *restrict d,
                                   const float *restrict x,
                                   const float *restrict w, float m, float r,
                                   int C)
{
  float gm = 0.0f, gxm = 0.0f;
  #pragma omp simd reduction(+:gm, gxm)
  for (int c = 0; c < C; c++) {
    float g = d[c] * w[c];
    gm += g;
    gxm += g * (x[c] - m) * r;
  }
  gm /= C;
  gxm /= C;
  #pragma omp simd
  for (int c = 0; c < C; c++) {
    float xhat = (x[c] - m) * r;
    di[c] += r * (d[c] * w[c] - gm - xhat * gxm);
  }
}

/* Columns [c0, c1) of dweight += sum over rows of dout xhat and
 * dbias += sum over rows of dout, rows in order. */
FSDP_CPU_CLONES
static void layernorm_cols_backward(float *restrict dw, float *restrict db,
                                    const float *dout, const float *inp,
                                    const float *mean, const float *rstd,
                                    int N, int C, int c0, int c1)
{
  for (int n = 0; n < N; n++) {
    const float *restrict x = inp + (size_t)n * C;
    const float *restrict d = dout + (size_t)n * C;
    float m = mean[n], r = rstd[n];
    #pragma omp simd
    for (int c = c0; c < c1; c++) {
      dw[c] += d[c] * (x[c] - m) * r;
      db[c] += d[c];
    }
  }
}

/* dinp (N,C) += layernorm backward; dweight (C) += sum over rows of
 * dout * xhat; dbias (C) += sum over rows of dout.  dinp is split by rows,
 * dweight/dbias by column blocks [Note: deterministic CPU kernels]. */
void layernorm_backward_cpu(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp,
                            const float *weight, const float *mean,
                            const float *rstd, int N, int C)
{
  int nblk = (C + FSDP_CPU_COLBLOCK - 1) / FSDP_CPU_COLBLOCK;
  #pragma omp parallel
  {
    #pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++)
      layernorm_row_backward(dinp + (size_t)n * C, dout + (size_t)n * C,
                             inp + (size_t)n * C, weight, mean[n], rstd[n],
                             C);
    #pragma omp for schedule(static)
    for (int k = 0; k < nblk; k++) {
      int c0 = k * FSDP_CPU_COLBLOCK;
      int c1 = c0 + FSDP_CPU_COLBLOCK < C ? c0 + FSDP_CPU_COLBLOCK : C;
      layernorm_cols_backward(dweight, dbias, dout, inp, mean, rstd, N, C, c0,
                              c1);
    }
  }
}
