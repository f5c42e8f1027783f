/* attention.c: causal multi-head self-attention (CPU).
 *
 * One OpenMP task per (b, h).  A head's Q, K, V are (T, hs) matrices with
 * row stride 3C inside qkv, so its four products (Q K^T, att V and the
 * backward ones) are strided single-threaded sgemm calls made from inside
 * the task ([Note: one thread pool], matmul.c): O(T^2 hs) work at BLAS
 * speed, which matters from T of a few hundred on.  Causality is used by
 * blocks of ATT_ROWS query rows: a block only multiplies the keys up to
 * its last row, so the work above the diagonal is at most one block wide.
 * The softmax rows (forward and backward) are loops in FSDP_CPU_CLONES
 * functions [Note: ISA clones]. */
#include <math.h>

#include <cblas.h>

#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

#define ATT_ROWS 64 /* query rows per causal block */

/* Rows [t0, t1) of pre (T,T) hold raw scores; turn them into att with the
 * causal mask: att[t][t2] = softmax over t2 <= t, and 0 (in both pre and
 * att) above the diagonal. */
FSDP_CPU_CLONES
static void softmax_causal_rows(float *pre, float *att, int T, int t0, int t1)
{
  for (int t = t0; t < t1; t++) {
    float *restrict p = pre + (size_t)t * T;
    float *restrict a = att + (size_t)t * T;
    float mx = -INFINITY;
    #pragma omp simd reduction(max:mx)
    for (int t2 = 0; t2 <= t; t2++) mx = p[t2] > mx ? p[t2] : mx;
    float sum = 0.0f;
    #pragma omp simd reduction(+:sum)
    for (int t2 = 0; t2 <= t; t2++) {
      float e = expf_fast_cpu(p[t2] - mx);
      a[t2] = e;
      sum += e;
    }
    float inv = 1.0f / sum;
    #pragma omp simd
    for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
    for (int t2 = t + 1; t2 < T; t2++) {
      p[t2] = 0.0f;
      a[t2] = 0.0f;
    }
  }
}

/* out (B,T,C) = softmax(mask(Q K^T / sqrt(hs))) V per head; preatt and
 * att (B,NH,T,T) saved.  Masked entries (t2 > t) are written as 0 in both,
 * so the buffers never hold stale values. */
void attention_forward_cpu(float *out, float *preatt, float *att,
                           const float *qkv, int B, int T, int C, int NH)
{
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  #pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
      const float *k = q + C, *v = q + 2 * C;
      float *o = out + (size_t)b * T * C + (size_t)h * hs;
      size_t bh = ((size_t)b * NH + h) * T * T;
      float *pre = preatt + bh, *a = att + bh;
      for (int t0 = 0; t0 < T; t0 += ATT_ROWS) {
        int t1 = t0 + ATT_ROWS < T ? t0 + ATT_ROWS : T, rows = t1 - t0;
        /* pre[t0:t1, 0:t1] = scale Q[t0:t1] K[0:t1]^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, t1, hs,
                    scale, q + (size_t)t0 * C3, C3, k, C3, 0.0f,
                    pre + (size_t)t0 * T, T);
        softmax_causal_rows(pre, a, T, t0, t1);
        /* out[t0:t1] = att[t0:t1, 0:t1] V[0:t1] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, t1,
                    1.0f, a + (size_t)t0 * T, T, v, C3, 0.0f,
                    o + (size_t)t0 * C, C);
      }
    }
  }
}

/* Rows [t0, t1): dpre = att (datt - sum(att datt)) below the diagonal, 0
 * above it (datt too). */
FSDP_CPU_CLONES
static void softmax_causal_rows_backward(float *dpre, float *datt,
                                         const float *att, int T, int t0,
                                         int t1)
{
  for (int t = t0; t < t1; t++) {
    const float *restrict a = att + (size_t)t * T;
    float *restrict da = datt + (size_t)t * T;
    float *restrict dp = dpre + (size_t)t * T;
    float ad = 0.0f;
    #pragma omp simd reduction(+:ad)
    for (int t2 = 0; t2 <= t; t2++) ad += a[t2] * da[t2];
    #pragma omp simd
    for (int t2 = 0; t2 <= t; t2++) dp[t2] = a[t2] * (da[t2] - ad);
    for (int t2 = t + 1; t2 < T; t2++) {
      da[t2] = 0.0f;
      dp[t2] = 0.0f;
    }
  }
}

/* dqkv (B,T,3C) += gradient through attention.  datt and dpreatt
 * (B,NH,T,T) are scratch: overwritten, not accumulated (kernels.h). */
void attention_backward_cpu(float *dqkv, float *dpreatt, float *datt,
                            const float *dout, const float *qkv,
                            const float *att, int B, int T, int C, int NH)
{
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  #pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      size_t base = (size_t)b * T * C3 + (size_t)h * hs;
      size_t bh = ((size_t)b * NH + h) * T * T;
      const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
      const float *a = att + bh, *d = dout + (size_t)b * T * C + (size_t)h * hs;
      float *da = datt + bh, *dp = dpreatt + bh;
      for (int t0 = 0; t0 < T; t0 += ATT_ROWS) {
        int t1 = t0 + ATT_ROWS < T ? t0 + ATT_ROWS : T, rows = t1 - t0;
        /* datt[t0:t1, 0:t1] = dout[t0:t1] V[0:t1]^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, t1, hs,
                    1.0f, d + (size_t)t0 * C, C, v, C3, 0.0f,
                    da + (size_t)t0 * T, T);
        softmax_causal_rows_backward(dp, da, a, T, t0, t1);
        /* dQ[t0:t1] += scale dpre[t0:t1, 0:t1] K[0:t1] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, t1,
                    scale, dp + (size_t)t0 * T, T, k, C3, 1.0f,
                    dq + (size_t)t0 * C3, C3);
      }
      /* Key rows [t0, t1) get contributions from queries t >= t0 only:
       * dV[t0:t1] += att[t0:T, t0:t1]^T dout[t0:T],
       * dK[t0:t1] += scale dpre[t0:T, t0:t1]^T Q[t0:T]. */
      for (int t0 = 0; t0 < T; t0 += ATT_ROWS) {
        int t1 = t0 + ATT_ROWS < T ? t0 + ATT_ROWS : T, rows = t1 - t0;
        size_t blk = (size_t)t0 * T + t0;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, hs, T - t0,
                    1.0f, a + blk, T, d + (size_t)t0 * C, C, 1.0f,
                    dv + (size_t)t0 * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, hs, T - t0,
                    scale, dp + blk, T, q + (size_t)t0 * C3, C3, 1.0f,
                    dk + (size_t)t0 * C3, C3);
      }
    }
  }
}
