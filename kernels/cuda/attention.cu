/* attention.cu: causal multi-head self-attention (CUDA), the
 * straightforward kernel set of llm.c's attention_forward/backward: the
 * four products are strided-batched SGEMMs over the heads of one sequence
 * and the softmax runs one warp per row.  qkv (B,T,3C) is read in place:
 * head h of Q, K, V is a (T, hs) matrix at column offset h*hs (+C, +2C)
 * with row stride 3C, so consecutive heads are hs elements apart and one
 * cublasSgemmStridedBatched call covers the NH heads of one batch row (no
 * permuted copies, no scratch).  Column-major views of the row-major
 * buffers (see matmul.cu):
 *   pre^T (T,T)      = K^T-view x Q          gemm(T, N), alpha = scale
 *   out_h^T (hs,T)   = V x att^T-view        gemm(N, N)
 *   datt^T (T,T)     = V^T-view x dout_h     gemm(T, N)
 *   dQ^T (hs,T)     += scale K x dpre^T-view gemm(N, N)
 *   dK^T (hs,T)     += scale Q x dpre-view   gemm(N, T)
 *   dV^T (hs,T)     += dout_h x att-view     gemm(N, T)
 * The full T x T scores are computed and the masked half zeroed by the
 * softmax kernels (as the CPU kernel leaves it: 0 above the diagonal in
 * preatt, att, datt and dpreatt); a fused flash-style kernel is the
 * performance step. */
#include "common.cuh"

#define SOFTMAX_ROWS_PER_BLOCK 8 /* warps per block */

/* ---- kernels ------------------------------------------------------------- */

/* Row t of one (b,h) matrix, one warp: att[t2] = softmax over t2 <= t of
 * pre[t2]; pre and att are 0 for t2 > t. */
__global__ void softmax_causal_forward_kernel(float *pre, float *att, int T, size_t rows)
{
  int lane = threadIdx.x % 32;
  size_t row = (size_t)blockIdx.x * SOFTMAX_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= rows) return;
  int t = (int)(row % T);
  float *p = pre + row * T, *a = att + row * T;
  float mx = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += 32) mx = fmaxf(mx, p[t2]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    float e = expf(p[t2] - mx);
    a[t2] = e;
    sum += e;
  }
  float inv = 1.0f / warp_sum(sum);
  for (int t2 = lane; t2 <= t; t2 += 32) a[t2] *= inv;
  for (int t2 = t + 1 + lane; t2 < T; t2 += 32) {
    p[t2] = 0.0f;
    a[t2] = 0.0f;
  }
}

/* Row t, one warp: dpre[t2] = att (datt - sum(att datt)) for t2 <= t; datt
 * and dpre are 0 above the diagonal. */
__global__ void softmax_causal_backward_kernel(float *dpre, float *datt, const float *att, int T,
                                               size_t rows)
{
  int lane = threadIdx.x % 32;
  size_t row = (size_t)blockIdx.x * SOFTMAX_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= rows) return;
  int t = (int)(row % T);
  const float *a = att + row * T;
  float *da = datt + row * T, *dp = dpre + row * T;
  float ad = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) ad += a[t2] * da[t2];
  ad = warp_sum(ad);
  for (int t2 = lane; t2 <= t; t2 += 32) dp[t2] = a[t2] * (da[t2] - ad);
  for (int t2 = t + 1 + lane; t2 < T; t2 += 32) {
    da[t2] = 0.0f;
    dp[t2] = 0.0f;
  }
}

/* ---- launchers ----------------------------------------------------------- */

/* Column-major gemm over the NH heads of one batch row: matrix i of each
 * operand starts i*stride elements after the first. */
#define SGEMM_HEADS(opa, opb, m, n, k, alpha, A, lda, sA, Bm, ldb, sB, beta, Cm, ldc, sC)      \
  do {                                                                                       \
    float alpha_ = (alpha), beta_ = (beta);                                                  \
    CUBLAS_CHECK(cublasSgemmStridedBatched(cuda_state.blas, opa, opb, m, n, k, &alpha_, A,   \
                                           lda, sA, Bm, ldb, sB, &beta_, Cm, ldc, sC, NH));  \
  } while (0)

extern "C" void attention_forward_cuda(float *out, float *preatt, float *att, const float *qkv,
                                       int B, int T, int C, int NH)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(B >= 0 && T > 0 && NH > 0 && C % NH == 0);
  if (B == 0) return;
  const int C3 = 3 * C, hs = C / NH;
  const long long TT = (long long)T * T;
  const float scale = 1.0f / sqrtf((float)hs);
  const cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * C3, *k = q + C;
    float *pre = preatt + (size_t)b * NH * TT;
    SGEMM_HEADS(T_, N_, T, T, hs, scale, k, C3, hs, q, C3, hs, 0.0f, pre, T, TT);
  }
  size_t rows = (size_t)B * NH * T;
  softmax_causal_forward_kernel<<<(unsigned)((rows + SOFTMAX_ROWS_PER_BLOCK - 1) /
                                             SOFTMAX_ROWS_PER_BLOCK),
                                  32 * SOFTMAX_ROWS_PER_BLOCK, 0, cuda_state.stream>>>(
      preatt, att, T, rows);
  CUDA_CHECK_LAUNCH();
  for (int b = 0; b < B; b++) {
    const float *v = qkv + (size_t)b * T * C3 + 2 * C;
    const float *a = att + (size_t)b * NH * TT;
    float *o = out + (size_t)b * T * C;
    SGEMM_HEADS(N_, N_, hs, T, T, 1.0f, v, C3, hs, a, T, TT, 0.0f, o, C, hs);
  }
}

extern "C" void attention_backward_cuda(float *dqkv, float *dpreatt, float *datt,
                                        const float *dout, const float *qkv, const float *att,
                                        int B, int T, int C, int NH)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(B >= 0 && T > 0 && NH > 0 && C % NH == 0);
  if (B == 0) return;
  const int C3 = 3 * C, hs = C / NH;
  const long long TT = (long long)T * T;
  const float scale = 1.0f / sqrtf((float)hs);
  const cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;
  for (int b = 0; b < B; b++) {
    const float *v = qkv + (size_t)b * T * C3 + 2 * C;
    const float *d = dout + (size_t)b * T * C;
    float *da = datt + (size_t)b * NH * TT;
    SGEMM_HEADS(T_, N_, T, T, hs, 1.0f, v, C3, hs, d, C, hs, 0.0f, da, T, TT);
  }
  size_t rows = (size_t)B * NH * T;
  softmax_causal_backward_kernel<<<(unsigned)((rows + SOFTMAX_ROWS_PER_BLOCK - 1) /
                                              SOFTMAX_ROWS_PER_BLOCK),
                                   32 * SOFTMAX_ROWS_PER_BLOCK, 0, cuda_state.stream>>>(
      dpreatt, datt, att, T, rows);
  CUDA_CHECK_LAUNCH();
  for (int b = 0; b < B; b++) {
    size_t base = (size_t)b * T * C3;
    const float *q = qkv + base, *k = q + C;
    float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
    const float *d = dout + (size_t)b * T * C;
    const float *a = att + (size_t)b * NH * TT, *dp = dpreatt + (size_t)b * NH * TT;
    SGEMM_HEADS(N_, N_, hs, T, T, scale, k, C3, hs, dp, T, TT, 1.0f, dq, C3, hs);
    SGEMM_HEADS(N_, T_, hs, T, T, scale, q, C3, hs, dp, T, TT, 1.0f, dk, C3, hs);
    SGEMM_HEADS(N_, T_, hs, T, T, 1.0f, d, C, hs, a, T, TT, 1.0f, dv, C3, hs);
  }
}
