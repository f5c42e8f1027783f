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

/* ---- flash attention ------------------------------------------------------
 *
 * [Note: flash attention] The same causal attention without a T x T matrix
 * (FlashAttention-2, Dao 2023).  Forward, per (b, h) and query tile of
 * FLASH_BR rows: the key tiles of FLASH_BC columns up to the tile's last
 * row (tiles wholly above the diagonal are never visited), each one's
 * scores S = scale Q K^T into a FLASH_BR x FLASH_BC scratch on the stack,
 * then the online softmax: a row's running max m and sum l are updated,
 * its output rescaled by e^(m_old - m_new) and P V added.  At the end the
 * rows are divided by l and only the output and lse = m + log l (fp32,
 * (B,NH,T)) are kept.  Backward recomputes P = e^(S - lse) tile by tile,
 * with D = rowsum(dO * O) (the softmax backward's sum(att datt)) in a
 * (B,NH,T) scratch:
 *   dP = dO V^T, dS = P (dP - D), dV += P^T dO, dK += scale dS^T Q,
 *   dQ += scale dS K.
 * One task owns a (b, h), so dQ, dK, dV accumulate straight into dqkv.
 * The products are single-threaded sgemm calls as above; the tiles are
 * wide enough (FLASH_BC) for BLAS speed. */
#define FLASH_BR 64  /* query rows per tile */
#define FLASH_BC 256 /* key columns per tile */

/* One key tile [k0, k0 + n) for query rows [t0, t0 + rows): s holds the
 * scaled scores (row stride FLASH_BC); turn it into P of the online
 * softmax, rescale the rows of o (row stride ldo) and update m, l. */
FSDP_CPU_CLONES
static void flash_tile_softmax(float *s, float *o, int ldo, int hs, float *m, float *l,
                               int t0, int rows, int k0, int n)
{
  for (int r = 0; r < rows; r++) {
    float *restrict p = s + (size_t)r * FLASH_BC;
    int t = t0 + r, nv = t + 1 - k0 < n ? t + 1 - k0 : n; /* keys k0 .. min(t, k0+n-1) */
    if (nv <= 0) { /* row wholly masked in this tile */
      for (int j = 0; j < n; j++) p[j] = 0.0f;
      continue;
    }
    float mx = m[r];
    #pragma omp simd reduction(max:mx)
    for (int j = 0; j < nv; j++) mx = p[j] > mx ? p[j] : mx;
    float sum = 0.0f;
    #pragma omp simd reduction(+:sum)
    for (int j = 0; j < nv; j++) {
      float e = expf_fast_cpu(p[j] - mx);
      p[j] = e;
      sum += e;
    }
    for (int j = nv; j < n; j++) p[j] = 0.0f;
    float corr = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
    l[r] = l[r] * corr + sum;
    m[r] = mx;
    float *restrict orow = o + (size_t)r * ldo;
    #pragma omp simd
    for (int d = 0; d < hs; d++) orow[d] *= corr;
  }
}

void flash_attention_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C,
                                 int NH)
{
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  #pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float s[FLASH_BR * FLASH_BC], m[FLASH_BR], l[FLASH_BR];
      const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
      const float *k = q + C, *v = q + 2 * C;
      float *o = out + (size_t)b * T * C + (size_t)h * hs;
      float *ls = lse + ((size_t)b * NH + h) * T;
      for (int t0 = 0; t0 < T; t0 += FLASH_BR) {
        int rows = T - t0 < FLASH_BR ? T - t0 : FLASH_BR, t1 = t0 + rows;
        float *ot = o + (size_t)t0 * C;
        for (int r = 0; r < rows; r++) {
          m[r] = -INFINITY;
          l[r] = 0.0f;
          memset(ot + (size_t)r * C, 0, (size_t)hs * sizeof(float));
        }
        /* causal: key tiles starting at or below the tile's last row */
        for (int k0 = 0; k0 < t1; k0 += FLASH_BC) {
          int n = t1 - k0 < FLASH_BC ? t1 - k0 : FLASH_BC;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, hs, scale,
                      q + (size_t)t0 * C3, C3, k + (size_t)k0 * C3, C3, 0.0f, s, FLASH_BC);
          flash_tile_softmax(s, ot, C, hs, m, l, t0, rows, k0, n);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, n, 1.0f, s,
                      FLASH_BC, v + (size_t)k0 * C3, C3, 1.0f, ot, C);
        }
        for (int r = 0; r < rows; r++) {
          float inv = 1.0f / l[r], *orow = ot + (size_t)r * C;
          for (int d = 0; d < hs; d++) orow[d] *= inv;
          ls[t0 + r] = m[r] + logf(l[r]);
        }
      }
    }
  }
}

/* One tile: s holds scale Q K^T, dp holds dO V^T; make s = P (masked 0)
 * and dp = dS = P (dP - D). */
FSDP_CPU_CLONES
static void flash_tile_backward(float *s, float *dp, const float *lse, const float *D, int t0,
                                int rows, int k0, int n)
{
  for (int r = 0; r < rows; r++) {
    float *restrict p = s + (size_t)r * FLASH_BC, *restrict g = dp + (size_t)r * FLASH_BC;
    int t = t0 + r, nv = t + 1 - k0 < n ? t + 1 - k0 : n;
    if (nv < 0) nv = 0;
    float ls = lse[t], dd = D[t];
    #pragma omp simd
    for (int j = 0; j < nv; j++) {
      float e = expf_fast_cpu(p[j] - ls);
      p[j] = e;
      g[j] = e * (g[j] - dd);
    }
    for (int j = nv; j < n; j++) {
      p[j] = 0.0f;
      g[j] = 0.0f;
    }
  }
}

void flash_attention_backward_cpu(float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *out, const float *lse, int B,
                                  int T, int C, int NH)
{
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  #pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float s[FLASH_BR * FLASH_BC], dp[FLASH_BR * FLASH_BC];
      size_t base = (size_t)b * T * C3 + (size_t)h * hs, bh = ((size_t)b * NH + h) * T;
      const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
      const float *d = dout + (size_t)b * T * C + (size_t)h * hs;
      const float *o = out + (size_t)b * T * C + (size_t)h * hs;
      const float *ls = lse + bh;
      float *D = scratch + bh;
      for (int t = 0; t < T; t++) {
        const float *dr = d + (size_t)t * C, *orow = o + (size_t)t * C;
        float acc = 0.0f;
        for (int i = 0; i < hs; i++) acc += dr[i] * orow[i];
        D[t] = acc;
      }
      for (int t0 = 0; t0 < T; t0 += FLASH_BR) {
        int rows = T - t0 < FLASH_BR ? T - t0 : FLASH_BR, t1 = t0 + rows;
        for (int k0 = 0; k0 < t1; k0 += FLASH_BC) {
          int n = t1 - k0 < FLASH_BC ? t1 - k0 : FLASH_BC;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, hs, scale,
                      q + (size_t)t0 * C3, C3, k + (size_t)k0 * C3, C3, 0.0f, s, FLASH_BC);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, hs, 1.0f,
                      d + (size_t)t0 * C, C, v + (size_t)k0 * C3, C3, 0.0f, dp, FLASH_BC);
          flash_tile_backward(s, dp, ls, D, t0, rows, k0, n);
          /* dV[k0:k0+n] += P^T dO[t0:t1] */
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rows, 1.0f, s, FLASH_BC,
                      d + (size_t)t0 * C, C, 1.0f, dv + (size_t)k0 * C3, C3);
          /* dK[k0:k0+n] += scale dS^T Q[t0:t1] */
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rows, scale, dp, FLASH_BC,
                      q + (size_t)t0 * C3, C3, 1.0f, dk + (size_t)k0 * C3, C3);
          /* dQ[t0:t1] += scale dS K[k0:k0+n] */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, n, scale, dp,
                      FLASH_BC, k + (size_t)k0 * C3, C3, 1.0f, dq + (size_t)t0 * C3, C3);
        }
      }
    }
  }
}
